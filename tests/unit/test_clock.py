"""clock.wait_event: the one way the code waits for an event with a time limit; and
SystemClock.sleep_until: only a precise sleep spins to its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

import pytest

from cronfleet.clock import wait_event

Wait = Callable[[asyncio.Event, float], Awaitable[object]]


async def _wait_for(ev: asyncio.Event, timeout: float) -> None:
    """What the code did before (catalog watcher, SystemClock.sleep_until)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ev.wait(), timeout)


async def _stopped_while_woken(wait: Wait) -> str:
    """A watcher loop is cancelled (to stop it) in the same loop turn as its event is set
    (a PostgreSQL notification arriving at stop): does the cancellation reach it?"""
    ev = asyncio.Event()

    async def watcher() -> None:
        while True:
            await wait(ev, 10)
            ev.clear()

    task = asyncio.create_task(watcher())
    for _ in range(2):
        await asyncio.sleep(0)
    ev.set()
    task.cancel()
    try:
        await asyncio.wait_for(asyncio.shield(task), 1)
    except asyncio.CancelledError:
        return "cancelled"
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return "still running"
    return "returned"


async def test_a_cancellation_while_the_event_is_set_is_never_swallowed() -> None:
    assert await _stopped_while_woken(wait_event) == "cancelled"


@pytest.mark.skipif(sys.version_info >= (3, 12),
                    reason="the asyncio.wait_for race exists on Python 3.11 only")
async def test_the_race_is_real_with_wait_for_on_311() -> None:
    # the reason wait_event exists: Catalog.stop and Scheduler.stop hung in the test suite
    assert await _stopped_while_woken(_wait_for) == "still running"


async def test_wait_event_answers_set_or_timed_out() -> None:
    ev = asyncio.Event()
    assert await wait_event(ev, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, ev.set)
    assert await wait_event(ev, 5) is True
    assert await wait_event(ev, 0) is True  # already set: no wait


@pytest.mark.parametrize("precise", [True, False])
async def test_only_a_precise_sleep_spins_to_its_deadline(
        precise: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot's instant (``precise``) is met within a fraction of a millisecond: the sleep
    wakes ``spin`` early and yields to the loop until the deadline; any other sleep just
    sleeps (spinning on every upkeep or heartbeat wait cost CPU for nothing)."""
    from cronfleet.clock import SystemClock

    real = asyncio.sleep
    yields = 0

    async def counted(delay: float, result: object = None) -> object:
        nonlocal yields
        yields += delay == 0
        return await real(delay, result)

    monkeypatch.setattr(asyncio, "sleep", counted)
    clock = SystemClock(spin=0.5)  # wide: a loaded machine's scheduling cannot skip it
    deadline = clock.now() + 0.6
    await clock.sleep_until(deadline, precise=precise)
    assert clock.now() >= deadline - 0.002  # timers round to the millisecond
    if precise:
        assert yields > 1  # it yielded to the loop through its last half second
    else:
        assert yields == 0  # it slept
