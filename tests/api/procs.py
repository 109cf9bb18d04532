"""Real `cronfleet run` processes for the API tests: start one in a directory, wait for a
log line (such as the address it listens on), stop it with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from cronfleet.store.factory import open_api_store

LISTENING = r"API listening on (http://127\.0\.0\.1:(\d+))"


def spawn(cwd: Path, name: str, *args: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.Popen[bytes], Path]:
    """``cronfleet run ARGS`` in ``cwd`` with no CRONFLEET_* variables but ``env``; its
    log goes to ``cwd/<name>.log``."""
    log = cwd / f"{name}.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronfleet.cli", "run", *args],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), cwd=cwd, env={**clean, **(env or {})})
    return proc, log


def wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes],
             timeout: float = 30.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return m
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in the log:\n{log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then the exit code (killed after 30 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def token(url: str, *, role: str = "editor", name: str = "proc", team: str = "default"
          ) -> str:
    """A new token's plaintext, created directly in the store at ``url``."""

    async def create() -> str:
        store = open_api_store(url)
        try:
            plaintext, _ = await store.create_token(name=name, team=team, role=role)
            return plaintext
        finally:
            await store.close()

    return asyncio.run(create())
