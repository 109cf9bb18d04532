"""Early claims: the plain slots of the next instant are claimed (with their leases) a
little before it, so that at the instant the loop only starts handlers
(docs/internals.md, "Early claims")."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cronfleet.clock import from_ts
from cronfleet.model import Job, JobState, Locking, Overlap, SkipReason, skip_reason
from cronfleet.runtime import requests
from cronfleet.runtime.due import after, min_gap
from cronfleet.runtime.loop import Loop, Pipeline
from cronfleet.runtime.parts import Active, Pending
from cronfleet.store.base import Dispatch, Dispatched, EarlyClaimStore, Finish
from cronfleet.store.ledger import (
    instance_lost_run,
    removed_or_skipped_log,
    skip_run,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.due import Due
    from cronfleet.runtime.parts import FleetView, Jobs, RateLimitedLog, Settings
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.stats import Stats
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

__all__ = ["EARLY_PER_SLOT", "EarlyClaims"]

log = logging.getLogger("cronfleet")

# an estimate of what claiming one slot early costs (loop and store thread), with margin
EARLY_PER_SLOT = 50e-6


class EarlyClaims:
    """Slots claimed shortly before their instant. Built with the store, the clock, the
    settings, the stats, the job table (read-only), the due heap, the activity counter,
    the loop (it fires the instant), the runs, the writer and the warning log; the
    assembler wires ``fleet`` (the epoch and the owner of a job)."""

    fleet: FleetView

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, stats: Stats,
                 jobs: Jobs, due: Due, activity: Activity, loop: Loop, runs: Runs,
                 writer: Writer, warn: RateLimitedLog) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.instance_id = settings.instance_id
        self.stats = stats
        self.jobs = jobs
        self.due = due
        self.activity = activity
        self.loop = loop
        self.runs = runs
        self.writer = writer
        self.warn = warn
        # only stores that can withdraw an early claim get them
        self.ahead = self.settings.claim_ahead if isinstance(self.store, EarlyClaimStore) else 0.0
        self.pending: Pending | None = None

    def lead(self, now: float) -> float:
        """How long before the next instant its slots are claimed: ``claim_ahead``, or
        longer for a large instant (its claims take about ``EARLY_PER_SLOT`` each), but
        never more than half the time since the previous instant fired, so that runs of
        that instant have had time to end and release their leases."""
        due = self.due
        first = due.heap[0]
        lead = min(max(self.ahead, len(due.buckets.get(first, ())) * EARLY_PER_SLOT), 30.0)
        fired_at = self.loop.fired_at
        if fired_at is not None:
            lead = min(lead, (first - fired_at) / 2)
        return lead

    def may_claim(self, job: Job) -> bool:
        """Plain leased slots only: everything else is decided at the slot's time."""
        runs = self.runs
        return (
            job.overlap is not Overlap.ALLOW
            and job.locking is not Locking.NODE_LOCAL
            and not job.jitter
            and job.id not in runs.queued
            and not runs.running.get(job.id)
            and job.id not in self.loop.sequencing
        )

    async def claim(self, slot: float, now: float) -> None:
        """Claim the plain slots of the next instant ``slot`` a little before it, each with
        its job's lease, and build their runs; ``fire`` starts them at ``slot``.

        Only jobs that are enabled at ``slot`` as far as this process last knew their
        overrides (``Loop.overrides_seen``), and whose lease is free now, are claimed;
        the rest stay in the heap and are handled at ``slot`` as usual. Where the store
        keeps no claim (lease busy, store error), the job goes back to the heap too.
        Exactly one of these holds for each job taken here, so no job leaves the schedule.
        """
        pending = self.pending = Pending(slot, epoch=self.fleet.epoch)
        jobs, due = self.jobs, self.due
        nexts = due.next
        # the overrides as last read (no store call here): a job paused since is
        # withdrawn at the instant, whose reading decides; one resumed since is claimed then
        states = self.loop.overrides_seen
        bucket = due.buckets.get(slot)
        if not bucket:
            return
        at = from_ts(slot)
        take: list[Job] = []
        keep: list[str] = []
        seen: set[str] = set()
        for job_id in bucket:
            job = jobs.get(job_id)
            if job is None or nexts.get(job_id) != slot or job_id in seen:
                continue  # removed or stale, as fire_due would drop it
            seen.add(job_id)
            st = states.get(job_id)
            enabled = job.enabled if st is None else st.enabled_at(job, at)
            if enabled and self.may_claim(job):
                take.append(job)
            else:
                keep.append(job_id)
        # the heap entry stays (with what is left of the bucket): the loop wakes at ``slot``
        due.keep_only(slot, keep)
        if not take:
            return
        placed: set[str] = set()
        runs = self.runs

        def collect(chunk: list[Dispatch], fut: asyncio.Future[Any]) -> list[Dispatched]:
            exc = fut.exception()
            if exc is not None:
                self.stats.store_errors += 1
                self.warn.warning(
                    "early-claims", "cannot claim %d slots early (%s); claiming at their "
                    "time", len(chunk), exc)
                return []
            got: list[Dispatched] = fut.result()
            for res in got:
                job = jobs.get(res.request.job_id)
                if job is None or res.busy:
                    continue  # not claimed: back to the heap below
                active = None
                if res.won and res.run is not None:
                    active = Active(job, res.run, True)
                    active.ctx = runs.context(job, res.run)
                pending.ready.append((job, res, active))
                placed.add(job.id)
            return got

        pipe = Pipeline(self.loop, collect)
        size = self.settings.batch_size
        early = requests.early
        try:
            for i in range(0, len(take), size):
                await pipe.submit([early(job, slot, now) for job in take[i : i + size]])
            await pipe.drain()
        finally:
            for job in take:  # lease busy, store error, or the job left meanwhile
                if job.id not in placed and jobs.get(job.id) is job and nexts.get(job.id) == slot:
                    due.push(job, slot)

    async def drop_stale(self, pending: Pending) -> list[tuple[Job, float]]:
        """This instance was declared lost after claiming ``pending``: none is started
        here. The survivors broke the claims they saw (``interrupted`` rows, recoveries);
        a claim made after that (between being declared lost and learning it) has no row
        yet, so it is withdrawn -- the stores refuse to withdraw a claim whose slot has a
        row -- and returned with the others: (job, slot) pairs to handle as if never
        claimed early. The resolved ones lose their fresh claim and get no second row;
        the others run (or are recorded) under a new claim instead of being lost. A claim
        the store did not withdraw stays ours and nobody else will see it (the survivors
        broke the claims before it was made): its slot is recorded ``interrupted /
        instance_lost`` through the group commit, which retries until the store answers."""
        won = [(job, res) for job, res, _ in pending.ready if res.won]
        log.warning(
            "instance %s: %d slot(s) of %s claimed early were taken over by the fleet "
            "while this process was not answering; not starting them (the ones the fleet "
            "did not record are claimed again)",
            self.instance_id, len(won), from_ts(pending.slot).isoformat(),
        )
        lost = [(job, pending.slot) for job, res, _ in pending.ready if not res.won]
        self.due.after_many(lost, self.jobs)
        kept = await self.withdraw(pending.slot, won) if won else []
        if kept:  # the store did not answer: still ours, and only we know of them
            self.due.after_many([(job, pending.slot) for job, _ in kept], self.jobs)
            now = from_ts(self.clock.now())
            slot = from_ts(pending.slot)
            for job, res in kept:
                if res.token is None:
                    continue
                row = instance_lost_run(
                    job.id, res.token, self.instance_id, slot,
                    res.run.claimed_at if res.run is not None and res.run.claimed_at else now,
                    now=now, ttl=self.settings.instance_ttl, marked_by=self.instance_id)
                self.writer.add(Finish(row, res.token))
            self.writer.wake()
        gone = {job.id for job, _ in kept}
        jobs = self.jobs
        return [
            (job, pending.slot) for job, _ in won if job.id not in gone and jobs.get(job.id) is job
        ]

    def take(self, now: float) -> Pending | None:
        """The pending early claims if their instant has come (they leave this owner)."""
        pending = self.pending
        if pending is not None and pending.slot <= now:
            self.pending = None
            return pending
        return None

    async def fire(
        self, pending: Pending, now: float, states: Mapping[str, JobState]
    ) -> list[tuple[Job, float]]:
        """At the instant: start the runs claimed early; returns the (job, slot) pairs to
        handle as if never claimed early (withdrawn claims)."""
        # The cyclic GC waits until these handlers have taken their first step: a full
        # collection over a large job set costs tens of milliseconds, which would land
        # on the lateness of every handler not yet started. Cyclic garbage is collected
        # that moment later, nothing else changes.
        hold_gc = gc.isenabled() and len(pending.ready) > 1
        if hold_gc:
            gc.disable()
        try:
            undo, done = self._start(pending, now, states)
        finally:
            if hold_gc:  # runs after the first steps the loop now has queued
                asyncio.get_running_loop().call_soon(gc.enable)
        if done:
            # bookkeeping once the handlers have taken their first step: the next slots
            await asyncio.sleep(0)
            self.due.after_many(done, self.jobs)
        if not undo:
            return []
        kept = await self.withdraw(pending.slot, undo)
        self._keep(pending.slot, kept, now, states)
        gone = {job.id for job, _ in kept}
        jobs = self.jobs
        return [
            (job, pending.slot) for job, _ in undo if job.id not in gone and jobs.get(job.id) is job
        ]

    def _start(
        self, pending: Pending, now: float, states: Mapping[str, JobState]
    ) -> tuple[list[tuple[Job, Dispatched]], list[tuple[Job, float]]]:
        """Start the runs claimed early. Returns the claims to withdraw — jobs paused,
        disabled or removed since, or slots that are now late — and the (job, slot) pairs
        handled, whose next slots are queued by the caller."""
        slot, jobs = pending.slot, self.jobs
        late = now - slot > self.settings.late_after
        now_dt = from_ts(now)
        undo: list[tuple[Job, Dispatched]] = []
        go: list[Active] = []
        done: list[tuple[Job, float]] = []
        for job, res, active in pending.ready:
            if jobs.get(job.id) is not job:
                if active is not None:
                    undo.append((job, res))
                continue
            if active is not None:
                st = states.get(job.id) if states else None
                if (
                    late
                    or (now - slot >= min_gap(job) and after(job, slot) <= now)
                    or (st is not None and not st.enabled_at(job, now_dt))
                ):
                    undo.append((job, res))  # its next slot is pushed when it is handled
                    continue
                active.run.started_at = now_dt
                go.append(active)
            else:  # another instance claimed the slot first
                self.stats.claims_lost += 1
            done.append((job, slot))
        self.runs.start(go)
        return undo, done

    async def withdraw(
        self, slot: float, undo: list[tuple[Job, Dispatched]]
    ) -> list[tuple[Job, Dispatched]]:
        """Withdraw early claims; returns those the store could not withdraw (still ours)."""
        assert isinstance(self.store, EarlyClaimStore)
        # one transaction per chunk: each well inside the store deadline
        size = self.settings.batch_size
        for i in range(0, len(undo), size):
            chunk = undo[i : i + size]
            try:
                await self.store.withdraw(
                    [(job.id, slot, res.token) for job, res in chunk if res.token is not None]
                )
            except Exception as exc:
                self.stats.store_errors += 1
                self.warn.warning("early-withdraw", "cannot withdraw %d early claims (%s)",
                                      len(undo) - i, exc)
                return undo[i:]
        return []

    def _keep(
        self,
        slot: float,
        kept: list[tuple[Job, Dispatched]],
        now: float,
        states: Mapping[str, JobState],
    ) -> None:
        """Early claims that could not be withdrawn stay ours: a job still enabled runs its
        slot (late); a paused, disabled or removed one records it skipped and frees the
        lease, through the group commit (retried until the store answers)."""
        now_dt = from_ts(now)
        for job, res in kept:
            run = res.run
            if run is None:
                continue
            live = self.jobs.get(job.id) is job
            st = states.get(job.id)
            reason = skip_reason(job, st, now_dt)
            if live:
                self.due.push(job, after(job, slot))
                self.due.mark(job.id, slot)
                if reason is None:
                    run.started_at = now_dt
                    self.runs.launch(job, run, leased=True)
                    continue
            if reason is None:  # removed: recorded as if disabled
                reason = SkipReason.DISABLED
            skip_run(run, reason.value, removed_or_skipped_log(reason.value, live), now_dt)
            self.stats.skipped += 1
            self.writer.add(Finish(run, run.fencing_token))
        if kept:
            self.writer.flush_event.set()

    async def fire_before_stop(self) -> None:
        """Run the instant whose slots this process claimed early, then let stop go on.

        Giving those claims back would lose the slots: every other instance that tried to
        claim them early lost the claim and has moved on to its next instant. So a stop
        waits for the instant (at most the claim lead, normally 0.5 s) and starts them
        like the loop would; the handlers then get the usual grace period."""
        pending = self.pending
        if pending is None or pending.slot - self.clock.now() > self.settings.shutdown_grace:
            return
        if not any(active is not None for _, _, active in pending.ready):
            return
        log.info("stopping after the slots claimed early for %s start",
                 from_ts(pending.slot).isoformat())

        async def until_the_instant() -> None:
            while self.clock.now() < pending.slot:
                await self.clock.sleep_until(pending.slot, precise=True)

        # bounded in real time too: a clock that does not move (a test's FakeClock) or
        # jumps back must not hold the stop; unstarted claims are then given back
        wait = pending.slot - self.clock.now() + 1.0
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                await until_the_instant()
        except TimeoutError:
            return
        self.activity.enter()
        try:
            await self.loop.fire_due(self.clock.now())
        except Exception:
            log.exception("cronfleet: error while firing the early-claimed slots at stop")
        finally:
            self.activity.leave()

    async def give_back(self) -> None:
        """At stop: slots claimed early too far ahead to wait for are given back, as if
        never claimed (another instance that also wants them claims them at their time if
        its own early claim was refused for a busy lease, or a later start's catch-up
        finds them missed)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        log.warning("stopping %.1fs before %d slots claimed early: giving them back",
                    pending.slot - self.clock.now(), len(pending.ready))
        claimed = [(job, res) for job, res, active in pending.ready if active is not None]
        for _job, res in await self.withdraw(pending.slot, claimed):
            if res.run is not None:
                self.runs.interrupt(
                    res.run, True, self.clock.now(), "the scheduler stopped before its slot"
                )
