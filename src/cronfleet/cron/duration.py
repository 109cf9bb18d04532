"""Durations as people write them in configs: ``30s``, ``10m``, ``1h30m``, ``2d``.

Shared by interval schedules (``5m``, ``@every 1h30m``) and every duration-valued option of
the runtime (timeouts, jitter, catch-up windows), so both accept exactly the same spelling.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta

__all__ = ["DurationError", "format_duration", "parse_duration", "to_timedelta"]

_SECOND, _MINUTE, _HOUR, _DAY = 1.0, 60.0, 3600.0, 86400.0
_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": _SECOND, "sec": _SECOND, "secs": _SECOND, "second": _SECOND, "seconds": _SECOND,
    "m": _MINUTE, "min": _MINUTE, "mins": _MINUTE, "minute": _MINUTE, "minutes": _MINUTE,
    "h": _HOUR, "hr": _HOUR, "hrs": _HOUR, "hour": _HOUR, "hours": _HOUR,
    "d": _DAY, "day": _DAY, "days": _DAY,
    "w": 7 * _DAY, "week": 7 * _DAY, "weeks": 7 * _DAY,
}  # fmt: skip
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")
_MAX_SECONDS = 100 * 365 * _DAY
_HINT = "expected a number and a unit (ms, s, m, h, d, w), e.g. '30s', '10m', '1h30m'"


class DurationError(ValueError):
    """A duration string that cannot be read; the message names the value and the problem."""


@functools.lru_cache(maxsize=1024)
def parse_duration(text: str) -> timedelta:
    """Read ``"1h30m"``, ``"90s"``, ``"10 minutes"`` or ``"2h 30m"``; a bare number means
    seconds. Columns in errors count from 1 in the text as written. Cached (a batch of
    1,000 jobs says "30s" 1,000 times; a timedelta is immutable)."""
    if not text.strip():
        raise DurationError(f"empty duration ({_HINT})")
    if text.strip().startswith("-"):
        raise DurationError(f"invalid duration {text!r}: must not be negative")
    if _NUMBER.fullmatch(text):
        total = float(text)
    else:
        pos, total = 0, 0.0
        while pos < len(text.rstrip()):
            m = _PART.match(text, pos)
            if m is None:
                col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
                raise DurationError(
                    f"invalid duration {text!r}: unexpected {text[col - 1:]!r} at column {col} "
                    f"({_HINT})"
                )
            unit = m.group(2).lower()
            if unit not in _UNITS:
                raise DurationError(
                    f"invalid duration {text!r}: unknown unit {m.group(2)!r} at column "
                    f"{m.start(2) + 1} ({_HINT})"
                )
            total += float(m.group(1)) * _UNITS[unit]
            pos = m.end()
    if total > _MAX_SECONDS:
        raise DurationError(f"invalid duration {text!r}: longer than 100 years")
    return timedelta(seconds=total)


def to_timedelta(value: str | float | timedelta | None, *, field: str = "duration") -> timedelta:
    """Accept ``"30s"``, a number of seconds or a ``timedelta``; reject negatives.

    ``field`` names the option in the error so a bad ``timeout=`` says it is the timeout.
    """
    if value is None:
        raise DurationError(f"{field}: a duration is required")
    if isinstance(value, bool):
        raise DurationError(f"{field}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, int | float):
        if value != value or value in (math.inf, -math.inf):
            raise DurationError(f"{field}: expected a finite number of seconds, got {value!r}")
        if value < 0:
            raise DurationError(f"{field}: must not be negative (got {value!r})")
        if value > _MAX_SECONDS:
            raise DurationError(f"{field}: longer than 100 years (got {value!r} seconds)")
        td = timedelta(seconds=value)
    elif isinstance(value, str):
        try:
            td = parse_duration(value)
        except DurationError as exc:
            raise DurationError(f"{field}: {exc}") from None
    else:
        raise DurationError(f"{field}: expected a duration like '30s', got {type(value).__name__}")
    if td < timedelta(0):
        raise DurationError(f"{field}: must not be negative (got {value!r})")
    return td


def format_duration(td: timedelta) -> str:
    """The shortest ``1h30m``-style spelling, for messages and docs."""
    total = td.total_seconds()
    if total == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        n, total = divmod(total, size)
        if n:
            out.append(f"{int(n)}{unit}")
    if total:
        out.append(f"{total:g}s")
    return "".join(out)
