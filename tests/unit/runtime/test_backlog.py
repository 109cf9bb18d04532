"""The backlog rule (docs/concepts.md, "Late and missed after an outage"): when several
slots of a job are due at once — the store hung, the loop stalled, the fleet restarted —
only the newest can still start near its time; the older ones are late and the job's
``missed`` policy decides them, each with its ledger row, so the job is back on time at
its next slot instead of running its backlog back to back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, Missed, RunContext, RunStatus, Scheduler
from cronfleet.runtime.loop import OVERTAKEN_WHY

from .conftest import STORE_KINDS, T0, advance, hold, settle

Make = Callable[..., Scheduler]


class Calls:
    """The handler side: every run's slot and whether it was a catch-up."""

    def __init__(self) -> None:
        self.runs: list[tuple[float, bool]] = []

    async def __call__(self, ctx: RunContext) -> None:
        self.runs.append((ctx.slot.timestamp() - T0, ctx.is_catchup))

    @property
    def slots(self) -> list[float]:
        return [x for x, _ in self.runs]


async def _stall_then_return(s: Scheduler, clock: FakeClock, seconds: float) -> None:
    """The store stops answering at the next instant (the loop waits on its overrides
    read) for ``seconds`` of the clock, then answers again."""
    real = s.store.read_overrides
    gate = hold(s)
    clock.advance(1)  # the next slot comes due: the loop is stuck in the read
    for _ in range(50):
        await asyncio.sleep(0.001)
    clock.advance(seconds - 1)
    s.store.read_overrides = real  # type: ignore[method-assign]
    gate.set()
    for _ in range(3):
        await settle(s)


async def _after_stall(make: Make, clock: FakeClock, running: list, missed: Missed
                       ) -> tuple[Scheduler, Calls, dict[float, list[tuple[str, Any]]]]:
    s = make()
    calls = Calls()
    s.job("1s", id="j", missed=missed)(calls)
    await s.start()
    running.append(s)
    await advance(clock, 2, s)  # +1 and +2 on time
    await _stall_then_return(s, clock, 4)  # +3 .. +6 due together at +6
    await advance(clock, 2, s)  # +7, +8: on time again
    rows: dict[float, list[tuple[str, Any]]] = {}
    for r in await s.runs_async("j", limit=100):
        rows.setdefault(r.slot.timestamp() - T0, []).append((r.status.value, r.reason))
    return s, calls, rows


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_run_once_runs_only_the_newest_of_a_backlog(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, calls, rows = await _after_stall(make, clock, running, Missed.RUN_ONCE)
    # +3, +4, +5 were within late_after (5 s) but overtaken: they used to run back to
    # back at +6 as on-time runs, and every later slot started late behind them
    assert calls.runs == [(1, False), (2, False), (6, False), (7, False), (8, False)]
    for x in (3, 4, 5):
        assert rows[x] == [("skipped", "missed")], (x, rows[x])
    assert rows[6] == [("succeeded", None)]
    late = [r for r in await s.runs_async("j", limit=100) if r.reason == "missed"]
    assert all(OVERTAKEN_WHY in r.logs[0] for r in late), [r.logs for r in late]


async def test_skip_runs_none_of_the_late_slots(
    make: Make, clock: FakeClock, running: list
) -> None:
    _, calls, rows = await _after_stall(make, clock, running, Missed.SKIP)
    assert calls.slots == [1, 2, 6, 7, 8]
    for x in (3, 4, 5):
        assert rows[x] == [("skipped", "missed")], (x, rows[x])


async def test_run_all_runs_the_late_slots_one_after_another(
    make: Make, clock: FakeClock, running: list
) -> None:
    _, calls, rows = await _after_stall(make, clock, running, Missed.RUN_ALL)
    # every slot runs once, in order: the late ones as catch-up runs, then the on-time one
    assert calls.runs == [(1, False), (2, False), (3, True), (4, True), (5, True),
                          (6, False), (7, False), (8, False)]
    assert all(rows[x] == [("succeeded", None)] for x in range(1, 9)), rows


async def test_a_restart_within_late_after_runs_only_the_newest_slot(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A process restarting 4 s after its last slot: it used to run the 4 slots it found
    still within ``late_after`` back to back as on-time runs."""
    first = make()
    first.job("1s", id="j")(Calls())
    await first.start()
    await advance(clock, 2, first)
    await first.stop()
    clock.advance(4)  # +3 .. +6 pass while nothing runs
    second = make()
    calls = Calls()
    second.job("1s", id="j")(calls)
    await second.start()
    running.append(second)
    await settle(second)
    await advance(clock, 1, second)
    assert calls.runs == [(6, False), (7, False)]
    rows = {r.slot.timestamp() - T0: r for r in await second.runs_async("j", limit=100)}
    assert [rows[x].reason for x in (3, 4, 5)] == ["missed"] * 3
    assert rows[6].status is RunStatus.SUCCEEDED
