"""Schedules written as sentences (English and French) -> cronfleet's own cron syntax.

``from_text("every weekday at 9am")`` compiles a sentence to a canonical 5- or 6-field
cron expression (``0 9 * * 1-5``) with a small, deterministic grammar: no model, no
network. A phrase either compiles to exactly what it says or is refused with a
:class:`CronSyntaxError` (field ``sentence``) that points at the word (column) and, when it
can, suggests a fix. The grammar and the refusal rules are in docs/cron.md ("Writing
schedules in words"); the word tables are in :mod:`.words_tables`.

How it works: the text is cut into tokens (words, numbers, times such as ``9:30``,
``9h30``, ``9am``, ordinals such as ``1st``, ``2e``), each word is mapped to a symbol of
the chosen language (``every``/``tous``/``chaque`` -> ``EVERY``), and one parser reads
clauses (how often, at what time, which days, which months) in any order, each at most
once. The clauses fill the five cron fields; conflicts and anything cron cannot say
exactly are refused.
"""

from __future__ import annotations

import difflib
import re
import time as _time
import unicodedata
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, NoReturn
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError
from .expr import CronExpr
from .instants import parse_instant
from .parser import resolve_tz
from .parsing import parse  # the package's cached parse
from .words_tables import (
    AFTERNOON,
    EVENING,
    LANGS,
    MONTH_NAMES_EN,
    MORNING,
    NIGHT,
    WEEKDAY_NAMES_EN,
    Lang,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .compose import ComposedSchedule

__all__ = ["Sentence", "compile_text", "from_text", "looks_like_words"]

_FIELD = "sentence"
_MAX_LEN = 300

# one token: a time (9:30, 9h30, 9h, 9am, 9.30pm), an ordinal (1st, 2e, 3eme), a number,
# a word (letters, inner hyphens), or one punctuation mark
_AMPM = r"\s*(?:am|pm|a\.m\.|p\.m\.)(?![^\W\d_])"
_TOKEN = re.compile(
    r"(?P<time>[0-9]{1,2}(?::[0-9]{2}" + _AMPM + r"|:[0-9]{2}|h[0-9]{2}|h(?![^\W_])|"
    + _AMPM + r"))"
    r"|(?P<ord>[0-9]{1,2}(?:st|nd|rd|th|er|re|ème|eme|ième|ieme|e)(?![^\W\d_]))"
    r"|(?P<num>[0-9]+(?![^\W_]))"
    r"|(?P<word>[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*['\u2019]?)"
    r"|(?P<punct>[,;&\-/.])"
)
_SPACE = re.compile(r"\s+")
_TIME = re.compile(r"([0-9]{1,2})(?:[:h]([0-9]{2})|h)?\s*(am|pm|a\.m\.|p\.m\.)?\Z")
_ORD = re.compile(r"[0-9]+")


def _fold(word: str) -> str:
    """Lower case, accents removed, typographic apostrophes made ASCII."""
    word = word.lower().replace("\u2019", "'")
    if word.isascii():
        return word
    return "".join(
        c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c)
    )


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # a symbol (EVERY, AT, ...), NUM, ORD, TIME, DOW, MON, UNIT, AMPM
    value: int  # number / ordinal / weekday / month / minutes of day / unit index
    col: int  # 1-based column in the text
    raw: str  # as written
    explicit: bool = True  # TIME: its clock is known (am/pm, 0 or 13-23, two digits)
    shift: bool = False  # TIME: an hour 1-12 without am/pm, that a part of the day moves


# units of "every N <unit>"
SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER, YEAR = range(8)
_UNIT_NAMES = ("second", "minute", "hour", "day", "week", "month", "quarter", "year")


@dataclass(frozen=True, slots=True)
class Sentence:
    """What :func:`from_text` read: the canonical expression, its words, the language; for
    a one-off, its instant."""

    text: str  # the sentence as written
    expr: str  # the canonical text: "0 9 * * 1-5", or "at 2026-12-02T17:00:00+01:00"
    lang: str  # "en" or "fr"
    schedule: CronExpr | ComposedSchedule = field(repr=False, compare=False)
    at: datetime | None = None  # a one-off's instant
    relative: bool = False  # the instant was read from the moment ("tomorrow", "in 2h")

    @property
    def description(self) -> str:
        """``describe()`` of the canonical expression (computed when asked for)."""
        return self.schedule.describe()


class _Refusal(Exception):
    def __init__(self, tok: Tok | None, reason: str, fr: str | None = None) -> None:
        super().__init__(reason)
        self.tok = tok
        self.reason = reason
        self.fr = fr

    def said(self, lang: Lang) -> str:
        """The reason in the sentence's language."""
        return self.fr if lang.code == "fr" and self.fr is not None else self.reason


def _fail(tok: Tok | None, reason: str, fr: str | None = None) -> NoReturn:
    """Refuse the sentence at ``tok``: ``reason`` in English, ``fr`` in French (a French
    sentence is refused in French)."""
    raise _Refusal(tok, reason, fr)


# -- tokens --------------------------------------------------------------------------------


def _lex(text: str, lang: Lang) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    n = len(text)
    low = text.lower()
    while pos < n:
        m = _SPACE.match(low, pos)
        if m:
            pos = m.end()
            continue
        m = _TOKEN.match(low, pos)
        if m is None or m.end() == pos:
            ch = text[pos]
            raise _Refusal(Tok("?", 0, pos + 1, ch), f"unexpected character {ch!r}",
                           f"caractère inattendu {ch!r}")
        col = pos + 1
        raw = text[pos:m.end()]
        pos = m.end()
        kind = m.lastgroup
        s = m.group()
        if kind == "time":
            out.append(_time_tok(s, col, raw))
        elif kind == "ord":
            m2 = _ORD.match(s)
            assert m2 is not None
            digits = m2.group()
            value = int(digits)
            suffix = s[len(digits):]
            _check_suffix(value, suffix, Tok("ORD", value, col, raw))
            out.append(Tok("ORD", value, col, raw))
        elif kind == "num":
            if len(s) > 4:
                _fail(Tok("NUM", 0, col, raw), f"{raw!r} is too large", f"{raw!r} est trop grand")
            out.append(Tok("NUM", int(s), col, raw))
        elif kind == "punct" and s == ".":
            # a dot ends an abbreviation ("janv.") or the sentence, nothing else
            if not (out and out[-1].kind not in ("NUM", "ORD", "TIME")
                    and text[pos - 2:pos - 1].isalpha()) and text[pos:].strip():
                _fail(Tok(".", 0, col, raw), "unexpected '.'", "'.' inattendu")
        elif kind == "punct":
            sym = {"-": "TO", "/": "SLASH"}.get(s, "AND")
            out.append(Tok(sym, 0, col, raw))
        else:
            _word(_fold(s), col, raw, lang, out)
    return _merge(out, lang)


def _merge(toks: list[Tok], lang: Lang) -> list[Tok]:
    """Two-word forms: "half hour", "quarter hour", "quart d'heure", "demi-heure",
    "jours ouvrés", "en semaine"."""
    out: list[Tok] = []
    i = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < n else None
        if t.kind == "HALF" and nxt is not None and nxt.kind == "UNIT" and nxt.value == HOUR:
            out += [Tok("NUM", 30, t.col, t.raw), Tok("UNIT", MINUTE, nxt.col, nxt.raw)]
            i += 2
        elif t.kind == "HALFHOUR":
            out += [Tok("NUM", 30, t.col, t.raw), Tok("UNIT", MINUTE, t.col, t.raw)]
            i += 1
        elif (t.kind == "UNIT" and t.value == QUARTER and nxt is not None
              and nxt.kind == "UNIT" and nxt.value == HOUR):
            out += [Tok("NUM", 15, t.col, t.raw), Tok("UNIT", MINUTE, nxt.col, nxt.raw)]
            i += 2
        elif (t.kind == "QUARTW" and i + 2 < n and toks[i + 1].kind == "OF"
              and toks[i + 2].kind == "UNIT" and toks[i + 2].value == HOUR):
            out += [Tok("NUM", 15, t.col, t.raw), Tok("UNIT", MINUTE, t.col, t.raw)]
            i += 3
        elif nxt is not None and (
                (t.kind == "UNIT" and t.value == DAY and nxt.kind == "OUVRE")
                or (lang.code == "fr" and t.kind == "IN" and nxt.kind == "UNIT"
                    and nxt.value == WEEK)):
            out.append(Tok("WEEKDAY", 0, t.col, t.raw + " " + nxt.raw))
            i += 2
        elif t.kind in ("HALF", "HALFHOUR", "QUARTW", "OUVRE"):
            _fail(t, f"unexpected {t.raw!r}", f"{t.raw!r} inattendu")
        else:
            out.append(t)
            i += 1
    return out


def _time_tok(s: str, col: int, raw: str) -> Tok:
    m = _TIME.match(s)
    tok = Tok("TIME", 0, col, raw)
    if m is None:  # ":30pm" style never reaches here; be safe
        _fail(tok, f"{raw!r} is not a time", f"{raw!r} n'est pas une heure")
    hour = int(m.group(1))
    minute = int(m.group(2) or 0)
    ampm = m.group(3)
    if minute > 59:
        _fail(tok, f"{raw!r}: minutes must be 00-59", f"{raw!r} : les minutes vont de 00 à 59")
    if ampm:
        if not 1 <= hour <= 12:
            _fail(tok, f"{raw!r}: with am/pm the hour must be 1-12 (did you mean "
                       f"'{hour:02d}:{minute:02d}'?)",
                  f"{raw!r} : am/pm ne s'écrit pas en français (écrivez '{hour}h')")
        hour = hour % 12 + (12 if ampm.startswith("p") else 0)
        return Tok("TIME", hour * 60 + minute, col, raw)
    if hour > 23:
        _fail(tok, f"{raw!r}: the hour must be 0-23", f"{raw!r} : l'heure va de 0 à 23")
    # one rule for every time without am/pm: an hour written with two digits (09:30,
    # 14:30) is the 24-hour clock; one digit (9:30, 9h) leaves the clock open
    one_digit = len(m.group(1)) == 1 and hour >= 1
    return Tok("TIME", hour * 60 + minute, col, raw, explicit=not one_digit,
               shift=1 <= hour <= 12 and m.group(1)[0] != "0")


def _ordinal(n: int, lang: Lang) -> str:
    if lang.code == "fr":
        return "1er" if n == 1 else f"{n}e"
    if n % 100 in (11, 12, 13):
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def _check_suffix(value: int, suffix: str, tok: Tok) -> None:
    if suffix in ("st", "nd", "rd", "th"):
        if value % 100 in (11, 12, 13):
            want = "th"
        else:
            want = {1: "st", 2: "nd", 3: "rd"}.get(value % 10, "th")
        if suffix != want:
            _fail(tok, f"{tok.raw!r} is not an ordinal (did you mean '{value}{want}'?)",
                  f"{tok.raw!r} n'est pas un ordinal français (« {value}e »)")
    elif suffix in ("er", "re") and value != 1:
        _fail(tok, f"{tok.raw!r} is not an ordinal (did you mean '{value}e'?)",
              f"{tok.raw!r} n'est pas un ordinal (vouliez-vous dire « {value}e » ?)")
    if value == 0:
        _fail(tok, f"{tok.raw!r}: there is no day 0", f"{tok.raw!r} : il n'y a pas de jour 0")


def _word(w: str, col: int, raw: str, lang: Lang, out: list[Tok]) -> None:
    hit = lang.words.get(w)
    if hit is not None:
        for kind, value in hit:
            out.append(Tok(kind, value, col, raw))
        return
    if "-" in w:  # "mon-fri", "lundi-vendredi": split on the hyphen
        parts = w.split("-")
        offset = 0
        for i, part in enumerate(parts):
            if i:
                out.append(Tok("TO", 0, col + offset - 1, "-"))
            _word(part, col + offset, raw[offset:offset + len(part)], lang, out)
            offset += len(part) + 1
        return
    if "'" in w:  # l'heure, d'heure, jusqu'au
        head, _, tail = w.partition("'")
        if head + "'" in lang.words:
            _word(head + "'", col, raw[:len(head) + 1], lang, out)
            if tail:
                _word(tail, col + len(head) + 1, raw[len(head) + 1:], lang, out)
            return
    _unknown(w, col, raw, lang)


def _unknown(w: str, col: int, raw: str, lang: Lang) -> NoReturn:
    tok = Tok("?", 0, col, raw)
    other = LANGS["fr" if lang.code == "en" else "en"]
    if w in other.words and w not in ("mar", "sept"):
        _fail(tok, f"{raw!r} is not {lang.name}: write the whole sentence in one language",
              f"{raw!r} n'est pas du français : écrivez toute la phrase dans une langue")
    close = difflib.get_close_matches(w, lang.suggest, n=1, cutoff=0.75)
    if close:
        _fail(tok, f"unknown word {raw!r} (did you mean {lang.display(close[0])!r}?)",
              f"mot inconnu {raw!r} (vouliez-vous dire {lang.display(close[0])!r} ?)")
    _fail(tok, f"unknown word {raw!r}", f"mot inconnu {raw!r}")


# -- the parser -----------------------------------------------------------------------------

_WHAT_FR = {
    "'a day' / 'par jour'": "« par jour »",
    "'day'": "« jour »",
    "'and'": "« et »",
    "a time ('9am', '14:30', 'noon')": "une heure (« 9h », « 14h30 », « midi »)",
    "a day of the week": "un jour de la semaine",
    "a month name": "un nom de mois",
    "what to repeat ('every day', 'every 15 minutes', 'every Monday')":
        "ce qui se répète (« tous les jours », « toutes les 15 minutes », « chaque lundi »)",
    "a unit (minutes, hours, days, months)": "une unité (minutes, heures, jours, mois)",
    "'to' / 'au'": "« au » / « à »",
    "a day": "un jour",
    "'to' / 'à' and the last month ('from June to August')":
        "« à » et le dernier mois (« de juin à août »)",
    "a minute 0-59": "une minute de 0 à 59",
    "'to' / 'au' and the last day": "« au » et le dernier jour",
    "'month' or a month name": "« mois » ou un nom de mois",
    "a day number": "un numéro de jour",
    "'day', 'weekday' or a day of the week after 'last'":
        "« jour », « jour ouvré » ou un jour de la semaine après « dernier »",
    "a day, a month or a time after it": "un jour, un mois ou une heure après",
    "'matin', 'après-midi', 'soir' ou 'nuit'": "« matin », « après-midi », « soir » ou « nuit »",
}
"""What the parser expected, in French (for :meth:`_Parser.expected`)."""
_SLOT_FR = {"frequency": "la fréquence", "time": "l'heure", "day": "le jour",
            "month": "le mois", "hours": "la plage d'heures", "minute": "la minute",
            "count": "le nombre de fois", "part of the day": "le moment de la journée",
            "date": "la date"}


@dataclass(slots=True)
class _Fields:
    second: str | None = None
    minute: str | None = None
    hour: str | None = None
    dom: str | None = None
    month: str | None = None
    dow: str | None = None
    times: list[Tok] | None = None  # AT clause
    at_minute: Tok | None = None  # "at minute 15"
    past_hour: bool = False  # "at 15 minutes past the hour": every hour unless a step says
    step: tuple[int, int, Tok] | None = None  # (unit, n, token) of "every n unit"
    period: int | None = None  # DAY/WEEK/MONTH/QUARTER/YEAR from "every day", "weekly"...
    count: tuple[int, Tok] | None = None  # "twice a day"
    hours_range: tuple[int, int, Tok] | None = None  # "from 9am to 5pm"
    bad_step: tuple[int, int, Tok] | None = None  # "every 2 days": refused once all is read
    part: Tok | None = None  # a part of the day: "every morning", "vendredi soir"
    every: bool = False  # 'every' / 'chaque' was said: a date repeats
    dayrel: Tok | None = None  # "today", "tomorrow", "demain": a one-off
    rel: tuple[int, int, Tok] | None = None  # "in 2 hours", "dans 3 jours": a one-off
    date: Tok | None = None  # a month and a day ("December 24", "le 3 décembre")
    year: Tok | None = None  # "December 24 2026"
    cols: dict[str, Tok] = field(default_factory=dict)  # first token of each clause


class _Parser:
    def __init__(self, toks: list[Tok], lang: Lang) -> None:
        self.toks = toks
        self.i = 0
        self.lang = lang
        self.f = _Fields()

    # token helpers
    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def at(self, *kinds: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind in kinds

    def at_unit(self, unit: int, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind == "UNIT" and t.value == unit

    def take(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def skip(self, *kinds: str) -> None:
        while self.at(*kinds):
            self.i += 1

    def expect(self, what: str, *kinds: str) -> Tok:
        t = self.peek()
        if t is None or t.kind not in kinds:
            self.expected(what)
        return self.take()

    def expected(self, what: str) -> NoReturn:
        t = self.peek()
        fr = _WHAT_FR.get(what, what)
        if t is None:
            last = self.toks[-1] if self.toks else None
            _fail(last, f"the sentence ends too early: expected {what}",
                  f"la phrase s'arrête trop tôt : il manque {fr}")
        _fail(t, f"unexpected {t.raw!r}: expected {what}", f"{t.raw!r} inattendu : il faut {fr}")

    def once(self, slot: str, tok: Tok) -> None:
        prev = self.f.cols.get(slot)
        if prev is not None:
            _fail(tok, f"{tok.raw!r}: the {slot} is already given by {prev.raw!r} "
                       f"(column {prev.col}); say it once",
                  f"{tok.raw!r} : {_SLOT_FR.get(slot, slot)} est déjà donné par {prev.raw!r} "
                  f"(colonne {prev.col}) ; dites-le une fois")
        self.f.cols[slot] = tok

    # the sentence
    def run(self) -> _Fields:
        if not self.toks:
            _fail(None, "empty sentence", "phrase vide")
        while self.peek() is not None:
            start = self.i
            self.skip("AND", "ONLY")
            t = self.peek()
            dangling = next((x for x in self.toks[start:self.i] if x.kind == "AND"), None)
            if dangling is not None and (start == 0 or t is None):
                _fail(dangling, f"unexpected {dangling.raw!r}", f"{dangling.raw!r} inattendu")
            if t is None:
                break
            k = t.kind
            if k == "OF" and self.at("DOW", "MON", "TIME", "NUM", "NOON", "MIDNIGHT", k=1):
                # "du lundi au vendredi", "de 9h à 17h"
                k = "FROM"
            if k == "EVERY":
                self.every()
            elif k == "ADVERB":
                self.take()
                self.once("frequency", t)
                self.set_step(t.value, 1, t)
            elif k in ("ONCE", "NUM") and self.count_ahead():
                self.count()
            elif k == "NUM" and self.at("UNIT", k=1):
                # a duration inside a sentence: alone it would be an interval (compile_text)
                u = self.toks[self.i + 1]
                _fail(t, f"'{t.raw} {u.raw}' here: say 'every {t.raw} {u.raw}' (on the clock), "
                         "or give the duration alone for an interval counted from the epoch",
                      f"'{t.raw} {u.raw}' ici : dites « toutes les {t.raw} {u.raw} » (sur "
                      "l'horloge), ou la durée seule pour un intervalle compté depuis 1970")
            elif k in ("AT", "TIME", "NOON", "MIDNIGHT"):
                self.at_clause()
            elif k == "PART":
                self.part_clause()
            elif k == "DAYREL":
                self.take()
                self.once("date", t)
                self.f.dayrel = t
            elif k == "CE":  # "ce soir", "cet après-midi": today's
                self.take()
                if not self.at("PART"):
                    self.expected("'matin', 'après-midi', 'soir' ou 'nuit'")
                self.once("date", t)
                self.f.dayrel = Tok("DAYREL", 0, t.col, t.raw)
            elif k == "IN" and self.at("NUM", k=1) and self.at("UNIT", k=2):
                self.in_clause()
            elif k == "IN" and (self.at("PART", k=1)
                                or (self.at("THE", k=1) and self.at("PART", k=2))):
                self.take()  # "in the morning"
                self.skip("THE")
                self.part_clause()
            elif k == "FROM":
                self.from_clause()
            elif k == "BETWEEN":
                self.between_clause()
            elif k == "THE" and self.at("PART", k=1):  # "le matin", "the evening"
                self.take()
                self.part_clause()
            elif k in ("ON", "THE", "ORD", "LAST", "DOW", "WEEKDAY", "WEEKEND", "MON",
                       "NUM") or (k == "UNIT" and t.value == DAY
                                  and self.at("NUM", "ORD", k=1)):
                self.day_clause()
            elif k == "IN":
                self.take()
                self.skip("THE")
                if self.at("MON"):
                    self.months()
                else:
                    self.expected("a month name")
            else:
                _fail(t, f"unexpected {t.raw!r}" + (" here" if k != "?" else ""),
                      f"{t.raw!r} inattendu" + (" ici" if k != "?" else ""))
        return self.f

    def part_clause(self) -> None:
        """'morning', 'soir': the part of the day the times fall in."""
        t = self.take()
        self.once("part of the day", t)
        self.f.part = t

    def in_clause(self) -> None:
        """'in 2 hours', 'dans 3 jours': a one-off counted from now."""
        self.take()
        n = self.take()
        unit = self.take()
        if unit.value not in (SECOND, MINUTE, HOUR, DAY, WEEK):
            _fail(unit, f"'in {n.raw} {unit.raw}': say the date ('on March 5 at 9am')",
                  f"« dans {n.raw} {unit.raw} » : donnez la date (« le 5 mars à 9h »)")
        if n.value < 1:
            _fail(n, "'in ...' needs a positive number", "« dans ... » veut un nombre positif")
        self.once("date", n)
        self.f.rel = (n.value, unit.value, n)

    def count_ahead(self) -> bool:
        t = self.peek()
        if t is None:
            return False
        if t.kind == "ONCE":
            return True
        return self.at("TIMES", k=1)

    def count(self) -> None:
        t = self.take()
        n = t.value
        if t.kind == "NUM":
            self.take()  # TIMES
        self.once("count", t)
        self.expect("'a day' / 'par jour'", "PER")
        self.skip("THE")
        unit = self.expect("'day'", "UNIT")
        if unit.value != DAY:
            _fail(unit, f"{t.raw!r} a {unit.raw!r} is not supported: give the times "
                        "('every day at 8:00 and 20:00')",
                  f"{t.raw!r} par {unit.raw!r} n'est pas pris en charge : donnez les heures "
                  "(« tous les jours à 8h et 20h »)")
        self.f.count = (n, t)

    def every(self) -> None:
        ev = self.take()
        self.f.every = True
        self.skip("THE")
        t = self.peek()
        if t is None:
            self.expected("what to repeat ('every day', 'every 15 minutes', 'every Monday')")
        if t.kind in ("NUM", "OTHER"):
            n_tok = self.take()
            n = 2 if n_tok.kind == "OTHER" else n_tok.value
            unit = self.expect("a unit (minutes, hours, days, months)", "UNIT")
            if n_tok.kind == "NUM" and n < 1:
                _fail(n_tok, "the step must be at least 1", "le pas doit valoir au moins 1")
            self.once("frequency", ev)
            self.set_step(unit.value, n, n_tok)
        elif t.kind == "UNIT" or (t.kind == "ORD" and _fold(t.raw) == "second"
                                  and self.lang.code == "en"):
            u = self.take()
            if t.kind == "ORD":
                if self.at("DOW", "UNIT"):
                    _fail(u, "'every second ...' is not supported: write 'every other "
                             "...' or 'on the second Monday of the month'",
                          "« second » ici n'est pas pris en charge")
                u = Tok("UNIT", SECOND, u.col, u.raw)
            self.once("frequency", ev)
            self.set_step(u.value, 1, u)
        elif t.kind in ("DOW", "WEEKDAY", "WEEKEND"):
            self.days_of_week()
        elif t.kind == "PART":  # "every morning": every day, in the morning
            self.once("frequency", ev)
            self.part_clause()
        elif t.kind == "MON":
            self.months(with_day=True)
        elif t.kind in ("ORD", "LAST"):
            if self.at("DOW", k=1) and not self.of_month_ahead(2):
                _fail(t, f"'every {t.raw} {self.toks[self.i + 1].raw}' is ambiguous (every "
                         f"other week, or once a month?): write 'on the {t.raw} "
                         f"{self.toks[self.i + 1].raw} of the month'",
                      f"« chaque {t.raw} {self.toks[self.i + 1].raw} » est ambigu (une semaine "
                      f"sur deux, ou une fois par mois ?) : écrivez « le {t.raw} "
                      f"{self.toks[self.i + 1].raw} du mois »")
            self.day_clause()
        else:
            self.expected("what to repeat ('every day', 'every 15 minutes', 'every Monday')")

    def set_step(self, unit: int, n: int, tok: Tok) -> None:
        f = self.f
        if n < 1:
            _fail(tok, "the step must be at least 1", "le pas doit valoir au moins 1")
        if unit == SECOND and n % 60 == 0:
            unit, n = MINUTE, n // 60
        if unit == MINUTE and n % 60 == 0:
            unit, n = HOUR, n // 60
        # a step cron cannot say is refused once the whole sentence is read, so that the
        # suggestion keeps the sentence's other clauses (_step_refusal)
        if (unit == SECOND and 60 % n) or (unit == MINUTE and 60 % n) or (
                unit == HOUR and 24 % n) or (unit in (DAY, WEEK, YEAR) and n != 1):
            f.bad_step = (unit, n, tok)
            if unit == SECOND:
                f.minute, f.hour = "*", "*"
            elif unit == MINUTE:
                f.hour = "*"
            return
        if unit == SECOND:
            f.second = "*" if n == 1 else f"*/{n}"
            f.minute, f.hour = "*", "*"
        elif unit == MINUTE:
            f.minute = "*" if n == 1 else f"*/{n}"
            f.hour = "*"
        elif unit == HOUR:
            f.minute = None
            f.hour = "*" if n == 1 else f"*/{n}"
        elif unit in (DAY, WEEK, YEAR):
            f.period = unit
            return
        elif unit in (MONTH, QUARTER):
            months = n * (3 if unit == QUARTER else 1)
            if 12 % months:
                _fail(tok, f"every {months} months does not divide the year: cron restarts "
                           f"each January (write the months, e.g. 'in January and ...')",
                      f"« tous les {months} mois » ne divise pas l'année : cron recommence "
                      "chaque janvier (écrivez les mois, par ex. « en janvier et ... »)")
            f.period = MONTH
            self.once("month", tok)
            f.month = "*" if months == 1 else f"*/{months}"
            return
        f.step = (unit, n, tok)

    # times
    def at_clause(self) -> None:
        first = self.peek()
        assert first is not None
        if first.kind == "AT":
            self.take()
            self.skip("THE")
            past = (self.at("NUM") and self.at_unit(MINUTE, k=1) and self.at("PAST", k=2)
                    and self.at("THE", k=3) and self.at_unit(HOUR, k=4))
            if self.at_unit(MINUTE) or past:  # "at minute 15", "at 15 minutes past the hour"
                if not past:
                    self.take()
                m = self.expect("a minute 0-59", "NUM")
                if m.value > 59:
                    _fail(m, f"{m.raw!r}: a minute is 0-59", f"{m.raw!r} : une minute va de 0 à 59")
                if past:
                    self.i += 4  # minutes past the hour
                self.once("minute", m)
                self.f.at_minute = m
                self.f.past_hour = past
                return
        self.once("time", first)
        times: list[Tok] = [self.one_time()]
        while j := self.and_then("TIME", "NUM", "NOON", "MIDNIGHT"):
            self.i += j
            times.append(self.one_time())
        self.f.times = times

    def and_then(self, *kinds: str) -> int:
        """How many tokens of 'and' (', and', 'et le') come before one of ``kinds``; 0 when
        the next token is no 'and' or what follows is something else."""
        j = 0
        while self.at("AND", k=j):
            j += 1
        if j and self.at("THE", k=j) and not self.at(*kinds, k=j):
            j += 1
        return j if j and self.at(*kinds, k=j) else 0

    def between_clause(self) -> None:
        """'between 09:00 and 17:59': hours 9-17 exactly; 'between 9am and 5pm' is refused
        (does 17:00 fire?)."""
        bt = self.take()
        a = self.one_time()
        self.expect("'and'", "AND")
        b = self.one_time()
        if a.value % 60 or b.value % 60 != 59:
            _fail(bt, f"'between {a.raw} and {b.raw}' is ambiguous (does {b.raw} fire?): "
                      f"write 'from {a.raw} to {b.raw}' (both ends fire) or 'between "
                      f"{a.value // 60:02d}:00 and {b.value // 60:02d}:59'",
                  f"« entre {a.raw} et {b.raw} » est ambigu ({b.raw} compris ?) : écrivez « de "
                  f"{a.raw} à {b.raw} » (les deux bouts compris)")
        if a.value // 60 >= b.value // 60:
            _fail(b, f"{b.raw!r} must come after {a.raw!r} the same day",
                  f"{b.raw!r} doit venir après {a.raw!r} le même jour")
        self.once("hours", bt)
        self.f.hours_range = (a.value // 60, b.value // 60, bt)

    def one_time(self) -> Tok:
        t = self.peek()
        if t is None:
            self.expected("a time ('9am', '14:30', 'noon')")
        if t.kind == "TIME":  # 9am, 9:30 pm, 14:30, 9h30 (the lexer read am/pm)
            self.take()
            self.time_part()
            return t
        if t.kind in ("NOON", "MIDNIGHT"):
            self.take()
            return Tok("TIME", t.value, t.col, t.raw)
        if t.kind == "NUM":
            self.take()
            if t.value > 23:
                _fail(t, f"{t.raw!r}: the hour must be 0-23", f"{t.raw!r} : l'heure va de 0 "
                                                             "à 23")
            shift = 1 <= t.value <= 12 and t.raw[0] != "0"
            if self.lang.code == "fr" and self.at_unit(HOUR):  # "8 heures"
                self.take()
                self.time_part()
                return Tok("TIME", t.value * 60, t.col, t.raw, shift=shift)
            self.time_part()
            return Tok("TIME", t.value * 60, t.col, t.raw, explicit=False, shift=shift)
        self.expected("a time ('9am', '14:30', 'noon')")

    def time_part(self) -> None:
        """'7h du soir', '8 in the morning': the part of the day right after a time."""
        if self.at("OF") and self.at("PART", k=1):
            self.take()
            self.part_clause()
        elif self.at("IN") and self.at("THE", k=1) and self.at("PART", k=2):
            self.i += 2
            self.part_clause()

    def from_clause(self) -> None:
        fr = self.take()
        self.skip("THE")
        if self.at("DOW"):
            self.days_of_week(start_from=True)
        elif self.at("MON"):
            self.months(start_from=True)
        elif self.at("TIME", "NUM", "NOON", "MIDNIGHT"):
            a = self.one_time()
            self.expect_to()
            b = self.one_time()
            self.once("hours", fr)
            self.hour_range(a, b, fr)
        else:
            self.expected("a day, a month or a time after it")

    def is_to(self, *then: str) -> bool:
        """A range's 'to' (also French 'à': 'de 9h à 17h') followed by one of ``then``."""
        if not (self.at("TO") or (self.lang.code == "fr" and self.at("AT"))):
            return False
        return self.at(*then, k=1) or (self.at("THE", k=1) and self.at(*then, k=2))

    def expect_to(self) -> None:
        if not (self.at("TO") or (self.lang.code == "fr" and self.at("AT"))):
            self.expected("'to' / 'au'")
        self.take()
        self.skip("THE")

    def hour_range(self, a: Tok, b: Tok, tok: Tok) -> None:
        for t in (a, b):
            if t.value % 60:
                _fail(t, f"{t.raw!r}: a range of hours must use whole hours",
                      f"{t.raw!r} : une plage d'heures se donne en heures pleines")
            if not t.explicit and self.lang.code == "en" and 1 <= t.value // 60 <= 12:
                _fail(t, f"{t.raw!r} is ambiguous: write '{t.raw}am', '{t.raw}pm' or "
                         f"'{t.value // 60:02d}:00'")
        ha, hb = a.value // 60, b.value // 60
        if ha >= hb:
            _fail(b, f"{b.raw!r} must come after {a.raw!r} the same day",
                  f"{b.raw!r} doit venir après {a.raw!r} le même jour")
        self.f.hours_range = (ha, hb, tok)

    # days
    def days_of_week(self, start_from: bool = False) -> None:
        t = self.peek()
        assert t is not None
        if t.kind == "WEEKDAY":
            self.take()
            self.once("day", t)
            self.f.dow = "1-5"
            return
        if t.kind == "WEEKEND":
            self.take()
            self.once("day", t)
            self.f.dow = "6,0"
            return
        first = self.expect("a day of the week", "DOW")
        self.once("day", first)
        items: list[str] = []
        cur = first
        while True:
            if self.is_to("DOW"):
                self.take()
                self.skip("THE")
                end = self.expect("a day of the week", "DOW")
                items.append(f"{cur.value}-{end.value}")
            else:
                if start_from:
                    self.expected("'to' / 'au' and the last day")
                items.append(str(cur.value))
            start_from = False
            if j := self.and_then("DOW"):
                self.i += j
                cur = self.take()
                continue
            break
        seen: list[str] = []
        for it in items:
            if it in seen:
                _fail(first, f"a day is given twice ({it})", f"un jour est donné deux fois ({it})")
            seen.append(it)
        self.f.dow = ",".join(items)

    def day_clause(self) -> None:
        t = self.peek()
        assert t is not None
        bare = t.kind == "NUM"  # "15 ..." with no 'on' / 'the' before it
        if t.kind == "ON":
            self.take()
            self.skip("ONLY", "THE")
        elif t.kind == "THE":
            self.skip("THE")
        t = self.peek()
        if t is None:
            self.expected("a day")
        k = t.kind
        if bare and not self.at("MON", k=1) and not self.at("DOW", k=1):
            _fail(t, f"{t.raw!r} alone: say 'on the {_ordinal(t.value, self.lang)}' (a day) "
                     f"or 'at {t.value}:00' (a time)",
                  f"{t.raw!r} seul : dites « le {t.value} » (un jour) ou « à {t.value}h » (une "
                  "heure)")
        if k in ("DOW", "WEEKDAY", "WEEKEND"):
            self.days_of_week()
        elif k == "MON":
            self.months(with_day=True)
        elif k == "UNIT" and t.value == DAY and self.at("NUM", "ORD", k=1):  # "on day 15"
            self.take()
            self.dom_list(self.expect("a day number", "NUM", "ORD"))
        elif k == "LAST":
            self.take()
            nxt = self.peek()
            if nxt is not None and nxt.kind == "UNIT" and nxt.value == DAY:
                self.take()
                self.once("day", t)
                self.f.dom = "L"
            elif nxt is not None and nxt.kind == "WEEKDAY":
                self.take()
                self.once("day", t)
                self.f.dom = "LW"
            elif nxt is not None and nxt.kind == "DOW":
                self.take()
                self.once("day", t)
                self.f.dow = f"{nxt.value}L"
            else:
                self.expected("'day', 'weekday' or a day of the week after 'last'")
            self.of_month()
        elif k in ("ORD", "NUM"):
            first = self.take()
            if self.at("DOW"):  # the first Monday
                d = self.take()
                if first.kind == "NUM":
                    _fail(first, f"'{first.raw} {d.raw}': write an ordinal ('"
                                 f"{_ordinal(first.value, self.lang)} {d.raw}')",
                          f"'{first.raw} {d.raw}' : écrivez un ordinal (« "
                          f"{_ordinal(first.value, self.lang)} {d.raw} »)")
                if first.value > 5:
                    _fail(first, f"there is no {first.raw} {d.raw} in a month (1-5)",
                          f"il n'y a pas de {first.raw} {d.raw} dans un mois (1 à 5)")
                self.once("day", first)
                self.f.dow = f"{d.value}#{first.value}"
                self.of_month()
            elif self.at_unit(DAY):
                _fail(first, f"'{first.raw} day' is ambiguous: write 'on the {first.value}"
                             f"{'st' if first.value == 1 else 'th'}' or 'on day "
                             f"{first.value}'",
                      f"« {first.raw} jour » est ambigu : écrivez « le {first.value} »")
            else:
                self.dom_list(first)
        else:
            self.expected("a day")

    def of_month_ahead(self, k: int) -> bool:
        """'of the month' / 'du mois' starts k tokens ahead."""
        if not self.at("OF", k=k):
            return False
        k += 1 + (1 if self.at("THE", k=k + 1) else 0)
        return self.at_unit(MONTH, k=k)

    def of_month(self, day: Tok | None = None) -> None:
        """'of the month', 'of March'; ``day``: the day of the month just read (then 'the
        5th of March' is a date)."""
        if self.at("OF"):
            self.take()
            every = self.at("EVERY")
            self.skip("THE", "EVERY")
            if self.at_unit(MONTH):
                self.take()
            elif self.at("MON"):
                self.months()
                if day is not None and not every:
                    self.a_date(day)
            else:
                self.expected("'month' or a month name")

    def a_date(self, first: Tok) -> None:
        """A month and a day were read ('December 24', 'le 3 décembre'): a date, and its
        year when one follows ('December 24 2026', 'December 24, 2026')."""
        self.f.date = first
        j = 1 if self.at("AND") else 0
        t = self.peek(j)
        if (t is not None and t.kind == "NUM" and t.raw.isdigit() and len(t.raw) == 4
                and not self.at("UNIT", "AMPM", "TIMES", k=j + 1)):
            self.i += j + 1
            if not 1970 <= t.value <= 9999:
                _fail(t, f"{t.raw!r}: a year is 1970-9999", f"{t.raw!r} : une année va de "
                                                            "1970 à 9999")
            self.f.year = t

    def dom_list(self, first: Tok) -> None:
        self.once("day", first)
        days = [first]
        while True:
            the = 1 if self.at("THE", k=1) else 0  # "le 1er et le 15"
            nxt = self.peek(1 + the)
            if not (self.at("AND", "TO") and self.at("ORD", "NUM", k=1 + the)
                    and not self.at("TIMES", "UNIT", "AMPM", k=2 + the)
                    and not (nxt is not None and nxt.kind == "NUM"
                             and len(nxt.raw) == 4)):  # a year
                break
            sep = self.take()
            self.i += the
            nxt = self.take()
            if sep.kind == "TO":
                days.append(Tok("RANGE", nxt.value, nxt.col, nxt.raw))
            else:
                days.append(nxt)
        parts: list[str] = []
        for d in days:
            if d.kind != "ORD" and not d.raw[:1].isdigit():
                _fail(d, f"{d.raw!r}: write a day of the month in digits or as an ordinal "
                         "('on the 1st', 'le 1er')",
                      f"{d.raw!r} : écrivez un jour du mois en chiffres ou en ordinal (« le "
                      "1er », « le 15 »)")
            if not 1 <= d.value <= 31:
                _fail(d, f"{d.raw!r}: a day of the month is 1-31",
                      f"{d.raw!r} : un jour du mois va de 1 à 31")
            if d.kind == "RANGE":
                parts[-1] = f"{parts[-1]}-{d.value}"
            else:
                parts.append(str(d.value))
        self.f.dom = ",".join(parts)
        if self.at("MON") and not self.at("AND", k=1):  # "le 5 mars"
            self.months()
            self.a_date(first)
        else:
            self.of_month(first)

    def months(self, with_day: bool = False, start_from: bool = False) -> None:
        first = self.expect("a month name", "MON")
        self.once("month", first)
        if start_from and not self.is_to("MON"):
            self.expected("'to' / 'à' and the last month ('from June to August')")
        items: list[str] = []
        cur = first
        while True:
            if self.is_to("MON"):
                self.take()
                self.skip("THE")
                end = self.take()
                items.append(f"{cur.value}-{end.value}")
            else:
                items.append(str(cur.value))
            if j := self.and_then("MON"):
                self.i += j
                cur = self.take()
                continue
            break
        self.f.month = ",".join(items)
        if with_day and self.at("ORD", "NUM") and not self.at(
                "AMPM", "HWORD", "TIMES", "UNIT", k=1):  # "March 5th"
            if len(items) > 1:
                _fail(self.peek(), "give the day before several months ('on the 5th of "
                                   "March and June')",
                      "donnez le jour avant plusieurs mois (« le 5 mars et juin »)")
            self.dom_list(self.take())
            self.a_date(first)


# -- compile -------------------------------------------------------------------------------


PARTS = {MORNING: (5 * 60, 12 * 60 - 1), AFTERNOON: (12 * 60, 18 * 60 - 1),
         EVENING: (17 * 60, 24 * 60 - 1), NIGHT: (20 * 60, 5 * 60 - 1)}
"""The hours of each part of the day, in minutes of the day (the night runs past
midnight): morning 05:00-11:59, afternoon 12:00-17:59, evening 17:00-23:59, night
20:00-04:59."""
_PART_NAMES = {MORNING: ("morning", "le matin", "8am", "8h"),
               AFTERNOON: ("afternoon", "l'après-midi", "3pm", "15h"),
               EVENING: ("evening", "le soir", "7pm", "19h"),
               NIGHT: ("night", "la nuit", "11pm", "23h")}


def _hm(v: int) -> str:
    return f"{v // 60:02d}:{v % 60:02d}"


def _in_part(v: int, part: int) -> bool:
    lo, hi = PARTS[part]
    return lo <= v <= hi if lo <= hi else (v >= lo or v <= hi)


def _apply_part(f: _Fields, lang: Lang) -> None:
    """The part of the day read the times: an hour 1-12 without am/pm moves to the part
    ('every evening at 7' is 19:00, 'vendredi soir à 7h' 19h); a time outside it is
    refused; no time at all is refused, asking for it."""
    part = f.part
    assert part is not None
    en, fr, ex_en, ex_fr = _PART_NAMES[part.value]
    lo, hi = PARTS[part.value]
    if f.times is None:
        if f.step is not None or f.bad_step is not None or f.hours_range is not None:
            _fail(part, f"{part.raw!r} goes with a time ('every {en} at {ex_en}'); for a "
                        "range of hours say 'every 2 hours from 6am to 10am'",
                  f"{part.raw!r} va avec une heure (« chaque {fr.split()[-1].lstrip(chr(39))} "
                  f"à {ex_fr} ») ; pour une plage d'heures, dites « toutes les 2 heures de 6h "
                  "à 10h »")
        if f.rel is not None:
            _fail(part, f"'in ...' already says when: drop {part.raw!r}",
                  f"« dans ... » dit déjà quand : retirez {part.raw!r}")
        _fail(part, f"{part.raw!r} needs a time: say '... {part.raw} at {ex_en}' (the "
                    f"{en} is {_hm(lo)}-{_hm(hi)})",
              f"{part.raw!r} : à quelle heure ? écrivez « ... {part.raw} à {ex_fr} » ({fr}, "
              f"c'est {_hm(lo)}-{_hm(hi)})")
    times = []
    for t in f.times:
        v = t.value
        if not _in_part(v, part.value) and t.shift and _in_part((v + 720) % 1440, part.value):
            v = (v + 720) % 1440
        if not _in_part(v, part.value):
            _fail(t, f"{t.raw!r} is not in the {en} ({_hm(lo)}-{_hm(hi)})",
                  f"{t.raw!r} n'est pas {fr} ({_hm(lo)}-{_hm(hi)})")
        times.append(Tok("TIME", v, t.col, t.raw))
    f.times = times
    if part.value == NIGHT and (f.dow is not None or f.dom is not None or f.dayrel
                                is not None or f.date is not None) and any(
            t.value < 12 * 60 for t in times):
        t = next(t for t in times if t.value < 12 * 60)
        _fail(t, f"{t.raw!r} at night is already the next day: name that day "
                 f"('... at {t.raw}' on the day after)",
              f"{t.raw!r} la nuit, c'est déjà le lendemain : nommez ce jour-là")


def _check_clock(times: list[Tok], lang: Lang) -> None:
    """English: a time without am/pm whose hour has one digit (9, 9:30) or is a bare
    number 1-12 says no clock; refused unless another time of the sentence is 0 or 13-23
    ('at 8:30 and 20:30')."""
    values = [t.value for t in times]
    if lang.code != "en" or any(v // 60 > 12 or v // 60 == 0 for v in values):
        return
    for t in times:
        if not t.explicit and 1 <= t.value // 60 <= 12:
            h, m = divmod(t.value, 60)
            raw = t.raw.strip()
            _fail(t, f"'{raw}' is ambiguous: write '{raw}am', '{raw}pm' or '{h:02d}:{m:02d}'")


@dataclass(frozen=True, slots=True)
class _OneOff:
    """A one-off said in words: 'in' (a duration or days from now), 'day' (today,
    tomorrow: ``days`` from today) or 'date' (a month and a day, maybe a year)."""

    tok: Tok
    kind: str
    seconds: int = 0
    days: int = 0
    minute: int | None = None
    month: int = 0
    day: int = 0
    year: int | None = None

    @property
    def relative(self) -> bool:
        """Its instant depends on the moment it is read."""
        return self.kind != "date" or self.year is None


def _one_off(f: _Fields, lang: Lang) -> _OneOff:
    tok = f.dayrel or (f.rel[2] if f.rel is not None else None) or f.date
    assert tok is not None
    if f.date is not None and (f.dayrel is not None or f.rel is not None):
        _fail(tok, "give either a date or 'today' / 'tomorrow' / 'in ...', not both",
              "donnez une date ou « aujourd'hui » / « demain » / « dans ... », pas les deux")
    if f.every or f.cols.get("frequency") is not None or f.count is not None:
        _fail(tok, f"{tok.raw!r} is once: it does not go with 'every' (for a date every "
                   "year, say 'every year on December 24 at 18:00')",
              f"{tok.raw!r}, c'est une fois : pas avec « tous les » / « chaque » (pour une "
              "date chaque année : « chaque année le 24 décembre à 18h »)")
    for what, bad in (("a day of the week", f.dow), ("a range of hours", f.hours_range),
                      ("a minute of the hour", f.at_minute)):
        if bad is not None:
            fr = {"a day of the week": "un jour de la semaine", "a range of hours":
                  "une plage d'heures", "a minute of the hour": "une minute de l'heure"}[what]
            _fail(tok, f"a one-off ({tok.raw!r}) and {what} together: say the date",
                  f"une seule fois ({tok.raw!r}) et {fr} ensemble : donnez la date")
    times = f.times or []
    if len(times) > 1:
        _fail(times[1], "a one-off is one instant: give the job one schedule per time",
              "une seule fois, c'est un instant : une planification par heure")
    _check_clock(times, lang)
    minute = times[0].value if times else None
    if f.rel is not None:
        n, unit, _ = f.rel
        if unit in (DAY, WEEK):
            return _OneOff(tok, "in", days=n * (7 if unit == WEEK else 1), minute=minute)
        if times:
            _fail(times[0], f"'in {n} ...' already says when: drop the time",
                  f"« dans {n} ... » dit déjà quand : retirez l'heure")
        return _OneOff(tok, "in", seconds=n * _UNIT_SECONDS[unit])
    if f.dayrel is None:
        month, dom = f.month or "", f.dom or ""
        if not (month.isdigit() and dom.isdigit()):
            _fail(tok, "a one-off is one date: give the job one schedule per date (or say "
                       "'every year on ...')",
                  "une seule fois, c'est une date : une planification par date (ou « chaque "
                  "année le ... »)")
        m, d = int(month), int(dom)
        y = f.year.value if f.year is not None else None
        try:
            date(y if y is not None else 2000, m, d)  # 2000: a leap year
        except ValueError:
            _fail(tok, f"there is no day {d} in {_MONTHS_EN[m - 1]}"
                       + (f" {y}" if y is not None else ""),
                  f"il n'y a pas de {d} {_MONTHS_FR[m - 1]}" + (f" {y}" if y else ""))
    if minute is None:
        ex_en = "tomorrow at 9am" if f.dayrel is not None else "on December 24 at 6pm"
        ex_fr = "demain à 9h" if f.dayrel is not None else "le 24 décembre à 18h"
        _fail(tok, f"{tok.raw!r}: say at what time ('{ex_en}')",
              f"{tok.raw!r} : à quelle heure ? (« {ex_fr} »)")
    if f.dayrel is not None:
        return _OneOff(tok, "day", days=f.dayrel.value, minute=minute)
    return _OneOff(tok, "date", minute=minute, month=m, day=d, year=y)


_MONTHS_EN = ["January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December"]
_MONTHS_FR = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
              "septembre", "octobre", "novembre", "décembre"]


def _resolve(one: _OneOff, zone: ZoneInfo, now: float) -> datetime:
    """The instant of a one-off read at ``now`` (epoch seconds) in ``zone``. A local time
    is read as ``at`` reads one (:func:`.instants.parse_instant`: a repeated time is its
    first pass; a time in a spring-forward gap moves forward by the gap, 02:30 -> 03:30)."""
    from .sequence import floor_ts

    base = int(now // 1)
    local = datetime.fromtimestamp(base, zone)
    if one.kind == "in" and one.seconds:
        return datetime.fromtimestamp(base + one.seconds, zone)

    def at(day: date) -> datetime:
        if one.minute is None:
            wall = datetime.combine(day, local.time().replace(tzinfo=None))
        else:
            wall = datetime.combine(day, time(one.minute // 60, one.minute % 60))
        # through the instant: a wall time in a spring-forward gap reads as the time the
        # clock shows then (02:30 -> 03:30)
        return datetime.fromtimestamp(floor_ts(parse_instant(wall, zone)), zone)

    if one.kind in ("in", "day"):
        instant = at(local.date() + timedelta(days=one.days))
        if floor_ts(instant) <= base:
            tok = one.tok
            _fail(tok, f"{tok.raw} at {_hm(one.minute or 0)} is already past (it is "
                       f"{local:%H:%M} in {zone.key}): say 'tomorrow at ...'",
                  f"{tok.raw} à {_hm(one.minute or 0)}, c'est déjà passé (il est "
                  f"{local:%H:%M} à {zone.key}) : dites « demain à ... »")
        return instant
    if one.year is not None:
        return at(date(one.year, one.month, one.day))
    for year in range(local.year, local.year + 9):  # February 29: the next leap year
        try:
            instant = at(date(year, one.month, one.day))
        except ValueError:
            continue
        if floor_ts(instant) > base:
            return instant
    _fail(one.tok, "no such date in the next 8 years", "pas de telle date dans les 8 ans")


def _compile(f: _Fields, lang: Lang, toks: list[Tok]) -> str | _OneOff:
    if f.part is not None:
        _apply_part(f, lang)
    if f.dayrel is not None or f.rel is not None or (
            f.date is not None and not f.every and f.cols.get("frequency") is None
            and f.count is None):
        return _one_off(f, lang)
    if f.year is not None:
        _fail(f.year, "a year goes with one date, not with a schedule that repeats",
              "une année va avec une date, pas avec une planification qui se répète")
    if f.past_hour and f.step is None and f.at_minute is not None:
        f.step = (HOUR, 1, f.at_minute)  # "at 15 minutes past the hour": hourly
        f.hour = "*"
    minute, hour = f.minute, f.hour
    times = f.times
    if times is not None:
        if f.step is not None:
            unit, n, _st = f.step
            _fail(times[0], f"{times[0].raw!r}: a time and 'every {n} {_UNIT_NAMES[unit]}s' "
                            "together are ambiguous (use 'from ... to ...' for a range of "
                            "hours)",
                  f"{times[0].raw!r} : une heure et un pas ensemble sont ambigus (« de ... à "
                  "... » pour une plage d'heures)")
        if f.at_minute is not None:
            _fail(f.at_minute, "give either a time or a minute, not both",
                  "donnez une heure ou une minute, pas les deux")
        if f.hours_range is not None:
            _fail(f.hours_range[2], "give either times or a range of hours, not both",
                  "donnez des heures ou une plage d'heures, pas les deux")
        values = [t.value for t in times]
        _check_clock(times, lang)
        if len(set(values)) != len(values):
            dup = next(t for i, t in enumerate(times) if t.value in values[:i])
            _fail(dup, f"{dup.raw!r} is given twice", f"{dup.raw!r} est donné deux fois")
        mins = sorted({v % 60 for v in values})
        hrs = sorted({v // 60 for v in values})
        if len(mins) * len(hrs) != len(values):
            _fail(times[1], "these times do not share their minutes: one cron expression "
                            "would fire at every combination of them; give the job several "
                            "schedules instead",
                  "ces heures n'ont pas les mêmes minutes : une expression cron tirerait à "
                  "toutes leurs combinaisons ; donnez plusieurs planifications")
        if f.count is not None and f.count[0] != len(values):
            c = f.count[1]
            _fail(c, f"{c.raw!r} but {len(values)} time(s) given",
                  f"« {c.raw} fois » mais {len(values)} heure(s) donnée(s)")
        minute = ",".join(map(str, mins))
        hour = ",".join(map(str, hrs))
    elif f.count is not None:
        c = f.count[1]
        if c.value == 1:
            minute, hour = minute or "0", hour or "0"
        else:
            _fail(c, f"{c.raw!r}: say at what times ('twice a day at 8:00 and 20:00')",
                  f"{c.raw!r} : à quelles heures ? (« deux fois par jour à 8h et 20h »)")
    if f.at_minute is not None:
        if f.step is None or f.step[0] != HOUR:
            _fail(f.at_minute, "'at minute N' goes with 'every hour' or 'every N hours'",
                  "« à la minute N » va avec « toutes les heures » ou « toutes les N heures »")
        minute = str(f.at_minute.value)
    if f.hours_range is not None:
        ha, hb, rt = f.hours_range
        if f.step is None or f.step[0] not in (MINUTE, HOUR, SECOND):
            _fail(rt, "a range of hours goes with 'every N minutes' or 'every hour'",
                  "une plage d'heures va avec « toutes les N minutes » ou « toutes les heures »")
        unit, n, _ = f.step
        if unit == HOUR:
            hour = f"{ha}-{hb}/{n}" if n != 1 else f"{ha}-{hb}"
        else:  # a cron hour range runs whole: "9-17" fires until 17:45, not at 17:00
            _fail(rt, f"'every {n} {_UNIT_NAMES[unit]}s from {ha}:00 to {hb}:00' would "
                      f"also fire after {hb}:00 (cron's hours {ha}-{hb} run to {hb}:59): "
                      f"write the cron expression, e.g. '*/{n} {ha}-{hb - 1} * * *'",
                  f"de {ha}h à {hb}h, cron tirerait aussi après {hb}h (ses heures {ha}-{hb} "
                  f"vont jusqu'à {hb}h59) : écrivez l'expression cron, par ex. "
                  f"'*/{n} {ha}-{hb - 1} * * *'")
    if minute is None:
        minute = "0"
    if hour is None:
        hour = "0"
    dom, month, dow = f.dom, f.month, f.dow
    if f.period == DAY and (dom is not None or dow is not None):
        _fail(f.cols["day"], "'every day' and a particular day together: say one of them",
              "« tous les jours » et un jour précis ensemble : dites l'un des deux")
    if dom is not None and dow is not None:
        tok = f.cols["day"]
        _fail(tok, "a day of the month and a day of the week together: cron fires on "
                   "either of them; give the job two schedules",
              "un jour du mois et un jour de la semaine ensemble : cron tire à l'un ou "
              "l'autre ; donnez deux planifications")
    p = f.period
    if p == WEEK and dow is None:
        if dom is not None:
            _fail(f.cols["day"], "'every week' goes with a day of the week, not of the month",
                  "« chaque semaine » va avec un jour de la semaine, pas du mois")
        dow = "0"
    if p == MONTH and dom is None and dow is None:
        dom = "1"
    if p == YEAR:
        if month is None:
            if dom is not None or dow is not None:
                _fail(f.cols["day"], "'every year' needs the month too ('on March 5th')",
                      "« chaque année » veut aussi le mois (« le 5 mars »)")
            month = "1"
        if dom is None and dow is None:
            dom = "1"
    if p in (MONTH, YEAR) and dow is not None and dow[-1].isdigit() and "#" not in dow:
        _fail(f.cols["day"], "a period of months or years and a day of the week: which "
                             "one? Say 'on the first Monday of the month', or drop the period "
                             "('every Monday')",
              "une période de mois ou d'années et un jour de la semaine : lequel ? Dites « le "
              "premier lundi du mois », ou retirez la période (« chaque lundi »)")
    if (f.cols.get("frequency") is None and f.step is None and times is None
            and f.count is None
            and dom is None and dow is None):
        _fail(toks[0], "this says when but not how often: add 'every day', a time or a day "
                       "('every day in March at 9am')",
              "cela dit quand mais pas à quelle fréquence : ajoutez « tous les jours », une "
              "heure ou un jour (« tous les jours en mars à 9h »)")
    sec = f.second
    parts = [minute, hour, dom or "*", month or "*", dow or "*"]
    if f.bad_step is not None:
        _step_refusal(f, lang, parts)
    if sec is not None:
        parts.insert(0, sec)
    return " ".join(parts)


def _step_refusal(f: _Fields, lang: Lang, fields: list[str]) -> NoReturn:
    """'every 7 minutes', 'every 2 days at noon': cron has no such step. The suggestions
    keep everything else the sentence said (``fields``: its cron fields), or say what they
    cannot keep."""
    assert f.bad_step is not None
    unit, n, tok = f.bad_step
    minute, hour, dom, month, dow = fields
    name = _UNIT_NAMES[unit]
    fr_name = ("secondes", "minutes", "heures", "jours", "semaines", "mois", "trimestres",
               "ans")[unit]
    said = f"every {n} {name}s"
    fr_said = f"{'toutes' if unit in (SECOND, MINUTE, HOUR, WEEK) else 'tous'} les {n} {fr_name}"
    # what an interval (counted from 1970-01-01 00:00 UTC) cannot keep
    lost_en: list[str] = []
    lost_fr: list[str] = []
    if f.times is not None:
        at = ", ".join(_hm(t.value) for t in f.times)
        lost_en.append(f"the time {at}")
        lost_fr.append(f"l'heure {at}")
    if dow != "*" or dom != "*":
        lost_en.append("the days")
        lost_fr.append("les jours")
    if month != "*":
        lost_en.append("the months")
        lost_fr.append("les mois")
    if f.hours_range is not None:
        lost_en.append("the hours")
        lost_fr.append("les heures")
    suffix = {SECOND: "s", MINUTE: "m", HOUR: "h", DAY: "d", WEEK: "w"}.get(unit)
    interval_en = interval_fr = ""
    if suffix is not None:
        interval_en = (f"the interval '{n}{suffix}' (every {n} {name}s counted from "
                       "1970-01-01 00:00 UTC" + (f"; it cannot keep {' and '.join(lost_en)}"
                                                 if lost_en else "") + ")")
        interval_fr = (f"l'intervalle '{n}{suffix}' ({fr_said} à partir du "
                       "1970-01-01 00:00 UTC" + (f" ; il ne peut garder "
                                                 f"{' ni '.join(lost_fr)}" if lost_fr else "")
                       + ")")
    cron = None
    if unit == SECOND:
        cron = f"*/{n} {minute} {hour} {dom} {month} {dow}"
        whole, fr_whole, fr_unit = "minute", "la minute", "minute"
    elif unit == MINUTE:
        cron = f"*/{n} {hour} {dom} {month} {dow}"
        whole, fr_whole, fr_unit = "hour", "l'heure", "heure"
    elif unit == HOUR:
        cron = f"{minute} */{n} {dom} {month} {dow}"
        whole, fr_whole, fr_unit = "day", "la journée", "jour"
    elif unit == DAY and dom == "*" and dow == "*":
        cron = f"{minute} {hour} */{n} {month} *"
        whole, fr_whole, fr_unit = "month", "le mois", "mois"
    if unit in (SECOND, MINUTE, HOUR):
        en = f"'{said}' does not divide the {whole}: use {interval_en}"
        fr = f"« {fr_said} » ne divise pas {fr_whole} : utilisez {interval_fr}"
    else:
        en = f"'{said}' cannot be written in cron"
        fr = f"« {fr_said} » ne s'écrit pas en cron"
        if interval_en:
            en += f": use {interval_en}"
            fr += f" : utilisez {interval_fr}"
    if cron is not None:
        if unit == DAY:
            en += f" or '{cron}' (days 1, {1 + n}, ... of each month)"
            fr += f" ou '{cron}' (les jours 1, {1 + n}, ... de chaque mois)"
        else:
            en += f" or '{cron}' (restarts each {whole})"
            fr += f" ou '{cron}' (repart de zéro à chaque {fr_unit})"
    _fail(tok, en, fr)


_UNIT_SECONDS = {SECOND: 1, MINUTE: 60, HOUR: 3600, DAY: 86400, WEEK: 604800}


def _duration(toks: list[Tok], lang: Lang) -> str | None:
    """A sentence that is only a duration ("10 minutes", "1 hour 30 minutes") is the
    interval of that period, as "10m" and "@every 10 minutes" are: counted from the epoch,
    the same spelling every duration option of cronfleet takes. None for anything else."""
    total = 0
    i = 0
    n = len(toks)
    while i < n:
        if i and toks[i].kind == "AND":
            i += 1
        if not (i + 1 < n and toks[i].kind == "NUM" and toks[i + 1].kind == "UNIT"):
            return None
        unit = toks[i + 1]
        if unit.value not in _UNIT_SECONDS:
            _fail(unit, f"{unit.raw!r}: an interval is counted in seconds to weeks; for "
                        f"months say 'every {toks[i].raw} {unit.raw} on the 1st'",
                  f"{unit.raw!r} : un intervalle se compte en secondes à semaines ; pour des "
                  f"mois, dites « tous les {toks[i].raw} {unit.raw} le 1er »")
        if lang.code == "fr" and unit.value == HOUR and n == 2 and toks[i].value < 24:
            h = toks[i].value  # "2 heures" alone is also a time of day in French
            _fail(toks[i], f"'{toks[i].raw} {unit.raw}' is ambiguous: 'toutes les {h} heures' "
                           f"(on the clock), 'à {h}h' (a time) or '{h}h' (an interval)",
                  f"'{toks[i].raw} {unit.raw}' est ambigu : « toutes les {h} heures » (sur "
                  f"l'horloge), « à {h}h » (une heure) ou '{h}h' (un intervalle)")
        total += toks[i].value * _UNIT_SECONDS[unit.value]
        i += 2
    if total <= 0:
        _fail(toks[0], "an interval must be a positive period",
              "un intervalle doit être une durée positive")
    out = []
    for suffix, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        q, total = divmod(total, size)
        if q:
            out.append(f"{q}{suffix}")
    return "".join(out)


# -- entry points ----------------------------------------------------------------------------


def _detect(text: str) -> Lang:
    """The language with more words of its own (words both have, such as 'minutes', do
    not count); accents and French times ('9h') count for French, am/pm for English.
    A tie is English."""
    low = text.lower()
    en = fr = 0
    for w in _WORDS.findall(low):
        f = _fold(w)
        in_en, in_fr = f in _EN.words, f in _FR.words
        if f != w or (in_fr and not in_en):
            fr += 1
        elif in_en and not in_fr:
            en += 1
    fr += len(_FR_TIME.findall(low))
    en += len(_EN_TIME.findall(low))
    return _FR if fr > en else _EN


def _now(now: float | datetime | None) -> float:
    if now is None:
        return _time.time()
    if isinstance(now, datetime):
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError(f"now must be timezone-aware (got naive {now.isoformat()})")
        return now.timestamp()
    return float(now)


def _read(text: str, lang: str | None, tz: str | ZoneInfo | None,
          now: float | datetime | None) -> tuple[str, str, bool]:
    """``(canonical text, language, relative)``: a cron expression or interval, or for a
    one-off ``at ISO`` (read in ``tz`` at ``now``; ``relative``: it depends on ``now``)."""
    if not isinstance(text, str):
        raise TypeError(f"a schedule sentence must be a str, not {type(text).__name__}")
    if lang is not None and lang not in LANGS:
        raise CronSyntaxError(_FIELD, str(lang), None, text,
                              f"unknown language {lang!r} (expected 'en' or 'fr')")
    table = LANGS[lang] if lang is not None else _detect(text)
    if len(text) > _MAX_LEN:
        raise CronSyntaxError(_FIELD, text[:20], 1, text,
                              f"a sentence is at most {_MAX_LEN} characters"
                              if table.code == "en" else
                              f"une phrase fait au plus {_MAX_LEN} caractères")
    try:
        toks = _lex(text, table)
        if not toks:
            _fail(None, "empty sentence", "phrase vide")
        interval = _duration(toks, table)
        if interval is not None:
            return interval, table.code, False
        got = _compile(_Parser(toks, table).run(), table, toks)
        if isinstance(got, str):
            return got, table.code, False
        zone = resolve_tz(tz if tz is not None else "UTC", text)
        try:
            instant = _resolve(got, zone, _now(now))
        except (OverflowError, ValueError, OSError):  # read at the calendar's edge
            _fail(got.tok, "this one-off falls outside the calendar (years 1-9999)",
                  "cette date tombe hors du calendrier (années 1 à 9999)")
        return f"at {instant.isoformat()}", table.code, got.relative
    except _Refusal as exc:
        tok = exc.tok
        raise CronSyntaxError(_FIELD, tok.raw if tok else "", tok.col if tok else 1, text,
                              exc.said(table), lang=table.code) from None


def compile_text(text: str, lang: str | None = None, *, tz: str | ZoneInfo | None = None,
                 now: float | datetime | None = None) -> tuple[str, str]:
    """``(canonical text, language)`` for a sentence; :class:`CronSyntaxError` else. A
    one-off ('tomorrow at 5pm') is ``at ISO``, read in ``tz`` at ``now`` (epoch seconds or
    an aware datetime; default: the system clock)."""
    expr, code, _ = _read(text, lang, tz, now)
    return expr, code


def from_text(text: str, tz: str | ZoneInfo | None = None, lang: str | None = None, *,
              now: float | datetime | None = None,
              one_off: Callable[[datetime, str | ZoneInfo], ComposedSchedule]) -> Sentence:
    """Compile an English or French sentence to a cronfleet schedule (called through
    :func:`cronfleet.cron.from_text` and :func:`cronfleet.cron.parse_schedule`, which give
    ``one_off``: the schedule of a one-off at an instant, a composition that this module,
    below :mod:`.compose`, does not build itself).

        >>> s = cronfleet.cron.from_text("every weekday at 9am")
        >>> s.expr, s.lang, s.description
        ('0 9 * * 1-5', 'en', 'At 09:00, Monday through Friday')

    ``tz`` binds the schedule (default UTC); ``lang`` is ``"en"``, ``"fr"`` or ``None``
    (read from the words). A one-off ('tomorrow at 5pm', 'le 3 décembre à 9h', 'in 2
    hours') is read at ``now`` (epoch seconds or an aware datetime; default: the system
    clock) and becomes the absolute instant: ``expr`` is ``at ISO``, ``schedule`` a
    :class:`~.compose.ComposedSchedule` with that ``at``, ``relative`` says whether the
    instant depends on ``now``. Raises :class:`CronSyntaxError` (field ``sentence``, with
    the column of the word) for anything the grammar does not read exactly.
    """
    expr, code, relative = _read(text, lang, tz, now)
    zone = tz if tz is not None else "UTC"
    if expr.startswith("at "):
        at = datetime.fromisoformat(expr[3:])
        return Sentence(text, expr, code, one_off(at, zone), at=at, relative=relative)
    try:
        schedule = parse(expr, zone)
    except CronSyntaxError as exc:
        if exc.field == "timezone":
            raise
        raise CronSyntaxError(_FIELD, text, 1, text, f"{exc.reason} (as {expr!r})") from None
    return Sentence(text, expr, code, schedule)


def looks_like_words(text: str) -> bool:
    """True when ``text`` reads as a sentence rather than a cron expression: no ``*``,
    ``?``, ``#`` or ``@``, and a word of either language (not a three-letter day or month
    abbreviation, which cron has too), or a time / ordinal such as ``9am``, ``9h30``,
    ``1st``."""
    if any(c in text for c in "*?#@"):
        return False
    for w in _LETTERS.findall(text):
        f = _fold(w)
        if len(f) >= 2 and f not in _ABBR and (f in _EN.words or f in _FR.words):
            return True
    return _TIMEISH.search(text.lower()) is not None


_ABBR = frozenset(MONTH_NAMES_EN + WEEKDAY_NAMES_EN)
_EN, _FR = LANGS["en"], LANGS["fr"]
_LETTERS = re.compile(r"[^\W\d_]+")
_WORDS = re.compile(r"[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*")
_FR_TIME = re.compile(r"[0-9]h|[0-9](?:er|e|eme|ème)(?![^\W\d_])")
_EN_TIME = re.compile(r"[0-9]\s*(?:am|pm|st|nd|rd|th)(?![^\W\d_])")
_TIMEISH = re.compile(r"[0-9](?:am|pm|h|st|nd|rd|th|er|e)(?![^\W\d_])|[0-9]:[0-9]{2}(?![0-9])")
