"""Stopping is bounded: a sync handler past ``shutdown_grace`` does not keep the process
alive (daemon worker threads), and the last writes have a budget whatever the store does."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronfleet import FakeClock, RunContext
from cronfleet.model import RunRecord, RunStatus, TriggeredBy
from cronfleet.runtime import scheduler as scheduler_module
from cronfleet.runtime.threads import DaemonThreadPool
from cronfleet.store.base import Finish

from .conftest import advance

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from cronfleet import Scheduler

    s = Scheduler(f"sqlite:///{sys.argv[1]}", shutdown_grace=1, instance_id="stuck")

    @s.job("1s", id="sleepy")
    def sleepy(ctx):
        print("STARTED", flush=True)
        time.sleep(60)  # a thread cannot be interrupted

    s.run()
    print("RETURNED", flush=True)
    """
)


def test_a_sync_handler_past_the_grace_does_not_keep_the_process(tmp_path: Path) -> None:
    db = tmp_path / "stop.db"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(db)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STARTED"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "RETURNED" in out and proc.returncode == 0
    assert took < 20, took  # grace 1 s + writes; the handler would need 60 s
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT status, reason FROM runs WHERE job_id = 'sleepy'").fetchall()
    assert ("interrupted", "shutdown") in rows


def test_daemon_pool_runs_work_and_reuses_threads() -> None:
    pool = DaemonThreadPool(2)
    futs = [pool.submit(lambda x: x * 2, i) for i in range(10)]
    assert [f.result(5) for f in futs] == [i * 2 for i in range(10)]
    assert len(pool._threads) <= 2 and all(t.daemon for t in pool._threads)
    failing = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(5)
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)


async def test_stop_has_a_budget_for_a_store_that_hangs(
    make: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "STOP_WRITE_BUDGET", 0.3)
    s = make(shutdown_grace=0.1)

    @s.job("60s", id="j")
    async def j(ctx: RunContext) -> None:
        return None

    await s.start()
    await advance(clock, 60, s, step=60)
    hang = asyncio.Event()

    async def never(*_: Any) -> None:
        await hang.wait()

    s.store.finish = never  # type: ignore[method-assign]
    s.store.record_skips = never  # type: ignore[method-assign]
    s.store.close = never  # type: ignore[method-assign]
    s.writer.finishes.append(_finish())  # a result still to write when the store hangs
    loop = asyncio.get_running_loop()
    started = loop.time()
    await s.stop()
    assert loop.time() - started < 3


def _finish() -> Finish:
    run = RunRecord(id=None, job_id="j", slot=datetime.now(UTC),
                    triggered_by=TriggeredBy.SCHEDULE, status=RunStatus.SUCCEEDED)
    return Finish(run)
