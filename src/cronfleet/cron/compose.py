"""``ComposedSchedule``: several expressions, a one-off instant, bounds and exclusions.

A composed schedule fires at the union of its parts' instants (each instant once), or at
one instant (``at``), never before ``start`` nor after ``end`` (both inclusive), and never
at an excluded instant. It answers the same questions as :class:`~.expr.CronExpr`
(``next``, ``prev``, ``next_n``, ``iter``, ``between``, ``describe``, ``explain``; ``expr``,
``tz``, ``period``), so the runtime and the views use either without knowing which.

Exclusions (``except``), each one of:

* ``"MM-DD"``: that day of every year (``"12-25"``), in the schedule's zone;
* ``"YYYY-MM-DD"``: that one day (``"2026-12-24"``);
* a cron expression or macro (``"0 * * * 6,0"``): its instants are removed (an instant of
  the schedule that is also a fire time of the exclusion); an interval is not accepted;
* ``"calendar:PATH"``: a calendar file of days, one ``YYYY-MM-DD`` or ``MM-DD`` per line,
  ``#`` starts a comment, blank lines are ignored.

``expr`` is one canonical text of the whole composition (parts sorted,
``" | "``-separated, ``at``/``start``/``end`` as UTC-offset ISO times, exclusions after
``except``; a calendar file appears as its path and a digest of its days): the same text
in the same zone is the same schedule, which is what the runtime's per-text cache needs.
:func:`parse_composed` reads that text back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError, NoFireTimeError
from .expr import CronExpr
from .instants import day_start, parse_instant
from .parser import resolve_tz
from .parsing import parse
from .sequence import FireTimes, floor_ts
from .tables import Interner

__all__ = [
    "MAX_SKIPPED",
    "ComposedSchedule",
    "Exclusion",
    "compose",
    "one_off",
    "parse_composed",
    "parse_exclusion",
    "parse_instant",
    "parse_schedule",
    "read_calendar",
    "read_schedule",
]

_MIN_TS = -62135596800 + 86400 * 2  # two days after 0001-01-01T00:00Z: room for any zone
MAX_SKIPPED = 100_000
"""Consecutive excluded candidates after which ``next``/``prev`` give up
(``NoFireTimeError``): an exclusion that removes every instant ends the search."""
CALENDAR_PREFIX = "calendar:"


# -- exclusions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exclusion:
    """One ``except`` entry: ``text`` is its canonical form; ``dates`` full days,
    ``monthdays`` ``(month, day)`` pairs of every year, ``cron`` an expression whose
    instants are removed."""

    text: str
    dates: frozenset[date] = frozenset()
    monthdays: frozenset[tuple[int, int]] = frozenset()
    cron: CronExpr | None = None


def _day_entry(text: str, field: str, source: str, column: int = 1
               ) -> tuple[date | None, tuple[int, int] | None]:
    """``YYYY-MM-DD`` -> (date, None); ``MM-DD`` -> (None, (month, day)); else raise."""
    parts = text.split("-")
    ok = all(p.isascii() and p.isdigit() for p in parts)
    if ok and len(parts) == 3 and len(parts[0]) == 4 and len(parts[1]) == len(parts[2]) == 2:
        try:
            return date(int(parts[0]), int(parts[1]), int(parts[2])), None
        except ValueError as exc:
            raise CronSyntaxError(field, text, column, source,
                                  f"{text!r} is not a date ({exc})") from None
    if ok and len(parts) == 2 and len(parts[0]) == len(parts[1]) == 2:
        month, day = int(parts[0]), int(parts[1])
        try:
            date(2000, month, day)  # a leap year: 02-29 is a day
        except ValueError:
            raise CronSyntaxError(field, text, column, source,
                                  f"{text!r} is not a month-day (MM-DD)") from None
        return None, (month, day)
    raise CronSyntaxError(
        field, text, column, source,
        f"{text!r} is not a day (expected MM-DD or YYYY-MM-DD)")


def read_calendar(path: str | Path, field: str = "except"
                  ) -> tuple[frozenset[date], frozenset[tuple[int, int]]]:
    """The days of a calendar file: one ``YYYY-MM-DD`` or ``MM-DD`` per line, ``#`` starts
    a comment, blank lines ignored. Raises :class:`CronSyntaxError` naming the line."""
    p = Path(path)
    try:
        content = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CronSyntaxError(field, str(path), None, str(path),
                              f"cannot read calendar file {str(path)!r}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
    dates: set[date] = set()
    monthdays: set[tuple[int, int]] = set()
    for number, line in enumerate(content.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            d, md = _day_entry(entry, field, entry)
        except CronSyntaxError as exc:
            raise CronSyntaxError(field, entry, None, str(path),
                                  f"{str(path)!r} line {number}: {exc.reason}") from None
        if d is not None:
            dates.add(d)
        if md is not None:
            monthdays.add(md)
    return frozenset(dates), frozenset(monthdays)


def _calendar_digest(dates: frozenset[date], monthdays: frozenset[tuple[int, int]]) -> str:
    items = sorted(d.isoformat() for d in dates) + sorted(f"{m:02d}-{d:02d}"
                                                          for m, d in monthdays)
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:12]


def parse_exclusion(text: str, tz: str | ZoneInfo = "UTC", *, base: str | Path | None = None,
                    field: str = "except") -> Exclusion:
    """One ``except`` entry (see the module's docstring). ``base``: the directory a
    relative calendar path is read from (default: the working directory). Raises
    :class:`CronSyntaxError` (``field`` names the entry)."""
    if not isinstance(text, str):
        raise CronSyntaxError(field, repr(text), None, repr(text),
                              f"expected text, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise CronSyntaxError(field, text, 1, text, "empty exclusion (expected MM-DD, "
                              "YYYY-MM-DD, a cron expression or calendar:PATH)")
    if stripped.startswith(CALENDAR_PREFIX):
        name = stripped[len(CALENDAR_PREFIX):].strip()
        head, hash_, digest = name.rpartition("#")
        if hash_ and len(digest) == 12 and all(c in "0123456789abcdef" for c in digest):
            name = head  # the canonical text's digest of the days: read the file again
        if not name:
            raise CronSyntaxError(field, text, len(CALENDAR_PREFIX) + 1, text,
                                  "calendar: needs a file path (calendar:holidays.txt)")
        path = Path(name)
        if base is not None and not path.is_absolute():
            path = Path(base) / path
        dates, monthdays = read_calendar(path, field)
        canonical = f"{CALENDAR_PREFIX}{name}#{_calendar_digest(dates, monthdays)}"
        return Exclusion(canonical, dates, monthdays)
    if stripped[0].isdigit() and " " not in stripped and "-" in stripped \
            and "/" not in stripped and "," not in stripped:
        d, md = _day_entry(stripped, field, text, text.index(stripped[0]) + 1)
        if d is not None:
            day = d
            return _DAY_EXCLUSIONS.get(day.isoformat(), lambda: Exclusion(
                day.isoformat(), dates=frozenset((day,))))
        assert md is not None
        month_day = md
        canonical = f"{md[0]:02d}-{md[1]:02d}"
        return _DAY_EXCLUSIONS.get(canonical, lambda: Exclusion(
            canonical, monthdays=frozenset((month_day,))))
    expr, _ = parse_schedule(" ".join(stripped.split()), tz)  # a sentence too
    if isinstance(expr, ComposedSchedule):
        raise CronSyntaxError(field, text, 1, text, "a one-off cannot be an exclusion (give "
                              "the day: YYYY-MM-DD)")
    if expr.is_interval:
        raise CronSyntaxError(field, text, 1, text, "an interval cannot be an exclusion "
                              "(use a cron expression, MM-DD or YYYY-MM-DD)")
    return Exclusion(expr.expr, cron=expr)


# a day exclusion depends on its text only: one object per text ('12-25' of every job)
_DAY_EXCLUSIONS: Interner[str, Exclusion] = Interner("day exclusions", 4096)
_NONE: frozenset[Any] = frozenset()  # one empty set for every composition without one


def _union(sets: list[frozenset[Any]]) -> frozenset[Any]:
    """The union, sharing an operand's set when it is the only non-empty one."""
    full = [x for x in sets if x]
    if not full:
        return _NONE
    return full[0] if len(full) == 1 else frozenset().union(*full)


# -- instants -------------------------------------------------------------------------------


def _iso(dt: datetime) -> str:
    return dt.isoformat()


# -- the composed schedule ------------------------------------------------------------------


class ComposedSchedule(FireTimes):
    """An immutable, hashable composed schedule (build it with :func:`compose`).

    Attributes:
        expr: the canonical text of the whole composition.
        tz: the ``ZoneInfo`` fire times are returned in (every part's zone).
        parts: the cron expressions (or intervals) whose instants are united.
        at: the one-off instant, or ``None``.
        start, end: the inclusive bounds, or ``None``.
        exclusions: the ``except`` entries.
        period: always ``None`` (a composition is never plain interval arithmetic).
    """

    __slots__ = ("_dates", "_key", "_monthdays", "_xcrons", "at", "end", "exclusions",
                 "expr", "parts", "start", "tz")

    expr: str
    tz: ZoneInfo
    parts: tuple[CronExpr, ...]
    at: datetime | None
    start: datetime | None
    end: datetime | None
    exclusions: tuple[Exclusion, ...]
    _dates: frozenset[date]
    _monthdays: frozenset[tuple[int, int]]
    _xcrons: tuple[CronExpr, ...]
    _key: tuple[object, ...]

    period: None = None
    is_interval = False

    def __init__(self, parts: Iterable[CronExpr] = (), *, tz: str | ZoneInfo = "UTC",
                 at: datetime | None = None, start: datetime | None = None,
                 end: datetime | None = None, exclusions: Iterable[Exclusion] = ()) -> None:
        zone = resolve_tz(tz, "")
        unique: dict[CronExpr, CronExpr] = {}
        for p in parts:
            if p.tz != zone:
                raise ValueError(f"part {p.expr!r} is in {p.tz}, not {zone}")
            unique.setdefault(p, p)
        ordered = tuple(sorted(unique.values(), key=lambda p: p.expr))
        if not ordered and at is None:
            raise ValueError("a composed schedule needs at least one expression or 'at'")
        if ordered and at is not None:
            raise ValueError("give either expressions or 'at', not both")
        for name, value in (("at", at), ("start", start), ("end", end)):
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValueError(f"{name} must be timezone-aware")
        xs = tuple(sorted({x.text: x for x in exclusions}.values(), key=lambda x: x.text))
        setter = object.__setattr__
        setter(self, "tz", zone)
        setter(self, "parts", ordered)
        setter(self, "at", None if at is None else at.astimezone(zone))
        setter(self, "start", None if start is None else start.astimezone(zone))
        setter(self, "end", None if end is None else end.astimezone(zone))
        setter(self, "exclusions", xs)
        setter(self, "_dates", _union([x.dates for x in xs]))
        setter(self, "_monthdays", _union([x.monthdays for x in xs]))
        setter(self, "_xcrons", tuple(x.cron for x in xs if x.cron is not None))
        words = [p.expr for p in ordered]
        if self.at is not None:
            words.append(f"at {_iso(self.at)}")
        if self.start is not None:
            words.append(f"start {_iso(self.start)}")
        if self.end is not None:
            words.append(f"end {_iso(self.end)}")
        words += [f"except {x.text}" for x in xs]
        setter(self, "expr", " | ".join(words))
        tz_key: object = zone.key if zone.key is not None else zone
        setter(self, "_key", (
            "composed", frozenset(ordered),
            None if self.at is None else floor_ts(self.at),
            None if self.start is None else floor_ts(self.start),
            None if self.end is None else floor_ts(self.end),
            self._dates, self._monthdays, frozenset(self._xcrons) if self._xcrons else _NONE,
            tz_key))

    # -- value semantics ---------------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ComposedSchedule is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ComposedSchedule is immutable (cannot delete {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ComposedSchedule):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"ComposedSchedule({self.expr!r}, tz={str(self.tz)!r})"

    def __str__(self) -> str:
        return self.expr

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.parts, self.tz.key if self.tz.key is not None else self.tz,
                           self.at, self.start, self.end, self.exclusions))

    # -- questions ---------------------------------------------------------------------------

    @property
    def one_off(self) -> bool:
        """``True`` for an ``at`` schedule (one instant, then done)."""
        return self.at is not None

    @property
    def last(self) -> datetime | None:
        """The latest instant the schedule may fire at (``at`` or ``end``), else ``None``."""
        return self.at if self.at is not None else self.end

    def done(self, now: datetime) -> bool:
        """``True`` when nothing fires after ``now`` any more *by construction* (a one-off
        past its instant, or a schedule past its ``end``)."""
        last = self.last
        return last is not None and floor_ts(last) <= floor_ts(now)

    def excluded(self, t: datetime) -> bool:
        """Whether instant ``t`` is removed by an exclusion."""
        local = t.astimezone(self.tz)
        d = local.date()
        if d in self._dates or (d.month, d.day) in self._monthdays:
            return True
        if self._xcrons:
            u = floor_ts(local)
            # one second earlier as an instant (wall-clock arithmetic would lose the fold)
            before = datetime.fromtimestamp(u - 1, UTC)
            for x in self._xcrons:
                try:
                    if floor_ts(x.next(before)) == u:
                        return True
                except NoFireTimeError:
                    continue
        return False

    def _day_excluded(self, t: datetime) -> bool:
        d = t.date()
        return d in self._dates or (d.month, d.day) in self._monthdays

    def _raw_next(self, t: datetime) -> datetime:
        """The first instant of the union strictly after ``t`` (no bounds, no exclusions)."""
        at = self.at
        if at is not None:
            if floor_ts(at) > floor_ts(t):
                return at
            raise NoFireTimeError(f"{self.expr!r}: done (its one-off instant "
                                  f"{_iso(at)} is not after {t.isoformat()})")
        best: datetime | None = None
        best_u = 0
        for p in self.parts:
            try:
                c = p.next(t)
            except NoFireTimeError:
                continue
            u = floor_ts(c)
            if best is None or u < best_u:
                best, best_u = c, u
        if best is None:
            raise NoFireTimeError(f"{self.expr!r} in {self.tz}: no fire time after "
                                  f"{t.isoformat()}")
        return best

    def _raw_prev(self, t: datetime) -> datetime:
        at = self.at
        if at is not None:
            # strictly before t, as instants (t may carry microseconds; in a repeated hour
            # two datetimes of one zone compare by wall time)
            if floor_ts(at) < floor_ts(t) or (floor_ts(at) == floor_ts(t) and t.microsecond):
                return at
            raise NoFireTimeError(f"{self.expr!r}: no fire time before {t.isoformat()}")
        best: datetime | None = None
        best_u = 0
        for p in self.parts:
            try:
                c = p.prev(t)
            except NoFireTimeError:
                continue
            u = floor_ts(c)
            if best is None or u > best_u:
                best, best_u = c, u
        if best is None:
            raise NoFireTimeError(f"{self.expr!r} in {self.tz}: no fire time before "
                                  f"{t.isoformat()}")
        return best

    def next(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (an aware datetime), in ``tz``."""
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be timezone-aware (got naive {after.isoformat()})")
        try:
            return self._next(after)
        except (OverflowError, ValueError, OSError) as exc:  # the calendar's edges
            raise NoFireTimeError(f"{self.expr!r}: no fire time inside the supported "
                                  "calendar range") from exc

    def prev(self, before: datetime) -> datetime:
        """The last fire time strictly before ``before`` (an aware datetime), in ``tz``."""
        if before.tzinfo is None or before.utcoffset() is None:
            raise ValueError(f"before must be timezone-aware (got naive {before.isoformat()})")
        try:
            return self._prev(before)
        except (OverflowError, ValueError, OSError) as exc:
            raise NoFireTimeError(f"{self.expr!r}: no fire time inside the supported "
                                  "calendar range") from exc

    def _next(self, after: datetime) -> datetime:
        t = after
        start, end = self.start, self.end
        if start is not None and floor_ts(start) - 1 > floor_ts(t) and floor_ts(start) > _MIN_TS:
            t = datetime.fromtimestamp(floor_ts(start) - 1, self.tz)
        end_u = 0 if end is None else floor_ts(end)
        for _ in range(MAX_SKIPPED):
            c = self._raw_next(t)
            if end is not None and floor_ts(c) > end_u:
                raise NoFireTimeError(f"{self.expr!r}: done: no fire time after "
                                      f"{after.isoformat()} (the schedule ends at "
                                      f"{_iso(end)})")
            if not self.excluded(c):
                return c.astimezone(self.tz)
            if self._day_excluded(c.astimezone(self.tz)):
                # skip the rest of an excluded day at once
                local = c.astimezone(self.tz)
                target = day_start(local.date() + timedelta(days=1), self.tz) - 1
                t = datetime.fromtimestamp(target, self.tz) if target > floor_ts(c) else c
            else:
                t = c
        raise NoFireTimeError(f"{self.expr!r}: {MAX_SKIPPED} excluded fire times in a row "
                              f"after {after.isoformat()}; giving up")

    def _prev(self, before: datetime) -> datetime:
        t = before
        start, end = self.start, self.end
        if end is not None and floor_ts(end) + 1 < floor_ts(t):
            t = datetime.fromtimestamp(floor_ts(end) + 1, self.tz)
        start_u = 0 if start is None else floor_ts(start)
        for _ in range(MAX_SKIPPED):
            c = self._raw_prev(t)
            if start is not None and floor_ts(c) < start_u:
                raise NoFireTimeError(f"{self.expr!r}: no fire time before "
                                      f"{before.isoformat()} (the schedule starts at "
                                      f"{_iso(start)})")
            if not self.excluded(c):
                return c.astimezone(self.tz)
            local = c.astimezone(self.tz)
            if self._day_excluded(local):
                target = day_start(local.date(), self.tz)
                t = datetime.fromtimestamp(target, self.tz) if target < floor_ts(c) else c
            else:
                t = c
        raise NoFireTimeError(f"{self.expr!r}: {MAX_SKIPPED} excluded fire times in a row "
                              f"before {before.isoformat()}; giving up")

    def excluded_between(self, start: datetime, end: datetime, limit: int = 100
                         ) -> list[datetime]:
        """The instants of the parts (inside the bounds) with ``start < t <= end`` that
        an exclusion removes, at most ``limit`` (what previews show as excluded)."""
        if not self.exclusions:
            return []
        out: list[datetime] = []
        t = start
        if self.start is not None and floor_ts(self.start) - 1 > floor_ts(t) \
                and floor_ts(self.start) > _MIN_TS:
            t = datetime.fromtimestamp(floor_ts(self.start) - 1, self.tz)
        last = floor_ts(end)
        if self.end is not None:
            last = min(last, floor_ts(self.end))
        for _ in range(MAX_SKIPPED):
            try:
                c = self._raw_next(t)
                is_excluded = self.excluded(c)
            except (NoFireTimeError, OverflowError, ValueError, OSError):
                break
            if floor_ts(c) > last:
                break
            if is_excluded:
                out.append(c.astimezone(self.tz))
                if len(out) >= limit:
                    break
            t = c
        return out

    def describe(self) -> str:
        """An English description of the whole composition. Never raises."""
        try:
            if self.at is not None:
                text = f"Once at {self.at.strftime('%Y-%m-%d %H:%M:%S')} ({self.tz})"
            else:
                text = "; and ".join(p.describe() for p in self.parts)
            if self.start is not None and self.end is not None:
                text += f"; from {_iso(self.start)} to {_iso(self.end)}"
            elif self.start is not None:
                text += f"; from {_iso(self.start)}"
            elif self.end is not None:
                text += f"; until {_iso(self.end)}"
            if self.exclusions:
                text += "; except " + ", ".join(x.text.split("#", 1)[0]
                                                for x in self.exclusions)
            return text
        except Exception:  # a description never breaks anything
            return f"Schedule '{self.expr}'"

    def explain(self) -> dict[str, object]:
        """The parts (each :meth:`CronExpr.explain`), ``at``, bounds and exclusions as
        JSON-ready data."""
        return {
            "kind": "composed",
            "expr": self.expr,
            "tz": str(self.tz),
            "description": self.describe(),
            "parts": [p.explain() for p in self.parts],
            "at": None if self.at is None else _iso(self.at),
            "start": None if self.start is None else _iso(self.start),
            "end": None if self.end is None else _iso(self.end),
            "except": [x.text for x in self.exclusions],
        }


def _rebuild(parts: tuple[CronExpr, ...], tz: str | ZoneInfo, at: datetime | None,
             start: datetime | None, end: datetime | None,
             exclusions: tuple[Exclusion, ...]) -> ComposedSchedule:
    return ComposedSchedule(parts, tz=tz, at=at, start=start, end=end, exclusions=exclusions)


def compose(
    exprs: str | CronExpr | Sequence[str | CronExpr] = (),
    tz: str | ZoneInfo = "UTC",
    *,
    at: object = None,
    start: object = None,
    end: object = None,
    exclude: Sequence[str | Exclusion] = (),
    base: str | Path | None = None,
) -> CronExpr | ComposedSchedule:
    """Build a schedule from its pieces: a plain :class:`CronExpr` when there is one
    expression and nothing else (the fast path), else a :class:`ComposedSchedule`.

    ``exprs``: one expression or several (their instants are united); ``at``: one instant
    instead (ISO text or aware datetime); ``start``/``end``: inclusive bounds (a date as
    ``end`` covers that whole day); ``exclude``: ``except`` entries. Raises
    :class:`CronSyntaxError` for bad text, ``ValueError`` for impossible combinations.
    Expressions and cron exclusions may be sentences (``"every weekday at 9am"``).
    """

    zone = resolve_tz(tz, "")
    items = [exprs] if isinstance(exprs, str | CronExpr) else list(exprs)
    parts = [x if isinstance(x, CronExpr) else _one_expr(x, zone) for x in items]
    when = None if at is None else parse_instant(at, zone, field="at")
    lo = None if start is None else parse_instant(start, zone, field="start")
    hi = None if end is None else parse_instant(end, zone, field="end", end_of_day=True)
    xs = [x if isinstance(x, Exclusion) else parse_exclusion(x, zone, base=base)
          for x in exclude]
    if len(parts) == 1 and when is None and lo is None and hi is None and not xs \
            and parts[0].tz == zone:
        return parts[0]
    if lo is not None and hi is not None and floor_ts(hi) < floor_ts(lo):
        raise ValueError(f"end {_iso(hi)} is before start {_iso(lo)}")
    built = ComposedSchedule(parts, tz=zone, at=when, start=lo, end=hi, exclusions=xs)
    # equal compositions written alike share one object, as parse() shares expressions
    return _COMPOSED.get((built.expr, built._key), lambda: built)


_COMPOSED: Interner[tuple[str, tuple[object, ...]], ComposedSchedule] = Interner(
    "compositions", 4096)


def _one_expr(text: str, zone: ZoneInfo) -> CronExpr:
    """One expression of a union: a one-off in words is refused (it is ``at``)."""
    expr, _ = parse_schedule(text, zone)
    if isinstance(expr, ComposedSchedule):
        raise CronSyntaxError("expression", text, 1, text, f"{text!r} is a one-off: it "
                              "cannot be united with other expressions (give it alone, or "
                              "as 'at')")
    return expr


_KEYWORDS = ("at", "start", "end", "except")


def _keyword(piece: str) -> tuple[str, str] | None:
    """``("at", "2026-12-24T18:00")`` for a keyword piece, else None (an expression or a
    sentence: "at noon on the first Monday of the month" is a sentence, not a one-off, so
    ``at``/``start``/``end`` are keywords only before a date)."""
    word, _, rest = piece.partition(" ")
    rest = rest.strip()
    if word == "except" and rest:
        return word, rest
    if word in ("at", "start", "end") and rest[:1].isdigit():
        return word, rest
    return None


def is_composition(text: str) -> bool:
    """Whether ``text`` is a composition (``|`` pieces, or one ``at``/``start``/``end``/
    ``except`` piece) rather than one expression or sentence."""
    return "|" in text or _keyword(text.strip()) is not None


def parse_schedule(text: str, tz: str | ZoneInfo = "UTC", *,
                   now: float | datetime | None = None, relative: bool = True
                   ) -> tuple[CronExpr | ComposedSchedule, str | None]:
    """A schedule as a user writes it: a cron expression, macro or interval, or else a
    sentence (:func:`cronfleet.cron.from_text`, English or French).

    Returns ``(expr, sentence)``: ``sentence`` is the text as written when it was read as
    words (``expr`` is then the canonical expression), ``None`` otherwise. The one entry
    point of every face (job specs, ``cronfleet next/explain``, ``/api/cron/preview``).
    When the text fails both ways, the error is the sentence's when the text looks like
    words (:func:`looks_like_words`), else the cron expression's.

    A one-off in words ('tomorrow at 5pm', 'on December 24 2026 at 18:00') is a
    :class:`ComposedSchedule` with that ``at``, read at ``now`` (epoch seconds or an aware
    datetime: the caller's clock; default the system clock). ``relative=False`` refuses
    one whose instant depends on ``now`` ('tomorrow', 'in 2 hours', a date without its
    year): what a job declared again at every start (a config file, code) must say.
    """
    try:
        return parse(text, tz), None
    except CronSyntaxError as exc:
        if exc.field == "timezone" or not isinstance(text, str):
            raise
        from . import words  # only when the text is not cron: keeps `import` and parse fast

        if not words.looks_like_words(text):
            raise
    sentence = words.from_text(text, tz, now=now, one_off=one_off)
    if sentence.relative and not relative:
        at = sentence.expr[3:]
        raise CronSyntaxError(
            "sentence", text, 1, text,
            f"{text!r} depends on the moment it is read, and a declared job is read again "
            f"at every start: it would move each time. Write the instant: at = \"{at}\" "
            "(what it means now), or a date with its year ('on December 24 2026 at 18:00')"
            if sentence.lang == "en" else
            f"{text!r} dépend du moment où il est lu, et une tâche déclarée est "
            f"relue à chaque démarrage : elle se déplacerait à chaque fois. Écrivez "
            f"l'instant : at = \"{at}\" (ce que cela veut dire maintenant), ou une date avec "
            "son année (« le 24 décembre 2026 à 18h »)")
    return sentence.schedule, text


def one_off(at: datetime, tz: str | ZoneInfo) -> ComposedSchedule:
    """The schedule of a one-off in words ('tomorrow at 5pm'): its instant as ``at``."""
    return ComposedSchedule((), tz=tz, at=at)


def read_schedule(text: str, tz: str | ZoneInfo = "UTC", *, base: str | Path | None = None,
                  now: float | datetime | None = None
                  ) -> tuple[CronExpr | ComposedSchedule, str | None]:
    """A schedule as a user types it in one text (``cronfleet next``, the API preview):
    one expression or sentence (:func:`cronfleet.cron.parse_schedule`), or a composition
    (:func:`parse_composed`). Returns ``(schedule, sentence)``: ``sentence`` is the text as
    written when any piece of it was read as words, else ``None``. A one-off in words
    ('tomorrow at 5pm') is read at ``now`` (default: the system clock)."""
    if not is_composition(text):
        return parse_schedule(text, tz, now=now)
    words: list[bool] = []
    schedule = parse_composed(text, tz, base=base, _words=words, now=now)
    return schedule, (text if any(words) else None)


def parse_composed(text: str, tz: str | ZoneInfo = "UTC", *, base: str | Path | None = None,
                   _words: list[bool] | None = None, now: float | datetime | None = None
                   ) -> CronExpr | ComposedSchedule:
    """Read a composition written as its canonical text: pieces separated by ``|``, each
    an expression (or a sentence), ``at ISO``, ``start ISO``, ``end ISO`` or ``except
    ENTRY`` (``"0 9 * * 1-5 | 0 12 * * 6 | except 12-25"``). Text that is no composition
    is one plain expression or sentence (:func:`cronfleet.cron.parse_schedule`). A piece
    that is a one-off in words ('tomorrow at 5pm | except ...') is its ``at``."""
    if not is_composition(text):
        expr, sentence = parse_schedule(text, tz, now=now)
        if _words is not None:
            _words.append(sentence is not None)
        return expr
    zone = resolve_tz(tz, "")
    exprs: list[CronExpr] = []
    opts: dict[str, object] = {}
    exclude: list[str] = []
    offset = 0
    for raw in text.split("|"):
        piece = raw.strip()
        column = offset + len(raw) - len(raw.lstrip()) + 1
        offset += len(raw) + 1
        if not piece:
            raise CronSyntaxError("expression", "|", max(column - 1, 1), text,
                                  "empty piece between '|'")
        key = _keyword(piece)
        if key is None:
            expr, sentence = parse_schedule(piece, zone, now=now)
            if _words is not None:
                _words.append(sentence is not None)
            if isinstance(expr, ComposedSchedule):  # a one-off in words: its 'at'
                if "at" in opts:
                    raise CronSyntaxError("at", piece, column, text, "'at' given twice")
                opts["at"] = expr.at
                continue
            exprs.append(expr)
        elif key[0] == "except":
            exclude.append(key[1])
        elif key[0] in opts:
            raise CronSyntaxError(key[0], piece, column, text, f"{key[0]!r} given twice")
        else:
            opts[key[0]] = key[1]
    try:
        return compose(exprs, zone, at=opts.get("at"), start=opts.get("start"),
                       end=opts.get("end"), exclude=exclude, base=base)
    except ValueError as exc:
        if isinstance(exc, CronSyntaxError):
            raise
        raise CronSyntaxError("expression", text, 1, text, str(exc)) from None
