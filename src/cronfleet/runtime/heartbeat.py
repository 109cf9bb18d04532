"""The heartbeat thread: this process's heartbeats, beaten from a daemon thread with a
connection of its own, so that a busy or starved event loop does not stop them
(issue #26).

The thread has its own event loop and its own store object, opened from the scheduler's
store URL through the store factory (``Fleet.open_beat_store``): a second connection (a
SQLite connection and its thread, a PostgreSQL pool of one, a Redis client). Every
``Fleet.interval`` it calls ``heartbeat(me, ttl)`` and hands what the store said to
``Fleet.record`` (under the fleet's lock: see ``Fleet``), then posts a **probe** to the
scheduler's event loop (``call_soon_threadsafe``): the probe stamps the loop's progress
and wakes ``Fleet.heartbeat_loop``, which does the loop's own work after a beat that went
through (``break_lost``, ``registry.sync``). One probe at a time is outstanding: a loop
that does not run callbacks does not pile them up.

**The loop's lag** is the age of the outstanding probe (0 when none is): how long the event
loop has gone without running a callback. Past ``Fleet.lag_warn`` the thread logs a
warning (rate-limited); past ``Fleet.wedged_after`` it stops beating, so that a wedged
process (a deadlock, a handler that never yields) is declared lost by the survivors
instead of being kept "alive" by its heartbeat thread forever. When the loop comes back
it answers the probe and the beats resume; if it was declared lost meanwhile, the next
beat says so (``Fleet.epoch``) and the zombie rules apply (docs/concepts.md).

A probe, not ``Loop.last_tick``: the loop ticks only when an instant or a wake-up is due
(an idle loop with hourly jobs sleeps for up to an hour), while a probe is answered
within one pass of the event loop whenever the loop is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from cronfleet.runtime.parts import RateLimitedLog
from cronfleet.store.base import InstanceStore

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.store.base import Heartbeat, Instance, Store

__all__ = ["BeatThread", "Beating", "LoopProbe"]

log = logging.getLogger("cronfleet")

LAG_WARN_EVERY = 60.0  # seconds between two warnings of a lagging loop


class Beating(Protocol):
    """What the thread reads and calls of the fleet (``Fleet``)."""

    me: Instance
    clock: Clock
    ttl: float
    interval: float
    lag_warn: float
    wedged_after: float

    def record(self, asked: float, beat: Heartbeat) -> None: ...

    def record_failure(self, asked: float, exc: BaseException) -> None: ...


class LoopProbe:
    """The loop's progress as the heartbeat thread sees it: :meth:`post` (thread) sends
    one callback to the event loop unless one is outstanding; the callback (loop) marks it
    answered and calls ``on_answer``. :meth:`lag` (thread) is the age of the outstanding
    probe. ``monotonic`` is injectable for tests."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_answer: Callable[[], None], *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.on_answer = on_answer
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._posted_at: float | None = None  # the outstanding probe's time, None: none

    def post(self) -> bool:
        """Send a probe unless one is outstanding; False when the loop is closed."""
        with self._lock:
            if self._posted_at is not None:
                return True
            self._posted_at = self.monotonic()
        try:
            self.loop.call_soon_threadsafe(self._answer)
        except RuntimeError:  # the loop is closed: the scheduler is gone
            return False
        return True

    def _answer(self) -> None:
        with self._lock:
            self._posted_at = None
        self.on_answer()

    def lag(self) -> float:
        """Seconds the outstanding probe has waited for the loop (0 when none is)."""
        with self._lock:
            posted = self._posted_at
        return 0.0 if posted is None else max(0.0, self.monotonic() - posted)


class BeatThread(threading.Thread):
    """Beats for ``fleet`` every ``fleet.interval`` on a store opened by ``open_store``
    (opened in this thread's own event loop, closed at the end), until :meth:`stop`."""

    def __init__(self, fleet: Beating, open_store: Callable[[], Store], probe: LoopProbe) -> None:
        super().__init__(name=f"cronfleet-heartbeat-{fleet.me.instance_id}", daemon=True)
        self.fleet = fleet
        self.open_store = open_store
        self.probe = probe
        self.warn = RateLimitedLog(log, every=LAG_WARN_EVERY)
        self._stop_flag = threading.Event()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wedged = False

    def stop(self) -> None:
        """Ask the thread to end (it closes its store); ``join`` waits for it."""
        self._stop_flag.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(wake.set)

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            log.exception("instance %s: the heartbeat thread failed",
                          self.fleet.me.instance_id)

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        fleet = self.fleet
        store: InstanceStore | None = None
        try:
            while not self._stop_flag.is_set():
                began = time.monotonic()
                if self.may_beat():
                    if store is None:
                        store = await self._open()
                    if store is not None:
                        # a failed beat keeps the store: its transport reconnects, as the
                        # loop's store does
                        await self._beat(store)
                if not self.probe.post():
                    return
                delay = fleet.interval - (time.monotonic() - began)
                if delay > 0:  # asyncio.timeout: no task per wait, as wait_for makes
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._wake.wait()
        finally:
            if store is not None:
                await _close(store)

    def may_beat(self) -> bool:
        """Beat unless the event loop has made no progress for ``fleet.wedged_after``
        seconds (logged once per wedge); a loop lagging past ``fleet.lag_warn`` is
        logged too (rate-limited) but still beats."""
        fleet = self.fleet
        lag = self.probe.lag()
        if lag > fleet.wedged_after:
            if not self._wedged:
                self._wedged = True
                log.error(
                    "instance %s: the event loop has run nothing for %.1f s (more than "
                    "%g s): heartbeats stop so that the fleet declares this process lost "
                    "and runs its jobs; they resume if the loop comes back",
                    fleet.me.instance_id, lag, fleet.wedged_after)
            return False
        if self._wedged:
            self._wedged = False
            log.warning("instance %s: the event loop runs again; heartbeats resume",
                        fleet.me.instance_id)
        if lag > fleet.lag_warn:
            self.warn.warning(
                "lag", "instance %s: the event loop is %.1f s late (a sync handler or "
                "blocking call on the loop thread, or a starved CPU?); heartbeats go on "
                "from their thread, but slots start late", fleet.me.instance_id, lag)
        return True

    async def _open(self) -> InstanceStore | None:
        """The thread's store, open; None when it could not be opened (a failed beat:
        the next interval tries again)."""
        fleet = self.fleet
        store = self.open_store()
        if not isinstance(store, InstanceStore):
            raise TypeError(f"{type(store).__name__} keeps no instances")
        if hasattr(store, "open_timeout"):  # PostgreSQL: no minute of retries here
            store.open_timeout = fleet.ttl
        try:
            await asyncio.wait_for(store.open(), fleet.ttl)
        except Exception as exc:
            fleet.record_failure(fleet.clock.now(), exc)
            await _close(store)
            return None
        return store

    async def _beat(self, store: InstanceStore) -> None:
        """One heartbeat (at most a ttl: a later answer is no use), recorded in the
        fleet."""
        fleet = self.fleet
        asked = fleet.clock.now()
        try:
            async with asyncio.timeout(fleet.ttl):
                beat = await store.heartbeat(fleet.me, ttl=fleet.ttl)
        except Exception as exc:
            fleet.record_failure(asked, exc)
            return
        fleet.record(asked, beat)


async def _close(store: InstanceStore) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(store.close(), 5.0)
