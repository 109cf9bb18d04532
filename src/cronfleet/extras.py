"""The optional parts of cronfleet and the one check made before using one.

The core (the library, the SQLite store, the CLI) needs only tzdata, click, rich and
cron-descriptor. Everything else is an extra of the ``cronfleet`` distribution; the
table below says which modules each extra brings (keep it in step with
``[project.optional-dependencies]`` in pyproject.toml and docs/configuration.md).

Every place that imports an optional module calls :func:`require` first, so a missing
extra is one line naming the ``pip install`` to run, never a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util

from cronfleet.errors import CronfleetError

__all__ = ["EXTRAS", "MissingExtra", "available", "require"]

#: extra -> (what it is for, the top-level modules it installs)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "postgres": ("the PostgreSQL store", ("psycopg", "psycopg_pool")),
    "redis": ("the Redis store", ("redis",)),
    "http": ("HTTP jobs, notifications and the secret vault", ("httpx", "cryptography")),
    "server": ("the REST API, the dashboard and /metrics",
               ("fastapi", "uvicorn", "prometheus_client", "httpx", "cryptography")),
    "otel": ("OpenTelemetry traces", ("opentelemetry", "opentelemetry.sdk")),
}


class MissingExtra(CronfleetError, ImportError):
    """An optional part of cronfleet is used but its extra is not installed."""

    def __init__(self, extra: str, module: str, feature: str | None = None) -> None:
        self.extra = extra
        self.module = module
        what = feature or EXTRAS[extra][0]
        super().__init__(
            f"{what} needs the {extra!r} extra (module {module!r} is missing): "
            f"pip install 'cronfleet[{extra}]'"
        )


def _missing(extra: str) -> str | None:
    for module in EXTRAS[extra][1]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):  # a parent package is missing
            return module
    return None


def available(extra: str) -> bool:
    """Whether every module of ``extra`` is installed (nothing is imported)."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; extras: {', '.join(EXTRAS)}")
    return _missing(extra) is None


def require(extra: str, feature: str | None = None) -> None:
    """Raise :class:`MissingExtra` (one line: what needs it, ``pip install …``) unless
    every module of ``extra`` is installed. ``feature`` names what needs it, when more
    precise than the extra's own description."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; extras: {', '.join(EXTRAS)}")
    module = _missing(extra)
    if module is not None:
        raise MissingExtra(extra, module, feature)
