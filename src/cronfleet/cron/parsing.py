"""The cached cron parser (:func:`parse`), below every module that reads schedules."""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo

from .expr import CronExpr

__all__ = ["parse"]


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
