"""The wall-clock search as it was before its tables were shared (kept for the tests only).

A verbatim copy of ``cronfleet/cron/schedule.py``'s ``WallSchedule`` before the change that
moved every table into shared, content-interned objects: per-expression next/prev tables,
28 month shapes built per expression and a per-expression ``(year, month)`` cache.
``test_cron_sharing.py`` checks that the shared engine answers exactly as this one.
"""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

from datetime import date

from cronfleet.cron.fields import FieldSpec

__all__ = ["MonthShape", "WallSchedule", "days_in_month", "first_weekday"]

_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# (next-day table, previous-day table, matching days)
MonthShape = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

Wall = tuple[int, int, int, int, int, int]


def days_in_month(year: int, month: int) -> int:
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _DAYS_IN_MONTH[month]


def first_weekday(year: int, month: int) -> int:
    """Cron weekday (0 = Sunday) of the 1st of the month."""
    return (date(year, month, 1).weekday() + 1) % 7


def _next_table(allowed: frozenset[int] | set[int], size: int) -> tuple[int, ...]:
    """t[i] = smallest allowed value >= i, or -1; indices 0..size."""
    out = [-1] * (size + 1)
    nxt = -1
    for i in range(size, -1, -1):
        if i in allowed:
            nxt = i
        out[i] = nxt
    return tuple(out)


def _prev_table(allowed: frozenset[int] | set[int], size: int) -> tuple[int, ...]:
    """t[i + 1] = largest allowed value <= i, or -1; indices -1..size-1 shifted by one."""
    out = [-1] * (size + 1)
    prv = -1
    for i in range(0, size):
        if i in allowed:
            prv = i
        out[i + 1] = prv
    return tuple(out)


class WallSchedule:
    """Matching rules for one expression, in wall-clock terms."""

    __slots__ = (
        "_dom",
        "_dow",
        "_first_month",
        "_last_month",
        "_mcache",
        "_nhour",
        "_nmin",
        "_nmon",
        "_nsec",
        "_phour",
        "_pmin",
        "_pmon",
        "_psec",
        "_shapes",
        "day_and",
        "hours",
        "minutes",
        "months",
        "seconds",
    )

    def __init__(
        self,
        seconds: FieldSpec,
        minutes: FieldSpec,
        hours: FieldSpec,
        dom: FieldSpec,
        months: FieldSpec,
        dow: FieldSpec,
    ) -> None:
        self.seconds = tuple(sorted(seconds.values))
        self.minutes = tuple(sorted(minutes.values))
        self.hours = tuple(sorted(hours.values))
        self.months = tuple(sorted(months.values))
        self._dom = dom
        self._dow = dow
        # Vixie/cronie: AND when either day field starts with '*' (or '?'), else OR.
        self.day_and = dom.star or dow.star
        self._nsec = _next_table(seconds.values, 60)
        self._nmin = _next_table(minutes.values, 60)
        self._nhour = _next_table(hours.values, 24)
        self._nmon = _next_table(months.values, 13)
        self._psec = _prev_table(seconds.values, 60)
        self._pmin = _prev_table(minutes.values, 60)
        self._phour = _prev_table(hours.values, 24)
        self._pmon = tuple(self._prev_month(m) for m in range(13))
        self._first_month = self.months[0]
        self._last_month = self.months[-1]
        self._shapes: dict[int, MonthShape] = {}
        self._mcache: dict[int, MonthShape] = {}

    def _prev_month(self, m: int) -> int:
        for v in range(m, 0, -1):
            if v in self.months:
                return v
        return -1

    # -- days ------------------------------------------------------------------------------

    def days_for_shape(self, fw: int, n: int) -> tuple[int, ...]:
        """Matching days of a month whose 1st is cron weekday ``fw`` and which has ``n`` days."""
        dom, dow = self._dom, self._dow
        dom_days: set[int] = {v for v in dom.values if v <= n}
        for k in dom.last:
            if n - k >= 1:
                dom_days.add(n - k)
        if dom.last_weekday:
            dom_days.add(_nearest_weekday(n, n, fw))
        for k in dom.nearest:
            dom_days.add(_nearest_weekday(min(k, n), n, fw))

        dow_days: set[int] = set()
        if dow.values:
            dow_days.update(d for d in range(1, n + 1) if (fw + d - 1) % 7 in dow.values)
        for wd, k in dow.nth:
            d = 1 + (wd - fw) % 7 + 7 * (k - 1)
            if d <= n:
                dow_days.add(d)
        for wd in dow.last_dow:
            first = 1 + (wd - fw) % 7
            dow_days.add(first + 7 * ((n - first) // 7))

        days = dom_days & dow_days if self.day_and else dom_days | dow_days
        return tuple(sorted(days))

    def shape(self, fw: int, n: int) -> MonthShape:
        key = fw * 32 + n
        shp = self._shapes.get(key)
        if shp is None:
            days = self.days_for_shape(fw, n)
            allowed = set(days)
            nd = _next_table(allowed, 32)  # indices 0..32; 32 -> -1
            nd = tuple(0 if v < 0 else v for v in nd)
            pd = tuple(self._prev_day(allowed, d) for d in range(32))
            shp = (nd, pd, days)
            self._shapes[key] = shp
        return shp

    @staticmethod
    def _prev_day(allowed: set[int], d: int) -> int:
        for v in range(d, 0, -1):
            if v in allowed:
                return v
        return 0

    def month(self, y: int, m: int) -> MonthShape:
        key = y * 16 + m
        shp = self._mcache.get(key)
        if shp is None:
            if len(self._mcache) > 4096:
                self._mcache.clear()
            shp = self.shape(first_weekday(y, m), days_in_month(y, m))
            self._mcache[key] = shp
        return shp

    def days_signature(self) -> tuple[tuple[int, ...], ...]:
        """The matching days of every month shape: equal signatures mean equal day rules."""
        return tuple(self.shape(fw, n)[2] for n in (28, 29, 30, 31) for fw in range(7))

    def satisfiable(self) -> bool:
        """Does any (month, weekday of the 1st, length) that the calendar produces match?"""
        for m in self.months:
            lengths = (28, 29) if m == 2 else (_DAYS_IN_MONTH[m],)
            for n in lengths:
                for fw in range(7):
                    if self.shape(fw, n)[2]:
                        return True
        return False

    # -- search ----------------------------------------------------------------------------

    def next_wall(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int, ylimit: int
    ) -> Wall | None:
        """Smallest matching wall time >= the given one (fields may overflow by one unit).

        Returns ``None`` when nothing matches up to the end of year ``ylimit``.
        """
        nmon = self._nmon
        nhour = self._nhour
        nmin = self._nmin
        nsec = self._nsec
        mcache = self._mcache
        while True:
            m2 = nmon[mo]
            if m2 != mo:
                if m2 < 0:
                    y += 1
                    if y > ylimit:
                        return None
                    mo = self._first_month
                else:
                    mo = m2
                d = 1
                h = mi = s = 0
            shp = mcache.get(y * 16 + mo)
            if shp is None:
                shp = self.month(y, mo)
            d2 = shp[0][d]
            if d2 == 0:
                mo += 1
                d = 1
                h = mi = s = 0
                continue
            if d2 != d:
                d = d2
                h = mi = s = 0
            h2 = nhour[h]
            if h2 < 0:
                d += 1
                h = mi = s = 0
                continue
            if h2 != h:
                h = h2
                mi = s = 0
            m2 = nmin[mi]
            if m2 < 0:
                h += 1
                mi = s = 0
                continue
            if m2 != mi:
                mi = m2
                s = 0
            s2 = nsec[s]
            if s2 < 0:
                mi += 1
                s = 0
                continue
            return (y, mo, d, h, mi, s2)

    def prev_wall(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int, ylimit: int
    ) -> Wall | None:
        """Largest matching wall time <= the given one (fields may underflow by one unit).

        Returns ``None`` when nothing matches back to the start of year ``ylimit``.
        """
        pmon = self._pmon
        phour = self._phour
        pmin = self._pmin
        psec = self._psec
        mcache = self._mcache
        while True:
            m2 = pmon[mo] if mo > 0 else -1
            if m2 != mo:
                if m2 < 0:
                    y -= 1
                    if y < ylimit:
                        return None
                    mo = self._last_month
                else:
                    mo = m2
                d = 31
                h = 23
                mi = s = 59
            shp = mcache.get(y * 16 + mo)
            if shp is None:
                shp = self.month(y, mo)
            d2 = shp[1][d] if d > 0 else 0
            if d2 == 0:
                mo -= 1
                d = 31
                h = 23
                mi = s = 59
                continue
            if d2 != d:
                d = d2
                h = 23
                mi = s = 59
            h2 = phour[h + 1]
            if h2 < 0:
                d -= 1
                h = 23
                mi = s = 59
                continue
            if h2 != h:
                h = h2
                mi = s = 59
            m2 = pmin[mi + 1]
            if m2 < 0:
                h -= 1
                mi = s = 59
                continue
            if m2 != mi:
                mi = m2
                s = 59
            s2 = psec[s + 1]
            if s2 < 0:
                mi -= 1
                s = 59
                continue
            return (y, mo, d, h, mi, s2)


def _nearest_weekday(target: int, n: int, fw: int) -> int:
    """The weekday (Mon-Fri) nearest to day ``target``, never leaving the month."""
    wd = (fw + target - 1) % 7
    if wd == 6:  # Saturday -> Friday, or Monday if that would leave the month
        return target - 1 if target > 1 else target + 2
    if wd == 0:  # Sunday -> Monday, or Friday if that would leave the month
        return target + 1 if target < n else target - 2
    return target
