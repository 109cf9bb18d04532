"""What operators look at, read from the store in a few calls.

Composes the public store operations (``read_states``, ``list_runs``) with each job's
schedule: next fire time, effective override, live lease, last run, and the signature of
a job that runs longer than its period. Used by the CLI; nothing here writes.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cronfleet.cron import NoFireTimeError
from cronfleet.cron.duration import format_duration
from cronfleet.model import Job, JobState, RunRecord, RunStatus, SkipReason
from cronfleet.store.base import Store

__all__ = [
    "JobView",
    "job_views",
    "next_fires",
    "opened",
    "overrun_warning",
    "period_of",
    "state_dict",
]

# how many recent runs the too-long check looks at, and how many overlap skips in them
# make a pattern rather than a one-off
RECENT_RUNS = 20
SKIPS_FOR_WARNING = 2


@contextlib.asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """The store, opened for the block and closed after it."""
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def next_fires(job: Job, after: datetime, n: int) -> list[datetime]:
    """Up to ``n`` fire times after ``after`` (fewer if the schedule ends)."""
    out: list[datetime] = []
    t = after
    for _ in range(n):
        try:
            t = job.schedule.next(t)
        except NoFireTimeError:
            break
        out.append(t)
    return out


def period_of(job: Job, now: datetime) -> float | None:
    """Seconds between slots: the interval, or the shortest gap among the next few fires
    of a cron schedule."""
    if job.period:
        return job.period
    times = next_fires(job, now, 5)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    return min(gaps) if gaps else None


def state_dict(state: JobState | None, now: datetime) -> dict[str, Any]:
    """The override and lease of a job state row, JSON-ready."""

    def iso(d: datetime | None) -> str | None:
        return None if d is None else d.isoformat()

    if state is None:
        return {"override": None, "lease": None}
    override = None
    if state.enabled_override is not None:
        expired = state.override_until is not None and state.override_until <= now
        override = {
            "enabled": state.enabled_override,
            "by": state.override_by,
            "at": iso(state.override_at),
            "note": state.override_note,
            "until": iso(state.override_until),
            "expired": expired,
        }
    lease = None
    if state.lease_live(now):
        lease = {"holder": state.lease_holder, "until": iso(state.lease_until),
                 "token": state.lease_token}
    return {"override": override, "lease": lease}


@dataclass
class JobView:
    """One job as an operator sees it."""

    job: Job
    state: JobState | None
    last: RunRecord | None
    next_fire: datetime | None

    def enabled(self, now: datetime) -> bool:
        if self.state is None:
            return self.job.enabled
        return self.state.effective_enabled(self.job.enabled, now)

    def lease_holder(self, now: datetime) -> str | None:
        if self.state is not None and self.state.lease_live(now):
            return self.state.lease_holder
        return None

    def override_active(self, now: datetime) -> bool:
        s = self.state
        return (
            s is not None
            and s.enabled_override is not None
            and (s.override_until is None or s.override_until > now)
        )

    def to_dict(self, now: datetime) -> dict[str, Any]:
        job = self.job
        return {
            "id": job.id,
            "source": job.source,
            "schedule": job.schedule.expr,
            "timezone": str(job.schedule.tz),
            "description": job.description,
            "when": job.schedule.describe(),
            "declared_enabled": job.enabled,
            "enabled": self.enabled(now),
            "next_run": None if self.next_fire is None else self.next_fire.isoformat(),
            "last_run": None if self.last is None else {
                "id": self.last.id,
                "status": self.last.status.value,
                "reason": self.last.reason,
                "slot": self.last.slot.isoformat(),
                "finished_at": None if self.last.finished_at is None
                else self.last.finished_at.isoformat(),
                "error": self.last.error,
            },
            **state_dict(self.state, now),
        }


async def job_views(store: Store, jobs: Sequence[Job], now: datetime) -> list[JobView]:
    """Every job's view: one read of all state rows, then the newest run of each job."""
    ids = [j.id for j in jobs]
    states = await store.read_states(ids) if ids else {}
    views = []
    for job in jobs:
        runs = await store.list_runs(job.id, limit=1)
        fires = next_fires(job, now, 1)
        views.append(JobView(job, states.get(job.id), runs[0] if runs else None,
                             fires[0] if fires else None))
    return views


def overrun_warning(job: Job, runs: Sequence[RunRecord], now: datetime | None = None) -> str | None:
    """A warning when recent runs last longer than the job's period.

    The signature is a series of ``already_executing`` skips (a slot came due while the
    previous run still held the lease), or a run that took longer than the period.
    """
    period = period_of(job, now or datetime.now(UTC))
    if not period:
        return None
    skips = sum(  # a manual trigger refused while a run holds the lease says nothing
        1 for r in runs
        if r.status is RunStatus.SKIPPED and r.reason == SkipReason.ALREADY_EXECUTING.value
        and not r.manual
    )
    durations = [d for r in runs if (d := r.duration) is not None]
    longest = max(durations, default=0.0)
    if skips < SKIPS_FOR_WARNING and longest <= period:
        return None
    facts = []
    if skips:
        facts.append(f"{skips} of its last {len(runs)} runs were slots skipped because the "
                     "previous run still held the lease (already_executing)")
    if longest:
        facts.append(f"runs took up to {_secs(longest)}")
    return (
        f"job {job.id!r} runs longer than its period of {_secs(period)}: "
        + "; ".join(facts)
        + ". Lengthen the period, speed the job up, or set overlap = \"queue_one\" if "
        "every slot must run."
    )


def _secs(seconds: float) -> str:
    from datetime import timedelta

    if seconds < 60:
        return f"{seconds:.1f}s" if seconds != int(seconds) else f"{int(seconds)}s"
    return format_duration(timedelta(seconds=round(seconds)))
