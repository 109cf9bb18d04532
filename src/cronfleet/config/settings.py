"""The validated configuration (:class:`Config`) and what loading it gives
(:class:`Loaded`: the jobs, the plugins, the problems of plugins that failed)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronfleet.config.keys import _FALSE, _TRUE, DEFAULT_STORE, SCHEDULER_ENV
from cronfleet.config.problems import ConfigError, Problem
from cronfleet.model import DEFAULT_CATCH_UP_WINDOW, Job
from cronfleet.plugins import BUILTIN_PROVIDER, EntryPointSpec, Task

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.scheduler import Scheduler

log = logging.getLogger("cronfleet.config")

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
    # the module whose functions, named after the task ids, run the tasks without a handler
    handlers: str | None = None
    # tasks the built-in provider cannot run yet (no handler, no handlers module): a warning
    # for `cronfleet check`, a problem for `cronfleet run` (Config.load(strict=True))
    unbound: list[Problem] = field(default_factory=list)
    plugins: list[PluginRef] = field(default_factory=list)
    entry_points: bool = True
    shutdown_grace: float = 30.0
    connect_timeout: float | None = None  # start-up waits for the store; None: forever
    instance_ttl: float = 15.0
    run_retention: float = 30 * 86400.0
    runs_per_job: int = 1000
    metrics_job_label: bool = True
    allow_private_targets: bool = False
    api_enabled: bool = True
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    api_metrics: str = "public"
    api_ready_max_overdue: float = 30.0
    api_private_targets: list[str] = field(default_factory=list)
    api_max_request_body: int = 1024 * 1024
    api_allow_command_jobs: bool = False
    api_forwarded_allow_ips: list[str] | None = None  # None: uvicorn's (loopback)
    log_level: str = "info"
    log_format: str = "text"
    metrics_port: int | None = None
    # where each setting came from when not the default: attribute -> file or variable
    origins: dict[str, str] = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    source_lines: list[str] = field(default_factory=list, repr=False)
    _http_runtime: Any = field(default=None, repr=False)
    _command_runtime: Any = field(default=None, repr=False)

    def http_runtime(self) -> Any:
        """The :class:`~cronfleet.jobs.http.HttpRuntime` shared by this file's HTTP tasks:
        one pooled client, the vault of the configured store, the SSRF default of config
        tasks and the private targets of API jobs (``[api] private_targets``)."""
        if self._http_runtime is None:
            from cronfleet.jobs.http import HttpRuntime, TargetPolicy

            self._http_runtime = HttpRuntime(
                store=self.store, allow_private_targets=self.allow_private_targets,
                api_private_targets=TargetPolicy.parse(self.api_private_targets),
            )
        return self._http_runtime

    def command_runtime(self) -> Any:
        """The :class:`~cronfleet.jobs.command.CommandRuntime` shared by this file's
        command tasks: the vault of the configured store and one warden process."""
        if self._command_runtime is None:
            from cronfleet.jobs.command import CommandRuntime

            self._command_runtime = CommandRuntime(store=self.store)
        return self._command_runtime

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
        from cronfleet.config.assemble import Assembler

        loaded = Assembler(self, entry_points).run()
        if strict and (loaded.problems or self.unbound):
            loaded.cleanup()
            raise ConfigError([*self.unbound, *loaded.problems])
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
