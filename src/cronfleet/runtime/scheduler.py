"""The facade and assembler: the job registry, the lifecycle and the control methods.

One ``Scheduler`` fires each slot of each job once across every process sharing its
store. The work is done by parts, each the one owner of its state, built afresh at every
start by :meth:`Scheduler._build` with the collaborators it uses (none holds the
scheduler; what they share and the views they have of each other: :mod:`.parts`):

- ``due`` (:mod:`.due`): the heap of instants, their buckets, each job's watermark;
- ``loop`` (:mod:`.loop`): the loop task and the firing of one instant;
- ``early`` (:mod:`.early`): slots claimed shortly before their instant;
- ``runner`` (:mod:`.runs`): runs in progress, queued for a lease, ended;
- ``writer`` (:mod:`.writer`): what waits to be written (group commit, skips);
- ``outage`` (:mod:`.outage`): the slots the store did not take;
- ``upkeep`` (:mod:`.upkeep`): retention, orphans and recovery, lease renewal;
- ``fleet`` / ``registry`` (:mod:`.fleet`, :mod:`.registry`): membership, declared jobs
  and the requests of other processes;
- ``backfills`` (:mod:`.backfill`): backfill runs;
- ``events`` (:mod:`.events`): ``RunFinished`` & co. for listeners (``subscribe``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import Clock, SystemClock, from_ts
from cronfleet.cron import CronExpr
from cronfleet.cron.duration import to_timedelta
from cronfleet.errors import (
    AlreadyExecuting,
    DuplicateJob,
    JobNotFound,
    JobPaused,
)
from cronfleet.model import (
    DEFAULT_TEAM,
    Handler,
    Job,
    JobState,
    Locking,
    Missed,
    NotifyPolicy,
    Overlap,
    RetryPolicy,
    RunRecord,
    RunStatus,
    TriggeredBy,
)
from cronfleet.runtime import requests
from cronfleet.runtime.activity import Activity
from cronfleet.runtime.backfill import Backfill, Backfills, backfill_slots
from cronfleet.runtime.background import Background, Stopped
from cronfleet.runtime.due import Due
from cronfleet.runtime.early import EarlyClaims
from cronfleet.runtime.events import (
    Events,
    Listener,
    OverrideChanged,
    RunFinished,
    Unsubscribe,
)
from cronfleet.runtime.fleet import Fleet
from cronfleet.runtime.loop import Loop
from cronfleet.runtime.outage import Outage
from cronfleet.runtime.ownership import Ownership
from cronfleet.runtime.parts import Life, RateLimitedLog, Settings
from cronfleet.runtime.process import freeze_start_up, raise_if_failed, run_until_signal
from cronfleet.runtime.reach import until_reachable
from cronfleet.runtime.registry import Registry, remote_cancel
from cronfleet.runtime.runs import Runs
from cronfleet.runtime.stats import Stats
from cronfleet.runtime.sync import SyncControl
from cronfleet.runtime.threads import DaemonThreadPool
from cronfleet.runtime.upkeep import Upkeep
from cronfleet.runtime.writer import Writer
from cronfleet.spec import DEFAULT_INSTANCE_TTL, default_job_id, pause_until
from cronfleet.store import Store, open_store
from cronfleet.store.base import SessionFencingStore, has_lanes

__all__ = ["DEFAULT_STORE", "Scheduler", "new_instance_id"]

log = logging.getLogger("cronfleet")

STOP_WRITE_BUDGET = 5.0
"""Seconds ``stop()`` gives the store for the last results (and again for closing), after
the handlers' ``shutdown_grace``."""

LEAVE_ON_FAILED_START = 2.0
"""Seconds a start that failed after registering gives the store to remove its row."""

DEFAULT_STORE = "sqlite:///cronfleet.db"


def name_sessions(store: Store, instance_id: str) -> Store:
    """A store this scheduler built says which instance its server sessions serve (a
    survivor that declares the instance lost ends them: ``SessionFencingStore``)."""
    if isinstance(store, SessionFencingStore):
        store.name_sessions(instance_id)
    return store


def new_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _secs(value: str | float | timedelta | None, name: str) -> float:
    return to_timedelta(value, field=name).total_seconds()


def check_lanes(job: Job, store: Store) -> None:
    """``max_instances`` > 1 needs a store whose leases have lanes (``has_lanes``: every
    built-in store; a plugin's store may have none); a node-local job counts its runs in
    this process and needs none."""
    if job.max_instances > 1 and job.locking is not Locking.NODE_LOCAL and not has_lanes(
        store
    ):
        kind = type(store).__name__.removesuffix("Store") or "this"
        raise ValueError(
            f"job {job.id!r}: max_instances > 1 is not supported on the {kind} store yet "
            f"(max_instances = {job.max_instances}; use SQLite, PostgreSQL, Redis or memory)"
        )


async def open_store_at_start(store: Store, *, own: bool, connect_timeout: float | None
                              ) -> None:
    """Open the store, waiting for an unreachable one (``StoreUnavailable``) up to
    ``connect_timeout`` (runtime/reach.py: the rule of every start-up step); any other
    error (a bad path, a newer schema) stops the start at once. ``own``: the store was
    built here from a URL."""
    if own and hasattr(store, "open_timeout"):
        # the store's own connect retry (PostgreSQL) follows the same limit at start;
        # a control call on a stopped scheduler keeps the store's (60 s)
        store.open_timeout = math.inf if connect_timeout is None else connect_timeout
    await until_reachable(store.open, f"store {store.url}", connect_timeout)


def _settings(s: Scheduler) -> Settings:
    """The options the parts read, as they are at this start."""
    return Settings(
        instance_id=s.instance_id, timers=s.timers, role=s.role, late_after=s.late_after,
        batch_size=s.batch_size, claim_ahead=s.claim_ahead, instance_ttl=s.instance_ttl,
        orphan_interval=s.orphan_interval, queue_poll=s.queue_poll,
        run_retention=s.run_retention, runs_per_job=s.runs_per_job,
        claim_retention=s.claim_retention, record_started_after=s.record_started_after,
        shutdown_grace=s.shutdown_grace,
    )


class Scheduler(SyncControl):
    """Fires each slot of each job once across every process sharing ``store``.

    ``store``: a URL (``sqlite:///cronfleet.db`` by default, ``postgresql://...``) or a
    :class:`~cronfleet.store.Store`. ``clock`` is injectable for tests. ``late_after``: a
    slot handled more than this many seconds after its time is a missed slot, handled by
    the job's catch-up policy. ``claim_ahead``: how long before an instant its plain slots
    are claimed (with their leases), so that their handlers start at the instant without
    a store round trip; 0 claims every slot at its time (docs/internals.md, "Early
    claims"). ``instance_ttl`` (2 s): a timer process heartbeats by the store's clock
    every fifth of it, from a thread with its own connection when the store was given
    as a URL; one whose heartbeat is older is lost, and the others break its leases and
    interrupt its runs (docs/concepts.md, "Instances, leases and fencing").
    ``role`` is what the process's ``instances`` row says it is. ``timers=False`` runs
    no loop: a control-only process (an API replica) that
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
        connect_timeout: str | float | timedelta | None = None,
        instance_ttl: str | float | timedelta = DEFAULT_INSTANCE_TTL,
        role: str = "all",
        metrics_job_label: bool = True,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.store: Store = open_store(store or DEFAULT_STORE, clock=self.clock)
        self.connect_timeout = (
            None if connect_timeout is None else _secs(connect_timeout, "connect_timeout")
        )
        """How long ``start()`` waits for an unreachable store (``None``: as long as it
        takes), retrying with backoff and full jitter."""
        self._own_store = store is None or isinstance(store, str)  # built here from a URL
        # the URL it was built from: the heartbeat thread opens its own connection with it
        target = store or DEFAULT_STORE
        self._store_url = target if isinstance(target, str) else None
        self.instance_id = instance_id or new_instance_id()
        if self._own_store:
            name_sessions(self.store, self.instance_id)
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
        self.instance_ttl = _secs(instance_ttl, "instance_ttl")
        if self.instance_ttl <= 0:
            raise ValueError(f"instance_ttl must be more than 0 seconds, not {instance_ttl!r}")
        self.role = role
        # per-job outcomes for /metrics (the ``job`` label); off for very large fleets
        self.stats = Stats(per_job=metrics_job_label)
        self.events = Events()  # kept across restarts: subscriptions are the caller's
        self.life = Life()  # running / stopping, the background tasks
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        self._jobs: dict[str, Job] = {}
        # what the parts get: the same table, read-only by its type (``Jobs``, a Mapping:
        # mypy refuses a write); not a MappingProxyType, whose lookups cost ~2x on the
        # per-job paths of a 100,000-job instant
        self._jobs_view: Mapping[str, Job] = self._jobs
        self._flusher: asyncio.Task[None] | None = None
        self._background: Background[Scheduler] | None = None
        # the API's jobs are divided by bucket among the peers (share_api_jobs)
        self.api_shares = False
        self._build()

    def _build(self) -> None:
        """Fresh parts for a start: each owns its state, nothing is reset field by field.

        Each part is built with the collaborators it uses, in this order; a part that
        calls one built after it is wired to it at the end (it sees it through a
        protocol of runtime/parts.py)."""
        settings, life, store, clock = _settings(self), self.life, self.store, self.clock
        stats, jobs = self.stats, self._jobs_view
        warn = RateLimitedLog(log)  # one rate limit for the store-trouble warnings
        self.due = due = Due()
        self.activity = activity = Activity(lambda: writer.owes())
        self.writer = writer = Writer(store=store, settings=settings, life=life, stats=stats,
                                      activity=activity, warn=warn)
        self.runner = runs = Runs(store=store, clock=clock, settings=settings, life=life,
                                  stats=stats, events=self.events, activity=activity,
                                  writer=writer, control=self)
        self.loop = loop = Loop(
            store=store, clock=clock, settings=settings, life=life, stats=stats, jobs=jobs,
            due=due, activity=activity, writer=writer, runs=runs, warn=warn)
        self.early = early = EarlyClaims(
            store=store, clock=clock, settings=settings, stats=stats, jobs=jobs, due=due,
            activity=activity, loop=loop, runs=runs, writer=writer, warn=warn)
        self.outage = outage = Outage(
            store=store, clock=clock, settings=settings, life=life, stats=stats, jobs=jobs,
            writer=writer, runs=runs, loop=loop, warn=warn)
        self.upkeep = upkeep = Upkeep(
            store=store, clock=clock, settings=settings, activity=activity, jobs=jobs,
            runs=runs, writer=writer, loop=loop)
        self.fleet = fleet = Fleet(
            store=store, clock=clock, settings=settings, stats=stats, activity=activity,
            due=due, early=early, upkeep=upkeep, open_beat_store=self._beat_store_opener())
        self.registry = registry = Registry(
            store=store, clock=clock, settings=settings, life=life, stats=stats,
            activity=activity, jobs=jobs, fleet=fleet, runs=runs, control=self)
        self.backfills = Backfills(
            store=store, clock=clock, settings=settings, life=life, jobs=jobs, runs=runs,
            writer=writer)
        # the back edges
        writer.runs, writer.loop, writer.claim_rows = runs, loop, outage.claim_rows
        loop.early, loop.outage, loop.fleet = early, outage, fleet
        early.fleet = upkeep.fleet = fleet
        fleet.registry = registry
        fleet.ownership = self.ownership = Ownership(
            store=store, clock=clock, instance_id=settings.instance_id, jobs=jobs, due=due,
            life=life, activity=activity, wake=self.wake, shared=self.api_shares)

    # -- declaring jobs -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Started and not stopped yet."""
        return self.life.running

    @property
    def jobs(self) -> Mapping[str, Job]:
        return dict(self._jobs)

    def job(
        self,
        schedule: str | CronExpr | Sequence[str | CronExpr] | None = None,
        *,
        id: str | None = None,
        timezone: str | None = None,
        at: str | datetime | date | None = None,
        start: str | datetime | date | None = None,
        end: str | datetime | date | None = None,
        exclude: Sequence[str] | str | None = None,
        missed: Missed | str = Missed.RUN_ONCE,
        catch_up_window: str | float | timedelta | None = None,
        locking: Locking | str = Locking.REQUIRE_GLOBAL,
        overlap: Overlap | str = Overlap.SKIP,
        timeout: str | float | timedelta | None = None,
        jitter: str | float | timedelta = 0,
        enabled: bool = True,
        recover: bool = False,
        config: Mapping[str, Any] | None = None,
        description: str | None = None,
        team: str = DEFAULT_TEAM,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        notify: NotifyPolicy | Mapping[str, Any] | None = None,
        auto_pause_after: int | None = None,
        max_instances: int = 1,
    ) -> Callable[[Handler], Handler]:
        """Decorator: declare ``fn`` as a job; returns ``fn`` unchanged.

        The id defaults to ``module.function`` with the module named as it would be when
        imported (also when the file runs as a script). ``retry``: run a failing handler
        again inside its slot; ``notify`` and ``auto_pause_after``: alerts
        (``cronfleet.alerts.install``); ``max_instances``: concurrent runs of the job
        across the fleet, 1 to 100 (docs/concepts.md). ``schedule`` may be a
        list of expressions (their instants united), or left out for a one-off ``at``;
        ``start``/``end`` bound the slots and ``exclude`` removes days or instants
        (``except`` in a config task)."""

        def register(fn: Handler) -> Handler:
            job_id = id or default_job_id(fn)
            doc = (getattr(fn, "__doc__", None) or "").strip().splitlines()
            job = Job.create(
                schedule,
                fn,
                id=job_id,
                timezone=timezone or self.timezone,
                at=at,
                start=start,
                end=end,
                exclude=exclude,
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
                retry=retry,
                notify=notify,
                auto_pause_after=auto_pause_after,
                max_instances=max_instances,
            )
            self.add_job(job)
            return fn

        return register

    def add_job(self, job: Job, *more: Job) -> Job:
        """Add ``job`` (and ``more``: all are checked first, then all are added, or none);
        returns ``job``. A running scheduler reads the states of every job added in one
        turn of the loop together (:meth:`Ownership.add`)."""
        jobs = [job, *more]
        seen: set[str] = set()
        for j in jobs:  # every check first: all are added, or none
            if j.id in self._jobs or j.id in seen:
                raise DuplicateJob(f"job id {j.id!r} is declared twice")
            if j.handler is None:
                raise ValueError(f"job {j.id!r} has no handler")
            check_lanes(j, self.store)
            seen.add(j.id)
        for j in jobs:
            self._jobs[j.id] = j
            self.ownership.changed(None, j)
        if self.running:
            for j in jobs:
                self.ownership.add(j)
            self.registry.changed(jobs)
        return job

    def share_api_jobs(self) -> None:
        """Divide the jobs created over the API among the peers by bucket
        (:mod:`cronfleet.shares`) rather than job by job: the catalog that loads only
        this process's share of them turns it on, before the scheduler starts."""
        self.api_shares = True
        self.ownership.share()

    def remove_job(self, job_id: str) -> None:
        old = self._jobs.pop(job_id, None)
        if old is None:
            raise JobNotFound(job_id)
        if self.running:  # a slot already due and not yet decided gets its row
            self.loop.record_removed(old, self.clock.now())
        self.due.forget(job_id)
        self.due.unpark(job_id)  # another's or not, it is nobody's now
        self.ownership.changed(old, None)
        if self.running:
            self.registry.changed((old,))

    def replace_job(self, job: Job) -> Job:
        """Swap a job's definition (same id) for a new one; a running scheduler plans its
        next slot from the new schedule. Runs already started finish as they were."""
        old = self._jobs.pop(job.id, None)
        self.due.forget(job.id)
        self.ownership.changed(old, None)
        return self.add_job(job)

    def get_job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFound(job_id) from None

    def iter_jobs(self) -> Iterable[Job]:
        return iter(self._jobs.values())

    # -- events -------------------------------------------------------------------------

    def subscribe(
        self, listener: Listener, kind: type | tuple[type, ...] = RunFinished
    ) -> Unsubscribe:
        """Call ``listener(event)`` for each event of ``kind`` (default: every finished
        run, :class:`~cronfleet.runtime.events.RunFinished`); returns the unsubscriber."""
        return self.events.subscribe(listener, kind)

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _beat_store_opener(self) -> Callable[[], Store] | None:
        """How the heartbeat thread opens a connection of its own (runtime/heartbeat.py):
        this scheduler's store URL again, through the store factory, in real time. None --
        heartbeats from the loop -- for a store object given by the caller (the memory
        store has no second connection; another's URL may hide its password and its
        options are the caller's) and for a test clock, which a thread cannot follow."""
        url, clock, me = self._store_url, self.clock, self.instance_id
        if url is None or not isinstance(clock, SystemClock):
            return None
        return lambda: name_sessions(open_store(url, clock=clock), me)

    @property
    def loop_task(self) -> asyncio.Task[None] | None:
        """The loop's task while it runs (``None`` without timers)."""
        return self.loop.task

    _loop_task = loop_task  # the name api/serve.py used

    async def start(self) -> None:
        """Open the store, catch up what was missed, and start the loop in the background."""
        if self.running:
            return
        for job in self._jobs.values():
            check_lanes(job, self.store)
        self._build()
        self.event_loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.runner.threads = DaemonThreadPool(self.max_workers)
        await open_store_at_start(self.store, own=self._own_store,
                                  connect_timeout=self.connect_timeout)
        if self.fleet.enabled:
            # registered before the first claim and kept alive by the heartbeat thread
            # from here on; the jobs of the peers already live are parked before
            # anything is planned: this process reads the state of its share only (a job
            # that becomes its own later is read then: Ownership.gain)
            await self.fleet.beat()
            self.fleet.start_beating()
        try:
            if self.fleet.enabled:
                await self.fleet.divide()
            parked = self.due.parked
            share = [j for j in self._jobs.values() if j.id not in parked]
            states = await self.store.ensure_jobs([j.id for j in share])
            self.due.first_all(share, states, self.clock.now())
            if self.fleet.enabled:
                await self.registry.publish_at_start()
        except BaseException:
            # a start that failed beats no more, and its row goes (not declared lost later)
            await self.fleet.stop_beating()
            await self.fleet.leave(LEAVE_ON_FAILED_START)
            raise
        self.life.running = True
        self.life.stopping = False
        self._flusher = asyncio.create_task(self.writer.flush_loop(), name="cronfleet-flush")
        self.life.spawn(self.writer.record_started_loop())
        if self.timers:
            self.loop.task = asyncio.create_task(self.loop.run(), name="cronfleet-loop")
            self.life.spawn(self.upkeep.retention_loop())
            self.life.spawn(self.upkeep.orphan_loop())
            self.life.spawn(self.upkeep.renew_loop())
            if self.fleet.enabled:
                self.life.spawn(self.fleet.heartbeat_loop())
            if self.registry.enabled:
                self.life.spawn(self.registry.request_loop())
        subscribe = getattr(self.store, "subscribe", None)
        if subscribe is not None:
            # stores that can announce changes (PostgreSQL LISTEN/NOTIFY) wake the loop early;
            # overrides are still read at fire time, so a lost notification changes nothing
            await subscribe(self.wake)
            if self.registry.enabled:
                await subscribe(self.registry.wake)
        log.info(
            "cronfleet %s started with %d jobs on %s%s",
            self.instance_id,
            len(self._jobs),
            self.store.url,
            "" if self.timers else " (no timers: control only)",
        )
        if not self.events.wants(RunFinished):
            unheard = [j.id for j in self._jobs.values()
                       if j.notify is not None or j.auto_pause_after is not None]
            if unheard:
                log.warning(
                    "job(s) %s set notify / auto_pause_after but no alerts are installed: "
                    "call cronfleet.alerts.install(scheduler) (cronfleet run does it)",
                    ", ".join(unheard[:8]) + (", ..." if len(unheard) > 8 else ""),
                )

    def wake(self) -> None:
        """Re-plan now (a job or an override changed): the loop wakes up."""
        self.loop.wake.set()


    def start_in_background(
        self, *, timeout: float = 60.0,
        on_start: Callable[[Scheduler], Awaitable[Any] | Any] | None = None,
    ) -> Background[Scheduler]:
        """Start in a daemon thread with an event loop of its own (for sync apps: Flask,
        Django, gunicorn workers) and return once started; raises what the start raised.
        ``on_start(scheduler)`` runs in that loop once started (e.g.
        ``cronfleet.alerts.install``). Stop with :meth:`stop` from any thread; at
        interpreter exit it is stopped for you."""
        if self.running or (self._background is not None and self._background.alive):
            raise RuntimeError("the scheduler is already running")
        bg = Background(self, on_start)
        self._background = bg
        try:
            bg.start(timeout)
        except BaseException:
            self._background = None
            raise
        return bg

    def stop(self) -> Coroutine[Any, Any, None]:
        """Stop gracefully (see :meth:`stop_async`). ``await scheduler.stop()`` in the
        scheduler's loop; after :meth:`start_in_background`, a plain
        ``scheduler.stop()`` from any other thread stops it and blocks until done."""
        bg = self._background
        if bg is not None and bg.alive and threading.get_ident() != self.loop_thread:
            bg.stop()
            self._background = None
            return Stopped()
        if not self.running:  # nothing to stop: no coroutine left unawaited
            return Stopped()
        return self.stop_async()

    async def stop_async(self) -> None:
        """Stop claiming, let running handlers finish within the grace period, release
        leases and record what was interrupted."""
        if not self.running:
            return
        # peers take this instance's share at their next heartbeat; it goes on planning
        # until then, so that no slot waits for the handover (runtime/fleet.py)
        await self.fleet.hand_over(STOP_WRITE_BUDGET)
        self.life.stopping = True
        self.wake()
        if self.loop.task is not None:
            await asyncio.gather(self.loop.task, return_exceptions=True)
        await self.early.fire_before_stop()
        await self.early.give_back()
        await cancel_and_wait(list(self.life.tasks))
        # the heartbeat thread (started by start()) ends here even when its task was
        # cancelled before its first step: no beat re-registers the row leave() removes
        await self.fleet.stop_beating()
        # every claimed slot that will not start now gets its final row from here: the
        # chunks a cancelled task was claiming, the slots of catch-up sequences not
        # reached, then (Runs.stop) the runs waiting out their jitter or queued for the
        # lease
        unanswered = await self.loop.settle_unhandled(STOP_WRITE_BUDGET)
        unanswered += await self.loop.record_unrun(STOP_WRITE_BUDGET)
        await self.runner.stop(self.shutdown_grace)
        self.life.running = False
        self.writer.flush_event.set()
        self.outage.at_stop()
        # the last writes go on while the store takes them (100,000 results are many
        # chunks); a store that takes nothing for STOP_WRITE_BUDGET (hung, down) is left
        # behind: those runs' leases expire and the survivors' reaper records them
        await self.writer.last_writes(self._flusher, STOP_WRITE_BUDGET)
        await self.events.drain(self.shutdown_grace)
        self.runner.close()
        owed = len(self.writer.finishes) + self.writer.owed_skips() + unanswered
        if owed:
            # rows this process owes and could not write: its instance row stays, expires
            # after instance_ttl, and whoever declares it lost writes them (break_lost:
            # its open runs and leased claims become interrupted / instance_lost)
            log.warning("cronfleet %s: %d result(s) not written at stop; its instance row is "
                        "left to expire so that the fleet records them", self.instance_id,
                        owed)
        else:
            await self.fleet.leave(STOP_WRITE_BUDGET)
        try:
            async with asyncio.timeout(STOP_WRITE_BUDGET):
                await self.store.close()
        except TimeoutError:
            log.warning("cronfleet %s: closing the store took over %g s; left behind",
                        self.instance_id, STOP_WRITE_BUDGET)
        log.info("cronfleet %s stopped", self.instance_id)

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully (blocking)."""
        asyncio.run(self._run_forever())

    async def _run_forever(self) -> None:
        async with self:
            freeze_start_up()  # this process belongs to the scheduler
            raise_if_failed(await run_until_signal(self.loop.task))

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until nothing is being fired, run or written (for tests and scripts)."""
        await self.activity.wait_idle(timeout)

    # -- reading ------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Liveness facts for readiness probes: is the loop alive, and how far behind the
        earliest due slot is it (``overdue`` seconds; a healthy loop stays near 0)."""
        now = self.clock.now()
        task = self.loop.task
        heap = self.due.heap
        last_tick = self.loop.last_tick
        overdue = max(0.0, now - heap[0]) if self.timers and heap else 0.0
        return {
            "instance_id": self.instance_id,
            "running": self.running,
            "timers": self.timers,
            "loop_alive": task is not None and not task.done(),
            "last_tick": None if last_tick is None else from_ts(last_tick).isoformat(),
            "overdue": round(overdue, 3),
            "jobs": len(self._jobs),
            # held but another instance's to plan (its owner's share: docs/concepts.md)
            "parked": self.ownership.parked,
            "active_runs": len(self.runner.active),
            # the live instances this one knows of (heartbeats), and how many times it
            # was declared lost by the others and re-joined
            "instances_live": list(self.fleet.live),
            "times_declared_lost": self.fleet.epoch,
        }

    def leases_held(self) -> int:
        """Runs of this process that hold their job's lease."""
        return sum(1 for a in list(self.runner.active.values()) if a.leased)

    def running_jobs(self) -> list[RunRecord]:
        return [a.run for a in self.runner.active.values()]

    def next_fire_times(
        self, job_id: str, n: int = 10, after: datetime | None = None
    ) -> list[datetime]:
        """Up to ``n`` fire times of the job after ``after`` (default: now); fewer, or
        none, when its schedule has no further fire time (``CronExpr.next_n``)."""
        job = self.get_job(job_id)
        return job.schedule.next_n(after or from_ts(self.clock.now()), n)

    # -- control (async) ----------------------------------------------------------------

    async def prune(self) -> tuple[int, int]:
        """Retention now: old claims and runs deleted (the loop does this daily)."""
        return await self.upkeep.prune()

    async def reap_orphans(self) -> list[RunRecord]:
        """Mark runs of dead instances ``interrupted``; re-run them where ``recover=True``."""
        return await self.upkeep.reap_orphans()

    async def trigger_async(
        self,
        job_id: str,
        *,
        by: str = "manual",
        triggered_by: TriggeredBy = TriggeredBy.MANUAL,
        wait: bool = False,
        params: Mapping[str, Any] | None = None,
        force: bool = False,
    ) -> RunRecord:
        """Run a job now. Raises :class:`AlreadyExecuting` while a run holds its lease,
        and :class:`JobPaused` while an override pauses the job (an operator's pause or an
        auto-pause) unless ``force``: the run then records who forced it (``by``).
        ``params`` (a JSON object) reach the handler as ``ctx.params`` and are stored with
        the run.

        Inside a running scheduler the run proceeds in the background (``wait=True`` waits
        for it); otherwise it runs to completion before this returns.
        """
        job = self.get_job(job_id)
        values = _params(params)
        runner = self.runner
        busy = runner.running.get(job.id, 0) >= job.max_instances
        # a node-local job's overlap is decided here, not by a lease: hold its place from
        # this check until its run starts, across the store call in between
        reserved = (not busy and job.locking is Locking.NODE_LOCAL
                    and job.overlap is not Overlap.ALLOW)
        if reserved:
            runner.reserve(job.id)
        try:
            async with _ControlScope(self.store, self.life) as inline:
                now = self.clock.now()
                state = (await self.store.read_states([job.id])).get(job.id)
                paused = state is not None and state.override_at_time(from_ts(now)) is False
                if paused and not force:
                    assert state is not None
                    raise JobPaused(job.id, state.override_by, state.override_note,
                                    state.override_until)
                item = requests.manual(
                    job,
                    now,
                    by=by,
                    triggered_by=triggered_by,
                    local_busy=busy,
                    instance_id=self.instance_id,
                    params=values,
                    forced_by=by if paused else None,
                )
                [res] = await self.store.dispatch([item], self.instance_id)
                assert res.run is not None
                if res.run.status is RunStatus.SKIPPED:
                    raise AlreadyExecuting(job.id, res.holder or self.instance_id, res.run)
                if inline:
                    return await runner.execute_inline(job, res.run, item.lease)
                runner.launch(job, res.run, leased=item.lease)
        finally:
            if reserved:
                runner.unreserve(job.id)
        if wait:  # a running scheduler (inline runs returned above)
            assert res.run.id is not None
            active = runner.active.get(res.run.id)
            if active is not None and active.task is not None:
                await asyncio.gather(active.task, return_exceptions=True)
            await self.writer.flushed()
        return res.run

    async def backfill_async(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        *,
        only_missing: bool = False,
        by: str = "backfill",
        rate: float | None = 10.0,
        wait: bool = True,
        since: float | None = None,
    ) -> Backfill:
        """Run every slot of ``job_id``'s schedule with ``start <= slot <= end`` again, in
        order (a past range only: ``end`` later than now raises
        :class:`~cronfleet.runtime.backfill.BadRange`, a ``ValueError``, as does a
        reversed range or one of more than 100,000 slots), one at a time (the next slot
        starts once the previous run ended), at most
        ``rate`` slots a second (``None``: no limit); ``only_missing``: only slots
        without a ``succeeded`` run.
        Each run is recorded ``triggered_by=backfill`` with its slot. A slot is claimed
        through the store like a scheduled one, so a backfill started twice (here or in
        another process) runs each slot once between them.

        Returns the :class:`~cronfleet.runtime.backfill.Backfill` (progress: ``done`` /
        ``total`` / ``current``; ``cancel()``). ``wait=False`` (a running scheduler only)
        returns at once with the backfill going on in the background. A slot another
        backfill started running at or after ``since`` (default: now; to the
        millisecond, the store's precision) is not run again."""
        job = self.get_job(job_id)
        # a bad range (reversed, later than now, too long) raises here, before anything runs
        backfill_slots(job, start, end, now=from_ts(self.clock.now()))
        if rate is not None and rate <= 0:
            raise ValueError(f"backfill rate must be > 0 slots a second, got {rate!r}")
        bf = Backfill(job.id, start, end, only_missing,
                      since=self.clock.now() if since is None else since)
        if not wait:
            if not self.running:
                raise RuntimeError("backfill(wait=False) needs a running scheduler")
            bf.task = self.life.spawn(self.backfills.run(bf, by=by, rate=rate))
            return bf
        async with _ControlScope(self.store, self.life):
            bf.task = asyncio.ensure_future(self.backfills.run(bf, by=by, rate=rate))
            try:
                await bf.task
            except asyncio.CancelledError:
                if not bf.cancelled:
                    raise
        return bf

    async def cancel_async(self, run_id: int, *, by: str = "manual", why: str = "",
                           timeout: float = 30.0) -> str:
        """Cancel run ``run_id`` wherever it executes in the fleet: here directly
        (:meth:`Runs.cancel`), elsewhere through the store (the holder takes the request;
        :func:`~cronfleet.runtime.registry.remote_cancel`). The run is recorded
        ``cancelled`` with ``by`` and ``why``. Returns what was done, in words; raises
        :class:`~cronfleet.errors.RemoteRefused` / ``RemoteTimeout`` (see there)."""
        why = why or "no reason given"
        if self.runner.find(run_id) is not None:
            return self.runner.cancel(run_id, by=by, why=why)
        got = await remote_cancel(self.store, run_id, by=by, why=why, ttl=self.instance_ttl,
                                  timeout=timeout)
        return f"cancel taken by instance {got.taken_by}"

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
        self,
        job_id: str,
        *,
        by: str | None = None,
        note: str | None = None,
        until: datetime | str | float | timedelta | None = None,
    ) -> JobState:
        """Force the job on for every process (even if declared ``enabled=False``), until
        resumed otherwise (or until ``until``: a time or a duration)."""
        return await self._set_override(job_id, True, by=by, note=note, until=until)

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
        job = self.get_job(job_id)
        until_dt = None if until is None else pause_until(
            until, now=from_ts(self.clock.now()), tz=job.schedule.tz
        )
        wanted = self.events.wants(OverrideChanged)
        async with _ControlScope(self.store, self.life):
            before = (await self.store.read_states([job_id])).get(job_id) if wanted else None
            state = await self.store.set_override(job_id, enabled, by=by, note=note, until=until_dt)
        self.loop.note_override(state)
        self.wake()
        if wanted:
            self.events.publish(OverrideChanged(job, before or JobState(job_id), state, by))
        return state

    async def state_async(self, job_id: str) -> JobState:
        self.get_job(job_id)
        async with _ControlScope(self.store, self.life):
            states = await self.store.read_states([job_id])
        return states.get(job_id) or JobState(job_id)

    async def runs_async(
        self, job_id: str | None = None, *, limit: int = 50, status: RunStatus | str | None = None
    ) -> list[RunRecord]:
        """Run history, newest first."""
        if job_id is not None:
            self.get_job(job_id)
        async with _ControlScope(self.store, self.life):
            return await self.store.list_runs(
                job_id, limit=limit, status=None if status is None else RunStatus(status)
            )

    async def get_run_async(self, run_id: int) -> RunRecord | None:
        async with _ControlScope(self.store, self.life):
            return await self.store.get_run(run_id)


def _params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A trigger's parameters as stored: a JSON object with text keys, or None."""
    if params is None:
        return None
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ValueError(f"params must be an object with text keys, got {params!r}")
    try:
        return dict(json.loads(json.dumps(dict(params))))
    except (TypeError, ValueError):
        raise ValueError(f"params must be JSON values: {params!r}") from None


class _ControlScope:
    """Opens the store for one control call when the scheduler is not running."""

    def __init__(self, store: Store, life: Life) -> None:
        self.store = store
        self.life = life
        self.opened = False

    async def __aenter__(self) -> bool:
        if not self.life.running:
            await self.store.open()
            self.opened = True
        return self.opened

    async def __aexit__(self, *exc: object) -> None:
        if self.opened:
            await self.store.close()
