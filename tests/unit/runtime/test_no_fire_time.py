"""A schedule with no further fire time (``NoFireTimeError``) does not stop the runtime:
the job simply gets no more slots (logged once), ``next_fire_times`` gives fewer or none."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from cronfleet import FakeClock, RunStatus, Scheduler

from .conftest import Recorder, advance

Make = Callable[..., Scheduler]

# 9999-12-30T23:59:50Z: ten seconds before the calendar's last midnight
NEAR_END = datetime(9999, 12, 30, 23, 59, 50, tzinfo=UTC).timestamp()
NO_MORE = "has no further fire time"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NEAR_END)


async def test_the_last_slots_of_the_calendar_run_then_nothing(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    s = make(claim_ahead=0)
    daily, often = Recorder(), Recorder()
    s.job("@daily", id="daily")(daily)
    s.job("*/5 * * * * *", id="often")(often)
    with caplog.at_level(logging.WARNING, logger="cronfleet"):
        await s.start()  # computing every first slot must not raise
        running.append(s)
        assert [t.isoformat() for t in s.next_fire_times("daily", 5)] == [
            "9999-12-31T00:00:00+00:00"]
        assert len(s.next_fire_times("often", 3)) == 3
        await advance(clock, 20, s)
    # the 31st's midnight ran; after it @daily has no slot, the other job goes on
    assert [c.slot.isoformat() for c in daily.calls] == ["9999-12-31T00:00:00+00:00"]
    assert len(often.calls) == 4  # :55, :00, :05, :10
    assert s.next_fire_times("daily", 5) == []
    assert s.due.next.get("daily") is None and s.loop.task is not None
    assert not s.loop.task.done()
    ended = [r for r in caplog.records if NO_MORE in r.getMessage()]
    assert len(ended) == 1 and "daily" in ended[0].getMessage()  # logged once
    runs = await s.runs_async("daily")
    assert [r.status for r in runs] == [RunStatus.SUCCEEDED]


async def test_start_with_a_schedule_that_ended(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    clock.set(datetime(9999, 12, 31, 12, tzinfo=UTC).timestamp())
    s = make(claim_ahead=0)
    rec, other = Recorder(), Recorder()
    s.job("0 9 * * *", id="morning")(rec)
    s.job("1s", id="tick")(other)
    with caplog.at_level(logging.WARNING, logger="cronfleet"):
        await s.start()
        running.append(s)
        assert s.next_fire_times("morning") == []
        await advance(clock, 3, s)
    assert rec.calls == [] and len(other.calls) == 3
    assert sum(NO_MORE in r.getMessage() for r in caplog.records) == 1


async def test_an_expression_that_can_never_fire_again(
    make: Make, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    """France only began DST in April in 1980: 02:30 on March's fifth Sunday (6 fields, so
    no fire in the gap) never exists again."""
    s = make(claim_ahead=0)
    rec = Recorder()
    s.job("0 30 2 * 3 SUN#5", id="never", timezone="Europe/Paris")(rec)
    with caplog.at_level(logging.WARNING, logger="cronfleet"):
        await s.start()
        running.append(s)
    assert s.next_fire_times("never", 3) == []
    assert any(NO_MORE in r.getMessage() for r in caplog.records)
    health = s.health()
    assert health["loop_alive"] and health["overdue"] == 0
