"""English descriptions: cron-descriptor's wording, our text where it is wrong or silent."""

from __future__ import annotations

import pytest

from cronfleet.cron import describe as describe_mod
from cronfleet.cron import parse


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("30 2 * * *", "At 02:30 every day"),
        ("@daily", "At 00:00 every day"),
        ("0 30 2 * * *", "At 02:30 every day"),
        ("*/5 * * * *", "Every 5 minutes"),
        ("@hourly", "Every hour"),
        ("*/10 * * * * *", "Every 10 seconds"),
        ("0 9-17 * * 1-5", "At 0 minutes past the hour, between 09:00 and 17:59, "
                           "Monday through Friday"),
        ("0 22-2 * * *", "At 0 minutes past the hour, between 22:00 and 02:59"),
        # day-of-month AND/OR: the connector is ours
        ("0 0 */2 * MON", "At 00:00, every 2 days, but only on Monday"),
        ("0 0 1,15 * MON-FRI", "At 00:00, on day 1 and 15 of the month, or Monday through Friday"),
        ("0 0 1 * MON", "At 00:00, on day 1 of the month, or on Monday"),
        # specials in lists, steps in day-of-week: our phrases
        ("0 0 1,L * *", "At 00:00, on day 1 and the last day of the month"),
        ("0 0 15W,L * *", "At 00:00, on the weekday nearest day 15 and the last day of the month"),
        ("0 0 L-1 * *", "At 00:00, on the day before the last day of the month"),
        ("0 0 * * 1#1,5L", "At 00:00, on the first Monday of the month and the last Friday of "
                           "the month"),
        ("0 0 * * FRI/2", "At 00:00, only on Sunday and Friday"),
        ("0 0 * * FRI-MON", "At 00:00, only on Sunday, Monday, Friday and Saturday"),
        # cron-descriptor's own wording for what it handles
        ("0 0 L * *", "At 00:00, on the last day of the month"),
        ("0 0 LW * *", "At 00:00, on the last weekday of the month"),
        ("0 0 * * 5L", "At 00:00, on the last Friday of the month"),
        ("0 0 * 2 MON#5", "At 00:00, on the fifth Monday of the month, only in February"),
        ("0 0 29 2 *", "At 00:00, on day 29 of the month, only in February"),
        ("0 0 * NOV-FEB *", "At 00:00, only in January, February, November, and December"),
        # intervals: ours
        ("@every 1h30m", "Every 1h30m (slots counted from 1970-01-01 00:00 UTC)"),
        ("45s", "Every 45s (slots counted from 1970-01-01 00:00 UTC)"),
    ],
)
def test_describe(expr: str, text: str) -> None:
    assert parse(expr).describe() == text


def test_describe_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object) -> str:
        raise RuntimeError("library failure")

    monkeypatch.setattr(describe_mod, "_descriptor", boom)
    assert parse("7 7 7 7 *").describe() == "Cron schedule '7 7 7 7 *'"
