"""Composed schedules: union of expressions (each instant once), one-off ``at``, ``start`` /
``end`` bounds, exclusions (month-days, dates, cron instants, calendar files); the same
interface as ``CronExpr`` (next, prev, next_n, iter, between, describe, explain, hashing,
pickling); and a property test against the sorted merge of the parts."""

from __future__ import annotations

import itertools
import pickle
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cronfleet.cron import (
    ComposedSchedule,
    CronExpr,
    CronSyntaxError,
    NoFireTimeError,
    compose,
    parse,
    parse_composed,
    parse_exclusion,
    parse_instant,
    read_schedule,
)
from cronfleet.cron.compose import read_calendar
from properties import examples

from .test_cron_properties import ZONES, cron_text, instant, utc

FAST = settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))

PARIS = ZoneInfo("Europe/Paris")


def iso(ts: list[datetime]) -> list[str]:
    return [t.isoformat() for t in ts]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- plain stays plain -----------------------------------------------------------------------


def test_one_expression_and_nothing_else_is_a_plain_cronexpr() -> None:
    assert type(compose("0 9 * * *", "Europe/Paris")) is CronExpr
    assert compose(["0 9 * * *"], "Europe/Paris") == parse("0 9 * * *", "Europe/Paris")
    assert parse_composed("0 9 * * *") is parse("0 9 * * *")
    assert isinstance(compose(["0 9 * * *", "0 12 * * 6"]), ComposedSchedule)
    assert isinstance(compose("0 9 * * *", end="2030-01-01"), ComposedSchedule)


# -- union -----------------------------------------------------------------------------------


def test_union_is_sorted_and_each_instant_once() -> None:
    s = compose(["*/10 * * * *", "*/15 * * * *"], "UTC")
    got = s.next_n(at("2026-03-02T00:00:00+00:00"), 8)
    assert [t.strftime("%H:%M") for t in got] == [
        "00:10", "00:15", "00:20", "00:30", "00:40", "00:45", "00:50", "01:00"]


def test_union_dedup_across_the_paris_fall_back() -> None:
    # 2024-10-27: 02:00-02:59 happens twice. The fixed-time job fires once (first pass),
    # the elapsed-time one in both passes: the first pass's 02:30 is shared, once.
    s = compose(["30 2 * * *", "0,30 * * * *"], "Europe/Paris")
    assert isinstance(s, ComposedSchedule)
    got = s.next_n(at("2024-10-27T01:45:00+02:00"), 5)
    assert iso(got) == [
        "2024-10-27T02:00:00+02:00", "2024-10-27T02:30:00+02:00",
        "2024-10-27T02:00:00+01:00", "2024-10-27T02:30:00+01:00",
        "2024-10-27T03:00:00+01:00"]
    assert got[3].fold == 1
    # and backwards, the same instants
    back = []
    t = got[-1]
    for _ in range(4):
        t = s.prev(t)
        back.append(t)
    assert iso(back[::-1]) == iso(got[:4])


def test_union_across_the_paris_spring_forward() -> None:
    # 02:30 does not exist on 2024-03-31: the fixed job fires at 03:00, like the hourly one
    s = compose(["30 2 * * *", "0 * * * *"], "Europe/Paris")
    got = s.next_n(at("2024-03-31T01:10:00+01:00"), 3)
    assert iso(got) == ["2024-03-31T03:00:00+02:00", "2024-03-31T04:00:00+02:00",
                        "2024-03-31T05:00:00+02:00"]


def test_iter_and_between_follow_next() -> None:
    s = compose(["0 9 * * 1-5", "0 12 * * 6"], "Europe/Paris", exclude=["12-25"])
    a, b = at("2026-12-20T00:00:00+01:00"), at("2026-12-31T23:00:00+01:00")
    between = list(s.between(a, b))
    it = s.iter(a)
    assert between == [next(it) for _ in between]
    assert iso(between)[:5] == [
        "2026-12-21T09:00:00+01:00", "2026-12-22T09:00:00+01:00",
        "2026-12-23T09:00:00+01:00", "2026-12-24T09:00:00+01:00",
        "2026-12-26T12:00:00+01:00"]
    assert between[-1].isoformat() == "2026-12-31T09:00:00+01:00"


# -- bounds ----------------------------------------------------------------------------------


def test_start_and_end_are_inclusive_and_nothing_fires_outside() -> None:
    s = compose("0 * * * *", "UTC", start="2026-01-01T10:00:00Z", end="2026-01-01T12:00:00Z")
    assert iso(s.next_n(at("2025-12-31T00:00:00+00:00"), 10)) == [
        "2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00",
        "2026-01-01T12:00:00+00:00"]
    assert s.prev(at("2027-01-01T00:00:00+00:00")).isoformat() == "2026-01-01T12:00:00+00:00"
    with pytest.raises(NoFireTimeError, match="done"):
        s.next(at("2026-01-01T12:00:00+00:00"))
    with pytest.raises(NoFireTimeError):
        s.prev(at("2026-01-01T10:00:00+00:00"))
    assert list(s.iter(at("2026-01-01T11:30:00+00:00"))) == [at("2026-01-01T12:00:00+00:00")]
    assert s.done(at("2026-01-01T12:00:00+00:00"))
    assert not s.done(at("2026-01-01T11:59:59+00:00"))


def test_a_date_as_end_covers_that_whole_day_in_the_zone() -> None:
    s = compose("0 23 * * *", "Europe/Paris", start="2026-03-01", end="2026-03-02")
    assert iso(s.next_n(at("2026-01-01T00:00:00+00:00"), 5)) == [
        "2026-03-01T23:00:00+01:00", "2026-03-02T23:00:00+01:00"]
    assert s.start is not None and s.start.isoformat() == "2026-03-01T00:00:00+01:00"
    assert s.end is not None and s.end.isoformat() == "2026-03-02T23:59:59+01:00"


def test_end_before_start_is_refused() -> None:
    with pytest.raises(ValueError, match="before start"):
        compose("0 * * * *", start="2026-02-01", end="2026-01-01")


# -- one-off ---------------------------------------------------------------------------------


def test_a_one_off_fires_once_then_is_done() -> None:
    s = compose(at="2026-12-24T18:00:00+01:00", tz="Europe/Paris")
    assert isinstance(s, ComposedSchedule) and s.one_off
    assert s.expr == "at 2026-12-24T18:00:00+01:00"
    assert iso(s.next_n(at("2026-01-01T00:00:00+00:00"), 5)) == ["2026-12-24T18:00:00+01:00"]
    assert s.next_n(at("2026-12-24T18:00:00+01:00"), 5) == []
    assert s.prev(at("2027-01-01T00:00:00+00:00")).isoformat() == "2026-12-24T18:00:00+01:00"
    with pytest.raises(NoFireTimeError):
        s.prev(at("2026-12-24T18:00:00+01:00"))
    assert s.done(at("2026-12-24T18:00:00+01:00"))
    assert not s.done(at("2026-12-24T17:59:59+01:00"))
    assert s.describe() == "Once at 2026-12-24 18:00:00 (Europe/Paris)"


def test_a_one_off_and_expressions_together_is_refused() -> None:
    with pytest.raises(ValueError, match="either"):
        compose("0 9 * * *", at="2026-12-24T18:00:00+01:00")


def test_instants_without_an_offset_are_read_in_the_zone() -> None:
    assert parse_instant("2026-12-24T18:00", "Europe/Paris").isoformat() == \
        "2026-12-24T18:00:00+01:00"
    # a date is its first instant (a midnight in a DST gap: the gap's end)
    assert parse_instant("2018-11-04", "America/Sao_Paulo").isoformat() == \
        "2018-11-04T01:00:00-02:00"
    assert parse_instant(date(2026, 1, 1), "UTC", end_of_day=True).isoformat() == \
        "2026-01-01T23:59:59+00:00"
    with pytest.raises(CronSyntaxError, match="whole seconds"):
        parse_instant("2026-12-24T18:00:00.5+01:00")
    with pytest.raises(CronSyntaxError, match="ISO 8601"):
        parse_instant("Christmas", field="at")


# -- exclusions ------------------------------------------------------------------------------


def test_month_day_exclusion_every_year() -> None:
    s = compose("0 9 * * *", "Europe/Paris", exclude=["12-25", "01-01"])
    got = s.next_n(at("2026-12-24T00:00:00+01:00"), 4)
    assert [t.date().isoformat() for t in got] == [
        "2026-12-24", "2026-12-26", "2026-12-27", "2026-12-28"]
    got = s.next_n(at("2027-12-31T10:00:00+01:00"), 1)
    assert got[0].date().isoformat() == "2028-01-02"


def test_full_date_exclusion_only_that_day() -> None:
    s = compose("0 9 * * *", "UTC", exclude=["2026-12-24"])
    assert "2026-12-24" not in [t.date().isoformat()
                                for t in s.next_n(at("2026-12-20T00:00:00+00:00"), 6)]
    assert s.next(at("2027-12-23T12:00:00+00:00")).date().isoformat() == "2027-12-24"


def test_day_exclusions_are_local_days() -> None:
    # 23:30 UTC on the 24th is 00:30 on the 25th in Paris: excluded there
    s = compose("30 23 * * *", "UTC", exclude=["12-25"])
    p = compose("30 0 * * *", "Europe/Paris", exclude=["12-25"])
    assert s.next(at("2026-12-24T00:00:00+00:00")).isoformat() == "2026-12-24T23:30:00+00:00"
    assert p.next(at("2026-12-24T00:00:00+00:00")).isoformat() == "2026-12-26T00:30:00+01:00"


def test_cron_exclusion_removes_only_its_instants() -> None:
    s = compose("*/30 * * * *", "UTC", exclude=["0 * * * 6,0"])  # 2026-03-07 is a Saturday
    got = s.next_n(at("2026-03-07T00:00:00+00:00"), 4)
    assert [t.strftime("%H:%M") for t in got] == ["00:30", "01:30", "02:30", "03:30"]
    assert s.next(at("2026-03-09T00:00:00+00:00")).strftime("%H:%M") == "00:30"
    assert s.excluded(at("2026-03-07T01:00:00+00:00"))
    assert not s.excluded(at("2026-03-07T01:30:00+00:00"))
    assert iso(s.excluded_between(at("2026-03-07T00:00:00+00:00"),
                                  at("2026-03-07T02:00:00+00:00"))) == [
        "2026-03-07T01:00:00+00:00", "2026-03-07T02:00:00+00:00"]


def test_excluded_prev_is_symmetric() -> None:
    s = compose(["0 9 * * 1-5", "0 12 * * 6"], "Europe/Paris",
                exclude=["12-25", "0 12 * * 6"])
    fwd = s.next_n(at("2026-12-01T00:00:00+01:00"), 30)
    back = []
    t = fwd[-1]
    for _ in range(29):
        t = s.prev(t)
        back.append(t)
    assert back[::-1] == fwd[:-1]
    assert all(t.weekday() < 5 and (t.month, t.day) != (12, 25) for t in fwd)


def test_exclusions_in_a_repeated_hour_remove_both_passes() -> None:
    # Paris 2024-10-27: 02:00-02:59 twice. A 6-field exclusion fires in both passes, so
    # both 02:30 instants of the elapsed-time job go; the fixed-time exclusion only the first
    s = compose("*/30 * * * *", "Europe/Paris", exclude=["0 30 2 * * *"])
    t0 = at("2024-10-27T01:45:00+02:00")
    assert iso(s.next_n(t0, 3)) == ["2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00",
                                    "2024-10-27T03:00:00+01:00"]
    assert iso(s.excluded_between(t0, at("2024-10-27T03:00:00+01:00"))) == [
        "2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00"]
    fixed = compose("*/30 * * * *", "Europe/Paris", exclude=["30 2 * * *"])
    assert iso(fixed.next_n(t0, 4)) == [
        "2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00",
        "2024-10-27T02:30:00+01:00", "2024-10-27T03:00:00+01:00"]
    assert s.prev(at("2024-10-27T03:00:00+01:00")).isoformat() == "2024-10-27T02:00:00+01:00"
    # a one-off in the first pass is before a time of the second pass
    once = compose(at="2024-10-27T02:30:00+02:00", tz="Europe/Paris")
    assert once.prev(at("2024-10-27T02:10:00+01:00")).isoformat() == \
        "2024-10-27T02:30:00+02:00"
    assert once.next_n(at("2024-10-27T02:10:00+01:00"), 1) == []


def test_an_exclusion_of_everything_ends_the_search() -> None:
    s = compose("0 * * * *", "UTC", exclude=["* * * * *"])
    assert s.next_n(at("2026-01-01T00:00:00+00:00"), 3) == []
    with pytest.raises(NoFireTimeError, match="excluded"):
        s.next(at("2026-01-01T00:00:00+00:00"))


def test_next_n_with_a_budget_stops_early_but_gives_one() -> None:
    s = compose("* * * * *", "UTC", exclude=["0 * * * *"])
    assert len(s.next_n(at("2026-01-01T00:00:00+00:00"), 50, budget=0.0)) == 1
    assert len(s.next_n(at("2026-01-01T00:00:00+00:00"), 50, budget=60.0)) == 50


def test_calendar_file(tmp_path: Path) -> None:
    cal = tmp_path / "holidays.txt"
    cal.write_text("# holidays\n05-01   # labour day\n\n2026-05-14\n", encoding="utf-8")
    assert read_calendar(cal) == (frozenset({date(2026, 5, 14)}), frozenset({(5, 1)}))
    s = compose("0 9 * * *", "UTC", exclude=["calendar:holidays.txt"], base=tmp_path)
    days = [t.date().isoformat() for t in s.next_n(at("2026-04-30T12:00:00+00:00"), 14)]
    assert "2026-05-01" not in days and "2026-05-14" not in days and "2026-05-02" in days
    assert isinstance(s, ComposedSchedule)
    text = s.exclusions[0].text
    assert text.startswith("calendar:holidays.txt#") and len(text.split("#")[1]) == 12
    # the canonical text reads back (same days: equal)
    assert parse_composed(s.expr, "UTC", base=tmp_path) == s
    cal.write_text("05-01\n2026-13-01\n", encoding="utf-8")
    with pytest.raises(CronSyntaxError, match="line 2"):
        parse_exclusion("calendar:holidays.txt", base=tmp_path)
    with pytest.raises(CronSyntaxError, match="cannot read"):
        parse_exclusion("calendar:nope.txt", base=tmp_path)


@pytest.mark.parametrize(("text", "match"), [
    ("02-30", "month-day"), ("2026-02-30", "not a date"), ("12/25", "expected"),
    ("5m", "interval"), ("0 0 32 * *", "out of range"), ("", "empty"),
    ("calendar:", "needs a file"),
])
def test_bad_exclusions(text: str, match: str) -> None:
    with pytest.raises(CronSyntaxError, match=match):
        parse_exclusion(text)


def test_leap_day_month_day_is_accepted() -> None:
    s = compose("0 0 * * *", "UTC", exclude=["02-29"])
    got = s.next_n(at("2028-02-28T12:00:00+00:00"), 1)
    assert got[0].date().isoformat() == "2028-03-01"


# -- value semantics, text -------------------------------------------------------------------


def test_canonical_text_equality_hash_pickle() -> None:
    a = compose(["0 12 * * 6", "0 9 * * 1-5"], "Europe/Paris", exclude=["12-25", "01-01"],
                start="2026-01-01")
    b = compose(["0 9 * * 1-5", "0 12 * * 6", "0 9 * * 1-5"], "Europe/Paris",
                exclude=["01-01", "12-25"], start="2026-01-01T00:00:00+01:00")
    assert a == b and hash(a) == hash(b) and a.expr == b.expr
    assert a.expr == ("0 12 * * 6 | 0 9 * * 1-5 | start 2026-01-01T00:00:00+01:00 | "
                      "except 01-01 | except 12-25")
    assert parse_composed(a.expr, "Europe/Paris") == a
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a).startswith("ComposedSchedule('0 12 * * 6 | ")
    c = compose(["0 12 * * 6", "0 9 * * 1-5"], "Europe/Paris", exclude=["12-25"],
                start="2026-01-01")
    assert c != a and c.expr != a.expr
    with pytest.raises(AttributeError):
        a.expr = "x"  # type: ignore[misc]


def test_interface_matches_cronexpr() -> None:
    s = compose(["0 9 * * 1-5", "0 12 * * 6"], "Europe/Paris", exclude=["12-25"])
    assert isinstance(s, ComposedSchedule)
    assert s.period is None and s.tz is PARIS and str(s) == s.expr
    info = s.explain()
    assert info["kind"] == "composed" and info["except"] == ["12-25"]
    parts = info["parts"]
    assert isinstance(parts, list) and [p["expr"] for p in parts] == ["0 12 * * 6",
                                                                     "0 9 * * 1-5"]
    assert s.describe() == ("At 12:00, only on Saturday; and At 09:00, Monday through "
                            "Friday; except 12-25")
    with pytest.raises(ValueError, match="aware"):
        s.next(datetime(2026, 1, 1))


@pytest.mark.parametrize(("text", "match"), [
    ("0 9 * * * | | 0 12 * * 6", "empty piece"),
    ("0 9 * * * | start 2026-01-01 | start 2026-02-01", "given twice"),
    ("0 9 * * * | at 2026-01-01T00:00:00Z", "either"),
    ("0 9 * * * | except 13-01", "month-day"),
    ("0 61 * * * | except 12-25", "out of range"),
])
def test_composition_text_errors(text: str, match: str) -> None:
    with pytest.raises(CronSyntaxError, match=match):
        parse_composed(text)


# -- properties ------------------------------------------------------------------------------


def _merge(parts: list[CronExpr], after: datetime, n: int) -> list[int]:
    seen: set[int] = set()
    for p in parts:
        seen.update(int(t.timestamp()) for t in p.next_n(after, n))
    return sorted(seen)[:n]


@FAST
@given(st.data(), st.sampled_from(ZONES))
def test_union_equals_the_sorted_merge_of_the_parts(data: st.DataObject, zone: str) -> None:
    texts = [data.draw(cron_text()) for _ in range(2)]
    try:
        parts = [parse(t, zone) for t in texts]
    except CronSyntaxError:
        assume(False)
        return
    assume(parts[0] != parts[1])
    s = compose(parts, zone)
    assert isinstance(s, ComposedSchedule)
    t0 = data.draw(instant(zone))
    got = s.next_n(t0, 6)
    assert [int(t.timestamp()) for t in got] == _merge(parts, t0, 6)
    assert all(t.tzinfo is s.tz for t in got)
    # prev walks back over the same instants
    for a, b in itertools.pairwise(got):
        assert utc(s.prev(b)) == utc(a)


@FAST
@given(st.data(), st.sampled_from(ZONES))
def test_exclusions_remove_exactly_their_instants(data: st.DataObject, zone: str) -> None:
    texts = [data.draw(cron_text()) for _ in range(2)]
    try:
        base, cut = parse(texts[0], zone), parse(texts[1], zone)
    except CronSyntaxError:
        assume(False)
        return
    assume(not cut.is_interval)
    s = compose(base, zone, exclude=[texts[1]])
    assert isinstance(s, ComposedSchedule)
    t0 = data.draw(instant(zone))
    got = [int(t.timestamp()) for t in s.next_n(t0, 4)]
    want: list[int] = []
    last = None
    for n, t in enumerate(base.iter(t0)):
        if len(want) == 4 or n == 2000:
            break
        last = int(t.timestamp())
        hit = cut.next_n(utc(t) - timedelta(seconds=1), 1)  # instants: keep the fold
        if not (hit and utc(hit[0]) == utc(t)):
            want.append(last)
    assert got[: len(want)] == want
    if len(want) < 4 and last is not None:  # the rest lies beyond what was checked
        assert all(u > last for u in got[len(want):])


def test_utc_zone_results_are_in_the_zone() -> None:
    s = compose(["0 9 * * *", "0 10 * * *"], ZoneInfo("UTC"))
    assert s.next(datetime(2026, 1, 1, tzinfo=UTC)).tzinfo is ZoneInfo("UTC")


# -- sentences inside compositions (cron/words.py) ------------------------------------------


def test_sentences_compose_like_expressions() -> None:
    s, said = read_schedule("every weekday at 9am | every Saturday at noon | except 12-25",
                            "Europe/Paris")
    assert isinstance(s, ComposedSchedule)
    assert s.expr == "0 12 * * 6 | 0 9 * * 1-5 | except 12-25"
    assert said == "every weekday at 9am | every Saturday at noon | except 12-25"
    assert compose(["every weekday at 9am", "0 12 * * 6"], "Europe/Paris",
                   exclude=["12-25"]) == s
    assert compose("0 * * * *", exclude=["every Saturday at noon"]).expr == \
        "0 * * * * | except 0 12 * * 6"
    plain, said = read_schedule("0 9 * * 1-5 | except 12-25")
    assert said is None and isinstance(plain, ComposedSchedule)


def test_at_before_a_date_is_a_one_off_before_words_a_sentence() -> None:
    s, said = read_schedule("at noon on the first Monday of the month", "Europe/Paris")
    assert isinstance(s, CronExpr) and s.expr == "0 12 * * 1#1" and said is not None
    once, said = read_schedule("at 2026-12-24T18:00", "Europe/Paris")
    assert isinstance(once, ComposedSchedule) and once.one_off and said is None
    assert once.expr == "at 2026-12-24T18:00:00+01:00"
    with pytest.raises(CronSyntaxError, match="Tuesday"):
        read_schedule("every tusday at 9am | except 12-25")
