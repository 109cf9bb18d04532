"""The heartbeat thread and its handoff to the loop (runtime/heartbeat.py, Fleet.record):
what a beat found reaches the loop's state in one step (never a fresh ``last_ok`` with the
epoch of before a loss), the loop's lag is the age of the one outstanding probe, a loop
blocked for a while keeps beating and a wedged one stops (#26)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.runtime.fleet import Fleet
from cronfleet.runtime.heartbeat import BeatThread, LoopProbe
from cronfleet.store.base import Heartbeat, InstanceStore, Store

Make = Callable[..., Scheduler]
TTL = 3.0


def in_thread(fn: Callable[[], object]) -> None:
    """Run ``fn`` on another thread, as the heartbeat thread would, and wait for it."""
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def beaten(fleet: Fleet, asked: float, *, lost: bool = False) -> Callable[[], None]:
    me = fleet.me.instance_id
    return lambda: fleet.record(asked, Heartbeat(asked, lost=lost, lost_by="other" if lost
                                                 else None, live=("other", me)))


async def started(make: Make, running: list[Scheduler]) -> Scheduler:
    s = make(instance_id="me", instance_ttl=TTL)
    await s.start()
    running.append(s)
    return s


def count_beats(s: Scheduler, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The loop's own heartbeats from now on (on the scheduler's store)."""
    store = s.store
    assert isinstance(store, InstanceStore)
    calls: list[float] = []
    real = store.heartbeat

    async def heartbeat(*args: object, **kw: float) -> Heartbeat:
        calls.append(s.clock.now())
        return await real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "heartbeat", heartbeat)
    return calls


async def test_a_loss_reported_by_the_thread_fences_the_claims_of_before(
    make: Make, clock: FakeClock, running: list[Scheduler], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = await started(make, running)
    fleet = s.fleet
    claimed_in = fleet.epoch
    clock.advance(TTL)  # the loop's last confirmation is old: it would beat itself
    caplog.set_level(logging.WARNING, logger="cronfleet")
    loop_beats = count_beats(s, monkeypatch)
    # the thread's beat found this instance declared lost: last_ok is fresh...
    in_thread(beaten(fleet, clock.now(), lost=True))
    assert fleet.last_ok == clock.now() and fleet.epoch == claimed_in + 1
    assert "was declared lost by other" in caplog.text
    # ...and comes with the new epoch: the claims of before are not ours, and the loop
    # did not need a beat of its own to know it
    assert not await fleet.confirm(clock.now(), claimed_in)
    assert await fleet.confirm(clock.now(), claimed_in + 1)
    assert loop_beats == []
    assert fleet.live == ("other", "me")


async def test_a_suspect_loop_still_beats_itself_to_confirm(
    make: Make, clock: FakeClock, running: list[Scheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = await started(make, running)
    loop_beats = count_beats(s, monkeypatch)
    clock.advance(TTL / 2 + 0.1)  # no beat from the thread meanwhile (a starved process)
    assert await s.fleet.confirm(clock.now(), s.fleet.epoch)
    assert loop_beats == [clock.now()]


async def test_beats_answered_out_of_order_keep_the_newest(
    make: Make, clock: FakeClock, running: list[Scheduler]
) -> None:
    s = await started(make, running)
    fleet, t = s.fleet, clock.now()
    in_thread(beaten(fleet, t + 1.0))
    fleet.record(t + 0.5, Heartbeat(t + 0.5, live=("me",)))  # the loop's, asked earlier
    assert fleet.last_ok == t + 1.0


async def test_a_failed_beat_makes_the_next_one_start_a_new_steady_period(
    make: Make, clock: FakeClock, running: list[Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    s = await started(make, running)
    fleet, t = s.fleet, clock.now()
    for i in range(1, 20):  # the thread beats every interval: steady
        in_thread(beaten(fleet, t + i * fleet.interval))
    assert fleet.steady()
    errors = s.stats.store_errors
    in_thread(lambda: fleet.record_failure(t + 20 * fleet.interval, TimeoutError()))
    assert fleet.failed and s.stats.store_errors == errors + 1
    assert "instance me: heartbeat failed (TimeoutError)" in caplog.text
    back = t + 21 * fleet.interval
    in_thread(beaten(fleet, back))
    assert not fleet.failed and fleet.steady_since == back and not fleet.steady()
    in_thread(beaten(fleet, back + fleet.steady_for + 0.01))
    assert fleet.steady()


async def test_the_probe_is_one_callback_at_a_time_and_its_age_is_the_lag() -> None:
    now = [100.0]
    answered: list[float] = []
    loop = asyncio.get_running_loop()
    probe = LoopProbe(loop, lambda: answered.append(now[0]), monotonic=lambda: now[0])
    assert probe.lag() == 0.0
    in_thread(probe.post)
    now[0] += 2.5  # the loop runs nothing meanwhile
    in_thread(probe.post)  # still outstanding: not sent again
    assert probe.lag() == 2.5
    await asyncio.sleep(0)
    assert answered == [102.5] and probe.lag() == 0.0
    await asyncio.sleep(0)
    assert answered == [102.5]  # one callback, not two


async def test_a_lagging_loop_beats_and_says_so_a_wedged_one_stops_beating(
    make: Make, running: list[Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    s = await started(make, running)
    fleet = s.fleet
    assert (fleet.lag_warn, fleet.wedged_after) == (TTL, 15.0)  # max(10 s, 5 x ttl)
    now = [0.0]
    probe = LoopProbe(asyncio.get_running_loop(), lambda: None, monotonic=lambda: now[0])
    thread = BeatThread(fleet, lambda: s.store, probe)  # not started: its rule alone
    caplog.set_level(logging.WARNING, logger="cronfleet")
    caplog.clear()  # the start's lines
    assert thread.may_beat() and not caplog.text
    probe.post()
    now[0] = TTL + 0.5
    assert thread.may_beat()
    assert "the event loop is 3.5 s late" in caplog.text
    now[0] = 15.5
    assert not thread.may_beat() and not thread.may_beat()
    assert caplog.text.count("heartbeats stop so that the fleet declares this process") == 1
    await asyncio.sleep(0)  # the loop answers
    assert thread.may_beat()
    assert "the event loop runs again; heartbeats resume" in caplog.text


async def test_the_thread_beats_while_the_loop_is_blocked_and_stops_when_wedged(
    tmp_path: Path, running: list[Scheduler], caplog: pytest.LogCaptureFixture
) -> None:
    """Real time, a real SQLite file: the heartbeat thread has its own connection."""
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", instance_id="me",
                  instance_ttl=0.5)
    await s.start()
    running.append(s)
    fleet = s.fleet
    await asyncio.sleep(0.3)
    assert "cronfleet-heartbeat-me" in {t.name for t in threading.enumerate()}
    caplog.set_level(logging.WARNING, logger="cronfleet")

    def block(seconds: float) -> list[float]:
        """Hold the event loop (a sync handler on it); the thread's confirmations."""
        seen: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)
            last = fleet.last_ok
            if last is not None and (not seen or last != seen[-1]):
                seen.append(last)
        return seen

    seen = block(1.5)  # three ttls: the loop's own heartbeats would have stopped
    assert len(seen) >= 5, seen  # every 0.1 s (on a loaded machine, a few fewer)
    assert time.time() - seen[-1] < 0.5  # within the ttl: live for the others
    assert "the event loop is" in caplog.text  # lagging past the ttl: said
    await asyncio.sleep(0.3)
    fleet.wedged_after = 0.6
    blocked_at = time.time()
    seen = block(2.0)
    # no beat once the loop ran nothing for 0.6 s (its probe is an interval old at most)
    assert seen and seen[-1] < blocked_at + 1.2, (blocked_at, seen)
    assert time.time() - seen[-1] > 0.5  # past the ttl: the others declare it lost
    assert "the event loop has run nothing for" in caplog.text
    await asyncio.sleep(0.5)  # the loop answers: the beats resume
    assert time.time() - (fleet.last_ok or 0.0) < 0.5
    assert "heartbeats resume" in caplog.text


async def test_if_the_thread_dies_the_loop_beats(
    tmp_path: Path, running: list[Scheduler], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(self: BeatThread) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(BeatThread, "_main", broken)
    caplog.set_level(logging.WARNING, logger="cronfleet")
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", instance_id="me",
                  instance_ttl=0.5)
    await s.start()
    running.append(s)
    await asyncio.sleep(1.5)
    assert "the heartbeat thread failed" in caplog.text
    assert "the heartbeat thread ended; heartbeats go on from the event loop" in caplog.text
    assert time.time() - (s.fleet.last_ok or 0.0) < 0.5  # the loop's own beats


async def test_a_thread_that_cannot_open_its_store_counts_failed_beats_and_retries(
    tmp_path: Path, running: list[Scheduler], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cronfleet.errors import StoreUnavailable
    from cronfleet.store import open_store

    url = f"sqlite:///{tmp_path / 'cf.db'}"
    opened: list[bool] = []

    def opener() -> Store:
        store = open_store(url)
        if not opened:  # the first connection cannot be made
            async def refused() -> None:
                raise StoreUnavailable("simulated: connection refused")

            store.open = refused  # type: ignore[method-assign]
        opened.append(True)
        return store

    monkeypatch.setattr(Scheduler, "_beat_store_opener", lambda self: opener)
    caplog.set_level(logging.WARNING, logger="cronfleet")
    s = Scheduler(store=url, instance_id="me", instance_ttl=0.5)
    await s.start()
    running.append(s)
    await asyncio.sleep(1.0)
    assert "instance me: heartbeat failed (simulated: connection refused)" in caplog.text
    assert s.stats.store_errors >= 1 and len(opened) == 2  # opened again, once
    assert time.time() - (s.fleet.last_ok or 0.0) < 0.5 and not s.fleet.failed


async def test_the_thread_beats_while_a_start_plans_and_stops_with_a_start_that_failed(
    tmp_path: Path, running: list[Scheduler]
) -> None:
    """The first beat registers the instance before its share is planned: from then on
    the thread beats, so a long planning (here the state read takes 4 ttls) is not a
    silent row that peers would declare lost; a start that fails then stops the thread
    and removes the row."""
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    s = Scheduler(store=url, instance_id="slow", instance_ttl=0.5)
    s.job("1s", id="a")(print)
    real = s.store.ensure_jobs
    seen: list[float | None] = []

    async def slow(job_ids: object) -> object:
        for _ in range(8):  # 2 s: 4 ttls
            await asyncio.sleep(0.25)
            seen.append(s.fleet.last_ok)
        return await real(job_ids)  # type: ignore[arg-type]

    s.store.ensure_jobs = slow  # type: ignore[method-assign]
    await s.start()
    running.append(s)
    assert len({t for t in seen if t is not None}) >= 4  # confirmed all along
    rows = await s.store.list_instances(ttl=0.5)
    assert [(i.instance_id, i.live) for i in rows] == [("slow", True)]

    f = Scheduler(store=url, instance_id="failing", instance_ttl=0.5)
    f.job("1s", id="a")(print)

    async def broken(job_ids: object) -> object:
        await asyncio.sleep(0.3)
        raise RuntimeError("the store broke")

    f.store.ensure_jobs = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the store broke"):
        await f.start()
    assert "cronfleet-heartbeat-failing" not in {t.name for t in threading.enumerate()}
    rows = await s.store.list_instances(ttl=60)
    assert "failing" not in {i.instance_id for i in rows}


async def test_a_stop_right_after_start_stops_the_thread_started_at_start(
    tmp_path: Path,
) -> None:
    """The thread starts with the first beat of ``start()``; the task that runs it is
    cancelled by a stop before its first step (no ``finally`` of its own runs then): the
    stop still ends the thread, and no beat re-registers the row it removed."""
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    s = Scheduler(store=url, instance_id="brief", instance_ttl=0.5)
    s.job("1s", id="a")(print)
    await s.start()
    for task in list(s.life.tasks):  # not run yet: the stop would cancel it so
        if task.get_coro().__qualname__ == "Fleet.heartbeat_loop":  # type: ignore[union-attr]
            task.cancel()
    await s.stop()
    await asyncio.sleep(0.5)  # five intervals: a thread left running beats meanwhile
    assert "cronfleet-heartbeat-brief" not in {t.name for t in threading.enumerate()}
    assert await _instance_rows(url) == []


async def test_a_start_that_fails_dividing_stops_the_thread_and_removes_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread starts right after the first beat; the division of the jobs that
    follows can fail too (it reads the state of jobs that become this instance's): the
    start then stops the thread and removes the row, as for a failure in the planning."""
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    f = Scheduler(store=url, instance_id="failing", instance_ttl=0.5)
    f.job("1s", id="a")(print)

    async def broken(self: object, view: object = None) -> None:
        await asyncio.sleep(0.3)
        raise RuntimeError("the store broke while dividing")

    monkeypatch.setattr(Fleet, "divide", broken)  # the parts are built by start()
    with pytest.raises(RuntimeError, match="while dividing"):
        await f.start()
    assert "cronfleet-heartbeat-failing" not in {t.name for t in threading.enumerate()}
    assert await _instance_rows(url) == []


async def _instance_rows(url: str) -> list[object]:
    """The live instance rows of the store at ``url``, read by a probe of its own."""
    probe = Scheduler(store=url, instance_id="probe")
    await probe.store.open()
    try:
        return list(await probe.store.list_instances(ttl=60))
    finally:
        await probe.store.close()
