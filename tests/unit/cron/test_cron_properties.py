"""Property tests: parse() is total, and next/prev/iter/between keep their promises.

Includes a differential test against cronsim (the reference implementation of the rules
we chose) over random expressions from the grammar both accept, in zones with DST.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from cronfleet.cron import CronExpr, CronSyntaxError, NoFireTimeError, parse
from cronfleet.cron.zones import wall_seconds
from properties import examples

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Sao_Paulo",
    "Europe/Dublin",
    "Asia/Kathmandu",
    "Pacific/Apia",
]
def utc(t: datetime) -> datetime:
    """Compare instants: aware datetimes sharing a tzinfo compare by wall time, ignoring fold."""
    return t.astimezone(UTC)


FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))

# -- strategies ----------------------------------------------------------------------------------

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def _case(draw: st.DrawFn, name: str) -> str:
    return draw(st.sampled_from([name, name.lower(), name.capitalize()]))


@st.composite
def value(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None) -> str:
    v = draw(st.integers(lo, hi))
    if names and draw(st.booleans()):
        idx = v - lo if names is MONTHS else v % 7
        return _case(draw, names[idx])
    return str(v)


@st.composite
def item(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None,
         wrap: bool = True) -> str:
    kind = draw(st.integers(0, 4))
    a = draw(value(lo, hi, names))
    if kind == 0:
        return a
    step = draw(st.integers(1, hi - lo + 2))
    if kind == 1:
        return f"*/{step}"
    if kind == 2:
        return f"{a}/{step}"
    b = draw(value(lo, hi, names))
    if not wrap:
        va, vb = sorted((_num(a), _num(b)))
        assume(va < vb)
        a, b = str(va), str(vb)
    return f"{a}-{b}" + (f"/{step}" if kind == 4 else "")


def _num(text: str) -> int:
    up = text.upper()
    if up in MONTHS:
        return MONTHS.index(up) + 1
    if up in DAYS:
        return DAYS.index(up)
    return int(text)


@st.composite
def field(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None,
          extra: st.SearchStrategy[str] | None = None, wrap: bool = True,
          question: bool = False) -> str:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return "*"
    if choice == 1 and question:
        return "?"
    one = item(lo, hi, names, wrap)
    if extra is not None:
        one = st.one_of(one, extra)
    return ",".join(draw(st.lists(one, min_size=1, max_size=3)))


DOM_EXTRA = st.one_of(
    st.sampled_from(["L", "LW", "l", "lw"]),
    st.integers(0, 30).map(lambda n: f"L-{n}"),
    st.integers(1, 31).map(lambda n: f"{n}W"),
)
DOW_EXTRA = st.one_of(
    st.tuples(st.integers(0, 7), st.integers(1, 5)).map(lambda t: f"{t[0]}#{t[1]}"),
    st.integers(0, 7).map(lambda d: f"{d}L"),
)


@st.composite
def cron_text(draw: st.DrawFn, full: bool = True) -> str:
    """An expression from our grammar (full=True) or from cronsim's (full=False)."""
    if full and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(
            ["@yearly", "@monthly", "@weekly", "@daily", "@hourly", "@every 90m", "45s", "2h"]))
    parts = []
    if draw(st.integers(0, 3)) == 0:
        parts.append(draw(field(0, 59, wrap=False)))  # reversed ranges: refused
    month_names = MONTHS if full else None
    parts += [
        draw(field(0, 59, wrap=False)),  # a reversed minute or day range is refused
        draw(field(0, 23, wrap=full)),
        draw(field(1, 31, extra=DOM_EXTRA if full else st.sampled_from(["L", "LW"]),
                   wrap=False, question=full)),
        draw(field(1, 12, month_names, wrap=full)),
        draw(field(0, 7, DAYS if full else None, extra=DOW_EXTRA, wrap=full, question=full)),
    ]
    return " ".join(parts)


@st.composite
def instant(draw: st.DrawFn, tz: str) -> datetime:
    """Mostly near DST changes (Mar/Apr, Sep-Nov, Feb), any year 1975-2060."""
    y = draw(st.integers(1975, 2060))
    mo = draw(st.sampled_from([1, 2, 3, 3, 4, 6, 9, 10, 10, 11, 12]))
    d = draw(st.integers(1, 28))
    t = datetime(y, mo, d, draw(st.integers(0, 23)), draw(st.integers(0, 59)),
                 draw(st.integers(0, 59)), draw(st.sampled_from([0, 0, 500_000])),
                 fold=draw(st.integers(0, 1)), tzinfo=ZoneInfo(tz))
    return t.astimezone(UTC).astimezone(ZoneInfo(tz))  # a real instant, correct fold


# -- parse() is total ----------------------------------------------------------------------------

VALID = ["*/5 * * * *", "0 0 L * *", "30 2 * * MON-FRI", "0 0 15W 1-6 ?", "0 12 * * 5L,1#2",
         "*/10 * * * * *", "0 22-2 * NOV-FEB *", "@daily", "@every 1h30m", "5m", "0 0 LW * *"]
CRONISH = "0123456789*/,-?#LlWw@ \tJANFEBMONSUNDECevryhmsd."


def _check_parse(text: str) -> None:
    try:
        expr = parse(text, "Europe/Paris")
    except CronSyntaxError as exc:
        assert exc.expr == text and exc.field and isinstance(str(exc), str)
        if exc.column is not None:
            assert 1 <= exc.column <= len(text) + 1  # len + 1: "missing at the end"
        return
    assert isinstance(expr, CronExpr)
    assert isinstance(expr.describe(), str) and expr.describe()
    try:
        n = expr.next(datetime(2024, 3, 30, 12, tzinfo=UTC))
        assert n > datetime(2024, 3, 30, 12, tzinfo=UTC)
    except NoFireTimeError:
        pass


@FAST
@given(st.text(max_size=40))
@example("* * * * *\x00")
@example("\u0663 * * * *")
@example("* * * * \uff2d\uff2f\uff2e")  # fullwidth MON
@example("\ufb00 * * * *")  # 'ﬀ'.upper() == 'FF'
def test_parse_is_total_on_any_text(text: str) -> None:
    _check_parse(text)


@FAST
@given(st.text(alphabet=CRONISH, max_size=40))
def test_parse_is_total_on_cronish_text(text: str) -> None:
    _check_parse(text)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID) | cron_text())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 4))
        i = draw(st.integers(0, max(len(text) - 1, 0)))
        ch = draw(st.sampled_from(list(CRONISH)) | st.characters())
        if op == 0 and text:
            text = text[:i] + text[i + 1 :]
        elif op == 1:
            text = text[:i] + ch + text[i:]
        elif op == 2 and text:
            text = text[:i] + ch + text[i + 1 :]
        elif op == 3:
            toks = text.split(" ")
            j = draw(st.integers(0, len(toks) - 1))
            toks.insert(j, toks[j])
            text = " ".join(toks)
        else:
            toks = text.split(" ")
            draw(st.randoms()).shuffle(toks)
            text = " ".join(toks)
    return text


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_parse_is_total_on_mutations_of_valid_expressions(text: str) -> None:
    _check_parse(text)


# -- invariants ----------------------------------------------------------------------------------


def _matches(expr: CronExpr, t: datetime) -> bool:
    """Does the local wall time of t match the fields? (uses the reverse search)"""
    sched = expr._sched
    assert sched is not None
    w = (t.year, t.month, t.day, t.hour, t.minute, t.second)
    return sched.prev_wall(*w, t.year - 1) == w


def _in_gap_end(expr: CronExpr, t: datetime) -> bool:
    """t is the first instant after a spring-forward gap that contains a matching wall time."""
    before = (utc(t) - timedelta(seconds=1)).astimezone(expr.tz)  # instant arithmetic
    w_before = wall_seconds(before.year, before.month, before.day, before.hour, before.minute,
                            before.second)
    w_t = wall_seconds(t.year, t.month, t.day, t.hour, t.minute, t.second)
    if w_t - w_before <= 1:
        return False
    sched = expr._sched
    assert sched is not None
    nxt = sched.next_wall(before.year, before.month, before.day, before.hour, before.minute,
                          before.second + 1, t.year)
    return nxt is not None and wall_seconds(*nxt) <= w_t


@settings(max_examples=examples(250), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_next_prev_iter_between_invariants(data: st.DataObject) -> None:
    tz = data.draw(st.sampled_from(ZONES))
    text = data.draw(cron_text())
    try:
        expr = parse(text, tz)
    except CronSyntaxError as exc:
        assert "can never fire" in str(exc), exc
        return
    t = data.draw(instant(tz))
    fires = []
    for n in expr.iter(t):  # iter ends (does not raise) when nothing fires any more
        fires.append(n)
        if len(fires) == 5:
            break
    assume(fires)
    prev = t
    for i, n in enumerate(fires):
        assert utc(n) > utc(prev) and n.tzinfo is expr.tz
        assert utc(expr.next(prev)) == utc(n)
        # nothing fires strictly between two successive fire times
        if i:
            assert utc(expr.prev(n)) == utc(prev)
        if not expr.is_interval:
            assert _matches(expr, n) or (expr.wall_clock and _in_gap_end(expr, n)), n
        else:
            assert int(n.timestamp()) % int(expr.period.total_seconds()) == 0  # type: ignore[union-attr]
        prev = n
    p = expr.prev(fires[0])
    assert utc(p) <= utc(t) < utc(fires[0])
    assert utc(expr.next(p)) == utc(fires[0])
    iso = [f.isoformat() for f in fires]
    assert [f.isoformat() for f in expr.between(t, fires[-1])] == iso
    before_last = utc(fires[-1]) - timedelta(microseconds=1)  # instant arithmetic
    assert [f.isoformat() for f in expr.between(t, before_last)] == iso[:-1]


# -- differential test against cronsim -----------------------------------------------------------

DIFF_ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo",
              "UTC"]


def _cronsim_skipped_a_fire(sim: object, ours: datetime, theirs: datetime | None,
                            bound: datetime, forward: bool) -> bool:
    """cronsim defects seen by this test: stepping hours in UTC across a 30-minute DST change
    (Lord Howe) skips real fire times; reverse iteration picks the first pass of a repeated
    hour. Accept our answer only if it is a real fire time by cronsim's own field sets and
    lies strictly between the bound and cronsim's answer."""
    local = ours
    ok = (
        local.second in sim.seconds  # type: ignore[attr-defined]
        and local.minute in sim.minutes  # type: ignore[attr-defined]
        and local.hour in sim.hours  # type: ignore[attr-defined]
        and local.month in sim.months  # type: ignore[attr-defined]
        and sim.match_day(local.date())  # type: ignore[attr-defined]
    )
    if theirs is None:
        return ok
    if forward:
        return ok and utc(bound) < utc(ours) < utc(theirs)
    return ok and utc(theirs) < utc(ours) < utc(bound)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_differential_against_cronsim(data: st.DataObject) -> None:
    from cronsim import CronSim, CronSimError

    tz = data.draw(st.sampled_from(DIFF_ZONES))
    text = data.draw(cron_text(full=False))
    start = data.draw(instant(tz)).replace(microsecond=0)
    try:
        sim = CronSim(text, start)
    except CronSimError:
        assume(False)
        return
    try:
        expr = parse(text, tz)
    except CronSyntaxError as exc:  # we reject what can never fire; cronsim gives up later
        assert "can never fire" in str(exc)
        try:
            next(sim)
        except StopIteration:
            return
        raise AssertionError(f"cronsim fires {text!r}, we rejected it") from exc
    ours, t = [], start
    theirs = []
    for _ in range(4):
        try:
            w = next(sim)
        except StopIteration:
            break
        if utc(w) <= utc(theirs[-1] if theirs else start):
            assume(False)  # cronsim went backwards (fixed-time job started in a repeated hour)
        theirs.append(w)
        t = expr.next(t)
        ours.append(t)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        # cronsim may name the first instant after a gap by a local time inside the gap
        # (00:00-03:00 for 01:00-02:00): the same instant, spelled as a time that does not exist
        imaginary = b.astimezone(UTC).astimezone(b.tzinfo).replace(tzinfo=None) != b.replace(
            tzinfo=None
        )
        if imaginary and a.timestamp() == b.timestamp():
            continue
        if a != b or a.utcoffset() != b.utcoffset():
            bound = ours[i - 1] if i else start
            assert not expr.wall_clock and _cronsim_skipped_a_fire(sim, a, b, bound, True), (
                f"{text!r} {tz} from {start.isoformat()}: ours {[x.isoformat() for x in ours]} "
                f"cronsim {[x.isoformat() for x in theirs]}"
            )
            break
    # and one step backwards
    try:
        back = next(CronSim(text, start, reverse=True))
    except (StopIteration, CronSimError):
        return
    mine = expr.prev(start)
    if mine != back or mine.utcoffset() != back.utcoffset():
        assert not expr.wall_clock and _cronsim_skipped_a_fire(sim, mine, back, start, False), (
            f"prev {text!r} {tz} from {start.isoformat()}: ours {mine.isoformat()} "
            f"cronsim {back.isoformat()}"
        )


# -- the end of the calendar -----------------------------------------------------------------------


def _seconds_of(t: datetime) -> float:
    """The instant of ``t`` in seconds, computed without converting ``t`` (a late time of
    9999-12-31 in a zone behind UTC has no UTC datetime)."""
    off = t.utcoffset()
    assert off is not None
    wall = wall_seconds(t.year, t.month, t.day, t.hour, t.minute, t.second)
    return wall - off.total_seconds() + t.microsecond / 1e6


END_ZONES = [*ZONES, "Pacific/Kiritimati", "Pacific/Pago_Pago", "Pacific/Auckland"]


@FAST
@given(st.data())
def test_next_is_after_its_argument_up_to_the_calendars_end(data: st.DataObject) -> None:
    """next(t) > t always, or NoFireTimeError -- on the last days of year 9999 too, in a
    zone ahead of or behind UTC, with arguments in either zone."""
    tz = data.draw(st.sampled_from(END_ZONES))
    text = data.draw(st.one_of(
        cron_text(),
        st.sampled_from(["@daily", "*/5 * * * *", "0 12 * * *", "59 23 31 12 *", "30s", "1d",
                         "*/7 * * * * *", "0 0 L * *"]),
    ))
    try:
        expr = parse(text, tz)
    except CronSyntaxError:
        return
    zone = ZoneInfo(data.draw(st.sampled_from(["UTC", tz])))
    t = datetime(9999, 12, data.draw(st.integers(20, 31)), data.draw(st.integers(0, 23)),
                 data.draw(st.integers(0, 59)), data.draw(st.integers(0, 59)),
                 data.draw(st.sampled_from([0, 0, 500_000])), tzinfo=zone)
    got = expr.next_n(t, 4)
    for n in got:
        assert _seconds_of(n) > _seconds_of(t) and n.tzinfo is expr.tz, (text, tz, t, n)
        t = n
    if len(got) < 4:
        with pytest.raises(NoFireTimeError):
            expr.next(t)
