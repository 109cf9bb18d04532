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
