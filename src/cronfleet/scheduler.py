"""The loop: a due heap, batched claims, catch-up, dispatch, group-committed results.

One asyncio task sleeps until the earliest due slot (no polling), then handles every job
due at that instant as one batch: one read of the overrides, one claim transaction, one
lease/ledger transaction. Finished runs are queued and written together, so a burst of
thousands of runs costs a handful of statements.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import heapq
import itertools
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cronfleet.clock import Clock, SystemClock, from_ts
from cronfleet.cron import CronExpr
from cronfleet.cron.duration import to_timedelta
from cronfleet.errors import AlreadyExecuting, DuplicateJob, JobNotFound
from cronfleet.executor import Outcome, execute
from cronfleet.model import (
    DEFAULT_TEAM,
    Handler,
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
from cronfleet.planning import catchup_banner, jitter_delay, plan_slots
from cronfleet.store import Store, open_store
from cronfleet.store.base import Dispatch, Dispatched, EarlyClaimStore, Finish, Skip, Start

__all__ = ["Scheduler"]

log = logging.getLogger("cronfleet")
T = TypeVar("T")

DEFAULT_STORE = "sqlite:///cronfleet.db"
_MAX_BUFFERED = 10_000
_EAGER = sys.version_info >= (3, 12)
# an estimate of what claiming one slot early costs (loop and store thread), with margin
_EARLY_PER_SLOT = 50e-6


def new_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _secs(value: str | float | timedelta | None, name: str) -> float:
    return to_timedelta(value, field=name).total_seconds()


@dataclass(slots=True)
class _Active:
    """A run executing in this process."""

    job: Job
    run: RunRecord
    leased: bool
    task: asyncio.Task[None] | None = None
    ctx: RunContext | None = None
    outcome: Outcome | None = None


@dataclass(slots=True)
class _Queued:
    """A claimed slot waiting for the lease (``Overlap.QUEUE_ONE``)."""

    job: Job
    run: RunRecord
    leased: bool


# upper bounds (seconds) of the lateness and duration histograms kept for /metrics
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass(slots=True)
class Histogram:
    """Cumulative-ready bucket counts; observing costs one bisect (no lock: the loop's
    thread is the only writer)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1


@dataclass(slots=True)
class _Early:
    """The slots of one instant claimed shortly before it (see ``Scheduler._claim_early``):
    each job with its claim result and, where the claim was won, its run ready to start."""

    slot: float
    ready: list[tuple[Job, Dispatched, _Active | None]] = field(default_factory=list)


@dataclass(slots=True)
class _Stats:
    """What this process did since it started (exported by ``/metrics``)."""

    fired: int = 0
    skipped: int = 0
    claims_lost: int = 0
    store_errors: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    skips: dict[str, int] = field(default_factory=dict)
    lateness: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS))
    durations: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))

    def skip(self, reason: str | None, n: int = 1) -> None:
        self.skipped += n
        key = reason or "other"
        self.skips[key] = self.skips.get(key, 0) + n


class _Pipeline:
    """Chunks of one burst in flight to the store, oldest first.

    A chunk is handed to the store's thread as soon as it is planned; while the store
    claims it, the loop plans the next chunk and starts the handlers of chunks already
    claimed. The first handlers of a large burst start after one small transaction.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        handle: Callable[[list[Dispatch], asyncio.Future[Any]], list[Dispatched]] | None = None,
    ) -> None:
        self.s = scheduler
        self.handle = handle or scheduler._handle_chunk
        self.inflight: deque[tuple[list[Dispatch], asyncio.Future[Any]]] = deque()
        self.results: list[Dispatched] = []

    async def submit(self, chunk: list[Dispatch]) -> None:
        task = asyncio.ensure_future(self.s.store.dispatch(chunk, self.s.instance_id))
        self.inflight.append((chunk, task))
        await asyncio.sleep(0)  # let the task reach the store's thread before we go on
        while self.inflight and self.inflight[0][1].done():
            done_chunk, done = self.inflight.popleft()
            self.results.extend(self.handle(done_chunk, done))

    async def drain(self) -> list[Dispatched]:
        while self.inflight:
            chunk, task = self.inflight.popleft()
            await asyncio.wait({task})
            self.results.extend(self.handle(chunk, task))
        return self.results


class Scheduler:
    """Fires each slot of each job once across every process sharing ``store``.

    ``store``: a URL (``sqlite:///cronfleet.db`` by default, ``postgresql://...``) or a
    :class:`~cronfleet.store.Store`. ``clock`` is injectable for tests. ``late_after``: a
    slot handled more than this many seconds after its time is a missed slot, handled by
    the job's catch-up policy. ``claim_ahead``: how long before an instant its plain slots
    are claimed (with their leases), so that their handlers start at the instant without
    a store round trip; 0 claims every slot at its time (docs/architecture.md, "Early
    claims"). ``timers=False`` runs no loop: a control-only process (an API replica) that
    can pause, trigger and read history.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        timezone: str = "UTC",
        catch_up_window: str | float | timedelta = "1h",
        clock: Clock | None = None,
        instance_id: str | None = None,
        late_after: str | float | timedelta = 5.0,
        max_workers: int = 32,
        shutdown_grace: str | float | timedelta = "30s",
        run_retention: str | float | timedelta = "30d",
        runs_per_job: int = 1000,
        claim_retention: str | float | timedelta = "7d",
        orphan_interval: str | float | timedelta = "15s",
        queue_poll: str | float | timedelta = "1s",
        batch_size: int = 1000,
        record_started_after: float = 0.25,
        claim_ahead: str | float | timedelta = 0.5,
        timers: bool = True,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.store: Store = open_store(store or DEFAULT_STORE, clock=self.clock)
        self.instance_id = instance_id or new_instance_id()
        self.timezone = timezone
        self.catch_up_window = _secs(catch_up_window, "catch_up_window")
        self.late_after = _secs(late_after, "late_after")
        self.max_workers = max_workers
        self.shutdown_grace = _secs(shutdown_grace, "shutdown_grace")
        self.run_retention = _secs(run_retention, "run_retention")
        self.runs_per_job = runs_per_job
        self.claim_retention = _secs(claim_retention, "claim_retention")
        self.orphan_interval = _secs(orphan_interval, "orphan_interval")
        self.queue_poll = _secs(queue_poll, "queue_poll")
        self.batch_size = max(1, batch_size)
        self.timers = timers
        self.record_started_after = record_started_after
        self.claim_ahead = max(0.0, _secs(claim_ahead, "claim_ahead"))
        # only stores that can withdraw an early claim get them
        self._ahead = self.claim_ahead if isinstance(self.store, EarlyClaimStore) else 0.0
        self.stats = _Stats()
        self.last_tick: float | None = None
        self._jobs: dict[str, Job] = {}
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._heap: list[float] = []
        self._buckets: dict[float, list[str]] = {}
        self._next: dict[str, float] = {}
        self._watermark: dict[str, float] = {}
        self._seq = itertools.count()
        self._active: dict[int, _Active] = {}
        self._local_running: dict[str, int] = {}
        self._queued: dict[str, _Queued] = {}
        self._finishes: list[Finish] = []
        self._ended: list[_Active] = []
        self._idle_jobs: dict[str, asyncio.Event] = {}
        self._slot_tz: dict[tuple[datetime, Any], datetime] = {}
        self._unrecorded: dict[int, _Active] = {}
        self._record_event: asyncio.Event | None = None
        self._firing: asyncio.Future[None] | None = None
        self._early: _Early | None = None
        self._fired_at: float | None = None
        self._flush_done: asyncio.Event | None = None
        self._last_reap: float | None = None
        self._unsaved_skips: deque[Skip] = deque(maxlen=_MAX_BUFFERED)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._flush_event: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._busy = 0
        self._threads: ThreadPoolExecutor | None = None
        self._running = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    # -- declaring jobs -----------------------------------------------------------------

    @property
    def jobs(self) -> Mapping[str, Job]:
        return dict(self._jobs)

    def job(
        self,
        schedule: str | CronExpr,
        *,
        id: str | None = None,
        timezone: str | None = None,
        missed: Missed | str = Missed.RUN_ONCE,
        catch_up_window: str | float | timedelta | None = None,
        locking: Locking | str = Locking.PREFER_GLOBAL,
        overlap: Overlap | str = Overlap.SKIP,
        timeout: str | float | timedelta | None = None,
        jitter: str | float | timedelta = 0,
        enabled: bool = True,
        recover: bool = False,
        config: Mapping[str, Any] | None = None,
        description: str | None = None,
        team: str = DEFAULT_TEAM,
    ) -> Callable[[Handler], Handler]:
        """Decorator: declare ``fn`` as a job; returns ``fn`` unchanged."""

        def register(fn: Handler) -> Handler:
            job_id = id or f"{fn.__module__}.{getattr(fn, '__qualname__', repr(fn))}"
            doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
            self.add_job(
                Job.create(
                    schedule,
                    fn,
                    id=job_id,
                    timezone=timezone or self.timezone,
                    missed=missed,
                    catch_up_window=(
                        self.catch_up_window if catch_up_window is None else catch_up_window
                    ),
                    locking=locking,
                    overlap=overlap,
                    timeout=timeout,
                    jitter=jitter,
                    enabled=enabled,
                    recover=recover,
                    config=config,
                    description=description if description is not None else (doc[0] if doc else ""),
                    team=team,
                )
            )
            return fn

        return register

    def add_job(self, job: Job) -> Job:
        if job.id in self._jobs:
            raise DuplicateJob(f"job id {job.id!r} is declared twice")
        if job.handler is None:
            raise ValueError(f"job {job.id!r} has no handler")
        self._jobs[job.id] = job
        if self._running:
            self._spawn(self._add_running(job))
        return job

    def remove_job(self, job_id: str) -> None:
        if self._jobs.pop(job_id, None) is None:
            raise JobNotFound(job_id)
        self._next.pop(job_id, None)
        self._watermark.pop(job_id, None)

    def replace_job(self, job: Job) -> Job:
        """Swap a job's definition (same id) for a new one; a running scheduler plans its
        next slot from the new schedule. Runs already started finish as they were."""
        self._jobs.pop(job.id, None)
        self._next.pop(job.id, None)
        self._watermark.pop(job.id, None)
        return self.add_job(job)

    def health(self) -> dict[str, Any]:
        """Liveness facts for readiness probes: is the loop alive, and how far behind the
        earliest due slot is it (``overdue`` seconds; a healthy loop stays near 0)."""
        now = self.clock.now()
        loop_alive = self._loop_task is not None and not self._loop_task.done()
        overdue = max(0.0, now - self._heap[0]) if self.timers and self._heap else 0.0
        return {
            "instance_id": self.instance_id,
            "running": self._running,
            "timers": self.timers,
            "loop_alive": loop_alive,
            "last_tick": None if self.last_tick is None else from_ts(self.last_tick).isoformat(),
            "overdue": round(overdue, 3),
            "jobs": len(self._jobs),
            "active_runs": len(self._active),
        }

    def leases_held(self) -> int:
        """Runs of this process that hold their job's lease."""
        return sum(1 for a in list(self._active.values()) if a.leased)

    def get_job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFound(job_id) from None

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """Open the store, catch up what was missed, and start the loop in the background."""
        if self._running:
            return
        self._reset_runtime()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._flush_event = asyncio.Event()
        self._record_event = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._threads = ThreadPoolExecutor(self.max_workers, thread_name_prefix="cronfleet-job")
        await self.store.open()
        states = await self.store.ensure_jobs(list(self._jobs))
        now = self.clock.now()
        for job in self._jobs.values():
            self._schedule_first(job, states.get(job.id), now)
        self._running = True
        self._stopping = False
        self._flusher = asyncio.create_task(self._flush_loop(), name="cronfleet-flush")
        self._spawn(self._record_started_loop())
        if self.timers:
            self._loop_task = asyncio.create_task(self._main_loop(), name="cronfleet-loop")
            self._spawn(self._maintenance_loop())
            self._spawn(self._orphan_loop())
            self._spawn(self._renew_loop())
        subscribe = getattr(self.store, "subscribe", None)
        if subscribe is not None:
            # stores that can announce changes (PostgreSQL LISTEN/NOTIFY) wake the loop early;
            # overrides are still read at fire time, so a lost notification changes nothing
            await subscribe(self._poke)
        log.info(
            "cronfleet %s started with %d jobs on %s%s",
            self.instance_id,
            len(self._jobs),
            self.store.url,
            "" if self.timers else " (no timers: control only)",
        )

    async def _add_running(self, job: Job) -> None:
        states = await self.store.ensure_jobs([job.id])
        self._schedule_first(job, states.get(job.id), self.clock.now())
        self._poke()

    def _schedule_first(self, job: Job, state: JobState | None, now: float) -> None:
        mark = None
        if state is not None:
            seen = state.last_slot or state.created_at
            mark = None if seen is None else seen.timestamp()
        mark = now if mark is None else min(mark, now)
        self._watermark[job.id] = mark
        self._push(job, job.schedule.next(from_ts(mark)).timestamp())

    @staticmethod
    def _after(job: Job, slot: float) -> float:
        """The slot after ``slot`` (intervals by arithmetic: they are anchored to the epoch)."""
        period = job.period
        if period:
            return slot + period
        return job.schedule.next(from_ts(slot)).timestamp()

    def _push(self, job: Job, slot: float) -> None:
        """Jobs due at the same instant share one heap entry (a bucket): a burst of 20,000
        jobs is one pop, not 20,000."""
        self._next[job.id] = slot
        bucket = self._buckets.get(slot)
        if bucket is None:
            self._buckets[slot] = [job.id]
            heapq.heappush(self._heap, slot)
        else:
            bucket.append(job.id)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        """Stop claiming, let running handlers finish within the grace period, release
        leases and record what was interrupted."""
        if not self._running:
            return
        self._stopping = True
        self._poke()
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
        early = self._early
        if early is not None and early.slot - self.clock.now() <= self.shutdown_grace:
            await self._fire_early_before_stop(early)
        early, self._early = self._early, None
        if early is not None:
            # slots claimed early too far ahead to wait for: given back, as if never
            # claimed (another instance that also wants them claims them at their time if
            # its own early claim was refused for a busy lease, or a later start's
            # catch-up finds them missed)
            log.warning("stopping %.1fs before %d slots claimed early: giving them back",
                        early.slot - self.clock.now(), len(early.ready))
            claimed = [(job, res) for job, res, active in early.ready if active is not None]
            for _job, res in await self._withdraw_early(early.slot, claimed, self.clock.now()):
                if res.run is not None:
                    self._interrupt(
                        res.run, True, self.clock.now(), "the scheduler stopped before its slot"
                    )
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        runs = [a.task for a in self._active.values() if a.task is not None]
        if runs:
            log.info("waiting up to %gs for %d running jobs", self.shutdown_grace, len(runs))
            _, pending = await asyncio.wait(runs, timeout=self.shutdown_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        now = self.clock.now()
        for q in self._queued.values():
            self._interrupt(q.run, q.leased, now, "the scheduler stopped before its turn came")
        self._queued.clear()
        self._running = False
        if self._flush_event is not None:
            self._flush_event.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self._flush_once()
        await self._flush_skips()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        await self.store.close()
        log.info("cronfleet %s stopped", self.instance_id)

    async def _fire_early_before_stop(self, early: _Early) -> None:
        """Run the instant whose slots this process claimed early, then let stop go on.

        Giving those claims back would lose the slots: every other instance that tried to
        claim them early lost the claim and has moved on to its next instant. So a stop
        waits for the instant (at most the claim lead, normally 0.5 s) and starts them
        like the loop would; the handlers then get the usual grace period."""
        if not any(active is not None for _, _, active in early.ready):
            return
        log.info("stopping after the slots claimed early for %s start",
                 from_ts(early.slot).isoformat())

        async def until_the_instant() -> None:
            while self.clock.now() < early.slot:
                await self.clock.sleep_until(early.slot)

        # bounded in real time too: a clock that does not move (a test's FakeClock) or
        # jumps back must not hold the stop; unstarted claims are then given back
        wait = early.slot - self.clock.now() + 1.0
        try:
            await asyncio.wait_for(until_the_instant(), max(wait, 0.0))
        except TimeoutError:
            return
        self._enter()
        try:
            await self._fire_due(self.clock.now())
        except Exception:
            log.exception("cronfleet: error while firing the early-claimed slots at stop")
        finally:
            self._leave()

    def _interrupt(self, run: RunRecord, leased: bool, now: float, why: str) -> None:
        run.status = RunStatus.INTERRUPTED
        run.reason = "shutdown"
        run.finished_at = from_ts(now)
        run.logs.append(f"Interrupted: {why}")
        self._finishes.append(Finish(run, run.fencing_token if leased else None))

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully (blocking)."""
        asyncio.run(self._run_forever())

    async def _run_forever(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with self:
            # This process belongs to the scheduler: move what start-up built (jobs, parsed
            # schedules, imported modules) out of the cyclic GC's sight, so its full
            # collections stop rescanning them during bursts.
            gc.freeze()
            waiter = asyncio.create_task(stop.wait())
            watched: set[asyncio.Future[Any]] = {waiter}
            if self._loop_task is not None:
                watched.add(self._loop_task)
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if (
                self._loop_task is not None
                and self._loop_task.done()
                and not self._loop_task.cancelled()
            ):
                exc = self._loop_task.exception()
                if exc is not None:
                    raise exc

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until nothing is being fired, run or written (for tests and scripts)."""
        assert self._idle is not None
        for _ in range(3):
            await asyncio.wait_for(self._idle.wait(), timeout)
            await asyncio.sleep(0)
            if self._busy == 0 and not self._finishes:
                return

    def _enter(self) -> None:
        self._busy += 1
        if self._idle is not None:
            self._idle.clear()

    def _leave(self) -> None:
        self._busy -= 1
        if self._busy == 0 and not self._finishes and self._idle is not None:
            self._idle.set()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cronfleet background task failed", exc_info=task.exception())

    # -- the loop -----------------------------------------------------------------------

    async def _main_loop(self) -> None:
        assert self._wake is not None
        ahead = self._ahead
        while not self._stopping:
            now = self.clock.now()
            self.last_tick = now
            early = self._early
            if (self._heap and self._heap[0] <= now) or (early is not None and early.slot <= now):
                self._enter()
                self._firing = asyncio.get_running_loop().create_future()
                try:
                    await self._fire_due(now)
                except Exception:
                    log.exception("cronfleet: error while firing due slots; continuing")
                finally:
                    self._firing.set_result(None)
                    self._firing = None
                    self._leave()
                continue
            lead = self._lead(now) if ahead > 0 and early is None and self._heap else 0.0
            if lead > 0 and self._heap[0] - lead <= now:
                self._enter()
                try:
                    await self._claim_early(self._heap[0], now)
                except Exception:
                    log.exception("cronfleet: error while claiming slots early; continuing")
                finally:
                    self._leave()
                continue
            self._wake.clear()
            if early is not None:
                deadline = min(early.slot, self._heap[0]) if self._heap else early.slot
            elif self._heap:
                deadline = self._heap[0] - lead
            else:
                deadline = now + 3600.0
            await self.clock.sleep_until(deadline, self._wake)

    # -- early claims -------------------------------------------------------------------

    def _lead(self, now: float) -> float:
        """How long before the next instant its slots are claimed: ``claim_ahead``, or
        longer for a large instant (its claims take about ``_EARLY_PER_SLOT`` each), but
        never more than half the time since the previous instant fired, so that runs of
        that instant have had time to end and release their leases."""
        first = self._heap[0]
        lead = min(max(self._ahead, len(self._buckets.get(first, ())) * _EARLY_PER_SLOT), 30.0)
        if self._fired_at is not None:
            lead = min(lead, (first - self._fired_at) / 2)
        return lead

    def _may_claim_early(self, job: Job) -> bool:
        """Plain leased slots only: everything else is decided at the slot's time."""
        return (
            job.overlap is not Overlap.ALLOW
            and job.locking is not Locking.NODE_LOCAL
            and not job.jitter
            and job.id not in self._queued
            and not self._local_running.get(job.id)
        )

    async def _claim_early(self, slot: float, now: float) -> None:
        """Claim the plain slots of the next instant ``slot`` a little before it, each with
        its job's lease, and build their runs; ``_fire_due`` starts them at ``slot``.

        Only jobs that are enabled at ``slot`` as far as the overrides say now, and whose
        lease is free now, are claimed; the rest stay in the heap and are handled at
        ``slot`` as usual. Where the store keeps no claim (lease busy, store error), the
        job goes back to the heap too. Exactly one of these holds for each job taken here,
        so no job leaves the schedule.
        """
        early = self._early = _Early(slot)
        jobs, nexts = self._jobs, self._next
        try:
            states = await self.store.read_overrides(
                [j for j in self._buckets.get(slot, ()) if nexts.get(j) == slot]
            )
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("cannot read overrides (%s); no early claims for this instant", exc)
            return
        bucket = self._buckets.get(slot)
        if not bucket:
            return
        at = from_ts(slot)
        take: list[Job] = []
        keep: list[str] = []
        seen: set[str] = set()
        for job_id in bucket:
            job = jobs.get(job_id)
            if job is None or nexts.get(job_id) != slot or job_id in seen:
                continue  # removed or stale, as _fire_due would drop it
            seen.add(job_id)
            st = states.get(job_id)
            enabled = job.enabled if st is None else st.effective_enabled(job.enabled, at)
            if enabled and self._may_claim_early(job):
                take.append(job)
            else:
                keep.append(job_id)
        # the heap entry stays (with what is left of the bucket): the loop wakes at ``slot``
        self._buckets[slot] = keep
        if not take:
            return
        placed: set[str] = set()

        def collect(chunk: list[Dispatch], fut: asyncio.Future[Any]) -> list[Dispatched]:
            exc = fut.exception()
            if exc is not None:
                self.stats.store_errors += 1
                log.warning(
                    "cannot claim %d slots early (%s); claiming at their time", len(chunk), exc
                )
                return []
            got: list[Dispatched] = fut.result()
            for res in got:
                job = jobs.get(res.request.job_id)
                if job is None or res.busy:
                    continue  # not claimed: back to the heap below
                active = None
                if res.won and res.run is not None:
                    active = _Active(job, res.run, True)
                    active.ctx = self._context(job, res.run)
                early.ready.append((job, res, active))
                placed.add(job.id)
            return got

        pipe = _Pipeline(self, collect)
        size = self.batch_size
        try:
            for i in range(0, len(take), size):
                await pipe.submit(
                    [
                        Dispatch(
                            job_id=job.id,
                            slot=slot,
                            triggered_by=TriggeredBy.SCHEDULE,
                            lease=True,
                            hold=job.lease_seconds + max(slot - now, 0.0),
                            record=False,
                            early=True,
                        )
                        for job in take[i : i + size]
                    ]
                )
            await pipe.drain()
        finally:
            for job in take:  # lease busy, store error, or the job left meanwhile
                if job.id not in placed and jobs.get(job.id) is job and nexts.get(job.id) == slot:
                    self._push(job, slot)

    def _start_early(
        self, early: _Early, now: float, states: Mapping[str, JobState]
    ) -> list[tuple[Job, Dispatched]]:
        """At the instant: start the runs claimed early. Returns the claims to withdraw —
        jobs paused, disabled or removed since, or slots that are now late — which are
        then handled as if they had never been claimed early."""
        slot, jobs = early.slot, self._jobs
        late = now - slot > self.late_after
        now_dt = from_ts(now)
        undo: list[tuple[Job, Dispatched]] = []
        go: list[_Active] = []
        done: list[tuple[Job, float]] = []
        for job, res, active in early.ready:
            if jobs.get(job.id) is not job:
                if active is not None:
                    undo.append((job, res))
                continue
            nxt = self._after(job, slot)
            if active is not None:
                st = states.get(job.id) if states else None
                if (
                    late
                    or nxt <= now
                    or (st is not None and not st.effective_enabled(job.enabled, now_dt))
                ):
                    undo.append((job, res))  # its next slot is pushed when it is handled
                    continue
                active.run.started_at = now_dt
                go.append(active)
            else:  # another instance claimed the slot first
                self.stats.claims_lost += 1
            done.append((job, nxt))
        self._start_runs(go)
        # bookkeeping after the handlers are on their way
        watermark, push = self._watermark, self._push
        for job, nxt in done:
            push(job, nxt)
            if watermark.get(job.id, 0.0) < slot:
                watermark[job.id] = slot
        return undo

    async def _withdraw_early(
        self, slot: float, undo: list[tuple[Job, Dispatched]], now: float
    ) -> list[tuple[Job, Dispatched]]:
        """Withdraw early claims; returns those the store could not withdraw (still ours)."""
        assert isinstance(self.store, EarlyClaimStore)
        try:
            await self.store.withdraw(
                [(job.id, slot, res.token) for job, res in undo if res.token is not None]
            )
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("cannot withdraw %d early claims (%s)", len(undo), exc)
            return undo
        return []

    def _keep_early(
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
            live = self._jobs.get(job.id) is job
            st = states.get(job.id)
            enabled = live and (
                job.enabled if st is None else st.effective_enabled(job.enabled, now_dt)
            )
            if live:
                nxt = self._after(job, slot)
                self._push(job, nxt)
                if self._watermark.get(job.id, 0.0) < slot:
                    self._watermark[job.id] = slot
            if enabled:
                run.started_at = now_dt
                self._launch(job, run, leased=True)
                continue
            reason = (
                SkipReason.PAUSED
                if st is not None and st.enabled_override is False
                else SkipReason.DISABLED
            )
            run.status = RunStatus.SKIPPED
            run.reason = reason.value
            run.started_at = None
            run.finished_at = now_dt
            run.result = {"skipped": True, "reason": reason.value}
            run.logs.append(
                f"Skipped: the job is {reason.value}" if live else "Skipped: the job was removed"
            )
            self.stats.skipped += 1
            self._finishes.append(Finish(run, run.fencing_token))
        if kept and self._flush_event is not None:
            self._flush_event.set()

    async def _fire_due(self, now: float) -> None:
        self._fired_at = now
        early = self._early
        if early is not None and early.slot <= now:
            self._early = None
        else:
            early = None
        due: list[tuple[Job, float]] = []
        jobs, nexts, buckets = self._jobs, self._next, self._buckets
        while self._heap and self._heap[0] <= now:
            slot = heapq.heappop(self._heap)
            for job_id in buckets.pop(slot, ()):
                job = jobs.get(job_id)
                if job is not None and nexts.get(job_id) == slot:  # else removed or stale
                    due.append((job, slot))
        if not due and (early is None or not early.ready):
            return
        ids = [j.id for j, _ in due]
        if early is not None:
            ids += [j.id for j, _, _ in early.ready]
        try:
            states = await self.store.read_overrides(ids)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("cannot read overrides (%s); using each job's declared enabled", exc)
            states = {}
        if early is not None:
            # The cyclic GC waits until these handlers have taken their first step: a full
            # collection over a large job set costs tens of milliseconds, which would land
            # on the lateness of every handler not yet started. Cyclic garbage is collected
            # that moment later, nothing else changes.
            hold_gc = gc.isenabled() and len(early.ready) > 1
            if hold_gc:
                gc.disable()
            try:
                undo = self._start_early(early, now, states)
            finally:
                if hold_gc:  # runs after the first steps the loop now has queued
                    asyncio.get_running_loop().call_soon(gc.enable)
            if undo:
                kept = await self._withdraw_early(early.slot, undo, now)
                self._keep_early(early.slot, kept, now, states)
                gone = {job.id for job, _ in kept}
                due += [
                    (job, early.slot)
                    for job, _ in undo
                    if job.id not in gone and jobs.get(job.id) is job
                ]
        pipe = _Pipeline(self)
        skips: list[Skip] = []
        sequences: list[tuple[Job, list[tuple[float, bool]]]] = []
        watermark, late_after, size = self._watermark, self.late_after, self.batch_size
        items: list[Dispatch] = []
        for job, slot in due:
            nxt = self._after(job, slot)
            if nxt > now and now - slot <= late_after and job.id not in states and job.enabled:
                # the common case: one slot, on time, no override
                self._push(job, nxt)
                if watermark.get(job.id, 0.0) < slot:
                    watermark[job.id] = slot
                items.append(self._run_item(job, slot, False, now))
            else:
                self._plan_job(job, slot, nxt, now, states.get(job.id), items, skips, sequences)
            if len(items) >= size:
                await pipe.submit(items)
                items = []
        if items:
            await pipe.submit(items)
        await pipe.drain()
        if skips:
            await self._record_skips(skips)
        for job, runs in sequences:
            self._spawn(self._run_sequence(job, runs))

    def _plan_job(
        self,
        job: Job,
        slot: float,
        nxt: float,
        now: float,
        state: JobState | None,
        items: list[Dispatch],
        skips: list[Skip],
        sequences: list[tuple[Job, list[tuple[float, bool]]]],
    ) -> None:
        """The slow path: several or late slots (catch-up), or an override to honour."""
        if nxt > now and now - slot <= self.late_after:
            runs: list[tuple[float, bool]] = [(slot, False)]
            missed_slots: list[float] = []
            overflow: tuple[int | None, float, float] | None = None
        else:
            plan = plan_slots(
                job.schedule,
                self._watermark.get(job.id, slot - 1e-3),
                now,
                missed=job.missed,
                window=job.catch_up_window,
                late_after=self.late_after,
            )
            runs, missed_slots, overflow = plan.run, plan.missed, plan.overflow
            if plan.capped:
                log.warning(
                    "job %s: %d missed slots exceed the RUN_ALL cap; the oldest %d are "
                    "recorded as missed",
                    job.id,
                    plan.capped + len(runs),
                    plan.capped,
                )
            while nxt <= now:
                nxt = self._after(job, nxt)
        self._push(job, nxt)
        processed = [s for s, _ in runs] + missed_slots
        if processed:
            self._watermark[job.id] = max(self._watermark.get(job.id, 0.0), max(processed))
        now_dt = from_ts(now)
        enabled = job.enabled if state is None else state.effective_enabled(job.enabled, now_dt)
        if not enabled:
            reason = (
                SkipReason.PAUSED
                if state
                and state.enabled_override is False
                and (state.override_until is None or state.override_until > now_dt)
                else SkipReason.DISABLED
            )
            note = f" ({state.override_note})" if state and state.override_note else ""
            who = f" by {state.override_by}" if state and state.override_by else ""
            for s in sorted(processed):
                skips.append(
                    Skip(
                        job.id,
                        s,
                        reason.value,
                        instance_id=self.instance_id,
                        logs=[f"Skipped: the job is {reason.value}{who}{note}"],
                    )
                )
            self.stats.skip(reason.value, len(processed))
            return
        for s in missed_slots:
            items.append(self._missed_item(job, s, now, "missed while no scheduler ran it"))
        if overflow is not None:
            count, first, last = overflow
            items.append(
                self._missed_item(
                    job,
                    first,
                    now,
                    f"{'many' if count is None else count} missed slots from "
                    f"{from_ts(first).isoformat()} to {from_ts(last).isoformat()} "
                    "summarised in this record",
                    result={
                        "skipped": True,
                        "reason": "missed",
                        "count": count,
                        "first": from_ts(first).isoformat(),
                        "last": from_ts(last).isoformat(),
                    },
                )
            )
        if len(runs) == 1:
            items.append(self._run_item(job, runs[0][0], runs[0][1], now))
        elif runs:
            sequences.append((job, runs))

    def _missed_item(
        self, job: Job, slot: float, now: float, why: str, result: Any = None
    ) -> Dispatch:
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

    def _run_item(self, job: Job, slot: float, catchup: bool, now: float) -> Dispatch:
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
            wait_if_busy=job.overlap is Overlap.QUEUE_ONE and job.id not in self._queued,
            is_catchup=catchup,
            logs=[catchup_banner(slot, now + delay)] if catchup else [],
        )
        if local and job.overlap is not Overlap.ALLOW and self._local_running.get(job.id):
            if job.overlap is Overlap.QUEUE_ONE and job.id not in self._queued:
                item.defer = True
            else:
                item.skip_reason = SkipReason.ALREADY_EXECUTING.value
                item.result = {"skipped": True, "reason": item.skip_reason}
                item.logs.append(
                    f"Skipped: the previous run has not finished (lease held by {self.instance_id})"
                )
        return item

    async def _dispatch(self, items: list[Dispatch], now: float) -> list[Dispatched]:
        """Claim and start a batch outside the loop's burst path (catch-up, recovery)."""
        pipe = _Pipeline(self)
        for i in range(0, len(items), self.batch_size):
            await pipe.submit(items[i : i + self.batch_size])
        return await pipe.drain()

    def _handle_chunk(self, chunk: list[Dispatch], task: asyncio.Future[Any]) -> list[Dispatched]:
        exc = task.exception()
        if exc is not None:
            self.stats.store_errors += 1
            return self._dispatch_offline(chunk, exc if isinstance(exc, Exception) else None)
        got: list[Dispatched] = task.result()
        for res in got:
            self._after_dispatch(res)
        return got

    def _dispatch_offline(
        self, items: list[Dispatch], exc: Exception | None
    ) -> list[Dispatched]:
        """The store did not answer: PREFER_GLOBAL and node-local jobs run anyway (fail
        open); REQUIRE_GLOBAL jobs do not, and their skips are recorded later."""
        out = []
        for it in items:
            job = self._jobs.get(it.job_id)
            if job is None or it.skip_reason:
                continue
            if job.locking is Locking.REQUIRE_GLOBAL:
                log.warning(
                    "job %s: store unavailable (%s); REQUIRE_GLOBAL slot %s not run",
                    job.id,
                    exc,
                    from_ts(it.slot).isoformat(),
                )
                self._unsaved_skips.append(
                    Skip(
                        job.id,
                        it.slot,
                        SkipReason.STORE_UNAVAILABLE.value,
                        instance_id=self.instance_id,
                        logs=[
                            f"Skipped: the store was unavailable ({exc}) and the job "
                            "requires a global claim"
                        ],
                    )
                )
                continue
            log.warning(
                "job %s: store unavailable (%s); running slot %s without a claim (fail open)",
                job.id,
                exc,
                from_ts(it.slot).isoformat(),
            )
            run = RunRecord(
                id=None,
                job_id=job.id,
                slot=from_ts(it.slot),
                triggered_by=it.triggered_by,
                status=RunStatus.RUNNING,
                instance_id=self.instance_id,
                is_catchup=it.is_catchup,
                manual=it.manual,
                started_at=from_ts(self.clock.now()),
                logs=list(it.logs),
            )
            run.logs.append(f"Ran without a claim: the store was unavailable ({exc})")
            res = Dispatched(request=it, won=True, run=run)
            self._launch(job, run, leased=False)
            out.append(res)
        return out

    def _after_dispatch(self, res: Dispatched) -> None:
        job = self._jobs.get(res.request.job_id)
        run = res.run
        if not res.won:
            self.stats.claims_lost += 1
            return
        if job is None or run is None:
            return
        if run.status is RunStatus.RUNNING:
            self._launch(job, run, leased=res.request.lease)
        elif run.status is RunStatus.PENDING:
            if res.request.defer and res.holder is None and not self._local_busy_defer(job, res):
                delay = jitter_delay(job.id, res.request.slot, job.jitter)
                self._spawn(self._start_after(job, run, res.request, res.request.slot + delay))
            else:
                self._queued[job.id] = _Queued(job, run, leased=res.request.lease)
        else:
            self.stats.skip(run.reason)
            if run.reason == SkipReason.ALREADY_EXECUTING.value:
                log.info(
                    "job %s slot %s skipped: %s",
                    job.id,
                    run.slot.isoformat(),
                    run.logs[-1] if run.logs else run.reason,
                )

    def _local_busy_defer(self, job: Job, res: Dispatched) -> bool:
        return (
            job.locking is Locking.NODE_LOCAL
            and job.overlap is Overlap.QUEUE_ONE
            and bool(self._local_running.get(job.id))
        )

    async def _job_idle(self, job_id: str) -> None:
        """Wait until no run of ``job_id`` is in progress in this process."""
        while self._local_running.get(job_id) and not self._stopping:
            await self._idle_jobs.setdefault(job_id, asyncio.Event()).wait()

    async def _start_after(self, job: Job, run: RunRecord, req: Dispatch, at: float) -> None:
        while self.clock.now() < at:
            await self.clock.sleep_until(at)
        self._enter()  # waiting for the jitter delay is idle time; starting is not
        try:
            await self._start_pending(job, run, req.lease, wait=req.wait_if_busy)
        finally:
            self._leave()

    async def _start_pending(self, job: Job, run: RunRecord, lease: bool, wait: bool) -> bool:
        """Start a pending run; returns False when it must keep waiting for the lease."""
        assert run.id is not None
        if (
            not lease
            and job.locking is Locking.NODE_LOCAL
            and self._local_running.get(job.id)
            and (wait or job.overlap is Overlap.QUEUE_ONE)
        ):
            self._queued[job.id] = _Queued(job, run, leased=False)
            return False
        try:
            [started] = await self.store.start(
                [Start(run.id, job.id, run.fencing_token, lease, job.lease_seconds, wait)],
                self.instance_id,
            )
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("job %s: cannot start pending run %s (%s); retrying", job.id, run.id, exc)
            self._queued[job.id] = _Queued(job, run, leased=lease)
            return False
        if started.run is None:
            self._queued[job.id] = _Queued(job, run, leased=lease)
            return False
        self._queued.pop(job.id, None)
        if started.run.status is RunStatus.RUNNING:
            self._launch(job, started.run, leased=lease)
        else:
            self.stats.skip(started.run.reason)
        return True

    async def _run_sequence(self, job: Job, runs: list[tuple[float, bool]]) -> None:
        """Several slots of one job at once (RUN_ALL catch-up): one after the other."""
        self._enter()
        try:
            for slot, catchup in runs:
                await self._job_idle(job.id)
                if self._stopping:
                    return
                item = self._run_item(job, slot, catchup, self.clock.now())
                item.wait_if_busy = False
                await self._dispatch([item], self.clock.now())
            await self._job_idle(job.id)
        finally:
            self._leave()

    # -- running one job ----------------------------------------------------------------

    def _launch(self, job: Job, run: RunRecord, leased: bool) -> None:
        active = _Active(job, run, leased)
        active.ctx = self._context(job, run)
        self._start_run(active)

    def _start_runs(self, actives: list[_Active]) -> None:
        """``_start_run`` for a batch whose records and contexts are built (early claims)."""
        if not actives:
            return
        active_map, running, unrecorded = self._active, self._local_running, self._unrecorded
        seq, execute = self._seq, self._execute
        self._busy += len(actives)
        if self._idle is not None:
            self._idle.clear()
        self.stats.fired += len(actives)
        loop = asyncio.get_running_loop()
        create = loop.create_task
        for active in actives:
            key = active.run.id
            if key is None:
                key = -next(seq)
                unrecorded[key] = active
            active_map[key] = active
            job_id = active.job.id
            running[job_id] = running.get(job_id, 0) + 1
            if _EAGER:
                active.task = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
                    execute(key, active), loop=loop, eager_start=True
                )
            else:
                active.task = create(execute(key, active))
        if unrecorded and self._record_event is not None and not self._record_event.is_set():
            self._record_event.set()

    def _start_run(self, active: _Active) -> None:
        """Start a run whose record and context are built (``_launch``, early claims)."""
        job, run = active.job, active.run
        key = run.id if run.id is not None else -next(self._seq)
        self._active[key] = active
        running = self._local_running
        running[job.id] = running.get(job.id, 0) + 1
        self._busy += 1
        if self._idle is not None and self._busy == 1:
            self._idle.clear()
        if run.id is None:
            self._unrecorded[key] = active
            if self._record_event is not None and not self._record_event.is_set():
                self._record_event.set()
        self.stats.fired += 1
        loop = asyncio.get_running_loop()
        if _EAGER:
            # Python 3.12+: the handler's first step runs now, inside its own Task (so
            # libraries that tie state to the current task, like anyio's cancel scopes,
            # see one task throughout); a handler that never suspends costs no scheduling.
            active.task = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
                self._execute(key, active), loop=loop, eager_start=True
            )
        else:
            active.task = loop.create_task(self._execute(key, active))

    def _context(self, job: Job, run: RunRecord) -> RunContext:
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
            instance_id=self.instance_id,
            fencing_token=run.fencing_token,
            config=job.config,
            run_id=run.id,
            is_catchup=run.is_catchup,
            is_recovery=run.is_recovery,
            manual=run.manual,
            attempt=run.attempt,
            logs=run.logs,
        )

    async def _execute(self, key: int, active: _Active) -> None:
        job = active.job
        assert job.handler is not None and self._threads is not None and active.ctx is not None
        started = self.clock.now()
        try:
            outcome = await execute(
                job.handler,
                active.ctx,
                timeout=job.timeout,
                threads=self._threads,
                now=self.clock.now,
                is_async=job.is_async,
            )
        except asyncio.CancelledError:
            outcome = self._cancelled(active, started)
        self._finalize(key, active, outcome)

    def _cancelled(self, active: _Active, started: float) -> Outcome:
        if active.ctx is not None:
            active.ctx.log("Interrupted: the scheduler stopped before the run finished")
        return Outcome(
            RunStatus.INTERRUPTED,
            started,
            self.clock.now(),
            error="interrupted: the scheduler stopped before the run finished",
            reason="shutdown",
        )

    def _finalize(self, key: int, active: _Active, outcome: Outcome) -> None:
        """A run ended: free the job locally now, do the bookkeeping later (see _settle),
        so that during a burst the next handler starts as soon as possible."""
        active.outcome = outcome
        job_id = active.job.id
        left = self._local_running.get(job_id, 1) - 1
        if left:
            self._local_running[job_id] = left
        else:
            self._local_running.pop(job_id, None)
            idle = self._idle_jobs.pop(job_id, None)
            if idle is not None:
                idle.set()
        self._active.pop(key, None)
        self._unrecorded.pop(key, None)
        self._ended.append(active)
        if self._flush_event is not None and not self._flush_event.is_set():
            self._flush_event.set()

    def _settle(self) -> None:
        """Turn ended runs into records queued for the group commit."""
        ended, self._ended = self._ended, []
        info = log.isEnabledFor(logging.INFO)
        stats = self.stats
        outcomes = stats.outcomes
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
            if not run.manual:
                stats.lateness.observe(outcome.started - run.slot.timestamp())
            stats.durations.observe(outcome.finished - outcome.started)
            if info:
                log.info(
                    "job %s slot %s %s%s",
                    job.id,
                    run.slot.isoformat(),
                    run.status.value,
                    f": {run.error}" if run.error else "",
                )
            self._finishes.append(Finish(run, run.fencing_token if active.leased else None))
            self._leave()
            if job.id in self._queued and self._running and not self._stopping:
                self._spawn(self._retry_queued(self._queued[job.id]))

    async def _retry_queued(self, q: _Queued) -> None:
        self._enter()
        try:
            await self._flushed()
            if self._queued.get(q.job.id) is q:
                await self._start_pending(q.job, q.run, q.leased, wait=True)
        finally:
            self._leave()

    # -- writing results ----------------------------------------------------------------

    async def _flush_loop(self) -> None:
        assert self._flush_event is not None
        while self._running:
            await self._flush_event.wait()
            self._flush_event.clear()
            if self._firing is not None:
                # a burst is being claimed: its claims go first, results are written after
                await asyncio.wait({self._firing})
            await self._flush_once()
            if self._unsaved_skips:
                await self._flush_skips()

    async def _record_started_loop(self) -> None:
        """Write the rows of fast-path runs still running a moment after they started, so
        the ledger shows them in progress; runs that end sooner are written once, whole."""
        assert self._record_event is not None
        while True:
            await self._record_event.wait()
            self._record_event.clear()
            await asyncio.sleep(self.record_started_after)
            for a in list(self._unrecorded.values()):
                if a.run.id is None and a.run.status is RunStatus.RUNNING:
                    self._finishes.append(Finish(a.run))
            self._unrecorded.clear()
            if self._finishes and self._flush_event is not None:
                self._flush_event.set()

    async def _flush_once(self) -> None:
        """Group commit: every run started or finished since the last write, one transaction."""
        self._settle()
        if not self._finishes:
            return
        merged: dict[int, Finish] = {}
        for f in self._finishes:  # a run's "started" and "finished" rows become one write
            prev = merged.get(id(f.run))
            if prev is None or f.release_token is not None:
                merged[id(f.run)] = f
        batch = list(merged.values())
        self._finishes = []
        self._enter()
        try:
            await self.store.finish(batch)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("cannot record %d finished runs (%s); will retry", len(batch), exc)
            self._finishes = (batch + self._finishes)[-_MAX_BUFFERED:]
            if self._running:
                self._spawn(self._later_flush())
        finally:
            self._leave()
        self._flushed_event().set()

    def _flushed_event(self) -> asyncio.Event:
        if self._flush_done is None:
            self._flush_done = asyncio.Event()
        return self._flush_done

    async def _flushed(self) -> None:
        """Wait until finished runs (and their lease releases) have been written."""
        while (self._finishes or self._ended) and self._running:
            ev = self._flushed_event()
            ev.clear()
            if self._flush_event is not None:
                self._flush_event.set()
            await ev.wait()

    async def _later_flush(self) -> None:
        await asyncio.sleep(1.0)
        if self._flush_event is not None:
            self._flush_event.set()

    async def _record_skips(self, skips: list[Skip]) -> None:
        """Write skip records; keep them (bounded) for a later try if the store is down."""
        try:
            await self.store.record_skips(skips)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("cannot record %d skipped slots (%s); will retry", len(skips), exc)
            self._unsaved_skips.extend(skips)

    async def _flush_skips(self) -> None:
        if self._unsaved_skips:
            batch = list(self._unsaved_skips)
            self._unsaved_skips.clear()
            await self._record_skips(batch)

    # -- background upkeep --------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        """Retention: at start and then daily."""
        while True:
            await self.prune()
            await self.clock.sleep_until(self.clock.now() + 86400.0)

    async def prune(self) -> tuple[int, int]:
        now = self.clock.now()
        try:
            claims, runs = await self.store.prune(
                claims_older_than=now - self.claim_retention,
                runs_older_than=now - self.run_retention,
                runs_per_job=self.runs_per_job,
            )
        except Exception as exc:
            log.warning("retention pass failed (%s); will retry tomorrow", exc)
            return 0, 0
        if claims or runs:
            log.info("retention: deleted %d old claims and %d old runs", claims, runs)
        return claims, runs

    async def _orphan_loop(self) -> None:
        while True:
            self._enter()
            try:
                await self.reap_orphans()
                await self._poll_queued()
                await self._flush_skips()
            finally:
                self._leave()
            await self.clock.sleep_until(
                self.clock.now() + min(self.orphan_interval, self.queue_poll)
            )

    async def _poll_queued(self) -> None:
        for q in list(self._queued.values()):
            if not self._local_running.get(q.job.id):
                await self._start_pending(q.job, q.run, q.leased, wait=True)

    async def reap_orphans(self) -> list[RunRecord]:
        """Mark runs of dead instances ``interrupted``; re-run them where ``recover=True``."""
        now = self.clock.now()
        last = self._last_reap
        if last is not None and now - last < self.orphan_interval:
            return []
        self._last_reap = now
        try:
            orphans = await self.store.reap_orphans(self.instance_id)
        except Exception as exc:
            log.warning("orphan check failed (%s)", exc)
            return []
        for run in orphans:
            log.warning(
                "job %s: run %s (slot %s on %s) was interrupted: its lease expired",
                run.job_id,
                run.id,
                run.slot.isoformat(),
                run.instance_id,
            )
            job = self._jobs.get(run.job_id)
            if job is None or not job.recover or run.fencing_token is None or run.manual:
                continue
            item = Dispatch(
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
            await self._dispatch([item], now)
        return orphans

    async def _renew_loop(self) -> None:
        """Keep the leases of long runs without a timeout alive while they run."""
        while True:
            await self.clock.sleep_until(self.clock.now() + 300.0)
            items = [
                (a.job.id, a.run.fencing_token, a.job.lease_seconds)
                for a in self._active.values()
                if a.leased and a.job.timeout is None and a.run.fencing_token is not None
            ]
            try:
                await self.store.renew_leases(items)
            except Exception as exc:
                log.warning("lease renewal failed (%s)", exc)

    # -- control (async) ----------------------------------------------------------------

    async def trigger_async(
        self,
        job_id: str,
        *,
        by: str = "manual",
        triggered_by: TriggeredBy = TriggeredBy.MANUAL,
        wait: bool = False,
    ) -> RunRecord:
        """Run a job now. Raises :class:`AlreadyExecuting` while a run holds its lease.

        Inside a running scheduler the run proceeds in the background (``wait=True`` waits
        for it); otherwise it runs to completion before this returns.
        """
        job = self.get_job(job_id)
        async with self._control() as inline:
            now = self.clock.now()
            item = Dispatch(
                job_id=job.id,
                slot=now,
                triggered_by=triggered_by,
                claim="none" if job.locking is Locking.NODE_LOCAL else "token",
                lease=job.overlap is not Overlap.ALLOW and job.locking is not Locking.NODE_LOCAL,
                hold=job.lease_seconds,
                manual=True,
                logs=[f"Manual run requested by {by}"],
            )
            if (
                job.locking is Locking.NODE_LOCAL
                and job.overlap is not Overlap.ALLOW
                and self._local_running.get(job.id)
            ):
                item.skip_reason = SkipReason.ALREADY_EXECUTING.value
                item.result = {"skipped": True, "reason": item.skip_reason}
                item.logs.append(
                    f"Skipped: the previous run has not finished (lease held by {self.instance_id})"
                )
            [res] = await self.store.dispatch([item], self.instance_id)
            assert res.run is not None
            if res.run.status is RunStatus.SKIPPED:
                raise AlreadyExecuting(job.id, res.holder or self.instance_id, res.run)
            if inline:
                outcome = await self._execute_inline(job, res.run, item.lease)
                return outcome
            self._launch(job, res.run, leased=item.lease)
            if wait:
                assert res.run.id is not None
                active = self._active.get(res.run.id)
                if active is not None and active.task is not None:
                    await asyncio.gather(active.task, return_exceptions=True)
                await self._flushed()
            return res.run

    async def _execute_inline(self, job: Job, run: RunRecord, leased: bool) -> RunRecord:
        threads = ThreadPoolExecutor(1, thread_name_prefix="cronfleet-job")
        self._threads = threads
        try:
            key = run.id if run.id is not None else -1
            active = _Active(job, run, leased)
            self._active[key] = active
            self._local_running[job.id] = self._local_running.get(job.id, 0) + 1
            self._enter()
            active.ctx = self._context(job, run)
            await self._execute(key, active)
            await self._flush_once()
        finally:
            threads.shutdown(wait=False)
            self._threads = None
        return run

    async def pause_async(
        self,
        job_id: str,
        *,
        by: str | None = None,
        note: str | None = None,
        until: datetime | str | float | timedelta | None = None,
    ) -> JobState:
        """Pause for every process until resumed (or until ``until``: a time or a duration)."""
        return await self._set_override(job_id, False, by=by, note=note, until=until)

    async def resume_async(
        self, job_id: str, *, by: str | None = None, note: str | None = None
    ) -> JobState:
        """Force the job on for every process (even if declared ``enabled=False``)."""
        return await self._set_override(job_id, True, by=by, note=note, until=None)

    async def clear_override_async(self, job_id: str, *, by: str | None = None) -> JobState:
        """Back to the job's declared ``enabled``."""
        return await self._set_override(job_id, None, by=by, note=None, until=None)

    async def _set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | str | float | timedelta | None,
    ) -> JobState:
        self.get_job(job_id)
        if isinstance(until, datetime):
            if until.tzinfo is None:
                raise ValueError(f"until={until.isoformat()} must be an aware datetime")
            until_dt: datetime | None = until
        elif until is None:
            until_dt = None
        else:
            until_dt = from_ts(self.clock.now() + _secs(until, "until"))
        async with self._control():
            state = await self.store.set_override(job_id, enabled, by=by, note=note, until=until_dt)
        self._poke()
        return state

    async def state_async(self, job_id: str) -> JobState:
        self.get_job(job_id)
        async with self._control():
            states = await self.store.read_states([job_id])
        return states.get(job_id) or JobState(job_id)

    async def runs_async(
        self, job_id: str | None = None, *, limit: int = 50, status: RunStatus | str | None = None
    ) -> list[RunRecord]:
        """Run history, newest first."""
        if job_id is not None:
            self.get_job(job_id)
        async with self._control():
            return await self.store.list_runs(
                job_id, limit=limit, status=None if status is None else RunStatus(status)
            )

    async def get_run_async(self, run_id: int) -> RunRecord | None:
        async with self._control():
            return await self.store.get_run(run_id)

    def _control(self) -> _ControlScope:
        return _ControlScope(self)

    # -- control (sync, for scripts) ----------------------------------------------------

    def trigger(self, job_id: str, *, by: str = "manual", wait: bool = False) -> RunRecord:
        return self._sync(lambda: self.trigger_async(job_id, by=by, wait=wait))

    def pause(
        self,
        job_id: str,
        *,
        by: str | None = None,
        note: str | None = None,
        until: datetime | str | float | timedelta | None = None,
    ) -> JobState:
        return self._sync(lambda: self.pause_async(job_id, by=by, note=note, until=until))

    def resume(self, job_id: str, *, by: str | None = None, note: str | None = None) -> JobState:
        return self._sync(lambda: self.resume_async(job_id, by=by, note=note))

    def clear_override(self, job_id: str, *, by: str | None = None) -> JobState:
        return self._sync(lambda: self.clear_override_async(job_id, by=by))

    def state(self, job_id: str) -> JobState:
        return self._sync(lambda: self.state_async(job_id))

    def runs(
        self, job_id: str | None = None, *, limit: int = 50, status: RunStatus | str | None = None
    ) -> list[RunRecord]:
        return self._sync(lambda: self.runs_async(job_id, limit=limit, status=status))

    def get_run(self, run_id: int) -> RunRecord | None:
        return self._sync(lambda: self.get_run_async(run_id))

    def _sync(self, make: Callable[[], Awaitable[T]]) -> T:
        async def go() -> T:
            return await make()

        if self._running and self._loop is not None:
            if threading.get_ident() == self._loop_thread:
                raise RuntimeError(
                    "this is the scheduler's event loop: use the async variant "
                    "(e.g. await scheduler.trigger_async(...))"
                )
            return asyncio.run_coroutine_threadsafe(go(), self._loop).result()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(go())
        raise RuntimeError(
            "called from inside an event loop: use the async variant "
            "(e.g. await scheduler.trigger_async(...))"
        )

    # -- introspection ------------------------------------------------------------------

    def next_fire_times(
        self, job_id: str, n: int = 10, after: datetime | None = None
    ) -> list[datetime]:
        job = self.get_job(job_id)
        out: list[datetime] = []
        t = after or from_ts(self.clock.now())
        for _ in range(n):
            t = job.schedule.next(t)
            out.append(t)
        return out

    def running_jobs(self) -> list[RunRecord]:
        return [a.run for a in self._active.values()]

    def iter_jobs(self) -> Iterable[Job]:
        return iter(self._jobs.values())


class _ControlScope:
    """Opens the store for one control call when the scheduler is not running."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        self.opened = False

    async def __aenter__(self) -> bool:
        if not self.s._running:
            await self.s.store.open()
            self.opened = True
        return self.opened

    async def __aexit__(self, *exc: object) -> None:
        if self.opened:
            await self.s.store.close()
