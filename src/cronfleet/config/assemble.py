"""Assembling plugins and tasks into jobs: import each plugin, hand the ``[[tasks]]`` to
the provider, validate every schedule, resolve schedule-id conflicts by priority; the
result is a :class:`Loaded` (what :meth:`cronfleet.config.Config.load` returns)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cronfleet import plugins as _plugins
from cronfleet.config.env import timers_from_env
from cronfleet.config.problems import Problem
from cronfleet.model import Job
from cronfleet.plugins import (
    BUILTIN_PROVIDER,
    CronProvider,
    EntryPointSpec,
    Schedule,
    ScheduleError,
    check_name,
    exception_text,
    import_object,
    schedule_to_job,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.config.settings import Config, PluginRef
    from cronfleet.runtime.scheduler import Scheduler

log = logging.getLogger("cronfleet.config")


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
    # the fleet's job registry (cronfleet.runtime.registry.FleetJob by id) when read, and
    # the ids of ``jobs`` that come from it (declared by other processes, not here)
    fleet: dict[str, Any] = field(default_factory=dict)
    remote: set[str] = field(default_factory=set)
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
        connect_timeout: float | None = None,
        role: str = "all",
    ) -> Scheduler:
        """A :class:`~cronfleet.Scheduler` on the configured store with every job added.
        ``timers=None`` reads ``CRONFLEET_SCHEDULER`` (``0`` = no timers, default on)."""
        from cronfleet.runtime.scheduler import Scheduler

        if timers is None:
            from_env = timers_from_env(env)
            timers = True if from_env is None else from_env
        c = self.config
        s = Scheduler(
            c.store,
            timezone=c.timezone,
            catch_up_window=c.catch_up_window,
            shutdown_grace=c.shutdown_grace,
            connect_timeout=c.connect_timeout if connect_timeout is None else connect_timeout,
            instance_ttl=c.instance_ttl,
            role=role,
            run_retention=c.run_retention,
            runs_per_job=c.runs_per_job,
            metrics_job_label=c.metrics_job_label,
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


class Assembler:
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
            if task is not None and schedule is task.schedule and task.job_fields is not None:
                # a [[tasks]] entry declared as is: validated once, when the file was read
                job: Job | None = Job(handler=handler, source=task.location,
                                      **{**task.job_fields, "id": job_id,
                                         "config": dict(task.job_fields["config"])})
                errors: list[ScheduleError] = []
            else:
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
