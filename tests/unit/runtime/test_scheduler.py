"""The runtime's rules, one by one, with an injected clock on the memory store; the key
scenarios on SQLite too (``STORE_KINDS``)."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet import (
    AlreadyExecuting,
    FakeClock,
    Locking,
    Missed,
    Overlap,
    RunContext,
    RunStatus,
    Scheduler,
    StoreUnavailable,
    TriggeredBy,
)
from cronfleet.clock import from_ts
from cronfleet.store.base import Dispatch

from .conftest import STORE_KINDS, T0, Recorder, advance, settle

Make = Callable[..., Scheduler]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_fires_each_slot_once_with_context(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="tick", config={"top": 100})(rec)
    await s.start()
    running.append(s)
    await advance(clock, 180, s, step=30)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 60, T0 + 120, T0 + 180]
    ctx: RunContext = rec.calls[0]
    assert ctx.job_id == "tick" and ctx.config == {"top": 100}
    assert ctx.triggered_by is TriggeredBy.SCHEDULE and not ctx.is_catchup and not ctx.manual
    assert ctx.instance_id == "test-1" and ctx.attempt == 1
    tokens = [c.fencing_token for c in rec.calls]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    runs = await s.runs_async("tick")
    assert [r.status for r in runs] == [RunStatus.SUCCEEDED] * 3
    assert [r.slot.timestamp() for r in runs] == [T0 + 180, T0 + 120, T0 + 60]  # newest first
    assert runs[0].result == "ok" and runs[0].lateness is not None and runs[0].lateness >= 0
    assert runs[0].instance_id == "test-1" and runs[0].fencing_token == tokens[-1]


async def test_sync_handler_failure_and_logs(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    threads: list[str] = []

    @s.job("60s", id="boom")
    def boom(ctx: RunContext) -> None:
        threads.append(threading.current_thread().name)
        ctx.log("about to fail")
        raise ValueError("bad input row 7")

    await s.start()
    running.append(s)
    await advance(clock, 60, s, step=60)
    [run] = await s.runs_async("boom")
    assert run.status is RunStatus.FAILED and not run.success
    assert run.error == "ValueError: bad input row 7"
    assert run.logs[0] == "about to fail"
    assert "Traceback" in run.logs[1] and "bad input row 7" in run.logs[1]
    assert threads and threads[0].startswith("cronfleet-job")


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_instances_sharing_a_store_fire_each_slot_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    calls: list[tuple[str, float]] = []

    def build(name: str) -> Scheduler:
        s = make(instance_id=name)
        for j in range(20):

            async def handler(ctx: RunContext, j: int = j) -> None:
                calls.append((ctx.job_id, ctx.slot.timestamp()))

            s.job("10s", id=f"job-{j}")(handler)
        return s

    a, b, c = build("a"), build("b"), build("c")
    for s in (a, b, c):
        await s.start()
        running.append(s)
    await advance(clock, 60, a, b, c, step=5)
    expected = {(f"job-{j}", T0 + k * 10) for j in range(20) for k in range(1, 7)}
    assert len(calls) == len(expected)
    assert set(calls) == expected
    runs = await a.runs_async(limit=1000)
    assert len(runs) == len(expected)
    assert {r.instance_id for r in runs} <= {"a", "b", "c"}


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_burst_is_claimed_in_one_batch(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    for j in range(300):
        s.job("60s", id=f"j{j}")(rec)
    calls: list[int] = []
    real = s.store.dispatch

    async def spy(items: list[Dispatch], instance: str) -> Any:
        calls.append(len(items))
        return await real(items, instance)

    s.store.dispatch = spy  # type: ignore[method-assign]
    await s.start()
    running.append(s)
    await advance(clock, 60, s, step=60)
    assert len(rec.calls) == 300
    assert calls == [300]


async def test_pause_resume_and_clear(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p")(rec)
    await s.start()
    running.append(s)
    await s.pause_async("p", by="ops", note="vendor outage")
    await advance(clock, 120, s, step=60)
    assert rec.calls == []
    skipped = await s.runs_async("p")
    assert [r.reason for r in skipped] == ["paused", "paused"]
    assert skipped[0].logs == ["Skipped: the job is paused by ops (vendor outage)"]
    state = await s.state_async("p")
    assert state.enabled_override is False and state.override_by == "ops"
    await s.resume_async("p", by="ops")
    await advance(clock, 60, s, step=60)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 180]
    await s.clear_override_async("p")
    assert (await s.state_async("p")).enabled_override is None
    await advance(clock, 60, s, step=60)
    assert len(rec.calls) == 2


async def test_timed_pause_ends_by_itself(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p")(rec)
    await s.start()
    running.append(s)
    await s.pause_async("p", by="ops", until="150s")
    await advance(clock, 240, s, step=60)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 180, T0 + 240]
    reasons = [r.reason for r in await s.runs_async("p")]
    assert reasons.count("paused") == 2


async def test_declared_disabled_and_forced_on(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="off", enabled=False)(rec)
    await s.start()
    running.append(s)
    await advance(clock, 60, s, step=60)
    assert rec.calls == []
    assert [r.reason for r in await s.runs_async("off")] == ["disabled"]
    await s.resume_async("off", by="ops")
    await advance(clock, 60, s, step=60)
    assert len(rec.calls) == 1


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_pause_from_another_process_is_honoured(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(instance_id="worker")
    rec = Recorder()
    s.job("60s", id="p")(rec)
    await s.start()
    running.append(s)
    # an operator's script: same store, scheduler not running
    ops = make(instance_id="ops-cli")
    ops.job("60s", id="p")(rec)
    await ops.pause_async("p", by="ops")
    await advance(clock, 60, s, step=60)
    assert rec.calls == []
    await ops.resume_async("p", by="ops")
    await advance(clock, 60, s, step=60)
    assert len(rec.calls) == 1


async def test_override_unreadable_fails_open(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p")(rec)
    await s.start()
    running.append(s)

    async def broken(job_ids: Any) -> Any:
        raise StoreUnavailable("simulated outage")

    s.store.read_states = broken  # type: ignore[method-assign]
    await advance(clock, 60, s, step=60)
    assert len(rec.calls) == 1


async def test_override_not_recorded_raises(make: Make) -> None:
    s = make()
    s.job("60s", id="p")(Recorder())

    async def broken(*a: Any, **kw: Any) -> Any:
        raise StoreUnavailable("simulated outage")

    s.store.set_override = broken  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await s.pause_async("p", by="ops")


async def test_unknown_job_is_a_clear_error(make: Make) -> None:
    s = make()
    with pytest.raises(KeyError, match="no job with id 'nope'"):
        await s.pause_async("nope")
    with pytest.raises(KeyError):
        await s.trigger_async("nope")


# -- catch-up ---------------------------------------------------------------------------


async def _downtime(
    make: Make, clock: FakeClock, minutes: float, **job: Any
) -> tuple[Scheduler, Recorder]:
    first = make()
    first.job("*/5 * * * *", id="c", **job)(Recorder())
    await first.start()
    await advance(clock, 300, first, step=300)  # T0+5m runs
    await first.stop()
    clock.advance(minutes * 60)
    second = make()
    rec = Recorder()
    second.job("*/5 * * * *", id="c", **job)(rec)
    await second.start()
    await settle(second)
    return second, rec


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_catch_up_run_once_runs_the_most_recent_missed(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await _downtime(make, clock, 22)  # down from T0+5m to T0+27m
    running.append(s)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 25 * 60]
    ctx = rec.calls[0]
    assert ctx.is_catchup and ctx.triggered_by is TriggeredBy.CATCHUP
    runs = await s.runs_async("c")
    ran = [r for r in runs if r.status is RunStatus.SUCCEEDED and r.is_catchup]
    assert ran[0].logs[0] == (
        f"⏰ Catch-up run for missed slot {from_ts(T0 + 1500).strftime('%Y-%m-%dT%H:%M:%S')}"
        ".000Z (120s late)"
    )
    missed = sorted(r.slot.timestamp() for r in runs if r.reason == "missed")
    assert missed == [T0 + m * 60 for m in (10, 15, 20)]
    # and the schedule goes on normally
    await advance(clock, 180, s, step=60)
    assert [c.slot.timestamp() for c in rec.calls][-1] == T0 + 30 * 60


async def test_catch_up_skip_records_every_missed_slot(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await _downtime(make, clock, 22, missed=Missed.SKIP)
    running.append(s)
    assert rec.calls == []
    missed = sorted(r.slot.timestamp() for r in await s.runs_async("c") if r.reason == "missed")
    assert missed == [T0 + m * 60 for m in (10, 15, 20, 25)]


async def test_catch_up_run_all_in_order(make: Make, clock: FakeClock, running: list) -> None:
    s, rec = await _downtime(make, clock, 22, missed=Missed.RUN_ALL)
    running.append(s)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + m * 60 for m in (10, 15, 20, 25)]
    assert all(c.is_catchup for c in rec.calls)


async def test_catch_up_window_limits_what_runs(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await _downtime(make, clock, 22, missed=Missed.RUN_ALL, catch_up_window="12m")
    running.append(s)
    # now = T0+27m; the window reaches back to T0+15m
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 15 * 60, T0 + 20 * 60, T0 + 25 * 60]
    missed = sorted(r.slot.timestamp() for r in await s.runs_async("c") if r.reason == "missed")
    assert missed == [T0 + 10 * 60]


async def test_catch_up_window_zero_disables(make: Make, clock: FakeClock, running: list) -> None:
    s, rec = await _downtime(make, clock, 22, catch_up_window=0)
    running.append(s)
    assert rec.calls == []
    assert len([r for r in await s.runs_async("c") if r.reason == "missed"]) == 4


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_catch_up_never_reruns_a_slot_run_elsewhere(
    make: Make, clock: FakeClock, running: list
) -> None:
    other = make(instance_id="other")
    rec_other = Recorder()
    other.job("*/5 * * * *", id="c")(rec_other)
    await other.start()
    running.append(other)
    await advance(clock, 27 * 60, other, step=60)
    late = make(instance_id="late")
    rec_late = Recorder()
    late.job("*/5 * * * *", id="c")(rec_late)
    await late.start()
    running.append(late)
    await settle(late, other)
    assert rec_late.calls == []
    assert len(rec_other.calls) == 5
    assert not [r for r in await late.runs_async("c") if r.reason == "missed"]


async def test_new_job_does_not_catch_up_before_it_existed(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("@hourly", id="new", missed=Missed.RUN_ALL)(rec)
    clock.advance(30 * 60)
    await s.start()
    running.append(s)
    await settle(s)
    assert rec.calls == []
    assert await s.runs_async("new") == []


async def test_stalled_loop_is_caught_up(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="c")(rec)
    await s.start()
    running.append(s)
    await advance(clock, 60, s, step=60)
    clock.advance(10 * 60 + 30)  # e.g. a laptop sleep: the clock jumps
    await settle(s)
    slots = [c.slot.timestamp() for c in rec.calls]
    assert slots == [T0 + 60, T0 + 660]
    assert rec.calls[1].is_catchup


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_catch_up_across_midnight_and_dst(
    make: Make, clock: FakeClock, running: list
) -> None:
    # Daily 02:30 Paris. Last run Saturday 2026-03-28 02:30; down over the spring-forward
    # night (Sunday 02:30 does not exist: it fires at 03:00) until Monday 10:00.
    clock.set(datetime(2026, 3, 28, 1, 0, tzinfo=UTC))
    first = make(instance_id="a")
    first.job("30 2 * * *", id="d", timezone="Europe/Paris")(Recorder())
    await first.start()
    await advance(first.clock, 1800, first, step=900)  # reaches 01:30Z = 02:30 Paris
    await first.stop()
    clock.set(datetime(2026, 3, 30, 8, 0, tzinfo=UTC))  # Monday 10:00 Paris
    second = make(instance_id="b")
    rec = Recorder()
    second.job(
        "30 2 * * *",
        id="d",
        timezone="Europe/Paris",
        missed=Missed.RUN_ALL,
        catch_up_window="3d",
    )(rec)
    await second.start()
    running.append(second)
    await settle(second)
    got = [c.slot.isoformat() for c in rec.calls]
    assert got == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]


# -- leases and overlap ---------------------------------------------------------------


class Blocking:
    """An async handler that runs until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[RunContext] = []

    async def __call__(self, ctx: RunContext) -> None:
        self.started.append(ctx)
        await self.release.wait()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_overlap_skip_records_already_executing(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Blocking()
    s.job("60s", id="long")(h)
    await s.start()
    running.append(s)
    clock.advance(60)
    for _ in range(1000):  # the first run started (fixed sleeps were too short on a busy box:
        if h.started:     # the slot was still waiting when the next came, and shed)
            break
        await asyncio.sleep(0.01)
    assert len(h.started) == 1
    clock.advance(60)
    skips: list[Any] = []
    for _ in range(1000):  # the second slot's skip is written
        skips = [r for r in await s.runs_async("long") if r.status is RunStatus.SKIPPED]
        if skips:
            break
        await asyncio.sleep(0.01)
    d = skips[0].to_dict()
    assert d["success"] is True
    assert d["result"] == {"skipped": True, "reason": "already_executing"}
    assert d["logs"] == ["Skipped: the previous run has not finished (lease held by test-1)"]
    h.release.set()
    await settle(s)
    assert len(h.started) == 1


async def handled(s: Scheduler, job_id: str, timeout: float = 10.0) -> None:
    """Wait (real time) until ``s``'s loop has handled ``job_id``'s slot due at the fake
    clock's now: its next slot is queued after it. A fixed real-time sleep let a loaded
    box handle the slot only after the clock had moved on (judged late: ``overloaded``)."""
    end = time.monotonic() + timeout
    while s.due.next.get(job_id, math.inf) <= s.clock.now():
        assert time.monotonic() < end, f"{job_id}: the slot due now was not handled"
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.01)  # the handlers it launched get their first turn


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_overlap_queue_one_runs_right_after(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Blocking()
    s.job("60s", id="q", overlap=Overlap.QUEUE_ONE)(h)
    await s.start()
    running.append(s)
    for _ in range(3):  # slot 1 runs, slot 2 waits, slot 3 is skipped (queue holds one)
        clock.advance(60)
        await handled(s, "q")
    assert len(h.started) == 1
    h.release.set()
    await settle(s)
    assert [c.slot.timestamp() for c in h.started] == [T0 + 60, T0 + 120]
    runs = await s.runs_async("q")
    assert sorted((r.slot.timestamp(), r.status.value) for r in runs) == [
        (T0 + 60, "succeeded"),
        (T0 + 120, "succeeded"),
        (T0 + 180, "skipped"),
    ]


async def test_overlap_allow_runs_concurrently(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    h = Blocking()
    s.job("60s", id="a", overlap=Overlap.ALLOW)(h)
    await s.start()
    running.append(s)
    for _ in range(3):
        clock.advance(60)
        await handled(s, "a")
    assert len(h.started) == 3
    h.release.set()
    await settle(s)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_manual_trigger_and_already_executing(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Blocking()
    s.job("@daily", id="m")(h)
    await s.start()
    running.append(s)
    run = await s.trigger_async("m", by="alice")
    await asyncio.sleep(0.05)
    assert h.started[0].manual and h.started[0].triggered_by is TriggeredBy.MANUAL
    assert h.started[0].fencing_token == run.fencing_token is not None
    with pytest.raises(AlreadyExecuting) as err:
        await s.trigger_async("m", by="bob")
    assert err.value.holder == "test-1"
    body = err.value.to_dict()
    assert body["code"] == "CRON_JOB_ALREADY_EXECUTING"
    assert body["details"]["log"]["result"] == {"skipped": True, "reason": "already_executing"}
    assert body["details"]["log"]["success"] is True
    h.release.set()
    await settle(s)
    runs = await s.runs_async("m")
    assert sorted(r.status.value for r in runs) == ["skipped", "succeeded"]
    assert all(r.manual for r in runs)


def test_sync_trigger_without_a_running_scheduler(make: Make) -> None:
    s = make()
    seen: list[RunContext] = []
    s.job("@daily", id="m")(lambda ctx: seen.append(ctx) or 42)
    run = s.trigger("m", by="script")
    assert run.status is RunStatus.SUCCEEDED and run.result == 42
    assert seen[0].manual
    [stored] = s.runs("m")
    assert stored.status is RunStatus.SUCCEEDED and stored.result == 42
    assert stored.logs == ["Manual run requested by script"]
    s.pause("m", by="ops", note="n")
    assert s.state("m").enabled_override is False
    s.resume("m")
    s.clear_override("m")
    assert s.state("m").enabled_override is None


async def test_sync_control_from_the_loop_is_refused(make: Make, running: list) -> None:
    s = make()
    s.job("@daily", id="m")(Recorder())
    await s.start()
    running.append(s)
    with pytest.raises(RuntimeError, match="async variant"):
        s.pause("m")


async def test_async_timeout_is_recorded(make: Make, clock: FakeClock, running: list) -> None:
    s = make()

    @s.job("60s", id="slow", timeout=0.05)
    async def slow(ctx: RunContext) -> None:
        await asyncio.sleep(5)

    await s.start()
    running.append(s)
    clock.advance(60)
    await asyncio.sleep(0.2)
    await settle(s)
    [run] = await s.runs_async("slow")
    assert run.status is RunStatus.TIMED_OUT and run.error == "timed out after 0.05s"
    assert (await s.state_async("slow")).lease_holder is None


async def test_thread_timeout_is_abandoned(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    gate = threading.Event()

    @s.job("60s", id="slow", timeout=0.05)
    def slow(ctx: RunContext) -> None:
        gate.wait(5)

    await s.start()
    running.append(s)
    clock.advance(60)
    await asyncio.sleep(0.3)
    await settle(s)
    gate.set()
    [run] = await s.runs_async("slow")
    assert run.status is RunStatus.TIMED_OUT
    assert "abandoned" in run.logs[-1]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_crashed_holder_is_marked_interrupted_and_recovered(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(instance_id="survivor", instance_ttl=15)  # the clock moves 10 s a step
    rec = Recorder()
    s.job("@daily", id="r", timeout=60, recover=True)(rec)
    s.job("@daily", id="n", timeout=60)(Recorder())
    await s.store.open()
    await s.store.ensure_jobs(["r", "n"])
    # a process that claimed both slots and died
    dead = [
        Dispatch(job_id=j, slot=T0, triggered_by=TriggeredBy.SCHEDULE, lease=True, hold=90)
        for j in ("r", "n")
    ]
    results = await s.store.dispatch(dead, "dead:1:x")
    await s.store.close()
    await s.start()
    running.append(s)
    await advance(clock, 60, s, step=10)
    assert rec.calls == []  # the lease is still live
    await advance(clock, 40, s, step=10)  # lease (90 s) expired; reaper runs
    runs = {r.id: r for r in await s.runs_async(limit=50)}
    for res in results:
        assert runs[res.run.id].status is RunStatus.INTERRUPTED  # type: ignore[union-attr]
    assert len(rec.calls) == 1
    ctx = rec.calls[0]
    assert ctx.is_recovery and ctx.slot.timestamp() == T0
    assert ctx.fencing_token > results[0].token  # type: ignore[operator]
    assert [r.job_id for r in runs.values() if r.is_recovery] == ["r"]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_jitter_delays_the_start_not_the_slot(
    make: Make, clock: FakeClock, running: list
) -> None:
    from cronfleet.runtime.planning import jitter_delay

    s = make()
    rec = Recorder()
    s.job("@hourly", id="j", jitter="30s")(rec)
    await s.start()
    running.append(s)
    delay = jitter_delay("j", T0 + 3600, 30)
    assert 0 <= delay <= 30
    clock.advance(3600)
    await asyncio.sleep(0.05)
    assert rec.calls == []
    await advance(clock, 31, s, step=0.5)
    assert len(rec.calls) == 1 and rec.calls[0].slot.timestamp() == T0 + 3600
    [run] = await s.runs_async("j")
    assert run.lateness == pytest.approx(delay, abs=0.6)


async def test_node_local_runs_in_every_process(
    make: Make, clock: FakeClock, running: list
) -> None:
    calls: list[str] = []
    pair = []
    for name in ("a", "b"):
        s = make(instance_id=name)

        async def h(ctx: RunContext) -> None:
            calls.append(ctx.instance_id)

        s.job("60s", id="local", locking=Locking.NODE_LOCAL)(h)
        await s.start()
        running.append(s)
        pair.append(s)
    await advance(clock, 60, *pair, step=60)
    assert sorted(calls) == ["a", "b"]


class FlakyDispatch:
    def __init__(self, s: Scheduler) -> None:
        self.real = s.store.dispatch
        self.down = True

    async def __call__(self, items: Any, instance: str) -> Any:
        if self.down:
            raise StoreUnavailable("simulated outage")
        return await self.real(items, instance)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_locking_when_store_is_unavailable(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    prefer, require = Recorder(), Recorder()
    s.job("60s", id="prefer", locking=Locking.PREFER_GLOBAL)(prefer)
    s.job("60s", id="require", locking=Locking.REQUIRE_GLOBAL)(require)
    await s.start()
    running.append(s)
    flaky = FlakyDispatch(s)
    s.store.dispatch = flaky  # type: ignore[method-assign]

    async def confirmed() -> bool:  # a fresh connection fails too: a real outage
        return True

    s.store.confirm_outage = confirmed  # type: ignore[attr-defined]
    clock.advance(60)  # not advance(): the run's row waits for a claim the store refuses
    for _ in range(100):
        if prefer.calls:
            break
        await asyncio.sleep(0.02)
    assert len(prefer.calls) == 1 and prefer.calls[0].fencing_token is None
    assert require.calls == []
    flaky.down = False
    await advance(clock, 60, s, step=60)
    skipped = [r for r in await s.runs_async("require") if r.status is RunStatus.SKIPPED]
    assert [(r.reason, r.slot.timestamp()) for r in skipped] == [("store_unavailable", T0 + 60)]
    assert len(require.calls) == 1
    # the run made without a claim is in the ledger too, saying so; its row was written
    # under a claim of the slot once the store answered (one final row per slot)
    offline = [r for r in await s.runs_async("prefer") if r.slot.timestamp() == T0 + 60]
    assert len(offline) == 1 and offline[0].fencing_token is not None
    assert offline[0].status is RunStatus.SUCCEEDED
    assert "Ran without a claim" in offline[0].logs[0]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_shutdown_interrupts_after_grace_and_releases(make: Make, clock: FakeClock) -> None:
    s = make(shutdown_grace=0.1)
    h = Blocking()
    s.job("60s", id="stuck")(h)
    await s.start()
    clock.advance(60)
    for _ in range(200):  # the slot claimed and its handler started (a loaded machine)
        if h.started:
            break
        await asyncio.sleep(0.01)
    assert len(h.started) == 1
    await s.stop()
    [run] = await s.runs_async("stuck")
    assert run.status is RunStatus.INTERRUPTED and run.reason == "shutdown"
    assert (await s.state_async("stuck")).lease_holder is None


async def test_graceful_shutdown_lets_short_runs_finish(make: Make, clock: FakeClock) -> None:
    s = make(shutdown_grace=5)

    @s.job("60s", id="short")
    async def short(ctx: RunContext) -> str:
        await asyncio.sleep(0.1)
        return "done"

    await s.start()
    clock.advance(60)
    await asyncio.sleep(0.02)
    await s.stop()
    [run] = await s.runs_async("short")
    assert run.status is RunStatus.SUCCEEDED and run.result == "done"


async def test_async_context_manager_runs_in_background(make: Make, clock: FakeClock) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="bg")(rec)
    async with s:
        assert s.running
        await advance(clock, 60, s, step=60)
    assert not s.running
    assert len(rec.calls) == 1


def test_duplicate_and_invalid_jobs_are_rejected(make: Make) -> None:
    s = make()
    s.job("60s", id="x")(Recorder())
    with pytest.raises(ValueError, match="declared twice"):
        s.job("60s", id="x")(Recorder())
    with pytest.raises(ValueError, match="job 'y': timeout"):
        s.job("60s", id="y", timeout="ten minutes")(Recorder())
    with pytest.raises(ValueError, match="job 'z': missed"):
        s.job("60s", id="z", missed="sometimes")(Recorder())
    with pytest.raises(ValueError, match="job 'w': schedule '61 \\* \\* \\* \\*'"):
        s.job("61 * * * *", id="w")(Recorder())
    with pytest.raises(ValueError, match="job id 'bad id'"):
        s.job("60s", id="bad id")(Recorder())


async def test_control_only_process_runs_no_timers(
    make: Make, clock: FakeClock, running: list
) -> None:
    worker, api = make(instance_id="worker"), make(instance_id="api", timers=False)
    w_rec, a_rec = Recorder(), Recorder()
    worker.job("60s", id="t")(w_rec)
    api.job("60s", id="t")(a_rec)
    for s in (worker, api):
        await s.start()
        running.append(s)
    await api.pause_async("t", by="api")
    await advance(clock, 60, worker, api, step=60)
    assert w_rec.calls == [] and a_rec.calls == []
    await api.resume_async("t", by="api")
    await advance(clock, 120, worker, api, step=60)
    assert len(w_rec.calls) == 2 and a_rec.calls == []


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_parallel_triggers_of_a_node_local_job_start_one_run(
    make: Make, running: list
) -> None:
    """200 triggers at once of a node-local job with overlap=skip: one run starts, every
    other trigger is refused (the "already running here" check and the count it reads
    used to be split by the store call, so up to 17 runs started together)."""
    s = make()
    gate = asyncio.Event()
    now_running = 0
    most = 0
    started = 0

    async def h(ctx: RunContext) -> None:
        nonlocal now_running, most, started
        started += 1
        now_running += 1
        most = max(most, now_running)
        await gate.wait()
        now_running -= 1

    s.job("1h", id="local", locking=Locking.NODE_LOCAL, overlap="skip")(h)
    await s.start()
    running.append(s)
    results = await asyncio.gather(
        *(s.trigger_async("local", by=f"t{i}") for i in range(200)), return_exceptions=True
    )
    for _ in range(20):
        await asyncio.sleep(0)
    accepted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, AlreadyExecuting)]
    assert len(accepted) == 1 and len(refused) == 199, [type(r) for r in results[:5]]
    assert started == 1 and most == 1
    gate.set()
    await s.wait_idle()
    assert await s.trigger_async("local", by="after")  # free again once it ended


def test_sync_trigger_of_a_failing_async_handler_keeps_its_own_traceback(
    tmp_path: Any,
) -> None:
    """The blocking trigger() outside any event loop: the stored traceback is the
    handler's, not chained to the "no running event loop" probe of the sync facade."""
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}")

    @s.job("1h", id="boom")
    async def boom(ctx: RunContext) -> None:
        raise ValueError("kaboom")

    run = s.trigger("boom")
    assert run.status is RunStatus.FAILED and run.error == "ValueError: kaboom"
    logs = "\n".join(run.logs)
    assert "ValueError: kaboom" in logs
    assert "no running event loop" not in logs and "During handling" not in logs


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_run_all_runs_every_missed_slot_of_many_jobs(
    make: Make, clock: FakeClock, running: list
) -> None:
    """20 RUN_ALL jobs, 30 s down: every missed slot runs, oldest first — none is skipped
    as 'already executing' against the process's own lease (the next slot of a sequence
    used to be claimed before the previous run's lease release was written)."""
    ids = [f"all-{i}" for i in range(20)]
    first = make()
    for job_id in ids:
        first.job("5s", id=job_id, missed=Missed.RUN_ALL)(Recorder())
    await first.start()
    await advance(clock, 5, first, step=5)
    await first.stop()
    clock.advance(30)
    second = make()
    calls: dict[str, list[float]] = {job_id: [] for job_id in ids}

    async def h(ctx: RunContext) -> None:
        calls[ctx.job_id].append(ctx.slot.timestamp())
        await asyncio.sleep(0)

    for job_id in ids:
        second.job("5s", id=job_id, missed=Missed.RUN_ALL)(h)
    await second.start()
    running.append(second)
    for _ in range(3):
        await settle(second)
    missed = [T0 + 5 * k for k in range(2, 8)]  # the slots in the 30 s outage
    for job_id in ids:
        assert calls[job_id][: len(missed)] == missed, job_id
    runs = await second.runs_async(limit=1000)
    assert not [r for r in runs if r.reason == "already_executing"]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_slot_due_during_a_run_all_sequence_joins_it(
    make: Make, clock: FakeClock, running: list
) -> None:
    """Right after a restart the RUN_ALL catch-up sequence still holds the job's lease when
    the next on-time slot comes: that slot runs after the sequence (it used to be skipped
    'already executing' against the process's own catch-up run)."""
    first = make()
    first.job("5s", id="all", missed=Missed.RUN_ALL)(Recorder())
    await first.start()
    await advance(clock, 5, first, step=5)
    await first.stop()
    clock.advance(20)  # down for 4 slots
    second = make()
    release = asyncio.Event()
    calls: list[float] = []

    async def slow(ctx: RunContext) -> None:
        calls.append(ctx.slot.timestamp())
        await release.wait()

    second.job("5s", id="all", missed=Missed.RUN_ALL)(slow)
    await second.start()
    running.append(second)
    for _ in range(50):
        await asyncio.sleep(0.001)
    assert "all" in second.loop.sequencing and len(calls) == 1
    for _ in range(2):  # two on-time slots come while the first catch-up run holds on
        clock.advance(5)
        for _ in range(50):
            await asyncio.sleep(0.001)
    release.set()
    for _ in range(4):
        await settle(second)
    assert calls == sorted(calls) and len(calls) == len(set(calls))
    assert calls[-2:] == [T0 + 30, T0 + 35], calls
    runs = await second.runs_async(limit=1000)
    assert not [r for r in runs if r.reason == "already_executing"], [
        (r.slot, r.reason) for r in runs
    ]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_pending_run_started_by_two_callers_runs_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    """The upkeep's poll and a run's end may both start a job's waiting run: it runs once,
    and the job's lease is free after it (a second start used to queue the running run
    again, run it twice, and take the lease for a finished run for its whole length)."""
    s = make()
    release = asyncio.Event()
    calls: list[float] = []

    async def h(ctx: RunContext) -> None:
        calls.append(ctx.slot.timestamp())
        if len(calls) == 1:
            await release.wait()

    s.job("5s", id="q", overlap=Overlap.QUEUE_ONE)(h)
    await s.start()
    running.append(s)
    for _ in range(2):  # +5 runs and holds; +10 waits for the lease
        clock.advance(5)
        for _ in range(50):
            await asyncio.sleep(0.001)
    assert calls == [T0 + 5] and "q" in s.runner.queued
    q = s.runner.queued["q"]
    s.runner.queued.clear()  # keep the run's own end from starting it: the callers below do
    release.set()
    await settle(s)
    runner = s.runner
    await asyncio.gather(*(runner.start_pending(q.job, q.run, q.leased, wait=True)
                           for _ in range(3)))
    await runner.start_pending(q.job, q.run, q.leased, wait=True)  # a late poll
    await settle(s)
    assert calls == [T0 + 5, T0 + 10]
    await advance(clock, 5, s, step=5)  # the lease was released: +15 runs on time
    assert calls == [T0 + 5, T0 + 10, T0 + 15]
    runs = await s.runs_async(limit=50)
    assert not [r for r in runs if r.reason == "already_executing"]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_processes_restarting_together_share_the_catch_up_without_skips(
    make: Make, clock: FakeClock, running: list
) -> None:
    """Three processes start together after a downtime and plan the same sequences (the
    slots within ``late_after`` and the RUN_ALL backlog): every slot runs once across
    them, in order, and none meets another process's run of the same sequence (they used
    to be recorded ``already_executing``, ~5 per job after a fleet restart)."""
    ids = [f"all-{i}" for i in range(6)]
    first = make()
    for job_id in ids:
        first.job("5s", id=job_id, missed=Missed.RUN_ALL)(Recorder())
    await first.start()
    await advance(clock, 5, first, step=5)
    await first.stop()
    clock.advance(30)
    calls: dict[tuple[str, float], list[str]] = {}
    release = asyncio.Event()

    async def h(ctx: RunContext) -> None:
        calls.setdefault((ctx.job_id, ctx.slot.timestamp()), []).append(ctx.instance_id)
        await release.wait()  # each run holds the lease until the test lets it go

    fleet = [make(instance_id=f"p{k}") for k in range(3)]
    for s in fleet:
        for job_id in ids:
            s.job("5s", id=job_id, missed=Missed.RUN_ALL)(h)
    for s in fleet:
        await s.start()
        running.append(s)
    missed = [T0 + 5 * k for k in range(2, 8)]  # the slots in the 30 s outage
    for _ in range(120):  # let runs end one by one while the clock moves in small steps
        release.set()
        await asyncio.sleep(0.002)
        release.clear()
        clock.advance(0.1)
        await asyncio.sleep(0.002)
        if all((j, x) in calls for j in ids for x in missed):
            break
    release.set()
    await settle(*fleet)
    for job_id in ids:
        ran = sorted(x for (j, x) in calls if j == job_id)
        assert ran[: len(missed)] == missed, (job_id, ran)
    assert all(len(by) == 1 for by in calls.values()), calls
    rows = await fleet[0].runs_async(limit=10_000)
    assert not [r for r in rows if r.reason == "already_executing"], [
        (r.job_id, r.slot, r.instance_id, r.logs) for r in rows if r.reason
    ]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_jobs_added_while_running_are_queued_in_batches(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A burst of jobs added while running (a catalog applying its definitions) reads
    their state rows in a few store calls, not one concurrent call per job (10,000 tasks
    waiting for a connection made the store look down); every one of them is queued."""
    from cronfleet.runtime.ownership import GAIN_CHUNK

    s = make()
    rec = Recorder()
    await s.start()
    running.append(s)
    calls: list[int] = []
    ensure = s.store.ensure_jobs

    async def counted(ids: Any) -> Any:
        states = await ensure(ids)
        calls.append(len(ids))
        return states

    s.store.ensure_jobs = counted  # type: ignore[method-assign]
    n = 2 * GAIN_CHUNK + 10

    async def read(total: int) -> None:  # the reads run in a task (SQLite: on its thread)
        for _ in range(1000):
            if sum(calls) >= total:
                break
            await asyncio.sleep(0.01)
        await settle(s)

    for i in range(n):
        s.job("60s", id=f"j{i:05d}")(rec)
    await read(n)
    assert calls == [GAIN_CHUNK, GAIN_CHUNK, 10]
    # a job added later, alone, is queued on its own
    s.job("60s", id="late")(rec)
    await read(n + 1)
    assert calls[3:] == [1]
    # every one is queued for its first slot
    assert {j for j, at in s.due.next.items() if at == T0 + 60} == {
        f"j{i:05d}" for i in range(n)} | {"late"}


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_add_job_adds_several_at_once_or_none(make: Make, clock: FakeClock,
                                                   running: list) -> None:
    from cronfleet import Job
    from cronfleet.errors import DuplicateJob

    s = make()
    rec = Recorder()
    await s.start()
    running.append(s)
    a, b = Job.create("60s", rec, id="a"), Job.create("60s", rec, id="b")
    with pytest.raises(DuplicateJob):
        s.add_job(a, Job.create("60s", rec, id="c"), Job.create("60s", rec, id="a"))
    assert set(s.jobs) == set()  # a repeat among them: none was added
    assert s.add_job(a, b) is a
    await advance(clock, 60, s, step=30)
    assert sorted(c.job_id for c in rec.calls) == ["a", "b"]  # both planned while running
