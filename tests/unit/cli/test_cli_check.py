"""`cronfleet check`: validation, next fire times, warnings, exit codes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from cronfleet.model import TriggeredBy
from cronfleet.store import open_store
from cronfleet.store.base import Skip


def test_valid_config(cli: Callable[..., Result], project: Path) -> None:
    r = cli("check")
    assert r.exit_code == 0, r.stderr
    assert "cronfleet.toml: 3 job(s), store sqlite:///" in r.stdout
    for text in ("tick", "a task that works", "Every 1h (slots counted from", "boom",
                 "Europe/Paris", "(declared enabled = false)",
                 "OK: cronfleet.toml is valid (3 job(s))"):
        assert text in r.stdout
    assert "no run history yet" in r.stdout  # the store file does not exist yet
    assert r.stderr == ""


def test_json_lists_next_three_fire_times_and_descriptions(cli: Callable[..., Result],
                                                           project: Path) -> None:
    r = cli("check", "--json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert data["valid"] is True and data["errors"] == [] and data["provider"] == "cron"
    tick, boom, quiet = data["jobs"]
    assert tick["when"].startswith("Every 1h") and tick["description"] == "a task that works"
    assert boom["when"] == "Every 5 minutes" and boom["timezone"] == "Europe/Paris"
    assert len(boom["next"]) == 3 and all(t.endswith(("+01:00", "+02:00")) for t in boom["next"])
    assert quiet["enabled"] is False and quiet["source"] == "cronfleet.toml:16"


def test_file_argument_option_and_environment(cli: Callable[..., Result], project: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    other = project.rename(project.with_name("other.toml"))
    assert cli("check", str(other)).exit_code == 0
    assert cli("check", "--config", str(other)).exit_code == 0
    monkeypatch.setenv("CRONFLEET_CONFIG", str(other))
    assert cli("check").exit_code == 0


def test_errors_exit_1_with_every_problem_located(cli: Callable[..., Result],
                                                  write: Callable[..., Path]) -> None:
    write("ops_handlers.py", "def tick(ctx):\n    pass\n")
    write("cronfleet.toml", """
        [scheduler]
        timezone = "Europe/Pariss"

        [[tasks]]
        id = "tick"
        cron = "*/5 * * * MON-FRY"
        handler = "ops_handlers:tick"
        timout = "5m"
        """)
    r = cli("check")
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "cronfleet.toml:2:12: scheduler: timezone: unknown time zone 'Europe/Pariss' "
        "(expected an IANA name such as 'Europe/Paris')",
        '    2 | timezone = "Europe/Pariss"',
        "      |            ^",
        "cronfleet.toml:6:23: task 'tick': cron: day-of-week: 'FRY' is not a valid value "
        "(expected a number 0-7 or a name SUN-SAT) (column 15)",
        '    6 | cron = "*/5 * * * MON-FRY"',
        "      |                       ^",
        "cronfleet.toml:8:1: task 'tick': unknown key 'timout' (did you mean 'timeout'?)",
        '    8 | timout = "5m"',
        "      | ^",
        "3 errors in cronfleet.toml",
    ]


def test_errors_as_json(cli: Callable[..., Result], write: Callable[..., Path]) -> None:
    write("cronfleet.toml", '[[tasks]]\nid = "x"\ncron = "5m"\nhandler = "nowhere:x"\n')
    r = cli("check", "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["valid"] is False and data["jobs"] == []
    assert data["errors"] == [{
        "message": "cronfleet.toml:4:11: task 'x': handler: cannot import 'nowhere:x': no "
                   "module named 'nowhere'",
        "file": "cronfleet.toml", "line": 4, "column": 11, "task": "x", "plugin": None,
        "schedule": None, "key": "handler",
    }]


def test_missing_file(cli: Callable[..., Result]) -> None:
    r = cli("check", "nope.toml")
    assert r.exit_code == 1
    assert r.stderr == ("cannot read the configuration nope.toml: No such file or directory\n"
                        "1 error in nope.toml\n")


PLUGIN = '''
from cronfleet import Schedule, ScheduledPlugin


class Broken(ScheduledPlugin):
    def name(self):
        return "broken"

    def schedules(self):
        return [Schedule(id="nightly", cron="0 3 * * *", overlap="sometimes")]

    def run(self, ctx):
        pass


class Shadow(ScheduledPlugin):
    def name(self):
        return "shadow"

    def priority(self):
        return 5

    def schedules(self):
        return [Schedule(id="tick", cron="1m")]

    def run(self, ctx):
        pass
'''


def test_a_broken_plugin_fails_the_check_but_the_rest_is_shown(
    cli: Callable[..., Result], project: Path, write: Callable[..., Path],
) -> None:
    write("plugs.py", PLUGIN)
    text = project.read_text().replace('store = "sqlite:///ops.db"',
                                       'store = "sqlite:///ops.db"\nplugins = ["plugs:Broken"]')
    project.write_text(text)
    r = cli("check")
    assert r.exit_code == 1
    assert "tick" in r.stdout  # the tasks are still listed
    assert r.stderr.splitlines()[0] == (
        "cronfleet.toml:3:12: plugin 'broken' (plugs:Broken listed in cronfleet.toml:3): "
        "schedule 'nightly': overlap: 'sometimes' is not one of skip, queue_one, allow, replace"
    )


def test_warnings_exit_0_unless_strict(cli: Callable[..., Result], project: Path,
                                       write: Callable[..., Path]) -> None:
    write("plugs.py", PLUGIN)
    project.write_text(project.read_text().replace(
        'store = "sqlite:///ops.db"', 'store = "sqlite:///ops.db"\nplugins = ["plugs:Shadow"]'))
    r = cli("check")
    assert r.exit_code == 0
    assert r.stderr.startswith(
        "warning: schedule id 'tick' is declared twice: task 'tick' (cronfleet.toml:5, "
        "provider 'cron', priority 1000) wins over plugin 'shadow' (plugs:Shadow listed in "
        "cronfleet.toml:3, priority 5) by higher priority (1000 > 5); job 'shadow/tick' will "
        "not run"
    )
    r = cli("check", "--strict")
    assert r.exit_code == 1 and r.stderr.endswith("1 warning(s) in cronfleet.toml (--strict)\n")


def test_jitter_longer_than_the_period_is_a_warning(cli: Callable[..., Result],
                                                    project: Path) -> None:
    project.write_text(project.read_text().replace('cron = "1h"', 'cron = "10s"\njitter = "15s"'))
    r = cli("check", "--no-history")
    assert r.exit_code == 0
    assert ("warning: job 'tick': jitter 15s is not shorter than its period 10s, so a run can "
            "start after the next slot is due") in r.stderr


def test_runs_longer_than_the_period_are_a_warning(cli: Callable[..., Result],
                                                   project: Path, tmp_path: Path) -> None:
    async def skips() -> None:
        store = open_store(f"sqlite:///{tmp_path / 'ops.db'}")
        await store.open()
        now = time.time() // 300 * 300
        await store.record_skips([
            Skip("boom", now - 300 * i, "already_executing",
                 logs=["Skipped: the previous run has not finished"]) for i in range(1, 4)
        ] + [Skip("tick", now, "already_executing", TriggeredBy.MANUAL)])
        await store.close()

    asyncio.run(skips())
    r = cli("check")
    assert r.exit_code == 0
    assert r.stderr == (
        "warning: job 'boom' runs longer than its period of 5m: 3 of its last 3 runs were "
        "slots skipped because the previous run still held the lease (already_executing). "
        "Lengthen the period, speed the job up, or set overlap = \"queue_one\" if every slot "
        "must run.\n"
    )
    assert "no run history yet" not in r.stdout
    assert cli("check", "--no-history").stderr == ""


def test_the_example_config_is_valid(cli: Callable[..., Result]) -> None:
    import sys

    example = Path(__file__).resolve().parents[3] / "examples" / "cronfleet.toml"
    try:
        r = cli("check", str(example), "--no-history", "--json")
    finally:
        sys.modules.pop("tasks", None)  # examples/tasks.py
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [j["id"] for j in data["jobs"]] == ["heartbeat", "sync-inventory", "slow-export",
                                               "minutely-report", "office-digest",
                                               "xmas-eve-report", "weekday-pulse",
                                               "disk-report"]
    assert data["store"] == f"sqlite:///{example.parent / 'cronfleet.db'}"


def test_an_unknown_backoff_fails_the_check_once_and_is_in_the_json(
        cli: Callable[..., Result], write: Callable[..., Path]) -> None:
    # it was a bare log line repeated by every command, absent from --json, and --strict
    # passed; now it is a located problem of the check report
    write("cronfleet.toml", '[[tasks]]\nid = "x"\ncron = "5m"\nhttp = { url = "https://x" }\n'
                            'retry = { attempts = 2, backoff = "fibonaci" }\n')
    r = cli("check", "--json")
    assert r.exit_code == 1
    (error,) = json.loads(r.stdout)["errors"]
    assert error["key"] == "retry" and error["line"] == 5
    assert "backoff: 'fibonaci' is not one of exponential, linear, fixed" in error["message"]
    assert "unknown" not in r.stderr


def test_check_accepts_retry_and_notify_on_a_handler_task(cli: Callable[..., Result],
                                                          project: Path) -> None:
    project.write_text(project.read_text().replace(
        'description = "a task that works"',
        'description = "a task that works"\nretry = { attempts = 3, delay = "1s" }\n'
        'notify = { webhook = "https://hooks.example.com/x" }\nauto_pause_after = 5'))
    r = cli("check")
    assert r.exit_code == 0, r.stderr


def test_check_config_reports_warnings_as_located_problems(project: Path,
                                                           write: Callable[..., Path]) -> None:
    from cronfleet.config import check_config

    write("plugs.py", PLUGIN)
    project.write_text(project.read_text().replace(
        'store = "sqlite:///ops.db"', 'store = "sqlite:///ops.db"\nplugins = ["plugs:Shadow"]'))
    report = check_config(str(project))
    assert report.valid and report.loaded is not None
    (warning,) = report.warnings
    assert "schedule id 'tick' is declared twice" in str(warning)
    assert warning.to_dict()["message"] == str(warning)


REDIS_CONFIG = '''
[scheduler]
store = "{url}"

[[tasks]]
id = "tick"
cron = "1h"
handler = "ops_handlers:tick"
'''


@pytest.mark.parametrize(
    ("server_args", "expect_warning", "expect_note"),
    [
        ({}, "persistence is off (appendonly no, no save points)", None),
        ({"extra": ("--save", "900 1")}, "only RDB snapshots", None),
        ({"appendonly": True}, None, None),
        ({"appendonly": True, "extra": ("--appendfsync", "everysec")}, None,
         "appendfsync everysec"),
        ({"extra": ("--rename-command", "CONFIG", "")}, "CONFIG GET refused", None),
    ],
)
def test_check_warns_when_redis_persistence_is_off(
    cli: Callable[..., Result], write: Callable[..., Path], server_args: dict[str, Any],
    expect_warning: str | None, expect_note: str | None,
) -> None:
    from store.redis_server import RedisServer, new_prefix

    server = RedisServer(**server_args).start()
    try:
        write("ops_handlers.py", "def tick(ctx):\n    pass\n")
        write("cronfleet.toml", REDIS_CONFIG.format(url=f"{server.url}?prefix={new_prefix()}"))
        r = cli("check", "--json")
        data = json.loads(r.stdout)
        warned = [w for w in data["warnings"] if "Redis at" in w]
        noted = [n for n in data["notes"] if "Redis at" in n]
        if expect_warning is None:
            assert warned == [] and r.exit_code == 0, data
        else:
            assert len(warned) == 1 and expect_warning in warned[0], data
            assert cli("check", "--strict").exit_code == 1
        if expect_note is None:
            assert noted == [], data
        else:
            assert len(noted) == 1 and expect_note in noted[0], data
        assert cli("check", "--json", "--no-history").stdout.count("Redis at") == 0
    finally:
        server.cleanup()


def test_a_damaged_store_file_is_a_warning(cli: Callable[..., Result], project: Path,
                                          tmp_path: Path) -> None:
    from bench.chaos.faults import corrupt_sqlite
    from cronfleet.store.base import Dispatch

    async def fill() -> None:
        store = open_store(f"sqlite:///{tmp_path / 'ops.db'}")
        await store.open()
        for k in range(20):
            await store.dispatch([Dispatch.scheduled(f"job-{i}", 1000.0 + k, lease=False)
                                  for i in range(200)], "one")
        await store.close()

    asyncio.run(fill())
    corrupt_sqlite(tmp_path / "ops.db", pages=64, seed=3)
    r = cli("check")
    assert r.exit_code == 0 and "warning: the store is damaged" in r.stderr
    assert "restore the file from a backup" in r.stderr
    assert cli("check", "--strict").exit_code == 1
