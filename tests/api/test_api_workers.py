"""`cronfleet run --api-workers N`: the API is served by N worker processes on the port
the parent bound; changes reach the parent's scheduler through the store; SIGTERM stops
them all; a worker that dies stops the service (exit 1); the flag needs role all."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from .procs import LISTENING, spawn, stop, token, wait_for

CONFIG = """
[scheduler]
store = "sqlite:///{db}"
shutdown_grace = "2s"

[[tasks]]
id = "tick"
cron = "1s"
handler = "worker_handlers:tick"
"""

HANDLERS = """
import os
def tick(ctx):
    return {"pid": os.getpid()}
"""

WORKERS = r"API served by 2 worker process\(es\): (\d+), (\d+)"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def setup(tmp_path: Path) -> str:
    db = tmp_path / "w.db"
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(db=db), encoding="utf-8")
    (tmp_path / "worker_handlers.py").write_text(HANDLERS, encoding="utf-8")
    return token(f"sqlite:///{db}")


@pytest.mark.slow
def test_workers_serve_the_api_and_the_parent_fires(tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {setup(tmp_path)}"}
    proc, log = spawn(tmp_path, "run", "--port", "0", "--api-workers", "2")
    try:
        base = wait_for(log, LISTENING, proc).group(1)
        pids = [int(p) for p in wait_for(log, WORKERS, proc).groups()]
        assert proc.pid not in pids and all(alive(p) for p in pids)
        # the first request waits in the socket's queue until a worker has started and
        # accepts it: seconds on a loaded box (make test runs 6 test processes on 2 cores)
        with httpx.Client(base_url=base, timeout=45, headers=auth) as client:
            deadline = time.monotonic() + 20
            while True:
                r = client.get("/api/jobs/tick/runs", params={"status": "succeeded"})
                assert r.status_code == 200, r.text
                done = r.json()["items"]
                if len(done) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            # the schedule fires in the parent, not in a worker
            assert done and {run["result"]["pid"] for run in done} == {proc.pid}, done
            [job] = client.get("/api/jobs").json()["items"]
            assert job["id"] == "tick"
            # a pause made in a worker reaches the parent's scheduler through the store
            r = client.put("/api/admin/cron/tick", json={"enabled": False, "note": "w"})
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 20
            skipped: list[dict[str, object]] = []
            while not skipped and time.monotonic() < deadline:
                skipped = client.get("/api/jobs/tick/runs",
                                     params={"status": "skipped"}).json()["items"]
                time.sleep(0.1)
            assert skipped and skipped[0]["reason"] == "paused", skipped
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert not any(alive(p) for p in pids), text
    assert "Traceback" not in text, text


@pytest.mark.slow
def test_a_dead_worker_stops_the_service(tmp_path: Path) -> None:
    setup(tmp_path)
    proc, log = spawn(tmp_path, "run", "--port", "0", "--api-workers", "2")
    try:
        wait_for(log, LISTENING, proc)
        first, second = (int(p) for p in wait_for(log, WORKERS, proc).groups())
        os.kill(first, signal.SIGKILL)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            stop(proc)
    text = log.read_text()
    assert code == 1, text
    assert re.search(r"an API worker process exited \(code -9\)", text), text
    assert not alive(second), text


@pytest.mark.parametrize("args", [["--role", "worker"], ["--no-api"]])
def test_api_workers_need_role_all_with_the_api(tmp_path: Path, args: list[str]) -> None:
    setup(tmp_path)
    proc, log = spawn(tmp_path, "run", "--port", "0", "--api-workers", "1", *args)
    code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == 2, text
    assert "--api-workers serves the REST API of role all" in text, text


async def test_watching_the_workers_keeps_no_thread_of_the_default_executor() -> None:
    """The parent waits for a worker to exit without holding a thread of the loop's
    default executor per worker (that pool also resolves the HTTP jobs' host names):
    with a pool of one thread and three live workers, other work still gets it."""
    import asyncio
    import socket
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from cronfleet.api.workers import Workers

    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    a, b = socket.socketpair()
    workers = Workers([], a, 0)
    # Popen objects, as Workers.start makes them (a test stand-in for three workers)
    workers.procs = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]  # noqa: ASYNC220
    try:
        watching = asyncio.ensure_future(workers.first_exit())
        await asyncio.sleep(0.1)
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: 42), 2) == 42
        assert not watching.done()
        workers.procs[1].kill()
        assert await asyncio.wait_for(watching, 5) == -signal.SIGKILL
        assert workers.failed
    finally:
        for p in workers.procs:
            p.kill()
            p.wait()
        a.close()
        b.close()
