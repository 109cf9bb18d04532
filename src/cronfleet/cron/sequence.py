"""What every schedule derives from its ``next``: several fire times, an iterator, a range.

:class:`FireTimes` is the one implementation for a plain expression
(:class:`~cronfleet.cron.CronExpr`) and a composition
(:class:`~cronfleet.cron.compose.ComposedSchedule`): a schedule defines ``next(after)``,
raising :class:`NoFireTimeError` where it has no further fire, and inherits the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from time import monotonic
from typing import Any, NoReturn

from .errors import NoFireTimeError

__all__ = ["FireTimes", "floor_ts", "naive_error"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


def naive_error(name: str, value: Any) -> NoReturn:
    """The error for a bound that is not an aware datetime."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    raise ValueError(
        f"{name} must be timezone-aware (got naive {value.isoformat()}); "
        "attach a zone, e.g. datetime.now(timezone.utc)"
    )


def floor_ts(dt: datetime) -> int:
    """Whole seconds since the epoch, rounded down (exact, no float): compares instants,
    where datetimes sharing a tzinfo compare by wall time and ignore ``fold``."""
    return (dt - _EPOCH) // _SECOND


class FireTimes:
    """``next_n``, ``iter`` and ``between`` on top of a schedule's ``next``."""

    __slots__ = ()

    def next(self, after: datetime) -> datetime:  # pragma: no cover - always overridden
        raise NotImplementedError

    def next_n(self, after: datetime, n: int, *, budget: float | None = None
               ) -> list[datetime]:
        """Up to ``n`` successive fire times strictly after ``after``: fewer, or none, when
        the schedule has no further fire (where :meth:`next` raises ``NoFireTimeError``:
        an expression that can never fire again, a one-off past, an ``end`` reached, the
        calendar's end). Never raises for that; use it wherever "the next few fire times"
        are shown or queued. ``budget``: stop early, with at least one time, after that many
        seconds of search (a preview answering a request)."""
        out: list[datetime] = []
        t = after
        stop = None if budget is None else monotonic() + budget
        for _ in range(n):
            if stop is not None and out and monotonic() > stop:
                break
            try:
                t = self.next(t)
            except NoFireTimeError:
                break
            out.append(t)
        return out

    def iter(self, after: datetime) -> Iterator[datetime]:
        """Successive fire times strictly after ``after`` (ends with the schedule)."""
        t = after
        while True:
            try:
                t = self.next(t)
            except NoFireTimeError:
                return
            yield t

    def between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Fire times ``t`` with ``start < t <= end``, in order (a lazy iterator)."""
        if end.tzinfo is None or end.utcoffset() is None:
            naive_error("end", end)
        last = floor_ts(end)
        for t in self.iter(start):
            if floor_ts(t) > last:
                return
            yield t
