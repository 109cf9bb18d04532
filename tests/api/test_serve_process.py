"""`cronfleet run --port 0`: a real process serves the API on the port it logs, answers
/healthz and authenticated requests, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cronfleet.store.api import ApiStore

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


async def _token(url: str) -> str:
    store = ApiStore(url)
    try:
        plaintext, _ = await store.create_token(name="proc", team="default", role="editor")
        return plaintext
    finally:
        await store.close()


@pytest.mark.slow
def test_cronfleet_run_serves_the_api_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "proc.db"
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(db=db), encoding="utf-8")
    (tmp_path / "proc_handlers.py").write_text(HANDLERS, encoding="utf-8")
    token = asyncio.run(_token(f"sqlite:///{db}"))
    log = tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronfleet.cli", "run", "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 30
        base = None
        while base is None and proc.poll() is None and time.monotonic() < deadline:
            m = re.search(r"API listening on (http://127\.0\.0\.1:(\d+))", log.read_text())
            if m:
                base = m.group(1)
                assert int(m.group(2)) > 0
            else:
                time.sleep(0.05)
        assert base is not None, log.read_text()
        with httpx.Client(base_url=base, timeout=10) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            r = client.get("/api/jobs")
            assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
            r = client.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            [job] = r.json()["items"]
            assert (job["id"], job["team"], job["editable"]) == ("nightly", "default", False)
            assert job["source"].startswith("cronfleet.toml:")  # where it is declared
            assert job["description"] == "a declared task"
            r = client.post("/api/jobs/nightly/trigger",
                            headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]
            deadline = time.monotonic() + 15
            while True:
                run = client.get(f"/api/runs/{run_id}",
                                 headers={"Authorization": f"Bearer {token}"}).json()
                if run["status"] == "succeeded" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert run["status"] == "succeeded" and run["result"] == {"ok": True}
            assert client.get("/readyz").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert code == 0, text
    assert "role all (default): timers on, REST API on" in text
    assert "Traceback" not in text, text
    assert text.rstrip().endswith("stopped"), text
