"""cronfleet: each slot of each job fires exactly once across a fleet of processes.

The public API is what this module exports; everything else may change between releases.
Names are imported on first use (PEP 562), so ``import cronfleet`` -- and the CLI's
schedule tools -- load neither the stores nor httpx nor cryptography.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronfleet.clock import FakeClock, SystemClock
    from cronfleet.config import ConfigError, load_config
    from cronfleet.errors import (
        AlreadyExecuting,
        CronfleetError,
        DuplicateJob,
        JobNotFound,
        StoreError,
        StoreUnavailable,
    )
    from cronfleet.jobs.command import CommandJob
    from cronfleet.jobs.http import HttpJob
    from cronfleet.model import (
        Job,
        JobState,
        Locking,
        Missed,
        NotifyPolicy,
        Overlap,
        RetryPolicy,
        RunContext,
        RunRecord,
        RunStatus,
        SkipReason,
        TriggeredBy,
    )
    from cronfleet.plugins import Schedule, ScheduledPlugin
    from cronfleet.runtime.events import RunFinished
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.store import SQLiteStore, Store, open_store
    from cronfleet.store.memory import MemoryStore

__version__ = "0.1.0.dev0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "FakeClock": "cronfleet.clock",
    "SystemClock": "cronfleet.clock",
    "ConfigError": "cronfleet.config",
    "load_config": "cronfleet.config",
    "AlreadyExecuting": "cronfleet.errors",
    "CronfleetError": "cronfleet.errors",
    "DuplicateJob": "cronfleet.errors",
    "JobNotFound": "cronfleet.errors",
    "StoreError": "cronfleet.errors",
    "StoreUnavailable": "cronfleet.errors",
    "CommandJob": "cronfleet.jobs.command",
    "HttpJob": "cronfleet.jobs.http",
    "Job": "cronfleet.model",
    "JobState": "cronfleet.model",
    "Locking": "cronfleet.model",
    "Missed": "cronfleet.model",
    "NotifyPolicy": "cronfleet.model",
    "Overlap": "cronfleet.model",
    "RetryPolicy": "cronfleet.model",
    "RunContext": "cronfleet.model",
    "RunRecord": "cronfleet.model",
    "RunStatus": "cronfleet.model",
    "SkipReason": "cronfleet.model",
    "TriggeredBy": "cronfleet.model",
    "Schedule": "cronfleet.plugins",
    "ScheduledPlugin": "cronfleet.plugins",
    "RunFinished": "cronfleet.runtime.events",
    "Scheduler": "cronfleet.runtime.scheduler",
    "MemoryStore": "cronfleet.store.memory",
    "SQLiteStore": "cronfleet.store",
    "Store": "cronfleet.store",
    "open_store": "cronfleet.store",
}

__all__ = [
    "AlreadyExecuting",
    "CommandJob",
    "ConfigError",
    "CronfleetError",
    "DuplicateJob",
    "FakeClock",
    "HttpJob",
    "Job",
    "JobNotFound",
    "JobState",
    "Locking",
    "MemoryStore",
    "Missed",
    "NotifyPolicy",
    "Overlap",
    "RetryPolicy",
    "RunContext",
    "RunFinished",
    "RunRecord",
    "RunStatus",
    "SQLiteStore",
    "Schedule",
    "ScheduledPlugin",
    "Scheduler",
    "SkipReason",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "TriggeredBy",
    "__version__",
    "load_config",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cronfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup skips this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
