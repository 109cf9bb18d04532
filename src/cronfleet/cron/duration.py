"""Durations as people write them in configs: ``30s``, ``10m``, ``1h30m``, ``2d``.

Shared by interval schedules (``5m``, ``@every 1h30m``) and every duration-valued option of
the runtime (timeouts, jitter, catch-up windows), so both accept exactly the same spelling.
"""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["DurationError", "format_duration", "parse_duration", "to_timedelta"]

_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class DurationError(ValueError):
    """A duration string that cannot be read; the message names the value and the problem."""


def parse_duration(text: str) -> timedelta:
    """Read ``"1h30m"``-style text (units ms, s, m, h, d, w; a bare number means seconds)."""
    raw = text
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise DurationError("empty duration (expected e.g. '30s', '10m', '1h30m')")
    try:
        return timedelta(seconds=float(s))
    except ValueError:
        pass
    pos = 0
    total = 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise DurationError(
            f"invalid duration {raw!r}: unexpected {s[pos:]!r} at column {pos + 1} "
            "(expected a number followed by ms, s, m, h, d or w, e.g. '30s', '1h30m')"
        )
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
