"""`cronfleet run --port 0`: a real process serves the API on the port it logs, answers
/healthz and authenticated requests, and stops cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .procs import LISTENING, spawn, stop, token, wait_for

CONFIG = """
[scheduler]
store = "sqlite:///{db}"
shutdown_grace = "2s"

[api]
host = "127.0.0.1"

[[tasks]]
id = "nightly"
cron = "@daily"
description = "a declared task"
handler = "proc_handlers:nightly"
"""

HANDLERS = """
def nightly(ctx):
    return {"ok": True}
"""


@pytest.mark.slow
def test_cronfleet_run_serves_the_api_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "proc.db"
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(db=db), encoding="utf-8")
    (tmp_path / "proc_handlers.py").write_text(HANDLERS, encoding="utf-8")
    tok = token(f"sqlite:///{db}")
    proc, log = spawn(tmp_path, "run", "--port", "0")
    try:
        m = wait_for(log, LISTENING, proc)
        base = m.group(1)
        assert int(m.group(2)) > 0
        with httpx.Client(base_url=base, timeout=10) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            r = client.get("/api/jobs")
            assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
            r = client.get("/api/jobs", headers={"Authorization": f"Bearer {tok}"})
            assert r.status_code == 200, r.text
            [job] = r.json()["items"]
            assert (job["id"], job["team"], job["editable"]) == ("nightly", "default", False)
            assert job["source"].startswith("cronfleet.toml:")  # where it is declared
            assert job["description"] == "a declared task"
            r = client.post("/api/jobs/nightly/trigger",
                            headers={"Authorization": f"Bearer {tok}"})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]
            deadline = time.monotonic() + 15
            while True:
                run = client.get(f"/api/runs/{run_id}",
                                 headers={"Authorization": f"Bearer {tok}"}).json()
                if run["status"] == "succeeded" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert run["status"] == "succeeded" and run["result"] == {"ok": True}
            assert client.get("/readyz").status_code == 200
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "role all (default): timers on, REST API on" in text
    assert "Traceback" not in text, text
    assert text.rstrip().endswith("stopped"), text


HOOK_HANDLER = """
import http.server, threading

class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass
"""


@pytest.mark.slow
def test_api_replica_and_worker_share_stored_jobs_and_pauses(tmp_path: Path) -> None:
    """An `api` process (no timers) creates an HTTP job and pauses it; a `worker` process
    (no API) runs it, and stops running it after the pause -- through the store only."""
    import http.server
    import threading

    namespace: dict[str, object] = {}
    exec(HOOK_HANDLER, namespace)  # the hook server lives in this test process
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), namespace["Hook"])  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}/hook"
    db = tmp_path / "fleet.db"
    (tmp_path / "cronfleet.toml").write_text(
        f'[scheduler]\nstore = "sqlite:///{db}"\nshutdown_grace = "2s"\n'
        '[api]\nprivate_targets = ["127.0.0.1"]\n', encoding="utf-8")
    auth = {"Authorization": f"Bearer {token(f'sqlite:///{db}')}"}
    api, api_log = spawn(tmp_path, "api", "--role", "api", "--port", "0")
    worker: subprocess.Popen[bytes] | None = None
    try:
        base = wait_for(api_log, LISTENING, api).group(1)
        with httpx.Client(base_url=base, timeout=10, headers=auth) as client:
            r = client.post("/api/jobs", json={
                "id": "hook", "schedule": "1s",
                "http": {"url": hook, "method": "POST"}})
            assert r.status_code == 201, r.text
            # the worker starts after the job exists: it finds it in the catalog at start
            worker, worker_log = spawn(tmp_path, "worker", "--role", "worker")
            wait_for(worker_log, r"1 job\(s\) loaded from the catalog", worker)

            def runs(status: str) -> list[dict[str, object]]:
                r = client.get("/api/jobs/hook/runs", params={"status": status, "limit": 200})
                assert r.status_code == 200, r.text
                items: list[dict[str, object]] = r.json()["items"]
                return items

            deadline = time.monotonic() + 20
            while len(runs("succeeded")) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            done = runs("succeeded")
            assert len(done) >= 2, worker_log.read_text()
            # fired by the worker, never by the api replica (which has no timers)
            assert {run["instance_id"] for run in done} <= {
                m for m in re.findall(r"cronfleet (\S+) started", worker_log.read_text())}
            r = client.put("/api/admin/cron/hook", json={"enabled": False, "note": "maint"})
            assert r.status_code == 200 and r.json()["enabled"] is False, r.text
            time.sleep(1.2)  # a slot in flight when the pause landed may still finish
            before = len(runs("succeeded"))
            deadline = time.monotonic() + 20
            while not runs("skipped") and time.monotonic() < deadline:
                time.sleep(0.1)
            skipped = runs("skipped")
            assert skipped and skipped[0]["reason"] == "paused", skipped
            assert len(runs("succeeded")) == before  # paused everywhere: nothing else ran
    finally:
        codes = [stop(p) for p in (api, worker) if p is not None]
        server.shutdown()
    assert codes == [0] * len(codes), api_log.read_text()[-3000:]
    assert "Traceback" not in api_log.read_text()


@pytest.mark.slow
def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    (tmp_path / "cronfleet.toml").write_text(
        CONFIG.format(db=tmp_path / "p.db"), encoding="utf-8")
    (tmp_path / "proc_handlers.py").write_text(HANDLERS, encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc, log = spawn(tmp_path, "run", "--port", str(port))
        code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == 1, text
    assert f"cronfleet cannot run: the API cannot listen on 127.0.0.1:{port}: " \
           "Address already in use (choose another with --port or [api] port)" in text
    assert "Traceback" not in text
    # the port is taken before any timer starts: the scheduler never opened the store
    # (no job state row, no run), so a supervisor's restart loop runs no job without an API
    db = tmp_path / "p.db"
    if db.exists():
        import sqlite3

        with contextlib.closing(sqlite3.connect(db)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            for table in ("job_state", "runs", "claims"):
                if table in tables:
                    assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
