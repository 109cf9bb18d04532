"""A private ``redis-server`` for tests: a free port, a temp dir, never the shared 6379.

``RedisServer`` starts one (AOF optional), can be killed (SIGKILL) and started again on
the same port and directory. Without the ``redis-server`` binary the tests skip with the
reason, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def require_redis() -> str:
    """The ``redis-server`` path; skips (laptop) or fails (``CI=true``) without it."""
    path = redis_binary()
    if path is not None:
        return path
    reason = "redis-server is not installed (needed for the Redis store tests)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, bound together before any is released: ``free_port``
    called in turn can give a port twice (one process then answers for another)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class RedisServer:
    """One private server process (``appendonly``: AOF with ``appendfsync always``)."""

    def __init__(
        self, *, appendonly: bool = False, directory: Path | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.binary = require_redis()
        self.port = free_port()
        self.dir = directory or Path(tempfile.mkdtemp(prefix="cf-redis-"))
        self.appendonly = appendonly
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
            str(self.dir), "--save", "", "--daemonize", "no", "--protected-mode", "no",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        args += self.extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")

    def kill(self) -> None:
        """SIGKILL: what the server had not written to disk is lost."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def new_prefix() -> str:
    """A fresh key prefix per test: tests on one server never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}:"
