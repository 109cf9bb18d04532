"""A backfill covers the past only (#24, item 3): a range reaching past now is refused
with the field named (``to``) before anything runs, and the slots to come run at their
time, as scheduled runs -- never early as backfill runs. One rule
(``runtime/backfill.backfill_slots``) for the library, the API, the dashboard and the CLI."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronfleet import FakeClock
from cronfleet.clock import from_ts
from cronfleet.model import TriggeredBy

from .conftest import T0, advance


async def test_a_range_reaching_past_now_runs_nothing_and_the_slots_run_on_time(
    make: Any, clock: FakeClock, running: list
) -> None:
    s = make()
    calls: list[tuple[Any, str]] = []

    @s.job("* * * * *", id="fut")
    async def fut(ctx: Any) -> None:
        calls.append((ctx.slot, ctx.triggered_by))

    await s.start()
    running.append(s)
    now = from_ts(T0 + 30)  # half a minute after the slot of T0
    clock.set(T0 + 30)
    await advance(clock, 0, s)
    before = list(calls)
    with pytest.raises(ValueError, match="later than now") as got:  # BadRange
        await s.backfill_async("fut", now - timedelta(seconds=20), now + timedelta(seconds=60),
                               rate=None)
    assert getattr(got.value, "field", None) == "to"
    assert calls == before  # nothing ran early
    await advance(clock, 31, s)  # the next minute's slot comes: it runs at its time
    nxt = from_ts(T0 + 60)
    assert (nxt, "schedule") in calls
    runs = await s.runs_async("fut", limit=100)
    assert not [r for r in runs if r.triggered_by is TriggeredBy.BACKFILL]


def test_a_past_range_ending_now_is_accepted_and_one_in_the_future_is_not(
    make: Any, clock: FakeClock
) -> None:
    s = make()
    s.job("0 0 * * *", id="daily")(lambda ctx: None)
    now = from_ts(clock.now())
    bf = s.backfill("daily", now - timedelta(days=3), now, rate=None)
    assert bf.total == 4  # both ends included: three past midnights and now (one too)
    with pytest.raises(ValueError, match="later than now") as got:  # 273 years of a daily
        s.backfill("daily", now, now + timedelta(days=99_999), rate=None)
    assert getattr(got.value, "field", None) == "to"
