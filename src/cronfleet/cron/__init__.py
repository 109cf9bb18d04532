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
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError, NoFireTimeError
from .expr import CronExpr

if TYPE_CHECKING:
    from .compose import ComposedSchedule
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


@lru_cache(maxsize=4096)
def _parse_cached(expr: str, tz: str | ZoneInfo) -> CronExpr:
    return CronExpr(expr, tz)


def parse(expr: str, tz: str | ZoneInfo = "UTC") -> CronExpr:
    """Parse a cron expression, macro or interval, bound to time zone ``tz``.

    ``tz`` is an IANA name (``"Europe/Paris"``) or a ``ZoneInfo``; the default is UTC.
    Raises :class:`CronSyntaxError` (a ``ValueError``) for any text that is not a valid
    schedule and for an unknown zone. Results are cached: parsing the same text twice is
    cheap and returns the same immutable object.
    """
    if isinstance(expr, str) and isinstance(tz, str | ZoneInfo):
        return _parse_cached(expr, tz)
    return CronExpr(expr, tz)


def parse_schedule(text: str, tz: str | ZoneInfo = "UTC", *,
                   now: float | datetime | None = None, relative: bool = True
                   ) -> tuple[CronExpr | ComposedSchedule, str | None]:
    """A schedule as a user writes it: a cron expression, macro or interval, or else a
    sentence (:func:`from_text`, English or French).

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
    sentence = words.from_text(text, tz, now=now)
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


def from_text(text: str, tz: str | ZoneInfo | None = None, lang: str | None = None, *,
              now: float | datetime | None = None) -> Sentence:
    """Compile an English or French sentence to a schedule (see :mod:`.words`); a one-off
    ('tomorrow at 5pm') is read at ``now`` (default: the system clock)."""
    from . import words

    return words.from_text(text, tz, lang, now=now)


# the composition (several expressions, a one-off, bounds, exclusions); imported after
# parse() and parse_schedule() are defined, which it uses
from .compose import (  # noqa: E402
    ComposedSchedule,
    Exclusion,
    compose,
    parse_composed,
    parse_exclusion,
    parse_instant,
    read_schedule,
)

AnySchedule = CronExpr | ComposedSchedule
"""What a job's ``schedule`` is: a plain expression, or a composition of several."""


def __getattr__(name: str) -> Any:  # PEP 562: Sentence without importing words eagerly
    if name == "Sentence":
        from .words import Sentence

        return Sentence
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
