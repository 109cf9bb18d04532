"""The auto-pause and the resume of an auto-paused job are announced on every channel of
the job's ``notify``, through a real webhook receiver (a local HTTP server)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cronfleet import FakeClock, Job, RunContext, Scheduler
from cronfleet.alerts import install
from cronfleet.jobs.http import HttpRuntime
from cronfleet.model import NotifyPolicy

from .conftest import T0


class Hooks:
    """A webhook receiver: every JSON body it was sent, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with hooks.arrived:
                    hooks.bodies.append(json.loads(body))
                    hooks.arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def events(self) -> list[str]:
        with self.arrived:
            return [b["event"] for b in self.bodies]

    async def wait_for(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        def wait() -> list[dict[str, Any]]:
            with self.arrived:
                self.arrived.wait_for(lambda: len(self.bodies) >= n, timeout)
                return list(self.bodies)
        return await asyncio.to_thread(wait)


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    thread = threading.Thread(target=h.httpd.serve_forever, daemon=True)
    thread.start()
    yield h
    h.httpd.shutdown()
    h.httpd.server_close()


async def test_auto_pause_and_resume_are_notified(tmp_path: Path, hooks: Hooks) -> None:
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    clock = FakeClock(T0)
    s = Scheduler(store=url, clock=clock, instance_id="test-1")
    calls: list[float] = []

    async def failing(ctx: RunContext) -> None:
        calls.append(ctx.slot.timestamp())
        raise RuntimeError("backend down")

    # `on` asks for failures only from the 5th: the pause is announced whatever it says
    s.add_job(Job.create("60s", failing, id="payroll", auto_pause_after=2,
                         notify=NotifyPolicy(webhook=hooks.url, after_failures=5)))
    services = HttpRuntime(store=url, allow_private_targets=True)
    install(s, services)
    await s.start()
    try:
        for _ in range(2):
            clock.advance(60)
            for _ in range(5):
                await asyncio.sleep(0)
                await s.wait_idle()
        [paused] = await hooks.wait_for(1)
        assert paused["event"] == "paused" and paused["job_id"] == "payroll"
        assert paused["message"] == ("job payroll paused after 2 consecutive failures; "
                                     "last: RuntimeError: backend down (after 1 attempt)")
        assert paused["health"]["consecutive_failures"] == 2
        for _ in range(100):
            if (await s.state_async("payroll")).enabled_override is False:
                break
            await asyncio.sleep(0.02)
        await s.resume_async("payroll", by="alice")
        bodies = await hooks.wait_for(2)
        resumed = bodies[1]
        assert resumed["event"] == "resumed" and resumed["job_id"] == "payroll"
        assert resumed["message"].startswith("job payroll resumed by alice; it was "
                                             "auto-paused at ")
        assert "2 consecutive failures" in resumed["message"]
        # an operator's own pause and resume are theirs: nothing is announced
        await s.pause_async("payroll", by="bob")
        await s.resume_async("payroll", by="bob")
        await asyncio.sleep(0.3)
        assert hooks.events() == ["paused", "resumed"]
        assert len(calls) == 2
    finally:
        await s.stop()
