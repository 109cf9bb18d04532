"""One cron field (``"1-5/2"``, ``"MON#2"``, ``"L-3"``...) -> a :class:`FieldSpec`.

Grammar of a field (a comma-separated list of items)::

    item   := '*' ['/' step] | '?'                 ('?' only in the two day fields)
            | value ['-' value] ['/' step]          (a > b wraps around: FRI-MON, 22-2,
                                                     NOV-FEB; refused in minute, second
                                                     and day-of-month: _NO_WRAP)
            | value '/' step                        (value .. field maximum, every step)
    value  := number | name                          (JAN-DEC, SUN-SAT, any case)
    dom    += 'L' | 'L-' n | 'LW' | n 'W' | value '-L' ['/' step]
    dow    += value 'L' | value '#' n               (last / n-th weekday of the month)

Everything here is ASCII: a character outside ``[0-9A-Za-z*?/,#-]`` is an error, never a
surprise from Unicode digit or case rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import CronSyntaxError
from .tables import Interner

__all__ = [
    "DOM",
    "DOW",
    "HOUR",
    "MINUTE",
    "MONTH",
    "SECOND",
    "FieldDef",
    "FieldSpec",
    "field_spec",
    "parse_field",
]

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_ALLOWED = re.compile(r"[0-9A-Za-z*?/,#\-]*", re.ASCII)
_MAX_DIGITS = 9  # longer numbers are out of range anyway; keeps int() cheap and total


@dataclass(frozen=True, slots=True)
class FieldDef:
    """Static facts about one field position."""

    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()  # names[i] stands for lo + i
    day_field: bool = False  # accepts '?'

    def name_value(self, text: str) -> int | None:
        up = text.upper()
        if up in self.names:
            return self.names.index(up) + self.lo
        return None


SECOND = FieldDef("second", 0, 59)
MINUTE = FieldDef("minute", 0, 59)
HOUR = FieldDef("hour", 0, 23)
DOM = FieldDef("day-of-month", 1, 31, day_field=True)
MONTH = FieldDef("month", 1, 12, MONTH_NAMES)
DOW = FieldDef("day-of-week", 0, 7, DAY_NAMES, day_field=True)

# fields where a reversed range ('5-1') is refused rather than wrapped: the wrap is a
# common need in hours (22-2: the night), weekdays (FRI-MON) and months (NOV-FEB); in
# these it is almost always swapped bounds (cronie refuses it), and a month's days do not
# even cycle evenly (docs/cron.md, "Fields")
_NO_WRAP = frozenset({SECOND, MINUTE, DOM})


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """A parsed field. ``values`` holds plain values; day-of-week 7 is stored as 0."""

    text: str
    values: frozenset[int]
    star: bool  # the text starts with '*' or '?' (drives the dom/dow AND-OR rule)
    unrestricted: bool  # matches every value of the field
    # day-of-month specials
    last: frozenset[int] = field(default_factory=frozenset)  # n of 'L-n' ('L' is 0)
    last_weekday: bool = False  # 'LW'
    nearest: frozenset[int] = field(default_factory=frozenset)  # n of 'nW'
    # day-of-week specials
    nth: frozenset[tuple[int, int]] = field(default_factory=frozenset)  # (dow, n) of 'x#n'
    last_dow: frozenset[int] = field(default_factory=frozenset)  # x of 'xL'

    @property
    def has_specials(self) -> bool:
        return bool(
            self.last or self.last_weekday or self.nearest or self.nth or self.last_dow
        )


class _Ctx:
    """Error reporting for one field: knows the expression and the field's column."""

    __slots__ = ("col", "expr", "fd")

    def __init__(self, fd: FieldDef, expr: str, col: int) -> None:
        self.fd = fd
        self.expr = expr
        self.col = col

    def error(self, token: str, offset: int, reason: str) -> CronSyntaxError:
        return CronSyntaxError(self.fd.name, token, self.col + offset, self.expr, reason)


def _number(ctx: _Ctx, text: str, offset: int, lo: int, hi: int, what: str = "") -> int:
    if not _DIGITS.fullmatch(text):
        raise ctx.error(text, offset, f"{text!r} is not a number{what}")
    if len(text) > _MAX_DIGITS or not lo <= int(text) <= hi:
        raise ctx.error(text, offset, f"{text!r} is out of range {lo}-{hi}{what}")
    return int(text)


def _value(ctx: _Ctx, text: str, offset: int) -> int:
    fd = ctx.fd
    if text == "":
        raise ctx.error(text, offset, "a value is missing")
    if _DIGITS.fullmatch(text):
        return _number(ctx, text, offset, fd.lo, fd.hi)
    named = fd.name_value(text)
    if named is not None:
        return named
    if fd.names:
        hint = f"a number {fd.lo}-{fd.hi} or a name {fd.names[0]}-{fd.names[-1]}"
    else:
        hint = f"a number {fd.lo}-{fd.hi}"
    raise ctx.error(text, offset, f"{text!r} is not a valid value (expected {hint})")


def _span(fd: FieldDef, a: int, b: int) -> list[int]:
    """Values a..b in order, wrapping around the field's cycle when a > b."""
    if a <= b:
        return list(range(a, b + 1))
    if fd is DOW:  # the cycle is SUN..SAT; 7 is another name for SUN
        return list(range(a, 7)) + list(range(0, b + 1))
    return list(range(a, fd.hi + 1)) + list(range(fd.lo, b + 1))


def parse_field(fd: FieldDef, text: str, expr: str, col: int) -> FieldSpec:
    """Parse ``text`` (the field as written, starting at 1-based ``col`` of ``expr``)."""
    ctx = _Ctx(fd, expr, col)
    bad = _ALLOWED.match(text)
    end = bad.end() if bad else 0
    if end != len(text):
        ch = text[end]
        raise ctx.error(ch, end, f"unexpected character {ch!r}")

    values: set[int] = set()
    last: set[int] = set()
    nearest: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_dow: set[int] = set()
    last_weekday = False
    unrestricted = False

    offset = 0
    for item in text.split(","):
        kind = _item(ctx, item, offset, values)
        if kind is None:
            pass
        elif kind[0] == "all":
            unrestricted = True
        elif kind[0] == "L":
            last.add(kind[1])
        elif kind[0] == "LW":
            last_weekday = True
        elif kind[0] == "W":
            nearest.add(kind[1])
        elif kind[0] == "#":
            nth.add((kind[1], kind[2]))
        else:  # "xL"
            last_dow.add(kind[1])
        offset += len(item) + 1

    if fd is DOW:
        if 7 in values:
            values.discard(7)
            values.add(0)
        full = set(range(0, 7))
    else:
        full = set(range(fd.lo, fd.hi + 1))
    if values >= full:
        unrestricted = True
    if unrestricted:
        values = full
    return FieldSpec(
        text=text,
        values=frozenset(values),
        star=text[:1] in ("*", "?"),
        unrestricted=unrestricted,
        last=frozenset(last),
        last_weekday=last_weekday,
        nearest=frozenset(nearest),
        nth=frozenset(nth),
        last_dow=frozenset(last_dow),
    )


_SPECS: Interner[tuple[str, str], FieldSpec] = Interner("fields", 16384)


def field_spec(fd: FieldDef, text: str, expr: str, col: int) -> FieldSpec:
    """:func:`parse_field`, one shared :class:`FieldSpec` per (field, text as written): a
    spec depends on nothing else (the expression and column only place an error)."""
    return _SPECS.get((fd.name, text), lambda: parse_field(fd, text, expr, col))


def _item(ctx: _Ctx, item: str, offset: int, values: set[int]) -> tuple[str, int, int] | None:
    """Parse one list item; plain values go into ``values``, specials are returned."""
    fd = ctx.fd
    if item == "":
        raise ctx.error(item, offset, "empty list item (check for a stray ',')")
    up = item.upper()

    # -- specials that take no step --------------------------------------------------------
    if "/" not in item:
        if item == "?":
            if not fd.day_field:
                raise ctx.error(item, offset, "'?' is only allowed in day-of-month and day-of-week")
            return ("all", 0, 0)
        if fd is DOM:
            if up == "L":
                return ("L", 0, 0)
            if up == "LW":
                return ("LW", 0, 0)
            if up.startswith("L-"):
                n = _number(ctx, item[2:], offset + 2, 0, 30, " (days before the last day)")
                return ("L", n, 0)
            if up.endswith("W") and len(up) > 1:
                n = _number(ctx, item[:-1], offset, 1, 31, " (nearest weekday to day n)")
                return ("W", n, 0)
        if fd is DOW:
            if up == "L":
                raise ctx.error(
                    item, offset, "'L' needs a weekday in day-of-week, e.g. '5L' (last Friday)"
                )
            if "#" in item:
                day_text, _, n_text = item.partition("#")
                day = _value(ctx, day_text, offset)
                n = _number(ctx, n_text, offset + len(day_text) + 1, 1, 5, " (n-th weekday)")
                return ("#", day % 7, n)
            if up.endswith("L") and "-" not in item:
                day = _value(ctx, item[:-1], offset)
                return ("xL", day % 7, 0)
        if "#" in item:
            raise ctx.error("#", offset + item.index("#"), "'#' is only allowed in day-of-week")
        if fd is not DOM and up.endswith("W") and len(up) > 1 and up[:-1].isdigit():
            raise ctx.error(item, offset, "'W' is only allowed in day-of-month")
        if fd is not DOM and fd is not DOW and "L" in up and not fd.names:
            raise ctx.error(item, offset, "'L' is only allowed in day-of-month and day-of-week")

    # -- base [/ step] -----------------------------------------------------------------------
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step_off = offset + len(base) + 1
        if "/" in step_text:
            raise ctx.error(item, offset, f"{item!r} has more than one '/'")
        if step_text == "":
            raise ctx.error(item, offset, f"{item!r} is missing a step after '/'")
        if not _DIGITS.fullmatch(step_text):
            raise ctx.error(step_text, step_off, f"step {step_text!r} is not a number")
        if len(step_text) > _MAX_DIGITS:
            raise ctx.error(step_text, step_off, f"step {step_text!r} is too large")
        step = int(step_text)
        if step == 0:
            raise ctx.error(step_text, step_off, "step must be at least 1")
        if base == "":
            raise ctx.error(item, offset, f"{item!r} needs a range or '*' before '/'")

    hi = fd.hi
    if base == "*":
        seq = list(range(fd.lo, hi + 1))
        if step == 1:
            values.update(seq)
            return ("all", 0, 0)
    elif base == "?":
        raise ctx.error(item, offset, "'?' cannot take a step")
    elif "-" in base:
        a_text, _, b_text = base.partition("-")
        a = _value(ctx, a_text, offset)
        b_off = offset + len(a_text) + 1
        # days past the month's end never match, so 'a-L' is 'a-31'
        b = 31 if fd is DOM and b_text.upper() == "L" else _value(ctx, b_text, b_off)
        if fd is DOW and a == 7 and b < 7:
            a = 0
        if a > b and fd in _NO_WRAP:
            raise ctx.error(base, offset, f"range {base!r} is reversed ({a} > {b}): write "
                                          f"{b}-{a}, or {a}-{fd.hi},{fd.lo}-{b} for the "
                                          f"values from {a} round to {b}")
        seq = _span(fd, a, b)
    else:
        a = _value(ctx, base, offset)
        seq = list(range(a, hi + 1)) if slash else [a]
    values.update(seq[::step])
    return None
