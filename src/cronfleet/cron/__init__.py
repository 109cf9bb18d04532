"""Time: cron grammar, next/prev fire times, DST rules, intervals, descriptions.

    >>> from datetime import datetime, timezone
    >>> from cronfleet.cron import parse
    >>> expr = parse("30 2 * * *", tz="Europe/Paris")
    >>> expr.next(datetime(2024, 3, 30, 12, tzinfo=timezone.utc)).isoformat()
    '2024-03-31T03:00:00+02:00'

See docs/cron.md for the grammar and the DST rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

# the composition (several expressions, a one-off, bounds, exclusions) and the one
# schedule reader of every face (parse_schedule: cron text, else a sentence)
from .compose import (
    ComposedSchedule,
    Exclusion,
    compose,
    one_off,
    parse_composed,
    parse_exclusion,
    parse_instant,
    parse_schedule,
    read_schedule,
)
from .errors import CronSyntaxError, NoFireTimeError
from .expr import CronExpr
from .parsing import parse

if TYPE_CHECKING:
    from .words import Sentence

__all__ = [
    "AnySchedule",
    "ComposedSchedule",
    "CronExpr",
    "CronSyntaxError",
    "Exclusion",
    "NoFireTimeError",
    "Sentence",
    "compose",
    "from_text",
    "parse",
    "parse_composed",
    "parse_exclusion",
    "parse_instant",
    "parse_schedule",
    "read_schedule",
]


def from_text(text: str, tz: str | ZoneInfo | None = None, lang: str | None = None, *,
              now: float | datetime | None = None) -> Sentence:
    """Compile an English or French sentence to a schedule (see :mod:`.words`); a one-off
    ('tomorrow at 5pm') is read at ``now`` (default: the system clock)."""
    from . import words

    return words.from_text(text, tz, lang, now=now, one_off=one_off)


AnySchedule = CronExpr | ComposedSchedule
"""What a job's ``schedule`` is: a plain expression, or a composition of several."""


def __getattr__(name: str) -> Any:  # PEP 562: Sentence without importing words eagerly
    if name == "Sentence":
        from .words import Sentence

        return Sentence
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
