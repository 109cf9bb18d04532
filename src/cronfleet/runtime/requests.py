"""The claim requests the runtime sends to the store, each built by one named function.

Every :class:`~cronfleet.store.base.Dispatch` the runtime makes comes from here, and each
goes through the store's named constructor of its kind (:class:`DispatchKind`):
``scheduled`` (a slot at its time, or a catch-up run: ``Dispatch.scheduled``, or
``Dispatch.local`` for a node-local job), ``early`` (a plain slot claimed shortly before
its time: ``Dispatch.early_claim``), ``missed`` (a slot recorded as missed by the
catch-up policy: ``Dispatch.missed``), ``manual`` (a run requested now:
``Dispatch.manual_run``) and ``recovery`` (re-running a slot whose run was interrupted:
``Dispatch.recovery``). Combinations no caller may make (an early claim without a lease,
a manual run that claims a slot) cannot be expressed through them. The skip wordings come
from :mod:`cronfleet.store.ledger`, their one home.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from cronfleet.clock import from_ts
from cronfleet.model import Job, Locking, Overlap, RunRecord, SkipReason, TriggeredBy
from cronfleet.runtime.planning import catchup_banner, jitter_delay
from cronfleet.store.base import Dispatch
from cronfleet.store.ledger import (
    ALREADY_EXECUTING,
    busy_log,
    busy_result,
    missed_log,
    overloaded_log,
)

__all__ = [
    "backfill", "early", "manual", "missed", "overloaded", "recovery", "scheduled", "sequenced",
]

_NODE_LOCAL = Locking.NODE_LOCAL
_ALLOW = Overlap.ALLOW
_QUEUE_ONE = Overlap.QUEUE_ONE
_WAITS = (Overlap.QUEUE_ONE, Overlap.REPLACE)  # a busy lease: wait for it (REPLACE: and
# cancel the run holding it, Runs.replace_running)
_MISSED = SkipReason.MISSED.value
_OVERLOADED = SkipReason.OVERLOADED.value
# bound once: a burst builds one request per slot
_scheduled = Dispatch.scheduled
_early_claim = Dispatch.early_claim


def _busy_skip(item: Dispatch, instance_id: str) -> Dispatch:
    """A node-local request whose previous run is still running in this process."""
    item.skip_reason = ALREADY_EXECUTING
    item.result = busy_result()
    item.logs.append(busy_log(instance_id))
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
    delay = jitter_delay(job.id, slot, job.jitter) if job.jitter else 0.0
    overlap = job.overlap
    if job.locking is not _NODE_LOCAL:
        it = _scheduled(
            job.id,
            slot,
            lease=overlap is not _ALLOW,
            hold=job.lease_seconds + delay,
            defer=delay > 0,
            wait_if_busy=wait_if_busy and overlap in _WAITS and job.id not in queued,
            catchup=catchup,
            logs=[catchup_banner(slot, now + delay)] if catchup else None,
        )
        if job.max_instances != 1:
            it.lanes = job.max_instances
        return it
    item = Dispatch.local(
        job.id,
        slot,
        hold=job.lease_seconds + delay,
        defer=delay > 0,
        catchup=catchup,
        logs=[catchup_banner(slot, now + delay)] if catchup else None,
    )
    if overlap is not _ALLOW and running and running.get(job.id, 0) >= job.max_instances:
        if overlap in _WAITS and job.id not in queued:
            item.defer = True
        else:
            _busy_skip(item, instance_id)
    return item


def early(job: Job, slot: float, now: float) -> Dispatch:
    """A plain leased slot claimed before its time: kept only together with the lease,
    held until the slot plus the usual lease length; its row follows in the group commit."""
    it = _early_claim(job.id, slot, hold=job.lease_seconds + (slot - now if slot > now else 0.0))
    if job.max_instances != 1:
        it.lanes = job.max_instances
    return it


def sequenced(job: Job, slot: float, now: float, *, catchup: bool) -> Dispatch:
    """A slot of a catch-up sequence claimed only together with the job's lease: when
    another process holds it (its run of the same sequence), nothing is written and the
    slot is tried again (``Loop.run_sequence``)."""
    it = _early_claim(
        job.id, slot, hold=job.lease_seconds, catchup=catchup,
        logs=[catchup_banner(slot, now)] if catchup else None,
    )
    if job.max_instances != 1:
        it.lanes = job.max_instances
    return it


def missed(
    job: Job, slot: float, why: str, result: Any = None, reason: str = _MISSED
) -> Dispatch:
    """A slot claimed and recorded ``skipped`` / ``missed`` (catch-up policy; ``reason``
    ``store_unavailable`` for a slot an outage kept from running)."""
    return Dispatch.missed(
        job.id,
        slot,
        reason=reason,
        local=job.locking is _NODE_LOCAL,
        result=result,
        logs=[missed_log(from_ts(slot).isoformat(), why, job.missed.name, job.catch_up_window)],
    )


def overloaded(job: Job, slot: float, behind: float, *, stopping: bool = False) -> Dispatch:
    """A slot this process could not start on time because it was busy with earlier ones
    (``behind``: how far behind its slots it was), claimed and recorded ``skipped`` /
    ``overloaded`` whatever the job's ``missed`` policy (docs/concepts.md, "Overload")."""
    return Dispatch.missed(
        job.id,
        slot,
        reason=_OVERLOADED,
        local=job.locking is _NODE_LOCAL,
        logs=[overloaded_log(from_ts(slot).isoformat(), behind, stopping=stopping)],
    )


def manual(
    job: Job,
    now: float,
    *,
    by: str,
    triggered_by: TriggeredBy = TriggeredBy.MANUAL,
    local_busy: bool = False,
    instance_id: str = "",
    params: dict[str, Any] | None = None,
    forced_by: str | None = None,
) -> Dispatch:
    """A run requested now: a fencing token, no slot claim (nothing when node-local);
    ``forced_by``: who ran it past a pause (noted in its log too)."""
    logs = [f"Manual run requested by {by}"]
    if forced_by is not None:
        logs.append(f"Forced by {forced_by}: the job is paused")
    local = job.locking is _NODE_LOCAL
    item = Dispatch.manual_run(
        job.id,
        now,
        lease=job.overlap is not _ALLOW,
        hold=job.lease_seconds,
        local=local,
        triggered_by=triggered_by,
        logs=logs,
        params=params,
        forced_by=forced_by,
    )
    if local and job.overlap is not _ALLOW and local_busy:
        _busy_skip(item, instance_id)
    elif not local:
        item.lanes = job.max_instances
    return item


def recovery(job: Job, run: RunRecord) -> Dispatch:
    """Re-run the slot of ``run``, interrupted when its instance died: its claim is
    replaced by one with a new, higher token."""
    if run.fencing_token is None:
        raise ValueError(f"run {run.id} has no claim to recover (no fencing token)")
    item = Dispatch.recovery(
        job.id,
        run.slot.timestamp(),
        token=run.fencing_token,
        lease=job.overlap is not _ALLOW,
        hold=job.lease_seconds,
        catchup=run.is_catchup,
        wait_if_busy=True,  # retried until it runs or is superseded (Runs.recovering)
        logs=[
            f"♻ Recovery run of slot {run.slot.isoformat()}: run {run.id} on "
            f"{run.instance_id} was interrupted"
        ],
    )
    item.lanes = job.max_instances
    return item


def backfill(job: Job, slot: float, *, token: int | None, by: str) -> Dispatch:
    """A past slot run again by a backfill: claimed (``token`` None: never claimed) or
    its latest claim ``token`` replaced; with the job's lease unless ``Overlap.ALLOW``."""
    item = Dispatch.backfill(
        job.id,
        slot,
        token=token,
        lease=job.overlap is not _ALLOW,
        hold=job.lease_seconds,
        logs=[f"Backfill of slot {from_ts(slot).isoformat()} requested by {by}"],
    )
    item.lanes = job.max_instances
    return item
