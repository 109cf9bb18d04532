"""`cronfleet run`: refuses to start on any problem; a real process runs, logs and stops on
SIGTERM with exit 0."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from api.procs import stop


def test_invalid_config_starts_nothing(cli: Callable[..., Result], project: Path) -> None:
    project.write_text(project.read_text().replace('cron = "1h"', 'cron = "1 x"'))
    r = cli("run")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == (
        "cronfleet.toml:6:11: task 'tick': cron: expression: expected 5 fields (minute hour "
        "day-of-month month day-of-week) or 6 (with a leading seconds field), got 2 (column 3)"
    )
    assert r.stderr.endswith("1 error in cronfleet.toml\n")
    assert not (project.parent / "ops.db").exists()


def test_a_plugin_that_fails_to_load_stops_the_start(cli: Callable[..., Result], project: Path,
                                                     write: Callable[..., Path]) -> None:
    write("plugs.py", """
        from cronfleet import Schedule, ScheduledPlugin

        class Reports(ScheduledPlugin):
            def name(self):
                return "reports"

            def schedules(self):
                return [Schedule(id="daily", cron="@daily", timezone="Paris")]

            def run(self, ctx):
                pass
        """)
    project.write_text(project.read_text().replace(
        'store = "sqlite:///ops.db"', 'store = "sqlite:///ops.db"\nplugins = ["plugs:Reports"]'))
    r = cli("run")
    assert r.exit_code == 1
    assert r.stderr == (
        "cronfleet.toml:3:12: plugin 'reports' (plugs:Reports listed in cronfleet.toml:3): "
        "schedule 'daily': timezone: unknown time zone 'Paris' (expected an IANA name such as "
        "'Europe/Paris')\n"
        '    3 | plugins = ["plugs:Reports"]\n'
        "      |            ^\n"
        "1 error in cronfleet.toml\n"
    )


def test_nothing_to_run(cli: Callable[..., Result], write: Callable[..., Path]) -> None:
    write("cronfleet.toml", '[scheduler]\nstore = "sqlite:///x.db"\n')
    for args in (("--role", "worker"), ("--no-api",)):
        r = cli("run", *args)
        assert r.exit_code == 1
        assert r.stderr == (
            "nothing to run: cronfleet.toml declares no [[tasks]], no plugin declares a "
            "schedule, no job was created over the API, and the API is off (pass --config "
            "FILE or set CRONFLEET_CONFIG)\n"
        )
    assert not Path("x.db").exists()  # looking for stored jobs created nothing


def test_api_role_needs_the_api(cli: Callable[..., Result], project: Path) -> None:
    r = cli("run", "--role", "api", "--no-api")
    assert r.exit_code == 2
    assert r.stderr == ("--role api serves only the REST API, which is off here (--no-api or "
                        "[api] enabled = false)\n")


def test_bad_scheduler_variable(cli: Callable[..., Result], project: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_SCHEDULER", "nope")
    r = cli("run")
    assert r.exit_code == 2
    assert r.stderr == ("CRONFLEET_SCHEDULER='nope': expected 0 (no timers: an API-only "
                        "replica) or 1\n")


def test_usage_errors_exit_2(cli: Callable[..., Result], project: Path) -> None:
    assert cli("run", "--role", "boss").exit_code == 2


BEAT = '''
import logging

def beat(ctx):
    logging.getLogger("beat").info("beat %s", ctx.slot.isoformat())
    return "ok"
'''


def start(tmp_path: Path, write: Callable[..., Path], *args: str,
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path, Path]:
    write("beat_handlers.py", BEAT)
    config = write("conf/cronfleet.toml", """
        [scheduler]
        store = "sqlite:///../fleet.db"
        shutdown_grace = "5s"

        [[tasks]]
        id = "beat"
        cron = "1s"
        handler = "beat_handlers:beat"
        """)
    (tmp_path / "conf" / "beat_handlers.py").write_text((tmp_path / "beat_handlers.py")
                                                        .read_text())
    log = tmp_path / "run.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronfleet.cli", "run", "--config", str(config), "--port", "0",
         *args],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=tmp_path,
        env={**clean, **(env or {})},
    )
    return proc, tmp_path / "fleet.db", log


def succeeded(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db)
    try:
        return int(con.execute(
            "SELECT count(*) FROM runs WHERE job_id = 'beat' AND status = 'succeeded'"
        ).fetchone()[0])
    except sqlite3.OperationalError:  # not migrated yet
        return 0
    finally:
        con.close()


@pytest.mark.slow
def test_real_process_runs_tasks_and_stops_on_sigterm(tmp_path: Path,
                                                      write: Callable[..., Path]) -> None:
    proc, db, log = start(tmp_path, write)
    try:
        deadline = time.time() + 20
        while succeeded(db) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert succeeded(db) >= 2, log.read_text()
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "role all (default): timers on, REST API on" in text
    assert "API listening on http://127.0.0.1:" in text
    assert f"store sqlite:///{tmp_path / 'fleet.db'}" in text  # relative to the config file
    assert "provider 'cron' (built-in, priority 1000): 1 job(s): beat" in text
    assert "beat: beat " in text and "job beat slot" in text
    assert text.rstrip().endswith("stopped")


@pytest.mark.slow
def test_real_process_without_timers_fires_nothing(tmp_path: Path,
                                                   write: Callable[..., Path]) -> None:
    proc, db, log = start(tmp_path, write, env={"CRONFLEET_SCHEDULER": "0"})
    try:
        deadline = time.time() + 20
        while "started with 1 jobs" not in log.read_text() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(2.2)  # two 1 s slots pass
        assert succeeded(db) == 0
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "role api (CRONFLEET_SCHEDULER=0): no timers: this process fires nothing (manual " \
           "triggers run here); REST API on" in text
    assert "(no timers: control only)" in text


@pytest.mark.slow
def test_real_process_on_redis_only_runs_and_serves_the_api(
    tmp_path: Path, write: Callable[..., Path], cli: Callable[..., Result],
    redis_session: Any,
) -> None:
    """`cronfleet run` with nothing but a Redis URL: tasks run, a token made by the CLI
    opens the API, which lists the job and its runs (all of it kept in Redis)."""
    import re

    import httpx

    from store.redis_server import new_prefix

    url = f"{redis_session.url}?prefix={new_prefix()}"
    write("beat_handlers.py", BEAT)
    config = write("cronfleet.toml", f"""
        [scheduler]
        store = "{url}"
        shutdown_grace = "5s"

        [[tasks]]
        id = "beat"
        cron = "1s"
        handler = "beat_handlers:beat"
        """)
    made = cli("tokens", "create", "--team", "default", "--role", "viewer", "--config",
               str(config))
    assert made.exit_code == 0, made.stderr
    token = made.stdout.splitlines()[0].strip()
    log = tmp_path / "run.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronfleet.cli", "run", "--config", str(config), "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=tmp_path, env=clean,
    )
    try:
        deadline = time.time() + 30
        found = None
        while found is None and time.time() < deadline and proc.poll() is None:
            found = re.search(r"API listening on (http://127\.0\.0\.1:\d+)", log.read_text())
            time.sleep(0.1)
        assert found, log.read_text()
        base, auth = found.group(1), {"Authorization": f"Bearer {token}"}
        runs: list[Any] = []
        while len(runs) < 2 and time.time() < deadline:
            r = httpx.get(f"{base}/api/jobs/beat/runs", headers=auth, timeout=5)
            assert r.status_code == 200, r.text
            runs = [x for x in r.json()["items"] if x["status"] == "succeeded"]
            time.sleep(0.2)
        assert len(runs) >= 2, log.read_text()
        assert httpx.get(f"{base}/api/jobs", headers=auth, timeout=5).status_code == 200
        assert httpx.get(f"{base}/api/jobs", timeout=5).status_code == 401
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "store redis://127.0.0.1:" in text
