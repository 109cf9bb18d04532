"""``cronfleet run`` (``api.serve``) installs alerts itself: a plain handler declared with
``auto_pause_after`` is paused for the fleet after its failures, with no code of the user's;
a library scheduler that nobody installs alerts on says so at start."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from cronfleet import RunContext, Scheduler
from cronfleet.api.serve import serve
from cronfleet.store.factory import open_health_store


async def test_serve_auto_pauses_a_failing_handler_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    s = Scheduler(store=url, instance_id="serve-1")
    calls: list[float] = []

    @s.job("1s", id="flaky", auto_pause_after=2)
    def flaky(ctx: RunContext) -> None:
        calls.append(ctx.slot.timestamp())
        raise RuntimeError("backend down")

    stop = asyncio.Event()
    task = asyncio.create_task(serve(s, api=False, stop=stop))
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            if s.running and (await s.state_async("flaky")).enabled_override is False:
                break
        state = await s.state_async("flaky")
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    assert state.enabled_override is False, f"not paused after {len(calls)} failures"
    assert state.override_by == "cronfleet (auto-pause)"
    assert state.override_note is not None and "2 consecutive failures" in state.override_note
    assert "backend down" in state.override_note
    health = open_health_store(url)
    try:
        row = await health.get("flaky")
    finally:
        await health.close()
    assert row.consecutive_failures >= 2 and row.failures == len(calls) >= 2


async def test_a_library_scheduler_without_alerts_warns_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}")
    s.job("1h", id="quiet")(lambda ctx: None)
    s.job("1h", id="loud", auto_pause_after=3)(lambda ctx: None)
    with caplog.at_level(logging.WARNING, logger="cronfleet"):
        async with s:
            pass
    [line] = [r.getMessage() for r in caplog.records if "no alerts are installed" in
              r.getMessage()]
    assert "loud" in line and "quiet" not in line
    assert "cronfleet.alerts.install(scheduler)" in line
