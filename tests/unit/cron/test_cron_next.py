"""Semantics: fire times for the rules in docs/cron.md, including every DST case."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronfleet.cron import NoFireTimeError, parse

P, NY, LH, SP = "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo"


def at(tz: str, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, fold=fold, tzinfo=ZoneInfo(tz))  # type: ignore[misc]


def chain(expr: str, tz: str, start: datetime, n: int = 3, prev: bool = False) -> list[str]:
    e = parse(expr, tz)
    out, t = [], start
    for _ in range(n):
        t = e.prev(t) if prev else e.next(t)
        assert t.tzinfo is e.tz
        out.append(t.isoformat())
    return out


@pytest.mark.parametrize(
    ("expr", "tz", "start", "want", "prev"),
    [
        # Europe/Paris, spring forward 2024-03-31 02:00 -> 03:00
        ("30 2 * * *", P, at(P, 2024, 3, 30, 12),
         ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"], False),
        ("*/30 * * * *", P, at(P, 2024, 3, 31, 1),
         ["2024-03-31T01:30:00+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T03:30:00+02:00"],
         False),
        ("0 30 2 * * *", P, at(P, 2024, 3, 30, 12), ["2024-04-01T02:30:00+02:00"], False),
        # Europe/Paris, fall back 2024-10-27 03:00 -> 02:00
        ("30 2 * * *", P, at(P, 2024, 10, 26, 12),
         ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"], False),
        ("*/30 * * * *", P, at(P, 2024, 10, 27, 2),
         ["2024-10-27T02:30:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T02:30:00+01:00",
          "2024-10-27T03:00:00+01:00"], False),
        ("0 30 2 * * *", P, at(P, 2024, 10, 26, 12),
         ["2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00", "2024-10-28T02:30:00+01:00"],
         False),
        ("*/30 * * * *", P, at(P, 2024, 10, 27, 3),
         ["2024-10-27T02:30:00+01:00", "2024-10-27T02:00:00+01:00", "2024-10-27T02:30:00+02:00",
          "2024-10-27T02:00:00+02:00", "2024-10-27T01:30:00+02:00"], True),
        # America/New_York, spring forward 2024-03-10 02:00 -> 03:00
        ("30 2 * * *", NY, at(NY, 2024, 3, 9, 12),
         ["2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00"], False),
        ("30 2 * * *", NY, at(NY, 2024, 3, 10, 12), ["2024-03-10T03:00:00-04:00"], True),
        ("*/30 2 * * *", NY, at(NY, 2024, 3, 9, 12),
         ["2024-03-11T02:00:00-04:00", "2024-03-11T02:30:00-04:00"], False),
        # America/New_York, fall back 2024-11-03 02:00 -> 01:00
        ("30 1 * * *", NY, at(NY, 2024, 11, 2, 12),
         ["2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"], False),
        ("30 1 * * *", NY, at(NY, 2024, 11, 3, 1, 10, fold=1),
         ["2024-11-04T01:30:00-05:00"], False),
        ("*/20 * * * *", NY, at(NY, 2024, 11, 3, 1, 50),
         ["2024-11-03T01:00:00-05:00", "2024-11-03T01:20:00-05:00"], False),
        ("0 30 1 * * *", NY, at(NY, 2024, 11, 2, 12),
         ["2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00"], False),
        # Australia/Lord_Howe: 30-minute DST (2023-10-01 02:00 -> 02:30; 2024-04-07 02:00 -> 01:30)
        ("15 2 * * *", LH, at(LH, 2023, 9, 30, 12),
         ["2023-10-01T02:30:00+11:00", "2023-10-02T02:15:00+11:00"], False),
        ("*/15 * * * *", LH, at(LH, 2023, 10, 1, 1, 50),
         ["2023-10-01T02:30:00+11:00", "2023-10-01T02:45:00+11:00"], False),
        ("* 3 * * *", LH, at(LH, 2023, 10, 1, 2, 45), ["2023-10-01T03:00:00+11:00"], False),
        ("45 1 * * *", LH, at(LH, 2024, 4, 6, 12),
         ["2024-04-07T01:45:00+11:00", "2024-04-08T01:45:00+10:30"], False),
        ("*/15 1 * * *", LH, at(LH, 2024, 4, 7, 1, 40),
         ["2024-04-07T01:45:00+11:00", "2024-04-07T01:30:00+10:30", "2024-04-07T01:45:00+10:30",
          "2024-04-08T01:00:00+10:30"], False),
        # America/Sao_Paulo: DST changes at midnight (2018-11-04 00:00 -> 01:00; 2018-02-18
        # 00:00 -> 2018-02-17 23:00)
        ("30 0 * * *", SP, at(SP, 2018, 11, 3, 12),
         ["2018-11-04T01:00:00-02:00", "2018-11-05T00:30:00-02:00"], False),
        ("0 * * * *", SP, at(SP, 2018, 11, 3, 23), ["2018-11-04T01:00:00-02:00"], False),
        ("30 23 * * *", SP, at(SP, 2018, 2, 17, 12),
         ["2018-02-17T23:30:00-02:00", "2018-02-18T23:30:00-03:00"], False),
        ("30 * * * *", SP, at(SP, 2018, 2, 17, 22, 45),
         ["2018-02-17T23:30:00-02:00", "2018-02-17T23:30:00-03:00", "2018-02-18T00:30:00-03:00"],
         False),
        ("30 * * * *", SP, at(SP, 2018, 2, 18, 1),
         ["2018-02-18T00:30:00-03:00", "2018-02-17T23:30:00-03:00", "2018-02-17T23:30:00-02:00"],
         True),
    ],
)
def test_dst(expr, tz, start, want, prev):  # type: ignore[no-untyped-def]
    assert chain(expr, tz, start, len(want), prev) == want


@pytest.mark.parametrize(
    ("expr", "start", "want"),
    [
        ("0 0 1 * MON", datetime(2024, 1, 1, tzinfo=UTC),
         ["2024-01-08", "2024-01-15", "2024-01-22", "2024-01-29", "2024-02-01", "2024-02-05"]),
        ("0 0 */2 * MON", datetime(2024, 1, 1, tzinfo=UTC),
         ["2024-01-15", "2024-01-29", "2024-02-05"]),
        ("0 0 ? * MON", datetime(2024, 1, 1, tzinfo=UTC), ["2024-01-08", "2024-01-15"]),
        ("0 0 1-7 * */7", datetime(2024, 1, 1, tzinfo=UTC), ["2024-01-07", "2024-02-04"]),
        ("0 0 L * *", datetime(2024, 1, 31, tzinfo=UTC),
         ["2024-02-29", "2024-03-31", "2024-04-30"]),
        ("0 0 L-2 * *", datetime(2024, 1, 1, tzinfo=UTC), ["2024-01-29", "2024-02-27"]),
        ("0 0 LW * *", datetime(2024, 3, 1, tzinfo=UTC),
         ["2024-03-29", "2024-04-30", "2024-05-31"]),
        ("0 0 15W * *", datetime(2024, 6, 1, tzinfo=UTC), ["2024-06-14", "2024-07-15"]),
        ("0 0 1W * *", datetime(2024, 6, 1, tzinfo=UTC), ["2024-06-03", "2024-07-01"]),
        ("0 0 31W * *", datetime(2024, 11, 1, tzinfo=UTC), ["2024-11-29", "2024-12-31"]),
        ("0 0 * * 5L", datetime(2024, 1, 1, tzinfo=UTC), ["2024-01-26", "2024-02-23"]),
        ("0 0 * * MON#5", datetime(2024, 1, 1, tzinfo=UTC), ["2024-01-29", "2024-04-29"]),
        ("0 0 * 2 MON#5", datetime(2017, 1, 1, tzinfo=UTC), ["2044-02-29", "2072-02-29"]),
        ("0 0 29 2 *", datetime(2024, 3, 1, tzinfo=UTC), ["2028-02-29", "2032-02-29"]),
        ("0 0 29 2 */7", datetime(2025, 1, 1, tzinfo=UTC), ["2032-02-29", "2060-02-29"]),
        ("0 0 * * FRI-MON", datetime(2024, 1, 4, tzinfo=UTC),
         ["2024-01-05", "2024-01-06", "2024-01-07", "2024-01-08", "2024-01-12"]),
        ("0 0 * NOV-FEB 1#1", datetime(2024, 3, 1, tzinfo=UTC), ["2024-11-04", "2024-12-02"]),
    ],
)
def test_day_rules(expr, start, want):  # type: ignore[no-untyped-def]
    got = [d[:10] for d in chain(expr, "UTC", start, len(want))]
    assert got == want


def test_seconds_field_and_strictly_after() -> None:
    e = parse("*/20 * * * * *")
    t = datetime(2024, 1, 1, 0, 0, 20, tzinfo=UTC)
    assert e.next(t) == datetime(2024, 1, 1, 0, 0, 40, tzinfo=UTC)
    assert e.next(t.replace(microsecond=999_999)) == datetime(2024, 1, 1, 0, 0, 40, tzinfo=UTC)
    assert e.prev(t) == datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC)
    assert e.prev(t.replace(microsecond=1)) == t
    assert parse("0 0 * * *").next(datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC)) == datetime(
        2025, 1, 1, tzinfo=UTC
    )


def test_result_is_in_expression_zone_whatever_the_input_zone() -> None:
    e = parse("0 9 * * *", "Asia/Tokyo")
    got = e.next(datetime(2023, 12, 31, 23, tzinfo=UTC))
    assert got.tzinfo is ZoneInfo("Asia/Tokyo") and got.isoformat() == "2024-01-01T09:00:00+09:00"
    assert e.next(datetime(2024, 1, 1, 1, tzinfo=ZoneInfo(NY))) == got + timedelta(days=1)


def test_naive_and_non_datetime_inputs() -> None:
    e = parse("* * * * *")
    with pytest.raises(ValueError, match="timezone-aware"):
        e.next(datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        e.prev(datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        list(e.between(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2)))
    with pytest.raises((TypeError, AttributeError)):
        e.next("2024-01-01")  # type: ignore[arg-type]


def test_intervals_are_epoch_anchored() -> None:
    e = parse("@every 1h30m", "Europe/Paris")
    assert chain("@every 1h30m", P, datetime(2024, 1, 1, tzinfo=UTC)) == [
        "2024-01-01T02:30:00+01:00", "2024-01-01T04:00:00+01:00", "2024-01-01T05:30:00+01:00"]
    t = datetime(2024, 5, 5, 12, 34, 56, 789, tzinfo=UTC)
    n = e.next(t)
    assert n > t and int(n.timestamp()) % 5400 == 0 and n - t <= timedelta(minutes=90)
    p = e.prev(t)
    assert p < t and int(p.timestamp()) % 5400 == 0 and n - p == timedelta(minutes=90)
    assert e.prev(n) == p and e.next(p) == n
    # DST does not matter to an interval: slots stay 30 minutes apart across the change
    s = parse("30m", NY)
    got = chain("30m", NY, at(NY, 2024, 11, 3, 0, 50), 4)
    assert got == ["2024-11-03T01:00:00-04:00", "2024-11-03T01:30:00-04:00",
                   "2024-11-03T01:00:00-05:00", "2024-11-03T01:30:00-05:00"]
    assert s.next(datetime(2024, 1, 1, tzinfo=UTC)).tzinfo is ZoneInfo(NY)


def test_iter_and_between() -> None:
    e = parse("0 */6 * * *", NY)
    start = at(NY, 2024, 3, 9)
    it = e.iter(start)
    first = [next(it) for _ in range(6)]
    assert [t.hour for t in first] == [6, 12, 18, 0, 6, 12]
    assert list(e.between(start, first[-1])) == first
    assert list(e.between(start, first[-1] - timedelta(seconds=1))) == first[:-1]
    assert list(e.between(first[0], first[0])) == []
    # the repeated hour: bounds are instants, not wall times (fold matters)
    e = parse("*/20 * * * *", NY)
    got = e.between(at(NY, 2024, 11, 3, 1, 30), at(NY, 2024, 11, 3, 1, 30, fold=1))
    assert [t.isoformat() for t in got] == [
        "2024-11-03T01:40:00-04:00", "2024-11-03T01:00:00-05:00", "2024-11-03T01:20:00-05:00"]


def test_no_fire_time() -> None:
    # a seconds-precise (elapsed time) job at 02:30 on the fifth Sunday of March: in Paris
    # that Sunday is always the spring-forward day, so 02:30 never exists
    e = parse("0 30 2 * 3 SUN#5", P)
    with pytest.raises(NoFireTimeError):
        e.next(datetime(2024, 1, 1, tzinfo=UTC))
    # ... but France only started DST in 1976 and began it in April in 1980
    assert e.prev(datetime(2024, 1, 1, tzinfo=UTC)).isoformat() == "1980-03-30T02:30:00+01:00"
    assert list(e.iter(datetime(2024, 1, 1, tzinfo=UTC))) == []
    # the 5-field (wall-clock) spelling fires when the gap ends
    assert parse("30 2 * 3 SUN#5", P).next(datetime(2024, 1, 1, tzinfo=UTC)).isoformat() == (
        "2024-03-31T03:00:00+02:00"
    )
    # the edges of the calendar
    with pytest.raises(NoFireTimeError):
        parse("0 0 1 1 *").next(datetime(9999, 6, 1, tzinfo=UTC))
    with pytest.raises(NoFireTimeError):
        parse("0 0 1 1 *").prev(datetime(1, 6, 1, tzinfo=UTC))
    with pytest.raises(NoFireTimeError):
        parse("1d").next(datetime(9999, 12, 31, 12, tzinfo=UTC))


@pytest.mark.parametrize("tz", ["UTC", P, NY, LH, SP, "Pacific/Apia", "Asia/Kathmandu"])
def test_prev_inverts_next(tz: str) -> None:
    for text in ("*/7 * * * *", "30 2 * * *", "0 */5 * * *", "15 0,1,2,3 * * *", "*/13 * * * * *"):
        e = parse(text, tz)
        t = datetime(2011, 12, 28, tzinfo=UTC)  # Apia skipped 2011-12-30 entirely
        for _ in range(200):
            n = e.next(t)
            assert n.timestamp() > t.timestamp()
            # instant arithmetic: `aware + timedelta` is wall-clock arithmetic and drops fold
            just_after = n.astimezone(UTC) + timedelta(microseconds=1)
            assert e.prev(just_after).isoformat() == n.isoformat()
            t = n


def test_apia_skipped_day() -> None:
    # Pacific/Apia jumped from 2011-12-29 24:00 (-10) to 2011-12-31 00:00 (+14)
    # a fixed-time job whose wall time never happened fires when the clock gets past it
    assert chain("0 12 * * *", "Pacific/Apia", datetime(2011, 12, 29, tzinfo=UTC), 3) == [
        "2011-12-29T12:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"]
    assert chain("0 12 30 * *", "Pacific/Apia", datetime(2011, 12, 1, tzinfo=UTC), 2) == [
        "2011-12-31T00:00:00+14:00", "2012-01-30T12:00:00+14:00"]
    # an elapsed-time job just does not fire on the missing day
    assert chain("0 * 30 12 *", "Pacific/Apia", datetime(2011, 12, 1, tzinfo=UTC), 1) == [
        "2012-12-30T00:00:00+14:00"]


def test_the_last_days_of_the_calendar() -> None:
    """next() never answers a time before its argument, and finds the last fire times:
    9999-12-30 and 31 exist (a window clamped before its own day answered 12-29)."""
    daily = parse("@daily")
    assert daily.next(datetime(9999, 12, 30, 12, tzinfo=UTC)).isoformat() == (
        "9999-12-31T00:00:00+00:00")
    assert daily.next(datetime(9999, 12, 29, 12, tzinfo=UTC)).isoformat() == (
        "9999-12-30T00:00:00+00:00")
    with pytest.raises(NoFireTimeError):
        daily.next(datetime(9999, 12, 31, tzinfo=UTC))
    assert [t.day for t in daily.iter(datetime(9999, 12, 28, 12, tzinfo=UTC))] == [29, 30, 31]
    assert daily.prev(datetime(9999, 12, 31, 12, tzinfo=UTC)).isoformat() == (
        "9999-12-31T00:00:00+00:00")
    # elapsed-time jobs reach the last minute of the calendar, then stop (no endless search)
    last = list(parse("*/5 * * * *").iter(datetime(9999, 12, 31, 23, 50, tzinfo=UTC)))
    assert [t.isoformat() for t in last] == ["9999-12-31T23:55:00+00:00"]
    assert parse("0 12 * * *").prev(datetime(9999, 12, 31, 23, tzinfo=UTC)).isoformat() == (
        "9999-12-31T12:00:00+00:00")
    # a zone ahead of UTC: its last local day ends at 9999-12-31T23:59:59 local
    kiri = parse("0 12 * * *", "Pacific/Kiritimati")
    assert kiri.next(datetime(9999, 12, 30, 12, tzinfo=UTC)).isoformat() == (
        "9999-12-31T12:00:00+14:00")
    # an argument whose instant is past the calendar's end in the schedule's zone
    with pytest.raises(NoFireTimeError):
        kiri.next(datetime(9999, 12, 31, 23, tzinfo=UTC))
    with pytest.raises(NoFireTimeError):
        parse("*/5 * * * *", "Pacific/Kiritimati").next(datetime(9999, 12, 31, 23, tzinfo=UTC))


def test_next_n_gives_fewer_times_when_the_schedule_ends() -> None:
    daily = parse("@daily")
    assert [t.day for t in daily.next_n(datetime(9999, 12, 29, 12, tzinfo=UTC), 5)] == [30, 31]
    assert daily.next_n(datetime(9999, 12, 31, 12, tzinfo=UTC), 3) == []
    assert daily.next_n(datetime(2026, 1, 1, tzinfo=UTC), 0) == []
    assert [t.isoformat() for t in daily.next_n(datetime(2026, 1, 1, tzinfo=UTC), 2)] == [
        "2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"]
    # an expression that can never fire again (France's DST started in April in 1980)
    never = parse("0 30 2 * 3 SUN#5", "Europe/Paris")
    assert never.next_n(datetime(2024, 1, 1, tzinfo=UTC), 3) == []
    assert parse("1d").next_n(datetime(9999, 12, 30, 12, tzinfo=UTC), 3) == [
        datetime(9999, 12, 31, tzinfo=UTC)]
