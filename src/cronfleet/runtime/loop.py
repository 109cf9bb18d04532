"""The loop: sleep until the earliest due instant, then fire it as one batch.

Firing an instant: pop its bucket, read the overrides of its jobs once, plan each job
(the fast path straight to a request; late, several or overridden slots through
``planning.plan_slots``), hand the requests to the store in chunks while the next chunk
is planned (``Pipeline``), launch the handlers of each claimed chunk, record the skips.
The following slot of each fast-path job is computed after that (``Due.after_many``).

Overload: the clock is read again before each chunk is planned. A slot that came due
while the loop was busy firing earlier ones (its *streak*: no sleep since), or that was
on time when this instant's planning began, and that can no longer start on time
(``planning.late``, judged at its expected start: ``Pipeline.delay`` ahead) is the
process's own backlog: it is recorded ``skipped / overloaded`` at once (a skip row that
takes the slot's claim, written with the instant's skips), never started late, and the
job's first slot that is not late runs or is queued (``shed``). A claim answered too
late is recorded the same way (``claimed_late``). A slot already late when the instant
began (a stall, a sleep, a start, a hung store: nobody fired it) goes through the
catch-up policy (``plan_job``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import from_ts, wait_while_moving
from cronfleet.model import (
    Job,
    JobState,
    Locking,
    Overlap,
    RunRecord,
    RunStatus,
    SkipReason,
    skip_reason,
)
from cronfleet.runtime import requests
from cronfleet.runtime.due import after, min_gap
from cronfleet.runtime.planning import RECORD_CAP, jitter_delay, late, plan_slots
from cronfleet.store.base import (
    Dispatch,
    Dispatched,
    DispatchKind,
    EarlyClaimStore,
    Finish,
    Skip,
)
from cronfleet.store.ledger import (
    missed_summary,
    overloaded_log,
    override_skip_log,
    removed_or_skipped_log,
    skip_run,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.due import Due
    from cronfleet.runtime.parts import (
        EarlyView,
        FleetView,
        Jobs,
        Life,
        OutageView,
        RateLimitedLog,
        Settings,
    )
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.stats import Stats
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

__all__ = ["Loop", "Pipeline"]

SEQUENCE_POLL = 0.05  # seconds between two looks at a lease a sequence's slot waits for
SEQUENCE_LOOKS = 20  # looks (one read of every waiting job) before the slot is tried again
WRITE_BEHIND_WAIT = 0.25  # seconds an instant waits for results a failed write left behind
PIPELINE_DEPTH = 2  # chunks of one burst in the store's hands at once (Pipeline)
MISSED_WHY = "missed while no scheduler ran it"
STOPPED_WHY = "was due when the scheduler stopped, before it fired it"
REMOVED_WHY = "was due when its job was removed, before the scheduler fired it"
OVERTAKEN_WHY = "overtaken: a newer slot was already due before it could start"

log = logging.getLogger("cronfleet")

_OPEN = (RunStatus.RUNNING, RunStatus.PENDING)
MISSED = SkipReason.MISSED.value
DISABLED = SkipReason.DISABLED.value
OVERLOADED = SkipReason.OVERLOADED.value
_SCHEDULED = DispatchKind.SCHEDULED
STOPPED_BEFORE_START = "the scheduler stopped before the claimed slot started"


class Pipeline:
    """Chunks of one burst in flight to the store, oldest first.

    A chunk is handed to the store's thread as soon as it is planned; while the store
    claims it, the loop plans the next chunk and starts the handlers of chunks already
    claimed (``PIPELINE_DEPTH`` chunks in flight at most). The first handlers of a large
    burst start after one small transaction.
    Each chunk sits in ``loop.unhandled`` until its answer is handled.
    """

    def __init__(
        self,
        loop: Loop,
        handle: Callable[[list[Dispatch], asyncio.Future[Any]], list[Dispatched]] | None = None,
    ) -> None:
        self.loop = loop
        self.store = loop.store
        self.clock = loop.clock
        self.instance_id = loop.settings.instance_id
        self.unhandled = loop.unhandled
        self.handle = handle or loop.handle_chunk
        self.inflight: deque[tuple[list[Dispatch], asyncio.Future[Any], float]] = deque()
        self.results: list[Dispatched] = []
        # how long the last chunk handled took from its planning (``since``) to its
        # handlers' start: how late a slot planned now will start, about (from the
        # previous instant's last chunk until one of this instant is handled)
        self.delay = loop.start_delay
        self.handled = 0

    async def submit(self, chunk: list[Dispatch], since: float | None = None) -> None:
        """Hand ``chunk`` to the store; ``since``: the clock reading it was planned at.
        At most ``PIPELINE_DEPTH`` chunks are in flight: planning never runs further
        ahead of the store than that, so the clock the loop reads between two chunks
        says when a slot planned now will start (an overloaded store or host)."""
        while len(self.inflight) >= PIPELINE_DEPTH:
            await asyncio.wait({self.inflight[0][1]})
            self._handle_first()
        task = asyncio.ensure_future(self.store.dispatch(chunk, self.instance_id))
        self.inflight.append((chunk, task, self.clock.now() if since is None else since))
        self.unhandled[task] = chunk  # until handled (a stop may cancel us first)
        # let the call reach the store's thread or socket before we go on: two hops, as a
        # store may run the call in a task of its own (PostgreSQL's deadline on 3.11)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if self.inflight and self.inflight[0][1].done():
            while self.inflight and self.inflight[0][1].done():
                self._handle_first()
            await asyncio.sleep(0)  # their handlers take their first step before we plan on

    async def drain(self) -> list[Dispatched]:
        while self.inflight:
            await asyncio.wait({self.inflight[0][1]})
            self._handle_first()
        return self.results

    def _handle_first(self) -> None:
        chunk, task, since = self.inflight.popleft()
        self.unhandled.pop(task, None)
        began = self.clock.now()
        self.results.extend(self.handle(chunk, task))
        self.delay = self.clock.now() - since
        self.loop.launch_cost = self.delay - (began - since)
        self.handled += 1


class Loop:
    """The loop task and the firing of one instant. Built with the store, the clock, the
    settings, the scheduler's life, the stats, the job table (read-only), the due heap,
    the activity counter, the writer, the runs and the warning log; the assembler wires
    ``early``, ``outage`` and ``fleet`` (the parts it calls that are built after it)."""

    early: EarlyView
    outage: OutageView
    fleet: FleetView

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, life: Life,
                 stats: Stats, jobs: Jobs, due: Due, activity: Activity, writer: Writer,
                 runs: Runs, warn: RateLimitedLog) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.life = life
        self.stats = stats
        self.jobs = jobs
        self.due = due
        self.activity = activity
        self.writer = writer
        self.runs = runs
        self.warn = warn
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.firing: asyncio.Future[None] | None = None  # set while an instant is claimed
        self.fired_at: float | None = None
        self.last_tick: float | None = None  # when the loop last looked at the time
        self.fired_mono = time.monotonic()  # when the instant being fired began (monotonic)
        # jobs whose RUN_ALL catch-up sequence is in progress here: their slots due
        # meanwhile join the sequence (they would meet its lease and be skipped)
        self.sequencing: dict[str, list[tuple[float, bool]]] = {}
        # a sequence's slot waiting for the job's lease held by another process
        self._lease_waits: dict[str, asyncio.Future[None]] = {}
        self._looks: dict[str, int] = {}
        self._lease_poller: asyncio.Future[None] | None = None
        # chunks sent to the store whose answer nobody handled yet (Pipeline): what a
        # stop's cancel leaves here, the stop records (settle_unhandled)
        self.unhandled: dict[asyncio.Future[Any], list[Dispatch]] = {}
        # slots of catch-up sequences the stop came before (run_sequence), for record_unrun
        self.unrun: list[tuple[Job, float]] = []
        # when the loop's current busy streak began (the instant it woke for), None while
        # it sleeps: a slot due after it came due while the loop was busy (overload)
        self.streak: float | None = None
        # the last instant's ``Pipeline.delay`` (0 after an instant that claimed nothing:
        # a stale estimate must not shed every slot for ever)
        self.start_delay = 0.0
        # how long handling a chunk's answer took (launching its handlers): a handler
        # starts about that much after its claim's answer is read
        self.launch_cost = 0.0
        # the overrides as this process last knew them, by job id: what the instants'
        # readings returned for the jobs they asked about, and this process's own
        # changes. The early claims' guess (no store call of their own); the reading at
        # the instant decides
        self.overrides_seen: dict[str, JobState] = {}

    def saw_overrides(self, job_ids: Sequence[str], states: Mapping[str, JobState]) -> None:
        """A reading of the overrides of ``job_ids`` answered ``states`` (a job without an
        override has none)."""
        seen = self.overrides_seen
        if seen:
            asked = set(job_ids)
            for job_id in [k for k in seen if k in asked and k not in states]:
                del seen[job_id]
        seen.update(states)

    def note_override(self, state: JobState) -> None:
        """This process changed a job's override: known at once, without a reading."""
        if state.enabled_override is None:
            self.overrides_seen.pop(state.job_id, None)
        else:
            self.overrides_seen[state.job_id] = state

    async def run(self) -> None:
        due, early, clock, activity = self.due, self.early, self.clock, self.activity
        heap = due.heap
        ahead = early.ahead
        while not self.life.stopping:
            now = clock.now()
            self.last_tick = now
            pending = early.pending
            if (self.writer.behind or self.streak is not None) and heap and (
                heap[0] - early.lead(now) <= now
            ):
                # releases before claims: after a failed group commit, and between two
                # instants of a busy streak (no pause for the writer to find)
                await self.writer.write_behind(WRITE_BEHIND_WAIT)
                now = clock.now()
            if (heap and heap[0] <= now) or (pending is not None and pending.slot <= now):
                activity.enter()
                self.firing = asyncio.get_running_loop().create_future()
                try:
                    await self.fire_due(now)
                except Exception:
                    log.exception("cronfleet: error while firing due slots; continuing")
                finally:
                    self.firing.set_result(None)
                    self.firing = None
                    activity.leave()
                continue
            lead = early.lead(now) if ahead > 0 and pending is None and heap else 0.0
            if lead > 0 and heap[0] - lead <= now:
                activity.enter()
                try:
                    await early.claim(heap[0], now)
                except Exception:
                    log.exception("cronfleet: error while claiming slots early; continuing")
                finally:
                    activity.leave()
                continue
            self.wake.clear()
            self.streak = None  # caught up: what comes due from now on finds it idle
            if pending is not None:
                deadline = min(pending.slot, heap[0]) if heap else pending.slot
            elif heap:
                deadline = heap[0] - lead
            else:
                deadline = now + 3600.0
            # an instant handlers start at (without early claims, the heap's next slot
            # is one too); the early claims' lead needs no spin
            await clock.sleep_until(deadline, self.wake,
                                    precise=pending is not None or (bool(heap) and not lead))

    async def fire_due(self, now: float) -> None:
        self.fired_at = now
        self.fired_mono = time.monotonic()
        streak = self.streak = now if self.streak is None else self.streak
        pending = self.early.take(now)
        jobs, store_due = self.jobs, self.due
        due = store_due.pop_due(now, jobs)
        if not due and (pending is None or not pending.ready):
            return
        ids = [j.id for j, _ in due]
        if pending is not None:
            ids += [j.id for j, _, _ in pending.ready]
        try:
            states = await self.store.read_overrides(ids)
        except Exception as exc:
            self.stats.store_errors += 1
            self.warn.warning(
                "overrides", "cannot read overrides (%s); using each job's declared enabled", exc
            )
            states = {}
        else:
            self.saw_overrides(ids, states)
        if (
            pending is not None
            and pending.ready
            and not await self.fleet.confirm(now, pending.epoch)
        ):
            # a zombie's claims: the fleet took them over; those it did not see are
            # claimed again like any due slot
            due += await self.early.drop_stale(pending)
            pending = None
        # every decision below on a fresh reading: the store calls may have taken long
        now = max(now, self.clock.now())
        if pending is not None:
            due += await self.early.fire(pending, now, states)
        pipe = Pipeline(self)
        skips: list[Skip] = []
        sequences: list[tuple[Job, list[tuple[float, bool]]]] = []
        handled: list[tuple[Job, float]] = []  # fast path: next slot queued afterwards
        late_after, size = self.settings.late_after, self.settings.batch_size
        queued, running = self.runs.queued, self.runs.running
        instance_id = self.settings.instance_id
        scheduled = requests.scheduled
        items: list[Dispatch] = []
        # the missed records of catch-ups: claimed after every run of the instant, so a
        # large catch-up never delays the slot that is back on time
        records: list[Dispatch] = []
        sequencing = self.sequencing
        clock, shed_before = self.clock, self.stats.skips.get(OVERLOADED, 0)
        # ``judged``: when a slot planned now would start, about: the clock read again
        # every chunk plus how long this instant's last chunk took from its planning to
        # its handlers' start (``Pipeline.delay``)
        t = since = now
        judged = now + pipe.delay
        for n, pair in enumerate(due):
            job, slot = pair
            if n and not n % size:
                # a turn for the rest of the loop every ``size`` slots, whatever they
                # became: an instant that mostly sheds submits few chunks, and the
                # transactions in flight hold their job rows' locks until their next
                # statement or COMMIT is sent from here
                await asyncio.sleep(0)
                t = clock.now()
                judged = t + pipe.delay
            if sequencing and job.id in sequencing:
                sequencing[job.id].append((slot, judged - slot > late_after))
                handled.append(pair)  # its next slot is queued as usual
                continue
            plain = job.id not in states and job.enabled
            if plain and judged - slot < min_gap(job) and judged - slot <= late_after:
                # the common case: one slot, on time, no override; its next slot is
                # provably ahead and is computed once the handlers are on their way
                handled.append(pair)
                items.append(scheduled(job, slot, t, queued=queued, running=running,
                                       instance_id=instance_id))
            elif plain and (slot > streak or not late(slot, slot + min_gap(job), now,
                                                      late_after)):
                # it came due while the loop was busy with earlier slots, or it was on
                # time when this instant's planning began: late because of the load
                self.shed(job, slot, t, judged, items, skips)
            else:
                self.plan_job(job, slot, t, states.get(job.id), items, skips, sequences,
                              records)
            if len(items) >= size:
                await pipe.submit(items, since)
                items, since = [], t
        if items:
            await pipe.submit(items, since)
        for i in range(0, len(records), size):
            await pipe.submit(records[i : i + size])
        await pipe.drain()
        self.start_delay = pipe.delay if pipe.handled else 0.0
        shed = self.stats.skips.get(OVERLOADED, 0) - shed_before
        if shed:
            self.warn.warning(
                "overload", "cronfleet %s: overloaded: %d slot(s) could not start on time "
                "(within late_after %gs, before their job's next slot) and are recorded "
                "skipped / overloaded; %d since start", instance_id, shed, late_after,
                self.stats.skips[OVERLOADED])
        if handled:
            await asyncio.sleep(0)  # the last chunk's handlers take their first step first
            store_due.after_many(handled, jobs)
        if skips:
            await self.writer.record_skips(skips)
        for job, runs in sequences:
            if job.id in sequencing:  # already running one: the slots join it
                sequencing[job.id].extend(runs)
                continue
            sequencing[job.id] = runs
            self.life.spawn(self.run_sequence(job, runs))

    def shed(self, job: Job, slot: float, t: float, judged: float, items: list[Dispatch],
             skips: list[Skip]) -> None:
        """A slot of a plain job that came due while the loop was busy, at ``t`` (the
        clock), its start judged at ``judged``: it and the job's later due slots that are
        late too are recorded ``skipped / overloaded`` (``skips``: rows without a claim,
        one insert each, written once the instant's runs are claimed); the first one not
        late starts now if due, else is queued. At most ``RECORD_CAP`` slots a time (the
        rest at the next instant); the count goes to ``stats`` (the instant's warning)."""
        late_after, due = self.settings.late_after, self.due
        x, nxt, shed = slot, after(job, slot), 0
        while x <= t and late(x, nxt, judged, late_after) and shed < RECORD_CAP:
            skips.append(Skip(job.id, x, OVERLOADED, instance_id=self.settings.instance_id,
                              logs=[overloaded_log(from_ts(x).isoformat(), t - x)]))
            due.mark(job.id, x)
            shed += 1
            x, nxt = nxt, after(job, nxt)
        if shed:
            self.stats.skip(OVERLOADED, shed)
        if x > t or late(x, nxt, judged, late_after):  # not due yet, or over the cap
            due.push(job, x)
            return
        due.push(job, nxt)  # due and on time: it starts now
        due.mark(job.id, x)
        items.append(requests.scheduled(
            job, x, t, queued=self.runs.queued, running=self.runs.running,
            instance_id=self.settings.instance_id))

    def plan_job(
        self,
        job: Job,
        slot: float,
        now: float,
        state: JobState | None,
        items: list[Dispatch],
        skips: list[Skip],
        sequences: list[tuple[Job, list[tuple[float, bool]]]],
        records: list[Dispatch] | None = None,
    ) -> None:
        """The slow path: several or late slots (catch-up), or an override to honour.
        The run goes to ``items``, the missed records to ``records`` (default: ``items``)."""
        due = self.due
        nxt = after(job, slot)
        if nxt > now and now - slot <= self.settings.late_after:
            runs: list[tuple[float, bool]] = [(slot, False)]
            missed_slots: list[float] = []
            overflow: tuple[int | None, float, float] | None = None
        else:
            plan = plan_slots(
                job.schedule,
                due.watermark.get(job.id, slot - 1e-3),
                now,
                missed=job.missed,
                window=job.catch_up_window,
                late_after=self.settings.late_after,
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
                nxt = after(job, nxt)
        due.push(job, nxt)
        processed = [x for x, _ in runs] + missed_slots
        if processed:
            due.mark(job.id, max(processed))
        reason = skip_reason(job, state, from_ts(now))
        if reason is not None:
            line = override_skip_log(
                reason.value,
                state.override_by if state else None,
                state.override_note if state else None,
            )
            for x in sorted(processed):
                skips.append(Skip(job.id, x, reason.value,
                                  instance_id=self.settings.instance_id, logs=[line]))
            self.stats.skip(reason.value, len(processed))
            return
        recorded = items if records is None else records
        for x in missed_slots:
            # older than late_after: nobody fired it; else a newer slot overtook it
            why = MISSED_WHY if now - x > self.settings.late_after else OVERTAKEN_WHY
            recorded.append(requests.missed(job, x, why))
        if overflow is not None:
            count, first, last = overflow
            why, result = missed_summary(
                count, from_ts(first).isoformat(), from_ts(last).isoformat()
            )
            recorded.append(requests.missed(job, first, why, result=result))
        if len(runs) == 1:
            items.append(
                requests.scheduled(
                    job, runs[0][0], now, catchup=runs[0][1], queued=self.runs.queued,
                    running=self.runs.running, instance_id=self.settings.instance_id,
                )
            )
        elif runs:
            sequences.append((job, runs))

    async def dispatch(self, items: list[Dispatch]) -> list[Dispatched]:
        """Claim and start a batch outside the loop's burst path (catch-up, recovery)."""
        pipe = Pipeline(self)
        size = self.settings.batch_size
        for i in range(0, len(items), size):
            await pipe.submit(items[i : i + size])
        return await pipe.drain()

    def handle_chunk(self, chunk: list[Dispatch], task: asyncio.Future[Any]) -> list[Dispatched]:
        exc = task.exception()
        if exc is not None:
            self.stats.store_errors += 1
            return self.dispatch_offline(chunk, exc if isinstance(exc, Exception) else None)
        got: list[Dispatched] = task.result()
        now = self.clock.now() + self.launch_cost  # when the last of them will start
        for res in got:
            self.after_dispatch(res, now)
        if self.outage.pending:
            self.outage.answered(got)
        return got

    def dispatch_offline(self, items: list[Dispatch], exc: Exception | None) -> list[Dispatched]:
        """The store did not take a chunk: ``runtime/outage.py`` decides each slot."""
        return self.outage.offline(items, exc, self.fired_mono)

    def after_dispatch(self, res: Dispatched, now: float | None = None) -> None:
        """Start or queue what a claim gave this process. ``now``: the clock when the
        answer came; a slot claimed at its time that is late by then (the store was
        slower than judged: overload) is recorded ``skipped / overloaded``, not started."""
        job = self.jobs.get(res.request.job_id)
        run = res.run
        if not res.won:
            self.stats.claims_lost += 1
            return
        if run is None:
            return
        if job is None:  # removed while its slot was being claimed: as if disabled
            if not run.status.finished:
                self.skip_claimed(run, res.request, DISABLED,
                                  removed_or_skipped_log(DISABLED, False))
            return
        runs = self.runs
        if run.status is RunStatus.RUNNING:
            req = res.request
            # ``late`` needs the job's next slot; ``min_gap`` (never more than the real gap)
            # spares computing it for the claims that come back in time, nearly all
            if now is not None and req.kind is _SCHEDULED and not req.is_catchup and (
                now - req.slot >= min_gap(job) or now - req.slot > self.settings.late_after
            ) and late(req.slot, after(job, req.slot), now, self.settings.late_after):
                self.claimed_late(run, req, now)
                return
            runs.launch(job, run, leased=res.request.lease)
        elif run.status is RunStatus.PENDING:
            if res.request.defer and res.holder is None and not runs.local_busy_defer(job):
                delay = jitter_delay(job.id, res.request.slot, job.jitter)
                self.life.spawn(runs.start_after(job, run, res.request, res.request.slot + delay))
            elif run.is_recovery:  # its own place: never in QUEUE_ONE's single slot
                runs.enqueue_recovery(job, run, res.request.lease)
                log.info(
                    "job %s: recovery of slot %s waits for the lease (%s)",
                    job.id, run.slot.isoformat(), res.holder or "busy",
                )  # fmt: skip
            else:
                runs.enqueue(job, run, res.request.lease)
                if job.overlap is Overlap.REPLACE:
                    self.life.spawn(runs.replace_running(job))
        else:
            self.stats.skip(run.reason)
            if run.reason == SkipReason.ALREADY_EXECUTING.value:
                log.info(
                    "job %s slot %s skipped: %s",
                    job.id,
                    run.slot.isoformat(),
                    run.logs[-1] if run.logs else run.reason,
                )

    def claimed_late(self, run: RunRecord, req: Dispatch, now: float) -> None:
        """A slot claimed on time whose claim came back late: its row says ``skipped /
        overloaded`` and its lease is released, through the group commit."""
        line = overloaded_log(from_ts(req.slot).isoformat(), now - req.slot)
        self.skip_claimed(run, req, OVERLOADED, line)

    def skip_claimed(self, run: RunRecord, req: Dispatch, reason: str, line: str) -> None:
        """A claimed slot that will not start: its row says ``skipped`` for ``reason`` and
        its lease is released, through the group commit."""
        skip_run(run, reason, line, from_ts(self.clock.now()))
        self.stats.skip(reason)
        self.writer.add(Finish(run, run.fencing_token if req.lease else None), now=True)

    async def settle_unhandled(self, budget: float) -> int:
        """At stop, after the background tasks were cancelled: the chunks whose caller was
        cancelled while the store claimed them. Their answers are awaited (``budget``
        seconds at most) and every slot they gave this process -- a pending row, or a
        claim whose row the group commit was to write -- is recorded ``interrupted``: it
        will not start now. Returns how many chunks got no answer in time (their claims
        are left to the reaper that resolves a lost instance's slots)."""
        left, self.unhandled = self.unhandled, {}
        if not left:
            return 0
        done, pending = await asyncio.wait(left, timeout=budget)
        now = self.clock.now()
        for task in done:
            if task.cancelled() or task.exception() is not None:
                continue  # the store did not take the chunk: nothing of it was claimed
            for res in task.result():
                run = res.run
                if res.won and run is not None and run.status in _OPEN:
                    self.runs.interrupt(run, res.request.lease, now, STOPPED_BEFORE_START)
        return len(pending)

    def left_due(self, now: float) -> list[Dispatch]:
        """At stop, once the loop ended: the slots already due that it did not reach (it
        was behind: ``overloaded``; it had just woken: ``missed``), every one up to
        ``now`` (``RECORD_CAP`` per job at most; a later start's catch-up finds the
        rest)."""
        items: list[Dispatch] = []
        for job, slot in self.due.pop_due(now, self.jobs):
            items += self.unreached(job, slot, now, STOPPED_WHY, stopping=True)
        return items

    def unreached(self, job: Job, slot: float, now: float, why: str, *,
                  stopping: bool = False) -> list[Dispatch]:
        """``job``'s slots from ``slot`` up to ``now`` that the loop did not reach, as
        records: ``overloaded`` for one that came due while the loop was busy (its
        streak), else ``missed`` (``why``); ``RECORD_CAP`` at most."""
        streak, items, x = self.streak, [], slot
        for _ in range(RECORD_CAP):
            if x > now:
                break
            if streak is not None and x > streak:
                items.append(requests.overloaded(job, x, now - x, stopping=stopping))
            else:
                items.append(requests.missed(job, x, why))
            x = after(job, x)
        return items

    def record_removed(self, job: Job, now: float) -> None:
        """``job`` is being removed while its queued slot is already due (the loop was
        behind its slots, or about to fire it): that slot and its later due ones get
        their rows with the writer's next group commit (kept with the unsaved skips if
        the store is away), so a removal leaves no due slot without a row. A slot the
        loop is claiming at this moment keeps the first of the two (a skip takes the
        slot's claim)."""
        slot = self.due.next.get(job.id)
        if slot is None or slot > now:
            return
        skips = [Skip.of(d, self.settings.instance_id, MISSED)
                 for d in self.unreached(job, slot, now, REMOVED_WHY)]
        for skip in skips:
            self.stats.skip(skip.reason)
        self.writer.queue_skips(skips)

    async def record_unrun(self, budget: float) -> int:
        """At stop: the slots of catch-up sequences (``missed=run_all``, a backlog's
        replay) the stop came before, and the slots already due that the loop did not
        reach (``left_due``), are claimed and recorded ``skipped`` (a slot another process
        has is left to it): another process may already have claimed a later slot, and a
        later start's catch-up would not find them. Returns how many the store did not
        take within ``budget`` seconds."""
        left, self.unrun = self.unrun, []
        now = self.clock.now()
        now_iso = from_ts(now).isoformat()
        items = [
            Dispatch.missed(job.id, slot, reason=MISSED,
                            local=job.locking is Locking.NODE_LOCAL, logs=[
                f"Skipped: the scheduler stopped at {now_iso} before its catch-up "
                f"(missed={job.missed.value}) reached this slot"])
            for job, slot in left
        ]
        if self.settings.timers:  # without timers (an API replica) nothing was planned here
            items += self.left_due(now)
        if not items:
            return 0
        size, done = self.settings.batch_size, 0

        async def write() -> None:
            nonlocal done
            for i in range(0, len(items), size):
                await self.store.dispatch(items[i : i + size], self.settings.instance_id)
                done = min(i + size, len(items))

        # as the last results (Writer.last_writes): on while the store takes the chunks
        task = asyncio.ensure_future(write())
        if not await wait_while_moving(task, lambda: done, budget):
            await cancel_and_wait([task])
            why = f"the store took none of them for {budget:g} s"
        elif task.exception() is not None:  # the store is away
            why = str(task.exception())
        else:
            return 0
        # the next start's catch-up or, in a fleet, the next owner's records them
        log.warning("cronfleet %s: %d due slot(s) not recorded at stop (%s)",
                    self.settings.instance_id, len(items) - done, why)
        return len(items) - done

    async def run_sequence(self, job: Job, runs: list[tuple[float, bool]]) -> None:
        """Several slots of one job at once (catch-up, or the on-time slots found at a
        start): one after the other.

        Every process of a fleet that starts together plans the same sequence. A slot is
        claimed only together with the job's lease (:func:`requests.sequenced`): while
        another process runs a slot of it, nothing is claimed and the slot is tried again
        (up to :func:`sequence_wait`), so the sequences of the fleet interleave instead of
        meeting each other's leases; a slot another process claimed is left to it."""
        self.activity.enter()
        try:
            i = 0
            waited_since: float | None = None
            shared = self._shares_sequences(job)
            while i < len(runs):  # slots due meanwhile are appended (fire_due)
                slot, catchup = runs[i]
                await self.runs.job_idle(job.id)
                # the previous run's lease is released by the group commit: wait for it to
                # be written, or this slot would meet our own lease and be skipped
                await self.writer.flushed()
                if self.life.stopping:
                    return
                if shared:
                    now = self.clock.now()
                    if waited_since is None or now - waited_since < sequence_wait(self.settings):
                        outcome = await self._claim_in_sequence(job, slot, catchup, now)
                        if outcome == "busy":
                            waited_since = now if waited_since is None else waited_since
                            await self._lease_free(job)
                            continue
                        if outcome != "failed":  # ran here, or another process has it
                            waited_since = None
                            i += 1
                            continue
                    # still busy after the wait (a long run elsewhere), or the store did
                    # not answer: claimed as before (``already_executing`` / outage path)
                waited_since = None
                i += 1
                item = requests.scheduled(
                    job, slot, self.clock.now(), catchup=catchup, queued=self.runs.queued,
                    running=self.runs.running, instance_id=self.settings.instance_id,
                    wait_if_busy=False,
                )
                await self.dispatch([item])
            await self.runs.job_idle(job.id)
        finally:
            if self.life.stopping:  # the stop came first: its slots are recorded (record_unrun)
                self.unrun.extend((job, slot) for slot, _ in runs[i:])
            if self.sequencing.get(job.id) is runs:
                del self.sequencing[job.id]
            self.activity.leave()

    def _shares_sequences(self, job: Job) -> bool:
        """Whether other processes may run this job's sequence too and its slots are
        claimed only with the lease: a leased fleet-wide job on a store that keeps such
        claims (``EarlyClaimStore``), no jitter (a deferred start takes its lease later)."""
        return (
            job.overlap is not Overlap.ALLOW
            and job.locking is not Locking.NODE_LOCAL
            and not job.jitter
            and isinstance(self.store, EarlyClaimStore)
        )

    async def _claim_in_sequence(
        self, job: Job, slot: float, catchup: bool, now: float
    ) -> str:
        """Claim one slot of a sequence with the lease. ``"busy"``: the lease is held
        elsewhere, nothing was written; ``"lost"``: another process claimed the slot;
        ``"won"``: the run started here; ``"failed"``: the store did not answer."""
        try:
            got = await self.store.dispatch([requests.sequenced(job, slot, now, catchup=catchup)],
                                         self.settings.instance_id)
        except Exception as exc:  # the caller claims it the usual way (the outage path)
            log.debug("job %s: sequence claim of %s failed (%s)", job.id,
                      from_ts(slot).isoformat(), exc)
            return "failed"
        res = got[0]
        if res.busy:
            return "busy"
        if not res.won or res.run is None:
            self.stats.claims_lost += 1
            return "lost"
        if self.outage.pending:
            self.outage.answered(got)
        self.after_dispatch(res)
        return "won"

    async def _lease_free(self, job: Job) -> None:
        """Wait a moment for the job's lease to be released elsewhere: one shared poll of
        the waiting jobs' states (a read, no claim) every ``SEQUENCE_POLL`` returns when
        no holder is left, or after ``SEQUENCE_LOOKS`` polls; lanes (``max_instances`` >
        1, not in the job's state row) are tried again after one poll."""
        fut = self._lease_waits.get(job.id)
        if fut is None or fut.done():
            fut = self._lease_waits[job.id] = asyncio.get_running_loop().create_future()
            self._looks[job.id] = SEQUENCE_LOOKS if job.max_instances == 1 else 1
        if self._lease_poller is None or self._lease_poller.done():
            self._lease_poller = asyncio.ensure_future(self._poll_leases())
        activity = self.activity
        activity.leave()  # waiting for another process is idle time here
        try:
            await fut
        finally:
            activity.enter()

    async def _poll_leases(self) -> None:
        waits, looks = self._lease_waits, self._looks
        while waits and not self.life.stopping:
            await self.clock.sleep_until(self.clock.now() + SEQUENCE_POLL)
            ids = list(waits)
            try:
                states = await self.store.read_states(ids)
            except Exception:
                states = {}
                for job_id in ids:
                    looks[job_id] = 0  # the claim finds out what the store says
            for job_id in ids:
                looks[job_id] -= 1
                st = states.get(job_id)
                if looks[job_id] <= 0 or st is None or st.lease_holder is None:
                    fut = waits.pop(job_id)
                    looks.pop(job_id, None)
                    if not fut.done():
                        fut.set_result(None)
        for fut in waits.values():  # stopping
            if not fut.done():
                fut.set_result(None)
        waits.clear()


def sequence_wait(settings: Settings) -> float:
    """How long a slot of a sequence waits for the job's lease held by another process
    before it is claimed anyway (and recorded ``already_executing`` if still busy): long
    enough for a lost holder to be declared lost and its lease broken."""
    return max(2 * settings.instance_ttl, settings.late_after)
