"""The job registry and remote trigger in the runtime (#14): each scheduler publishes the
jobs it declares, another process triggers one through the store, a conflict is named."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, RunContext, Scheduler
from cronfleet.errors import CronfleetError, NotDeclared, RemoteRefused, RemoteTimeout
from cronfleet.runtime.registry import TOUCH, DeclaredElsewhere, fleet_jobs, job_from_spec, remote_trigger
from cronfleet.store.base import RegistryStore

from .conftest import BOTH, settle

Make = Callable[..., Scheduler]
TTL = 15.0


def reg(s: Scheduler) -> RegistryStore:
    assert isinstance(s.store, RegistryStore)
    return s.store


@pytest.mark.parametrize("store_kind", BOTH)
async def test_jobs_are_published_with_their_spec_and_triggered_from_elsewhere(
    make: Make, clock: FakeClock
) -> None:
    seen: list[dict[str, Any]] = []

    a = make(instance_id="a")

    @a.job("0 * * * *", id="tick", description="hourly", config={"n": 1}, overlap="queue_one",
           timezone="Europe/Paris")
    async def tick(ctx: RunContext) -> None:
        seen.append(dict(ctx.params))

    ops = make(instance_id="ops", timers=False)  # a control-only process: publishes nothing
    async with a, ops:
        jobs = await fleet_jobs(ops.store, ttl=TTL)
        assert list(jobs) == ["tick"]
        fj = jobs["tick"]
        assert fj.declared and [d.instance_id for d in fj.rows] == ["a"]
        d = fj.current
        assert d.source == "code" and d.team == "default"
        assert d.spec["kind"] == "handler" and d.spec["schedule"] == "0 * * * *"
        assert d.spec["zone"] == "Europe/Paris" and d.spec["overlap"] == "queue_one"
        assert d.spec["description"] == "hourly" and d.spec["config"] == {"n": 1}
        job = job_from_spec("tick", d.spec, team=d.team, source=d.source)
        assert job.schedule.expr == "0 * * * *" and str(job.schedule.tz) == "Europe/Paris"
        assert isinstance(job.handler, DeclaredElsewhere) and job.overlap.value == "queue_one"
        with pytest.raises(CronfleetError, match="declared by another process"):
            job.handler()

        got = await remote_trigger(ops.store, "tick", by="alice", ttl=TTL,
                                   params={"k": "v"}, timeout=20)
        assert got.taken_by == "a" and got.run_id is not None and got.error is None
        await settle(a)
        run = await ops.get_run_async(got.run_id)
        assert run is not None and run.status.value == "succeeded"
        assert run.params == {"k": "v"} and run.instance_id == "a"
        assert "Manual run requested by alice" in run.logs[0]
        assert seen == [{"k": "v"}]

        # paused: refused without force, run and marked forced with it
        await reg(ops).set_override("tick", False, by="bob", note=None, until=None)
        with pytest.raises(RemoteRefused) as refused:
            await remote_trigger(ops.store, "tick", by="alice", ttl=TTL, timeout=20)
        assert refused.value.code == "JOB_PAUSED" and refused.value.instance_id == "a"
        assert "paused (by bob" in str(refused.value)
        got = await remote_trigger(ops.store, "tick", by="alice", ttl=TTL, force=True,
                                   timeout=20)
        await settle(a)
        run = await ops.get_run_async(got.run_id or 0)
        assert run is not None and run.forced_by == "alice"

        with pytest.raises(NotDeclared, match="no instance of the fleet ever declared"):
            await remote_trigger(ops.store, "nope", by="alice", ttl=TTL)
    # "a" stopped: its rows are kept, shown as no longer live
    await ops.store.open()
    try:
        jobs = await fleet_jobs(ops.store, ttl=TTL)
        assert not jobs["tick"].declared
        with pytest.raises(NotDeclared, match=r"declared before by a, no longer live"):
            await remote_trigger(ops.store, "tick", by="alice", ttl=TTL)
    finally:
        await ops.store.close()


async def test_an_untaken_request_is_withdrawn_at_the_timeout(make: Make) -> None:
    a = make(instance_id="a")
    a.job("0 * * * *", id="tick")(lambda: None)
    async with a:
        a.registry.store = None  # "a" stops taking requests (still live, still declaring)
        for t in list(a._tasks):
            if "request_loop" in repr(t.get_coro()):
                t.cancel()
        await asyncio.sleep(0)
        with pytest.raises(RemoteTimeout, match="withdrawn: no live instance took it") as e:
            await remote_trigger(a.store, "tick", by="x", ttl=TTL, timeout=0.3)
        got = await reg(a).get_request(e.value.request_id)
        assert got is not None and got.taken_by is None and got.error is not None


async def test_changes_are_published_at_the_next_heartbeat_and_touched_periodically(
    make: Make, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    a = make(instance_id="a", instance_ttl=TTL)
    a.job("0 * * * *", id="tick")(lambda: None)
    b = make(instance_id="b", instance_ttl=TTL)
    b.job("*/5 * * * *", id="tick")(lambda: None)  # the same id, another schedule
    caplog.set_level(logging.WARNING, "cronfleet")
    async with a, b:
        fj = (await fleet_jobs(a.store, ttl=TTL))["tick"]
        c = fj.conflict
        assert c is not None and c.fields == ["schedule"] and c.groups == [["a"], ["b"]]
        assert "job 'tick' is declared differently by a / b (fields: schedule)" in \
                caplog.text
        a.job("0 0 * * *", id="daily")(lambda: None)
        await _beats(a, clock, TTL / 5)
        rows = await reg(a).list_declared(ttl=TTL)
        assert sorted((d.job_id, d.instance_id) for d in rows) == [
            ("daily", "a"), ("tick", "a"), ("tick", "b")]
        seen = {d.instance_id: d.seen_at for d in rows if d.job_id == "tick"}
        await _beats(a, clock, TOUCH + 1)
        rows = await reg(a).list_declared(ttl=TTL)
        later = {d.instance_id: d.seen_at for d in rows if d.job_id == "tick"}
        assert later["a"] > seen["a"]  # type: ignore[operator]
        a.remove_job("daily")
        await _beats(a, clock, TTL / 5)
        assert [d.job_id for d in await reg(a).list_declared(ttl=TTL)
                if d.instance_id == "a"] == ["tick"]


async def _beats(s: Scheduler, clock: FakeClock, seconds: float) -> None:
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(min(1.0, end - clock.now()))
        await settle(s)
    for _ in range(20):
        await asyncio.sleep(0)
    await settle(s)

