"""Expression text -> parsed form (fields, macro expansion, intervals, time zone).

``parse_text`` never raises anything but :class:`CronSyntaxError` for a ``str`` input:
every failure path below builds one, with the field, token and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, timedelta, tzinfo
from zoneinfo import ZoneInfo

from .duration import DurationError, parse_duration
from .errors import CronSyntaxError
from .fields import DOM, DOW, HOUR, MINUTE, MONTH, SECOND, FieldSpec, field_spec
from .schedule import WallSchedule

__all__ = ["MACROS", "CronForm", "IntervalForm", "parse_text", "resolve_tz"]

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_TOKEN = re.compile(r"\S+", re.ASCII)
# a bare interval token: digits with a unit, e.g. 30s, 5m, 1h30m, 1.5h (a bare number is not one)
_BARE_INTERVAL = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d|w))+", re.ASCII | re.IGNORECASE)
_MICRO = timedelta(microseconds=1)
_FIELDS5 = (MINUTE, HOUR, DOM, MONTH, DOW)
_FIELDS6 = (SECOND, MINUTE, HOUR, DOM, MONTH, DOW)


@dataclass(frozen=True, slots=True)
class CronForm:
    """A field-based expression."""

    text: str  # the 5 or 6 fields actually used (macros expanded)
    specs: tuple[FieldSpec, ...]  # always 6: seconds first
    nfields: int  # 5 or 6 as written (macros count as 5)
    wallclock: bool  # fixed-time job: runs on wall-clock time across DST changes
    schedule: WallSchedule


@dataclass(frozen=True, slots=True)
class IntervalForm:
    """A fixed period anchored to the Unix epoch."""

    seconds: int


def resolve_tz(tz: str | tzinfo, expr: str = "") -> ZoneInfo:
    """An IANA name or a ``ZoneInfo`` -> ``ZoneInfo``; anything unknown is a syntax error."""
    if isinstance(tz, ZoneInfo):
        return tz
    if tz is UTC:
        return ZoneInfo("UTC")
    if isinstance(tz, str):
        name = tz.strip()
        if not name:
            raise CronSyntaxError("timezone", tz, None, expr, "empty time zone name")
        try:
            return ZoneInfo(name)
        except Exception as exc:  # ZoneInfoNotFoundError, ValueError, OSError, ...
            raise CronSyntaxError(
                "timezone",
                tz,
                None,
                expr,
                f"unknown time zone {tz!r} (expected an IANA name such as 'Europe/Paris')",
            ) from exc
    raise TypeError(f"tz must be an IANA zone name or a ZoneInfo, not {type(tz).__name__}")


def parse_text(expr: str) -> CronForm | IntervalForm:
    if not isinstance(expr, str):
        raise TypeError(f"a cron expression must be a str, not {type(expr).__name__}")
    tokens = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(expr)]
    if not tokens:
        raise CronSyntaxError(
            "expression", expr, 1, expr, "empty expression (expected e.g. '*/5 * * * *')"
        )
    first, col = tokens[0]
    if first.startswith("@"):
        low = first.lower()
        if low == "@every":
            return _interval(expr, tokens[1:], col)
        if low not in MACROS:
            raise CronSyntaxError(
                "expression",
                first,
                col,
                expr,
                f"unknown macro {first!r} (expected @yearly, @annually, @monthly, @weekly, "
                "@daily, @midnight, @hourly or @every <duration>)",
            )
        if len(tokens) > 1:
            tok, tcol = tokens[1]
            raise CronSyntaxError(
                "expression", tok, tcol, expr, f"unexpected {tok!r} after macro {first!r}"
            )
        return _cron(expr, MACROS[low], macro_col=col)
    if len(tokens) == 1 and _BARE_INTERVAL.fullmatch(first):
        return _interval(expr, tokens, col)
    return _cron(expr, expr)


def _interval(expr: str, tokens: list[tuple[str, int]], col: int) -> IntervalForm:
    if not tokens:
        raise CronSyntaxError(
            "interval", "", col, expr, "'@every' needs a duration, e.g. '@every 1h30m'"
        )
    text = " ".join(t for t, _ in tokens)
    start = tokens[0][1]
    try:
        td = parse_duration(text)
    except DurationError as exc:
        raise CronSyntaxError("interval", text, start, expr, str(exc)) from None
    micros = td // _MICRO
    if micros <= 0:
        raise CronSyntaxError("interval", text, start, expr, f"{text!r} must be a positive period")
    if micros % 1_000_000:
        raise CronSyntaxError(
            "interval", text, start, expr, f"{text!r} must be a whole number of seconds"
        )
    return IntervalForm(micros // 1_000_000)


def _cron(expr: str, text: str, macro_col: int | None = None) -> CronForm:
    parts = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(text)]
    if macro_col is not None:  # errors cannot happen in a macro, but keep columns honest
        parts = [(t, macro_col) for t, _ in parts]
    n = len(parts)
    if n not in (5, 6):
        tok, tcol = parts[6] if n > 6 else parts[-1]  # the first extra, or the last given
        raise CronSyntaxError(
            "expression",
            tok,
            tcol,
            expr,
            f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
            f"(with a leading seconds field), got {n}",
        )
    defs = _FIELDS5 if n == 5 else _FIELDS6
    specs = [field_spec(fd, tok, expr, tcol) for fd, (tok, tcol) in zip(defs, parts, strict=True)]
    if n == 5:
        specs.insert(0, field_spec(SECOND, "0", expr, 1))
    sec, minute, hour, dom, month, dow = specs
    schedule = WallSchedule(sec, minute, hour, dom, month, dow)
    if not schedule.satisfiable():
        dom_tok, dom_col = parts[n - 3]
        mon_tok, _ = parts[n - 2]
        dow_tok, _ = parts[n - 1]
        raise CronSyntaxError(
            "day-of-month",
            dom_tok,
            dom_col,
            expr,
            f"{dom_tok!r} never falls in month {mon_tok!r}"
            + (f" on day-of-week {dow_tok!r}" if not dow.unrestricted else "")
            + ": the expression can never fire",
        )
    # Debian/cronie (and cronsim): a 5-field job whose minute and hour fields do not start
    # with '*' is a fixed-time job and follows the wall clock across DST changes.
    wallclock = n == 5 and not minute.text.startswith("*") and not hour.text.startswith("*")
    canonical = " ".join(t for t, _ in parts)
    if canonical == text:
        canonical = text  # one string, not two equal ones (a million schedules)
    return CronForm(canonical, tuple(specs), n, wallclock, schedule)

