"""The fleet as this process sees it: its own ``instances`` row, heartbeats by the
store's clock, the live set, breaking a lost instance's leases, and work spreading.

- **Heartbeat** every ``instance_ttl / 5`` (0.3 s by default): refreshes this instance's
  row and reads the live set (PostgreSQL: one statement; registering, or a row declared
  lost, takes a transaction: ``StoreDriver.heartbeat``). An instance whose heartbeat is
  older than ``instance_ttl`` (1.5 s) is lost. The beats come from a daemon thread with a
  store connection of its own (runtime/heartbeat.py), so a busy or starved event loop
  does not stop them; the thread stops beating for a loop that ran nothing for
  ``wedged_after`` (``max(10 s, 5 x ttl)``), so that a wedged process is declared lost.
  What a beat found reaches the loop's state under one lock (``record``); the loop does
  its part (``break_lost``, dividing the jobs, the registry's sync) after a beat that
  went through: at once when the beat moves jobs (a stale instance, a new live set),
  else in a moment clear of the next instant (``quiet_moment``). Without
  a second connection (the memory store, a store object given by the caller) or with a
  test clock, the loop beats itself, as before.
- **Lost instances**: after a heartbeat that saw one (``Heartbeat.stale``), this process
  declares lost any other instance past the ttl -- after a gap in its own heartbeats
  (one failed, or none for longer than the ttl) only once they went through again for
  ``steady_for`` (2 s by default; ``Fleet.steady``: after a store outage every
  heartbeat is stale, and the first process back must not declare the rest lost) -- and
  breaks its leases (``InstanceStore.break_lost``, exactly one survivor acts on each):
  its open runs and its claimed-but-unwritten slots (early claims included) become
  ``interrupted`` (``instance_lost``), and jobs with ``recover=True`` re-run the slot
  with a higher fencing token. A lease is therefore worth as much as its holder's
  heartbeat, whatever its stored expiry (which stays the backstop).
- **Zombies**: a process that could not confirm its heartbeat for longer than the ttl
  (stopped, paused, starved) may have been declared lost. Before it starts runs from
  claims made earlier it confirms with a heartbeat; if the store says it was declared
  lost (``epoch`` moves: every claim made before belongs to the survivors), it logs it,
  re-registers (the heartbeat did) and drops those claims — the survivors already wrote
  them ``interrupted``. The stores refuse to withdraw a claim whose slot has a run row,
  so a zombie can never make a resolved slot claimable again. Its handlers still running
  report late: the store keeps their outcomes as late results on the interrupted rows
  (never a second outcome, ``store/ledger.py`` ``is_late``).
- **Ownership**: each heartbeat says which jobs this instance plans (a digest) and
  reads the live set; ``runtime/ownership.py`` divides the jobs among the live instances
  that plan the same ones (rendezvous hashing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import TYPE_CHECKING

from cronfleet.model import RunRecord
from cronfleet.runtime.heartbeat import BeatThread, LoopProbe
from cronfleet.store.base import Heartbeat, Instance, InstanceStore

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.due import Due
    from cronfleet.runtime.early import EarlyClaims
    from cronfleet.runtime.parts import OwnershipView, RegistryView, Settings
    from cronfleet.runtime.stats import Stats
    from cronfleet.runtime.upkeep import Upkeep
    from cronfleet.store.base import Store

__all__ = ["QUIET", "Fleet"]

QUIET = 0.05  # seconds kept clear of an instant (and of its early claims) by heartbeats
HANDOVER_MARGIN = 0.2  # seconds a stopping instance plans on after its peers' next beat
HANDOVER_MAX = 2.0  # seconds a stop waits at most for the handover (a long ttl's interval)
STEADY_BEATS = 2
"""After a gap in its heartbeats (one failed, or none for longer than the ttl), an
instance judges the others only after ``Fleet.steady_for``: this many intervals, at
least an interval + 2 s, at most the ttl (2 s by default: the ttl)."""

WEDGED_AFTER = 10.0
WEDGED_TTLS = 5
"""The heartbeat thread stops beating once the event loop has run nothing for
``max(WEDGED_AFTER, WEDGED_TTLS * instance_ttl)`` seconds (10 s by default): a wedged
process (a deadlock, a handler that never yields) is declared lost and its jobs move,
while a loop held a second or two by a sync handler, or starved of CPU, keeps beating.
Ten seconds is well past what a healthy loop is held by (a sync handler run on it by
mistake, a large instant, a starved CPU: a second or two) and less than the 15 s after
which a frozen loop was declared lost before heartbeats had a thread (the old default
ttl); a larger ttl, chosen to tolerate longer stalls, stretches it."""

log = logging.getLogger("cronfleet")


def _version() -> str:
    try:
        return metadata.version("cronfleet")
    except metadata.PackageNotFoundError:
        return "unknown"


class Fleet:
    """This process's membership (built afresh at each start). Built with the store, the
    clock, the settings, the stats, the activity counter, the due heap, the early claims
    (their lead) and the upkeep (recovery of a lost instance's runs); the assembler wires
    ``registry`` (its periodic sync) and ``ownership`` (told the live set at each beat)."""

    registry: RegistryView
    ownership: OwnershipView

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, stats: Stats,
                 activity: Activity, due: Due, early: EarlyClaims, upkeep: Upkeep,
                 open_beat_store: Callable[[], Store] | None = None) -> None:
        self.clock = clock
        self.stats = stats
        self.activity = activity
        self.due = due
        self.early = early
        self.upkeep = upkeep
        self.store: InstanceStore | None = (
            store if isinstance(store, InstanceStore) and settings.timers else None
        )
        self.ttl = settings.instance_ttl
        self.interval = max(0.05, self.ttl / 5)
        # a live instance beats within an interval of the store's return, plus its own
        # reconnect (PostgreSQL's probe: up to 1 s): wait that long after a gap
        self.steady_for = min(self.ttl, max(STEADY_BEATS * self.interval, self.interval + 2.0))
        self.me = Instance(settings.instance_id, socket.gethostname(), os.getpid(), settings.role,
                           _version())
        # a loop lagging this long is logged; one that ran nothing for this long is wedged:
        # the heartbeat thread stops beating for it (runtime/heartbeat.py)
        self.lag_warn = self.ttl
        self.wedged_after = max(WEDGED_AFTER, WEDGED_TTLS * self.ttl)
        self.open_beat_store = open_beat_store if self.store is not None else None
        # What the heartbeats found: written by the heartbeat thread (BeatThread) or by
        # the loop's own beats (start, confirm), read by the loop. ``record`` changes them
        # under ``_lock`` in one step, the epoch before last_ok; ``confirm`` reads last_ok
        # and the epoch under the same lock: a fresh last_ok never comes with the epoch
        # from before the store said this instance had been declared lost. The other
        # readers (steady, the upkeep, owns) read single fields, each written whole.
        self._lock = threading.Lock()
        self.live: tuple[str, ...] = ()
        self.last_ok: float | None = None  # our clock when the store last confirmed us
        self.steady_since: float | None = None  # heartbeats without a gap since (our clock)
        self.failed = False  # a heartbeat failed since the last one that went through
        self.epoch = 0  # +1 each time the store says this instance had been declared lost
        self.leaving = False  # stopping: its heartbeats say it plans nothing (hand_over)
        # the live set and digests the last heartbeat read, for divide()
        self.view: tuple[tuple[str, ...], Mapping[str, str]] = ((), {})
        # the last heartbeat saw another instance silent past the ttl: break_lost has work
        self.stale = False
        # the heartbeat thread and the event its probe sets, once started (start_beating)
        self._beating: tuple[BeatThread, asyncio.Event] | None = None

    @property
    def enabled(self) -> bool:
        return self.store is not None

    # -- membership ----------------------------------------------------------------------

    async def beat(self) -> Heartbeat | None:
        """One heartbeat from the loop, on the scheduler's store (at start, in
        ``confirm``, and every interval without a heartbeat thread); ``None`` when the
        store did not answer (logged)."""
        if self.store is None:
            return None
        asked = self.clock.now()
        self.refresh_plans()
        try:
            beat = await self.store.heartbeat(self.me, ttl=self.ttl)
        except Exception as exc:
            self.record_failure(asked, exc)
            return None
        self.record(asked, beat)
        return beat

    def record_failure(self, asked: float, exc: BaseException) -> None:
        """A heartbeat asked at ``asked`` failed (either thread)."""
        with self._lock:
            self.stats.store_errors += 1
            self.failed = True
        log.warning("instance %s: heartbeat failed (%s)", self.me.instance_id,
                    str(exc) or type(exc).__name__)

    def record(self, asked: float, beat: Heartbeat) -> None:
        """What a heartbeat asked at ``asked`` (our clock) found (either thread)."""
        with self._lock:
            prev = self.last_ok
            if prev is None or self.failed or asked - prev > self.ttl:
                # back after failed heartbeats (a store outage, a held SQLite lock) or a
                # pause longer than the ttl: the others' heartbeats may be as stale as ours
                # for the same reason; see steady(). A beat that is merely late (a loaded
                # machine) is no gap.
                self.steady_since = asked
                self.failed = False
            changed = beat.live != self.live
            if changed:
                self.live = beat.live
            self.view = (beat.live, beat.plans)  # for divide(), on the loop
            self.stale = beat.stale  # for _after_beat(), on the loop
            if beat.lost:
                self.epoch += 1  # claims made before belong to the survivors now
            # the loop's beat and the thread's may answer out of order: keep the newest
            self.last_ok = asked if prev is None else max(prev, asked)
        if changed and prev is not None:
            log.info("fleet: %d live instance(s): %s", len(beat.live), ", ".join(beat.live))
        if beat.lost:
            log.warning(
                "instance %s was declared lost by %s at %s (no heartbeat for more than "
                "%gs); its runs in progress were interrupted and their results will be "
                "kept as late results; re-registered",
                self.me.instance_id,
                beat.lost_by or "another instance",
                beat.lost_at.isoformat() if beat.lost_at is not None else "?",
                self.ttl,
            )

    async def confirm(self, now: float, epoch: int) -> bool:
        """Before starting runs from claims made in ``epoch``: True when they are still
        ours (the store confirms this instance was not declared lost since). Suspect --
        a beat first -- when the store has not confirmed this instance for longer than
        half the ttl: claims made before may have been broken by the survivors."""
        with self._lock:  # last_ok and the epoch of one beat (see __init__)
            last, current = self.last_ok, self.epoch
        if not self.enabled or (last is not None and now - last <= self.ttl / 2):
            return epoch == current
        beat = await self.beat()
        with self._lock:
            last, current = self.last_ok, self.epoch
        if beat is None:  # no answer: ours unless a survivor may have declared us lost
            return last is not None and now - last < self.ttl and epoch == current
        return epoch == current

    def steady(self) -> bool:
        """True once this instance's heartbeats have gone through without a gap (none
        failed, none missing for longer than the ttl) for ``steady_for`` seconds. Only
        then may it judge the others:
        after an outage of the store every heartbeat is stale, and the first process back
        must not declare the rest of the fleet lost -- they could not beat either, and
        each live one beats again within an interval of the store's return."""
        last, since = self.last_ok, self.steady_since
        return last is not None and since is not None and last - since >= self.steady_for

    async def break_lost(self) -> list[RunRecord] | None:
        """Declare lost the instances past the ttl and break their leases; recover.
        ``None`` when the store call failed (nothing was declared)."""
        if self.store is None:
            return []
        try:
            got = await self.store.break_lost(self.me.instance_id, ttl=self.ttl)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("checking for lost instances failed (%s)", exc)
            return None
        for inst in got.instances:
            log.warning(
                "instance %s (host %s, pid %d) is lost: no heartbeat since %s; its leases "
                "are broken",
                inst.instance_id,
                inst.host,
                inst.pid,
                inst.heartbeat_at.isoformat() if inst.heartbeat_at is not None else "?",
            )
        if got.runs:
            await self.upkeep.recover(got.runs, "its instance was lost")
        return got.runs

    async def quiet_moment(self) -> None:
        """Wait until this is not the moment of an instant or of its early claims: the
        loop's heartbeat work (a beat without a thread, ``break_lost``, the registry's
        sync) is store round trips on the loop, and a handler's lateness must not pay
        for it. The thread's beats need no such wait: another connection, another
        thread, a few hundred microseconds of the GIL.

        At most an interval: with a short ttl (2 s) and a long ``claim_ahead``, the
        quiet window could otherwise hold a heartbeat past the ttl."""
        heap = self.due.heap
        if not heap:
            return
        now = self.clock.now()
        nxt = heap[0]
        if nxt - self.early.ahead - QUIET <= now < nxt + QUIET:
            await self.clock.sleep_until(min(nxt + QUIET, now + self.interval))

    def start_beating(self) -> None:
        """Start the heartbeat thread (when the store has a second connection), at start
        right after the first beat registered this instance: the planning of a large
        share takes seconds, and a row without heartbeats meanwhile would be declared
        lost. :meth:`heartbeat_loop` takes the thread over; :meth:`stop_beating` stops
        it (a start that failed)."""
        if self.open_beat_store is None or self._beating is not None:
            return
        nudge = asyncio.Event()  # set on the loop by the thread's probe, after each beat
        probe = LoopProbe(asyncio.get_running_loop(), nudge.set)
        thread = BeatThread(self, self.open_beat_store, probe)
        thread.start()
        self._beating = (thread, nudge)

    async def stop_beating(self) -> None:
        """Stop the heartbeat thread, if any: it ends within its current beat (at most a
        ttl), waited for off the loop, so that no beat re-registers this instance after
        :meth:`leave`."""
        beating, self._beating = self._beating, None
        if beating is not None:
            beating[0].stop()
            await asyncio.shield(asyncio.to_thread(beating[0].join, self.ttl + 5.0))

    async def heartbeat_loop(self) -> None:
        """The heartbeats, for as long as this task runs: from a thread when the store
        has a second connection (``open_beat_store``), else from this loop."""
        if self.open_beat_store is None:
            await self._beat_in_loop()
            return
        self.start_beating()
        assert self._beating is not None
        thread, nudge = self._beating
        try:
            judged: float | None = None
            while True:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow this
                # task's cancellation when the event is set at the same moment, and a
                # stop then waited for this loop for ever (one stop in ~30 on SQLite)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.ttl):
                        await nudge.wait()
                if not thread.is_alive():  # a bug in the thread: logged there
                    log.error("instance %s: the heartbeat thread ended; heartbeats go on "
                              "from the event loop", self.me.instance_id)
                    await self._beat_in_loop()
                nudge.clear()
                self.refresh_plans()
                last = self.last_ok
                if last == judged or not self.steady():
                    continue  # no beat went through since the last pass, or not steady
                judged = last
                await self._judge()
        finally:
            await self.stop_beating()

    async def _judge(self) -> None:
        """The loop's part after a heartbeat thread's beat that went through, while
        steady: ``_after_beat`` in a quiet moment -- unless the beat moves jobs (it saw a
        stale instance, or a live set with other peers: a survivor whose peer declared
        the lost instance first sees only the smaller set). Moved jobs wait for no
        instant: a lost instance's are already late, and a join or a stop would keep two
        owners (or none) longer. The quiet window covers the early claims too, most of a
        second with the default ``claim_ahead``."""
        with self._lock:  # one beat's reading
            stale, view = self.stale, self.view
        if not stale and not self.ownership.moves(*view):
            await self.quiet_moment()
        self.activity.enter()
        try:
            await self._after_beat()
        finally:
            self.activity.leave()

    async def _beat_in_loop(self) -> None:
        """Without a second connection (the memory store, a store object given by the
        caller, a test clock): beat from the loop, clear of the instants."""
        while True:
            await self.quiet_moment()
            self.activity.enter()
            try:
                beat = await self.beat()
                if beat is not None and self.steady():
                    await self._after_beat()
            finally:
                self.activity.leave()
            await self.clock.sleep_until(self.clock.now() + self.interval)

    async def _after_beat(self) -> None:
        """The loop's work after a beat that went through, while steady: declare the
        lost, divide the jobs (after break_lost: a lost instance's jobs are taken with
        its leases broken, so their catch-up does not meet them), sync the registry.
        ``break_lost`` only when the beat saw a stale instance: a store round trip (and,
        on PostgreSQL, a write) every beat of every process otherwise."""
        with self._lock:  # one beat's reading (the thread may record a newer one meanwhile)
            stale, view = self.stale, self.view
        if stale and await self.break_lost() is None:
            # not declared: their jobs stay where they are until a break_lost goes
            # through (moved now, each met its dead holder's lease: already_executing)
            return
        await self.divide(view)
        await self.registry.sync()  # only on change, or the periodic touch

    def refresh_plans(self) -> None:
        """The digest the next heartbeats carry (the thread's included), on the loop:
        the job table changes there."""
        self.me.plans = "" if self.leaving else self.ownership.plans()

    async def divide(
        self, view: tuple[tuple[str, ...], Mapping[str, str]] | None = None
    ) -> None:
        """Tell the ownership the live set of the last heartbeat (or of ``view``): at
        start, then after each heartbeat once steady (after a gap in this instance's
        heartbeats every other one looks stale too: taking their jobs then would only
        make two owners)."""
        if not self.leaving:
            await self.ownership.update(*(self.view if view is None else view))

    async def hand_over(self, budget: float) -> None:
        """At stop, before the loop stops: one heartbeat saying this instance plans no
        job; its peers take its share at their next heartbeat (within an interval), and
        the loop goes on planning meanwhile -- both plan those jobs for a moment, the
        store keeps one claim of each slot -- so that no slot waits for the handover (an
        interval and a margin, ``HANDOVER_MAX`` at most: real time, as the peers'
        heartbeats). Its row stays until :meth:`leave`: it is not lost while it finishes
        its runs."""
        if self.store is None or self.leaving:
            return
        self.leaving = True
        self.refresh_plans()
        if len(self.ownership.peers) < 2:
            return  # nobody to hand over to
        try:
            async with asyncio.timeout(budget):
                if await self.beat() is None:
                    return  # not said: the peers take the share when the row goes
        except TimeoutError:
            log.warning("cronfleet %s: handing its jobs over took over %g s; the fleet takes "
                        "them when its row goes", self.me.instance_id, budget)
            return
        await asyncio.sleep(min(self.interval + HANDOVER_MARGIN, HANDOVER_MAX))

    async def leave(self, budget: float) -> None:
        """Remove this instance's row (at stop), giving the store ``budget`` seconds."""
        if self.store is None:
            return
        try:
            async with asyncio.timeout(budget):
                await self.store.leave(self.me.instance_id)
        except TimeoutError:
            log.warning("cronfleet %s: removing its instance row took over %g s; left behind "
                        "(it expires after instance_ttl)", self.me.instance_id, budget)
        except Exception as exc:
            log.warning("instance %s: could not remove its row (%s)", self.me.instance_id, exc)
