"""A node-local job starts at the process's start (#24, item 7): its runs take no claim,
so the store cannot tell which slots one process missed. Before, every process that
started replayed the job's past since its state row was created (RUN_ALL: up to 100 runs
each) and wrote its own ``missed`` rows for the same slots; now each process runs the
slots of its own lifetime, once each, and nothing of the past."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from cronfleet import FakeClock, Locking, Missed, RunStatus, Scheduler

from .conftest import STORE_KINDS, T0, advance


def declare(s: Scheduler, calls: list[tuple[str, float, bool]]) -> None:
    @s.job("* * * * *", id="cache-clean", locking=Locking.NODE_LOCAL, missed=Missed.RUN_ALL,
           catch_up_window="5m")
    def clean(ctx: Any) -> None:
        calls.append((ctx.instance_id, ctx.slot.timestamp(), ctx.is_catchup))


@pytest.mark.parametrize("store_kind", STORE_KINDS[:2])
async def test_processes_starting_later_do_not_replay_a_node_local_past(
    make: Any, clock: FakeClock, running: list
) -> None:
    calls: list[tuple[str, float, bool]] = []
    first = make(instance_id="a")
    declare(first, calls)
    await first.start()  # creates the job's state row at T0
    await advance(clock, 120, first, step=10)
    await first.stop()
    assert [(i, t) for i, t, _ in calls] == [("a", T0 + 60), ("a", T0 + 120)]
    calls.clear()

    clock.set(T0 + 30 * 60 + 1)  # both processes start 28 minutes later
    group = [make(instance_id="a"), make(instance_id="b")]
    for s in group:
        declare(s, calls)
        await s.start()
        running.append(s)
    await advance(clock, 119, *group, step=10)
    # each process ran each slot of its lifetime once, and no slot before it
    on_time = [T0 + 31 * 60, T0 + 32 * 60]
    assert Counter((i, t) for i, t, _ in calls) == Counter(
        {(i, t): 1 for i in ("a", "b") for t in on_time})
    assert not [c for c in calls if c[2]]  # no catch-up run
    runs = await group[0].runs_async("cache-clean", limit=1000)
    assert not [r for r in runs if r.status is RunStatus.SKIPPED]  # no missed rows
    later = [r for r in runs if r.slot.timestamp() > T0 + 120]
    assert Counter(r.slot.timestamp() for r in later) == Counter(
        {t: 2 for t in on_time})  # one row per process per slot
