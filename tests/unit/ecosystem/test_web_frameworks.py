"""The thread-backed mode for sync apps and the ASGI lifespan helper."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from cronfleet import Scheduler
from cronfleet.errors import StoreError
from cronfleet.integrations.asgi import lifespan
from cronfleet.model import RunStatus


def _scheduler(tmp_path: Path, name: str = "bg.db") -> tuple[Scheduler, list[str]]:
    s = Scheduler(f"sqlite:///{tmp_path / name}", shutdown_grace="5s")
    ran: list[str] = []

    @s.job("1s", id="tick")
    def tick(ctx: object) -> str:
        ran.append(threading.current_thread().name)
        return "ok"

    @s.job("0 0 1 1 *", id="manual")
    def manual(ctx: object) -> str:
        return "by hand"

    return s, ran


def test_start_in_background_then_stop_from_the_caller_thread(tmp_path: Path) -> None:
    s, ran = _scheduler(tmp_path)
    started: list[Scheduler] = []
    bg = s.start_in_background(on_start=started.append)
    try:
        assert s.running and bg.alive and started == [s]
        assert bg.thread is not None and bg.thread.name == "cronfleet-scheduler"
        record = s.trigger("manual", wait=True)  # the blocking facade from this thread
        assert record.status is RunStatus.SUCCEEDED
        deadline = time.time() + 20
        while len(ran) < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert len(ran) >= 3  # the timer fires in the background too
        with pytest.raises(RuntimeError, match="already running"):
            s.start_in_background()
    finally:
        result = s.stop()  # no await: blocks until stopped
    assert not s.running and not bg.alive
    asyncio.run(_await(result))  # awaiting what it returned is harmless
    s.stop()  # again: nothing to do
    n = len(ran)
    time.sleep(1.5)
    assert len(ran) == n  # nothing fires after stop
    # the runs were written before stop returned
    runs = asyncio.run(_runs(tmp_path))
    assert len(runs) >= n and all(r.status is RunStatus.SUCCEEDED for r in runs[:n])


async def _await(x: object) -> None:
    await x  # type: ignore[misc]


async def _runs(tmp_path: Path) -> list:
    s, _ = _scheduler(tmp_path)
    async with s:
        return await s.runs_async("tick", limit=100)


def test_a_failed_start_raises_in_the_caller(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()  # a directory where the database file should be
    s = Scheduler(f"sqlite:///{tmp_path / 'dir.db'}")
    with pytest.raises(StoreError):
        s.start_in_background(timeout=30)
    assert not s.running


def test_the_scheduler_can_restart_in_background(tmp_path: Path) -> None:
    s, _ran = _scheduler(tmp_path)
    for _ in range(2):
        s.start_in_background()
        assert s.trigger("manual", wait=True).status is RunStatus.SUCCEEDED
        s.stop()
        assert not s.running


def test_asgi_lifespan_runs_the_scheduler_with_the_app(tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    s, _ran = _scheduler(tmp_path)
    entered: list[str] = []

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def own(app: FastAPI):  # type: ignore[no-untyped-def]
        entered.append("in")
        yield
        entered.append("out")

    app = FastAPI(lifespan=lifespan(s, then=own))

    @app.post("/run")
    async def run() -> dict:
        record = await s.trigger_async("manual", wait=True)
        return {"status": record.status.value}

    assert not s.running
    with TestClient(app) as client:
        assert s.running and entered == ["in"]
        assert client.post("/run").json() == {"status": "succeeded"}
    assert not s.running and entered == ["in", "out"]
