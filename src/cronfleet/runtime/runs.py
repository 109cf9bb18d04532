"""Runs in progress in this process: starting handlers (written once), retries, the end
of a run, and the runs queued for their job's lease.

``Runs`` owns every piece of per-run state: the active runs by key, how many runs of each
job are in progress here, the runs waiting for a lease (``Overlap.QUEUE_ONE``), the runs
ended but not settled yet, and the worker threads for sync handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronfleet.attempts import attempt_line, attempt_outcomes
from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import from_ts
from cronfleet.model import (
    Job,
    Locking,
    Overlap,
    RunContext,
    RunRecord,
    RunStatus,
    SkipReason,
    is_async_handler,
)
from cronfleet.runtime.events import RunFinished, RunRetried, RunStarting
from cronfleet.runtime.executor import Outcome, execute
from cronfleet.runtime.parts import Active, Queued
from cronfleet.runtime.threads import DaemonThreadPool
from cronfleet.store.base import Dispatch, Finish, RunFilter, Start
from cronfleet.store.ledger import (
    CANCELLED_REASON,
    SHUTDOWN_REASON,
    STOPPED_BEFORE_FINISH,
    shutdown_log,
    skip_result,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.events import Events
    from cronfleet.runtime.parts import Canceller, Life, Settings
    from cronfleet.runtime.stats import Stats
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

SUPERSEDED = SkipReason.SUPERSEDED.value
STOPPED_IN_JITTER = "the scheduler stopped while the slot waited out its jitter delay"

__all__ = ["Runs", "run_age"]

log = logging.getLogger("cronfleet")

_EAGER = sys.version_info >= (3, 12)
_RETRIED = (RunStatus.FAILED, RunStatus.TIMED_OUT)
SAVE_WAIT = 5.0  # RunContext.save(wait=True): how long a run waits for its row


def run_age(run: RunRecord) -> tuple[float, float, int]:
    """Oldest first: by start, then slot, then id (``Overlap.REPLACE`` with lanes)."""
    started = run.started_at or run.claimed_at or run.slot
    return (started.timestamp(), run.slot.timestamp(), run.id or 0)


class Runs:
    """The runs of this process. Built with the store, the clock, the settings, the
    scheduler's life, the stats, the events, the activity counter, the writer (it hands
    rows to it) and ``control`` (``cancel_async``: ``Overlap.REPLACE`` cancels a run
    wherever it executes). The other parts change its state through its methods only
    (``launch``, ``enqueue``, ``enqueue_recovery``, ``reserve``, ...)."""

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, life: Life,
                 stats: Stats, events: Events, activity: Activity, writer: Writer,
                 control: Canceller) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.life = life
        self.stats = stats
        self.events = events
        self.activity = activity
        self.writer = writer
        self.control = control
        self.active: dict[int, Active] = {}
        self.running: dict[str, int] = {}  # runs in progress here, per job
        self.queued: dict[str, Queued] = {}
        self.starting: set[int] = set()  # pending runs whose start is being asked
        # recovery runs waiting for their job's lease (kept apart from QUEUE_ONE's slot)
        self.recovering: dict[str, Queued] = {}
        # claimed slots waiting out their jitter (pending rows), by run id: a stop that
        # comes first records them (``stop``)
        self.deferred: dict[int, Queued] = {}
        self.ended: list[Active] = []
        self.unrecorded: dict[int, Active] = {}  # fast-path runs whose row is not written
        self.idle_jobs: dict[str, asyncio.Event] = {}
        self.threads: DaemonThreadPool | None = None
        self._seq = itertools.count()
        self._slot_tz: dict[tuple[datetime, Any], datetime] = {}

    # -- starting -----------------------------------------------------------------------

    def launch(self, job: Job, run: RunRecord, leased: bool) -> None:
        """Start one run (a claimed slot, a manual run, a queued run getting its lease)."""
        active = Active(job, run, leased)
        active.ctx = self.context(job, run)
        self.activity.enter()
        self.stats.fired += 1
        self._start(active, asyncio.get_running_loop())
        if run.id is None:
            self.writer.started_unrecorded()

    def start(self, actives: Sequence[Active]) -> None:
        """Start a batch of runs whose records and contexts are built (early claims)."""
        if not actives:
            return
        self.activity.enter(len(actives))
        self.stats.fired += len(actives)
        loop, start = asyncio.get_running_loop(), self._start
        for active in actives:
            start(active, loop)
        if self.unrecorded:
            self.writer.started_unrecorded()

    def _start(self, active: Active, loop: asyncio.AbstractEventLoop) -> None:
        """The one place a handler starts: the run is registered as in progress here and
        its task created (the counters and the writer are the callers', once per batch)."""
        key = active.run.id
        if key is None:
            key = -next(self._seq)
            self.unrecorded[key] = active
        self.active[key] = active
        running, job_id = self.running, active.job.id
        running[job_id] = running.get(job_id, 0) + 1
        if _EAGER:
            # Python 3.12+: the handler's first step runs now, inside its own Task (so
            # libraries that tie state to the current task, like anyio's cancel scopes,
            # see one task throughout); a handler that never suspends costs no scheduling.
            active.task = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
                self._execute(key, active), loop=loop, eager_start=True
            )
        else:
            active.task = loop.create_task(self._execute(key, active))

    def context(self, job: Job, run: RunRecord) -> RunContext:
        key = (run.slot, job.schedule.tz)
        slot = self._slot_tz.get(key)
        if slot is None:
            if len(self._slot_tz) > 10_000:
                self._slot_tz.clear()
            slot = self._slot_tz[key] = run.slot.astimezone(job.schedule.tz)
        return RunContext(
            job_id=job.id,
            slot=slot,
            triggered_by=run.triggered_by,
            instance_id=self.settings.instance_id,
            fencing_token=run.fencing_token,
            config=job.config,
            run_id=run.id,
            is_catchup=run.is_catchup,
            is_recovery=run.is_recovery,
            manual=run.manual,
            attempt=run.attempt,
            logs=run.logs,
            params=run.params or {},
            saver=functools.partial(self.save, run),
        )

    async def save(self, run: RunRecord, wait: bool) -> int | None:
        """``RunContext.save``: queue the row of a run in progress (its logs so far) for
        the group commit; ``wait``: until it is written (5 s at most), its id returned."""
        if run.status is not RunStatus.RUNNING:
            return run.id
        writer = self.writer
        writer.add(Finish(run))
        writer.wake()
        if wait and run.id is None and self.life.running:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAVE_WAIT):
                    while run.id is None and self.life.running:
                        await writer.flushed()
                        if run.id is None:
                            await asyncio.sleep(0.05)
        return run.id

    # -- executing ----------------------------------------------------------------------

    async def _execute(self, key: int, active: Active) -> None:
        job = active.job
        assert job.handler is not None and self.threads is not None and active.ctx is not None
        clock = self.clock
        started = clock.now()
        if self.events.wants(RunStarting):  # e.g. cronfleet.tracing opens the run's span
            self.events.publish(RunStarting(job, active.run, self.settings.instance_id))
        try:
            outcome = await execute(
                job.handler,
                active.ctx,
                timeout=job.timeout,
                threads=self.threads,
                now=clock.now,
                is_async=job.is_async,
            )
            if job.own_policies:  # an HTTP job retries itself and numbers its attempts
                active.run.attempt = active.ctx.attempt
            elif job.retry is not None and outcome.status in _RETRIED and active.cancel is None:
                outcome = await self._retry(active, outcome)
        except asyncio.CancelledError:
            outcome = self._cancelled(active, started)
        if active.cancel is not None and outcome.status is not RunStatus.CANCELLED:
            outcome = self._cancelled_after(active, outcome)
        self.finalize(key, active, outcome)

    def find(self, run_id: int) -> Active | None:
        """The run ``run_id`` executing here; a fast-path run stays keyed by its
        place-holder after its row (and id) was written, so it is looked for by id too."""
        active = self.active.get(run_id)
        if active is None:
            active = next((a for a in self.active.values() if a.run.id == run_id), None)
        return active

    def cancel(self, run_id: int, *, by: str, why: str) -> str:
        """Cancel run ``run_id`` executing in this process: the run is recorded
        ``cancelled`` (reason ``cancelled``) with who and why. An async handler is
        cancelled now (``CancelledError`` inside it). A sync handler's thread cannot be
        stopped: the request is logged in the run, which is recorded ``cancelled`` when
        the handler returns (its own outcome noted in the log). Other job kinds (command
        jobs) put their own stop behind this hook. Returns what was done, in words;
        raises ``KeyError`` when the run is not executing here."""
        active = self.find(run_id)
        if active is None:
            raise KeyError(run_id)
        if active.cancel is not None:
            return f"already being cancelled (asked by {active.cancel[0]})"
        active.cancel = (by, why)
        job = active.job
        stop = getattr(job.handler, "cancel_run", None)
        if callable(stop):  # a job kind with its own way to stop (a process group, ...)
            stop(active.run)
            how = "stopping it"
        elif job.is_async if job.is_async is not None else is_async_handler(job.handler):
            if active.task is not None:
                active.task.cancel()
            how = "the handler was cancelled"
        else:
            how = ("its thread cannot be stopped: the run is recorded cancelled when the "
                   "handler returns")
        if active.ctx is not None:
            active.ctx.log(f"Cancel requested by {by}: {why}; {how}")
        log.info("run %s of %r: cancel requested by %s (%s); %s", run_id, job.id, by, why, how)
        return how

    def _cancelled_after(self, active: Active, outcome: Outcome) -> Outcome:
        """A run asked to cancel that ended another way (a sync handler that returned)."""
        assert active.cancel is not None
        by, why = active.cancel
        if active.ctx is not None:
            active.ctx.log(f"The handler ended ({outcome.status.value}"
                           + (f": {outcome.error}" if outcome.error else "")
                           + ") after the cancel request")
        return Outcome(RunStatus.CANCELLED, outcome.started, outcome.finished,
                       result=outcome.result, error=f"cancelled by {by}: {why}",
                       reason=CANCELLED_REASON)

    async def _retry(self, active: Active, outcome: Outcome) -> Outcome:
        """Run the handler again with the job's backoff, inside the same slot, until an
        attempt succeeds or ``retry.attempts`` were made. Every attempt is logged in the
        run; ``attempt`` (the run's column and the context's) is the last attempt's number;
        the outcome is the last attempt's, its start the first attempt's."""
        job, ctx, run = active.job, active.ctx, active.run
        policy = job.retry
        assert policy is not None and ctx is not None and job.handler is not None
        if policy.attempts <= 1 or job.own_policies:
            return outcome
        first = outcome.started
        for n in range(1, policy.attempts):
            delay = policy.wait(n)
            ctx.log(attempt_line(n, policy.attempts, outcome.status.value, outcome.started,
                                 outcome.finished, outcome.error, delay))
            self.stats.retries += 1
            if self.events.wants(RunRetried):
                self.events.publish(RunRetried(job, run, n, delay, outcome.error))
            if delay > 0:
                until = self.clock.now() + delay
                self.activity.leave()  # waiting for the next attempt is idle time, as jitter
                try:
                    while self.clock.now() < until:
                        await self.clock.sleep_until(until)
                finally:
                    self.activity.enter()
            run.attempt = ctx.attempt = n + 1
            assert self.threads is not None
            outcome = await execute(
                job.handler, ctx, timeout=job.timeout, threads=self.threads,
                now=self.clock.now, is_async=job.is_async,
            )
            if outcome.status not in _RETRIED:
                break
        ctx.log(attempt_line(run.attempt, policy.attempts, outcome.status.value,
                             outcome.started, outcome.finished, outcome.error))
        outcome.started = first
        return outcome

    def _cancelled(self, active: Active, started: float) -> Outcome:
        if active.cancel is not None and not self.life.stopping:
            by, why = active.cancel
            return Outcome(RunStatus.CANCELLED, started, self.clock.now(),
                           error=f"cancelled by {by}: {why}", reason=CANCELLED_REASON)
        if active.ctx is not None:
            active.ctx.log(shutdown_log())
        return Outcome(
            RunStatus.INTERRUPTED,
            started,
            self.clock.now(),
            error=f"interrupted: {STOPPED_BEFORE_FINISH}",
            reason=SHUTDOWN_REASON,
        )

    async def execute_inline(self, job: Job, run: RunRecord, leased: bool) -> RunRecord:
        """A manual run outside a running scheduler: run it to its end and write it."""
        threads = DaemonThreadPool(1)
        self.threads = threads
        try:
            key = run.id if run.id is not None else -1
            active = Active(job, run, leased)
            self.active[key] = active
            self.running[job.id] = self.running.get(job.id, 0) + 1
            self.activity.enter()
            active.ctx = self.context(job, run)
            # in a task of its own, like every run: what a RunStarting listener puts in
            # the context (the trace span) stays in the run, not in the caller's context
            await asyncio.create_task(self._execute(key, active))
            await self.writer.flush_once()
        finally:
            threads.shutdown(wait=False)
            self.threads = None
        return run

    # -- ending -------------------------------------------------------------------------

    def finalize(self, key: int, active: Active, outcome: Outcome) -> None:
        """A run ended: free the job locally now, do the bookkeeping later (``settle``),
        so that during a burst the next handler starts as soon as possible."""
        active.outcome = outcome
        self.unreserve(active.job.id)
        self.active.pop(key, None)
        self.unrecorded.pop(key, None)
        self.ended.append(active)
        self.writer.wake()

    def reserve(self, job_id: str) -> None:
        """Count a run as in progress here before it exists (a manual run of a node-local
        job between its "already running here?" check and its start, which are separated
        by the store call): every other check sees the job busy meanwhile."""
        self.running[job_id] = self.running.get(job_id, 0) + 1

    def unreserve(self, job_id: str) -> None:
        """One run (or reservation) of ``job_id`` here less."""
        left = self.running.get(job_id, 1) - 1
        if left:
            self.running[job_id] = left
        else:
            self.running.pop(job_id, None)
        idle = self.idle_jobs.pop(job_id, None)  # every waiter looks at the count again
        if idle is not None:
            idle.set()

    def settle(self) -> list[Finish]:
        """Turn ended runs into the records of the group commit (returned), and announce
        them."""
        ended, self.ended = self.ended, []
        finishes: list[Finish] = []
        if not ended:
            return finishes
        stats = self.stats
        outcomes = stats.outcomes
        attempts = stats.attempts
        events = self.events if self.events.wants(RunFinished) else None
        for active in ended:
            job, run, outcome = active.job, active.run, active.outcome
            assert outcome is not None
            run.status = outcome.status
            run.started_at = from_ts(outcome.started)
            run.finished_at = from_ts(outcome.finished)
            run.result = outcome.result
            run.error = outcome.error
            run.reason = outcome.reason
            outcomes[run.status.value] = outcomes.get(run.status.value, 0) + 1
            for tried in attempt_outcomes(run):
                attempts[tried] = attempts.get(tried, 0) + 1
            stats.job_outcome(job.id, run.status.value, outcome.finished)
            if not run.manual:
                stats.lateness.observe(outcome.started - run.slot.timestamp())
            stats.durations.observe(outcome.finished - outcome.started)
            finishes.append(Finish(run, run.fencing_token if active.leased else None))
            if events is not None:
                events.publish(RunFinished(job, run, self.settings.instance_id))
            self.activity.leave()
            if job.id in self.queued and self.life.running and not self.life.stopping:
                self.life.spawn(self._retry_queued(self.queued[job.id]))
            if job.id in self.recovering and self.life.running and not self.life.stopping:
                self.life.spawn(self._retry_recovery(self.recovering[job.id]))
        return finishes

    def interrupt(self, run: RunRecord, leased: bool, now: float, why: str) -> None:
        run.status = RunStatus.INTERRUPTED
        run.reason = SHUTDOWN_REASON
        run.finished_at = from_ts(now)
        run.logs.append(shutdown_log(why))
        self.writer.add(Finish(run, run.fencing_token if leased else None))

    def take_unrecorded(self) -> list[Finish]:
        """The "started" rows of fast-path runs still running whose row is not written
        yet (``Writer.record_started_loop``); each is handed out once."""
        rows = [Finish(a.run) for a in self.unrecorded.values()
                if a.run.id is None and a.run.status is RunStatus.RUNNING]
        self.unrecorded.clear()
        return rows

    # -- waiting for a lease ------------------------------------------------------------

    def enqueue(self, job: Job, run: RunRecord, leased: bool) -> None:
        """A claimed slot waits for its job's lease (``Overlap.QUEUE_ONE`` / ``REPLACE``):
        it starts when the lease is free (a run here ends, the upkeep's poll)."""
        self.queued[job.id] = Queued(job, run, leased=leased)

    def enqueue_recovery(self, job: Job, run: RunRecord, leased: bool) -> None:
        """A recovery run waits for its job's lease, in a place of its own (never in
        ``QUEUE_ONE``'s single slot)."""
        self.recovering[job.id] = Queued(job, run, leased=leased)

    def local_busy_defer(self, job: Job) -> bool:
        return (
            job.locking is Locking.NODE_LOCAL
            and job.overlap in (Overlap.QUEUE_ONE, Overlap.REPLACE)
            and self.running.get(job.id, 0) >= job.max_instances
        )

    async def job_idle(self, job_id: str, below: int = 1) -> None:
        """Wait until fewer than ``below`` runs of ``job_id`` are in progress in this
        process (by default: none; ``max_instances`` for a free lane)."""
        while self.running.get(job_id, 0) >= below and not self.life.stopping:
            await self.idle_jobs.setdefault(job_id, asyncio.Event()).wait()

    async def start_after(self, job: Job, run: RunRecord, req: Dispatch, at: float) -> None:
        """Start a claimed slot's pending run once its jitter delay is over. Until then it
        is in ``deferred``: a stop meanwhile (this task cancelled, the start's store call
        included) leaves it there, and :meth:`stop` records it ``interrupted``."""
        assert run.id is not None
        self.deferred[run.id] = Queued(job, run, leased=req.lease)
        clock = self.clock
        while clock.now() < at:
            await clock.sleep_until(at)
        self.activity.enter()  # waiting for the jitter delay is idle time; starting is not
        try:
            await self.start_pending(job, run, req.lease, wait=req.wait_if_busy)
        finally:
            self.activity.leave()
        # reached only when the start was answered: started, settled, or queued (which
        # stop() records too); a cancelled start stays deferred
        self.deferred.pop(run.id, None)

    async def start_pending(self, job: Job, run: RunRecord, lease: bool, wait: bool) -> bool:
        """Start a pending run; returns False when it must keep waiting for the lease."""
        assert run.id is not None
        if (
            not lease
            and job.locking is Locking.NODE_LOCAL
            and self.running.get(job.id, 0) >= job.max_instances
            and (wait or job.overlap is Overlap.QUEUE_ONE)
        ):
            self.queued[job.id] = Queued(job, run, leased=False)
            return False
        if run.status is not RunStatus.PENDING:
            return True  # a previous start (another caller's) started or settled it
        if run.id in self.starting:
            # another caller (the upkeep's poll, a run's end) is
            # starting it: a second start would meet the lease the first took, queue the
            # run again, and a later try would take the lease for a run already finished
            # and never release it
            return False
        self.starting.add(run.id)
        try:
            [started] = await self.store.start(
                [Start(run.id, job.id, run.fencing_token, lease, job.lease_seconds, wait,
                       job.max_instances)],
                self.settings.instance_id,
            )
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("job %s: cannot start pending run %s (%s); retrying", job.id, run.id, exc)
            self.queued[job.id] = Queued(job, run, leased=lease)
            return False
        finally:
            self.starting.discard(run.id)
        if started.run is None:
            self.queued[job.id] = Queued(job, run, leased=lease)
            return False
        self.queued.pop(job.id, None)
        run.status = started.run.status  # callers holding this record see it is not pending
        if started.run.status is RunStatus.RUNNING:
            self.launch(job, started.run, leased=lease)
        else:
            self.stats.skip(started.run.reason)
        return True

    async def replace_running(self, job: Job) -> None:
        """``Overlap.REPLACE``: a slot of ``job`` waits for the lease (queued); cancel the
        run(s) holding it, wherever they execute, then start the slot once they ended (a
        run here: when it is settled, as for QUEUE_ONE; elsewhere: watched here, within
        the job's lease length, then the upkeep's poll)."""
        me = f"{self.settings.instance_id} (overlap replace)"
        try:
            page = await self.store.find_runs(
                RunFilter(status=RunStatus.RUNNING, job_id=job.id),
                limit=max(10, job.max_instances + 1))
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("job %s: cannot find the run to replace (%s)", job.id, exc)
            return
        q = self.queued.get(job.id)
        waiting = None if q is None else q.run.id
        holding = [r for r in page.runs if r.id is not None and r.id != waiting]
        if job.max_instances > 1:  # N lanes: only the oldest run makes way for the new slot
            holding = sorted(holding, key=run_age)[:1]
        remote: list[int] = []
        for run in holding:
            assert run.id is not None
            here = self.find(run.id) is not None
            try:
                await self.control.cancel_async(run.id, by=me, why="replaced by a newer slot "
                                     f"({'' if q is None else q.run.slot.isoformat()})")
            except Exception as exc:
                log.warning("job %s: cannot cancel run %s to replace it (%s)", job.id, run.id,
                            exc)
                continue
            if not here:
                remote.append(run.id)
        if not remote:
            return  # a run here: settled, then _retry_queued starts the slot
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(5.0, min(job.lease_seconds, 300.0))
        while remote and loop.time() < deadline:
            await asyncio.sleep(0.1)
            try:
                ends = [await self.store.get_run(rid) for rid in remote]
            except Exception:
                continue
            remote = [rid for rid, r in zip(remote, ends, strict=True)
                      if r is not None and not r.status.finished]
        q = self.queued.get(job.id)
        if q is not None and not remote and self.life.running and not self.life.stopping:
            self.activity.enter()
            try:
                await self.start_pending(q.job, q.run, q.leased, wait=True)
            finally:
                self.activity.leave()

    async def _retry_queued(self, q: Queued) -> None:
        self.activity.enter()
        try:
            await self.writer.flushed()
            if self.queued.get(q.job.id) is q:
                await self.start_pending(q.job, q.run, q.leased, wait=True)
        finally:
            self.activity.leave()

    async def poll_queued(self) -> None:
        for q in list(self.queued.values()):
            if not self.running.get(q.job.id):
                await self.start_pending(q.job, q.run, q.leased, wait=True)
        for q in list(self.recovering.values()):
            await self.start_recovery(q)

    async def _retry_recovery(self, q: Queued) -> None:
        self.activity.enter()
        try:
            await self.writer.flushed()  # our own run's lease release is written first
            await self.start_recovery(q)
        finally:
            self.activity.leave()

    async def start_recovery(self, q: Queued) -> None:
        """A recovery run waiting for its job's lease: start it when the lease is free,
        or record it ``skipped`` (``superseded``) once its slot is older than the job's
        catch-up window — never dropped silently."""
        job, run = q.job, q.run
        if self.recovering.get(job.id) is not q or run.id is None:
            return
        now = self.clock.now()
        if now - run.slot.timestamp() > max(job.catch_up_window, self.settings.late_after):
            del self.recovering[job.id]
            run.status, run.reason = RunStatus.SKIPPED, SUPERSEDED
            run.finished_at = from_ts(now)
            run.result = skip_result(SUPERSEDED)
            run.logs.append(
                f"Skipped: the recovery never got the job's lease within its catch-up window "
                f"({job.catch_up_window:g}s): superseded by the job's later slots"
            )
            self.stats.skip(SUPERSEDED)
            self.writer.add(Finish(run, None), now=True)
            log.warning("job %s: recovery of slot %s superseded", job.id, run.slot.isoformat())
            return
        if self.running.get(job.id):
            return  # our own run holds the lease: retried when it ends
        try:
            [started] = await self.store.start(
                [Start(run.id, job.id, run.fencing_token, q.leased, job.lease_seconds, True,
                       job.max_instances)],
                self.settings.instance_id,
            )
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("job %s: cannot start recovery run %s (%s); retrying", job.id, run.id, exc)
            return
        if started.run is None or self.recovering.get(job.id) is not q:
            return  # the lease is still busy: next poll
        del self.recovering[job.id]
        if started.run.status is RunStatus.RUNNING:
            log.info("job %s: recovery of slot %s runs now", job.id, run.slot.isoformat())
            self.launch(job, started.run, leased=q.leased)
        else:
            self.stats.skip(started.run.reason)

    async def stop(self, grace: float) -> None:
        """Give running handlers ``grace`` seconds, then cancel them; record the queued
        runs that never got their turn as interrupted."""
        runs = [a.task for a in self.active.values() if a.task is not None]
        if runs:
            log.info("waiting up to %gs for %d running jobs", grace, len(runs))
            _, pending = await asyncio.wait(runs, timeout=grace)
            await cancel_and_wait(pending)
        now = self.clock.now()
        for q in [*self.queued.values(), *self.recovering.values()]:
            self.interrupt(q.run, q.leased, now, "the scheduler stopped before its turn came")
        for q in self.deferred.values():
            if q.run.status is RunStatus.PENDING:  # not started, or its start not answered
                self.interrupt(q.run, q.leased, now, STOPPED_IN_JITTER)
        self.queued.clear()
        self.recovering.clear()
        self.deferred.clear()

    def close(self) -> None:
        if self.threads is not None:
            self.threads.shutdown(wait=False, cancel_futures=True)
