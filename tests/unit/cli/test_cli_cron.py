"""`cronfleet next` and `cronfleet explain`, through click's CliRunner."""

from __future__ import annotations

import inspect
import json

import pytest
from click.testing import CliRunner, Result

from cronfleet.cli import main


def run(*args: str) -> Result:
    old_click = "mix_stderr" in inspect.signature(CliRunner).parameters  # click < 8.2
    kwargs = {"mix_stderr": False} if old_click else {}
    return CliRunner(**kwargs).invoke(main, list(args))


def test_next_json_crosses_spring_forward() -> None:
    r = run("next", "30 2 * * *", "--tz", "Europe/Paris", "-n", "3",
            "--after", "2024-03-30T12:00:00+01:00", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["next"] == ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00",
                            "2024-04-02T02:30:00+02:00"]
    assert data["tz"] == "Europe/Paris" and data["description"] == "At 02:30 every day"
    assert data["after"] == "2024-03-30T12:00:00+01:00"


def test_next_words_are_joined_and_naive_after_is_read_in_tz() -> None:
    r = run("next", "*/30", "*", "*", "*", "*", "--tz", "America/New_York",
            "--after", "2024-11-03T01:40", "-n", "2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["next"] == ["2024-11-03T01:00:00-05:00",
                                            "2024-11-03T01:30:00-05:00"]


def test_next_human_output() -> None:
    r = run("next", "@every 1h30m", "--after", "2024-01-01T00:00:00Z", "-n", "2")
    assert r.exit_code == 0, r.output
    assert "2024-01-01T01:30:00+00:00" in r.stdout and "2024-01-01T03:00:00+00:00" in r.stdout
    assert "Every 1h30m" in r.stdout


def test_next_human_elapsed_column_counts_real_time() -> None:
    r = run("next", "*/15 * * * *", "--tz", "Australia/Lord_Howe",
            "--after", "2023-10-01T01:40", "-n", "2")
    assert r.exit_code == 0, r.output
    assert "2023-10-01T02:30:00+11:00" in r.stdout and "+20m" in r.stdout  # not +50m


def test_next_default_after_is_now() -> None:
    r = run("next", "* * * * *", "--json", "-n", "1")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["next"]) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["next", "0 0 32 * *"], "day-of-month: '32' is out of range 1-31 (column 5)"),
        (["explain", "0 0 30 2 *"], "can never fire"),
        (["next", "* * * * *", "--tz", "Mars/Base"], "unknown time zone 'Mars/Base'"),
        (["next", "* * * * *", "--after", "yesterday"], "--after: 'yesterday'"),
        (["explain", "@every 0s", "--json"], "interval: '0s' must be a positive period"),
    ],
)
def test_bad_input_exits_2_with_message_on_stderr(args: list[str], message: str) -> None:
    r = run(*args)
    assert r.exit_code == 2
    assert message in r.stderr and r.stdout == ""


def test_usage_errors_exit_2() -> None:
    assert run("next").exit_code == 2
    assert run("next", "* * * * *", "-n", "0").exit_code == 2


def test_no_fire_time_exits_1() -> None:
    r = run("next", "0 0 1 1 *", "--after", "9999-06-01T00:00:00+00:00")
    assert r.exit_code == 1 and "no fire time" in r.stderr


def test_explain_json() -> None:
    r = run("explain", "0 0 */2 * MON", "--tz", "Europe/Paris", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["day_rule"] == "and" and info["dst"] == "wall-clock"
    assert info["description"] == "At 00:00, every 2 days, but only on Monday"
    dom = next(f for f in info["fields"] if f["name"] == "day-of-month")
    assert dom["values"] == list(range(1, 32, 2))
    r = run("explain", "@hourly", "--json")
    assert json.loads(r.stdout)["expanded"] == "0 * * * *"
    assert json.loads(r.stdout)["dst"] == "elapsed"
    r = run("explain", "90s", "--json")
    assert json.loads(r.stdout)["period_seconds"] == 90


def test_explain_human() -> None:
    r = run("explain", "0 9 L,15W * 5L", "--tz", "Europe/Paris")
    assert r.exit_code == 0, r.output
    for text in ("day-of-month", "L, 15W", "5L", "OR:", "wall-clock"):
        assert text in r.stdout


def test_help_documents_exit_codes() -> None:
    for cmd in ([], ["next"], ["explain"]):
        r = run(*cmd, "--help")
        assert r.exit_code == 0 and "Exit codes" in r.stdout and "2  bad input" in r.stdout


def test_python_dash_m_cronfleet_is_the_cli() -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "cronfleet", "next", "0 9 * * *", "--tz", "Europe/Paris",
         "--after", "2026-03-28T12:00:00+01:00", "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    data = json.loads(out)
    assert data["expr"] == "0 9 * * *" and data["tz"] == "Europe/Paris"


def test_next_of_a_composed_schedule_lists_the_excluded_instants() -> None:
    r = run("next", "0 9 * * 1-5 | 0 12 * * 6 | end 2026-12-26", "--except", "12-25",
            "--tz", "Europe/Paris", "--after", "2026-12-23T00:00", "-n", "5", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["expr"] == ("0 12 * * 6 | 0 9 * * 1-5 | end 2026-12-26T23:59:59+01:00 | "
                            "except 12-25")
    assert data["next"] == ["2026-12-23T09:00:00+01:00", "2026-12-24T09:00:00+01:00",
                            "2026-12-26T12:00:00+01:00"]  # then the end
    assert data["excluded"] == ["2026-12-25T09:00:00+01:00"]
    human = run("next", "0 9 * * 1-5 | except 12-25", "--tz", "Europe/Paris",
                "--after", "2026-12-24T00:00", "-n", "2")
    assert human.exit_code == 0, human.output
    assert "│ x │ 2026-12-25T09:00:00+01:00 │ Fri" in human.stdout
    assert "2026-12-28T09:00:00+01:00" in human.stdout and "x: excluded" in human.stdout


def test_next_of_a_one_off_past_its_instant_says_done() -> None:
    r = run("next", "at 2026-12-24T18:00:00+01:00", "--after", "2027-01-01T00:00:00Z")
    assert r.exit_code == 1
    assert "done" in r.stderr
    ok = run("next", "at", "2026-12-24T18:00", "--tz", "Europe/Paris",
             "--after", "2026-01-01T00:00:00Z", "--json")
    assert json.loads(ok.stdout)["next"] == ["2026-12-24T18:00:00+01:00"]


def test_explain_a_composed_schedule() -> None:
    r = run("explain", "0 9 * * 1-5 | 0 12 * * 6 | except 12-25", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["kind"] == "composed" and info["except"] == ["12-25"]
    assert [p["expr"] for p in info["parts"]] == ["0 12 * * 6", "0 9 * * 1-5"]
    human = run("explain", "0 9 * * 1-5 | start 2026-01-01 | except 0 9 * * 1")
    assert human.exit_code == 0, human.output
    assert "start       2026-01-01T00:00:00+00:00" in human.stdout
    assert "except      0 9 * * 1" in human.stdout and "day-of-week" in human.stdout
    bad = run("next", "0 9 * * 1-5 | except 12-32")
    assert bad.exit_code == 2 and "is not a month-day" in bad.stderr


def test_next_of_a_composition_of_sentences() -> None:
    r = run("next", "every weekday at 9am | every Saturday at noon | except 12-25",
            "--tz", "Europe/Paris", "--after", "2026-12-24T00:00", "-n", "2", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["expr"] == "0 12 * * 6 | 0 9 * * 1-5 | except 12-25"
    assert data["sentence"] == "every weekday at 9am | every Saturday at noon | except 12-25"
    assert data["next"] == ["2026-12-24T09:00:00+01:00", "2026-12-26T12:00:00+01:00"]
    assert data["excluded"] == ["2026-12-25T09:00:00+01:00"]
    human = run("explain", "every weekday at 9am | except 12-25")
    assert human.exit_code == 0, human.output
    assert "written     every weekday at 9am | except 12-25" in human.stdout
