"""Moved to :mod:`cronfleet.runtime.planning` (kept importable)."""

from cronfleet.runtime.planning import (
    RECORD_CAP,
    RUN_ALL_CAP,
    SlotPlan,
    catchup_banner,
    jitter_delay,
    plan_slots,
)

__all__ = ["RECORD_CAP", "RUN_ALL_CAP", "SlotPlan", "catchup_banner", "jitter_delay", "plan_slots"]
