"""cron/words.py: from_text, parse_schedule, and the faces that take a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cronfleet.cron import CronSyntaxError, from_text, parse, parse_schedule
from cronfleet.cron.words import compile_text, looks_like_words
from cronfleet.cron.words_tables import LANGS
from properties import examples


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


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from(_VOCAB), max_size=9).map(" ".join),
    st.lists(st.sampled_from(_VOCAB), max_size=9).map("".join),
), st.sampled_from([None, "en", "fr"]))
@example("tomorrow at 1am", None).via("a one-off")
@example("dans 2 heures", "fr").via("a relative one-off")
def test_any_text_is_a_result_or_a_syntax_error(text: str, lang: str | None) -> None:
    try:
        s = from_text(text, lang=lang)
    except CronSyntaxError as exc:
        assert exc.field == "sentence"
        assert exc.column is not None and 1 <= exc.column <= max(1, len(text))
        return
    if s.at is not None:  # a one-off ("tomorrow at 1am"): its instant, read at now
        assert s.expr == f"at {s.at.isoformat()}" and s.schedule.at == s.at  # type: ignore[attr-defined]
        if s.relative:  # "in 2 hours": read again, at another now
            return
    else:
        assert parse(s.expr) == s.schedule
    assert compile_text(text, lang)[0] == s.expr


NOW = 1_796_139_000.0  # 2026-12-01T15:30:00Z (16:30 in Paris)


def test_a_one_off_in_words_is_read_at_now_and_shown_as_its_instant() -> None:
    from cronfleet.cron import ComposedSchedule

    s = from_text("tomorrow at 5pm", tz="Europe/Paris", now=NOW)
    assert s.expr == "at 2026-12-02T17:00:00+01:00" and s.relative
    assert isinstance(s.schedule, ComposedSchedule) and s.schedule.at == s.at
    assert compile_text("le 3 décembre à 9h", tz="Europe/Paris", now=NOW) == (
        "at 2026-12-03T09:00:00+01:00", "fr")
    assert from_text("in 2 hours", now=NOW).expr == "at 2026-12-01T17:30:00+00:00"
    fixed = from_text("on December 24 2026 at 18:00", tz="Europe/Paris", now=NOW)
    assert not fixed.relative  # the year pins it: the same instant whenever it is read
    assert from_text("on December 24 2026 at 18:00", tz="Europe/Paris").at == fixed.at


def test_a_relative_one_off_is_refused_where_it_is_declared_again() -> None:
    with pytest.raises(CronSyntaxError) as info:
        parse_schedule("tomorrow at 5pm", "Europe/Paris", now=NOW, relative=False)
    assert 'at = "2026-12-02T17:00:00+01:00"' in str(info.value)
    assert "would move each time" in str(info.value)
    with pytest.raises(CronSyntaxError, match="relue à chaque démarrage"):
        parse_schedule("demain à 17h", "Europe/Paris", now=NOW, relative=False)


def test_job_create_takes_a_dated_one_off_and_refuses_a_relative_one() -> None:
    from cronfleet.model import Job

    job = Job.create("on December 24 2026 at 6pm", None, id="eve", timezone="Europe/Paris")
    assert job.schedule.expr == "at 2026-12-24T18:00:00+01:00"
    assert job.schedule_text == "on December 24 2026 at 6pm"
    with pytest.raises(ValueError, match="a declared job is read again at every start"):
        Job.create("tomorrow at 5pm", None, id="soon")


def test_a_config_task_with_a_relative_one_off_is_refused_naming_the_task(
        tmp_path: Path) -> None:
    from cronfleet import ConfigError, load_config

    path = tmp_path / "cronfleet.toml"
    path.write_text('[scheduler]\ntimezone = "Europe/Paris"\n\n[[tasks]]\nid = "eve"\n'
                    'command = ["true"]\ncron = "on December 24 2026 at 6pm"\n\n'
                    '[[tasks]]\nid = "soon"\ncommand = ["true"]\ncron = "tomorrow at 5pm"\n',
                    encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [problem] = info.value.problems
    assert "soon" in str(problem) and "would move each time" in str(problem)
    path.write_text(path.read_text().split("\n\n[[tasks]]\nid = \"soon\"")[0] + "\n")
    config = load_config(path)
    with config.load() as loaded:
        [job] = loaded.jobs
    assert job.schedule.expr == "at 2026-12-24T18:00:00+01:00"


def test_suggestions_keep_what_the_sentence_said() -> None:
    with pytest.raises(CronSyntaxError) as info:
        from_text("every 2 days at noon")
    assert "'0 12 */2 * *'" in str(info.value)  # before: '0 0 */2 * *', noon dropped
    assert "it cannot keep the time 12:00" in str(info.value)


def test_one_rule_for_times_without_am_pm() -> None:
    for text in ("every sunday at 2:30", "every day at 9"):  # before: 2:30 read as 02:30
        with pytest.raises(CronSyntaxError, match="is ambiguous"):
            from_text(text)
    assert from_text("every sunday at 02:30").expr == "30 2 * * 0"
    assert from_text("every sunday at 14:30").expr == "30 14 * * 0"
    assert from_text("at 8:30 and 20:30").expr == "30 8,20 * * *"
    assert from_text("tous les dimanches à 2h30").expr == "30 2 * * 0"  # French: 24-hour
