"""Time: cron grammar, next/prev fire times, DST rules, intervals, descriptions.

    >>> from datetime import datetime, timezone
    >>> from cronfleet.cron import parse
    >>> expr = parse("30 2 * * *", tz="Europe/Paris")
    >>> expr.next(datetime(2024, 3, 30, 12, tzinfo=timezone.utc)).isoformat()
    '2024-03-31T03:00:00+02:00'

See docs/cron.md for the grammar and the DST rules.
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError, NoFireTimeError
from .expr import CronExpr

__all__ = [
    "AnySchedule",
    "ComposedSchedule",
    "CronExpr",
    "CronSyntaxError",
    "Exclusion",
    "NoFireTimeError",
    "compose",
    "parse",
    "parse_composed",
    "parse_exclusion",
    "parse_instant",
]


@lru_cache(maxsize=4096)
def _parse_cached(expr: str, tz: str | ZoneInfo) -> CronExpr:
    return CronExpr(expr, tz)


def parse(expr: str, tz: str | ZoneInfo = "UTC") -> CronExpr:
    """Parse a cron expression, macro or interval, bound to time zone ``tz``.

    ``tz`` is an IANA name (``"Europe/Paris"``) or a ``ZoneInfo``; the default is UTC.
    Raises :class:`CronSyntaxError` (a ``ValueError``) for any text that is not a valid
    schedule and for an unknown zone. Results are cached: parsing the same text twice is
    cheap and returns the same immutable object.
    """
    if isinstance(expr, str) and isinstance(tz, str | ZoneInfo):
        return _parse_cached(expr, tz)
    return CronExpr(expr, tz)


# the composition (several expressions, a one-off, bounds, exclusions); imported after
# parse() is defined, which it uses
from .compose import (  # noqa: E402
    ComposedSchedule,
    Exclusion,
    compose,
    parse_composed,
    parse_exclusion,
    parse_instant,
)

AnySchedule = CronExpr | ComposedSchedule
"""What a job's ``schedule`` is: a plain expression, or a composition of several."""
