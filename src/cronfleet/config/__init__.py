"""``cronfleet.toml``: the ``[scheduler]`` table and the ``[[tasks]]``, validated up front.

:func:`load_config` reads and validates the file -- keys, types, cron syntax, time zones,
durations, handler import paths, duplicate ids -- and raises one :class:`ConfigError`
listing *every* problem, each naming the file, line, column, task id and key.
:meth:`Config.load` then imports the plugins, hands the tasks to the provider, validates
every schedule and resolves schedule-id conflicts by priority; :meth:`Loaded.scheduler`
builds the :class:`~cronfleet.Scheduler`. Nothing fires before all of that succeeded.
:func:`check_config` does all of it without raising (``cronfleet check``).

One module per concern: ``keys`` (the key tables), ``problems``, ``locate`` (positions in
the text), ``settings`` (:class:`Config`, :class:`Loaded`), ``reader`` (the file,
``[scheduler]``, ``[api]``), ``tasks`` (``[[tasks]]`` mapped onto :mod:`cronfleet.spec`),
``assemble`` (plugins and providers into jobs) and ``check``.
"""

from cronfleet.config.check import CheckReport, check_config
from cronfleet.config.keys import (
    CONFIG_ENV,
    DEFAULT_CONFIG,
    SCHEDULER_ENV,
    STORE_ENV,
)
from cronfleet.config.problems import ConfigError, Problem
from cronfleet.config.reader import load_config
from cronfleet.config.settings import Config, Loaded, LoadedPlugin, PluginRef, timers_from_env

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG",
    "SCHEDULER_ENV",
    "STORE_ENV",
    "CheckReport",
    "Config",
    "ConfigError",
    "Loaded",
    "LoadedPlugin",
    "PluginRef",
    "Problem",
    "check_config",
    "load_config",
    "timers_from_env",
]
