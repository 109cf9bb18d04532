"""``max_instances`` = N in the scheduler: N runs of a job at once (lease lanes), the next
skipped naming the limit, ``replace`` cancelling only the oldest (memory, SQLite, Redis); a
store without lanes refused at start."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cronfleet import FakeClock, RunContext, RunRecord, RunStatus, Scheduler

from .conftest import STORE_KINDS

Make = Callable[..., Scheduler]


class Blocking:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[RunContext] = []
        self.cancelled: list[RunContext] = []

    async def __call__(self, ctx: RunContext) -> None:
        self.started.append(ctx)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(ctx)
            raise


async def tick(clock: FakeClock, seconds: float) -> None:
    """The next slot, then a little time for the group commit to write started rows."""
    clock.advance(seconds)
    for _ in range(5):
        await asyncio.sleep(0.02)
        clock.advance(0.1)


async def rows(s: Scheduler, job_id: str, statuses: list[str]) -> list[RunRecord]:
    """The job's rows once their statuses are ``statuses`` (sorted), within a few seconds."""
    got: list[RunRecord] = []
    for _ in range(200):
        got = await s.runs_async(job_id)
        if sorted(r.status.value for r in got) == statuses:
            return got
        await asyncio.sleep(0.02)
    raise AssertionError([(r.status.value, r.reason) for r in got])


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_two_instances_run_and_the_third_is_skipped_naming_the_limit(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Blocking()
    s.job("60s", id="long", max_instances=2)(h)
    await s.start()
    running.append(s)
    for _ in range(3):
        await tick(clock, 60)
    assert len(h.started) == 2
    runs = await rows(s, "long", ["running", "running", "skipped"])
    skip = next(r for r in runs if r.status is RunStatus.SKIPPED)
    assert skip.reason == "already_executing"
    assert skip.logs == [
        "Skipped: 2 of 2 instances running (max_instances = 2; lanes held by test-1)"
    ]
    h.release.set()
    await rows(s, "long", ["skipped", "succeeded", "succeeded"])
    await tick(clock, 60)  # both lanes free again
    await rows(s, "long", ["skipped", "succeeded", "succeeded", "succeeded"])
    assert len(h.started) == 3


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_replace_cancels_only_the_oldest_run(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Blocking()
    s.job("60s", id="long", max_instances=2, overlap="replace")(h)
    await s.start()
    running.append(s)
    await tick(clock, 60)
    await tick(clock, 60)
    assert len(h.started) == 2
    first, second = await rows(s, "long", ["running", "running"])
    await tick(clock, 60)  # both lanes held: the oldest makes way
    runs = await rows(s, "long", ["cancelled", "running", "running"])
    cancelled = next(r for r in runs if r.status is RunStatus.CANCELLED)
    assert cancelled.slot == min(first.slot, second.slot)
    assert "replaced by a newer slot" in (cancelled.error or "")
    assert len(h.started) == 3
    h.release.set()
    await rows(s, "long", ["cancelled", "succeeded", "succeeded"])


def test_a_store_without_lanes_refuses_max_instances_above_one() -> None:
    """Every built-in store has lanes (Redis included); a plugin's store may not: the
    scheduler refuses N > 1 on it when the job is added, naming the job and the store."""
    from cronfleet.store.memory import MemoryStore
    from cronfleet.store.redis import RedisStore

    class PluginStore(MemoryStore):
        lanes = False

    s = Scheduler(store=PluginStore())
    s.job("60s", id="one")(lambda ctx: None)  # the default: fine
    with pytest.raises(ValueError, match=r"job 'many': max_instances > 1 is not supported "
                                         r"on the Plugin store yet"):
        s.job("60s", id="many", max_instances=3)(lambda ctx: None)
    s.job("60s", id="local", max_instances=3, locking="node_local")(lambda ctx: None)
    r = Scheduler(store=RedisStore("redis://127.0.0.1:1/0"))
    r.job("60s", id="many", max_instances=3)(lambda ctx: None)  # Redis has lanes
