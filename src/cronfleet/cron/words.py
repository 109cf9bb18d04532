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
import unicodedata
from dataclasses import dataclass, field
from typing import NoReturn
from zoneinfo import ZoneInfo

from .errors import CronSyntaxError
from .expr import CronExpr
from .words_tables import LANGS, MONTH_NAMES_EN, WEEKDAY_NAMES_EN, Lang

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
    explicit: bool = True  # TIME: not a bare number


# units of "every N <unit>"
SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER, YEAR = range(8)
_UNIT_NAMES = ("second", "minute", "hour", "day", "week", "month", "quarter", "year")


@dataclass(frozen=True, slots=True)
class Sentence:
    """What :func:`from_text` read: the canonical expression, its words, the language."""

    text: str  # the sentence as written
    expr: str  # the canonical cronfleet expression, e.g. "0 9 * * 1-5"
    lang: str  # "en" or "fr"
    schedule: CronExpr = field(repr=False, compare=False)

    @property
    def description(self) -> str:
        """``describe()`` of the canonical expression (computed when asked for)."""
        return self.schedule.describe()


class _Refusal(Exception):
    def __init__(self, tok: Tok | None, reason: str) -> None:
        super().__init__(reason)
        self.tok = tok
        self.reason = reason


def _fail(tok: Tok | None, reason: str) -> NoReturn:
    raise _Refusal(tok, reason)


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
            raise _Refusal(Tok("?", 0, pos + 1, ch), f"unexpected character {ch!r}")
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
                _fail(Tok("NUM", 0, col, raw), f"{raw!r} is too large")
            out.append(Tok("NUM", int(s), col, raw))
        elif kind == "punct" and s == ".":
            # a dot ends an abbreviation ("janv.") or the sentence, nothing else
            if not (out and out[-1].kind not in ("NUM", "ORD", "TIME")
                    and text[pos - 2:pos - 1].isalpha()) and text[pos:].strip():
                _fail(Tok(".", 0, col, raw), "unexpected '.'")
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
            _fail(t, f"unexpected {t.raw!r}")
        else:
            out.append(t)
            i += 1
    return out


def _time_tok(s: str, col: int, raw: str) -> Tok:
    m = _TIME.match(s)
    tok = Tok("TIME", 0, col, raw)
    if m is None:  # ":30pm" style never reaches here; be safe
        _fail(tok, f"{raw!r} is not a time")
    hour = int(m.group(1))
    minute = int(m.group(2) or 0)
    ampm = m.group(3)
    if minute > 59:
        _fail(tok, f"{raw!r}: minutes must be 00-59")
    if ampm:
        if not 1 <= hour <= 12:
            _fail(tok, f"{raw!r}: with am/pm the hour must be 1-12 (did you mean "
                       f"'{hour:02d}:{minute:02d}'?)")
        hour = hour % 12 + (12 if ampm.startswith("p") else 0)
    elif hour > 23:
        _fail(tok, f"{raw!r}: the hour must be 0-23")
    return Tok("TIME", hour * 60 + minute, col, raw)


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
            _fail(tok, f"{tok.raw!r} is not an ordinal (did you mean '{value}{want}'?)")
    elif suffix in ("er", "re") and value != 1:
        _fail(tok, f"{tok.raw!r} is not an ordinal (did you mean '{value}e'?)")
    if value == 0:
        _fail(tok, f"{tok.raw!r}: there is no day 0")


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
        _fail(tok, f"{raw!r} is not {lang.name}: write the whole sentence in one language")
    close = difflib.get_close_matches(w, lang.suggest, n=1, cutoff=0.75)
    if close:
        _fail(tok, f"unknown word {raw!r} (did you mean {lang.display(close[0])!r}?)")
    _fail(tok, f"unknown word {raw!r}")


# -- the parser -----------------------------------------------------------------------------


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
        if t is None:
            last = self.toks[-1] if self.toks else None
            _fail(last, f"the sentence ends too early: expected {what}")
        _fail(t, f"unexpected {t.raw!r}: expected {what}")

    def once(self, slot: str, tok: Tok) -> None:
        prev = self.f.cols.get(slot)
        if prev is not None:
            _fail(tok, f"{tok.raw!r}: the {slot} is already given by {prev.raw!r} "
                       f"(column {prev.col}); say it once")
        self.f.cols[slot] = tok

    # the sentence
    def run(self) -> _Fields:
        if not self.toks:
            _fail(None, "empty sentence")
        while self.peek() is not None:
            start = self.i
            self.skip("AND", "ONLY")
            t = self.peek()
            dangling = next((x for x in self.toks[start:self.i] if x.kind == "AND"), None)
            if dangling is not None and (start == 0 or t is None):
                _fail(dangling, f"unexpected {dangling.raw!r}")
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
                         "or give the duration alone for an interval counted from the epoch")
            elif k == "AT" or k == "TIME":
                self.at_clause()
            elif k == "FROM":
                self.from_clause()
            elif k == "BETWEEN":
                self.between_clause()
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
                _fail(t, f"unexpected {t.raw!r}"
                         + (" here" if k != "?" else ""))
        return self.f

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
                        "('every day at 8:00 and 20:00')")
        self.f.count = (n, t)

    def every(self) -> None:
        ev = self.take()
        self.skip("THE")
        t = self.peek()
        if t is None:
            self.expected("what to repeat ('every day', 'every 15 minutes', 'every Monday')")
        if t.kind in ("NUM", "OTHER"):
            n_tok = self.take()
            n = 2 if n_tok.kind == "OTHER" else n_tok.value
            unit = self.expect("a unit (minutes, hours, days, months)", "UNIT")
            if n_tok.kind == "NUM" and n < 1:
                _fail(n_tok, "the step must be at least 1")
            self.once("frequency", ev)
            self.set_step(unit.value, n, n_tok)
        elif t.kind == "UNIT" or (t.kind == "ORD" and _fold(t.raw) == "second"
                                  and self.lang.code == "en"):
            u = self.take()
            if t.kind == "ORD":
                if self.at("DOW", "UNIT"):
                    _fail(u, "'every second ...' is not supported: write 'every other "
                             "...' or 'on the second Monday of the month'")
                u = Tok("UNIT", SECOND, u.col, u.raw)
            self.once("frequency", ev)
            self.set_step(u.value, 1, u)
        elif t.kind in ("DOW", "WEEKDAY", "WEEKEND"):
            self.days_of_week()
        elif t.kind == "MON":
            self.months(with_day=True)
        elif t.kind in ("ORD", "LAST"):
            if self.at("DOW", k=1) and not self.of_month_ahead(2):
                _fail(t, f"'every {t.raw} {self.toks[self.i + 1].raw}' is ambiguous (every "
                         f"other week, or once a month?): write 'on the {t.raw} "
                         f"{self.toks[self.i + 1].raw} of the month'")
            self.day_clause()
        else:
            self.expected("what to repeat ('every day', 'every 15 minutes', 'every Monday')")

    def set_step(self, unit: int, n: int, tok: Tok) -> None:
        f = self.f
        if n < 1:
            _fail(tok, "the step must be at least 1")
        if unit == SECOND and n % 60 == 0:
            unit, n = MINUTE, n // 60
        if unit == MINUTE and n % 60 == 0:
            unit, n = HOUR, n // 60
        if unit == SECOND:
            if 60 % n:
                self.no_divide(tok, n, "second", "minute", "s", f"*/{n} * * * * *")
            f.second = "*" if n == 1 else f"*/{n}"
            f.minute, f.hour = "*", "*"
        elif unit == MINUTE:
            if 60 % n:
                self.no_divide(tok, n, "minute", "hour", "m", f"*/{n} * * * *")
            f.minute = "*" if n == 1 else f"*/{n}"
            f.hour = "*"
        elif unit == HOUR:
            if 24 % n:
                self.no_divide(tok, n, "hour", "day", "h", f"0 */{n} * * *")
            f.minute = None
            f.hour = "*" if n == 1 else f"*/{n}"
        elif unit in (DAY, WEEK, YEAR):
            if n != 1:
                unit_name = _UNIT_NAMES[unit]
                interval = {DAY: f"{n}d", WEEK: f"{n}w", YEAR: None}[unit]
                hint = (f": use the interval '{interval}' (every {n * (7 if unit == WEEK else 1)}"
                        " x 24 h counted from 1970-01-01 00:00 UTC)" if interval else "")
                if unit == DAY:
                    hint += f" or '0 0 */{n} * *' (days 1, {1 + n}, ... of each month)"
                _fail(tok, f"'every {n} {unit_name}s' cannot be written in cron"
                           f"{hint}")
            f.period = unit
            return
        elif unit in (MONTH, QUARTER):
            months = n * (3 if unit == QUARTER else 1)
            if 12 % months:
                _fail(tok, f"every {months} months does not divide the year: cron restarts "
                           f"each January (write the months, e.g. 'in January and ...')")
            f.period = MONTH
            self.once("month", tok)
            f.month = "*" if months == 1 else f"*/{months}"
            return
        f.step = (unit, n, tok)

    def no_divide(self, tok: Tok, n: int, unit: str, whole: str, suffix: str,
                  cron: str) -> NoReturn:
        _fail(tok, f"'every {n} {unit}s' does not divide the {whole}: use the interval "
                   f"'{n}{suffix}' (every {n} {unit}s counted from 1970-01-01 00:00 UTC) "
                   f"or '{cron}' (restarts each {whole})")

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
                    _fail(m, f"{m.raw!r}: a minute is 0-59")
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
                      f"{a.value // 60:02d}:00 and {b.value // 60:02d}:59'")
        if a.value // 60 >= b.value // 60:
            _fail(b, f"{b.raw!r} must come after {a.raw!r} the same day")
        self.once("hours", bt)
        self.f.hours_range = (a.value // 60, b.value // 60, bt)

    def one_time(self) -> Tok:
        t = self.peek()
        if t is None:
            self.expected("a time ('9am', '14:30', 'noon')")
        if t.kind == "TIME":  # 9am, 9:30 pm, 14:30, 9h30 (the lexer read am/pm)
            self.take()
            return t
        if t.kind in ("NOON", "MIDNIGHT"):
            self.take()
            return Tok("TIME", t.value, t.col, t.raw)
        if t.kind == "NUM":
            self.take()
            if self.lang.code == "fr" and self.at_unit(HOUR):  # "8 heures"
                self.take()
                if t.value > 23:
                    _fail(t, f"{t.raw!r}: the hour must be 0-23")
                return Tok("TIME", t.value * 60, t.col, t.raw)
            if t.value > 23:
                _fail(t, f"{t.raw!r}: the hour must be 0-23")
            return Tok("TIME", t.value * 60, t.col, t.raw, explicit=False)
        self.expected("a time ('9am', '14:30', 'noon')")

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
                _fail(t, f"{t.raw!r}: a range of hours must use whole hours")
            if not t.explicit and self.lang.code == "en" and 1 <= t.value // 60 <= 12:
                _fail(t, f"{t.raw!r} is ambiguous: write '{t.raw}am', '{t.raw}pm' or "
                         f"'{t.value // 60:02d}:00'")
        ha, hb = a.value // 60, b.value // 60
        if ha >= hb:
            _fail(b, f"{b.raw!r} must come after {a.raw!r} the same day")
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
                _fail(first, f"a day is given twice ({it})")
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
                     f"or 'at {t.value}:00' (a time)" if self.lang.code == "en" else
                     f"{t.raw!r} alone: say 'le {t.value}' (a day) or 'à {t.value}h' (a time)")
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
                                 f"{_ordinal(first.value, self.lang)} {d.raw}')")
                if first.value > 5:
                    _fail(first, f"there is no {first.raw} {d.raw} in a month (1-5)")
                self.once("day", first)
                self.f.dow = f"{d.value}#{first.value}"
                self.of_month()
            elif self.at_unit(DAY):
                _fail(first, f"'{first.raw} day' is ambiguous: write 'on the {first.value}"
                             f"{'st' if first.value == 1 else 'th'}' or 'on day "
                             f"{first.value}'")
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

    def of_month(self) -> None:
        if self.at("OF"):
            self.take()
            self.skip("THE", "EVERY")
            if self.at_unit(MONTH):
                self.take()
            elif self.at("MON"):
                self.months()
            else:
                self.expected("'month' or a month name")

    def dom_list(self, first: Tok) -> None:
        self.once("day", first)
        days = [first]
        while True:
            the = 1 if self.at("THE", k=1) else 0  # "le 1er et le 15"
            if not (self.at("AND", "TO") and self.at("ORD", "NUM", k=1 + the)
                    and not self.at("TIMES", "UNIT", "AMPM", k=2 + the)):
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
                         "('on the 1st', 'le 1er')")
            if not 1 <= d.value <= 31:
                _fail(d, f"{d.raw!r}: a day of the month is 1-31")
            if d.kind == "RANGE":
                parts[-1] = f"{parts[-1]}-{d.value}"
            else:
                parts.append(str(d.value))
        self.f.dom = ",".join(parts)
        if self.at("MON") and not self.at("AND", k=1):  # "le 5 mars"
            self.months()
        else:
            self.of_month()

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
                                   "March and June')")
            self.dom_list(self.take())


# -- compile -------------------------------------------------------------------------------


def _compile(f: _Fields, lang: Lang, toks: list[Tok]) -> str:
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
                            "hours)")
        if f.at_minute is not None:
            _fail(f.at_minute, "give either a time or a minute, not both")
        if f.hours_range is not None:
            _fail(f.hours_range[2], "give either times or a range of hours, not both")
        values = [t.value for t in times]
        if lang.code == "en" and not any(v // 60 > 12 or v // 60 == 0 for v in values):
            for t in times:
                if not t.explicit and 1 <= t.value // 60 <= 12:
                    h = t.value // 60
                    _fail(t, f"'{t.raw}' is ambiguous: write '{h}am', '{h}pm' or "
                             f"'{h:02d}:00'")
        if len(set(values)) != len(values):
            dup = next(t for i, t in enumerate(times) if t.value in values[:i])
            _fail(dup, f"{dup.raw!r} is given twice")
        mins = sorted({v % 60 for v in values})
        hrs = sorted({v // 60 for v in values})
        if len(mins) * len(hrs) != len(values):
            _fail(times[1], "these times do not share their minutes: one cron expression "
                            "would fire at every combination of them; give the job several "
                            "schedules instead")
        if f.count is not None and f.count[0] != len(values):
            c = f.count[1]
            _fail(c, f"{c.raw!r} but {len(values)} time(s) given")
        minute = ",".join(map(str, mins))
        hour = ",".join(map(str, hrs))
    elif f.count is not None:
        c = f.count[1]
        if c.value == 1:
            minute, hour = minute or "0", hour or "0"
        else:
            _fail(c, f"{c.raw!r}: say at what times ('twice a day at 8:00 and 20:00')")
    if f.at_minute is not None:
        if f.step is None or f.step[0] != HOUR:
            _fail(f.at_minute, "'at minute N' goes with 'every hour' or 'every N hours'")
        minute = str(f.at_minute.value)
    if f.hours_range is not None:
        ha, hb, rt = f.hours_range
        if f.step is None or f.step[0] not in (MINUTE, HOUR, SECOND):
            _fail(rt, "a range of hours goes with 'every N minutes' or 'every hour'")
        unit, n, _ = f.step
        if unit == HOUR:
            hour = f"{ha}-{hb}/{n}" if n != 1 else f"{ha}-{hb}"
        else:  # a cron hour range runs whole: "9-17" fires until 17:45, not at 17:00
            _fail(rt, f"'every {n} {_UNIT_NAMES[unit]}s from {ha}:00 to {hb}:00' would "
                      f"also fire after {hb}:00 (cron's hours {ha}-{hb} run to {hb}:59): "
                      f"write the cron expression, e.g. '*/{n} {ha}-{hb - 1} * * *'")
    if minute is None:
        minute = "0"
    if hour is None:
        hour = "0"
    dom, month, dow = f.dom, f.month, f.dow
    if f.period == DAY and (dom is not None or dow is not None):
        _fail(f.cols["day"], "'every day' and a particular day together: say one of them")
    if dom is not None and dow is not None:
        tok = f.cols["day"]
        _fail(tok, "a day of the month and a day of the week together: cron fires on "
                   "either of them; give the job two schedules")
    p = f.period
    if p == WEEK and dow is None:
        if dom is not None:
            _fail(f.cols["day"], "'every week' goes with a day of the week, not of the month")
        dow = "0"
    if p == MONTH and dom is None and dow is None:
        dom = "1"
    if p == YEAR:
        if month is None:
            if dom is not None or dow is not None:
                _fail(f.cols["day"], "'every year' needs the month too ('on March 5th')")
            month = "1"
        if dom is None and dow is None:
            dom = "1"
    if p in (MONTH, YEAR) and dow is not None and dow[-1].isdigit() and "#" not in dow:
        _fail(f.cols["day"], "a period of months or years and a day of the week: which "
                             "one? Say 'on the first Monday of the month', or drop the period "
                             "('every Monday')")
    if (f.cols.get("frequency") is None and f.step is None and times is None
            and f.count is None
            and dom is None and dow is None):
        _fail(toks[0], "this says when but not how often: add 'every day', a time or a day "
                       "('every day in March at 9am')")
    sec = f.second
    parts = [minute, hour, dom or "*", month or "*", dow or "*"]
    if sec is not None:
        parts.insert(0, sec)
    return " ".join(parts)


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
                        f"months say 'every {toks[i].raw} {unit.raw} on the 1st'")
        if lang.code == "fr" and unit.value == HOUR and n == 2 and toks[i].value < 24:
            h = toks[i].value  # "2 heures" alone is also a time of day in French
            _fail(toks[i], f"'{toks[i].raw} {unit.raw}' is ambiguous: 'toutes les {h} heures' "
                           f"(on the clock), 'à {h}h' (a time) or '{h}h' (an interval)")
        total += toks[i].value * _UNIT_SECONDS[unit.value]
        i += 2
    if total <= 0:
        _fail(toks[0], "an interval must be a positive period")
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


def compile_text(text: str, lang: str | None = None) -> tuple[str, str]:
    """``(canonical expression, language)`` for a sentence; :class:`CronSyntaxError` else."""
    if not isinstance(text, str):
        raise TypeError(f"a schedule sentence must be a str, not {type(text).__name__}")
    if lang is not None and lang not in LANGS:
        raise CronSyntaxError(_FIELD, str(lang), None, text,
                              f"unknown language {lang!r} (expected 'en' or 'fr')")
    table = LANGS[lang] if lang is not None else _detect(text)
    if len(text) > _MAX_LEN:
        raise CronSyntaxError(_FIELD, text[:20], 1, text,
                              f"a sentence is at most {_MAX_LEN} characters")
    try:
        toks = _lex(text, table)
        if not toks:
            _fail(None, "empty sentence")
        interval = _duration(toks, table)
        if interval is not None:
            return interval, table.code
        f = _Parser(toks, table).run()
        return _compile(f, table, toks), table.code
    except _Refusal as exc:
        tok = exc.tok
        raise CronSyntaxError(_FIELD, tok.raw if tok else "", tok.col if tok else 1, text,
                              exc.reason) from None


def from_text(text: str, tz: str | ZoneInfo | None = None, lang: str | None = None) -> Sentence:
    """Compile an English or French sentence to a cronfleet schedule.

        >>> s = from_text("every weekday at 9am")
        >>> s.expr, s.lang, s.description
        ('0 9 * * 1-5', 'en', 'At 09:00, Monday through Friday')

    ``tz`` binds the schedule (default UTC); ``lang`` is ``"en"``, ``"fr"`` or ``None``
    (read from the words). Raises :class:`CronSyntaxError` (field ``sentence``, with the
    column of the word) for anything the grammar does not read exactly.
    """
    from . import parse  # the package's cached parse

    expr, code = compile_text(text, lang)
    try:
        schedule = parse(expr, tz if tz is not None else "UTC")
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
