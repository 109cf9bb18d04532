"""Declared schedules: :class:`Schedule`, the :class:`ScheduledPlugin` protocol, providers.

Schedules are *declared*, not registered: a plugin says what it has (``schedules()``, the
full list, once per load) and does the work when asked (``run(ctx)``). The runtime owns
every piece of cron machinery -- parsing, firing, catch-up, jitter, locking -- and receives
the whole list before anything fires, so it can validate all of it first.

Where plugins come from (see :mod:`cronfleet.config`, which assembles them):

* ``plugins = ["myapp.jobs:Reports"]`` in ``cronfleet.toml``;
* the ``cronfleet.plugins`` entry-point group of installed distributions.

A job declared by plugin ``reports`` for schedule ``daily`` has the job id
``reports/daily`` (``ctx.schedule_id`` gives back ``daily``). The ``[[tasks]]`` of the
config are given to the *provider* -- the built-in :class:`CronProvider` (``"cron"``) or a
plugin that implements ``provide(tasks)`` -- and keep their bare ids, so switching provider
keeps their history, overrides and claims.
"""

from __future__ import annotations

import abc
import difflib
import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import metadata
from typing import Any

from cronfleet.cron import CronSyntaxError, parse
from cronfleet.cron.duration import DurationError, to_timedelta
from cronfleet.model import (
    DEFAULT_TEAM,
    Handler,
    Job,
    Locking,
    Missed,
    Overlap,
    RunContext,
    check_team,
)

__all__ = [
    "BUILTIN_PROVIDER",
    "DEFAULT_PRIORITY",
    "ENTRY_POINT_GROUP",
    "CronProvider",
    "EntryPointSpec",
    "Schedule",
    "ScheduleError",
    "ScheduledPlugin",
    "Task",
    "discover_entry_points",
    "import_object",
    "schedule_to_job",
]

ENTRY_POINT_GROUP = "cronfleet.plugins"
DEFAULT_PRIORITY = 1000
BUILTIN_PROVIDER = "cron"

# a schedule id, task id or plugin name: like a job id, without "/" (it separates the
# plugin name from the schedule id in job ids)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}$")
_NAME_RULE = "use 1-100 characters from letters, digits and ._:@+- starting with a letter or digit"


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: plain data, validated by the runtime when the plugin loads.

    ``cron``: a cron expression, macro or interval (see docs/cron.md). ``timezone`` and
    ``catch_up_window`` default to the ``[scheduler]`` values. Durations are ``"30s"``-style
    text or seconds. ``config_json`` is an opaque string shown to operators; when it holds
    a JSON object the handler receives it parsed as ``ctx.config``.
    """

    id: str
    cron: str
    description: str = ""
    timezone: str | None = None
    jitter: str | float = 0
    missed: Missed | str = Missed.RUN_ONCE
    catch_up_window: str | float | None = None
    locking: Locking | str = Locking.PREFER_GLOBAL
    overlap: Overlap | str = Overlap.SKIP
    timeout: str | float | None = None
    enabled: bool = True
    config_json: str = ""
    recover: bool = False
    team: str = DEFAULT_TEAM

    @property
    def config(self) -> dict[str, Any]:
        """``config_json`` parsed when it is a JSON object, else ``{}``."""
        return _json_object(self.config_json) or {}


class ScheduledPlugin(abc.ABC):
    """Declares schedules and runs them when asked.

    Subclass it and implement ``name``, ``schedules`` and ``run``; ``priority`` and
    ``cleanup`` have defaults. ``run`` may be ``def`` (runs in a thread pool) or
    ``async def`` (runs on the event loop); dispatch on ``ctx.schedule_id``.
    """

    @abc.abstractmethod
    def name(self) -> str:
        """Stable name, used in job ids (``<name>/<schedule id>``), logs and the CLI."""

    def priority(self) -> int:
        """When two plugins declare the same schedule id, the higher priority wins."""
        return DEFAULT_PRIORITY

    @abc.abstractmethod
    def schedules(self) -> list[Schedule]:
        """The full list of schedules, called once per load."""

    @abc.abstractmethod
    def run(self, ctx: RunContext) -> Any:
        """Do the work of slot ``ctx.slot`` of schedule ``ctx.schedule_id``."""

    def cleanup(self) -> None:  # noqa: B027 - optional hook, deliberately empty
        """Called once when the plugin is unloaded (the process stops)."""


@dataclass(frozen=True)
class Task:
    """One ``[[tasks]]`` entry, as given to a provider's ``provide(tasks)``.

    ``handler`` is the imported callable (``None`` when the entry has no ``handler``);
    ``location`` is ``file:line`` of the entry, for messages.
    """

    schedule: Schedule
    handler: Handler | None = None
    handler_path: str | None = None
    location: str = ""


class CronProvider(ScheduledPlugin):
    """The built-in provider ``"cron"``: each task runs its own ``handler``."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def name(self) -> str:
        return BUILTIN_PROVIDER

    def provide(self, tasks: Sequence[Task]) -> None:
        missing = [t.schedule.id for t in tasks if t.handler is None]
        if missing:
            raise ValueError(f"tasks without a handler: {', '.join(missing)}")
        self._tasks = {t.schedule.id: t for t in tasks}

    def schedules(self) -> list[Schedule]:
        return [t.schedule for t in self._tasks.values()]

    def handler_for(self, schedule_id: str) -> Handler:
        """The task's own handler, called directly (sync or async as written)."""
        handler = self._tasks[schedule_id].handler
        assert handler is not None
        return handler

    def run(self, ctx: RunContext) -> Any:
        return self.handler_for(ctx.schedule_id)(ctx)


# -- validation: Schedule -> Job ----------------------------------------------------------


class ScheduleError(ValueError):
    """One invalid field of a schedule. ``key`` names the field; for cron syntax errors
    ``column`` is the 1-based column inside the expression."""

    def __init__(self, key: str, message: str, column: int | None = None) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
        self.column = column


def check_name(value: object, what: str) -> str | None:
    """The problem with a task id, schedule id or plugin name, or None."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {describe_value(value)}"
    if not _NAME.match(value):
        hint = " ('/' separates a plugin's name from its schedule ids)" if "/" in value else ""
        return f"{what} {value!r} is invalid: {_NAME_RULE}{hint}"
    return None


def schedule_to_job(
    schedule: Schedule,
    *,
    job_id: str,
    handler: Handler,
    timezone: str,
    catch_up_window: float,
    source: str,
    config_must_be_object: bool = False,
) -> tuple[Job | None, list[ScheduleError]]:
    """Validate every field of ``schedule`` and build its :class:`Job`.

    Returns the job, or ``None`` with one :class:`ScheduleError` per invalid field (all of
    them, not just the first). ``config_must_be_object``: a ``config_json`` that is not a
    JSON object is an error (config tasks) rather than passed on as ``{}`` (plugins).
    """
    errors: list[ScheduleError] = []
    s = schedule
    problem = check_name(s.id, "id")
    if problem:
        errors.append(ScheduleError("id", problem))
    if not isinstance(s.description, str):
        errors.append(
            ScheduleError("description", f"expected a string, got {describe_value(s.description)}")
        )
    tz = timezone if s.timezone is None else s.timezone
    expr = None
    if not isinstance(tz, str):
        errors.append(ScheduleError("timezone", f"expected an IANA name, got {describe_value(tz)}"))
    elif not isinstance(s.cron, str):
        errors.append(ScheduleError("cron", f"expected a string, got {describe_value(s.cron)}"))
    else:
        try:
            expr = parse(s.cron, tz)
        except CronSyntaxError as exc:
            if exc.field == "timezone":
                errors.append(ScheduleError("timezone", exc.reason))
            else:
                errors.append(ScheduleError("cron", str(exc), exc.column))
    durations: dict[str, float | None] = {}
    for key, value, default in (
        ("jitter", s.jitter, 0.0),
        ("catch_up_window", s.catch_up_window, catch_up_window),
        ("timeout", s.timeout, None),
    ):
        if value is None:
            durations[key] = default
            continue
        try:
            durations[key] = duration_seconds(value)
        except ScheduleError as exc:
            errors.append(ScheduleError(key, exc.message))
    if durations.get("timeout") == 0:
        errors.append(ScheduleError("timeout", f"must be positive (got {s.timeout!r})"))
    enums: dict[str, Any] = {}
    for key, enum, value in (
        ("missed", Missed, s.missed),
        ("locking", Locking, s.locking),
        ("overlap", Overlap, s.overlap),
    ):
        try:
            enums[key] = _enum(enum, value)
        except ScheduleError as exc:
            errors.append(ScheduleError(key, exc.message))
    team_problem = check_team(s.team)
    if team_problem:
        errors.append(ScheduleError("team", team_problem))
    for key, value in (("enabled", s.enabled), ("recover", s.recover)):
        if not isinstance(value, bool):
            errors.append(
                ScheduleError(key, f"expected true or false, got {describe_value(value)}")
            )
    config: dict[str, Any] = {}
    if not isinstance(s.config_json, str):
        errors.append(
            ScheduleError("config_json", f"expected a string, got {describe_value(s.config_json)}")
        )
    elif s.config_json.strip():
        if config_must_be_object:
            try:
                value = json.loads(s.config_json)
            except json.JSONDecodeError as exc:
                errors.append(ScheduleError("config_json", f"invalid JSON: {exc}"))
            else:
                if isinstance(value, dict):
                    config = value
                else:
                    errors.append(ScheduleError(
                        "config_json",
                        f"must be a JSON object ({{...}}), got {type(value).__name__} "
                        f"{s.config_json.strip()[:40]!r}",
                    ))
        else:
            config = _json_object(s.config_json) or {}
    if errors or expr is None:
        return None, errors
    job = Job.create(
        expr,
        handler,
        id=job_id,
        missed=enums["missed"],
        catch_up_window=durations["catch_up_window"] or 0.0,
        locking=enums["locking"],
        overlap=enums["overlap"],
        timeout=durations["timeout"],
        jitter=durations["jitter"] or 0.0,
        enabled=s.enabled,
        recover=s.recover,
        config=config,
        description=s.description,
        source=source,
        team=s.team,
    )
    return job, []


def duration_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float | timedelta):
        raise ScheduleError("", f"expected a duration like '30s' or a number of seconds, "
                                f"got {describe_value(value)}")
    try:
        return to_timedelta(value).total_seconds()
    except DurationError as exc:
        text = str(exc).removeprefix("duration: ")
        raise ScheduleError("", text) from None


def _enum(enum: Any, value: object) -> Any:
    if isinstance(value, enum):
        return value
    allowed = [m.value for m in enum]
    if isinstance(value, str) and value.lower() in allowed:
        return enum(value.lower())
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value.lower(), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ScheduleError("", f"{value!r} is not one of {', '.join(allowed)}{hint}")


def _json_object(text: str) -> dict[str, Any] | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def describe_value(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    for t, name in names.items():
        if type(value) is t:
            return f"{name} ({value!r})" if t is not dict else name
    return type(value).__name__


# -- importing handlers and plugins --------------------------------------------------------


def import_object(path: str) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted). Raises ``ValueError``
    with a message that says what is wrong, never a bare ImportError."""
    if not isinstance(path, str):
        raise ValueError(f"expected 'module:attribute' text, got {describe_value(path)}")
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        suggestion = ""
        if not sep and "." in path:
            mod, _, name = path.rpartition(".")
            suggestion = f" (did you mean '{mod}:{name}'?)"
        raise ValueError(
            f"{path!r} is not an import path: expected 'module:attribute', e.g. "
            f"'myapp.tasks:cleanup'{suggestion}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name
                                     or module_name.startswith(exc.name + ".")):
            raise ValueError(
                f"cannot import {path!r}: no module named {exc.name!r}"
            ) from None
        raise ValueError(
            f"cannot import {path!r}: importing {module_name!r} failed: {exception_text(exc)}"
        ) from None
    except Exception as exc:
        raise ValueError(
            f"cannot import {path!r}: importing {module_name!r} failed: {exception_text(exc)}"
        ) from None
    obj: Any = module
    done = module_name
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"cannot import {path!r}: {done!r} has no attribute {part!r}{hint}"
            ) from None
        done = f"{done}.{part}" if done != module_name else f"{module_name}:{part}"
    return obj


def check_handler(fn: object, path: str) -> str | None:
    """The problem with a task handler, or None: it must accept one RunContext."""
    if not callable(fn):
        return f"{path!r} is not callable (it is {type(fn).__name__})"
    if isinstance(fn, type):
        return f"{path!r} is a class; point at a function that takes a RunContext"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(object())
    except TypeError:
        return (
            f"{path!r} cannot be called with one argument (signature {fn.__name__}{sig}); "  # type: ignore[attr-defined]
            "a handler receives a RunContext"
        )
    return None


def exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class EntryPointSpec:
    """One advertised plugin: entry point ``name = value`` of distribution ``dist``."""

    name: str
    value: str
    dist: str | None = None
    load: Callable[[], Any] = field(default=lambda: None, compare=False, repr=False)

    @property
    def origin(self) -> str:
        where = f" of {self.dist}" if self.dist else ""
        return f"entry point {self.name!r} ({self.value}){where}"


def discover_entry_points(group: str = ENTRY_POINT_GROUP) -> list[EntryPointSpec]:
    """The entry points of ``group`` in every installed distribution, sorted by name."""
    specs = []
    for ep in metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        label = f"{dist.name} {dist.version}" if dist is not None else None
        specs.append(EntryPointSpec(ep.name, ep.value, label, ep.load))
    # one distribution can be visible twice on sys.path; keep the first of each name+value
    seen: set[tuple[str, str]] = set()
    unique = []
    for spec in sorted(specs, key=lambda s: (s.name, s.value)):
        if (spec.name, spec.value) not in seen:
            seen.add((spec.name, spec.value))
            unique.append(spec)
    return unique


def instantiate(obj: Any) -> Any:
    """A plugin instance from what an import path or entry point names: a class is
    instantiated with no arguments, an object with ``name``/``schedules``/``run`` is
    used as is. Raises ``ValueError``/``TypeError`` with a message."""
    if isinstance(obj, type):
        missing = [m for m in ("name", "schedules", "run") if not callable(getattr(obj, m, None))]
        if missing:
            raise TypeError(
                f"{obj.__module__}.{obj.__qualname__} is not a ScheduledPlugin: no "
                f"{', '.join(m + '()' for m in missing)}"
            )
        return obj()
    missing = [m for m in ("name", "schedules", "run") if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(
            f"{obj!r} is not a ScheduledPlugin (a class or an object with name(), schedules() "
            f"and run()): no {', '.join(m + '()' for m in missing)}"
        )
    return obj


def plugin_priority(plugin: Any) -> int:
    fn = getattr(plugin, "priority", None)
    value = fn() if callable(fn) else DEFAULT_PRIORITY
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority() must return an int, got {describe_value(value)}")
    return value


def handler_of(plugin: Any, schedule_id: str) -> Handler:
    """What a job of this plugin calls: the task's own handler for the built-in provider,
    else the plugin's ``run``."""
    if isinstance(plugin, CronProvider):
        return plugin.handler_for(schedule_id)
    run: Handler = plugin.run
    return run


def names_near(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
