"""Moved to :mod:`cronfleet.runtime` (kept importable): the facade is
:mod:`cronfleet.runtime.scheduler`, its parts live next to it."""

from cronfleet.runtime.scheduler import DEFAULT_STORE, Scheduler, new_instance_id
from cronfleet.runtime.stats import DURATION_BUCKETS, LATENESS_BUCKETS, Histogram

__all__ = [
    "DEFAULT_STORE",
    "DURATION_BUCKETS",
    "LATENESS_BUCKETS",
    "Histogram",
    "Scheduler",
    "new_instance_id",
]
