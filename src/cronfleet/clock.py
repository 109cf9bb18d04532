"""The one source of time for the scheduler, injectable so tests control it.

Time is carried as float seconds since the Unix epoch (UTC) inside the loop: cheap to
compare and hash, and free of time-zone questions. Datetimes appear only at the edges.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = [
    "Clock",
    "FakeClock",
    "SystemClock",
    "from_ts",
    "slot_text",
    "to_ts",
    "wait_done",
    "wait_event",
    "wait_while_moving",
]


def to_ts(dt: datetime) -> float:
    if dt.tzinfo is None:
        raise ValueError(f"naive datetime {dt.isoformat()} has no time zone; pass an aware one")
    return dt.timestamp()


def from_ts(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def slot_text(at: datetime) -> str:
    """An instant as the text every face shows a slot in: ISO 8601 UTC with ``Z``, whole
    seconds (``2026-03-02T08:00:00Z``), milliseconds only when it has a fraction (a manual
    run's slot is its request's time: ``2026-03-02T08:00:12.345Z``; the store keeps no
    finer)."""
    utc = at.astimezone(UTC)
    spec = "seconds" if utc.microsecond == 0 else "milliseconds"
    return utc.isoformat(timespec=spec).replace("+00:00", "Z")


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    async def sleep_until(self, deadline: float, wake: asyncio.Event | None = None, *,
                          precise: bool = False) -> None:
        """Return at ``deadline`` or as soon as ``wake`` is set, whichever comes first.
        ``precise``: ``deadline`` is an instant handlers start at (a slot), worth a
        little CPU to be met within a fraction of a millisecond; other waits (upkeep,
        heartbeats, retry delays, jitter) may end up to a millisecond late."""
        ...


async def wait_done(fut: asyncio.Future[Any], seconds: float, step: float = 0.5) -> bool:
    """Wait until ``fut`` is done or it has waited ``seconds``; True when done.

    The wait is measured in steps: a step that wakes late (this process's own event loop
    was busy, a GC pause, the process was stopped) counts at most 1.5 steps, so a deadline
    meant for a remote party does not fire because of local lag. ``fut`` is never
    cancelled here."""
    loop = asyncio.get_running_loop()
    waited, step = 0.0, min(step, seconds)
    while True:
        started = loop.time()
        done, _ = await asyncio.wait({fut}, timeout=step)
        if done:
            return True
        waited += min(loop.time() - started, step * 1.5)
        if waited >= seconds:
            return False


async def wait_while_moving(fut: asyncio.Future[Any], progress: Callable[[], int],
                            seconds: float) -> bool:
    """Wait for ``fut`` as long as ``progress()`` moves: it is given ``seconds`` (as
    :func:`wait_done`) after each move, so a long piece of work that goes on (100,000 rows
    written in chunks at a stop) is not cut short, and one that makes no progress for
    ``seconds`` (a hung store) is. True when done; ``fut`` is never cancelled here."""
    seen = -1
    while seen != progress():
        seen = progress()
        if await wait_done(fut, seconds):
            return True
    return False


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True if it is set.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives
    while the event is being set (the waiting task then carries on as if nothing happened,
    and whoever cancelled it to stop it waits forever). ``asyncio.timeout`` never does.
    """
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


class SystemClock:
    """Real time. Sleeps are capped so a wall-clock jump (laptop sleep, NTP step) is seen
    within ``max_sleep`` seconds and treated as a stall by the catch-up logic.

    The event loop's timers fire up to a millisecond late (the selector counts in whole
    milliseconds), so a ``precise`` sleep (a slot's instant) wakes ``spin`` seconds early
    and yields to the loop until the deadline: slots start within a fraction of a
    millisecond, for up to ``spin`` of CPU per wake. Other sleeps do not spin: spinning
    on each of them (upkeep, heartbeats, early claims' lead, jitter and retry delays)
    tripled the loop's turns of a fleet member on PostgreSQL with one every-second job
    (1,201 a second instead of 395) and cost it 1.6-5 ms of CPU a second.
    """

    def __init__(self, max_sleep: float = 30.0, offset: float = 0.0, spin: float = 0.002) -> None:
        self.max_sleep = max_sleep
        self.offset = offset  # lets tests simulate a skewed host clock
        self.spin = spin

    def now(self) -> float:
        return time.time() + self.offset

    async def sleep_until(self, deadline: float, wake: asyncio.Event | None = None, *,
                          precise: bool = False) -> None:
        delay = min(max(deadline - self.now(), 0.0), self.max_sleep)
        coarse = delay - self.spin if precise else delay
        if coarse > 0:
            if wake is None:
                await asyncio.sleep(coarse)
            elif not wake.is_set():
                await wait_event(wake, coarse)
        if not precise:
            return
        limit = time.monotonic() + self.spin
        while self.now() < deadline and time.monotonic() < limit:
            if wake is not None and wake.is_set():
                return
            await asyncio.sleep(0)


def judged_by_store(clock: Clock | None) -> bool:
    """Whether a store given ``clock`` judges leases, claims and heartbeats by its own
    clock (PostgreSQL's ``now()``, Redis's ``TIME``, SQLite's host clock): the real
    clock, or none. A ``SystemClock``'s ``offset`` (a skewed host, in tests) then moves
    only the scheduler's slot times. Any other clock (a test's ``FakeClock``) is used for
    every timestamp instead."""
    return clock is None or isinstance(clock, SystemClock)


class FakeClock:
    """Manually advanced time for tests: nothing sleeps for real."""

    def __init__(self, start: float | datetime) -> None:
        self._now = to_ts(start) if isinstance(start, datetime) else float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def set(self, when: float | datetime) -> None:
        ts = to_ts(when) if isinstance(when, datetime) else float(when)
        self._now = max(self._now, ts)
        self._wake_due()

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._wake_due()

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def sleep_until(self, deadline: float, wake: asyncio.Event | None = None, *,
                          precise: bool = False) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        if wake is None:
            await fut
            return
        waiter: asyncio.Future[Any] = asyncio.ensure_future(wake.wait())
        both: set[asyncio.Future[Any]] = {fut, waiter}
        try:
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not fut.done():
                fut.cancel()
