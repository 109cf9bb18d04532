"""A real `cronfleet run --role worker` process: JSON logs (chosen by the environment) with
the run fields, and /healthz, /readyz, /metrics on the probe port (a flag), no API."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from api.procs import stop
from cli.test_cli_run import start, succeeded


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _records(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@pytest.mark.slow
def test_worker_serves_probes_and_logs_json(tmp_path: Path, write: Callable[..., Path]) -> None:
    proc, db, log = start(tmp_path, write, "--role", "worker", "--metrics-port", "0",
                          env={"CRONFLEET_LOG_FORMAT": "json", "CRONFLEET_API_PORT": "1"})
    try:
        deadline = time.time() + 30
        port = None
        while time.time() < deadline and proc.poll() is None:
            for r in _records(log):
                if r["message"].startswith("probes listening on http://0.0.0.0:"):
                    port = int(r["message"].split(":")[2].split()[0])
            if port is not None and succeeded(db) >= 2:
                break
            time.sleep(0.1)
        assert port is not None and succeeded(db) >= 2, log.read_text()
        base = f"http://127.0.0.1:{port}"
        assert _get(base + "/healthz")[:2] == (200, "application/json")
        status, _, body = _get(base + "/readyz")
        assert status == 200, body
        assert json.loads(body)["checks"]["store"] == "ok"
        status, kind, body = _get(base + "/metrics")
        assert status == 200 and kind.startswith("text/plain")
        assert "cronfleet_runs_total" in body or "cronfleet_" in body
        assert _get(base + "/api/jobs")[0] == 404  # the API is not served here
    finally:
        code = stop(proc)
    records = _records(log)
    lines = log.read_text().splitlines()
    assert code == 0, log.read_text()
    assert len(records) == len(lines), "every line is one JSON object"
    runs = [r for r in records if r["logger"] == "cronfleet.runtime" and "run_id" in r]
    if not runs:
        runs = [r for r in records if "run_id" in r]
    assert runs, lines[:20]
    run = runs[0]
    assert run["job"] == "beat" and run["outcome"] == "succeeded"
    assert isinstance(run["run_id"], int) and isinstance(run["duration"], float)
    assert run["instance"] and "fencing_token" in run and run["slot"].endswith("+00:00")
    assert {"ts", "level", "logger", "message"} <= set(run)
    assert not any("API listening" in r["message"] for r in records)
