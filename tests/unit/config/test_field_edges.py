"""#24 item 7 in a config file and the library: a reversed range in minutes or days of the
month is refused at its line and column like every cron error; ``auto_pause_after`` past
1,000 is refused naming the key (the library's ``Job.create`` too); a lower-case method is
the method."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronfleet import Job
from cronfleet.cron import CronSyntaxError, parse
from cronfleet.spec import validate_job

from .test_config_file import HANDLERS, TASK, problems


def test_a_reversed_range_in_a_file_names_line_field_and_column(
    write: Callable[..., Path]
) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", TASK.replace('"5m"', '"0 5-1 * * * *"'))
    assert problems(path) == [
        f"{path}:3:11: task 'gc': cron: minute: range '5-1' is reversed (5 > 1): write 1-5, "
        "or 5-59,0-1 for the values from 5 round to 1 (column 3)"]


def test_reversed_ranges_refused_where_they_mean_nothing() -> None:
    with pytest.raises(CronSyntaxError) as got:
        parse("5-1 * * * *")
    assert (got.value.field, got.value.column, got.value.token) == ("minute", 1, "5-1")
    for expr, field in (("0 0 25-5 * *", "day-of-month"), ("50-10 * * * * *", "second")):
        with pytest.raises(CronSyntaxError, match=f"^{field}: range"):
            parse(expr)
    # the wraps operators mean: the night, the weekend, the winter
    night = parse("0 22-2 * * *")
    assert night.next(datetime(2026, 1, 1, 3, tzinfo=UTC)) == datetime(2026, 1, 1, 22,
                                                                         tzinfo=UTC)
    parse("0 0 * * FRI-MON")
    parse("0 0 1 NOV-FEB *")


def test_auto_pause_after_past_its_maximum_is_refused_everywhere() -> None:
    with pytest.raises(ValueError, match="auto_pause_after: expected a whole number from 1 "
                                          "to 1000"):
        Job.create("5m", lambda ctx: None, id="x", auto_pause_after=10**30)
    assert Job.create("5m", lambda ctx: None, id="x", auto_pause_after=1000) \
        .auto_pause_after == 1000


def test_a_lower_case_method_is_the_method() -> None:
    result, problems_ = validate_job({"id": "h", "schedule": "5m",
                                      "http": {"url": "https://h/x", "method": "post"}},
                                     require_http=True)
    assert problems_ == [] and result is not None and result.http is not None
    assert result.http.method == "POST"
