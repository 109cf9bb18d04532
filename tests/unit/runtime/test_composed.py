"""Composed schedules in the runtime (FakeClock, memory store): several expressions fire
once per distinct instant, a one-off fires once and is then done, an excluded instant is
neither run nor recorded as missed (also in catch-up), ``end`` stops the slots."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, Missed, RunStatus, Scheduler
from cronfleet.clock import from_ts

from .conftest import STORE_KINDS, T0, Recorder, advance, settle

Make = Callable[..., Scheduler]
MIN = 60


def _slots(rec: Recorder) -> list[float]:
    return [c.slot.timestamp() for c in rec.calls]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_two_schedules_fire_once_per_distinct_instant(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(claim_ahead=0)
    rec = Recorder()
    # every 10 minutes and every 15: :00 and :30 are shared and must run once
    s.job(["*/10 * * * *", "*/15 * * * *"], id="both")(rec)
    await s.start()
    running.append(s)
    await advance(clock, 60 * MIN, s, step=30)
    expected = sorted({T0 + m * MIN for m in range(10, 61, 10)}
                      | {T0 + m * MIN for m in range(15, 61, 15)})
    assert _slots(rec) == expected  # 10, 15, 20, 30, 40, 45, 50, 60
    runs = await s.runs_async("both")
    assert sorted(r.slot.timestamp() for r in runs) == expected
    assert all(r.status is RunStatus.SUCCEEDED for r in runs)


async def test_many_jobs_share_a_composed_expression_in_the_batch(
    make: Make, clock: FakeClock, running: list
) -> None:
    # the per-text cache of Due.after_many: same composition, same next slot; a different
    # composition with a text that shares a part must not get the other's answer
    s = make(claim_ahead=0)
    a, b, c = Recorder(), Recorder(), Recorder()
    s.job(["*/10 * * * *", "*/15 * * * *"], id="a")(a)
    s.job(["*/15 * * * *", "*/10 * * * *"], id="b")(b)  # the same composition
    s.job(["*/10 * * * *"], id="c", exclude=["20,40 * * * *"])(c)
    await s.start()
    running.append(s)
    assert s.jobs["a"].schedule.expr == s.jobs["b"].schedule.expr
    await advance(clock, 45 * MIN, s, step=30)
    assert _slots(a) == _slots(b) == [T0 + m * MIN for m in (10, 15, 20, 30, 40, 45)]
    assert _slots(c) == [T0 + m * MIN for m in (10, 30)]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_one_off_fires_once_then_is_done(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    s = make(claim_ahead=0)
    rec = Recorder()
    at = from_ts(T0 + 90).isoformat()
    s.job(at=at, id="once")(rec)
    with caplog.at_level(logging.INFO, logger="cronfleet"):
        await s.start()
        running.append(s)
        assert [t.timestamp() for t in s.next_fire_times("once", 5)] == [T0 + 90]
        await advance(clock, 300, s, step=10)
    assert _slots(rec) == [T0 + 90]
    assert s.next_fire_times("once", 5) == []
    assert s.due.next.get("once") is None
    done = [r for r in caplog.records if "is done" in r.getMessage()]
    assert len(done) == 1 and done[0].levelno == logging.INFO
    assert not any(r.levelno >= logging.WARNING and "once" in r.getMessage()
                   for r in caplog.records)
    runs = await s.runs_async("once")
    assert [(r.slot.timestamp(), r.status) for r in runs] == [(T0 + 90, RunStatus.SUCCEEDED)]
    # a restart after the instant: nothing to run, nothing recorded as missed
    await s.stop()
    running.remove(s)
    again = make(claim_ahead=0)
    rec2 = Recorder()
    again.job(at=at, id="once", missed=Missed.RUN_ALL)(rec2)
    await again.start()
    running.append(again)
    await advance(clock, 60, again)
    assert rec2.calls == []
    assert len(await again.runs_async("once")) == 1


async def test_a_one_off_missed_while_down_is_caught_up_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    first = make(claim_ahead=0)
    first.job(at=from_ts(T0 + 600).isoformat(), id="once")(Recorder())
    await first.start()
    await advance(clock, 60, first)
    await first.stop()
    clock.advance(20 * MIN)  # down across the instant
    s = make(claim_ahead=0)
    rec = Recorder()
    s.job(at=from_ts(T0 + 600).isoformat(), id="once")(rec)
    await s.start()
    running.append(s)
    await settle(s)
    assert _slots(rec) == [T0 + 600] and rec.calls[0].is_catchup
    await advance(clock, 5 * MIN, s, step=60)
    assert len(rec.calls) == 1


def _down(make: Make, clock: FakeClock, minutes: float, **job: Any) -> Any:
    async def run() -> tuple[Scheduler, Recorder]:
        first = make(claim_ahead=0)
        first.job("*/5 * * * *", id="c", **job)(Recorder())
        await first.start()
        await advance(clock, 300, first, step=300)  # T0+5m runs
        await first.stop()
        clock.advance(minutes * 60)
        second = make(claim_ahead=0)
        rec = Recorder()
        second.job("*/5 * * * *", id="c", **job)(rec)
        await second.start()
        await settle(second)
        return second, rec
    return run()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_catch_up_neither_runs_nor_records_an_excluded_instant(
    make: Make, clock: FakeClock, running: list
) -> None:
    # down from T0+5m to T0+27m; slots 10, 15, 20, 25; 15 and 25 excluded by a cron
    s, rec = await _down(make, clock, 22, missed=Missed.SKIP,
                         exclude=["15,25 * * * *"])
    running.append(s)
    assert rec.calls == []
    runs = await s.runs_async("c")
    missed = sorted(r.slot.timestamp() for r in runs if r.reason == "missed")
    assert missed == [T0 + 10 * MIN, T0 + 20 * MIN]
    assert not [r for r in runs if r.slot is not None
                and r.slot.timestamp() in (T0 + 15 * MIN, T0 + 25 * MIN)]


async def test_catch_up_run_once_takes_the_newest_slot_not_excluded(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await _down(make, clock, 22, exclude=["25 * * * *"])
    running.append(s)
    assert _slots(rec) == [T0 + 20 * MIN] and rec.calls[0].is_catchup
    missed = sorted(r.slot.timestamp() for r in await s.runs_async("c")
                    if r.reason == "missed")
    assert missed == [T0 + 10 * MIN, T0 + 15 * MIN]


async def test_an_excluded_day_is_skipped_on_time_too(
    make: Make, clock: FakeClock, running: list
) -> None:
    # T0 is Monday 2026-03-02 00:00 UTC: exclude that whole day, run again on the 3rd
    s = make(claim_ahead=0)
    rec = Recorder()
    s.job("0 */6 * * *", id="six", exclude=["2026-03-02"])(rec)
    await s.start()
    running.append(s)
    await advance(clock, 30 * 3600, s, step=1800)
    assert _slots(rec) == [T0 + 24 * 3600, T0 + 30 * 3600]
    assert all(r.reason != "missed" for r in await s.runs_async("six"))


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_end_stops_the_slots_and_catch_up_honours_the_bounds(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(claim_ahead=0)
    rec = Recorder()
    s.job("*/5 * * * *", id="b", start=from_ts(T0 + 10 * MIN).isoformat(),
          end=from_ts(T0 + 20 * MIN).isoformat(), missed=Missed.RUN_ALL)(rec)
    await s.start()
    running.append(s)
    await advance(clock, 40 * MIN, s, step=60)
    assert _slots(rec) == [T0 + m * MIN for m in (10, 15, 20)]  # both bounds inclusive
    assert s.next_fire_times("b") == []
    # a restart much later: no slot after the end is run or recorded as missed
    await s.stop()
    running.remove(s)
    clock.advance(3600)
    again = make(claim_ahead=0)
    rec2 = Recorder()
    again.job("*/5 * * * *", id="b", start=from_ts(T0 + 10 * MIN).isoformat(),
              end=from_ts(T0 + 20 * MIN).isoformat(), missed=Missed.RUN_ALL)(rec2)
    await again.start()
    running.append(again)
    await advance(clock, 60, again)
    assert rec2.calls == []
    runs = await again.runs_async("b")
    assert sorted(r.slot.timestamp() for r in runs) == [T0 + m * MIN for m in (10, 15, 20)]


async def test_catch_up_does_not_reach_before_start(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await _down(make, clock, 22, missed=Missed.RUN_ALL,
                         start=from_ts(T0 + 17 * MIN).isoformat())
    running.append(s)
    # slots 10 and 15 are before the start: neither run nor missed
    assert _slots(rec) == [T0 + 20 * MIN, T0 + 25 * MIN]
    assert not [r for r in await s.runs_async("c") if r.reason == "missed"]
