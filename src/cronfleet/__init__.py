"""cronfleet: each slot of each job fires exactly once across a fleet of processes.

The public API is what this module exports; everything else may change between releases.
"""

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
from cronfleet.jobs.http import HttpJob
from cronfleet.model import (
    Job,
    JobState,
    Locking,
    Missed,
    Overlap,
    RunContext,
    RunRecord,
    RunStatus,
    SkipReason,
    TriggeredBy,
)
from cronfleet.plugins import Schedule, ScheduledPlugin
from cronfleet.scheduler import Scheduler
from cronfleet.store import SQLiteStore, Store, open_store

__version__ = "0.1.0.dev0"

__all__ = [
    "AlreadyExecuting",
    "ConfigError",
    "CronfleetError",
    "DuplicateJob",
    "FakeClock",
    "HttpJob",
    "Job",
    "JobNotFound",
    "JobState",
    "Locking",
    "Missed",
    "Overlap",
    "RunContext",
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
