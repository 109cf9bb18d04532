"""The memory store under the real scheduler loop: runtime tests can run on it (one
process, one event loop). Several schedulers on one MemoryDatabase behave like a fleet on
one database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from cronfleet import FakeClock, RunContext, RunStatus, Scheduler
from cronfleet.store.memory import MemoryDatabase, MemoryStore

T0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


async def _advance(clock: FakeClock, seconds: float, *schedulers: Scheduler) -> None:
    for _ in range(int(seconds)):
        clock.advance(1.0)
        for _ in range(4):
            for _ in range(10):
                await asyncio.sleep(0)
            for s in schedulers:
                await s.wait_idle()


async def test_a_fleet_on_one_memory_database_fires_each_slot_once() -> None:
    clock = FakeClock(T0)
    db = MemoryDatabase()
    calls: list[tuple[str, str, float]] = []
    fleet = []
    for name in ("a", "b", "c"):
        s = Scheduler(store=MemoryStore(db, clock=clock), clock=clock, instance_id=name)
        for j in range(10):

            async def handler(ctx: RunContext, name: str = name) -> None:
                calls.append((name, ctx.job_id, ctx.slot.timestamp()))

            s.job("10s", id=f"job-{j}")(handler)
        fleet.append(s)
    try:
        for s in fleet:
            await s.start()
        await _advance(clock, 30, *fleet)
    finally:
        for s in fleet:
            await s.stop()
    expected = {(f"job-{j}", T0 + k * 10) for j in range(10) for k in range(1, 4)}
    assert sorted((j, t) for _, j, t in calls) == sorted(expected)  # each slot once
    check = MemoryStore(db)
    await check.open()
    runs = await check.list_runs(limit=100)
    assert len(runs) == len(expected)
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}
    assert {r.instance_id for r in runs} <= {"a", "b", "c"}
    last = await check.last_runs([f"job-{j}" for j in range(10)])
    assert {r.slot.timestamp() for r in last.values()} == {T0 + 30}
