"""The sentence corpus (tests/conformance/phrases/): every phrase compiles to its expected
canonical expression or is refused at its expected column; descriptions round-trip; a
compiled phrase fires exactly as its canonical expression in five zones with DST; a
one-off reads back as its instant and keeps its wall time (or its duration) in those
zones at any moment it is read."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronfleet.cron import CronSyntaxError, from_text, parse, read_schedule
from properties import examples

HERE = Path(__file__).parent / "phrases"
ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo",
         "Pacific/Chatham"]


def _load(name: str) -> list[dict[str, Any]]:
    return list(json.loads((HERE / name).read_text(encoding="utf-8")))


EN = _load("en.json")
FR = _load("fr.json")
REFUSALS = _load("refusals.json")
ONEOFFS = _load("oneoffs.json")
NOW = datetime(2026, 12, 1, 15, 30, tzinfo=UTC)  # what oneoffs.json was read at
TZ = "Europe/Paris"
COMPILED = [(e["text"], e["expr"], "en") for e in EN] + [(e["text"], e["expr"], "fr")
                                                         for e in FR]


def test_corpus_size() -> None:
    assert len(COMPILED) + len(REFUSALS) >= 300
    assert len(FR) + sum(1 for r in REFUSALS if r.get("lang") == "fr") >= 120
    assert len(ONEOFFS) >= 80
    texts = [t for t, _, _ in COMPILED] + [e["text"] for e in ONEOFFS]
    assert len(set(texts)) == len(texts), "a phrase is listed twice"
    refused = [(r["text"], r["error"]) for r in REFUSALS]
    assert len(set(refused)) == len(refused)
    assert not set(texts) & {r["text"] for r in REFUSALS}


@pytest.mark.parametrize(("text", "expr", "lang"), COMPILED, ids=[t for t, _, _ in COMPILED])
def test_phrase_compiles(text: str, expr: str, lang: str) -> None:
    got = from_text(text)  # the language is detected
    assert (got.expr, got.lang) == (expr, lang)
    assert from_text(text, lang=lang).expr == expr
    assert got.schedule == parse(expr)
    assert got.description == parse(expr).describe()


@pytest.mark.parametrize("case", REFUSALS, ids=[r["text"] or "<empty>" for r in REFUSALS])
def test_phrase_refused(case: dict[str, Any]) -> None:
    with pytest.raises(CronSyntaxError) as info:
        from_text(case["text"], lang=case.get("lang"))
    exc = info.value
    assert exc.field == "sentence"
    assert case["error"] in str(exc)
    assert exc.column == case["column"]


def test_descriptions_round_trip() -> None:
    """from_text(describe(expr)) is the same schedule: every description of the corpus's
    cron expressions is a sentence the grammar reads (a phrase added whose description is not
    must teach the grammar its wording, or be listed here with the reason)."""
    unread = []
    for expr in sorted({e for _, e, _ in COMPILED if not parse(e).is_interval}):
        words = parse(expr).describe()  # an interval's is not a sentence ("Every 10m (...)")
        try:
            back = from_text(words, lang="en")
        except CronSyntaxError as exc:
            unread.append((expr, words, str(exc)))
            continue
        assert back.schedule == parse(expr), (expr, words, back.expr)
    assert unread == []


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(COMPILED), zone=st.sampled_from(ZONES),
       start=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2037, 12, 31)))
def test_fire_times_match_the_canonical_expression(
        case: tuple[str, str, str], zone: str, start: datetime) -> None:
    text, expr, _ = case
    after = start.replace(tzinfo=UTC)
    words = from_text(text, tz=zone).schedule
    direct = parse(expr, zone)
    got = [t.astimezone(UTC) for t in words.next_n(after, 20)]
    want = [t.astimezone(UTC) for t in direct.next_n(after, 20)]
    assert got == want
    assert all(b - a > timedelta(0) for a, b in itertools.pairwise(got))


@pytest.mark.parametrize("case", ONEOFFS, ids=[e["text"] for e in ONEOFFS])
def test_one_off_reads_back(case: dict[str, Any]) -> None:
    got = from_text(case["text"], tz=TZ, now=NOW)
    assert got.expr == f"at {case['at']}"
    assert got.at is not None and got.at.isoformat() == case["at"]
    assert got.relative is case["relative"]
    back, _ = read_schedule(got.expr, TZ)  # the canonical text is the same schedule
    assert back == got.schedule
    assert got.schedule.next_n(NOW, 3) == ([got.at] if got.at > NOW else [])
    assert got.at.strftime("%Y-%m-%d %H:%M:%S") in got.description


_DURATION = ("in ", "dans ")
_DAYS = ("day", "week", "jour", "semaine")


def _wall_exists(day: datetime, zone: ZoneInfo) -> bool:
    local = day.replace(tzinfo=zone)
    return datetime.fromtimestamp(local.timestamp(), zone).replace(tzinfo=None) == \
        day.replace(tzinfo=None)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([e for e in ONEOFFS if e["relative"]]),
       zone=st.sampled_from(ZONES),
       now=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2037, 12, 31)))
def test_one_off_keeps_its_wall_time_in_every_zone(
        case: dict[str, Any], zone: str, now: datetime) -> None:
    """Read at any moment in a zone with DST, a one-off is after that moment and keeps
    what it said: a wall time (unless the zone skips it that day: then the clock's time
    after the gap), a duration to the second, or days with now's wall time."""
    text = case["text"]
    after = now.replace(tzinfo=UTC, microsecond=0)
    z = ZoneInfo(zone)
    try:
        got = from_text(text, tz=zone, now=after)
    except CronSyntaxError as exc:  # 'today at 6pm' read after 6pm
        assert "already past" in str(exc) or "déjà passé" in str(exc)
        return
    assert got.at is not None and got.at > after
    want = datetime.fromisoformat(case["at"])
    local = got.at.astimezone(z)
    if text.startswith(_DURATION) and not any(u in text for u in _DAYS):
        assert got.at - after == want - NOW  # a duration, to the second
        return
    if text.startswith(_DURATION):  # days later, at now's wall time or the time said
        wall = after.astimezone(z).replace(tzinfo=None)
        days = (want.date() - NOW.astimezone(ZoneInfo(TZ)).date()).days
        at_time = " at " in text or " à " in text  # 'in 2 days at 9am'
        target = datetime.combine(wall.date() + timedelta(days=days),
                                  want.time() if at_time else wall.time())
    else:
        target = datetime.combine(local.date(), want.time())
    if _wall_exists(target, z):
        assert local.replace(tzinfo=None) == target
    else:  # a spring-forward gap: the instant the wall time names, shown after the gap
        assert local.replace(tzinfo=None) > target


def test_a_french_refusal_is_in_french() -> None:
    """Every refusal of a French sentence in the corpus reads in French (before: English
    reasons such as "'every 15 days' cannot be written in cron")."""
    from cronfleet.cron.words import _detect

    french = [r for r in REFUSALS if (r.get("lang") or _detect(r["text"]).code) == "fr"]
    assert len(french) >= 50
    for case in french:
        with pytest.raises(CronSyntaxError) as info:
            from_text(case["text"], lang=case.get("lang"))
        exc = info.value
        assert exc.lang == "fr", case
        assert str(exc).startswith("phrase : ") and str(exc).endswith(f"(colonne {exc.column})")
        for english in (" the ", " is ", " must ", " cannot ", "expected", "unknown word"):
            assert english not in exc.reason, (case["text"], exc.reason)
