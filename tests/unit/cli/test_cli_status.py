"""`cronfleet status`: one frame (--once), JSON, and the live view for a few frames."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from click.testing import Result

from cronfleet.cron import parse

from .test_cli_operate import hold_lease


def test_one_frame(cli: Callable[..., Result], project: Path, tmp_path: Path) -> None:
    cli("trigger", "tick")
    cli("pause", "boom", "--by", "ops")
    hold_lease(tmp_path / "ops.db", "quiet", "w9:9:ff")
    now = datetime.now(UTC)
    r = cli("status", "--once")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    for text in ("cronfleet status", "jobs (next fire first)", "running now", "recent runs",
                 "paused by ops", "w9:9:ff", "succeeded", "running", "in "):
        assert text in out, text
    # the next fire comes first: boom (every 5 minutes) and tick (every hour) tie at the top
    # of the hour, so compare with their real next fires; quiet (daily, disabled) comes last
    boom_next = parse("*/5 * * * *", "Europe/Paris").next(now)
    tick_next = parse("1h").next(now)
    if boom_next != tick_next:
        first, second = ("boom", "tick") if boom_next < tick_next else ("tick", "boom")
        assert out.index(first) < out.index(second)
    assert max(out.index("boom"), out.index("tick")) < out.index("quiet")


def test_json(cli: Callable[..., Result], project: Path, tmp_path: Path) -> None:
    cli("trigger", "tick")
    hold_lease(tmp_path / "ops.db", "quiet", "w9:9:ff")
    r = cli("status", "--json", "--runs", "1")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert [j["id"] for j in data["jobs"]] == ["tick", "boom", "quiet"]
    assert [x["job_id"] for x in data["running"]] == ["quiet"]
    assert len(data["recent"]) == 1 and data["recent"][0]["job_id"] == "quiet"
    assert data["store"].endswith("ops.db")


def test_nothing_running(cli: Callable[..., Result], project: Path) -> None:
    r = cli("status", "--once")
    assert r.exit_code == 0 and "nothing running" in r.stdout and "never run" in r.stdout


def test_live_view_refreshes(cli: Callable[..., Result], project: Path) -> None:
    r = cli("status", "--interval", "0.2", "--frames", "3")
    assert r.exit_code == 0, r.stderr
    assert "cronfleet status" in r.stdout and "jobs (next fire first)" in r.stdout
