"""Operating a library-declared job from the CLI of another process (#14), on SQLite,
PostgreSQL and Redis: the registry lists it and who declares it, pause / resume reach it, trigger
runs it on its process with params (and --force past a pause), and after its process
stops the registry says so and a trigger is refused with the reason. Runs are counted on
the handler side too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from store.pg import drop_schema, new_schema, pg_url, require_pg
from store.redis_server import RedisServer

WORKER = Path(__file__).with_name("ops_worker.py")
pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fleet.db'}"
        return
    if request.param == "redis":
        server = RedisServer(appendonly=True).start()
        try:
            yield server.url
        finally:
            server.cleanup()
        return
    require_pg()
    schema = new_schema("ops")
    try:
        base = pg_url()
        yield f"{base}{'&' if '?' in base else '?'}schema={schema}"
    finally:
        drop_schema(schema)


# a backfill needs slots in its range (January 1st, February 1st-2nd, March 1st-2nd, 2026);
# every hour of every day fired a scheduled run when a test spanned the hour, and that
# run's lease refused the test's own trigger (CRON_JOB_ALREADY_EXECUTING, run 1)
HOURLY = ("--schedule", "0 * 1,2 1-3 *")


def spawn(url: str, name: str, count: Path, *extra: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, str(WORKER), "--store", url, "--name", name, "--count", str(count),
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert p.stdout is not None
    deadline = time.time() + 60
    while True:
        line = p.stdout.readline()
        if line.startswith("READY"):
            return p
        if not line and p.poll() is not None:
            raise AssertionError(f"worker {name} exited early with {p.returncode}")
        assert time.time() < deadline, f"worker {name} did not start in time"


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRONFLEET_STORE": url, "COLUMNS": "200"}
    env.pop("CRONFLEET_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "cronfleet", *args], env=env, capture_output=True, text=True,
        timeout=120, cwd=str(Path(url.split("///")[-1]).parent) if "sqlite" in url else None,
    )  # fmt: skip


def cli_json(url: str, *args: str, code: int = 0) -> Any:
    done = cli(url, *args, "--json")
    assert done.returncode == code, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def handler_lines(count: Path) -> list[str]:
    return count.read_text().splitlines() if count.exists() else []


def test_a_library_job_is_listed_paused_and_triggered_from_another_process(
    store_url: str, tmp_path: Path
) -> None:
    count = tmp_path / "count.txt"
    worker = spawn(store_url, "lib-1", count)
    try:
        [job] = cli_json(store_url, "jobs")
        assert job["id"] == "tick" and job["source"] == "code" and job["remote"]
        assert job["description"] == "declared in code" and job["kind"] == "handler"
        assert job["declared"] is True and job["conflict"] is None
        assert [(d["instance"], d["live"]) for d in job["declared_by"]] == [("lib-1", True)]
        table = cli(store_url, "jobs", "--wide")  # "declared by" is a wide column
        assert table.returncode == 0 and "lib-1" in table.stdout

        paused = cli(store_url, "pause", "tick", "--note", "maintenance", "--by", "ops")
        assert paused.returncode == 0, paused.stderr
        refused = cli_json(store_url, "trigger", "tick", "--param", "k=v", code=3)
        assert refused["code"] == "JOB_PAUSED" and refused["details"]["instance"] == "lib-1"
        assert handler_lines(count) == []  # nothing ran

        run = cli_json(store_url, "trigger", "tick", "--param", "k=v", "--force",
                       "--by", "ops")
        assert run["status"] == "succeeded" and run["instance_id"] == "lib-1"
        assert run["params"] == {"k": "v"} and run["forced_by"] == "ops"
        assert handler_lines(count) == ['tick lib-1 {"k": "v"}']

        assert cli(store_url, "resume", "tick").returncode == 0
        assert cli(store_url, "clear-override", "tick").returncode == 0
        run = cli_json(store_url, "trigger", "tick", "--param", "n=2")
        assert run["status"] == "succeeded" and run["forced_by"] is None
        assert handler_lines(count)[1:] == ['tick lib-1 {"n": "2"}']
        shown = cli_json(store_url, "show-run", str(run["id"]))
        assert shown["params"] == {"n": "2"}
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert worker.returncode == 0
    # the process stopped: the registry keeps the job, says no live instance declares it
    [job] = cli_json(store_url, "jobs")
    assert job["declared"] is False
    assert [(d["instance"], d["live"]) for d in job["declared_by"]] == [("lib-1", False)]
    refused = cli_json(store_url, "trigger", "tick", code=3)
    assert refused["code"] == "JOB_NOT_DECLARED"
    assert "declared before by lib-1, no longer live" in refused["message"]
    assert len(handler_lines(count)) == 2


def test_the_registry_shows_which_instance_declares_what_after_one_stops(
    store_url: str, tmp_path: Path
) -> None:
    count = tmp_path / "count.txt"
    a = spawn(store_url, "a", count)
    b = spawn(store_url, "b", count)
    try:
        [job] = cli_json(store_url, "jobs")
        assert sorted((d["instance"], d["live"]) for d in job["declared_by"]) == [
            ("a", True), ("b", True)]
        a.send_signal(signal.SIGTERM)
        a.communicate(timeout=60)
        [job] = cli_json(store_url, "jobs")
        assert sorted((d["instance"], d["live"]) for d in job["declared_by"]) == [
            ("a", False), ("b", True)]
        assert job["declared"] is True
        # the survivor takes the trigger
        run = cli_json(store_url, "trigger", "tick")
        assert run["instance_id"] == "b" and run["status"] == "succeeded"
        assert handler_lines(count) == ["tick b {}"]
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=60)


def wait_run(url: str, run_id: int, *, done: bool = True, timeout: float = 60) -> Any:
    """The run once it has ended (``done``) or once it is running."""
    deadline = time.time() + timeout
    while True:
        run = cli_json(url, "show-run", str(run_id))
        if (run["finished_at"] is not None) if done else run["status"] == "running":
            return run
        assert time.time() < deadline, run
        time.sleep(0.3)


def test_a_run_is_cancelled_from_the_cli_of_another_process(
    store_url: str, tmp_path: Path
) -> None:
    count = tmp_path / "count.txt"
    worker = spawn(store_url, "lib-1", count)
    try:
        started = cli_json(store_url, "trigger", "tick", "--param", "sleep=120", "--no-wait")
        run_id = started["id"]
        wait_run(store_url, run_id, done=False)
        done = cli(store_url, "cancel", str(run_id), "--why", "wrong input", "--by", "ops")
        assert done.returncode == 0, done.stderr
        assert "taken by instance lib-1" in done.stdout
        run = wait_run(store_url, run_id)
        assert run["status"] == "cancelled" and run["reason"] == "cancelled"
        assert run["error"] == "cancelled by ops: wrong input"
        assert any("Cancel requested by ops: wrong input" in line for line in run["logs"])
        again = cli_json(store_url, "cancel", str(run_id), code=3)
        assert again["code"] == "RUN_ENDED"
        missing = cli_json(store_url, "cancel", "99999", code=2)
        assert missing["code"] == "RUN_NOT_FOUND"
        assert handler_lines(count) == ['tick lib-1 {"sleep": "120"}']
        # the job is free again: the next trigger runs
        run = cli_json(store_url, "trigger", "tick")
        assert run["status"] == "succeeded"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert worker.returncode == 0


def test_replace_cancels_a_run_of_another_process_and_runs_the_new_slot(
    store_url: str, tmp_path: Path
) -> None:
    count = tmp_path / "count.txt"
    # a runs tick only by hand (yearly); b every 5 seconds, both with overlap = replace
    a = spawn(store_url, "a", count, "--overlap", "replace", "--schedule", "0 0 1 1 *")
    b: subprocess.Popen[str] | None = None
    try:
        held = cli_json(store_url, "trigger", "tick", "--param", "sleep=300", "--no-wait")
        assert held["instance_id"] == "a"
        wait_run(store_url, held["id"], done=False)
        b = spawn(store_url, "b", count, "--overlap", "replace", "--schedule",
                  "*/5 * * * * *")
        replaced = wait_run(store_url, held["id"], timeout=60)
        assert replaced["status"] == "cancelled" and replaced["instance_id"] == "a"
        assert replaced["error"].startswith(
            "cancelled by b (overlap replace): replaced by a newer slot")
        deadline = time.time() + 60
        while True:
            runs = cli_json(store_url, "history", "tick", "--limit", "50")
            by_b = [r for r in runs if r["instance_id"] == "b" and r["status"] == "succeeded"]
            if by_b:
                break
            assert time.time() < deadline, runs
            time.sleep(0.5)
        # the slot that replaced the run ran on b, after the cancel
        first = min(by_b, key=lambda r: r["slot"])
        assert first["started_at"] >= replaced["finished_at"]
        lines = handler_lines(count)
        assert lines[0] == 'tick a {"sleep": "300"}' and "tick b {}" in lines[1:]
        assert [ln for ln in lines if ln.startswith("tick a")] == [lines[0]]
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=60)


def test_a_library_job_is_backfilled_from_the_cli_of_another_process(
    store_url: str, tmp_path: Path
) -> None:
    """Two processes declare the job; two CLI backfills of one range run at once: every
    slot runs exactly once (counted on the handler side and in the ledger); an
    --only-missing backfill afterwards runs nothing; a slow one is cancelled midway."""
    count = tmp_path / "count.txt"
    a = spawn(store_url, "a", count, *HOURLY)
    b = spawn(store_url, "b", count, *HOURLY)
    slots = [f"2026-01-01T{h:02d}:00:00+00:00" for h in range(12)]
    try:
        env = {**os.environ, "CRONFLEET_STORE": store_url}
        env.pop("CRONFLEET_CONFIG", None)
        args = [sys.executable, "-m", "cronfleet", "backfill", "tick", "--from",
                "2026-01-01T00:00:00", "--to", "2026-01-01T11:00:00", "--rate", "100"]
        cwd = str(tmp_path)
        # a run holding the lease until both backfills were taken by an instance (each CLI
        # says so on stderr): both are asked for before either runs a slot (a backfill
        # asked for after another finished a slot re-runs it)
        release = tmp_path / "release"
        held = cli_json(store_url, "trigger", "tick", "--param", f"until={release}",
                        "--no-wait")
        assert held["status"] == "running"
        both = [subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in both:
            assert p.stderr is not None
            first = p.stderr.readline()
            assert " taken by instance " in first, (first, p.stderr.read())
        release.touch()
        outs = [p.communicate(timeout=120) for p in both]
        assert [p.returncode for p in both] == [0, 0], outs
        done = [re.fullmatch(r"backfill \d+ of 'tick': (\d+)/12 slots: (\d+) run, .*\n",
                             out) for out, _ in outs]
        assert all(m is not None and m[1] == "12" for m in done), outs  # both finished
        assert sum(int(m[2]) for m in done if m is not None) == 12, outs
        ran = sorted(ln.split()[-1] for ln in handler_lines(count) if " backfill " in ln)
        assert ran == slots  # every slot once, whichever process ran it

        again = cli_json(store_url, "backfill", "tick", "--from", "2026-01-01T00:00:00",
                         "--to", "2026-01-01T11:00:00", "--only-missing", "--rate", "100")
        p = again["progress"]
        assert (p["total"], p["present"], p["ran"]) == (12, 12, 0), again
        assert len([ln for ln in handler_lines(count) if " backfill " in ln]) == 12

        runs = cli_json(store_url, "history", "tick", "--limit", "100")
        filled = [r for r in runs if r["triggered_by"] == "backfill"]
        assert sorted(datetime.fromisoformat(r["slot"].replace("Z", "+00:00"))
                      for r in filled) == [datetime.fromisoformat(s) for s in slots]
        assert all(r["status"] == "succeeded" for r in filled)

        slow = cli_json(store_url, "backfill", "tick", "--from", "2026-02-01T00:00:00",
                        "--to", "2026-02-02T23:00:00", "--rate", "0.5", "--no-wait")
        deadline = time.time() + 30  # cancelled once its first slot ran
        while not any("backfill 2026-02" in ln for ln in handler_lines(count)):
            assert time.time() < deadline, "the slow backfill ran no slot"
            time.sleep(0.1)
        stop = cli(store_url, "backfill-cancel", str(slow["id"]))
        assert stop.returncode == 0, stop.stderr
        again = cli(store_url, "backfill-cancel", str(slow["id"]))
        deadline = time.time() + 30
        while again.returncode == 0 and time.time() < deadline:  # until it is answered
            time.sleep(0.5)
            again = cli(store_url, "backfill-cancel", str(slow["id"]))
        assert again.returncode == 3 and "already ended" in again.stderr
        feb = [ln for ln in handler_lines(count) if "backfill 2026-02" in ln]
        assert 1 <= len(feb) < 10, feb  # stopped early: 48 slots at one every 2 s
    finally:
        for w in (a, b):
            w.send_signal(signal.SIGTERM)
            w.communicate(timeout=60)


def test_a_backfill_whose_instance_is_killed_ends_with_the_reason(
    store_url: str, tmp_path: Path
) -> None:
    """kill -9 the instance running a backfill: the CLI following it returns within about
    the instance ttl (3 s here) with INSTANCE_LOST, how many slots were done and how to
    finish, and exits 1; GET-like status (--json) says the same."""
    count = tmp_path / "count.txt"
    worker = spawn(store_url, "doomed", count, *HOURLY)
    env = {**os.environ, "CRONFLEET_STORE": store_url, "CRONFLEET_INSTANCE_TTL": "3s"}
    env.pop("CRONFLEET_CONFIG", None)
    follower: subprocess.Popen[str] | None = None
    try:
        follower = subprocess.Popen(
            [sys.executable, "-m", "cronfleet", "backfill", "tick", "--from",
             "2026-03-01T00:00:00", "--to", "2026-03-02T23:00:00", "--rate", "1", "--json"],
            env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)  # fmt: skip
        deadline = time.time() + 60
        while len([ln for ln in handler_lines(count) if " backfill " in ln]) < 2:
            assert time.time() < deadline, "the backfill did not start"
            assert follower.poll() is None, follower.communicate()
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        killed = time.monotonic()
        out, err = follower.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if worker.poll() is None:
            worker.kill()
        if follower is not None and follower.poll() is None:
            follower.kill()
    assert follower.returncode == 1, (out, err)
    got = json.loads(out)
    assert got["finished"] is True and got["instance_id"] == "doomed"
    assert got["error"].startswith("INSTANCE_LOST: instance doomed was lost while running "
                                   "the backfill; "), got
    assert got["error"].endswith(" of 48 slots done -- run it again with --only-missing")
    # the ttl from the last heartbeat (every ttl/5), a poll, a loaded machine
    assert 2.0 <= took <= 3.0 + 7.0, took
    ran = len([ln for ln in handler_lines(count) if " backfill " in ln])
    assert 2 <= ran < 48
