"""Every setting from the environment: ``CRONFLEET_`` + the option's name.

The ONE table of environment variables (:data:`ENV_SETTINGS`) and the one place that
applies them (:func:`apply_env`). Precedence, everywhere: a command-line flag, else the
environment, else the file, else the default -- the file is read first, the environment
then replaces what it names (through the same validation as the file's keys), and the
commands give a flag the last word (``pick``).

Names: a ``[scheduler]`` key ``k`` is ``CRONFLEET_K`` (``CRONFLEET_TIMEZONE``), an
``[api]`` key is ``CRONFLEET_API_K`` (``CRONFLEET_API_PORT``). Lists
(``plugins``) are comma-separated; booleans are ``1/true/yes/on`` or ``0/false/no/off``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cronfleet.config.keys import _FALSE, _TRUE, API_KEYS, SCHEDULER_ENV, SCHEDULER_KEYS
from cronfleet.config.locate import Locator
from cronfleet.config.problems import ConfigError, Problem

__all__ = ["ENV_SETTINGS", "EnvSetting", "apply_env", "env_name", "pick"]

T = TypeVar("T")


@dataclass(frozen=True)
class EnvSetting:
    table: str  # "scheduler" or "api"
    key: str
    kind: str  # "text", "bool", "int", "list"

    @property
    def name(self) -> str:
        return env_name(self.table, self.key)


def env_name(table: str, key: str) -> str:
    """The environment variable of ``[table] key``."""
    prefix = "CRONFLEET_" if table == "scheduler" else f"CRONFLEET_{table.upper()}_"
    return prefix + key.upper()


_KINDS = {
    "entry_points": "bool", "allow_private_targets": "bool", "enabled": "bool",
    "metrics_job_label": "bool", "allow_command_jobs": "bool",
    "runs_per_job": "int", "port": "int", "metrics_port": "int", "max_request_body": "int",
    "plugins": "list", "private_targets": "list", "forwarded_allow_ips": "list",
}

#: every setting the environment can give, in the order of the docs' table
ENV_SETTINGS: tuple[EnvSetting, ...] = tuple(
    [EnvSetting("scheduler", k, _KINDS.get(k, "text")) for k in SCHEDULER_KEYS]
    + [EnvSetting("api", k, _KINDS.get(k, "text")) for k in API_KEYS]
)


def _value(setting: EnvSetting, raw: str) -> Any:
    """The TOML value an environment text stands for (checked by the file's rules)."""
    text = raw.strip()
    if setting.kind == "bool":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else text
    if setting.kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if setting.kind == "list":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def env_tables(env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, Any]]]:
    """``{table: {key: (variable name, value)}}`` for each variable set and not empty."""
    out: dict[str, dict[str, tuple[str, Any]]] = {"scheduler": {}, "api": {}}
    for setting in ENV_SETTINGS:
        if setting.key == "store":  # CRONFLEET_STORE: read as given (reader._apply_store_env)
            continue
        raw = env.get(setting.name)
        if raw is None or not raw.strip():
            continue
        out[setting.table][setting.key] = (setting.name, _value(setting, raw))
    return out


def apply_env(reader: Any, config: Any, env: Mapping[str, str]) -> None:
    """Replace in ``config`` what the environment names, validated by ``reader``'s own
    ``read_scheduler`` / ``read_api`` (a bad value is a problem naming the variable)."""
    tables = env_tables(env)
    for table, values in tables.items():
        if not values:
            continue
        names = {key: name for key, (name, _) in values.items()}
        doc = {key: value for key, (_, value) in values.items()}
        sub = _EnvReader(reader, table, names, env)
        if table == "scheduler":
            sub.read_scheduler(doc, config)
        else:
            sub.read_api(doc, config)
        for key in doc:
            if key not in sub.bad:
                config.origins[_attr(table, key)] = names[key]


def _attr(table: str, key: str) -> str:
    return key if table == "scheduler" else f"api_{key}"


class _EnvReader:
    """Wraps a config Reader: the same checks, problems named by the variable."""

    def __init__(self, reader: Any, table: str, names: dict[str, str],
                 env: Mapping[str, str]) -> None:
        self._reader = reader
        self._table = table
        self._names = names
        self._env = env
        self.bad: set[str] = set()
        self.loc = Locator("")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def read_scheduler(self, doc: dict[str, Any], config: Any) -> None:
        type(self._reader).read_scheduler(self, doc, config)

    def read_api(self, doc: dict[str, Any], config: Any) -> None:
        type(self._reader).read_api(self, doc, config)

    def where(self, *args: Any) -> None:
        return None

    def key_position(self, *args: Any) -> None:
        return None

    def read_plugin_refs(self, refs: list[str], config: Any) -> None:
        type(self._reader).read_plugin_refs(self, refs, config)

    def problem(self, message: str, *, key: str | None = None, **_: Any) -> None:
        # "scheduler: port: expected ..." -> "CRONFLEET_API_PORT='x': expected ..."
        prefix = f"{self._table}: {key}: " if key else f"{self._table}: "
        detail = message[len(prefix):] if message.startswith(prefix) else message
        name = self._names.get(key or "", "CRONFLEET_*")
        if key:
            self.bad.add(key)
        raw = self._env.get(name, "")
        self._reader.problems.append(Problem(f"{name}={raw!r}: {detail}", key=key))

    def warn(self, message: str, **_: Any) -> None:
        self._reader.warnings.append(Problem(message))


def pick(flag: T | None, flag_name: str, config: Any, attr: str) -> tuple[T, str]:
    """A command-line flag if given, else the configuration's value (environment, file
    or default) -- with where it came from, for the start-up log."""
    if flag is not None:
        return flag, flag_name
    value: T = getattr(config, attr)
    return value, config.origins.get(attr, "default")


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
