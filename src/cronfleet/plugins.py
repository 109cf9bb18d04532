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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from importlib import metadata
from typing import Any

from cronfleet import spec
from cronfleet.cron import Exclusion
from cronfleet.model import (
    DEFAULT_TEAM,
    Handler,
    Job,
    Locking,
    Missed,
    NotifyPolicy,
    Overlap,
    RetryPolicy,
    RunContext,
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

# a schedule id, task id or plugin name is one part of a job id (see cronfleet.spec)


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: plain data, validated by the runtime when the plugin loads.

    ``cron``: a cron expression, macro or interval (see docs/cron.md), or a list of them
    (their instants united); ``at`` a one-off instant instead; ``start``/``end`` bounds;
    ``exclude`` the exclusions (``except`` in a config task). ``timezone`` and
    ``catch_up_window`` default to the ``[scheduler]`` values. Durations are ``"30s"``-style
    text or seconds. ``retry`` (``{"attempts": 3, "backoff": "exponential", "delay": "5s"}``),
    ``notify`` and ``auto_pause_after`` mean what they mean for a ``[[tasks]]`` entry (see
    docs/configuration.md); every field is checked by :func:`cronfleet.spec.validate_job`.
    ``config_json`` is an opaque string shown to operators; when it holds
    a JSON object the handler receives it parsed as ``ctx.config``.
    """

    id: str
    cron: str | Sequence[str] | None = None
    description: str = ""
    timezone: str | None = None
    jitter: str | float = 0
    missed: Missed | str = Missed.RUN_ONCE
    catch_up_window: str | float | None = None
    locking: Locking | str = Locking.REQUIRE_GLOBAL
    overlap: Overlap | str = Overlap.SKIP
    timeout: str | float | None = None
    enabled: bool = True
    config_json: str = ""
    recover: bool = False
    team: str = DEFAULT_TEAM
    retry: RetryPolicy | Mapping[str, Any] | None = None
    notify: NotifyPolicy | Mapping[str, Any] | None = None
    auto_pause_after: int | None = None
    max_instances: int = 1
    at: str | datetime | date | None = None
    start: str | datetime | date | None = None
    end: str | datetime | date | None = None
    exclude: Sequence[str | Exclusion] | str | None = None

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
    ``location`` is ``file:line`` of the entry, for messages. ``job_fields``: the entry's
    validated fields (:meth:`cronfleet.spec.JobSpec.job_fields`): a provider that declares
    the task's own ``schedule`` gets its job from them, without validating it again.
    """

    schedule: Schedule
    handler: Handler | None = None
    handler_path: str | None = None
    location: str = ""
    job_fields: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


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
    """One invalid field of a schedule. ``key`` names the field (``cron``, ``retry`` ...);
    for cron syntax errors ``column`` is the 1-based column inside the expression."""

    def __init__(self, key: str, message: str, column: int | None = None) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
        self.column = column


def check_name(value: object, what: str) -> str | None:
    """The problem with a task id, schedule id or plugin name, or None."""
    return spec.check_name(value, what)


# spec key -> Schedule field (spec.FIELDS), where they differ
_FROM_SPEC = {f.key: f.schedule for f in spec.FIELDS if f.schedule not in (None, f.key)}
# the spec keys a Schedule has (no request, no command: its plugin runs it)
SCHEDULE_SPEC_KEYS = tuple(f.key for f in spec.FIELDS if f.schedule is not None)


def schedule_error(problem: spec.FieldProblem) -> ScheduleError:
    """A spec problem in a Schedule's terms: ``retry.attempts`` -> key ``retry``, message
    ``attempts: ...``; ``schedule`` -> ``cron``."""
    top, _, rest = problem.key.partition(".")
    name, index = spec.split_index(top)
    key = _FROM_SPEC.get(name, name) + index
    message = problem.message
    if rest and not message.startswith("unknown key"):
        message = f"{rest}: {message}"
    return ScheduleError(key, message, problem.column)


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
    """Validate every field of ``schedule`` (through :func:`cronfleet.spec.validate_job`)
    and build its :class:`Job`.

    Returns the job, or ``None`` with one :class:`ScheduleError` per invalid field (all of
    them, not just the first). ``config_must_be_object``: a ``config_json`` that is not a
    JSON object is an error (config tasks) rather than passed on as ``{}`` (plugins).
    """
    errors: list[ScheduleError] = []
    fields: dict[str, Any] = {f.key: getattr(schedule, f.schedule) for f in spec.FIELDS
                              if f.schedule is not None and f.key != "config"}
    try:
        fields["config"] = spec.config_from_json(schedule.config_json,
                                                 strict=config_must_be_object)
    except spec.FieldError as exc:
        errors.append(ScheduleError("config_json", exc.message))
    result, problems = spec.validate_job(fields, keys=SCHEDULE_SPEC_KEYS, timezone=timezone,
                                         catch_up_window=catch_up_window)
    errors += [schedule_error(p) for p in problems]
    if errors or result is None:
        return None, errors
    job = Job(handler=handler, source=source,
              **{**result.job_fields(), "id": job_id})
    return job, []


def duration_seconds(value: object) -> float:
    try:
        return spec.duration(value)
    except spec.FieldError as exc:
        raise ScheduleError("", exc.message) from None


def _json_object(text: str) -> dict[str, Any] | None:
    return spec.config_from_json(text, strict=False) if isinstance(text, str) else None


describe_value = spec.describe_value


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
    for ep_spec in sorted(specs, key=lambda s: (s.name, s.value)):
        if (ep_spec.name, ep_spec.value) not in seen:
            seen.add((ep_spec.name, ep_spec.value))
            unique.append(ep_spec)
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
