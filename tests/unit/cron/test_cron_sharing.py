"""Schedules share their tables by content, and answer exactly as before they did.

The engine keeps one object per distinct piece (field values, day rule, field text) and no
per-expression cache (docs/cron.md, "Memory"); the differential tests compare every answer
with the per-expression engine it replaced (``reference_schedule.py``), in DST zones.
"""

from __future__ import annotations

import importlib
import threading
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronfleet.cron import (
    CronExpr,
    CronSyntaxError,
    NoFireTimeError,
    from_text,
    parse,
    parse_composed,
)
from cronfleet.cron.parser import CronForm
from cronfleet.cron.schedule import (
    _MONTH_SHAPE,
    WallSchedule,
    _shape_index,
    days_in_month,
    first_weekday,
)
from cronfleet.cron.tables import Interner
from properties import examples

from . import reference_schedule
from .test_cron_properties import ZONES, cron_text, instant


def sched(expr: CronExpr) -> WallSchedule:
    s = expr._sched
    assert s is not None
    return s


def form(expr: CronExpr) -> CronForm:
    f = expr._form
    assert isinstance(f, CronForm)
    return f


# -- sharing -------------------------------------------------------------------------------

def _clear_maps() -> None:
    from cronfleet.cron import fields, parsing, schedule

    compose = importlib.import_module("cronfleet.cron.compose")  # not the function
    for interner in (fields._SPECS, schedule._FIELD_TABLES, schedule._BY_RULE,
                     schedule._BY_SIGNATURE, compose._COMPOSED, compose._DAY_EXCLUSIONS):
        interner.clear()
    parsing._parse_cached.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_maps() -> None:
    """Start each test with empty sharing maps: one that filled up and started afresh in
    the middle of a test would break an identity the test expects."""
    _clear_maps()


def test_distinct_expressions_with_equal_day_rules_share_one_set_of_day_tables() -> None:
    a = sched(parse("5 9 * * 1-5"))
    b = sched(parse("17 13 * * MON-FRI", "Europe/Paris"))
    c = sched(parse("0 0 */2 * 1-5"))  # another day rule
    assert a is not b
    assert a.days is b.days and a.days.shapes is b.days.shapes
    assert c.days is not a.days
    # written differently, matching the same days: one object
    every = [sched(parse(t)).days for t in ("0 0 * * *", "0 12 1-31 * ?", "30 6 * * 0-6",
                                            "0 3 ? * *")]
    assert all(d is every[0] for d in every)
    assert sched(parse("0 0 L * *")).days is not every[0]


def test_field_values_and_field_texts_are_shared() -> None:
    a, b = parse("5 9 * * *"), parse("5 10 1 * *", "Asia/Tokyo")
    assert sched(a).minutes is sched(b).minutes
    assert sched(a)._nmin is sched(b)._nmin and sched(a)._pmin is sched(b)._pmin
    assert sched(a).months is sched(b).months
    assert form(a).specs[1] is form(b).specs[1]  # the minute field "5"
    assert form(a).specs[0] is form(b).specs[0]  # the implied second "0"
    assert sched(a).hours is not sched(b).hours
    assert form(a).text is a.expr  # the canonical text is the text given: one string


def test_a_schedule_holds_references_only_and_keeps_no_per_month_state() -> None:
    expr = parse("0 12 15W * *", "Europe/Paris")
    s = sched(expr)
    before = {name: getattr(s, name) for name in WallSchedule.__slots__}
    t = datetime(2020, 1, 1, tzinfo=UTC)
    for _ in range(40):  # walks 40 months, two leap Februaries
        t = expr.next(t)
        expr.prev(t)
    for name in WallSchedule.__slots__:
        value = getattr(s, name)
        assert value is before[name], name  # nothing replaced
        assert not isinstance(value, dict | list | set | bytearray), name  # nothing to grow


def test_errors_are_located_for_each_expression_whatever_was_shared() -> None:
    parse("5 9 * * *")
    for text, column in (("61 * * * *", 1), ("0 61 * * *", 3), ("0 0 61 * *", 5),
                         ("0 0 * 61 *", 7)):
        with pytest.raises(CronSyntaxError) as info:
            parse(text)
        assert info.value.expr == text and info.value.column == column


def test_month_shape_table_agrees_with_the_calendar_every_month_of_years_1_to_9999() -> None:
    for y in range(1, 10000):
        for m in range(1, 13):
            want = _shape_index(first_weekday(y, m), days_in_month(y, m))
            assert _MONTH_SHAPE[(y % 400) * 12 + m] == want, (y, m)


def test_interner_publishes_one_value_when_threads_build_the_same_key_at_once() -> None:
    interner: Interner[str, object] = Interner("test", 10)
    barrier = threading.Barrier(4, timeout=10)
    got: list[object] = []

    def build() -> object:
        barrier.wait()  # all four are building at once
        return object()

    def worker() -> None:
        got.append(interner.get("k", build))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert len(got) == 4 and all(v is got[0] for v in got)


def test_interner_is_bounded_and_values_handed_out_stay_valid() -> None:
    interner: Interner[int, tuple[int]] = Interner("test", 3)
    first = interner.get(0, lambda: (0,))
    for k in range(1, 10):
        interner.get(k, lambda k=k: (k,))  # type: ignore[misc]
        assert len(interner) <= 3
    assert first == (0,)
    assert interner.get(9, lambda: (-1,)) == (9,)  # still shared after the restart


def test_a_failed_build_publishes_nothing() -> None:
    interner: Interner[str, object] = Interner("test", 10)

    def boom() -> object:
        raise ValueError("bad")

    with pytest.raises(ValueError):
        interner.get("k", boom)
    assert len(interner) == 0


# -- the same answers as the per-expression engine ------------------------------------------

def _reference(expr: CronExpr) -> CronExpr:
    """The same expression, searching with the engine this change replaced."""
    ref = CronExpr(expr.expr, expr.tz)
    object.__setattr__(ref, "_sched", reference_schedule.WallSchedule(*form(expr).specs))
    return ref


def _answer(fn: object, t: datetime) -> datetime | None:
    try:
        return fn(t)  # type: ignore[operator, no-any-return]
    except NoFireTimeError:
        return None


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_next_and_prev_answer_as_the_per_expression_engine(data: st.DataObject) -> None:
    tz = data.draw(st.sampled_from(ZONES))
    text = data.draw(cron_text())
    try:
        expr = parse(text, tz)
    except CronSyntaxError:
        return
    if expr.is_interval:
        return
    ref = _reference(expr)
    start = data.draw(instant(tz))
    for method in ("next", "prev"):
        t: datetime | None = start
        for _ in range(6):  # successive answers: each from the previous one
            assert t is not None
            ours = _answer(getattr(expr, method), t)
            theirs = _answer(getattr(ref, method), t)
            assert (None if ours is None else (ours.isoformat(), ours.fold)) == \
                   (None if theirs is None else (theirs.isoformat(), theirs.fold)), \
                   (text, tz, method, t)
            if ours is None:
                break
            t = ours


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_wall_search_agrees_with_the_per_expression_engine_anywhere_in_the_calendar(
        data: st.DataObject) -> None:
    text = data.draw(cron_text())
    try:
        expr = parse(text)
    except CronSyntaxError:
        return
    if expr.is_interval:
        return
    ours = sched(expr)
    ref = reference_schedule.WallSchedule(*form(expr).specs)
    assert ours.days_signature() == ref.days_signature()
    assert ours.satisfiable() == ref.satisfiable()
    y = data.draw(st.one_of(st.integers(1, 9999), st.integers(1995, 2040)))
    mo = data.draw(st.integers(1, 12))
    d = data.draw(st.integers(1, days_in_month(y, mo)))
    h, mi, s = data.draw(st.integers(0, 23)), data.draw(st.integers(0, 59)), \
        data.draw(st.integers(0, 59))
    hi, lo = min(y + 400, 9999), max(y - 400, 1)
    assert ours.next_wall(y, mo, d, h, mi, s, hi) == ref.next_wall(y, mo, d, h, mi, s, hi)
    assert ours.prev_wall(y, mo, d, h, mi, s, lo) == ref.prev_wall(y, mo, d, h, mi, s, lo)


def test_sentences_of_the_same_schedule_share_its_expression() -> None:
    en = from_text("every day at 09:15", "Europe/Paris")
    fr = from_text("tous les jours à 9h15", "Europe/Paris")
    assert en.schedule is fr.schedule is parse("15 9 * * *", "Europe/Paris")
    assert from_text("every day at 09:15", "Asia/Tokyo").schedule is not en.schedule


def test_equal_compositions_share_one_object_and_keep_their_own_text(tmp_path: Path
                                                                      ) -> None:
    a = parse_composed("5 9 * * 1-5 | 5 12 * * 6 | except 12-25", "Europe/Paris")
    b = parse_composed("5 12 * * 6 |  5 9 * * 1-5 | except 12-25", "Europe/Paris")
    assert a is b
    assert parse_composed("5 9 * * 1-5 | 5 12 * * 6 | except 12-25", "UTC") is not a
    # the same days written as a calendar file: an equal schedule, another text
    (tmp_path / "days.txt").write_text("12-25\n", encoding="utf-8")
    c = parse_composed(f"5 9 * * 1-5 | 5 12 * * 6 | except calendar:{tmp_path}/days.txt",
                       "Europe/Paris")
    assert c is not a and c == a
    assert "calendar:" in c.expr and "calendar:" not in a.expr


def test_compositions_share_their_day_exclusions_and_empty_sets() -> None:
    a = parse_composed("0 9 * * 1-5 | except 12-25 | except 2026-12-24", "Europe/Paris")
    b = parse_composed("30 7 * * 6 | except 12-25", "Asia/Tokyo")
    xa = {x.text: x for x in a.exclusions}
    assert xa["12-25"] is b.exclusions[0]
    assert a._monthdays is b._monthdays == frozenset({(12, 25)})
    assert a._dates == frozenset({date(2026, 12, 24)})
    assert not b._dates and b._dates is parse_composed("0 1 * * * | except 01-01")._dates
    c = parse_composed("0 9 * * 1-5 | except 12-25 | except 01-01")
    assert c._monthdays == frozenset({(12, 25), (1, 1)})
    assert c.excluded(datetime(2027, 1, 1, 9, tzinfo=UTC))
    assert not c.excluded(datetime(2027, 1, 4, 9, tzinfo=UTC))


def test_threads_parsing_at_once_get_shared_tables_and_the_same_answers() -> None:
    texts = [f"{i % 60} {i % 24} * * {('*', '1-5', '0,6', '5L')[i % 4]}" for i in range(400)]
    start = datetime(2026, 3, 28, tzinfo=UTC)
    want = {t: CronExpr(t, "Europe/Paris").next(start) for t in texts}
    _clear_maps()  # every thread builds the pieces at once
    got: dict[int, list[CronExpr]] = {}
    barrier = threading.Barrier(4, timeout=10)

    def worker(k: int) -> None:
        barrier.wait()
        order = texts[k::4] + texts[:k:4] + texts  # some texts first here, later elsewhere
        got[k] = [CronExpr(t, "Europe/Paris") for t in order]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    exprs = [e for k in range(4) for e in got[k]]
    assert len(exprs) == 4 * 400 + sum(len(texts[k::4]) + len(texts[:k:4]) for k in range(4))
    for e in exprs:
        assert e.next(start) == want[e.expr], e.expr
    rules: dict[str, set[int]] = {}
    for e in exprs:  # one DayTables per day rule, whichever thread built it first
        rules.setdefault(e.expr.split(" ", 4)[4], set()).add(id(sched(e).days))
    assert all(len(ids) == 1 for ids in rules.values()), rules
