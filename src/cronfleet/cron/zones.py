"""What a time zone does on each local day: one fixed UTC offset, or a transition.

The engine searches in wall-clock time and needs to turn wall times back into instants.
On almost every day of almost every zone that is ``instant = wall - offset`` with one
offset for the whole day; such a day is *clean*. The other days (a DST change, a zone
changing its standard offset) are *unclean*; for those we build an exact picture of the
instants around them -- a :class:`Window` of constant-offset segments with the transition
instants found by bisection.

Everything is derived from the zone through its public PEP 495 interface (``utcoffset``
with ``fold=0``/``fold=1``, ``fromutc``), so any ``tzinfo`` that implements ``fold``
(``zoneinfo.ZoneInfo``, ``datetime.timezone``) works.

Assumptions, checked against every zone of the installed tz database by
``tests/unit/cron/test_zones.py``:

* two offset changes of one zone are more than 27 hours apart (in tzdata 2025/2026 the
  closest pair is ~4 days apart), so comparing the offsets at a day's two midnights
  (each with fold=0 and fold=1) tells whether the day is clean;
* two offset changes are more than one hour apart, so hourly samples find every change
  inside a window;
* UTC offsets stay within +-16 hours and one change moves the clock by at most 24 hours.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, tzinfo

__all__ = ["EPOCH_ORDINAL", "MAX_INSTANT", "MIN_INSTANT", "Window", "ZoneDays", "zone_days"]

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86400
_MARGIN = 16 * 3600  # |UTC offset| never exceeds this
# The instants the engine works with. MIN_INSTANT converts to any zone (|offset| <=
# _MARGIN) inside datetime's range; MAX_INSTANT is the last instant that does so in every
# zone, and ZoneDays.last the last one in its own zone (9999-12-31T23:59:59 local, or UTC
# for a zone behind UTC). A window at the calendar's edges is clamped to [MIN_INSTANT,
# ZoneDays.last) -- its end is exclusive and sampled, so it must itself convert -- and it
# still reaches the instants of its own day: a window clamped to an earlier bound than its
# day made next() answer a time before its argument, and resolve nothing on the last days.
MIN_INSTANT = (date(1, 1, 3).toordinal() - EPOCH_ORDINAL) * _DAY
_LAST_UTC = (date(9999, 12, 31).toordinal() - EPOCH_ORDINAL) * _DAY + _DAY - 1
MAX_INSTANT = _LAST_UTC - _MARGIN


def wall_seconds(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> int:
    """Wall time as seconds since 1970-01-01T00:00 of the same (naive) calendar."""
    return (date(y, mo, d).toordinal() - EPOCH_ORDINAL) * _DAY + h * 3600 + mi * 60 + s


def wall_fields(w: int) -> tuple[int, int, int, int, int, int]:
    days, sec = divmod(w, _DAY)
    dt = date.fromordinal(EPOCH_ORDINAL + days)
    h, rem = divmod(sec, 3600)
    mi, s = divmod(rem, 60)
    return (dt.year, dt.month, dt.day, h, mi, s)


def _seconds(td: timedelta | None) -> int:
    if td is None:  # pragma: no cover - a tzinfo that returns None is rejected earlier
        raise ValueError("time zone returned no UTC offset")
    return td.days * _DAY + td.seconds


class Window:
    """Exact offsets for the instants ``[start, end)`` around one unclean day.

    ``segs`` is a tuple of ``(a, b, offset)``: the UTC offset is ``offset`` for every
    instant ``a <= u < b``; the segments are contiguous and cover the window.
    """

    __slots__ = ("end", "segs", "start")

    def __init__(self, start: int, end: int, segs: tuple[tuple[int, int, int], ...]) -> None:
        self.start = start
        self.end = end
        self.segs = segs

    def offset_at(self, u: int) -> int:
        for a, b, o in self.segs:
            if a <= u < b:
                return o
        raise ValueError("instant outside window")  # pragma: no cover - callers stay inside

    def high_water(self, u: int) -> int:
        """The largest wall time shown at any instant <= ``u`` (inside the window)."""
        hw = None
        for a, b, o in self.segs:
            if a > u:
                break
            top = (min(b - 1, u)) + o
            if hw is None or top > hw:
                hw = top
        if hw is None:  # pragma: no cover - u is always inside the window
            raise ValueError("instant outside window")
        return hw

    def resolve(self, w: int) -> int:
        """The first instant whose wall time is >= ``w`` (a gap resolves to its end)."""
        for a, b, o in self.segs:
            if b - 1 + o >= w:
                if w - o < a == self.start:
                    break  # before the window (only at the calendar's first days)
                return max(a, w - o)
        raise ValueError("wall time outside window")


def _last_instant(tz: tzinfo) -> int:
    """The last whole second whose local time in ``tz`` is still a datetime (year 9999)."""
    u = _LAST_UTC
    while u > MAX_INSTANT:
        try:
            datetime.fromtimestamp(u, tz)
        except (OverflowError, ValueError):
            u -= 60  # offsets are whole minutes in practice; this runs once per zone
            continue
        return u
    return MAX_INSTANT


class ZoneDays:
    """Per-zone cache: local day -> clean offset (``int``) or :class:`Window`.

    ``last``: the end of the instants searched in this zone (exclusive; see MAX_INSTANT)."""

    __slots__ = ("_mid", "days", "last", "tz")

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self.days: dict[int, int | Window] = {}
        self._mid: dict[int, tuple[int, int]] = {}
        self.last = _last_instant(tz)

    def offset_at(self, u: int) -> int:
        """UTC offset (seconds) in force at instant ``u``."""
        return _seconds(datetime.fromtimestamp(u, self.tz).utcoffset())

    def _midnight(self, d: date) -> tuple[int, int]:
        key = d.year * 512 + d.month * 32 + d.day
        got = self._mid.get(key)
        if got is None:
            tz = self.tz
            got = (
                _seconds(datetime(d.year, d.month, d.day, tzinfo=tz).utcoffset()),
                _seconds(datetime(d.year, d.month, d.day, fold=1, tzinfo=tz).utcoffset()),
            )
            if len(self._mid) > 200_000:
                self._mid.clear()
            self._mid[key] = got
        return got

    def info(self, y: int, mo: int, d: int) -> int | Window:
        key = y * 512 + mo * 32 + d
        got = self.days.get(key)
        if got is None:
            got = self._compute(y, mo, d)
            if len(self.days) > 200_000:
                self.days.clear()
            self.days[key] = got
        return got

    def _compute(self, y: int, mo: int, d: int) -> int | Window:
        day = date(y, mo, d)
        o0, o1 = self._midnight(day)
        if (y, mo, d) >= (9999, 12, 30) or (y, mo, d) <= (1, 1, 2):
            return self._window(day)  # the calendar's edges: let the window clamp
        p0, p1 = self._midnight(day + timedelta(days=1))
        if o0 == o1 == p0 == p1:
            return o0
        return self._window(day)

    def _window(self, day: date) -> Window:
        base = (day.toordinal() - EPOCH_ORDINAL) * _DAY
        start = max(base - _DAY - _MARGIN, MIN_INSTANT)
        end = min(base + 2 * _DAY + _MARGIN, self.last)
        samples = [*range(start, end, 3600), end]
        offs = [self.offset_at(u) for u in samples]
        segs: list[tuple[int, int, int]] = []
        seg_start = start
        for i in range(len(samples) - 1):
            if offs[i] != offs[i + 1]:
                lo, hi = samples[i], samples[i + 1]  # offset(lo) = offs[i], offset(hi) differs
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset_at(mid) == offs[i]:
                        lo = mid
                    else:
                        hi = mid
                segs.append((seg_start, hi, offs[i]))
                seg_start = hi
        segs.append((seg_start, end, offs[-1]))
        return Window(start, end, tuple(segs))


_ZONES: dict[tzinfo, ZoneDays] = {}


def zone_days(tz: tzinfo) -> ZoneDays:
    """The shared day cache of ``tz`` (one per zone object, shared by all expressions)."""
    zd = _ZONES.get(tz)
    if zd is None:
        zd = _ZONES.setdefault(tz, ZoneDays(tz))
    return zd
