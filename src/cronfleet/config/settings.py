"""The validated configuration (:class:`Config`); what loading it gives
(:class:`~cronfleet.config.assemble.Loaded`: the jobs, the plugins, the problems of
plugins that failed) is built by :mod:`cronfleet.config.assemble`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronfleet.config.assemble import Assembler, Loaded, LoadedPlugin
from cronfleet.config.env import timers_from_env
from cronfleet.config.keys import DEFAULT_STORE
from cronfleet.config.problems import ConfigError, Problem
from cronfleet.plugins import BUILTIN_PROVIDER, EntryPointSpec, Task
from cronfleet.spec import DEFAULT_CATCH_UP_WINDOW, DEFAULT_INSTANCE_TTL

__all__ = ["Config", "Loaded", "LoadedPlugin", "PluginRef", "timers_from_env"]

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
    instance_ttl: float = DEFAULT_INSTANCE_TTL
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
        loaded = Assembler(self, entry_points).run()
        if strict and (loaded.problems or self.unbound):
            loaded.cleanup()
            raise ConfigError([*self.unbound, *loaded.problems])
        return loaded
