"""Wall-clock search: the next/previous local (naive) time whose fields all match.

This module knows nothing about time zones. It works on plain integers
``(year, month, day, hour, minute, second)`` and jumps field by field (month -> day ->
hour -> minute -> second) using precomputed "next allowed value >= i" tables, so a search
never steps through minutes one at a time.

Days depend on the month's *shape* only -- the weekday of its 1st and its length -- so the
day tables of a day rule are 28 shapes (7 weekdays x 4 lengths), and a module-level table
gives the shape of every (year, month) (the calendar repeats every 400 years).

Every table is shared by content (:mod:`.tables`): the tables of a field's values (the
minutes ``{0}``, the hours ``9-17``...) and the :class:`DayTables` of a day rule (``* *
*``, ``* * 1-5``, ``L * *``...) exist once per process, whatever the number of expressions
holding them; a :class:`WallSchedule` is a handful of references. Nothing here is changed
after it is built.
"""

from __future__ import annotations

from datetime import date

from .fields import FieldSpec
from .tables import Interner

__all__ = ["DayTables", "MonthShape", "WallSchedule", "days_in_month", "first_weekday"]

_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# (next-day table, previous-day table, matching days); the tables hold 0 for "none"
MonthShape = tuple[bytes, bytes, tuple[int, ...]]

Wall = tuple[int, int, int, int, int, int]


def days_in_month(year: int, month: int) -> int:
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _DAYS_IN_MONTH[month]


def first_weekday(year: int, month: int) -> int:
    """Cron weekday (0 = Sunday) of the 1st of the month."""
    return (date(year, month, 1).weekday() + 1) % 7


def _shape_index(fw: int, n: int) -> int:
    """Index of the month shape (weekday of the 1st ``fw``, ``n`` days) in a rule's 28."""
    return (n - 28) * 7 + fw


def _month_shapes() -> bytes:
    """``t[(year % 400) * 12 + month]``: the shape index of that month (400-year cycle)."""
    out = bytearray(400 * 12 + 13)
    fw = first_weekday(2000, 1)  # 2000 % 400 == 0
    for i in range(400 * 12):
        y, m = 2000 + i // 12, i % 12 + 1
        n = days_in_month(y, m)
        out[(y % 400) * 12 + m] = _shape_index(fw, n)
        fw = (fw + n) % 7
    return bytes(out)


_MONTH_SHAPE = _month_shapes()


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


# (sorted values, next table, previous table) of one field's values
FieldTables = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

_FIELD_TABLES: Interner[tuple[int, frozenset[int]], FieldTables] = Interner("field tables",
                                                                           16384)


def _field_tables(values: frozenset[int], size: int) -> FieldTables:
    """The shared tables of a second/minute (size 60), hour (24) or month (13) field.

    Months: the previous table is indexed by the month itself (``t[m]``: largest allowed
    <= m, or -1), the others by value + 1."""

    def build() -> FieldTables:
        prv = _prev_table(values, size)
        return (tuple(sorted(values)), _next_table(values, size),
                prv[1:] if size == 13 else prv)

    return _FIELD_TABLES.get((size, values), build)


class DayTables:
    """The day tables of one day rule, shared by every expression with that rule.

    ``shapes[(n - 28) * 7 + fw]`` is the :data:`MonthShape` of a month whose 1st is cron
    weekday ``fw`` and which has ``n`` days; ``signature`` the matching days of all 28
    (equal signatures mean equal day rules: one object serves both).
    """

    __slots__ = ("shapes", "signature")

    shapes: tuple[MonthShape, ...]
    signature: tuple[tuple[int, ...], ...]

    def __init__(self, signature: tuple[tuple[int, ...], ...]) -> None:
        self.signature = signature
        self.shapes = tuple(_month_shape(days) for days in signature)


def _month_shape(days: tuple[int, ...]) -> MonthShape:
    nd = bytearray(33)  # nd[d] = first matching day >= d (0: none); d in 0..32
    nxt = 0
    for d in range(32, -1, -1):
        if d in days:
            nxt = d
        nd[d] = nxt
    pd = bytearray(32)  # pd[d] = last matching day <= d (0: none); d in 0..31
    prv = 0
    for d in range(32):
        if d in days:
            prv = d
        pd[d] = prv
    return (bytes(nd), bytes(pd), days)


# day rule (what the day fields say) -> signature -> tables: two rules written
# differently but matching the same days ('*' and '1-31' in day-of-month) share tables
_DayRule = tuple[object, ...]
_BY_RULE: Interner[_DayRule, DayTables] = Interner("day rules", 4096)
_BY_SIGNATURE: Interner[tuple[tuple[int, ...], ...], DayTables] = Interner("day tables", 4096)


def day_tables(dom: FieldSpec, dow: FieldSpec, day_and: bool) -> DayTables:
    """The shared :class:`DayTables` of the day fields ``dom`` and ``dow``."""
    key = (dom.values, dom.last, dom.last_weekday, dom.nearest,
           dow.values, dow.nth, dow.last_dow, day_and)

    def build() -> DayTables:
        sig = tuple(_days_for_shape(dom, dow, day_and, fw, n)
                    for n in (28, 29, 30, 31) for fw in range(7))
        return _BY_SIGNATURE.get(sig, lambda: DayTables(sig))

    return _BY_RULE.get(key, build)


def _days_for_shape(dom: FieldSpec, dow: FieldSpec, day_and: bool, fw: int, n: int
                    ) -> tuple[int, ...]:
    """Matching days of a month whose 1st is cron weekday ``fw`` and which has ``n`` days."""
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

    days = dom_days & dow_days if day_and else dom_days | dow_days
    return tuple(sorted(days))


class WallSchedule:
    """Matching rules for one expression, in wall-clock terms: references to shared
    tables (:func:`_field_tables`, :func:`day_tables`), nothing of its own."""

    __slots__ = (
        "_first_month",
        "_last_month",
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
        "days",
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
        self.seconds, self._nsec, self._psec = _field_tables(seconds.values, 60)
        self.minutes, self._nmin, self._pmin = _field_tables(minutes.values, 60)
        self.hours, self._nhour, self._phour = _field_tables(hours.values, 24)
        self.months, self._nmon, self._pmon = _field_tables(months.values, 13)
        # Vixie/cronie: AND when either day field starts with '*' (or '?'), else OR.
        self.day_and = dom.star or dow.star
        self.days = day_tables(dom, dow, self.day_and)
        self._shapes = self.days.shapes
        self._first_month = self.months[0]
        self._last_month = self.months[-1]

    # -- days ------------------------------------------------------------------------------

    def shape(self, fw: int, n: int) -> MonthShape:
        """The tables of a month whose 1st is cron weekday ``fw`` and which has ``n`` days."""
        return self._shapes[_shape_index(fw, n)]

    def days_signature(self) -> tuple[tuple[int, ...], ...]:
        """The matching days of every month shape: equal signatures mean equal day rules."""
        return self.days.signature

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
        shapes = self._shapes
        mshape = _MONTH_SHAPE
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
            shp = shapes[mshape[(y % 400) * 12 + mo]]
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
        shapes = self._shapes
        mshape = _MONTH_SHAPE
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
            shp = shapes[mshape[(y % 400) * 12 + mo]]
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
