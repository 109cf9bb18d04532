"""Reading ``cronfleet.toml``: :func:`load_config` and the ``[scheduler]``/``[api]``
tables (the ``[[tasks]]`` are read by :mod:`cronfleet.config.tasks`)."""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cronfleet.config.env import apply_env
from cronfleet.config.keys import (
    API_KEYS,
    CONFIG_ENV,
    DEFAULT_CONFIG,
    DEFAULT_STORE,
    LOG_FORMATS,
    LOG_LEVELS,
    SCHEDULER_KEYS,
    STORE_ENV,
    did_you_mean,
)
from cronfleet.config.locate import Locator
from cronfleet.config.problems import ConfigError, Problem
from cronfleet.config.settings import Config, PluginRef
from cronfleet.config.tasks import read_tasks
from cronfleet.cron import CronSyntaxError, parse
from cronfleet.errors import StoreError
from cronfleet.plugins import ScheduleError, check_name, describe_value, duration_seconds


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
        reader = Reader(Path(DEFAULT_CONFIG), config.display, "", env)
        apply_env(reader, config, env)
        _apply_store_env(config, env, reader.problems)
        if reader.problems:
            raise ConfigError(reader.problems)
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
    return Reader(file, display, text, env).read()


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


def _port_problem(port: object) -> str | None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        return f"expected a port number 0-65535, got {describe_value(port)}"
    return None


def _resolve_sqlite(url: str, base: Path) -> str:
    """``sqlite:///relative.db`` in a config file is relative to the file's directory."""
    from cronfleet.store.url import resolve_sqlite_url

    return resolve_sqlite_url(url, base)


MAX_NESTING = 100
# a module's import path ([scheduler] handlers)
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _too_deep(text: str) -> tuple[int, int] | None:
    """Where arrays / inline tables first nest deeper than :data:`MAX_NESTING` (line,
    column), outside strings and comments; None when they never do. tomllib would recurse
    once per level and end in a RecursionError thousands of lines long."""
    depth = 0
    line, col = 1, 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        col += 1
        if c == "\n":
            line, col = line + 1, 0
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if text[j] == "\\" and c == '"':
                    j += 1
                elif text[j] == "\n" and len(quote) == 1:
                    break  # an unterminated string: tomllib reports it
                j += 1
            segment = text[i:j + len(quote)]
            newlines = segment.count("\n")
            if newlines:
                line += newlines
                col = len(segment) - segment.rfind("\n") - 1
            else:
                col += len(segment) - 1
            i = j + len(quote)
            continue
        elif c in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line, col
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return None


class Reader:
    """Turns the parsed document into a :class:`Config`, collecting every problem."""

    def __init__(self, file: Path, display: str, text: str, env: Mapping[str, str]) -> None:
        text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors)
        self.file = file
        self.display = display
        self.text = text
        self.env = env
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.loc = Locator(text)
        self.sched_table = "scheduler"  # or "scheduled", the other name of the same table

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

    def warn(self, message: str, *, at: tuple[int, int] | None = None,
             task: str | None = None, key: str | None = None) -> None:
        """A located warning (``cronfleet check`` reports it; ``--strict`` fails on it)."""
        line, column = at if at is not None else (None, None)
        self.warnings.append(Problem(message, file=self.display, line=line, column=column,
                                     task=task, key=key, source=self.loc.source(line)))

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
        deep = _too_deep(self.text)
        if deep is not None:
            self.problem(f"invalid TOML: arrays and inline tables nested deeper than "
                         f"{MAX_NESTING} levels", at=deep)
            raise ConfigError(self.problems)
        try:
            doc = tomllib.loads(self.text)
        except RecursionError:  # a nesting the scan above missed: still a located answer
            self.problems.append(Problem("invalid TOML: nested too deeply", file=self.display))
            raise ConfigError(self.problems) from None
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
        # [scheduled] is another name of [scheduler] (the name bext's files use): one per file
        if "scheduled" in doc:
            self.sched_table = "scheduled"
            if "scheduler" in doc:
                self.problem(
                    "scheduled: [scheduled] and [scheduler] are two names of the same table; "
                    "keep one of them", at=self.where("scheduled", -1, None), key="scheduled")
        for key in doc:
            if key not in ("scheduler", "scheduled", "tasks", "api"):
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
                    f"{did_you_mean(key, ['scheduler', 'scheduled', 'tasks', 'api'])} "
                    "(expected [scheduler], [api] and [[tasks]])",
                    at=at, key=key,
                )
        table = self.sched_table
        sched = doc.get(table, {})
        if isinstance(sched, dict):
            self.read_scheduler(sched, config)
        else:
            self.problem(f"{table}: expected a table ([{table}])",
                         at=self.key_position("", -1, table), key=table)
        api = doc.get("api", {})
        if isinstance(api, dict):
            self.read_api(api, config)
        else:
            self.problem("api: expected a table ([api])",
                         at=self.key_position("", -1, "api"), key="api")
        for table, prefix in ((self.sched_table, ""), ("api", "api_")):
            if isinstance(doc.get(table), dict):
                for key in doc[table]:
                    config.origins[prefix + key] = self.display
        # the environment replaces what the file says (flags, later, replace both)
        apply_env(self, config, self.env)
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
            read_tasks(self, tasks, config)
        if self.problems:
            self.problems.sort(key=lambda p: (p.line or 0, p.column or 0))
            raise ConfigError(self.problems)
        config.warnings = sorted(self.warnings, key=lambda p: (p.line or 0, p.column or 0))
        return config

    def read_scheduler(self, sched: dict[str, Any], config: Config) -> None:
        table = self.sched_table

        def bad(key: str, message: str) -> None:
            self.problem(f"{table}: {key}: {message}", at=self.where(table, -1, key), key=key)

        for key in sched:
            if key not in SCHEDULER_KEYS:
                self.problem(
                    f"{table}: unknown key {key!r}{did_you_mean(key, SCHEDULER_KEYS)}",
                    at=self.key_position(table, -1, key), key=key,
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
        if "connect_timeout" in sched:  # how long start-up waits for the store; unset: forever
            try:
                config.connect_timeout = duration_seconds(sched["connect_timeout"])
            except ScheduleError as exc:
                bad("connect_timeout", exc.message)
        if "instance_ttl" in sched:
            try:
                ttl = duration_seconds(sched["instance_ttl"])
            except ScheduleError as exc:
                bad("instance_ttl", exc.message)
            else:
                if ttl < 1:
                    bad("instance_ttl", f"expected at least 1 second, got {ttl:g}s")
                else:
                    config.instance_ttl = ttl
        if "runs_per_job" in sched:
            n = sched["runs_per_job"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                bad("runs_per_job", f"expected a whole number of at least 1, got "
                                    f"{describe_value(n)}")
            else:
                config.runs_per_job = n
        if "metrics_job_label" in sched:
            value = sched["metrics_job_label"]
            if not isinstance(value, bool):
                bad("metrics_job_label", f"expected true or false, got {describe_value(value)}")
            else:
                config.metrics_job_label = value
        if "allow_private_targets" in sched:
            value = sched["allow_private_targets"]
            if not isinstance(value, bool):
                bad("allow_private_targets",
                    f"expected true or false, got {describe_value(value)}")
            else:
                config.allow_private_targets = value
        for key, allowed in (("log_level", LOG_LEVELS), ("log_format", LOG_FORMATS)):
            if key in sched:
                if sched[key] not in allowed:
                    choices = ", ".join(f'"{a}"' for a in allowed)
                    bad(key, f"expected one of {choices}, got {describe_value(sched[key])}")
                else:
                    setattr(config, key, sched[key])
        if "metrics_port" in sched:
            problem = _port_problem(sched["metrics_port"])
            if problem:
                bad("metrics_port", problem)
            else:
                config.metrics_port = sched["metrics_port"]
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
                config.provider_at = self.where(table, -1, "provider")
        if "handlers" in sched:
            module = sched["handlers"]
            if not isinstance(module, str) or not _MODULE.fullmatch(module):
                bad("handlers", "expected a module's import path, e.g. \"myapp.tasks\" (its "
                                f"functions are named after the task ids), got "
                                f"{describe_value(module)}")
            else:
                config.handlers = module
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
                self.problem(f"api: unknown key {key!r}{did_you_mean(key, API_KEYS)}",
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
            problem = _port_problem(api["port"])
            if problem:
                bad("port", problem)
            else:
                config.api_port = api["port"]
        if "metrics" in api:
            if api["metrics"] not in ("public", "token"):
                got = describe_value(api["metrics"])
                bad("metrics", f'expected "public" or "token", got {got}')
            else:
                config.api_metrics = api["metrics"]
        if "allow_command_jobs" in api:
            if not isinstance(api["allow_command_jobs"], bool):
                bad("allow_command_jobs", f"expected true or false, got "
                                          f"{describe_value(api['allow_command_jobs'])}")
            else:
                config.api_allow_command_jobs = api["allow_command_jobs"]
        if "ready_max_overdue" in api:
            try:
                config.api_ready_max_overdue = duration_seconds(api["ready_max_overdue"])
            except ScheduleError as exc:
                bad("ready_max_overdue", exc.message)
        if "private_targets" in api:
            targets = api["private_targets"]
            from cronfleet.jobs.http import TargetPolicy

            if not isinstance(targets, list):
                bad("private_targets", 'expected a list of networks and host names, e.g. '
                                       f'["10.1.2.0/24", "billing.internal"], got '
                                       f"{describe_value(targets)}")
            else:
                try:
                    TargetPolicy.parse(targets)
                except ValueError as exc:
                    bad("private_targets", str(exc).removeprefix("private_targets"))
                else:
                    config.api_private_targets = list(targets)
        if "forwarded_allow_ips" in api:
            problem = forwarded_problem(api["forwarded_allow_ips"])
            if problem:
                bad("forwarded_allow_ips", problem)
            else:
                config.api_forwarded_allow_ips = list(api["forwarded_allow_ips"])
        if "max_request_body" in api:
            size = api["max_request_body"]
            if isinstance(size, bool) or not isinstance(size, int) or not (
                    1024 <= size <= 64 * 1024 * 1024):
                bad("max_request_body", f"expected a number of bytes from 1024 to 67108864, "
                                        f"got {describe_value(size)}")
            else:
                config.api_max_request_body = size

    def read_plugin_refs(self, refs: list[str], config: Config) -> None:
        key_at = self.where(self.sched_table, -1, "plugins")
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


def forwarded_problem(value: object) -> str | None:
    """What is wrong with an ``[api] forwarded_allow_ips`` value, or None: a list of IP
    addresses and networks (``"10.0.0.5"``, ``"10.1.0.0/16"``), or ``["*"]`` (any peer)."""
    example = '["10.0.0.5", "10.1.0.0/16"]'
    if not isinstance(value, list) or not value:
        return f"expected a list of proxy addresses or networks, e.g. {example}, got " \
               f"{describe_value(value)}"
    for item in value:
        if item == "*":
            if len(value) > 1:
                return '"*" (every peer) cannot be combined with addresses'
            continue
        if not isinstance(item, str):
            return f"expected addresses or networks as strings, e.g. {example}, got " \
                   f"{describe_value(item)}"
        try:
            ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            return f"{item!r} is not an IP address or network (host names are not " \
                   f"accepted: give the proxy's address), e.g. {example}"
    return None
