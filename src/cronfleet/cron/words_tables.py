"""The word tables of :mod:`.words`: each word of a language -> the symbols it stands for.

Keys are folded (lower case, accents removed, ``'`` for typographic apostrophes). A value
is a tuple of ``(kind, value)`` tokens; ``value`` is a weekday (0 = Sunday), a month
(1-12), a number, an ordinal, a unit index (0 second .. 7 year, as in words.py), or the
minutes of the day for ``noon`` / ``midnight``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AFTERNOON", "EVENING", "LANGS", "MONTH_NAMES_EN", "MORNING", "NIGHT",
           "WEEKDAY_NAMES_EN", "Lang"]

Entry = tuple[tuple[str, int], ...]

MONTH_NAMES_EN = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                  "nov", "dec"]
WEEKDAY_NAMES_EN = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

_S, _MIN, _H, _D, _W, _MO, _Q, _Y = range(8)
MORNING, AFTERNOON, EVENING, NIGHT = range(4)
"""The parts of the day (``PART`` tokens); their hours are ``PARTS`` in words.py."""


@dataclass(frozen=True, slots=True)
class Lang:
    code: str
    name: str
    words: dict[str, Entry]
    suggest: tuple[str, ...]  # words offered in "did you mean ...?"
    proper: frozenset[str]  # words shown capitalised (English day and month names)

    def display(self, word: str) -> str:
        return word.capitalize() if word in self.proper else word


def _one(kind: str, value: int = 0) -> Entry:
    return ((kind, value),)


def _build(code: str, name: str, groups: dict[str, Entry], proper: set[str]) -> Lang:
    return Lang(code, name, groups, tuple(sorted(w for w in groups if len(w) >= 3)),
                frozenset(proper))


_NUMBERS_EN = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
               "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "fifteen": 15, "twenty": 20,
               "thirty": 30}
_NUMBERS_FR = {"un": 1, "une": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "six": 6,
               "sept": 7, "huit": 8, "neuf": 9, "dix": 10, "douze": 12, "quinze": 15,
               "vingt": 20, "trente": 30}


def _english() -> Lang:
    w: dict[str, Entry] = {}
    days = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
    abbr = [("sun",), ("mon",), ("tue", "tues"), ("wed",), ("thu", "thur", "thurs"),
            ("fri",), ("sat",)]
    proper: set[str] = set()
    for i, d in enumerate(days):
        w[d] = w[d + "s"] = _one("DOW", i)
        proper.add(d)
        for a in abbr[i]:
            w[a] = _one("DOW", i)
    months = ["january", "february", "march", "april", "may", "june", "july", "august",
              "september", "october", "november", "december"]
    for i, m in enumerate(months, 1):
        w[m] = _one("MON", i)
        proper.add(m)
        w[m[:3]] = _one("MON", i)
    w["sept"] = _one("MON", 9)
    for word, n in _NUMBERS_EN.items():
        w[word] = _one("NUM", n)
    units = {"second": _S, "seconds": _S, "sec": _S, "secs": _S, "minute": _MIN,
             "minutes": _MIN, "min": _MIN, "mins": _MIN, "hour": _H, "hours": _H, "hr": _H,
             "hrs": _H, "day": _D, "days": _D, "week": _W, "weeks": _W, "month": _MO,
             "months": _MO, "quarter": _Q, "quarters": _Q, "year": _Y, "years": _Y}
    for word, u in units.items():
        w[word] = _one("UNIT", u)
    w["second"] = _one("ORD", 2)  # "the second Monday"; "every second" is read as the unit
    for word, n in {"first": 1, "third": 3, "fourth": 4, "fifth": 5}.items():
        w[word] = _one("ORD", n)
    for word, u in {"hourly": _H, "daily": _D, "weekly": _W, "monthly": _MO,
                    "quarterly": _Q, "yearly": _Y, "annually": _Y}.items():
        w[word] = _one("ADVERB", u)
    simple = {"every": "EVERY", "each": "EVERY", "other": "OTHER", "at": "AT", "on": "ON",
              "in": "IN", "of": "OF", "the": "THE", "and": "AND", "to": "TO",
              "through": "TO", "thru": "TO", "until": "TO", "till": "TO", "from": "FROM",
              "last": "LAST", "times": "TIMES", "per": "PER", "a": "PER", "an": "PER",
              "only": "ONLY", "weekday": "WEEKDAY", "weekdays": "WEEKDAY",
              "workday": "WEEKDAY", "workdays": "WEEKDAY", "weekend": "WEEKEND",
              "weekends": "WEEKEND", "half": "HALF", "am": "AMPM", "pm": "AMPM",
              "between": "BETWEEN", "past": "PAST"}
    for word, kind in simple.items():
        w[word] = _one(kind)
    w["pm"] = _one("AMPM", 1)
    w["noon"] = w["midday"] = _one("NOON", 720)
    w["midnight"] = _one("MIDNIGHT", 0)
    for word, offset in {"today": 0, "tomorrow": 1}.items():
        w[word] = _one("DAYREL", offset)
    w["tonight"] = (("DAYREL", 0), ("PART", EVENING))
    for word, moment in {"morning": MORNING, "mornings": MORNING, "afternoon": AFTERNOON,
                       "afternoons": AFTERNOON, "evening": EVENING, "evenings": EVENING,
                       "night": NIGHT, "nights": NIGHT}.items():
        w[word] = _one("PART", moment)
    w["once"] = _one("ONCE", 1)
    w["twice"] = _one("ONCE", 2)
    w["thrice"] = _one("ONCE", 3)
    return _build("en", "English", w, proper)


def _french() -> Lang:
    w: dict[str, Entry] = {}
    days = ["dimanche", "lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi"]
    for i, d in enumerate(days):
        w[d] = w[d + "s"] = w[d[:3]] = _one("DOW", i)
    months = ["janvier", "fevrier", "mars", "avril", "mai", "juin", "juillet", "aout",
              "septembre", "octobre", "novembre", "decembre"]
    for i, m in enumerate(months, 1):
        w[m] = _one("MON", i)
    for a, i in {"janv": 1, "fev": 2, "fevr": 2, "avr": 4, "juil": 7, "sept": 9, "oct": 10,
                 "nov": 11, "dec": 12}.items():
        w[a] = _one("MON", i)
    for word, n in _NUMBERS_FR.items():
        w[word] = _one("NUM", n)
    units = {"seconde": _S, "secondes": _S, "sec": _S, "minute": _MIN, "minutes": _MIN,
             "min": _MIN, "heure": _H, "heures": _H, "jour": _D, "jours": _D,
             "journee": _D, "semaine": _W, "semaines": _W, "mois": _MO, "trimestre": _Q,
             "trimestres": _Q, "an": _Y, "ans": _Y, "annee": _Y, "annees": _Y}
    for word, u in units.items():
        w[word] = _one("UNIT", u)
    for word, n in {"premier": 1, "premiere": 1, "deuxieme": 2, "second": 2, "troisieme": 3,
                    "quatrieme": 4, "cinquieme": 5}.items():
        w[word] = _one("ORD", n)
    for word, u in {"quotidiennement": _D, "hebdomadairement": _W, "mensuellement": _MO,
                    "trimestriellement": _Q, "annuellement": _Y}.items():
        w[word] = _one("ADVERB", u)
    simple = {"tous": "EVERY", "toutes": "EVERY", "chaque": "EVERY", "a": "AT",
              "le": "THE", "la": "THE", "les": "THE", "l'": "THE", "du": "OF", "de": "OF",
              "des": "OF", "d'": "OF", "et": "AND", "au": "TO", "jusqu'": "TO",
              "en": "IN", "dernier": "LAST", "derniere": "LAST", "fois": "TIMES",
              "par": "PER", "sur": "SUR", "seulement": "ONLY", "uniquement": "ONLY",
              "ouvre": "OUVRE", "ouvres": "OUVRE", "ouvrable": "OUVRE",
              "ouvrables": "OUVRE", "week-end": "WEEKEND", "week-ends": "WEEKEND",
              "weekend": "WEEKEND", "weekends": "WEEKEND", "demi-heure": "HALFHOUR",
              "demi-heures": "HALFHOUR", "quart": "QUARTW", "quarts": "QUARTW"}
    for word, kind in simple.items():
        w[word] = _one(kind)
    for word, offset in {"aujourd'hui": 0, "demain": 1, "apres-demain": 2}.items():
        w[word] = _one("DAYREL", offset)
    for word in ("ce", "cet", "cette"):  # "ce soir", "cet apres-midi": today
        w[word] = _one("CE")
    for word, moment in {"matin": MORNING, "matins": MORNING, "matinee": MORNING,
                       "apres-midi": AFTERNOON, "soir": EVENING, "soirs": EVENING,
                       "soiree": EVENING, "soirees": EVENING, "nuit": NIGHT,
                       "nuits": NIGHT}.items():
        w[word] = _one("PART", moment)
    w["dans"] = _one("IN")
    w["midi"] = _one("NOON", 720)
    w["minuit"] = _one("MIDNIGHT", 0)
    return _build("fr", "French", w, set())


LANGS: dict[str, Lang] = {"en": _english(), "fr": _french()}
