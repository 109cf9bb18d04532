"""The claim requests the runtime sends to the store, each built by one named function.

Every :class:`~cronfleet.store.base.Dispatch` the runtime makes comes from here:
``scheduled`` (a slot at its time, or a catch-up run), ``early`` (a plain slot claimed
shortly before its time), ``missed`` (a slot recorded as missed by the catch-up policy),
``manual`` (a run requested now) and ``recovery`` (re-running a slot whose run was
interrupted). Combinations no caller may make (an early claim without a lease, a manual
run that claims a slot) cannot be expressed through them.

They use the keyword fields of ``Dispatch``; when the store gains a request ``kind`` and
named constructors, these functions are the one place to switch over.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from cronfleet.clock import from_ts
from cronfleet.model import Job, Locking, Overlap, RunRecord, SkipReason, TriggeredBy
from cronfleet.runtime.planning import catchup_banner, jitter_delay
from cronfleet.store.base import Dispatch

__all__ = ["early", "manual", "missed", "recovery", "scheduled"]


def _busy_skip(item: Dispatch, instance_id: str) -> Dispatch:
    item.skip_reason = SkipReason.ALREADY_EXECUTING.value
    item.result = {"skipped": True, "reason": item.skip_reason}
    item.logs.append(
        f"Skipped: the previous run has not finished (lease held by {instance_id})"
    )
    return item


def scheduled(
    job: Job,
    slot: float,
    now: float,
    *,
    catchup: bool = False,
    queued: Container[str] = (),
    running: Mapping[str, int] | None = None,
    instance_id: str = "",
    wait_if_busy: bool = True,
) -> Dispatch:
    """A slot run at its time (or, with ``catchup``, late under the catch-up policy).

    ``queued``: jobs with a run waiting for the lease in this process; ``running``: runs
    in progress in this process per job (node-local jobs decide their overlap here)."""
    queued_now = job.id in queued
    local = job.locking is Locking.NODE_LOCAL
    delay = jitter_delay(job.id, slot, job.jitter) if job.jitter else 0.0
    lease = job.overlap is not Overlap.ALLOW and not local
    item = Dispatch(
        job_id=job.id,
        slot=slot,
        triggered_by=TriggeredBy.CATCHUP if catchup else TriggeredBy.SCHEDULE,
        claim="none" if local else "slot",
        lease=lease,
        hold=job.lease_seconds + delay,
        defer=delay > 0,
        record=not lease or delay > 0,
        wait_if_busy=wait_if_busy and job.overlap is Overlap.QUEUE_ONE and not queued_now,
        is_catchup=catchup,
        logs=[catchup_banner(slot, now + delay)] if catchup else [],
    )
    if local and job.overlap is not Overlap.ALLOW and running and running.get(job.id):
        if job.overlap is Overlap.QUEUE_ONE and not queued_now:
            item.defer = True
        else:
            _busy_skip(item, instance_id)
    return item


def early(job: Job, slot: float, now: float) -> Dispatch:
    """A plain leased slot claimed before its time: kept only together with the lease,
    held until the slot plus the usual lease length; its row follows in the group commit."""
    return Dispatch(
        job_id=job.id,
        slot=slot,
        triggered_by=TriggeredBy.SCHEDULE,
        lease=True,
        hold=job.lease_seconds + max(slot - now, 0.0),
        record=False,
        early=True,
    )


def missed(job: Job, slot: float, why: str, result: Any = None) -> Dispatch:
    """A slot claimed and recorded ``skipped`` / ``missed`` (catch-up policy)."""
    return Dispatch(
        job_id=job.id,
        slot=slot,
        triggered_by=TriggeredBy.CATCHUP,
        claim="none" if job.locking is Locking.NODE_LOCAL else "slot",
        skip_reason=SkipReason.MISSED.value,
        is_catchup=True,
        result=result,
        logs=[
            f"Skipped: slot {from_ts(slot).isoformat()} {why} (policy {job.missed.name}, "
            f"window {job.catch_up_window:g}s)"
        ],
    )


def manual(
    job: Job,
    now: float,
    *,
    by: str,
    triggered_by: TriggeredBy = TriggeredBy.MANUAL,
    local_busy: bool = False,
    instance_id: str = "",
) -> Dispatch:
    """A run requested now: a fencing token, no slot claim."""
    local = job.locking is Locking.NODE_LOCAL
    item = Dispatch(
        job_id=job.id,
        slot=now,
        triggered_by=triggered_by,
        claim="none" if local else "token",
        lease=job.overlap is not Overlap.ALLOW and not local,
        hold=job.lease_seconds,
        manual=True,
        logs=[f"Manual run requested by {by}"],
    )
    if local and job.overlap is not Overlap.ALLOW and local_busy:
        _busy_skip(item, instance_id)
    return item


def recovery(job: Job, run: RunRecord) -> Dispatch:
    """Re-run the slot of ``run``, interrupted when its instance died: its claim is
    replaced by one with a new, higher token."""
    return Dispatch(
        job_id=job.id,
        slot=run.slot.timestamp(),
        triggered_by=TriggeredBy.RECOVERY,
        claim="slot",
        lease=job.overlap is not Overlap.ALLOW,
        hold=job.lease_seconds,
        is_recovery=True,
        is_catchup=run.is_catchup,
        reclaim_token=run.fencing_token,
        logs=[
            f"♻ Recovery run of slot {run.slot.isoformat()}: run {run.id} on "
            f"{run.instance_id} was interrupted"
        ],
    )
