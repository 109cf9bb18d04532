"""``CronExpr``: a parsed schedule bound to a time zone, and its next/prev/iter/between.

How a fire time is found
------------------------
1. The search runs in wall-clock time (:mod:`.schedule`), field by field.
2. The local day of the bound and of the candidate are looked up in the zone's day cache
   (:mod:`.zones`). On a *clean* day (one UTC offset all day, no gap, no repeat) the wall
   time *is* the answer: ``datetime(Y, M, D, h, m, s, tzinfo=tz)``.
3. Only around a UTC-offset change does the exact (slower) path run:

   * fixed-time jobs (5 fields, minute and hour not starting with ``*``) fire at
     ``resolve(W)``, the first instant whose wall time is >= W: a time skipped by a
     spring-forward gap fires when the gap ends, a repeated time fires once (first pass);
   * every other job fires at each instant whose wall time matches: skipped times do not
     fire, repeated times fire in both passes.

All instants are whole seconds; ``after``/``before`` may carry microseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

from .describe import describe, explain
from .errors import NoFireTimeError
from .parser import CronForm, IntervalForm, parse_text, resolve_tz
from .schedule import Wall, WallSchedule
from .sequence import FireTimes, floor_ts, naive_error
from .zones import MIN_INSTANT, Window, ZoneDays, wall_fields, wall_seconds, zone_days

__all__ = ["CronExpr"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_SEARCH_YEARS = 400  # the Gregorian calendar repeats every 400 years


class CronExpr(FireTimes):
    """An immutable, hashable schedule. Build it with :func:`cronfleet.cron.parse`.

    Attributes:
        expr: the expression text as given.
        tz: the ``ZoneInfo`` fire times are computed and returned in.
        is_interval: ``True`` for ``30s`` / ``@every 1h30m`` style schedules.
        period: the interval as a ``timedelta`` (``None`` for cron expressions).
        wall_clock: ``True`` for fixed-time jobs that follow the wall clock across DST
            changes (5 fields, minute and hour not starting with ``*``).
        fields: 5 or 6 for cron expressions (macros count as 5), 0 for intervals.
    """

    __slots__ = (
        "_days",
        "_form",
        "_key",
        "_period_s",
        "_sched",
        "_zd",
        "expr",
        "fields",
        "is_interval",
        "period",
        "tz",
        "wall_clock",
    )

    expr: str
    tz: ZoneInfo
    is_interval: bool
    period: timedelta | None
    wall_clock: bool
    fields: int
    _form: CronForm | IntervalForm
    _sched: WallSchedule | None
    _zd: ZoneDays
    _days: dict[int, int | Window]
    _period_s: int
    _key: tuple[object, ...]

    def __init__(self, expr: str, tz: str | ZoneInfo = "UTC") -> None:
        form = parse_text(expr)
        zone = resolve_tz(tz, expr)
        zd = zone_days(zone)
        setter = object.__setattr__
        setter(self, "expr", expr)
        setter(self, "tz", zone)
        setter(self, "_form", form)
        setter(self, "_zd", zd)
        setter(self, "_days", zd.days)
        tz_key: object = zone.key if zone.key is not None else zone
        if isinstance(form, IntervalForm):
            setter(self, "is_interval", True)
            setter(self, "period", timedelta(seconds=form.seconds))
            setter(self, "_period_s", form.seconds)
            setter(self, "_sched", None)
            setter(self, "wall_clock", False)
            setter(self, "fields", 0)
            setter(self, "_key", ("every", form.seconds, tz_key))
        else:
            sched = form.schedule
            setter(self, "is_interval", False)
            setter(self, "period", None)
            setter(self, "_period_s", 0)
            setter(self, "_sched", sched)
            setter(self, "wall_clock", form.wallclock)
            setter(self, "fields", form.nfields)
            setter(
                self,
                "_key",
                (
                    "cron",
                    sched.seconds,
                    sched.minutes,
                    sched.hours,
                    sched.months,
                    sched.days_signature(),
                    form.wallclock,
                    tz_key,
                ),
            )

    # -- value semantics ---------------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CronExpr is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"CronExpr is immutable (cannot delete {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CronExpr):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"CronExpr({self.expr!r}, tz={str(self.tz)!r})"

    def __str__(self) -> str:
        return self.expr

    def __reduce__(self) -> tuple[type[CronExpr], tuple[str, str | ZoneInfo]]:
        return (CronExpr, (self.expr, self.tz.key if self.tz.key is not None else self.tz))

    # -- public API ----------------------------------------------------------------------------

    def next(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (an aware datetime), in ``tz``."""
        tz = self.tz
        if after.tzinfo is not tz:
            if after.tzinfo is None or after.utcoffset() is None:
                naive_error("after", after)
            try:
                after = after.astimezone(tz)
            except OverflowError:
                if after.year < 9999:
                    raise  # before the calendar's start in this zone
                self._none_after(after)  # past the calendar's end in this zone
        if self._period_s:
            return self._every_next(after)
        y = after.year
        mo = after.month
        d = after.day
        days = self._days
        info = days.get(y * 512 + mo * 32 + d)
        if info is None:
            info = self._zd.info(y, mo, d)
        ylimit = y + _SEARCH_YEARS if y < 9999 - _SEARCH_YEARS else 9999
        if info.__class__ is int:
            h = after.hour
            mi = after.minute
            s = after.second
            sched = self._sched
            assert sched is not None
            w = sched.next_wall(y, mo, d, h, mi, s + 1, ylimit)
            if w is None:
                self._none_after(after)
            info2 = days.get(w[0] * 512 + w[1] * 32 + w[2])
            if info2 is None:
                info2 = self._zd.info(w[0], w[1], w[2])
            if info2.__class__ is int:
                return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, tz)
            # the candidate's day has an offset change: take the exact path
            if self.wall_clock:
                assert isinstance(info2, Window)
                return self._guard(self._resolve, w, info2)
            assert isinstance(info, int)
            lo = wall_seconds(y, mo, d, h, mi, s) + 1 - info
            return self._guard(self._rt_next, lo, ylimit, after)
        assert isinstance(info, Window)
        a = floor_ts(after)
        if self.wall_clock:
            hwm = info.high_water(a)
            return self._guard(self._wc_next, hwm, ylimit, after)
        return self._guard(self._rt_next, a + 1, ylimit, after)

    def prev(self, before: datetime) -> datetime:
        """The last fire time strictly before ``before`` (an aware datetime), in ``tz``."""
        tz = self.tz
        if before.tzinfo is not tz:
            if before.tzinfo is None or before.utcoffset() is None:
                naive_error("before", before)
            before = before.astimezone(tz)
        if self._period_s:
            return self._every_prev(before)
        y = before.year
        mo = before.month
        d = before.day
        h = before.hour
        mi = before.minute
        s = before.second
        if not before.microsecond:
            s -= 1  # the bound is exclusive: the last candidate second is one earlier
        days = self._days
        info = days.get(y * 512 + mo * 32 + d)
        if info is None:
            info = self._zd.info(y, mo, d)
        if s < 0 and not (h or mi) and info.__class__ is int:
            # exactly midnight: the candidate second belongs to the previous day
            prev_day = before.date() - timedelta(days=1) if y > 1 or mo > 1 or d > 1 else None
            if prev_day is None:
                self._none_before(before)
            info_prev = self._zd.info(prev_day.year, prev_day.month, prev_day.day)
            if info_prev.__class__ is not int:
                info = info_prev
        ylimit = y - _SEARCH_YEARS if y > 1 + _SEARCH_YEARS else 1
        if info.__class__ is int:
            sched = self._sched
            assert sched is not None
            w = sched.prev_wall(y, mo, d, h, mi, s, ylimit)
            if w is None:
                self._none_before(before)
            info2 = days.get(w[0] * 512 + w[1] * 32 + w[2])
            if info2 is None:
                info2 = self._zd.info(w[0], w[1], w[2])
            if info2.__class__ is int:
                return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, tz)
            if self.wall_clock:
                assert isinstance(info2, Window)
                return self._guard(self._resolve, w, info2)
            assert isinstance(info, int)
            hi = wall_seconds(y, mo, d, h, mi, s) - info
            return self._guard(self._rt_prev, hi, ylimit, before)
        hi = -((_EPOCH - before) // _SECOND) - 1  # ceil(before) - 1
        if self.wall_clock:
            win = info if isinstance(info, Window) else None
            return self._guard(self._wc_prev, hi, win, ylimit, before)
        return self._guard(self._rt_prev, hi, ylimit, before)

    def describe(self) -> str:
        """An English description, e.g. ``"At 02:30 every day"``. Never raises."""
        return describe(self._form, self.expr)

    def explain(self) -> dict[str, object]:
        """Fields, values, day rule and DST rule as JSON-ready data (used by the CLI)."""
        return explain(self._form, self.expr, self.tz)

    # -- exact paths ---------------------------------------------------------------------------

    def _guard(self, fn: Any, *args: Any) -> datetime:
        try:
            result: datetime = fn(*args)
        except (OverflowError, ValueError) as exc:  # the calendar's edges (years 1 and 9999)
            raise NoFireTimeError(
                f"{self.expr!r}: no fire time inside the supported calendar range"
            ) from exc
        return result

    def _none_after(self, after: datetime) -> NoReturn:
        raise NoFireTimeError(
            f"{self.expr!r} in {self.tz}: no fire time after {after.isoformat()} "
            f"within {_SEARCH_YEARS} years (or before year 10000)"
        )

    def _none_before(self, before: datetime) -> NoReturn:
        raise NoFireTimeError(
            f"{self.expr!r} in {self.tz}: no fire time before {before.isoformat()} "
            f"within {_SEARCH_YEARS} years (or after year 0)"
        )

    def _at(self, u: int) -> datetime:
        return datetime.fromtimestamp(u, self.tz)

    def _resolve(self, w: Wall, win: Window) -> datetime:
        return self._at(win.resolve(wall_seconds(*w)))

    def _wc_next(self, hwm: int, ylimit: int, after: datetime) -> datetime:
        """Fixed-time job: resolve(first matching wall time > hwm)."""
        sched = self._sched
        assert sched is not None
        y, mo, d, h, mi, s = wall_fields(hwm + 1)
        w = sched.next_wall(y, mo, d, h, mi, s, ylimit)
        if w is None:
            self._none_after(after)
        info = self._zd.info(w[0], w[1], w[2])
        if isinstance(info, int):
            return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, self.tz)
        return self._resolve(w, info)

    def _wc_prev(self, hi: int, win: Window | None, ylimit: int, before: datetime) -> datetime:
        """Fixed-time job: resolve(last matching wall time <= high-water mark at hi)."""
        sched = self._sched
        assert sched is not None
        if win is None or not win.start <= hi < win.end:
            o = self._zd.offset_at(hi)
            y, mo, d, _, _, _ = wall_fields(hi + o)
            info = self._zd.info(y, mo, d)
            hwm = hi + o if isinstance(info, int) else info.high_water(hi)
        else:
            hwm = win.high_water(hi)
        y, mo, d, h, mi, s = wall_fields(hwm)
        w = sched.prev_wall(y, mo, d, h, mi, s, ylimit)
        if w is None:
            self._none_before(before)
        info2 = self._zd.info(w[0], w[1], w[2])
        if isinstance(info2, int):
            return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, self.tz)
        return self._resolve(w, info2)

    def _rt_next(self, lo: int, ylimit: int, after: datetime) -> datetime:
        """Elapsed-time job: the first instant >= lo whose wall time matches."""
        sched = self._sched
        assert sched is not None
        zd = self._zd
        while True:
            if lo >= zd.last:  # the zone's windows end there (exclusive): the calendar's end
                self._none_after(after)
            o = zd.offset_at(lo)
            f = wall_fields(lo + o)
            info = zd.info(f[0], f[1], f[2])
            if isinstance(info, int):
                w = sched.next_wall(*f, ylimit)
                if w is None:
                    self._none_after(after)
                win = zd.info(w[0], w[1], w[2])
                if isinstance(win, int):
                    return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, self.tz)
            else:
                win = info
            if lo < win.start == MIN_INSTANT:
                self._none_after(after)  # the window was clamped at the calendar's start
            for a, b, off in win.segs:
                if b <= lo:
                    continue
                start = a if a > lo else lo
                w = sched.next_wall(*wall_fields(start + off), ylimit)
                if w is None:
                    self._none_after(after)
                u = wall_seconds(*w) - off
                if u < b:
                    return self._at(u)
            lo = win.end

    def _rt_prev(self, hi: int, ylimit: int, before: datetime) -> datetime:
        """Elapsed-time job: the last instant <= hi whose wall time matches."""
        sched = self._sched
        assert sched is not None
        zd = self._zd
        while True:
            if hi < MIN_INSTANT:
                self._none_before(before)
            o = zd.offset_at(hi)
            f = wall_fields(hi + o)
            info = zd.info(f[0], f[1], f[2])
            if isinstance(info, int):
                w = sched.prev_wall(*f, ylimit)
                if w is None:
                    self._none_before(before)
                win = zd.info(w[0], w[1], w[2])
                if isinstance(win, int):
                    return datetime(w[0], w[1], w[2], w[3], w[4], w[5], 0, self.tz)
            else:
                win = info
            for a, b, off in reversed(win.segs):
                if a > hi:
                    continue
                top = b - 1 if b - 1 < hi else hi
                w = sched.prev_wall(*wall_fields(top + off), ylimit)
                if w is None:
                    self._none_before(before)
                u = wall_seconds(*w) - off
                if u >= a:
                    return self._at(u)
            hi = win.start - 1

    # -- intervals -------------------------------------------------------------------------------

    def _every_next(self, after: datetime) -> datetime:
        p = self._period_s
        n = (floor_ts(after) // p + 1) * p
        try:
            return datetime.fromtimestamp(n, self.tz)
        except (OverflowError, ValueError, OSError) as exc:
            raise NoFireTimeError(f"{self.expr!r}: next slot is past year 9999") from exc

    def _every_prev(self, before: datetime) -> datetime:
        p = self._period_s
        hi = -((_EPOCH - before) // _SECOND) - 1  # ceil(before) - 1
        n = (hi // p) * p
        try:
            return datetime.fromtimestamp(n, self.tz)
        except (OverflowError, ValueError, OSError) as exc:
            raise NoFireTimeError(f"{self.expr!r}: previous slot is before year 1") from exc
