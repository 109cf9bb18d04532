"""``cronfleet.toml``: the ``[scheduler]`` table and the ``[[tasks]]``, validated up front.

:func:`load_config` reads and validates the file -- keys, types, cron syntax, time zones,
durations, handler import paths, duplicate ids -- and raises one :class:`ConfigError`
listing *every* problem, each naming the file, line, column, task id and key.
:meth:`Config.load` then imports the plugins, hands the tasks to the provider, validates
every schedule and resolves schedule-id conflicts by priority; :meth:`Loaded.scheduler`
builds the :class:`~cronfleet.Scheduler`. Nothing fires before all of that succeeded.

Positions: :mod:`tomllib` (the stdlib parser) returns plain dicts without line numbers,
and no position-aware TOML parser is a dependency, so :class:`_Locator` scans the text
once for table headers and ``key =`` lines (skipping multi-line strings and arrays). It
only has to find where a key *is*, not to parse values -- tomllib has already parsed and
checked the document. When a key cannot be located (an inline table, a dotted key), the
message falls back to the line of the table's header.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronfleet import plugins as _plugins
from cronfleet.cron import CronSyntaxError, parse
from cronfleet.errors import CronfleetError, StoreError
from cronfleet.model import DEFAULT_CATCH_UP_WINDOW, Job
from cronfleet.plugins import (
    BUILTIN_PROVIDER,
    CronProvider,
    EntryPointSpec,
    Schedule,
    ScheduleError,
    Task,
    check_handler,
    check_name,
    describe_value,
    duration_seconds,
    exception_text,
    import_object,
    schedule_to_job,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.scheduler import Scheduler

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG",
    "SCHEDULER_ENV",
    "STORE_ENV",
    "Config",
    "ConfigError",
    "Loaded",
    "LoadedPlugin",
    "Problem",
    "load_config",
    "timers_from_env",
]

log = logging.getLogger("cronfleet.config")

CONFIG_ENV = "CRONFLEET_CONFIG"
STORE_ENV = "CRONFLEET_STORE"
SCHEDULER_ENV = "CRONFLEET_SCHEDULER"
DEFAULT_CONFIG = "cronfleet.toml"
DEFAULT_STORE = "sqlite:///cronfleet.db"

SCHEDULER_KEYS = (
    "store", "timezone", "catch_up_window", "provider", "plugins", "entry_points",
    "shutdown_grace", "run_retention", "runs_per_job", "allow_private_targets",
)
API_KEYS = ("enabled", "host", "port", "metrics", "ready_max_overdue")
TASK_KEYS = (
    "id", "cron", "handler", "description", "timezone", "jitter", "missed",
    "catch_up_window", "locking", "overlap", "timeout", "enabled", "recover", "config_json",
    "http", "retry", "allow_private_targets", "notify", "auto_pause_after", "team",
)
# keys of a task's http = {...} and retry = {...} tables
HTTP_KEYS = (
    "method", "url", "headers", "body", "timeout", "follow_redirects", "accept_status",
    "body_contains", "body_not_contains", "body_regex", "body_not_regex", "signing_secret",
    "namespace",
)
RETRY_KEYS = ("attempts", "backoff", "delay")
NOTIFY_KEYS = ("on", "after_failures", "webhook", "slack", "email")
EMAIL_KEYS = ("host", "port", "from", "to", "starttls", "ssl", "username", "password",
              "timeout")
# keys of TASK_KEYS that are not Schedule fields
_HTTP_ONLY = ("retry", "allow_private_targets", "notify", "auto_pause_after")
_NOT_SCHEDULE = ("handler", "http", *_HTTP_ONLY)
# names people reach for that difflib would not connect to ours
_HINTS = {
    "schedule": "cron", "expr": "cron", "expression": "cron", "every": "cron",
    "interval": "cron", "tz": "timezone", "zone": "timezone", "name": "id",
    "func": "handler", "function": "handler", "callable": "handler", "target": "handler",
    "config": "config_json", "args": "config_json", "params": "config_json",
    "disabled": "enabled", "misfire": "missed", "misfire_grace_time": "catch_up_window",
    "max_instances": "overlap", "database": "store", "db": "store", "url": "store",
    "task": "tasks", "jobs": "tasks", "job": "tasks",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# -- problems -------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration or a plugin.

    ``str(problem)`` is ``file:line:column: message``; the message names the task (or
    plugin and schedule) and the key. ``source`` is the offending line, for a caret.
    """

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    task: str | None = None
    key: str | None = None
    plugin: str | None = None
    schedule: str | None = None
    source: str | None = None

    @property
    def location(self) -> str:
        if self.file is None:
            return ""
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        return out

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message

    def excerpt(self) -> str | None:
        """The offending line with a caret under the column, compiler style."""
        if self.source is None or self.line is None:
            return None
        gutter = f"{self.line:>5} | "
        out = gutter + self.source.replace("\t", " ")
        if self.column is not None:
            out += "\n" + " " * (len(gutter) - 2) + "| " + " " * (self.column - 1) + "^"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": str(self),
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "task": self.task,
            "plugin": self.plugin,
            "schedule": self.schedule,
            "key": self.key,
        }


class ConfigError(CronfleetError, ValueError):
    """The configuration (or a plugin it loads) is invalid; ``problems`` lists every
    problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# -- locating keys in the text --------------------------------------------------------

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r"\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_KEY_PART = rf"(?:{_BARE}|{_QUOTED})"
_KEY_LINE = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=\s*")
_HEADER = re.compile(rf"^\s*(\[\[|\[)\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]\]?\s*(?:#.*)?$")


def _key_name(raw: str) -> str:
    parts = re.findall(_KEY_PART, raw)
    return ".".join(p[1:-1] if p[:1] in "\"'" else p for p in parts)


class _Locator:
    """Where tables and keys are: ``(table, index) -> header line`` and
    ``(table, index, key) -> (line, value column)``; index is the position of an
    array-of-tables entry (``[[tasks]]``), -1 for a plain table, and ``("", -1)`` is the
    root table. Lines and columns are 1-based."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.tables: dict[tuple[str, int], int] = {}
        self.keys: dict[tuple[str, int, str], tuple[int, int]] = {}
        counts: dict[str, int] = {}
        current = ("", -1)
        closing: str | None = None  # inside a multi-line string: its delimiter
        depth = 0  # inside a multi-line array or inline table
        for n, line in enumerate(self.lines, 1):
            if closing is not None:
                if closing in line:
                    closing = None
                continue
            if depth > 0:
                depth = max(depth + _bracket_balance(line), 0)
                continue
            header = _HEADER.match(line)
            if header:
                name = _key_name(header.group(2))
                if header.group(1) == "[[":
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                    current = (name, index)
                else:
                    current = (name, -1)
                self.tables.setdefault(current, n)
                continue
            m = _KEY_LINE.match(line)
            if not m:
                continue
            self.keys.setdefault((*current, _key_name(m.group(1))), (n, m.end() + 1))
            rest = line[m.end():]
            for delim in ('"""', "'''"):
                if rest.startswith(delim) and rest.count(delim) == 1:
                    closing = delim
            if closing is None and rest[:1] in "[{":
                depth = max(_bracket_balance(rest), 0)

    def table(self, table: str, index: int = -1) -> int | None:
        return self.tables.get((table, index))

    def key(self, table: str, index: int, key: str) -> tuple[int, int] | None:
        return self.keys.get((table, index, key))

    def find(self, text: str, start: int) -> tuple[int, int] | None:
        """The first occurrence of ``text`` at or after line ``start``."""
        for n in range(start, len(self.lines) + 1):
            col = self.lines[n - 1].find(text)
            if col >= 0:
                return n, col + 1
        return None

    def source(self, line: int | None) -> str | None:
        if line is None or not 1 <= line <= len(self.lines):
            return None
        return self.lines[line - 1]


def _bracket_balance(text: str) -> int:
    """Opening minus closing brackets outside quotes (comments ignored)."""
    balance = 0
    quote: str | None = None
    escaped = False
    for ch in text:
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        elif ch in "[{":
            balance += 1
        elif ch in "]}":
            balance -= 1
    return balance


def _did_you_mean(name: str, allowed: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    if not close and _HINTS.get(name.lower()) in allowed:
        close = [_HINTS[name.lower()]]
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- the validated configuration ------------------------------------------------------


@dataclass(frozen=True)
class PluginRef:
    """A plugin listed in ``[scheduler] plugins``: its import path and where it is listed."""

    path: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    source: str | None = None

    @property
    def origin(self) -> str:
        where = f" listed in {self.file}:{self.line}" if self.file and self.line else ""
        return f"{self.path}{where}"


@dataclass
class Config:
    """A validated ``cronfleet.toml`` (or the defaults when there is no file)."""

    path: Path | None = None
    display: str = "(no config file)"
    store: str = DEFAULT_STORE
    store_origin: str = "default"
    timezone: str = "UTC"
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW
    provider: str = BUILTIN_PROVIDER
    provider_at: tuple[int, int] | None = None
    plugins: list[PluginRef] = field(default_factory=list)
    entry_points: bool = True
    shutdown_grace: float = 30.0
    run_retention: float = 30 * 86400.0
    runs_per_job: int = 1000
    allow_private_targets: bool = False
    api_enabled: bool = True
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    api_metrics: str = "public"
    api_ready_max_overdue: float = 30.0
    tasks: list[Task] = field(default_factory=list)
    source_lines: list[str] = field(default_factory=list, repr=False)
    _http_runtime: Any = field(default=None, repr=False)

    def http_runtime(self) -> Any:
        """The :class:`~cronfleet.jobs.http.HttpRuntime` shared by this file's HTTP tasks:
        one pooled client, the vault of the configured store, the SSRF default."""
        if self._http_runtime is None:
            from cronfleet.jobs.http import HttpRuntime

            self._http_runtime = HttpRuntime(
                store=self.store, allow_private_targets=self.allow_private_targets
            )
        return self._http_runtime

    def load(
        self, *, strict: bool = True, entry_points: Sequence[EntryPointSpec] | None = None
    ) -> Loaded:
        """Import the plugins, give the tasks to the provider and build every job.

        ``strict`` (``cronfleet run``, ``check``): any problem raises :class:`ConfigError`.
        Otherwise a plugin that fails is left out and its problems are in
        ``Loaded.problems`` (operator commands keep working with what did load).
        ``entry_points``: the advertised plugins (default: discovered from the installed
        distributions when ``[scheduler] entry_points`` is true).
        """
        loaded = _Assembler(self, entry_points).run()
        if strict and loaded.problems:
            loaded.cleanup()
            raise ConfigError(loaded.problems)
        return loaded


@dataclass
class LoadedPlugin:
    """A plugin that loaded: what it is, where it came from, which jobs it runs."""

    name: str
    priority: int
    origin: str
    plugin: Any
    provider: bool = False
    jobs: list[str] = field(default_factory=list)


@dataclass
class Loaded:
    """Every declared job, ready to run; a context manager that calls each plugin's
    ``cleanup()`` on exit."""

    config: Config
    jobs: list[Job] = field(default_factory=list)
    plugins: list[LoadedPlugin] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    _cleaned: bool = field(default=False, repr=False)

    def job_ids(self) -> list[str]:
        return [j.id for j in self.jobs]

    def scheduler(
        self,
        *,
        timers: bool | None = None,
        clock: Clock | None = None,
        instance_id: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Scheduler:
        """A :class:`~cronfleet.Scheduler` on the configured store with every job added.
        ``timers=None`` reads ``CRONFLEET_SCHEDULER`` (``0`` = no timers, default on)."""
        from cronfleet.scheduler import Scheduler

        if timers is None:
            from_env = timers_from_env(env)
            timers = True if from_env is None else from_env
        c = self.config
        s = Scheduler(
            c.store,
            timezone=c.timezone,
            catch_up_window=c.catch_up_window,
            shutdown_grace=c.shutdown_grace,
            run_retention=c.run_retention,
            runs_per_job=c.runs_per_job,
            timers=timers,
            clock=clock,
            instance_id=instance_id,
        )
        for job in self.jobs:
            s.add_job(job)
        return s

    def cleanup(self) -> None:
        """Call every plugin's ``cleanup()`` once (errors are logged, not raised)."""
        if self._cleaned:
            return
        self._cleaned = True
        for p in self.plugins:
            fn = getattr(p.plugin, "cleanup", None)
            if not callable(fn):
                continue
            try:
                fn()
            except Exception:
                log.exception("plugin %r: cleanup() failed", p.name)

    def __enter__(self) -> Loaded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def timers_from_env(env: Mapping[str, str] | None = None) -> bool | None:
    """``CRONFLEET_SCHEDULER``: ``0``/``false``/``no``/``off`` -> False, ``1``/``true``/...
    -> True, unset or empty -> None. Anything else raises :class:`ConfigError`."""
    raw = (os.environ if env is None else env).get(SCHEDULER_ENV, "").strip().lower()
    if not raw:
        return None
    if raw in _FALSE:
        return False
    if raw in _TRUE:
        return True
    raise ConfigError([Problem(
        f"{SCHEDULER_ENV}={raw!r}: expected 0 (no timers: an API-only replica) or 1"
    )])


def load_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> Config:
    """Read and validate a ``cronfleet.toml``.

    Which file: ``path``, else ``$CRONFLEET_CONFIG``, else ``./cronfleet.toml`` if it
    exists, else none (the defaults: no tasks, the default store, entry-point plugins).
    ``$CRONFLEET_STORE`` replaces ``[scheduler] store``. The file's directory is put
    first on ``sys.path`` so that handlers and plugins next to it import.
    Raises :class:`ConfigError` listing every problem.
    """
    env = os.environ if env is None else env
    named_by = None
    if path is None and env.get(CONFIG_ENV):
        path, named_by = env[CONFIG_ENV], CONFIG_ENV
    if path is None and Path(DEFAULT_CONFIG).is_file():
        path = DEFAULT_CONFIG
    if path is None:
        config = Config()
        problems: list[Problem] = []
        _apply_store_env(config, env, problems)
        if problems:
            raise ConfigError(problems)
        return config
    display = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        what = f"{named_by}={display}" if named_by else display
        raise ConfigError([Problem(f"cannot read the configuration {what}: "
                                   f"{exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(f"not UTF-8 text: {exc}", file=display)]) from None
    directory = str(file.resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return _Reader(file, display, text, env).read()


def _apply_store_env(config: Config, env: Mapping[str, str], problems: list[Problem]) -> None:
    url = env.get(STORE_ENV, "").strip()
    if not url:
        return
    error = _store_problem(url)
    if error:
        problems.append(Problem(f"{STORE_ENV}: {error}", key="store"))
        return
    config.store, config.store_origin = url, STORE_ENV


def _store_problem(url: str) -> str | None:
    from cronfleet.store import open_store

    try:
        open_store(url)
    except StoreError as exc:
        return str(exc)
    return None


def _resolve_sqlite(url: str, base: Path) -> str:
    """``sqlite:///relative.db`` in a config file is relative to the file's directory."""
    from cronfleet.store.url import resolve_sqlite_url

    return resolve_sqlite_url(url, base)


class _Reader:
    """Turns the parsed document into a :class:`Config`, collecting every problem."""

    def __init__(self, file: Path, display: str, text: str, env: Mapping[str, str]) -> None:
        self.file = file
        self.display = display
        self.text = text
        self.env = env
        self.problems: list[Problem] = []
        self.loc = _Locator(text)

    # problem helpers

    def problem(
        self,
        message: str,
        *,
        at: tuple[int, int] | None = None,
        line: int | None = None,
        task: str | None = None,
        key: str | None = None,
    ) -> None:
        column = None
        if at is not None:
            line, column = at
        elif line is not None:
            column = 1
        self.problems.append(Problem(
            message, file=self.display, line=line, column=column, task=task, key=key,
            source=self.loc.source(line),
        ))

    def where(self, table: str, index: int, key: str | None) -> tuple[int, int] | None:
        """The key's value position, else its table's header."""
        if key is not None:
            at = self.loc.key(table, index, key)
            if at is not None:
                return at
        line = self.loc.table(table, index)
        return (line, 1) if line is not None else None

    def key_position(self, table: str, index: int, key: str) -> tuple[int, int] | None:
        """Where the key itself starts (for unknown keys), else its table's header."""
        at = self.loc.key(table, index, key)
        if at is not None:
            line = at[0]
            text = self.loc.lines[line - 1]
            return line, len(text) - len(text.lstrip()) + 1
        return self.where(table, index, None)

    # reading

    def read(self) -> Config:
        try:
            doc = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc)
            m = re.search(r"\(at line (\d+), column (\d+)\)$", msg)
            if m:
                line, col = int(m.group(1)), int(m.group(2))
                self.problem(f"invalid TOML: {msg[: m.start()].strip()}", at=(line, col))
            else:
                self.problems.append(Problem(f"invalid TOML: {msg}", file=self.display))
            raise ConfigError(self.problems) from None
        config = Config(path=self.file, display=self.display, source_lines=self.loc.lines)
        config.store = _resolve_sqlite(DEFAULT_STORE, self.file.resolve().parent)
        for key in doc:
            if key not in ("scheduler", "tasks", "api"):
                value = doc[key]
                if isinstance(value, dict):
                    kind, at = "table", self.where(key, -1, None)
                elif isinstance(value, list) and value and isinstance(value[0], dict):
                    kind, at = "table", self.where(key, 0, None)  # [[key]]
                else:
                    kind, at = "key", None
                at = at or self.key_position("", -1, key)
                self.problem(
                    f"unknown {kind} {key!r}"
                    f"{_did_you_mean(key, ['scheduler', 'tasks', 'api'])} "
                    "(expected [scheduler], [api] and [[tasks]])",
                    at=at, key=key,
                )
        sched = doc.get("scheduler", {})
        if isinstance(sched, dict):
            self.read_scheduler(sched, config)
        else:
            self.problem("scheduler: expected a table ([scheduler])",
                         at=self.key_position("", -1, "scheduler"), key="scheduler")
        api = doc.get("api", {})
        if isinstance(api, dict):
            self.read_api(api, config)
        else:
            self.problem("api: expected a table ([api])",
                         at=self.key_position("", -1, "api"), key="api")
        _apply_store_env(config, self.env, self.problems)
        tasks = doc.get("tasks", [])
        if isinstance(tasks, dict):
            self.problem(
                "tasks: expected [[tasks]] entries (an array of tables), got a single [tasks] "
                "table: write each task under its own [[tasks]] header",
                at=self.where("tasks", -1, None), key="tasks",
            )
        elif not isinstance(tasks, list):
            self.problem("tasks: expected [[tasks]] entries",
                         at=self.key_position("", -1, "tasks"), key="tasks")
        else:
            self.read_tasks(tasks, config)
        if self.problems:
            self.problems.sort(key=lambda p: (p.line or 0, p.column or 0))
            raise ConfigError(self.problems)
        return config

    def read_scheduler(self, sched: dict[str, Any], config: Config) -> None:
        def bad(key: str, message: str) -> None:
            self.problem(f"scheduler: {key}: {message}", at=self.where("scheduler", -1, key),
                         key=key)

        for key in sched:
            if key not in SCHEDULER_KEYS:
                self.problem(
                    f"scheduler: unknown key {key!r}{_did_you_mean(key, SCHEDULER_KEYS)}",
                    at=self.key_position("scheduler", -1, key), key=key,
                )
        if "store" in sched:
            url = sched["store"]
            if not isinstance(url, str):
                bad("store", f"expected a URL string, got {describe_value(url)}")
            elif (error := _store_problem(url)) is not None:
                bad("store", error)
            else:
                config.store = _resolve_sqlite(url, self.file.resolve().parent)
                config.store_origin = self.display
        if "timezone" in sched:
            tz = sched["timezone"]
            if not isinstance(tz, str):
                bad("timezone", f"expected an IANA name, got {describe_value(tz)}")
            else:
                try:
                    parse("1d", tz)
                    config.timezone = tz
                except CronSyntaxError as exc:
                    bad("timezone", exc.reason)
        for key in ("catch_up_window", "shutdown_grace", "run_retention"):
            if key in sched:
                try:
                    setattr(config, key, duration_seconds(sched[key]))
                except ScheduleError as exc:
                    bad(key, exc.message)
        if "runs_per_job" in sched:
            n = sched["runs_per_job"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                bad("runs_per_job", f"expected a whole number of at least 1, got "
                                    f"{describe_value(n)}")
            else:
                config.runs_per_job = n
        if "allow_private_targets" in sched:
            value = sched["allow_private_targets"]
            if not isinstance(value, bool):
                bad("allow_private_targets",
                    f"expected true or false, got {describe_value(value)}")
            else:
                config.allow_private_targets = value
        if "entry_points" in sched:
            value = sched["entry_points"]
            if not isinstance(value, bool):
                bad("entry_points", f"expected true or false, got {describe_value(value)}")
            else:
                config.entry_points = value
        if "provider" in sched:
            name = sched["provider"]
            problem = check_name(name, "provider")
            if problem:
                bad("provider", problem.removeprefix("provider "))
            else:
                config.provider = name
                config.provider_at = self.where("scheduler", -1, "provider")
        if "plugins" in sched:
            refs = sched["plugins"]
            if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
                bad("plugins", 'expected a list of import paths, e.g. ["myapp.jobs:Reports"]')
            else:
                self.read_plugin_refs(refs, config)

    def read_api(self, api: dict[str, Any], config: Config) -> None:
        def bad(key: str, message: str) -> None:
            self.problem(f"api: {key}: {message}", at=self.where("api", -1, key), key=key)

        for key in api:
            if key not in API_KEYS:
                self.problem(f"api: unknown key {key!r}{_did_you_mean(key, API_KEYS)}",
                             at=self.key_position("api", -1, key), key=key)
        if "enabled" in api:
            if not isinstance(api["enabled"], bool):
                bad("enabled", f"expected true or false, got {describe_value(api['enabled'])}")
            else:
                config.api_enabled = api["enabled"]
        if "host" in api:
            if not isinstance(api["host"], str) or not api["host"]:
                bad("host", f"expected a host name or address, got {describe_value(api['host'])}")
            else:
                config.api_host = api["host"]
        if "port" in api:
            port = api["port"]
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                bad("port", f"expected a port number 0-65535, got {describe_value(port)}")
            else:
                config.api_port = port
        if "metrics" in api:
            if api["metrics"] not in ("public", "token"):
                got = describe_value(api["metrics"])
                bad("metrics", f'expected "public" or "token", got {got}')
            else:
                config.api_metrics = api["metrics"]
        if "ready_max_overdue" in api:
            try:
                config.api_ready_max_overdue = duration_seconds(api["ready_max_overdue"])
            except ScheduleError as exc:
                bad("ready_max_overdue", exc.message)

    def read_plugin_refs(self, refs: list[str], config: Config) -> None:
        key_at = self.where("scheduler", -1, "plugins")
        start = key_at[0] if key_at else 1
        seen: set[str] = set()
        for ref in refs:
            at = self.loc.find(f'"{ref}"', start) or self.loc.find(f"'{ref}'", start) or key_at
            line, col = at if at else (None, None)
            if ref in seen:
                self.problem(f"scheduler: plugins: {ref!r} is listed twice", at=at, key="plugins")
                continue
            seen.add(ref)
            if ":" not in ref.strip(":") or ref.startswith(":") or ref.endswith(":"):
                self.problem(
                    f"scheduler: plugins: {ref!r} is not an import path: expected "
                    "'module:Class', e.g. 'myapp.jobs:Reports'",
                    at=at, key="plugins",
                )
                continue
            config.plugins.append(PluginRef(
                ref, self.display, line, col, self.loc.source(line)
            ))

    def read_tasks(self, tasks: list[Any], config: Config) -> None:
        first_line: dict[str, int | None] = {}
        for index, raw in enumerate(tasks):
            header = self.loc.table("tasks", index)
            if not isinstance(raw, dict):
                self.problem(f"task #{index + 1}: expected a table", line=header, key="tasks")
                continue
            task_id = raw.get("id")
            label = f"{task_id!r}" if isinstance(task_id, str) and task_id else f"#{index + 1}"
            tid = task_id if isinstance(task_id, str) else None
            where = f"task {label}"

            def bad(key: str, message: str, at: tuple[int, int] | None = None,
                    where: str = where, index: int = index, tid: str | None = tid) -> None:
                self.problem(f"{where}: {key}: {message}",
                             at=at or self.where("tasks", index, key), task=tid, key=key)

            for key in raw:
                if key not in TASK_KEYS:
                    self.problem(
                        f"{where}: unknown key {key!r}{_did_you_mean(key, TASK_KEYS)}",
                        at=self.key_position("tasks", index, key), task=tid, key=key,
                    )
            missing = False
            if "id" not in raw:
                bad("id", 'missing (every task needs a unique id, e.g. id = "cleanup")')
                missing = True
            if "cron" not in raw:
                bad("cron", 'missing (when it runs, e.g. cron = "*/5 * * * *" or cron = "5m")')
                missing = True
            handler_path = raw.get("handler")
            is_http = "http" in raw
            if is_http and handler_path is not None:
                bad("http", "a task has either a handler or an http request, not both")
            elif not is_http:
                for key in _HTTP_ONLY:
                    if key in raw:
                        bad(key, "only applies to http tasks (add http = { url = \"...\" })")
            if handler_path is None and not is_http and config.provider == BUILTIN_PROVIDER:
                bad("handler", f"missing (the built-in {BUILTIN_PROVIDER!r} provider calls "
                               'it, e.g. handler = "myapp.tasks:cleanup")')
            if isinstance(task_id, str) and task_id in first_line:
                line = first_line[task_id]
                bad("id", f"duplicate id {task_id!r} (first declared at line {line})")
                missing = True
            elif isinstance(task_id, str):
                first_line[task_id] = (self.where("tasks", index, "id") or (None, 0))[0]
            fields = {k: v for k, v in raw.items() if k in TASK_KEYS and k not in _NOT_SCHEDULE}
            http_table = raw.get("http")
            if (is_http and "description" not in raw and isinstance(http_table, dict)
                    and isinstance(http_table.get("url"), str)):
                method = http_table.get("method", "GET")
                fields["description"] = f"{str(method).upper()} {http_table['url']}"
            fields.setdefault("id", "placeholder")  # reported above; check the other keys
            fields.setdefault("cron", "@daily")
            schedule = Schedule(**fields)
            _, errors = schedule_to_job(
                schedule,
                job_id=tid if tid and check_name(tid, "id") is None else "task",
                handler=_placeholder,
                timezone=config.timezone,
                catch_up_window=config.catch_up_window,
                source="config",
                config_must_be_object=True,
            )
            for err in errors:
                at = self.where("tasks", index, err.key)
                if err.key == "cron" and err.column is not None and at is not None:
                    at = self.cron_column(at, schedule.cron, err.column)
                bad(err.key, err.message, at)
            handler = None
            if handler_path is not None:
                handler = self.read_handler(handler_path, bad)
            elif is_http:
                handler = self.read_http(raw, config, bad)
                if handler is None:
                    missing = True
            if errors or missing:
                continue
            header_line = header if header is not None else 0
            config.tasks.append(Task(schedule, handler, handler_path,
                                     f"{self.display}:{header_line}"))

    def read_http(self, raw: dict[str, Any], config: Config, bad: Any) -> Any:
        """The task's :class:`~cronfleet.jobs.http.HttpJob`, or None after reporting
        every problem of its ``http``, ``retry`` and ``allow_private_targets`` keys."""
        from cronfleet.jobs.http import HttpJob, HttpJobInvalid, RetryPolicy

        ok = True

        def table(key: str, allowed: Sequence[str]) -> dict[str, Any] | None:
            nonlocal ok
            value = raw.get(key, {})
            if not isinstance(value, dict):
                bad(key, f"expected a table ({key} = {{ ... }}), got {describe_value(value)}")
                ok = False
                return None
            for k in value:
                if k not in allowed:
                    close = difflib.get_close_matches(k, list(allowed), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    bad(key, f"unknown key {k!r}{hint} (expected {', '.join(allowed)})")
                    ok = False
            return {k: v for k, v in value.items() if k in allowed}

        http = table("http", HTTP_KEYS)
        retry = table("retry", RETRY_KEYS)
        if http is None or retry is None:
            return None
        if "url" not in http:
            bad("http", 'url: missing (e.g. http = { url = "https://example.com/hook" })')
            return None
        for key in ("timeout",):
            if key in http:
                try:
                    http[key] = duration_seconds(http[key])
                except ScheduleError as exc:
                    bad("http", f"{key}: {exc.message}")
                    ok = False
        if "accept_status" in http and isinstance(http["accept_status"], list):
            http["accept_status"] = tuple(http["accept_status"])
        policy = RetryPolicy()
        if retry:
            if "delay" in retry:
                try:
                    retry["delay"] = duration_seconds(retry["delay"])
                except ScheduleError as exc:
                    bad("retry", f"delay: {exc.message}")
                    ok = False
            if "backoff" in retry and not isinstance(retry["backoff"], str):
                bad("retry", f"backoff: expected a string, got {describe_value(retry['backoff'])}")
                ok = False
            if ok:
                try:
                    policy = RetryPolicy(**retry)
                except (ValueError, TypeError) as exc:
                    bad("retry", str(exc))
                    ok = False
        notify = None
        if "notify" in raw:
            table_ = table("notify", NOTIFY_KEYS)
            if table_ is None:
                return None
            notify = self.read_notify(table_, bad)
            if notify is None:
                ok = False
        pause_after = raw.get("auto_pause_after")
        if pause_after is not None and (isinstance(pause_after, bool)
                                        or not isinstance(pause_after, int) or pause_after < 1):
            bad("auto_pause_after", f"expected a whole number of at least 1, got "
                                    f"{describe_value(pause_after)}")
            ok = False
        private = raw.get("allow_private_targets")
        if private is not None and not isinstance(private, bool):
            bad("allow_private_targets", f"expected true or false, got {describe_value(private)}")
            ok = False
        if not ok:
            return None
        try:
            return HttpJob(**http, retry=policy, allow_private_targets=private, notify=notify,
                           auto_pause_after=pause_after, runtime=config.http_runtime())
        except HttpJobInvalid as exc:
            for key, message in exc.problems:
                bad("http", f"{key}: {message}")
        except TypeError as exc:
            bad("http", f"invalid value: {exc}")
        return None

    def read_notify(self, table: dict[str, Any], bad: Any) -> Any:
        """A :class:`~cronfleet.notify.NotifyPolicy` from ``notify = {...}``, or None."""
        from cronfleet.notify import EmailSettings, NotifyPolicy

        ok = True
        kwargs: dict[str, Any] = {}
        if "on" in table:
            on = table["on"]
            if isinstance(on, str):
                on = [on]
            if not isinstance(on, list) or not all(isinstance(e, str) for e in on):
                bad("notify", 'on: expected a list of events, e.g. ["failure", "recovery"]')
                ok = False
            else:
                kwargs["on"] = tuple(on)
        for key in ("webhook", "slack"):
            if key in table:
                if not isinstance(table[key], str) or "://" not in table[key]:
                    bad("notify", f"{key}: expected an http(s) URL, got "
                                  f"{describe_value(table[key])}")
                    ok = False
                else:
                    kwargs[key] = table[key]
        if "after_failures" in table:
            kwargs["after_failures"] = table["after_failures"]
        if "email" in table:
            email = table["email"]
            if not isinstance(email, dict):
                bad("notify", f"email: expected a table, got {describe_value(email)}")
                return None
            for k in email:
                if k not in EMAIL_KEYS:
                    close = difflib.get_close_matches(k, list(EMAIL_KEYS), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    bad("notify", f"email: unknown key {k!r}{hint}")
                    ok = False
            to = email.get("to")
            if isinstance(to, str):
                to = [to]
            if "host" not in email or not isinstance(email["host"], str):
                bad("notify", "email: host: missing (the SMTP server, e.g. host = "
                              '"smtp.example.com")')
                ok = False
            if not isinstance(to, list) or not to or not all(isinstance(t, str) for t in to):
                bad("notify", 'email: to: expected a list of addresses, e.g. to = '
                              '["ops@example.com"]')
                ok = False
            if ok:
                fields = {k: v for k, v in email.items() if k in EMAIL_KEYS and k != "from"}
                fields["to"] = tuple(to or ())
                if "from" in email:
                    fields["sender"] = email["from"]
                if "timeout" in fields:
                    try:
                        fields["timeout"] = duration_seconds(fields["timeout"])
                    except ScheduleError as exc:
                        bad("notify", f"email: timeout: {exc.message}")
                        return None
                try:
                    kwargs["email"] = EmailSettings(**fields)
                except TypeError as exc:
                    bad("notify", f"email: {exc}")
                    ok = False
        if not ok:
            return None
        try:
            return NotifyPolicy(**kwargs)
        except ValueError as exc:
            bad("notify", str(exc))
            return None

    def read_handler(self, path: object, bad: Any) -> Any:
        if not isinstance(path, str):
            bad("handler", f"expected 'module:function' text, got {describe_value(path)}")
            return None
        try:
            fn = import_object(path)
        except ValueError as exc:
            bad("handler", str(exc))
            return None
        problem = check_handler(fn, path)
        if problem:
            bad("handler", problem)
            return None
        return fn

    def cron_column(self, at: tuple[int, int], expr: str, column: int) -> tuple[int, int]:
        """Point at the offending token inside the quoted expression when the text in the
        file is the expression verbatim (no escapes)."""
        line, col = at
        text = self.loc.lines[line - 1]
        quote = text[col - 1: col]
        if quote in ("'", '"') and text[col: col + len(expr)] == expr:
            return line, col + column
        return at


def _placeholder(ctx: Any) -> None:  # handler of the throw-away job built to validate a task
    return None


# -- assembling plugins and tasks into jobs ------------------------------------------


@dataclass
class _Source:
    ref: str
    origin: str
    load: Any
    problem_at: PluginRef | None = None  # config-listed: where to point
    entry_point: str | None = None


@dataclass
class _Candidate:
    schedule_id: str
    job: Job
    plugin: LoadedPlugin
    order: int
    label: str


class _Assembler:
    def __init__(self, config: Config, entry_points: Sequence[EntryPointSpec] | None) -> None:
        self.config = config
        self.entry_points = entry_points
        self.problems: list[Problem] = []
        self.warnings: list[str] = []

    def fail(self, message: str, *, plugin: str | None = None, schedule: str | None = None,
             key: str | None = None, at: PluginRef | None = None) -> None:
        if at is not None and at.file is not None:
            self.problems.append(Problem(
                message, file=at.file, line=at.line, column=at.column, key=key or "plugins",
                plugin=plugin, schedule=schedule, source=at.source,
            ))
        else:
            self.problems.append(Problem(message, plugin=plugin, schedule=schedule, key=key))

    def sources(self) -> list[_Source]:
        out = [
            _Source(ref.path, ref.origin, lambda ref=ref: import_object(ref.path), ref)
            for ref in self.config.plugins
        ]
        if self.config.entry_points:
            specs = (_plugins.discover_entry_points() if self.entry_points is None
                     else list(self.entry_points))
            listed = {ref.path for ref in self.config.plugins}
            for spec in specs:
                if spec.value in listed:
                    continue  # the same plugin, listed in the config too: load it once
                out.append(_Source(spec.value, spec.origin, spec.load, entry_point=spec.name))
        return out

    def instances(self) -> list[tuple[_Source, Any]]:
        loaded: list[tuple[_Source, Any]] = []
        seen: dict[int, str] = {}
        for src in self.sources():
            try:
                obj = src.load()
            except ValueError as exc:  # import_object explains itself
                self.fail(f"scheduler: plugins: {exc}" if src.problem_at else
                          f"plugin {src.origin}: {exc}", at=src.problem_at)
                continue
            except Exception as exc:
                self.fail(f"plugin {src.origin}: cannot load it: {exception_text(exc)}",
                          at=src.problem_at)
                continue
            if id(obj) in seen:
                continue  # two names for one object (e.g. an entry point and a re-export)
            seen[id(obj)] = src.origin
            try:
                plugin = _plugins.instantiate(obj)
            except Exception as exc:
                self.fail(f"plugin {src.origin}: cannot create it: {exception_text(exc)}",
                          at=src.problem_at)
                continue
            loaded.append((src, plugin))
        return loaded

    def run(self) -> Loaded:
        config = self.config
        result = Loaded(config)
        plugins: list[tuple[_Source | None, LoadedPlugin]] = []
        names: dict[str, str] = {}
        provider: LoadedPlugin | None = None
        if config.provider == BUILTIN_PROVIDER:
            provider = LoadedPlugin(BUILTIN_PROVIDER, _plugins.DEFAULT_PRIORITY,
                                    "built-in", CronProvider(), provider=True)
            plugins.append((None, provider))
            names[BUILTIN_PROVIDER] = "built-in"
        for src, obj in self.instances():
            try:
                name = obj.name()
                priority = _plugins.plugin_priority(obj)
            except Exception as exc:
                self.fail(f"plugin {src.origin}: {exception_text(exc)}", at=src.problem_at)
                continue
            problem = check_name(name, "name()")
            if problem:
                self.fail(f"plugin {src.origin}: {problem}", at=src.problem_at)
                continue
            if name in names:
                self.fail(
                    f"plugin {name!r} ({src.origin}): another plugin already has this name "
                    f"({names[name]}); plugin names must be unique", plugin=name,
                    at=src.problem_at,
                )
                continue
            names[name] = src.origin
            lp = LoadedPlugin(name, priority, src.origin, obj)
            if provider is None and config.provider in (name, src.entry_point):
                lp.provider = True
                provider = lp
            plugins.append((src, lp))
        if provider is None:
            self.problems.append(Problem(
                f"scheduler: provider: no plugin named {config.provider!r}"
                f"{_plugins.names_near(config.provider, names)} (available: "
                f"{', '.join(sorted(names)) or 'none'}; the built-in provider is "
                f"{BUILTIN_PROVIDER!r})",
                file=config.display if config.path else None,
                line=config.provider_at[0] if config.provider_at else None,
                column=config.provider_at[1] if config.provider_at else None,
                key="provider",
                source=_line(config, config.provider_at),
            ))
        # the provider's tasks come first: they win ties (see resolve) and lead the list
        plugins.sort(key=lambda item: not item[1].provider)
        candidates: list[_Candidate] = []
        order = 0
        for origin, lp in plugins:
            made = self.schedules_of(origin, lp)
            if made is None:
                continue
            result.plugins.append(lp)
            for cand in made:
                cand.order = order
                order += 1
                candidates.append(cand)
        result.jobs = self.resolve(candidates)
        result.problems = self.problems
        result.warnings = self.warnings
        return result

    def schedules_of(self, src: _Source | None, lp: LoadedPlugin) -> list[_Candidate] | None:
        """The plugin's valid schedules as candidate jobs, or None if it failed."""
        config = self.config
        who = f"provider {lp.name!r}" if lp.provider else f"plugin {lp.name!r}"
        who_full = f"{who} ({lp.origin})"
        at = src.problem_at if src else None
        tasks = {t.schedule.id: t for t in config.tasks}
        if lp.provider:
            provide = getattr(lp.plugin, "provide", None)
            if not callable(provide):
                if config.tasks:
                    self.fail(f"{who_full}: cannot take the [[tasks]]: it has no "
                              "provide(tasks) method", plugin=lp.name, key="provider", at=at)
                    return None
            else:
                try:
                    provide(list(config.tasks))
                except Exception as exc:
                    self.fail(f"{who_full}: provide(tasks) raised {exception_text(exc)}",
                              plugin=lp.name, at=at)
                    return None
        try:
            declared = lp.plugin.schedules()
        except Exception as exc:
            self.fail(f"{who_full}: schedules() raised {exception_text(exc)}",
                      plugin=lp.name, at=at)
            return None
        if not isinstance(declared, list | tuple):
            self.fail(f"{who_full}: schedules() must return a list of Schedule, got "
                      f"{type(declared).__name__}", plugin=lp.name, at=at)
            return None
        ok = True
        out: list[_Candidate] = []
        seen: set[str] = set()
        for i, schedule in enumerate(declared):
            if not isinstance(schedule, Schedule):
                self.fail(f"{who_full}: schedules()[{i}] is a {type(schedule).__name__}, not a "
                          "cronfleet.Schedule", plugin=lp.name, at=at)
                ok = False
                continue
            sid = schedule.id
            label = f"schedule {sid!r}" if isinstance(sid, str) else f"schedules()[{i}]"
            if isinstance(sid, str) and sid in seen:
                self.fail(f"{who_full}: {label}: id: declared twice", plugin=lp.name,
                          schedule=sid, key="id", at=at)
                ok = False
                continue
            seen.add(sid)
            job_id = sid if lp.provider else f"{lp.name}/{sid}"
            task = tasks.get(sid) if lp.provider else None
            try:
                handler = _plugins.handler_of(lp.plugin, sid)
            except Exception:
                handler = lp.plugin.run
            job, errors = schedule_to_job(
                schedule,
                job_id=job_id if isinstance(sid, str) and check_name(sid, "id") is None
                else "invalid",
                handler=handler,
                timezone=config.timezone,
                catch_up_window=config.catch_up_window,
                source=task.location if task else f"plugin {lp.name}",
                config_must_be_object=task is not None,
            )
            if not errors and len(job_id) > 200:
                errors = [ScheduleError("id", f"job id {job_id!r} is longer than 200 characters")]
            for err in errors:
                self.fail(f"{who_full}: {label}: {err}", plugin=lp.name,
                          schedule=sid if isinstance(sid, str) else None, key=err.key, at=at)
            if errors or job is None:
                ok = False
                continue
            desc = (f"task {sid!r} ({task.location}, provider {lp.name!r}, priority "
                    f"{lp.priority})" if task else
                    f"plugin {lp.name!r} ({lp.origin}, priority {lp.priority})")
            out.append(_Candidate(sid, job, lp, 0, desc))
        if lp.provider:
            for tid, task in tasks.items():
                if tid not in seen:
                    self.fail(f"{who_full}: schedules() does not declare task {tid!r} "
                              f"({task.location}); it would never run", plugin=lp.name,
                              schedule=tid, at=at)
                    ok = False
        return out if ok else None

    def resolve(self, candidates: list[_Candidate]) -> list[Job]:
        """One job per schedule id: the highest priority, then the first declared."""
        groups: dict[str, list[_Candidate]] = {}
        for cand in candidates:
            groups.setdefault(cand.schedule_id, []).append(cand)
        jobs: list[Job] = []
        for cand in candidates:
            group = groups[cand.schedule_id]
            winner = min(group, key=lambda c: (-c.plugin.priority, c.order))
            if cand is winner:
                jobs.append(cand.job)
                cand.plugin.jobs.append(cand.job.id)
                continue
            why = (f"higher priority ({winner.plugin.priority} > {cand.plugin.priority})"
                   if winner.plugin.priority != cand.plugin.priority else
                   f"same priority {cand.plugin.priority}, declared first ([[tasks]], then "
                   "[scheduler] plugins in order, then entry points by name); set priority() "
                   "to choose")
            self.warnings.append(
                f"schedule id {cand.schedule_id!r} is declared twice: {winner.label} wins over "
                f"{cand.label} by {why}; job {cand.job.id!r} will not run"
            )
        return jobs


def _line(config: Config, at: tuple[int, int] | None) -> str | None:
    if at is None or not 1 <= at[0] <= len(config.source_lines):
        return None
    return config.source_lines[at[0] - 1]
