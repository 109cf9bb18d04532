"""The job registry and remote trigger in the runtime (#14): each scheduler publishes the
jobs it declares, another process triggers one through the store, a conflict is named."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, RunContext, Scheduler
from cronfleet.errors import CronfleetError, NotDeclared, RemoteRefused, RemoteTimeout
from cronfleet.runtime.registry import (
    TOUCH,
    DeclaredElsewhere,
    fleet_jobs,
    job_from_spec,
    remote_trigger,
)
from cronfleet.store.base import RegistryStore

from .conftest import STORE_KINDS, settle

Make = Callable[..., Scheduler]
TTL = 15.0


def reg(s: Scheduler) -> RegistryStore:
    assert isinstance(s.store, RegistryStore)
    return s.store


@pytest.mark.parametrize("store_kind", STORE_KINDS)
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


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_backfill_answered_elsewhere_stops_on_its_instance(make: Make) -> None:
    """The instance running a remote backfill was judged lost (another process answered
    its request INSTANCE_LOST): at its next progress write it stops the backfill, so a
    stalled-but-alive taker does not keep running slots nobody follows."""
    from datetime import UTC, datetime

    from cronfleet.runtime.registry import lost_taker_error, remote_backfill

    a = make(instance_id="a")
    started = asyncio.Event()

    @a.job("0 * * * *", id="tick")
    async def tick(ctx: RunContext) -> None:
        started.set()
        await asyncio.sleep(0.3)

    start = datetime(2026, 1, 1, tzinfo=UTC)
    async with a:
        req = await remote_backfill(a.store, "tick", start, start.replace(hour=23), by="ops",
                                    ttl=TTL, rate=None, timeout=20)
        assert req.id is not None and req.taken_by == "a"
        await asyncio.wait_for(started.wait(), 10)
        bf = a.registry.backfills[req.id]
        assert await reg(a).answer_request(req.id, error=lost_taker_error(req))
        for _ in range(100):
            if bf.finished:
                break
            await asyncio.sleep(0.05)
        assert bf.finished and bf.cancelled and bf.done < 24
        got = await reg(a).get_request(req.id)
        assert got is not None and got.error is not None
        assert got.error.startswith("INSTANCE_LOST: instance a was lost while running")


async def test_an_untaken_request_is_withdrawn_at_the_timeout(make: Make) -> None:
    a = make(instance_id="a")
    a.job("0 * * * *", id="tick")(lambda: None)
    async with a:
        a.registry.store = None  # "a" stops taking requests (still live, still declaring)
        for t in list(a.life.tasks):
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


async def test_unchanged_jobs_are_not_rebuilt_at_each_heartbeat_and_a_replace_is_published(
    make: Make, clock: FakeClock
) -> None:
    # every job's spec and digest cost ~30 us on the event loop: rebuilt after a change
    # (add / replace / remove) only, not at every heartbeat (1,000 jobs: 30 ms every 3 s)
    a = make(instance_id="a", instance_ttl=TTL)
    a.job("0 * * * *", id="tick")(lambda: None)
    async with a:
        built: list[int] = []
        entries = a.registry.entries

        def counting(jobs: Any) -> Any:
            rows = entries(jobs)
            built.append(len(rows))
            return rows

        a.registry.entries = counting  # type: ignore[method-assign]
        await _beats(a, clock, 3 * TTL / 5)
        assert built == []
        await _beats(a, clock, TOUCH + 1)  # the periodic touch rebuilds nothing either
        assert built == []
        a.replace_job(dataclasses.replace(a.get_job("tick"), description="changed"))
        await _beats(a, clock, TTL / 5)
        assert built and built[-1] == 1
        rows = await reg(a).list_declared(ttl=TTL)
        assert [(d.job_id, d.spec["description"]) for d in rows] == [("tick", "changed")]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_large_set_is_built_in_chunks_and_its_conflicts_are_not_read_back(
    make: Make, clock: FakeClock, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are built BUILD_CHUNK jobs at a time, the loop getting a turn in between
    (100,000 jobs in one go held it for seconds: late instants, missed heartbeats); above
    LARGE jobs the whole registry is not read back to log conflicts (3 x
    100,000 specs), which stay shown where they are looked for (fleet_jobs)."""
    import cronfleet.runtime.registry as registry

    monkeypatch.setattr(registry, "BUILD_CHUNK", 2)
    monkeypatch.setattr(registry, "LARGE", 3)
    a = make(instance_id="a", instance_ttl=TTL)
    b = make(instance_id="b", instance_ttl=TTL)
    for i in range(5):
        a.job("0 * * * *", id=f"j{i}")(lambda: None)
        b.job("*/5 * * * *" if i == 0 else "0 * * * *", id=f"j{i}")(lambda: None)
    caplog.set_level(logging.INFO, "cronfleet")
    chunks: list[tuple[str, int]] = []
    entries = registry.Registry.entries

    def counting(self: Any, jobs: Any) -> Any:
        rows = entries(self, jobs)
        chunks.append((self.instance_id, len(rows)))
        return rows

    monkeypatch.setattr(registry.Registry, "entries", counting)
    async with a, b:
        await _beats(b, clock, TTL / 5)
        rows = await reg(a).list_declared(ttl=TTL)
        assert sorted(d.job_id for d in rows if d.instance_id == "b") == \
            [f"j{i}" for i in range(5)]
        assert [n for who, n in chunks if who == "b"][:3] == [2, 2, 1]
        c = (await fleet_jobs(a.store, ttl=TTL))["j0"].conflict
        assert c is not None and c.fields == ["schedule"]
    assert "declared differently" not in caplog.text
    assert "declares 5 jobs (more than 3): conflicting declarations are not logged" in \
        caplog.text


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_large_set_is_published_after_the_timers_start_a_small_one_before(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set of more than LARGE jobs is published in the background: start() returns while
    the write is still held (100,000 rows took 1-3 s that the first instants waited for);
    a smaller one is in the registry when start() returns (a remote trigger right after a
    start finds it). One publish at a time: a heartbeat's waits for the first."""
    import cronfleet.runtime.registry as registry

    monkeypatch.setattr(registry, "LARGE", 3)
    small, large = make(instance_id="small"), make(instance_id="large")
    for i in range(3):
        small.job("0 * * * *", id=f"s{i}")(lambda: None)
    for i in range(4):
        large.job("0 * * * *", id=f"l{i}")(lambda: None)
    gate = asyncio.Event()
    store = reg(large)
    publish = type(store).publish_jobs
    writes: list[str] = []

    async def held(self: Any, instance_id: str, jobs: Any) -> None:
        if instance_id == "large":
            await gate.wait()
        writes.append(instance_id)
        await publish(self, instance_id, jobs)

    monkeypatch.setattr(type(store), "publish_jobs", held)
    async with small:
        assert writes == ["small"]
        assert {d.job_id for d in await reg(small).list_declared(ttl=TTL)} == {"s0", "s1", "s2"}
    async with large:
        assert large.running and writes == ["small"]  # started, its publish still held
        assert not [d for d in await store.list_declared(ttl=TTL) if d.instance_id == "large"]
        second = asyncio.ensure_future(large.registry.sync())
        await asyncio.sleep(0.05)
        assert writes == ["small"]  # waits for the first publish, not beside it
        gate.set()
        await second
        assert writes == ["small", "large"]  # the second found nothing left to write
        rows = [d for d in await store.list_declared(ttl=TTL) if d.instance_id == "large"]
        assert sorted(d.job_id for d in rows) == ["l0", "l1", "l2", "l3"]


async def _beats(s: Scheduler, clock: FakeClock, seconds: float) -> None:
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(min(1.0, end - clock.now()))
        await settle(s)
    for _ in range(20):
        await asyncio.sleep(0)
    await settle(s)



# -- cancel and REPLACE -----------------------------------------------------------------------


async def _running(s: Scheduler, job_id: str, timeout: float = 10.0) -> int:
    """The id of ``job_id``'s run once it executes in ``s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        for key, active in s.runner.active.items():
            if active.job.id == job_id and key > 0:
                return key
        assert loop.time() < end, f"{job_id} never ran"
        await asyncio.sleep(0.01)


async def _ended(s: Scheduler, run_id: int, timeout: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        await s.writer.flushed()
        run = await s.store.get_run(run_id)
        if run is not None and run.status.finished:
            return run
        assert loop.time() < end, f"run {run_id} never ended"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_cancel_reaches_an_async_run_in_another_process(make: Make) -> None:
    release = asyncio.Event()
    a = make(instance_id="a")

    @a.job("0 * * * *", id="long")
    async def long(ctx: RunContext) -> None:
        await release.wait()

    ops = make(instance_id="ops", timers=False)
    async with a, ops:
        got = await remote_trigger(ops.store, "long", by="alice", ttl=TTL, timeout=20)
        assert got.run_id is not None
        await _running(a, "long")
        how = await ops.cancel_async(got.run_id, by="bob", why="stuck on a lock")
        assert how == "cancel taken by instance a"
        run = await _ended(a, got.run_id)
        assert run.status.value == "cancelled" and run.reason == "cancelled"
        assert run.error == "cancelled by bob: stuck on a lock"
        assert any("Cancel requested by bob: stuck on a lock" in line for line in run.logs)
        assert a.stats.outcomes.get("cancelled") == 1
        with pytest.raises(RemoteRefused, match="has already ended") as ended:
            await ops.cancel_async(got.run_id, by="bob")
        assert ended.value.code == "RUN_ENDED"
        with pytest.raises(RemoteRefused, match="no run 999"):
            await ops.cancel_async(999, by="bob")


async def test_a_sync_run_is_recorded_cancelled_when_it_returns(make: Make) -> None:
    import threading

    go = threading.Event()
    a = make(instance_id="a")

    @a.job("0 * * * *", id="sync")
    def sync(ctx: RunContext) -> str:
        go.wait(10)
        return "done"

    async with a:
        run = await a.trigger_async("sync", by="alice")
        assert run.id is not None
        await _running(a, "sync")
        how = await a.cancel_async(run.id, by="bob", why="too slow")
        assert "cannot be stopped" in how
        assert run.id in a.runner.active  # still running: a thread cannot be killed
        go.set()
        ended = await _ended(a, run.id)
        assert ended.status.value == "cancelled" and ended.result == "done"
        assert ended.error == "cancelled by bob: too slow"
        assert any("ended (succeeded) after the cancel request" in x for x in ended.logs)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_replace_cancels_the_run_of_another_process_and_runs_the_new_slot(
    make: Make, clock: FakeClock
) -> None:
    seen: list[tuple[str, bool]] = []
    release = asyncio.Event()

    def declare(s: Scheduler, name: str, schedule: str) -> None:
        @s.job(schedule, id="rep", overlap="replace")
        async def rep(ctx: RunContext) -> None:
            seen.append((name, ctx.manual))
            await release.wait()

    a = make(instance_id="a", instance_ttl="1h")  # the clock jumps a minute: no one is lost
    declare(a, "a", "0 0 1 1 *")  # fires in no minute of this test: a only runs it by hand
    b = make(instance_id="b", instance_ttl="1h")
    declare(b, "b", "* * * * *")
    async with a, b:
        held = await a.trigger_async("rep", by="alice")  # holds the lease, on a
        assert held.id is not None
        await _running(a, "rep")
        clock.advance(60)  # b's slot is due: the lease is busy, b replaces a's run
        for _ in range(5):  # (b plans its own declaration: a declares the job differently)
            await asyncio.sleep(0.02)
            clock.advance(0.1)
        cancelled = await _ended(a, held.id, timeout=20)
        assert cancelled.status.value == "cancelled"
        assert cancelled.error == "cancelled by b (overlap replace): replaced by a newer " \
            f"slot ({_slot_text(clock)})"
        new = await _running(b, "rep", timeout=20)
        for _ in range(200):  # registered as running before its handler's first step
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        assert seen == [("a", True), ("b", False)]
        release.set()
        run = await _ended(b, new)
        assert run.status.value == "succeeded" and run.instance_id == "b"
        assert run.slot.timestamp() == _slot(clock)


def _slot(clock: FakeClock) -> float:
    return clock.now() // 60 * 60


def _slot_text(clock: FakeClock) -> str:
    from cronfleet.clock import from_ts

    return from_ts(_slot(clock)).isoformat()


async def test_cancel_stops_a_command_jobs_process_group(make: Make, tmp_path: Any) -> None:
    import os

    from cronfleet.jobs.command import CommandJob

    pidfile = tmp_path / "pid"
    a = make(instance_id="a")
    a.add_job(CommandJob(f"echo $$ > {pidfile}; exec sleep 60", shell=True,
                         kill_grace=2).job("@daily", id="cmd"))
    ops = make(instance_id="ops", timers=False)
    async with a, ops:
        got = await remote_trigger(ops.store, "cmd", by="alice", ttl=TTL, timeout=20)
        assert got.run_id is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + 20
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert loop.time() < end, "the command never started"
            await asyncio.sleep(0.05)
        pid = int(pidfile.read_text())
        os.kill(pid, 0)  # running
        await ops.cancel_async(got.run_id, by="bob", why="wrong dump")
        run = await _ended(a, got.run_id, timeout=20)
        assert run.status.value == "cancelled" and run.error == "cancelled by bob: wrong dump"
        with pytest.raises(ProcessLookupError):  # SIGTERM to its group, and reaped
            os.kill(pid, 0)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_api_jobs_stay_out_of_the_registry_and_are_triggered_by_their_definition(
    make: Make, clock: FakeClock
) -> None:
    """A job created over the API (source ``api``) is not published: the registry holds
    the code job only, and rows of API jobs an earlier release wrote are ignored. Another
    process triggers the API job through the store once its definition is live in
    ``job_defs``; the instance holding it takes the request and runs it once."""
    from cronfleet.model import Job
    from cronfleet.spec import API_SOURCE
    from cronfleet.store.base import Declared
    from cronfleet.store.factory import open_api_store

    seen: list[str] = []
    a = make(instance_id="a")
    a.job("0 * * * *", id="tick")(lambda: None)
    a.add_job(Job.create("0 3 * * *", lambda ctx: seen.append(ctx.job_id), id="hook",
                         source=API_SOURCE))
    ops = make(instance_id="ops", timers=False)
    async with a, ops:
        api = open_api_store(ops.store)
        # an earlier release published its API jobs: a stale row of another instance
        await reg(ops).publish_jobs("old", [Declared("stale", "", team="default",
                                                     source=API_SOURCE, digest="d", spec={})])
        a.add_job(Job.create("@daily", lambda: None, id="hook2", source=API_SOURCE))
        await a.registry.sync()
        assert list(await fleet_jobs(ops.store, ttl=TTL)) == ["tick"]
        rows = await reg(ops).list_declared(ttl=TTL)
        assert {d.job_id for d in rows if d.instance_id == "a"} == {"tick"}

        # not in the registry, no definition: nobody is asked
        with pytest.raises(NotDeclared, match="no instance of the fleet ever declared"):
            await remote_trigger(ops.store, "hook", by="alice", ttl=TTL, api_store=api)
        await api.create_job_def("hook", "default", {"id": "hook", "schedule": "0 3 * * *",
                                                     "http": {"url": "https://x.example"}},
                                 "alice")
        with pytest.raises(NotDeclared):  # the definition is read only when asked to
            await remote_trigger(ops.store, "hook", by="alice", ttl=TTL)
        got = await remote_trigger(ops.store, "hook", by="alice", ttl=TTL, timeout=20,
                                   api_store=api)
        assert got.taken_by == "a" and got.error is None and got.run_id is not None
        await settle(a)
        run = await ops.get_run_async(got.run_id)
        assert run is not None and run.status.value == "succeeded" and run.instance_id == "a"
        assert seen == ["hook"]

        # deleted: its tombstone is not a live definition
        assert await api.delete_job_def("hook", "default", "alice")
        with pytest.raises(NotDeclared):
            await remote_trigger(ops.store, "hook", by="alice", ttl=TTL, api_store=api)
        assert seen == ["hook"]
    # no live instance: an API job's request is not sent, and the error says why
    await ops.store.open()
    try:
        api = open_api_store(ops.store)
        await api.create_job_def("hook3", "default", {"id": "hook3", "schedule": "@daily",
                                                      "http": {"url": "https://x.example"}},
                                 "alice")
        with pytest.raises(NotDeclared, match="stored over the API, and no process with"):
            await remote_trigger(ops.store, "hook3", by="alice", ttl=TTL, api_store=api)
    finally:
        await ops.store.close()
