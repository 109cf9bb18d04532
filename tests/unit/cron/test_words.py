"""cron/words.py: from_text, parse_schedule, and the faces that take a sentence."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronfleet.cron import CronSyntaxError, from_text, parse, parse_schedule
from cronfleet.cron.words import compile_text, looks_like_words
from cronfleet.cron.words_tables import LANGS


def test_result_object() -> None:
    s = from_text("every weekday at 9am", tz="Europe/Paris")
    assert (s.text, s.expr, s.lang) == ("every weekday at 9am", "0 9 * * 1-5", "en")
    assert s.description == "At 09:00, Monday through Friday"
    assert s.schedule == parse("0 9 * * 1-5", "Europe/Paris")
    assert str(s.schedule.tz) == "Europe/Paris"


def test_language_forced_and_unknown() -> None:
    assert from_text("tous les jours à 9h", lang="fr").expr == "0 9 * * *"
    with pytest.raises(CronSyntaxError, match="is not English"):
        from_text("tous les jours à 9h", lang="en")
    with pytest.raises(CronSyntaxError, match="unknown language"):
        from_text("every day", lang="de")


def test_every_n_minutes_rule() -> None:
    """A step that divides its unit is a cron step; one that does not is refused with
    both ways to say it (the epoch-anchored interval and the cron step)."""
    assert from_text("every 20 minutes").expr == "*/20 * * * *"
    with pytest.raises(CronSyntaxError) as info:
        from_text("every 7 minutes")
    assert "'7m'" in str(info.value) and "'*/7 * * * *'" in str(info.value)
    assert info.value.column == 7


def test_bad_timezone_is_the_timezone_error() -> None:
    with pytest.raises(CronSyntaxError) as info:
        from_text("every day at 9am", tz="Mars/Olympus")
    assert info.value.field == "timezone"


@pytest.mark.parametrize(("text", "expr", "sentence"), [
    ("0 9 * * 1-5", "0 9 * * 1-5", None),
    ("@daily", "@daily", None),
    ("15m", "15m", None),
    ("every weekday at 9am", "0 9 * * 1-5", "every weekday at 9am"),
    ("10 minutes", "10m", "10 minutes"),  # a duration alone: the interval, as "10m"
    ("du lundi au vendredi à 8h30", "30 8 * * 1-5", "du lundi au vendredi à 8h30"),
])
def test_parse_schedule(text: str, expr: str, sentence: str | None) -> None:
    got, words = parse_schedule(text, "Europe/Paris")
    assert (got.expr, words) == (expr, sentence)


@pytest.mark.parametrize(("text", "field", "column"), [
    ("0 9 * * FOO", "day-of-week", 9),  # cron-looking: the cron error
    ("0 0 32 * *", "day-of-month", 5),
    ("every tusday", "sentence", 7),  # words: the sentence error
    ("every day at 9", "sentence", 14),
])
def test_parse_schedule_errors(text: str, field: str, column: int) -> None:
    with pytest.raises(CronSyntaxError) as info:
        parse_schedule(text)
    assert (info.value.field, info.value.column) == (field, column)


def test_looks_like_words() -> None:
    assert not looks_like_words("0 9 * * MON")
    assert not looks_like_words("0 9 1 JAN MON")
    assert looks_like_words("every day")
    assert looks_like_words("9am")
    assert looks_like_words("le 1er")


def test_job_keeps_the_sentence() -> None:
    from cronfleet.model import Job

    job = Job.create("every weekday at 9am", None, id="report", timezone="Europe/Paris")
    assert job.schedule.expr == "0 9 * * 1-5"
    assert job.schedule_text == "every weekday at 9am"
    plain = Job.create("0 9 * * 1-5", None, id="plain")
    assert plain.schedule_text is None
    with pytest.raises(ValueError, match="did you mean 'Tuesday'"):
        Job.create("every tusday", None, id="bad")


def test_spec_problem_has_the_column() -> None:
    from cronfleet.spec import validate_job

    spec, problems = validate_job({"id": "x", "schedule": "every day at 25:00"})
    assert spec is None
    assert [(p.key, p.column) for p in problems] == [("schedule", 14)]


_VOCAB = [
    *sorted(set(LANGS["en"].words) | set(LANGS["fr"].words)),
    "9am", "12pm", "9h30", "21h", "14:30", "1st", "2nd", "2e", "1er", "3ème", "15", "0", "99",
    "31", ",", "-", ".", "/", "&", "*", "@every", "é", "٣", "Ｍon", "janv.", "'",
]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from(_VOCAB), max_size=9).map(" ".join),
    st.lists(st.sampled_from(_VOCAB), max_size=9).map("".join),
), st.sampled_from([None, "en", "fr"]))
def test_any_text_is_a_result_or_a_syntax_error(text: str, lang: str | None) -> None:
    try:
        s = from_text(text, lang=lang)
    except CronSyntaxError as exc:
        assert exc.field == "sentence"
        assert exc.column is not None and 1 <= exc.column <= max(1, len(text))
        return
    assert parse(s.expr) == s.schedule
    assert compile_text(text, lang)[0] == s.expr
