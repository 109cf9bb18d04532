"""``cronfleet run`` started while its store is unreachable (a fleet restarting during a
database failover): every start-up step waits for the store — the secrets key check
first — and the process runs its jobs once the store appears; ``--connect-timeout`` ends
the wait with a clear error. Real processes: PostgreSQL behind a TCP proxy refusing every
connection, Redis on a port where nothing listens yet."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.procs import spawn, stop, wait_for
from store.pg import TcpProxy, drop_schema, new_schema, pg_url, require_pg
from store.redis_server import RedisServer, new_prefix, require_redis

pytestmark = pytest.mark.slow

CONFIG = """
[scheduler]
store = "{url}"
shutdown_grace = "2s"

[[tasks]]
id = "tick"
cron = "1s"
handler = "start_handlers:tick"
"""

HANDLERS = """
import os

def tick(ctx):
    fd = os.open({record!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{{ctx.slot.timestamp()}}\\n".encode())
    os.close(fd)
"""

WAITING = r"store unreachable \("  # then the cause and "; waiting for it"


class Unreachable:
    """A store URL that refuses connections until :meth:`appear`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.url = ""
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Unreachable:
        if self.kind == "postgres":
            require_pg()
            self.schema = new_schema("start")
            self.proxy = self._stack.enter_context(TcpProxy(pg_url()))
            self.proxy.cut()  # every connection refused
            self.url = f"{self.proxy.url}{'&' if '?' in self.proxy.url else '?'}" \
                       f"schema={self.schema}"
            self._stack.callback(drop_schema, self.schema)
        else:
            require_redis()
            self.server = RedisServer()  # its port is chosen; nothing listens there yet
            self.url = f"{self.server.url}?prefix={new_prefix()}"
            self._stack.callback(self.server.cleanup)
        return self

    def appear(self) -> None:
        if self.kind == "postgres":
            self.proxy.restore()
        else:
            self.server.start()

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


@pytest.fixture(params=["postgres", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[Unreachable]:
    with Unreachable(request.param) as u:
        yield u


def _setup(tmp_path: Path, url: str) -> Path:
    record = tmp_path / "runs.txt"
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(url=url), encoding="utf-8")
    (tmp_path / "start_handlers.py").write_text(HANDLERS.format(record=str(record)),
                                                encoding="utf-8")
    return record


def _wait_until(check: object, proc: subprocess.Popen[bytes], log: Path,
                timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()}"
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s:\n{log.read_text()}")


def test_run_waits_for_an_unreachable_store_then_runs(
    tmp_path: Path, store: Unreachable
) -> None:
    record = _setup(tmp_path, store.url)
    proc, log = spawn(tmp_path, "run", "--role", "worker")
    try:
        wait_for(log, WAITING, proc, timeout=60)  # the first step found the store away
        time.sleep(3)  # ... and goes on waiting: no exit, nothing run
        assert proc.poll() is None, log.read_text()
        assert not record.exists()
        store.appear()
        _wait_until(lambda: record.exists() and record.read_text().count("\n") >= 2,
                    proc, log, timeout=90)
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "reachable after" in text and "Traceback" not in text, text


def test_connect_timeout_ends_the_wait_with_a_clear_error(
    tmp_path: Path, store: Unreachable
) -> None:
    record = _setup(tmp_path, store.url)
    started = time.monotonic()
    proc, log = spawn(tmp_path, "run", "--role", "worker", "--connect-timeout", "3s")
    try:
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - started
    text = log.read_text()
    assert code == 1, text
    assert took >= 3, (took, text)  # it waited (it used to give up after 0.9 s)
    assert "cronfleet cannot run" in text and "still unreachable after" in text, text
    assert "connect_timeout 3 s" in text, text
    assert "Traceback" not in text and not record.exists(), text


def test_sigterm_while_waiting_stops_at_once(tmp_path: Path, store: Unreachable) -> None:
    record = _setup(tmp_path, store.url)
    proc, log = spawn(tmp_path, "run", "--role", "worker", "--metrics-port", "0")
    try:
        wait_for(log, WAITING, proc, timeout=60)
        started = time.monotonic()
        code = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert code == 0 and time.monotonic() - started < 10, text
    assert "Traceback" not in text and not record.exists(), text
