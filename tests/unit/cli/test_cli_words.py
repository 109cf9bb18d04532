"""Schedules written as sentences on the command line: next, explain, jobs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result


def test_next_reads_a_sentence(cli: Callable[..., Result]) -> None:
    r = cli("next", "du lundi au vendredi à 8h30", "--tz", "Europe/Paris", "-n", "2",
            "--after", "2024-03-29T12:00", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["expr"] == "30 8 * * 1-5" and data["sentence"] == "du lundi au vendredi à 8h30"
    assert data["next"] == ["2024-04-01T08:30:00+02:00", "2024-04-02T08:30:00+02:00"]


def test_next_of_a_plain_expression_has_no_sentence(cli: Callable[..., Result]) -> None:
    r = cli("next", "0 9 * * *", "--json")
    assert r.exit_code == 0 and "sentence" not in json.loads(r.stdout)


def test_a_bad_sentence_is_bad_input_with_its_column(cli: Callable[..., Result]) -> None:
    r = cli("next", "every", "tusday", "at", "9am")  # words passed apart are joined
    assert r.exit_code == 2
    assert r.stderr.strip() == ("sentence: unknown word 'tusday' (did you mean 'Tuesday'?) "
                                "(column 7)")


def test_explain_shows_the_sentence(cli: Callable[..., Result]) -> None:
    r = cli("explain", "every weekday at 9am")
    assert r.exit_code == 0, r.stderr
    assert "sentence    every weekday at 9am" in r.stdout
    assert "expression  0 9 * * 1-5" in r.stdout
    data = json.loads(cli("explain", "every weekday at 9am", "--json").stdout)
    assert data["sentence"] == "every weekday at 9am"


def test_jobs_show_the_sentence_and_its_expression(cli: Callable[..., Result],
                                                   project: Path) -> None:
    project.write_text(project.read_text().replace('cron = "1h"',
                                                   'cron = "every weekday at 9am"'))
    r = cli("jobs", "--wide")
    assert r.exit_code == 0, r.stderr
    assert "every weekday at 9am" in r.stdout and "= 0 9 * * 1-5" in r.stdout
    tick = next(j for j in json.loads(cli("jobs", "--json").stdout) if j["id"] == "tick")
    assert (tick["schedule"], tick["schedule_text"]) == ("0 9 * * 1-5", "every weekday at 9am")


def test_next_reads_the_issue_targets(cli: Callable[..., Result]) -> None:
    """The sentences of #28 that were `unknown word` before: one-offs read at --after,
    parts of the day."""
    after = ["--tz", "Europe/Paris", "--after", "2026-12-01T16:30", "--json", "-n", "2"]
    want = {
        "tomorrow at 5pm": ["2026-12-02T17:00:00+01:00"],
        "demain à 17h": ["2026-12-02T17:00:00+01:00"],
        "every morning at 8am": ["2026-12-02T08:00:00+01:00", "2026-12-03T08:00:00+01:00"],
        "every friday evening at 7pm": ["2026-12-04T19:00:00+01:00",
                                        "2026-12-11T19:00:00+01:00"],
        "chaque vendredi soir à 19h": ["2026-12-04T19:00:00+01:00",
                                       "2026-12-11T19:00:00+01:00"],
    }
    for text, times in want.items():
        r = cli("next", text, *after)
        assert r.exit_code == 0, (text, r.stderr)
        data = json.loads(r.stdout)
        assert data["next"] == times, text
        assert data["sentence"] == text
    one = json.loads(cli("next", "tomorrow at 5pm", *after).stdout)
    assert one["expr"] == "at 2026-12-02T17:00:00+01:00"  # shown as the absolute instant


def test_a_bare_part_of_the_day_asks_for_the_hour(cli: Callable[..., Result]) -> None:
    r = cli("next", "every evening")
    assert r.exit_code == 2
    assert "'evening' needs a time: say '... evening at 7pm'" in r.stderr
    assert "unknown word" not in r.stderr


def test_a_french_refusal_is_in_french(cli: Callable[..., Result]) -> None:
    r = cli("next", "tous les 15 jours")
    assert r.exit_code == 2
    assert r.stderr.strip().startswith("phrase : « tous les 15 jours » ne s'écrit pas en "
                                       "cron : utilisez l'intervalle '15d'")
    assert r.stderr.strip().endswith("(colonne 10)")
    assert "cannot be written" not in r.stderr
