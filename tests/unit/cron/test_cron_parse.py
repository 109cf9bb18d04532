"""Grammar: what parses, what it means, and the exact error for what does not."""

from __future__ import annotations

import pickle
from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronfleet.cron import CronExpr, CronSyntaxError, parse
from cronfleet.cron.fields import DOM, DOW, HOUR, MINUTE, MONTH, parse_field


def values(fd, text):  # type: ignore[no-untyped-def]
    return sorted(parse_field(fd, text, text, 1).values)


@pytest.mark.parametrize(
    ("fd", "text", "want"),
    [
        (MINUTE, "*", list(range(60))),
        (MINUTE, "*/15", [0, 15, 30, 45]),
        (MINUTE, "5/15", [5, 20, 35, 50]),
        (MINUTE, "10-20/5", [10, 15, 20]),
        (MINUTE, "1,2,59", [1, 2, 59]),
        (MINUTE, "0-59/65", [0]),
        (HOUR, "22-2", [0, 1, 2, 22, 23]),
        (HOUR, "22-2/2", [0, 2, 22]),
        (HOUR, "4/6", [4, 10, 16, 22]),
        (MONTH, "JAN-MAR", [1, 2, 3]),
        (MONTH, "nov-feb", [1, 2, 11, 12]),
        (MONTH, "*/123", [1]),
        (DOW, "MON-FRI", [1, 2, 3, 4, 5]),
        (DOW, "FRI-MON", [0, 1, 5, 6]),
        (DOW, "7", [0]),
        (DOW, "5-7", [0, 5, 6]),
        (DOW, "7-2", [0, 1, 2]),
        (DOW, "*/2", [0, 2, 4, 6]),
        (DOW, "1/2", [0, 1, 3, 5]),  # 1..7 step 2 = MON WED FRI SUN
        (DOW, "?", list(range(7))),
        (DOM, "?", list(range(1, 32))),
        (DOM, "1-L/8", [1, 9, 17, 25]),
    ],
)
def test_field_values(fd, text, want):  # type: ignore[no-untyped-def]
    assert values(fd, text) == sorted(want)


def test_day_specials_are_parsed() -> None:
    spec = parse_field(DOM, "L,L-3,LW,15W,1", "x", 1)
    assert spec.last == {0, 3} and spec.last_weekday and spec.nearest == {15}
    assert spec.values == {1}
    spec = parse_field(DOW, "5L,MON#2,sun#5", "x", 1)
    assert spec.last_dow == {5} and spec.nth == {(1, 2), (0, 5)}


@pytest.mark.parametrize(
    ("expr", "field", "token", "column", "message"),
    [
        ("0 12 32 * *", "day-of-month", "32", 6,
         "day-of-month: '32' is out of range 1-31 (column 6)"),
        ("10 12 32 * *", "day-of-month", "32", 7,
         "day-of-month: '32' is out of range 1-31 (column 7)"),
        ("60 * * * *", "minute", "60", 1, None),
        ("* 24 * * *", "hour", "24", 3, None),
        ("* * * 13 *", "month", "13", 7, None),
        ("* * * * 8", "day-of-week", "8", 9, None),
        ("* * * * MON,FOO", "day-of-week", "FOO", 13, None),
        ("*/0 * * * *", "minute", "0", 3, "minute: step must be at least 1 (column 3)"),
        # a reversed range wraps in hours, months, weekdays only (docs/cron.md)
        ("50-5 * * * *", "minute", "50-5", 1,
         "minute: range '50-5' is reversed (50 > 5): write 5-50, or 50-59,0-5 for the values "
         "from 50 round to 5 (column 1)"),
        ("0 0 28-3 * *", "day-of-month", "28-3", 5, None),
        ("1 50-5/2 * * * *", "minute", "50-5", 3, None),
        ("1,,2 * * * *", "minute", "", 3, None),
        ("* * * * *,", "day-of-week", "", 11, None),
        ("* * * *", "expression", "*", 7, None),
        ("* * * * * * *", "expression", "*", 13, None),
        ("@fortnightly", "expression", "@fortnightly", 1, None),
        ("@daily *", "expression", "*", 8, None),
        ("* ? * * *", "hour", "?", 3, None),
        ("* * * * L", "day-of-week", "L", 9, None),
        ("* * L * 5#6", "day-of-week", "6", 11, None),
        ("* * 0W * *", "day-of-month", "0", 5, None),
        ("* * L-31 * *", "day-of-month", "31", 7, None),
        ("* * 1-2-3 * *", "day-of-month", "2-3", 7, None),
        ("1/2/3 * * * *", "minute", "1/2/3", 1, None),
        ("*/ * * * *", "minute", "*/", 1, None),
        ("/5 * * * *", "minute", "/5", 1, None),
        ("* * * * 1#", "day-of-week", "", 11, None),
        ("0 0 30 2 *", "day-of-month", "30", 5, None),
        ("0 0 31 4,6 *", "day-of-month", "31", 5, None),
        ("0 0 L-29 2 *", "day-of-month", "L-29", 5, None),
        ("0 0 * * 1#1 *", "month", "#", 10, None),  # 6 fields: '1#1' is the month
        ("٣ * * * *", "minute", "٣", 1, "minute: unexpected character '٣' (column 1)"),
        ("* * * * MOÑ", "day-of-week", "Ñ", 11, None),
        ("9" * 5000 + " * * * *", "minute", "9" * 5000, 1, None),
        ("", "expression", "", 1, None),
        ("   ", "expression", "   ", 1, None),
        ("0s", "interval", "0s", 1, None),
        ("@every", "interval", "", 1, None),
        ("@every 1x", "interval", "1x", 8, None),
        ("@every 1.5s", "interval", "1.5s", 8, None),
        ("@every 500ms", "interval", "500ms", 8, None),
    ],
)
def test_errors_name_field_token_column(expr, field, token, column, message):  # type: ignore[no-untyped-def]
    with pytest.raises(CronSyntaxError) as info:
        parse(expr)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.field, err.column) == (field, column), str(err)
    if field != "expression" or token:
        assert err.token == token, str(err)
    assert err.expr == expr
    assert f"(column {column})" in str(err)
    assert str(err).startswith(f"{field}: ")
    if message is not None:
        assert str(err) == message


def test_unknown_zone_names_the_zone() -> None:
    with pytest.raises(CronSyntaxError, match="Mars/Olympus") as info:
        parse("* * * * *", tz="Mars/Olympus")
    assert info.value.field == "timezone" and info.value.token == "Mars/Olympus"
    for bad in ("", "../etc/passwd", "/etc/localtime", "Europe", "UTC\x00"):
        with pytest.raises(CronSyntaxError):
            parse("* * * * *", tz=bad)


def test_tz_accepts_name_zoneinfo_and_utc() -> None:
    assert parse("* * * * *", "Europe/Paris").tz is ZoneInfo("Europe/Paris")
    assert parse("* * * * *", ZoneInfo("Asia/Tokyo")).tz is ZoneInfo("Asia/Tokyo")
    assert parse("* * * * *").tz is ZoneInfo("UTC")
    assert CronExpr("* * * * *", UTC).tz == ZoneInfo("UTC")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CronExpr("* * * * *", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse(None)  # type: ignore[arg-type]


def test_macros_expand() -> None:
    assert parse("@yearly") == parse("0 0 1 1 *") == parse("@ANNUALLY")
    assert parse("@monthly") == parse("0 0 1 * *")
    assert parse("@Weekly") == parse("0 0 * * 0") == parse("0 0 * * 7") == parse("0 0 * * SUN")
    assert parse("@daily") == parse("@midnight") == parse("0 0 * * *")
    assert parse("@hourly") == parse("0 * * * *")
    assert parse("@hourly").wall_clock is False
    assert parse("@daily").wall_clock is True


def test_intervals() -> None:
    e = parse("@every 1h30m")
    assert e.is_interval and e.period == timedelta(hours=1, minutes=30) and e.fields == 0
    assert parse("30s").period == timedelta(seconds=30)
    assert parse("5m").period == timedelta(minutes=5)
    assert parse("2h").period == timedelta(hours=2)
    assert parse("1d").period == timedelta(days=1)
    assert parse("@every 90").period == timedelta(seconds=90)
    assert parse("@every 1h 30m") == parse("@every 90m")
    assert not parse("* * * * *").is_interval and parse("* * * * *").period is None


def test_wall_clock_rule_matches_cronie() -> None:
    """Fixed-time = 5 fields whose minute and hour fields do not start with '*'."""
    fixed = ["30 2 * * *", "0-30 2 * * *", "0,30 2 * * *", "0/15 2 * * *", "0 1-5/2 * * *",
             "0 0 1 * *"]
    elastic = ["*/30 2 * * *", "0 */2 * * *", "0 * * * *", "* 2 * * *", "0 30 2 * * *"]
    for text in fixed:
        assert parse(text).wall_clock, text
    for text in elastic:
        assert not parse(text).wall_clock, text


def test_expr_is_immutable_hashable_and_pickles() -> None:
    e = parse("30 2 * * *", tz="Europe/Paris")
    assert e.expr == "30 2 * * *" and e.fields == 5
    assert repr(e) == "CronExpr('30 2 * * *', tz='Europe/Paris')"
    assert str(e) == "30 2 * * *"
    with pytest.raises(AttributeError):
        e.expr = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del e.tz
    assert hash(e) == hash(CronExpr("30 2 * * *", "Europe/Paris"))
    assert e == CronExpr("30  2 * * ?", "Europe/Paris")
    assert e != parse("30 2 * * *")  # other zone
    assert e != parse("0 30 2 * * *", "Europe/Paris")  # 6 fields: elapsed time, not wall clock
    assert len({e, CronExpr("30 2 * * *", "Europe/Paris")}) == 1
    assert pickle.loads(pickle.dumps(e)) == e
    assert parse("30 2 * * *", tz="Europe/Paris") is e  # cached
    err = CronSyntaxError("minute", "x", 1, "x * * * *", "bad")
    assert pickle.loads(pickle.dumps(err)).column == 1


def test_whitespace_and_case() -> None:
    assert parse("\t0  0\n* *  mon ") == parse("0 0 * * MON")
    assert parse("0 0 l * *") == parse("0 0 L * *")
    assert parse("0 0 15w * *") == parse("0 0 15W * *")
    assert parse("0 0 * * fri#2") == parse("0 0 * * 5#2")
