"""Graceful overload (#26 item 5, docs/concepts.md "Overload"): when more slots come due
than the process can start on time, it starts what it can on time and records the rest
``skipped / overloaded`` at once -- never silently, never a backlog that grows -- and is
back on time within 2 s of the load dropping; a stop in the middle leaves no due slot
without a row.

The overload is made with the test clock: until ``Costly.until``, every slot a store
call claims to run moves the clock on by ``Costly.per_slot`` (a store or a host too slow
for the load; a slot only recorded costs a tenth of that), so the loop's own work makes
time pass; after it, each slot costs ``Costly.low``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, RunContext, RunStatus, Scheduler
from cronfleet.store.base import DispatchKind

from .conftest import STORE_KINDS, T0, advance

Make = Callable[..., Scheduler]

JOBS = 40  # every second
BATCH = 2  # slots per store call: the loop looks at the clock between two


class Costly:
    """Each ``dispatch`` advances the clock by what its slots cost; ``at_until`` is called
    once when the clock passes ``until``."""

    def __init__(self, s: Scheduler, clock: FakeClock, per_slot: float, until: float) -> None:
        self.per_slot = per_slot
        self.low = 0.001
        self.until = until
        self.at_until: Callable[[], Any] | None = None
        real = s.store.dispatch

        async def dispatch(items: Any, instance_id: str) -> Any:
            runs = sum(1 for it in items if it.kind is not DispatchKind.MISSED)
            cost = self.per_slot if clock.now() < self.until else self.low
            clock.advance(cost * (runs + (len(items) - runs) / 10))
            if self.at_until is not None and clock.now() >= self.until:
                self.at_until()
                self.at_until = None
            return await real(items, instance_id)

        s.store.dispatch = dispatch  # type: ignore[method-assign]


class Started:
    """The handler side: (job, slot, lateness) of every call."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float, float]] = []

    async def __call__(self, ctx: RunContext) -> None:
        slot = ctx.slot.timestamp()
        self.calls.append((ctx.job_id, slot, self.clock.now() - slot))


async def _overloaded(make: Make, clock: FakeClock, per_slot: float, until: float
                      ) -> tuple[Scheduler, Costly, Started]:
    s = make(batch_size=BATCH, claim_ahead=0)
    started = Started(clock)
    for i in range(JOBS):
        s.job("1s", id=f"j{i:02d}")(started)
    await s.start()
    return s, Costly(s, clock, per_slot, until), started


async def _rows(make: Make, s: Scheduler) -> dict[tuple[str, float], list[Any]]:
    """Every row of ``s``'s jobs, read through a store of its own (``s`` stopped)."""
    store = make(instance_id="reader").store
    await store.open()
    rows: dict[tuple[str, float], list[Any]] = {}
    try:
        for job_id in s.jobs:
            for r in await store.list_runs(job_id, limit=1000):
                rows.setdefault((job_id, r.slot.timestamp()), []).append(r)
    finally:
        await store.close()
    return rows


def _check_every_slot(rows: dict[tuple[str, float], list[Any]], until: float) -> None:
    """Every slot of every job in (T0, until] has exactly one final row."""
    for i in range(JOBS):
        job_id = f"j{i:02d}"
        for k in range(1, int(until - T0) + 1):
            got = rows.get((job_id, T0 + k), [])
            assert len(got) == 1, (job_id, k, [(r.status, r.reason) for r in got])
            assert got[0].status not in (RunStatus.RUNNING, RunStatus.PENDING), (job_id, k)


@pytest.mark.parametrize("store_kind", [*STORE_KINDS, "postgres"])
async def test_overload_sheds_what_cannot_start_on_time_and_recovers(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    # 40 slots a second at 40 ms each: 1.6 s of work per second; then 40 ms a second
    overload_end = T0 + 20
    s, _, started = await _overloaded(make, clock, 0.04, overload_end)
    running.append(s)
    while clock.now() < overload_end:  # the loop's work moves the clock too
        await advance(clock, 0.25, s)
    await advance(clock, 6, s, step=0.05)
    end = clock.now()
    await s.stop()
    rows = await _rows(make, s)
    _check_every_slot(rows, end)
    reasons = [r.reason for got in rows.values() for r in got if r.status is RunStatus.SKIPPED]
    assert reasons and set(reasons) == {"overloaded"}, set(reasons)
    assert s.stats.skips["overloaded"] == len(reasons)
    from cronfleet.metrics import render

    assert f'cronfleet_skips_total{{reason="overloaded"}} {len(reasons)}.0'.encode() in render(s)
    # one warning line: rate-limited (10 s of real time), however many instants shed
    warned = [r for r in caplog.records if "overloaded:" in r.getMessage()]
    assert len(warned) == 1 and "recorded skipped / overloaded" in warned[0].getMessage()
    shed = [r for got in rows.values() for r in got if r.reason == "overloaded"]
    assert all("(overloaded)" in r.logs[0] for r in shed), shed[0].logs
    # what it started during the overload, it started before the job's next slot
    fired = [late for _, slot, late in started.calls if slot <= overload_end]
    assert len(fired) > JOBS * 20 // 3, len(fired)
    assert max(fired) < 1.0, max(fired)
    # back on time 2 s after the load dropped: every slot runs, at its time
    after = [(job, slot, late) for job, slot, late in started.calls if slot > overload_end + 2]
    assert len(after) == JOBS * int(end - overload_end - 2), len(after)
    assert max(late for _, _, late in after) < 0.1


@pytest.mark.parametrize("store_kind", [*STORE_KINDS, "postgres"])
async def test_a_stop_during_overload_leaves_no_due_slot_without_a_row(
    make: Make, clock: FakeClock
) -> None:
    s, costly, _ = await _overloaded(make, clock, 0.04, T0 + 5.5)
    stopping: list[Any] = []
    costly.at_until = lambda: stopping.append(asyncio.ensure_future(s.stop()))
    while not stopping:  # the loop, busy, takes the clock to +5.5 and is stopped there
        await advance(clock, 0.25, s)
    await asyncio.gather(*stopping)
    assert not s.running
    stopped_at = clock.now()
    rows = await _rows(make, s)
    _check_every_slot(rows, stopped_at)
    assert all(r.reason in (None, "overloaded") for got in rows.values() for r in got)


async def test_an_idle_process_sheds_nothing(make: Make, clock: FakeClock, running: list
                                             ) -> None:
    """Under its capacity nothing is shed and every slot runs at its time."""
    s, _, started = await _overloaded(make, clock, 0.005, T0 + 60)  # 0.2 s of work a second
    running.append(s)
    await advance(clock, 10, s, step=0.25)
    assert "overloaded" not in s.stats.skips
    calls = [late for _, slot, late in started.calls if slot <= T0 + 10]
    assert len(calls) == JOBS * 10
    assert max(calls) < 0.5  # the test advances the clock in 0.25 s steps


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_claim_answered_after_the_next_slot_is_recorded_not_started(
    make: Make, clock: FakeClock, running: list
) -> None:
    """The store took 1.5 s to claim slot +2 of an every-second job: its run would start
    after slot +3 was due. It is recorded ``skipped / overloaded`` under its claim (its
    lease released), and the job runs again on time."""
    s = make(claim_ahead=0)
    started = Started(clock)
    s.job("1s", id="j")(started)
    await s.start()
    running.append(s)
    real = s.store.dispatch
    slow = [T0 + 2]

    async def dispatch(items: Any, instance_id: str) -> Any:
        if slow and any(it.slot == slow[0] for it in items):
            slow.clear()
            clock.advance(1.5)
        return await real(items, instance_id)

    s.store.dispatch = dispatch  # type: ignore[method-assign]
    await advance(clock, 6, s, step=0.25)
    rows: dict[float, list[tuple[str, Any]]] = {}
    for r in await s.runs_async("j", limit=100):
        rows.setdefault(r.slot.timestamp() - T0, []).append((r.status.value, r.reason))
    assert rows[2] == [("skipped", "overloaded")], rows
    assert all(len(rows[x]) == 1 for x in range(1, 7)), rows
    assert rows[6] == [("succeeded", None)], rows
    assert T0 + 2 not in [slot for _, slot, _ in started.calls]
    assert s.stats.skips["overloaded"] >= 1


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_process_without_timers_records_nothing_at_stop(
    make: Make, clock: FakeClock, running: list
) -> None:
    """An API replica (``timers=False``) declares the jobs but plans none: at its stop the
    slots due meanwhile are the timer processes' (a paused job's slots have claim-less
    rows: a claim from the replica would have added a second row to each)."""
    s = make(instance_id="api", timers=False)
    started = Started(clock)
    s.job("1s", id="j00")(started)
    await s.start()
    await advance(clock, 5, s, step=0.25)
    await s.stop()
    assert started.calls == []
    assert await _rows(make, s) == {}


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_an_instant_that_sheds_gives_the_event_loop_a_turn_every_batch(
    make: Make, clock: FakeClock, running: list
) -> None:
    """An instant that mostly sheds hands few chunks to the store, and the loop's other
    tasks (the transactions in flight, which hold their job rows' locks until their next
    statement or COMMIT is sent) must still get a turn every ``batch_size`` slots: on
    PostgreSQL, an instant that shed thousands of slots in one stretch held the lease
    statements of the others for a second and more (bench/results/
    2026-12-03-skip-claims.md)."""
    s, _, _ = await _overloaded(make, clock, 0.04, T0 + 10)
    running.append(s)
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    seen: dict[float | None, list[int]] = {}  # instant -> the ticker's count at each shed
    real = s.loop.shed

    def shed(*args: Any) -> None:
        seen.setdefault(s.loop.fired_at, []).append(turns)
        real(*args)

    s.loop.shed = shed  # type: ignore[method-assign]
    tick = asyncio.create_task(ticker())
    try:
        while clock.now() < T0 + 10:
            await advance(clock, 0.25, s)
    finally:
        tick.cancel()
    busiest = max(seen.values(), key=len)
    assert len(busiest) >= 4 * BATCH, len(busiest)  # the overload did shed
    # the ticker ran between the sheds of one instant: at least once per batch of slots
    # planned (a stretch of sheds without a turn is at most a batch long)
    stretches = [b - a for a, b in itertools.pairwise(busiest)]
    assert sum(1 for d in stretches if d > 0) >= len(busiest) // BATCH - 1, busiest


@pytest.mark.parametrize("store_kind", [*STORE_KINDS, "postgres"])
async def test_a_job_removed_during_overload_leaves_no_due_slot_without_a_row(
    make: Make, clock: FakeClock
) -> None:
    """Jobs removed while the loop is behind their due slots: those slots (due, not yet
    decided) get their rows at the removal, and none after it (the overload benchmark
    found a second of 6,000 removed jobs with no row at all)."""
    s, costly, _ = await _overloaded(make, clock, 0.04, T0 + 5.5)
    removed = [f"j{i:02d}" for i in range(0, JOBS, 2)]
    at: list[float] = []

    def remove() -> None:
        at.append(clock.now())
        for job_id in removed:
            s.remove_job(job_id)

    costly.at_until = remove
    while not at:  # the loop, busy, takes the clock to +5.5; the jobs go mid-instant
        await advance(clock, 0.25, s)
    await advance(clock, 3, s, step=0.25)
    end = clock.now()
    await s.stop()
    for job_id in removed:
        got = await _rows_of(make, job_id)
        for k in range(1, int(at[0] - T0) + 1):  # every slot due before the removal
            rows = got.get(T0 + k, [])
            assert len(rows) == 1, (job_id, k, [(r.status, r.reason) for r in rows])
            assert rows[0].status not in (RunStatus.RUNNING, RunStatus.PENDING)
        assert not [t for t in got if t > at[0]], (job_id, sorted(got))
    # the jobs kept ran on after the removal
    rows = await _rows(make, s)
    assert rows.get(("j01", float(int(end))), []) or rows.get(("j01", float(int(end) - 1)), [])


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_job_removed_with_due_slots_the_loop_has_not_reached_records_them(
    make: Make, clock: FakeClock, running: list
) -> None:
    """The clock moves 3 s on before the loop gets a turn (a stalled loop) and the job is
    removed then: its three due slots, never fired, are recorded ``missed`` at the
    removal; nothing after it."""
    s = make(claim_ahead=0)
    started = Started(clock)
    s.job("1s", id="gone")(started)
    s.job("1s", id="kept")(started)
    await s.start()
    running.append(s)
    await advance(clock, 2.5, s, step=0.25)
    clock.advance(3)  # T0 + 5.5: slots +3, +4, +5 due, the loop has not run since +2.5
    s.remove_job("gone")
    await advance(clock, 2, s, step=0.25)
    await s.stop()
    rows = await _rows_of(make, "gone")
    assert sorted(rows) == [T0 + k for k in range(1, 6)], sorted(rows)
    assert all(len(v) == 1 for v in rows.values())
    assert [(rows[T0 + k][0].status, rows[T0 + k][0].reason) for k in (3, 4, 5)] == [
        (RunStatus.SKIPPED, "missed")] * 3
    assert "was due when its job was removed" in rows[T0 + 3][0].logs[0]
    assert [slot for job, slot, _ in started.calls if job == "gone"] == [T0 + 1, T0 + 2]


async def _rows_of(make: Make, job_id: str) -> dict[float, list[Any]]:
    store = make(instance_id="reader").store
    await store.open()
    try:
        got: dict[float, list[Any]] = {}
        for r in await store.list_runs(job_id, limit=1000):
            got.setdefault(r.slot.timestamp(), []).append(r)
        return got
    finally:
        await store.close()


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_removed_jobs_due_slots_are_written_past_the_unsaved_skips_bound(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slots recorded at a removal do not go through the bounded buffer of skips the
    store refused (``MAX_BUFFERED``, 10,000): removing thousands of jobs of a process
    behind its slots hands in more than that at once, and none may be dropped."""
    from cronfleet.runtime import writer

    monkeypatch.setattr(writer, "MAX_BUFFERED", 4)
    s = make(claim_ahead=0)
    started = Started(clock)
    gone = [f"g{i}" for i in range(10)]
    for job_id in [*gone, "kept"]:
        s.job("1s", id=job_id)(started)
    await s.start()
    running.append(s)
    await advance(clock, 2.5, s, step=0.25)
    clock.advance(3)  # slots +3, +4, +5 of every job due, the loop has not run since +2.5
    for job_id in gone:
        s.remove_job(job_id)
    await advance(clock, 2, s, step=0.25)
    await s.stop()
    for job_id in gone:  # 30 skips handed in at once, 4 the bound
        rows = await _rows_of(make, job_id)
        assert sorted(rows) == [T0 + k for k in range(1, 6)], (job_id, sorted(rows))


async def _stopped_loop_with_due_slots(make: Make, clock: FakeClock) -> Scheduler:
    """10 every-second jobs, the loop ended (as at a stop) and 3 s gone by: 30 slots due
    that the loop did not reach, 2 to a store call."""
    s = make(batch_size=2, claim_ahead=0)
    for i in range(10):
        s.job("1s", id=f"j{i}")(Started(clock))
    await s.start()
    s.life.stopping = True
    s.wake()
    assert s.loop.task is not None
    await asyncio.gather(s.loop.task)
    clock.advance(3)
    return s


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_the_stop_records_the_due_slots_as_long_as_the_store_takes_them(
    make: Make, clock: FakeClock
) -> None:
    """At a stop, the due slots the loop did not reach are recorded in chunks; the budget
    (here 0.2 s) is for a store that takes nothing, not for the whole: 15 chunks of 0.05 s
    each are all written (a stop during a heavy overload has tens of thousands)."""
    s = await _stopped_loop_with_due_slots(make, clock)
    real = s.store.dispatch
    chunks: list[int] = []

    async def slow(items: Any, instance_id: str) -> Any:
        chunks.append(len(items))
        await asyncio.sleep(0.05)
        return await real(items, instance_id)

    s.store.dispatch = slow  # type: ignore[method-assign]
    assert await s.loop.record_unrun(0.2) == 0
    assert chunks == [2] * 15
    s.store.dispatch = real  # type: ignore[method-assign]
    await s.stop()
    rows = await _rows(make, s)
    assert sorted(rows) == sorted((f"j{i}", T0 + k) for i in range(10) for k in (1, 2, 3))
    assert all(len(got) == 1 and got[0].reason == "missed" for got in rows.values())


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_the_stop_leaves_the_due_slots_to_the_fleet_when_the_store_takes_nothing(
    make: Make, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that takes 2 chunks, then hangs: the stop gives up after its budget with no
    progress and says how many due slots it leaves (the next owner's catch-up)."""
    s = await _stopped_loop_with_due_slots(make, clock)
    real = s.store.dispatch
    hang = asyncio.Event()

    async def hangs(items: Any, instance_id: str) -> Any:
        if len(real_calls) == 2:
            await hang.wait()
        real_calls.append(1)
        return await real(items, instance_id)

    real_calls: list[int] = []
    s.store.dispatch = hangs  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await s.loop.record_unrun(0.2) == 26
    assert loop.time() - began < 1.5
    said = [r.getMessage() for r in caplog.records if "not recorded at stop" in r.getMessage()]
    assert said and "26 due slot(s)" in said[0] and "took none of them for 0.2 s" in said[0]
    s.store.dispatch = real  # type: ignore[method-assign]
    await s.stop()
