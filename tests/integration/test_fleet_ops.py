"""Operating a library-declared job from the CLI of another process (#14), on SQLite and
PostgreSQL: the registry lists it and who declares it, pause / resume reach it, trigger
runs it on its process with params (and --force past a pause), and after its process
stops the registry says so and a trigger is refused with the reason. Runs are counted on
the handler side too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store.pg import drop_schema, new_schema, pg_url, require_pg

WORKER = Path(__file__).with_name("ops_worker.py")
pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fleet.db'}"
        return
    require_pg()
    schema = new_schema("ops")
    try:
        base = pg_url()
        yield f"{base}{'&' if '?' in base else '?'}schema={schema}"
    finally:
        drop_schema(schema)


def spawn(url: str, name: str, count: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, str(WORKER), "--store", url, "--name", name, "--count", str(count)],
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
        table = cli(store_url, "jobs")
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
