"""A schedule with no further fire time (``next`` raises NoFireTimeError, as at the end of
the calendar) is shown as "never" by every view of the CLI; none fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import Result

from cronfleet.cron import CronExpr, NoFireTimeError


@pytest.fixture(autouse=True)
def no_fire_time(monkeypatch: pytest.MonkeyPatch) -> None:
    def ended(self: CronExpr, after: datetime) -> datetime:
        raise NoFireTimeError(f"{self.expr!r}: no fire time after {after.isoformat()}")

    monkeypatch.setattr(CronExpr, "next", ended)


def test_jobs(cli: Callable[..., Result], project: Path) -> None:
    r = cli("jobs", "--json")
    assert r.exit_code == 0, r.stderr
    assert [j["next_run"] for j in json.loads(r.stdout)] == [None, None, None]
    r = cli("jobs")
    assert r.exit_code == 0, r.stderr
    assert "never" in r.stdout


def test_status(cli: Callable[..., Result], project: Path) -> None:
    r = cli("status", "--json")
    assert r.exit_code == 0, r.stderr
    assert [j["next_run"] for j in json.loads(r.stdout)["jobs"]] == [None, None, None]
    r = cli("status", "--once")
    assert r.exit_code == 0, r.stderr
    assert "never" in r.stdout


def test_check(cli: Callable[..., Result], project: Path) -> None:
    r = cli("check", "--json", "--no-history")
    assert r.exit_code == 0, r.stderr
    assert [j["next"] for j in json.loads(r.stdout)["jobs"]] == [[], [], []]
    r = cli("check", "--no-history")
    assert r.exit_code == 0, r.stderr
    assert "never" in r.stdout


def test_next(cli: Callable[..., Result]) -> None:
    r = cli("next", "@daily")
    assert r.exit_code == 1 and "no fire time after" in r.stderr
