"""The run ledger's decisions, pure: which row a request gets, and every skip / interrupt
wording. Every store (SQLite, PostgreSQL, memory) calls these; none re-decides.

Nothing here touches a database: a store claims and leases in its own way, then asks
:func:`dispatch_run` what the run row is, and writes what it is told to write. The table
tests in ``tests/store/test_ledger.py`` pin each branch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Sequence
from datetime import datetime
from typing import Any

from cronfleet.model import RunRecord, RunStatus, SkipReason, TriggeredBy
from cronfleet.store.base import Dispatch, Dispatched

__all__ = [
    "CANCELLED_REASON",
    "INSTANCE_LOST_REASON",
    "INTERRUPTED_ERROR",
    "INTERRUPTED_REASON",
    "SHUTDOWN_REASON",
    "STOPPED_BEFORE_FINISH",
    "attach_late_result",
    "busy_log",
    "busy_result",
    "dispatch_run",
    "dispatch_runs",
    "instance_lost_error",
    "instance_lost_log",
    "instance_lost_run",
    "interrupted_log",
    "interrupted_log_parts",
    "is_late",
    "journal_log",
    "kept_lost_run",
    "lane_key",
    "lease_taken",
    "lost_run",
    "missed_log",
    "missed_summary",
    "overloaded_log",
    "override_skip_log",
    "removed_or_skipped_log",
    "replace_stopped_log",
    "replaced_waiting_log",
    "shutdown_log",
    "skip_result",
    "store_unavailable_log",
]

RUNNING = RunStatus.RUNNING
ALREADY_EXECUTING = SkipReason.ALREADY_EXECUTING.value

INTERRUPTED_REASON = "lease_expired"
INTERRUPTED_ERROR = "the instance running it stopped answering; its lease expired"
_INTERRUPTED_LOG = (
    "Interrupted: {holder} did not finish this run before its lease expired (marked by {by})"
)
_NO_HOLDER = "an instance"

INSTANCE_LOST_REASON = "instance_lost"
CANCELLED_REASON = "cancelled"  # a run cancelled by an operator, or replaced (REPLACE)
_LOST_LOG = (
    "Interrupted: instance {holder} was declared lost (no heartbeat for {ttl:g}s, "
    "marked by {by}); its lease was broken"
)
LATE_RESULT_KEY = "late_result"
"""Where a fenced run's own outcome is kept in the slot's row (``result[LATE_RESULT_KEY]``)."""


def instance_lost_error(holder: str) -> str:
    return f"instance {holder} was declared lost while running it (its heartbeat stopped)"


def instance_lost_log(holder: str, ttl: float, marked_by: str) -> str:
    """The log line of a run whose holder was declared lost by ``marked_by``."""
    return _LOST_LOG.format(holder=holder, ttl=ttl, by=marked_by)


def is_late(stored: RunStatus, incoming: RunStatus) -> bool:
    """THE fence of the ledger: a row that already holds a final outcome (interrupted by
    a survivor, for instance) is never overwritten by another outcome; the second one is
    a late result, attached to it (:func:`attach_late_result`)."""
    return stored.finished and stored is not incoming


def attach_late_result(
    stored: RunRecord, late: RunRecord, now: datetime | None = None
) -> RunRecord:
    """``stored`` with ``late``'s outcome kept as its late result: the status, reason,
    error and finish time stay the stored ones (one terminal outcome per slot); the
    result gets ``late_result`` = what the fenced holder reported, and a log line says
    so."""
    rec = dataclasses.replace(stored, logs=list(stored.logs))
    base = rec.result if isinstance(rec.result, dict) else (
        {} if rec.result is None else {"result": rec.result}
    )
    when = late.finished_at or now
    base = dict(base)
    base[LATE_RESULT_KEY] = {
        "status": late.status.value,
        "reason": late.reason,
        "finished_at": when.isoformat() if when is not None else None,
        "instance_id": late.instance_id,
        "result": late.result,
        "error": late.error,
    }
    rec.result = base
    rec.logs.append(
        f"Late result from {late.instance_id or _NO_HOLDER}: {late.status.value}"
        + (f" at {when.isoformat()}" if when is not None else "")
        + f" (fenced: this slot was already {stored.status.value}; kept, not a second outcome)"
    )
    return rec


def busy_log(holder: str | None, lanes: int = 1) -> str:
    """The log line of a slot skipped because the previous run still holds the lease
    (with ``max_instances`` = ``lanes`` > 1: every lane is held; the line names the limit)."""
    if lanes > 1:
        return (f"Skipped: {lanes} of {lanes} instances running (max_instances = {lanes}; "
                f"lanes held by {holder or 'unknown'})")
    return f"Skipped: the previous run has not finished (lease held by {holder or 'unknown'})"


def lane_key(token: int | None) -> str:
    """The key in a store's ``acquired`` set of a lease taken by an item with lanes > 1
    (``Dispatch.lanes``): per run, as two runs of one job may hold two lanes."""
    return f"#{token}"


def lease_taken(job_id: str, token: int | None, lanes: int, acquired: Container[str]) -> bool:
    """Whether the item's lease was taken: THE reading of a store's ``acquired`` set."""
    return job_id in acquired if lanes == 1 else lane_key(token) in acquired


def skip_result(reason: str) -> dict[str, Any]:
    """The ``result`` of a run row recorded as skipped for ``reason``."""
    return {"skipped": True, "reason": reason}


def skip_run(run: RunRecord, reason: str, line: str, at: datetime) -> RunRecord:
    """A claimed run that will not start, recorded ``skipped`` for ``reason`` at ``at``
    with the log ``line`` (its row goes through the group commit, its lease released)."""
    run.status = RunStatus.SKIPPED
    run.reason = reason
    run.started_at = None
    run.finished_at = at
    run.result = skip_result(reason)
    run.logs.append(line)
    return run


def busy_result() -> dict[str, Any]:
    return skip_result(ALREADY_EXECUTING)


def override_skip_log(reason: str, by: str | None, note: str | None) -> str:
    """A slot skipped without a claim because the job is paused / disabled."""
    who = f" by {by}" if by else ""
    why = f" ({note})" if note else ""
    return f"Skipped: the job is {reason}{who}{why}"


def removed_or_skipped_log(reason: str, live: bool) -> str:
    """An early claim given up at its instant: the job is paused / disabled, or gone."""
    return f"Skipped: the job is {reason}" if live else "Skipped: the job was removed"


def missed_log(slot_iso: str, why: str, policy: str, window: float) -> str:
    """A slot recorded ``missed`` by the catch-up policy."""
    return f"Skipped: slot {slot_iso} {why} (policy {policy}, window {window:g}s)"


def overloaded_log(slot_iso: str, behind: float, *, stopping: bool = False) -> str:
    """A slot recorded ``overloaded``: it came due while the process was busy with earlier
    slots and could not start on time (within ``late_after``, before the job's next slot);
    ``stopping``: the process stopped before it reached the slot."""
    if stopping:
        return (f"Skipped: slot {slot_iso} was due when the scheduler stopped {behind:.3f}s "
                "behind its slots (overloaded); it never started")
    return (f"Skipped: slot {slot_iso} could not start on time: the scheduler was "
            f"{behind:.3f}s behind its slots (overloaded)")


def missed_summary(count: int | None, first_iso: str, last_iso: str,
                   reason: str = SkipReason.MISSED.value) -> tuple[str, dict[str, Any]]:
    """``(why, result)`` of the one record that summarises many slots not run (``reason``
    ``missed``: a catch-up's oldest; ``store_unavailable``: an outage's oldest, beyond the
    backlog kept per job)."""
    why = (
        f"{'many' if count is None else count} {reason} slots from {first_iso} to {last_iso} "
        "summarised in this record"
    )
    result = {**skip_result(reason), "count": count, "first": first_iso, "last": last_iso}
    return why, result


def store_unavailable_log(error: object) -> str:
    """A slot of a job that requires a global claim, skipped while the store was down."""
    return f"Skipped: the store was unavailable ({error}) and the job requires a global claim"


def journal_log(why: str, journal: str) -> str:
    """A slot due while the database file was damaged, kept in the fallback journal and
    recorded when a restored store opened (``skipped / store_unavailable``)."""
    return (f"Skipped: the store was damaged ({why}); the slot was kept in the fallback "
            f"journal {journal} and recorded when the restored store opened")


def replaced_waiting_log(newer_iso: str) -> str:
    """``Overlap.REPLACE`` during an outage: a slot waiting, without a claim, for the run
    it replaces, itself replaced by a newer slot (``skipped / superseded``)."""
    return (f"Skipped: replaced by a newer slot ({newer_iso}) before it could start "
            "(overlap replace, store unavailable)")


def replace_stopped_log() -> str:
    """``Overlap.REPLACE`` during an outage: the scheduler stopped while the slot waited,
    without a claim, for the run it replaces (``skipped / store_unavailable``)."""
    return ("Skipped: the scheduler stopped while this slot waited for the run it replaces "
            "(overlap replace, store unavailable)")


SHUTDOWN_REASON = "shutdown"
STOPPED_BEFORE_FINISH = "the scheduler stopped before the run finished"


def shutdown_log(why: str = STOPPED_BEFORE_FINISH) -> str:
    """The log line of a run interrupted by this process's own stop."""
    return f"Interrupted: {why}"


def interrupted_log(holder: str | None, marked_by: str) -> str:
    """The log line the reaper appends to a run whose holder died."""
    return _INTERRUPTED_LOG.format(holder=holder or _NO_HOLDER, by=marked_by)


def interrupted_log_parts(marked_by: str) -> tuple[str, str, str]:
    """``(before, no holder, after)``: :func:`interrupted_log` for SQL that fills in the
    holder from a column (``before || coalesce(instance_id, no_holder) || after``), so the
    reaper's bulk ``UPDATE`` writes exactly the same words."""
    before, after = _INTERRUPTED_LOG.split("{holder}")
    return before, _NO_HOLDER, after.format(by=marked_by)


def dispatch_run(
    it: Dispatch,
    *,
    slot: datetime,
    now: datetime,
    deadline: datetime,
    token: int | None,
    instance: str,
    lease_taken: bool,
    holder: str | None,
) -> tuple[RunRecord, bool, bool]:
    """The run row of a request whose claim was won: ``(run, write_now, lease_busy)``.

    ``lease_taken``: the store took the job's lease for it (only asked when ``it.lease``
    and neither deferred nor skipped). ``deadline``: ``now + it.hold`` in the store's time.
    ``write_now``: the row belongs in the dispatch transaction; otherwise (the hot path:
    a leased run that starts now) the group commit writes it. ``lease_busy``: the lease
    was wanted and busy (the caller reports ``holder``).

    ====================================  ==========  ===========================  =====
    request                               status      reason                       write
    ====================================  ==========  ===========================  =====
    ``record=False``, lease taken / none  running     --                           no
    ``skip_reason`` (missed)              skipped     ``skip_reason``              yes
    ``defer`` (jitter)                    pending     --                           yes
    lease busy, ``wait_if_busy``          pending     --                           yes
    lease busy                            skipped     ``already_executing``        yes
    otherwise (manual, recovery, local)   running     --                           yes
    ====================================  ==========  ===========================  =====
    """
    logs = list(it.logs) if it.logs else []
    if it.skip_reason:
        result = it.result if it.result is not None else skip_result(it.skip_reason)
        return (
            RunRecord(
                id=None,
                job_id=it.job_id,
                slot=slot,
                triggered_by=it.triggered_by,
                status=RunStatus.SKIPPED,
                instance_id=instance,
                fencing_token=token,
                manual=it.manual,
                is_catchup=it.is_catchup,
                is_recovery=it.is_recovery,
                reason=it.skip_reason,
                claimed_at=now,
                finished_at=now,
                result=result,
                logs=logs,
                params=it.params,
                forced_by=it.forced_by,
            ),
            True,
            False,
        )
    busy = it.lease and not it.defer and not lease_taken
    if not it.record and not it.defer and not busy:
        # the hot path: a leased run that starts now, its row written by the group commit
        # (positional: this runs once per slot of a burst)
        return (
            RunRecord(
                None, it.job_id, slot, it.triggered_by, RUNNING, instance, token, it.manual,
                it.is_catchup, it.is_recovery, 1, None, now, now, None, deadline, it.result,
                None, logs,
            ),
            False,
            False,
        )
    status = RUNNING
    reason: str | None = None
    result = it.result
    started: datetime | None = now
    finished: datetime | None = None
    until: datetime | None = deadline
    if it.defer or (busy and it.wait_if_busy):
        status, started = RunStatus.PENDING, None
    elif busy:
        status, reason, started, finished, until = (
            RunStatus.SKIPPED, ALREADY_EXECUTING, None, now, None,
        )
        result = busy_result()
        logs.append(busy_log(holder, it.lanes))
    return (
        RunRecord(
            id=None,
            job_id=it.job_id,
            slot=slot,
            triggered_by=it.triggered_by,
            status=status,
            instance_id=instance,
            fencing_token=token,
            manual=it.manual,
            is_catchup=it.is_catchup,
            is_recovery=it.is_recovery,
            reason=reason,
            claimed_at=now,
            started_at=started,
            finished_at=finished,
            deadline=until,
            result=result,
            logs=logs,
            params=it.params,
            forced_by=it.forced_by,
        ),
        True,
        busy,
    )


def dispatch_runs(
    out: Sequence[Dispatched],
    *,
    slots: Sequence[datetime],
    deadlines: Sequence[datetime],
    now: datetime,
    instance: str,
    acquired: set[str],
    holders: dict[str, str | None],
) -> list[RunRecord]:
    """:func:`dispatch_run` for a whole batch, as a store calls it: sets ``run`` (and
    ``holder`` where the lease was busy) on every won :class:`Dispatched` and returns the
    rows to write in the dispatch transaction. ``slots[i]`` / ``deadlines[i]`` belong to
    ``out[i]``; ``acquired``: the jobs whose lease was taken; ``holders``: the holders of
    the busy ones.

    The hot path (a leased run that starts now, its row written by the group commit) is
    decided inline here, exactly as :func:`dispatch_run` decides it, so a burst of 20,000
    slots pays no call per slot; every other request goes through :func:`dispatch_run`.
    """
    to_write: list[RunRecord] = []
    for d, slot, deadline in zip(out, slots, deadlines, strict=True):
        if not d.won:
            continue
        it = d.request
        if (
            not it.record
            and not it.defer
            and not it.skip_reason
            and (not it.lease or (it.job_id in acquired if it.lanes == 1
                                  else lane_key(d.token) in acquired))
        ):
            d.run = RunRecord(
                None, it.job_id, slot, it.triggered_by, RUNNING, instance, d.token, it.manual,
                it.is_catchup, it.is_recovery, 1, None, now, now, None, deadline, it.result,
                None, list(it.logs) if it.logs else [],
            )
            continue
        holder = holders.get(it.job_id)
        rec, write, busy = dispatch_run(
            it, slot=slot, now=now, deadline=deadline, token=d.token, instance=instance,
            lease_taken=lease_taken(it.job_id, d.token, it.lanes, acquired), holder=holder,
        )
        d.run = rec
        if busy:
            d.holder = holder
        if write:
            to_write.append(rec)
    return to_write


def lost_run(
    job_id: str,
    token: int,
    holder: str | None,
    slot: datetime | None,
    claimed_at: datetime,
    *,
    now: datetime,
    marked_by: str,
) -> RunRecord:
    """The reaper's ``interrupted`` row for a slot that was claimed and leased but whose
    holder died before writing its run row (``slot`` None: a manual run's token)."""
    return RunRecord(
        id=None,
        job_id=job_id,
        slot=slot if slot is not None else claimed_at,
        triggered_by=TriggeredBy.SCHEDULE,
        status=RunStatus.INTERRUPTED,
        instance_id=holder,
        fencing_token=token,
        reason=INTERRUPTED_REASON,
        claimed_at=claimed_at,
        finished_at=now,
        error=INTERRUPTED_ERROR,
        logs=[interrupted_log(holder, marked_by)],
    )


def instance_lost_run(
    job_id: str,
    token: int,
    holder: str,
    slot: datetime | None,
    claimed_at: datetime,
    *,
    now: datetime,
    ttl: float,
    marked_by: str,
) -> RunRecord:
    """The ``interrupted`` row for a slot claimed and leased by an instance declared lost
    that never wrote its run row (an early claim, or a run whose row was still in its
    group commit)."""
    return RunRecord(
        id=None,
        job_id=job_id,
        slot=slot if slot is not None else claimed_at,
        triggered_by=TriggeredBy.SCHEDULE,
        status=RunStatus.INTERRUPTED,
        instance_id=holder,
        fencing_token=token,
        manual=slot is None,
        reason=INSTANCE_LOST_REASON,
        claimed_at=claimed_at,
        finished_at=now,
        error=instance_lost_error(holder),
        logs=[instance_lost_log(holder, ttl, marked_by)],
    )


def kept_lost_run(
    job_id: str,
    token: int,
    holder: str | None,
    slot: datetime | None,
    claimed_at: datetime,
    *,
    overdue: datetime,
) -> RunRecord:
    """Before an expired lease is taken over, the dead holder's unwritten run is kept:
    open (``running``), its deadline already passed (``overdue``), so the reaper marks it
    ``interrupted`` (and recovers it where the job asks)."""
    return RunRecord(
        id=None,
        job_id=job_id,
        slot=slot if slot is not None else claimed_at,
        triggered_by=TriggeredBy.SCHEDULE,
        status=RunStatus.RUNNING,
        instance_id=holder,
        fencing_token=token,
        manual=slot is None,
        claimed_at=claimed_at,
        deadline=overdue,
    )
