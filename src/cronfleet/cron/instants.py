"""Instants as a schedule's ``at`` / ``start`` / ``end`` give them
(:func:`parse_instant`), below both the composition (:mod:`.compose`) and the sentences
(:mod:`.words`, whose one-offs are read as ``at`` reads an instant)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError
from .parser import resolve_tz
from .sequence import floor_ts

__all__ = ["day_start", "parse_instant"]


def day_start(day: date, tz: ZoneInfo) -> int:
    """The first instant of local ``day`` in ``tz`` (a midnight in a DST gap: the gap's
    end), as epoch seconds."""
    return floor_ts(datetime.combine(day, time(0), tzinfo=tz))


def parse_instant(value: object, tz: str | ZoneInfo = "UTC", *, field: str = "at",
                  end_of_day: bool = False) -> datetime:
    """An instant for ``at``/``start``/``end``: an aware datetime, or ISO 8601 text with an
    offset (``2026-12-24T18:00:00+01:00``); without one it is read in ``tz`` (a repeated
    local time: its first pass). A date (``2026-12-24``) is that day's first instant, or
    with ``end_of_day`` its last second. Fire times are whole seconds: a fraction is
    refused. Raises :class:`CronSyntaxError`."""
    zone = resolve_tz(tz, "")
    raw = value
    if isinstance(value, str):
        text = value.strip()
        try:
            value = date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
        except ValueError:
            raise CronSyntaxError(
                field, str(raw), 1, str(raw),
                f"{raw!r} is not an ISO 8601 date-time (e.g. 2026-12-24T18:00:00+01:00) "
                "or date (2026-12-24)") from None
    if isinstance(value, datetime):
        if value.microsecond:
            raise CronSyntaxError(field, str(raw), None, str(raw),
                                  f"{value.isoformat()}: fire times are whole seconds")
        if value.tzinfo is None or value.utcoffset() is None:
            value = value.replace(tzinfo=zone)
        try:
            return value.astimezone(zone)
        except (OverflowError, ValueError):
            raise CronSyntaxError(field, str(raw), None, str(raw),
                                  f"{value.isoformat()} is outside the calendar") from None
    if isinstance(value, date):
        if end_of_day:
            if value == date.max:
                return datetime.combine(value, time(23, 59, 59), tzinfo=zone)
            nxt = day_start(value + timedelta(days=1), zone) - 1
            return datetime.fromtimestamp(nxt, zone)
        return datetime.fromtimestamp(day_start(value, zone), zone)
    raise CronSyntaxError(field, repr(raw), None, repr(raw),
                          f"expected an ISO 8601 date-time or date, got {type(raw).__name__}")
