"""Catch-up planning and jitter: pure functions, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime

from cronfleet.cron import parse
from cronfleet.model import Missed
from cronfleet.runtime.planning import RECORD_CAP, RUN_ALL_CAP, jitter_delay, plan_slots

T = datetime(2026, 7, 29, 6, 0, tzinfo=UTC).timestamp()
EVERY5 = parse("*/5 * * * *")


def test_on_time_slot_runs_normally() -> None:
    p = plan_slots(EVERY5, T - 300, T + 1, missed=Missed.SKIP, window=3600, late_after=5)
    assert p.run == [(T, False)] and p.missed == [] and p.overflow is None


def test_run_once_runs_only_the_newest_missed() -> None:
    p = plan_slots(EVERY5, T, T + 1200 + 612, missed=Missed.RUN_ONCE, window=3600, late_after=5)
    assert p.run == [(T + 1800, True)]
    assert p.missed == [T + 300, T + 600, T + 900, T + 1200, T + 1500]


def test_run_once_does_not_add_a_catch_up_to_an_on_time_slot() -> None:
    p = plan_slots(EVERY5, T, T + 900 + 2, missed=Missed.RUN_ONCE, window=3600, late_after=5)
    assert p.run == [(T + 900, False)]
    assert p.missed == [T + 300, T + 600]


def test_run_all_is_ordered_and_capped() -> None:
    every_s = parse("1s")
    now = T + 500
    p = plan_slots(every_s, T, now, missed=Missed.RUN_ALL, window=3600, late_after=5)
    late = [s for s, c in p.run if c]
    assert len(late) == RUN_ALL_CAP and late == sorted(late)
    # the most recent late slots are the ones kept; only the newest slot is on time
    # (the backlog rule: the others within late_after were overtaken by it)
    assert late[-1] == now - 1
    assert p.capped > 0
    assert [s for s, c in p.run if not c] == [now]
    # every slot is accounted for: run, recorded one by one, or counted in the summary
    assert p.overflow is not None and p.overflow[0] is not None
    assert len(p.run) + len(p.missed) + p.overflow[0] == 500
    assert p.overflow[1] == T + 1


def test_window_and_skip() -> None:
    p = plan_slots(EVERY5, T, T + 1800 + 1, missed=Missed.SKIP, window=600, late_after=5)
    assert p.run == [(T + 1800, False)]
    assert p.missed == [T + 300 * i for i in range(1, 6)]
    p = plan_slots(EVERY5, T, T + 1799, missed=Missed.RUN_ALL, window=0, late_after=5)
    assert p.run == [] and len(p.missed) == 5


def test_long_downtime_is_summarised() -> None:
    every_s = parse("1s")
    p = plan_slots(every_s, T, T + 86400, missed=Missed.SKIP, window=3600, late_after=5)
    assert len(p.missed) == RECORD_CAP
    assert p.overflow is not None
    count, first, last = p.overflow
    assert first == T + 1 and last < p.missed[0]
    assert count is not None and count + len(p.missed) + len(p.run) >= 86_000


def test_nothing_before_the_watermark() -> None:
    p = plan_slots(EVERY5, T + 1800, T + 1801, missed=Missed.RUN_ALL, window=3600, late_after=5)
    assert p.run == [] and p.missed == []


def test_jitter_is_deterministic_and_bounded() -> None:
    delays = {jitter_delay(f"job-{i}", T, 30) for i in range(200)}
    assert all(0 <= d <= 30 for d in delays) and len(delays) > 150
    assert jitter_delay("a", T, 30) == jitter_delay("a", T, 30)
    assert jitter_delay("a", T, 30) != jitter_delay("a", T + 60, 30)
    assert jitter_delay("a", T, 0) == 0


def test_only_the_newest_slot_of_a_backlog_is_on_time() -> None:
    """Slots within ``late_after`` but overtaken by a newer one due too are late: the
    policy decides them (they used to run back to back as on-time runs)."""
    every_s = parse("1s")
    now = T + 4
    once = plan_slots(every_s, T, now, missed=Missed.RUN_ONCE, window=3600, late_after=5)
    assert once.run == [(now, False)] and once.missed == [T + 1, T + 2, T + 3]
    skip = plan_slots(every_s, T, now, missed=Missed.SKIP, window=3600, late_after=5)
    assert skip.run == [(now, False)] and skip.missed == [T + 1, T + 2, T + 3]
    run_all = plan_slots(every_s, T, now, missed=Missed.RUN_ALL, window=3600, late_after=5)
    assert run_all.run == [(T + 1, True), (T + 2, True), (T + 3, True), (now, False)]
    assert run_all.missed == []
    # the newest itself too old: RUN_ONCE runs it as a catch-up
    old = plan_slots(every_s, T, T + 10.5, missed=Missed.RUN_ONCE, window=3600,
                     late_after=0.2)
    assert old.run == [(T + 10, True)] and old.missed == [T + x for x in range(1, 10)]
