"""Durations: the spellings accepted everywhere (options, config, API) and the clear
errors for everything else -- including numbers too large for a timedelta."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from cronfleet.cron.duration import DurationError, format_duration, parse_duration, to_timedelta


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("1h30m", 5400), ("2h 30m", 9000), ("10 minutes", 600),
    ("1.5h", 5400), ("250ms", 0.25), ("1d", 86400), ("1w", 604800),
])
def test_spellings(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds
    assert to_timedelta(text).total_seconds() == seconds


def test_numbers_and_timedeltas() -> None:
    assert to_timedelta(90) == timedelta(seconds=90)
    assert to_timedelta(0.5) == timedelta(milliseconds=500)
    assert to_timedelta(timedelta(minutes=2)) == timedelta(minutes=2)


@pytest.mark.parametrize(("value", "message"), [
    (-5, "timeout: must not be negative (got -5)"),
    (-2.5e16, "timeout: must not be negative (got -2.5e+16)"),
    (1e300, "timeout: longer than 100 years (got 1e+300 seconds)"),
    (2**80, "timeout: longer than 100 years (got 1208925819614629174706176 seconds)"),
    (math.nan, "timeout: expected a finite number of seconds, got nan"),
    (math.inf, "timeout: expected a finite number of seconds, got inf"),
    (True, "timeout: expected a duration, got True"),
])
def test_out_of_range_numbers_are_clear_errors(value: float, message: str) -> None:
    # timedelta(seconds=2**80) raises OverflowError; callers must only ever see DurationError
    with pytest.raises(DurationError) as info:
        to_timedelta(value, field="timeout")
    assert str(info.value) == message


def test_bad_text_names_the_column() -> None:
    with pytest.raises(DurationError, match="column 3"):
        to_timedelta("10x", field="jitter")


def test_format_round_trips() -> None:
    for text in ("1h30m", "2d", "45s", "1d2h3m4s"):
        assert format_duration(parse_duration(text)) == text
