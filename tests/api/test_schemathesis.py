"""Schemathesis against a live ``cronfleet run``: generated requests (valid and invalid)
to every operation of /openapi.json must produce no server error and no response that
breaks the published schema (status codes, content types, headers, bodies)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .procs import LISTENING, spawn, stop, token, wait_for

CONFIG = """
[scheduler]
store = "sqlite:///api.db"
shutdown_grace = "2s"

[api]
host = "127.0.0.1"

[[tasks]]
id = "report"
cron = "*/5 * * * *"
handler = "st_handlers:report"
description = "a declared job"
"""

HANDLERS = """
def report(ctx):
    return {"ok": True}
"""

# Every check except positive_data_acceptance: the schema cannot say that "0 6 * * *" is a
# valid cron expression and "61 * * * *" is not, so schema-valid input may rightly get 422.
CHECKS = ["--checks", "all", "--exclude-checks", "positive_data_acceptance"]
MAX_EXAMPLES = os.environ.get("CRONFLEET_SCHEMATHESIS_EXAMPLES", "25")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path) -> None:
    (tmp_path / "cronfleet.toml").write_text(CONFIG)
    (tmp_path / "st_handlers.py").write_text(HANDLERS)
    key = base64.b64encode(os.urandom(32)).decode()
    proc, log = spawn(tmp_path, "run", "--port", "0", env={"CRONFLEET_SECRET_KEY": key})
    try:
        base = wait_for(log, LISTENING, proc).group(1)
        tok = token(f"sqlite:///{tmp_path / 'api.db'}", role="admin", name="schemathesis")
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        st = Path(sys.executable).with_name("st")
        result = subprocess.run(
            [str(st), "run", f"{base}/openapi.json", "-H", f"Authorization: Bearer {tok}",
             *CHECKS, "--max-examples", MAX_EXAMPLES, "--seed", "20261130",
             "--generation-database", "none", "--no-color", "--workers", "1",
             "--request-timeout", "20"],
            capture_output=True, text=True, cwd=tmp_path, timeout=540)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-12000:] + "\n--- server log ---\n" + \
            log.read_text()[-4000:]
        assert "17 selected" in output or "Selected:" in output
    finally:
        code = stop(proc)
    server_log = log.read_text()
    assert code == 0, server_log[-4000:]
    assert "Traceback" not in server_log, server_log[-8000:]

