"""Backfill: run every slot of a past range of one job's schedule again, in order.

Each slot goes through the store's claim path (:meth:`Dispatch.backfill`): a slot never
claimed is claimed like a scheduled one, a claimed slot has its latest claim replaced by a
higher token. Either way only one caller wins a slot, so two backfills of one range
running at once (in one process or two) run each slot once between them. Runs are
recorded ``triggered_by=backfill`` with the slot as their slot.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronfleet.clock import from_ts
from cronfleet.errors import JobNotFound
from cronfleet.model import Job, Locking, Overlap, RunRecord, RunStatus, TriggeredBy
from cronfleet.runtime import requests
from cronfleet.store.base import RunFilter, Start
from cronfleet.store.rows import ms

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.parts import Jobs, Life, Settings
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

__all__ = ["MAX_SLOTS", "Backfill", "Backfills", "BadRange", "backfill_slots"]

# runs recorded against a slot of the schedule (manual runs' slot is their trigger time)
_SLOT_KINDS = frozenset({TriggeredBy.SCHEDULE, TriggeredBy.CATCHUP, TriggeredBy.RECOVERY,
                         TriggeredBy.BACKFILL})

MAX_SLOTS = 100_000  # slots in one backfill (a range is listed before it starts)
_UNDER_WAY = frozenset({RunStatus.PENDING, RunStatus.RUNNING})


@dataclass
class Backfill:
    """Progress of one backfill: ``done`` of ``total`` slots, the slot being run, and how
    each slot ended (``ran``: run ids; ``present``: skipped by ``only_missing``; ``taken``:
    won by another caller; ``busy``: recorded skipped by the store when it tried to
    start)."""

    job_id: str
    start: datetime
    end: datetime
    only_missing: bool
    since: float | None = None  # when it was asked for (a run of another backfill of a
    # slot since then is that backfill's: not run again)
    total: int = 0
    done: int = 0
    current: datetime | None = None
    ran: list[int] = field(default_factory=list)
    present: int = 0
    taken: int = 0
    busy: int = 0
    cancelled: bool = False
    finished: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The progress as stored with a remote backfill's request (JSON)."""
        return {
            "job_id": self.job_id, "from": self.start.isoformat(), "to": self.end.isoformat(),
            "only_missing": self.only_missing, "total": self.total, "done": self.done,
            "current": None if self.current is None else self.current.isoformat(),
            "ran": len(self.ran), "present": self.present, "taken": self.taken,
            "busy": self.busy, "cancelled": self.cancelled, "finished": self.finished,
        }

    def cancel(self) -> None:
        """Stop before the next slot (the slot in progress is cancelled too)."""
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


class BadRange(ValueError):
    """A backfill range refused by :func:`backfill_slots`; ``field`` names the bound at
    fault (``from`` or ``to``), as the API, the dashboard and the CLI show it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def backfill_slots(job: Job, start: datetime, end: datetime, *, now: datetime
                   ) -> list[datetime]:
    """The fire times ``t`` of ``job`` with ``start <= t <= end``, in order: THE rule of
    a backfill's range, for every face (library, API, dashboard, CLI, the instance that
    runs a remote one). A backfill covers the past only: ``end`` later than ``now`` is
    refused (a slot still to come runs at its time, never early as a backfill), as are a
    reversed range and one of more than :data:`MAX_SLOTS` slots (:class:`BadRange`)."""
    if start.tzinfo is None or end.tzinfo is None:
        raise BadRange("from" if start.tzinfo is None else "to",
                       "backfill start and end must be timezone-aware datetimes")
    if end < start:
        raise BadRange("to", f"backfill range is empty: to {end.isoformat()} is before "
                             f"from {start.isoformat()}")
    if end > now:
        raise BadRange("to", f"to {end.isoformat()} is later than now "
                             f"({now.astimezone(end.tzinfo).isoformat(timespec='seconds')}): "
                             "a backfill runs past slots only; the slots to come run at "
                             "their time")
    out: list[datetime] = []
    for t in job.schedule.between(start - timedelta(seconds=1), end):
        if t < start:
            continue
        if len(out) >= MAX_SLOTS:
            raise BadRange("from", f"backfill range has more than {MAX_SLOTS} slots of job "
                                   f"{job.id!r}: split it")
        out.append(t)
    return out


def _started_since(run: RunRecord, since: float | None) -> bool:
    """Whether ``run`` started at or after ``since``, at the store's precision (whole
    milliseconds): a run started in the millisecond a backfill was asked is read back no
    later than that instant, and counts as started since (the other backfill's: not run
    twice)."""
    return (since is not None and run.started_at is not None
            and ms(run.started_at.timestamp()) >= ms(since))


LEASE_POLL = 0.05  # seconds between two tries of a busy lease (real time: a handler holds it)


class Backfills:
    """Runs backfills. Built with the store, the clock, the settings, the scheduler's life,
    the job table (read-only), the runs and the writer."""

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, life: Life,
                 jobs: Jobs, runs: Runs, writer: Writer) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.life = life
        self.jobs = jobs
        self.runs = runs
        self.writer = writer

    async def _existing(self, job: Job, start: datetime, end: datetime
                        ) -> dict[float, list[RunRecord]]:
        """Runs recorded against the slots of the range, by slot (epoch seconds)."""
        out: dict[float, list[RunRecord]] = {}
        where = RunFilter(job_id=job.id, since=start, until=end + timedelta(seconds=1))
        after = None
        while True:
            page = await self.store.find_runs(where, limit=1000, after=after)
            for r in page.runs:
                if r.triggered_by in _SLOT_KINDS:
                    out.setdefault(r.slot.timestamp(), []).append(r)
            if page.next_cursor is None:
                return out
            after = page.next_cursor


    async def run(self, bf: Backfill, *, by: str, rate: float | None) -> None:
        """Run the slots of ``bf`` one after another, at most ``rate`` starts a second (on
        the scheduler's clock; ``None``: no pause between slots)."""
        job = self.jobs.get(bf.job_id)
        if job is None:
            raise JobNotFound(bf.job_id)
        if job.locking is Locking.NODE_LOCAL:
            raise ValueError(f"job {job.id!r} is node-local: a backfill needs the store's "
                             "claim per slot, which node-local jobs do not take")
        slots = backfill_slots(job, bf.start, bf.end, now=from_ts(self.clock.now()))
        bf.total = len(slots)
        existing = await self._existing(job, bf.start, bf.end)
        gap = 1.0 / rate if rate else 0.0
        lease = job.overlap is not Overlap.ALLOW  # as requests.backfill
        try:
            for slot_dt in slots:
                if bf.cancelled:
                    break
                bf.current = slot_dt
                slot = slot_dt.timestamp()
                runs = existing.get(slot, [])
                if bf.only_missing and any(r.status is RunStatus.SUCCEEDED for r in runs):
                    bf.present += 1
                    bf.done += 1
                    continue
                latest = max((r for r in runs if r.fencing_token is not None),
                             key=lambda r: r.fencing_token or 0, default=None)
                if (latest is not None and latest.triggered_by is TriggeredBy.BACKFILL
                        and (latest.status in _UNDER_WAY or _started_since(latest, bf.since))):
                    bf.taken += 1  # another backfill runs it, or ran it since this one was asked
                    bf.done += 1
                    continue
                tokens = [] if latest is None else [latest.fencing_token]
                item = requests.backfill(job, slot, token=tokens[0] if tokens else None, by=by)
                began = self.clock.now()
                [res] = await self.store.dispatch([item], self.settings.instance_id)
                if not res.won or res.run is None:
                    bf.taken += 1
                else:
                    run = res.run
                    if run.status is RunStatus.PENDING:  # the lease is busy: wait for it
                        run = await self._take_lease(job, run)
                    if run.status is RunStatus.RUNNING:
                        await self._run_one(job, run, lease)
                        if run.id is not None:
                            bf.ran.append(run.id)
                    else:
                        bf.busy += 1
                bf.done += 1
                wait = gap - (self.clock.now() - began)
                if wait > 0 and bf.done < bf.total:
                    await self.clock.sleep_until(self.clock.now() + wait)
        except asyncio.CancelledError:
            bf.cancelled = True
            raise
        finally:
            bf.current = None
            bf.finished = True


    async def _take_lease(self, job: Job, run: RunRecord) -> RunRecord:
        """A pending backfill run: take the job's lease once its holder lets it go (the job's
        overlap policy: a backfill slot waits for the run before it)."""
        assert run.id is not None
        start = Start(run.id, job.id, run.fencing_token, True, job.lease_seconds, True,
                      job.max_instances)
        while True:
            [started] = await self.store.start([start], self.settings.instance_id)
            if started.run is not None:
                return started.run
            await asyncio.sleep(LEASE_POLL)


    async def _run_one(self, job: Job, run: RunRecord, leased: bool) -> None:
        """Run one claimed slot to its end (the job's overlap: the next slot waits for it)."""
        runner = self.runs
        if not self.life.running:
            await runner.execute_inline(job, run, leased)
            return
        runner.launch(job, run, leased=leased)
        assert run.id is not None
        active = runner.active.get(run.id)
        if active is not None and active.task is not None:
            try:
                await asyncio.shield(active.task)
            except asyncio.CancelledError:
                if asyncio.current_task() is not None and active.task is not None \
                        and not active.task.done():
                    runner.cancel(run.id, by="backfill", why="backfill cancelled")
                raise
            except Exception:  # the run's outcome is recorded by the runner
                pass
        await self.writer.flushed()

