"""Every way out of a claimed slot ends in one final row (#24): a stop during the slot's
jitter, a stop while its start or its claim is in flight, a stop that cannot write."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, RunStatus, Scheduler
from cronfleet.errors import StoreUnavailable
from cronfleet.runtime import requests
from cronfleet.runtime.planning import jitter_delay

from .conftest import STORE_KINDS, T0, Recorder, advance, settle

Make = Callable[..., Scheduler]


async def tick(clock: FakeClock, seconds: float, step: float = 0.25) -> None:
    """Move time on without waiting for the schedulers to be idle (a run is blocked)."""
    for _ in range(round(seconds / step)):
        clock.advance(step)
        for _ in range(30):
            await asyncio.sleep(0)


def waiting_slot(job_id: str, jitter: float) -> float:
    """An hourly slot whose jitter delay is at least 5 s (the stop comes 1 s after it)."""
    slot = T0 + 3600
    while jitter_delay(job_id, slot, jitter) < 5:
        slot += 3600
    return slot


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_stop_during_the_jitter_records_the_slot(make: Make, clock: FakeClock) -> None:
    s = make()
    rec = Recorder()
    s.job("@hourly", id="j", jitter="30s")(rec)
    await s.start()
    slot = waiting_slot("j", 30)
    await advance(clock, slot - T0 + 1, s, step=600)
    [pending] = await s.runs_async()
    assert pending.status is RunStatus.PENDING and pending.slot.timestamp() == slot
    await s.stop()
    assert rec.calls == []
    s2 = make(instance_id="test-2")
    async with s2:
        runs = [r for r in await s2.runs_async() if r.job_id == "j"]
    assert [(r.status, r.reason) for r in runs] == [(RunStatus.INTERRUPTED, "shutdown")]
    assert "jitter" in runs[0].logs[-1]


async def test_a_stop_while_the_start_is_in_flight_records_the_slot(
    make: Make, clock: FakeClock
) -> None:
    """The jitter is over and the start's store call is under way when the stop comes:
    the call is cancelled, and whatever it did, the slot ends interrupted, lease released."""
    s = make()
    rec = Recorder()
    s.job("@hourly", id="j", jitter="30s")(rec)
    await s.start()
    real_start = s.store.start
    entered = asyncio.Event()

    async def hanging_start(items: Any, instance: str) -> Any:
        await real_start(items, instance)  # the store did start it ...
        entered.set()
        await asyncio.Event().wait()  # ... but the answer never comes

    s.store.start = hanging_start  # type: ignore[method-assign]
    slot = waiting_slot("j", 30)
    await advance(clock, slot - T0 - 1, s, step=600)
    await tick(clock, 32, step=0.5)  # the slot, its jitter delay: the start then hangs
    await asyncio.wait_for(entered.wait(), 5)
    await s.stop()
    assert rec.calls == []
    s2 = make(instance_id="test-2")
    async with s2:
        runs = [r for r in await s2.runs_async() if r.job_id == "j"]
        state = (await s2.store.read_states(["j"]))["j"]
    assert [(r.status, r.reason) for r in runs] == [(RunStatus.INTERRUPTED, "shutdown")]
    assert state.lease_holder is None


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_stop_while_a_claim_is_in_flight_records_the_slot(
    make: Make, clock: FakeClock
) -> None:
    """A background claim (catch-up, a later claim of another owner's slot, a replay) is
    cancelled by the stop while the store claims it: the store's answer is still read and
    the claimed slot recorded, instead of a claim (and lease) nothing accounts for."""
    s = make()
    rec = Recorder()
    s.job("@hourly", id="j")(rec)
    job = s.get_job("j")
    await s.start()
    real_dispatch = s.store.dispatch
    gate = asyncio.Event()

    async def slow_dispatch(items: Any, instance: str) -> Any:
        await gate.wait()
        return await real_dispatch(items, instance)

    s.store.dispatch = slow_dispatch  # type: ignore[method-assign]
    item = requests.scheduled(job, T0 + 1800, clock.now(), instance_id=s.instance_id)
    s.life.spawn(s.loop.dispatch([item]))
    await settle()
    stopping = asyncio.ensure_future(s.stop())
    for _ in range(20):
        await asyncio.sleep(0)
    gate.set()
    await stopping
    assert rec.calls == []
    s2 = make(instance_id="test-2")
    async with s2:
        runs = [r for r in await s2.runs_async() if r.job_id == "j"]
        state = (await s2.store.read_states(["j"]))["j"]
    assert [(r.status, r.reason, r.slot.timestamp()) for r in runs] == [
        (RunStatus.INTERRUPTED, "shutdown", T0 + 1800)
    ]
    assert state.lease_holder is None


async def test_rows_a_stop_cannot_write_are_written_by_whoever_finds_them(
    make: Make, clock: FakeClock
) -> None:
    """The store takes nothing at stop: the process does not remove its instance row, so
    the fleet declares it lost and records its claimed slot (not left pending for ever)."""
    survivor = make(instance_id="b")
    await survivor.start()
    s = make(instance_id="a")
    rec = Recorder()
    s.job("@hourly", id="j", jitter="30s")(rec)
    await s.start()
    slot = waiting_slot("j", 30)
    await advance(clock, slot - T0 + 1, s, survivor, step=600)
    [pending] = await s.runs_async()
    assert pending.status is RunStatus.PENDING

    async def down(*_: Any, **__: Any) -> Any:
        raise StoreUnavailable("simulated outage")

    s.store.finish = down  # type: ignore[method-assign]
    await s.stop()
    assert [i.instance_id for i in await survivor.store.list_instances(ttl=15)] == ["a", "b"]
    await advance(clock, 40, survivor, step=1)
    [run] = await survivor.runs_async()
    assert (run.status, run.reason) == (RunStatus.INTERRUPTED, "instance_lost")
    assert rec.calls == []
    await survivor.stop()


class Outage:
    """Every store call of the wrapped schedulers fails while ``down`` (a SQLite writer
    frozen while it holds the write lock: nobody writes, nobody heartbeats)."""

    CALLS = ("dispatch", "finish", "start", "heartbeat", "reap_orphans", "break_lost",
             "record_skips", "renew_leases")

    def __init__(self) -> None:
        self.down = False
        self.finish_down_for: dict[str, int] = {}

    def wrap(self, s: Scheduler) -> None:
        for name in self.CALLS:
            real = getattr(s.store, name)

            async def call(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                if self.down or (_name == "finish" and self.finish_down_for.get(s.instance_id)):
                    raise StoreUnavailable("simulated: the write lock is held")
                return await _real(*a, **kw)

            setattr(s.store, name, call)


async def test_a_finished_run_is_not_rerun_while_its_result_waits_to_be_written(
    make: Make, clock: FakeClock
) -> None:
    """A run ends while nobody can write; its lease (timeout + 30 s) expires during the
    outage. When the store answers again the other process must not find it orphaned and
    re-run it (``recover=True``) before its holder wrote the result it kept."""
    calls: list[str] = []
    done = asyncio.Event()

    async def handler(ctx: Any) -> None:
        calls.append(ctx.instance_id)
        await done.wait()  # ends during the outage

    fleet = []
    outage = Outage()
    for name in ("a", "b"):
        # the clock moves 3 s a step: heartbeats without a gap need a ttl above it
        s = make(instance_id=name, orphan_interval=1, instance_ttl=15)
        s.job("@hourly", id="j", timeout="10s", recover=True)(handler)
        await s.start()
        outage.wrap(s)
        fleet.append(s)
    await advance(clock, 30, *fleet, step=3)  # both steady
    await advance(clock, 3569, *fleet, step=600)
    await tick(clock, 2)  # the slot runs here or there (and waits for ``done``)
    assert len(calls) == 1
    runner = next(s for s in fleet if s.instance_id == calls[0])
    outage.down = True
    outage.finish_down_for[runner.instance_id] = 1
    await tick(clock, 5)
    done.set()  # the run ends during the outage
    await tick(clock, 45)  # its lease (timeout + 30 s = 40 s) expires meanwhile
    outage.down = False
    await tick(clock, 3)  # its holder writes the result 3 s after the others can
    outage.finish_down_for.clear()
    await advance(clock, 20, *fleet, step=0.5)
    assert calls == [runner.instance_id]
    rows = await fleet[0].runs_async()
    assert [(r.status, r.reason) for r in rows] == [(RunStatus.SUCCEEDED, None)]
    for s in fleet:
        await s.stop()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_fail_open_runs_leave_one_final_row_per_slot(make: Make, clock: FakeClock) -> None:
    """PREFER_GLOBAL during a confirmed outage: every process runs the slot (the
    documented price of failing open), but the ledger keeps one final row for it, the
    other runs' outcomes attached to it as late results."""
    calls: list[str] = []
    all_ran = asyncio.Event()

    async def handler(ctx: Any) -> str:
        calls.append(ctx.instance_id)
        if len(calls) >= 3:
            all_ran.set()
        return ctx.instance_id

    fleet = []
    down = {"on": False}
    # one hour written three ways: three declarations, so each process plans the job
    # itself (one declaration would give it one owner, the only process to fail open)
    for name, hourly in (("a", "@hourly"), ("b", "0 * * * *"), ("c", "0 */1 * * *")):
        s = make(instance_id=name)
        s.job(hourly, id="j", locking="prefer_global")(handler)
        await s.start()
        real = s.store.dispatch

        async def dispatch(items: Any, instance: str, _real: Any = real) -> Any:
            if down["on"]:
                raise StoreUnavailable("simulated: the store hangs")
            return await _real(items, instance)

        async def confirm() -> bool:
            return bool(down["on"])

        s.store.dispatch = dispatch  # type: ignore[method-assign]
        s.store.confirm_outage = confirm  # type: ignore[attr-defined]
        fleet.append(s)
    await advance(clock, 3599, *fleet, step=600)
    down["on"] = True
    await tick(clock, 2)
    # the runs are due: wait for them (on Redis each process still talks to the server
    # first, which takes real time on a loaded machine)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_ran.wait(), 30)
    assert sorted(calls) == ["a", "b", "c"]  # failed open on every process
    down["on"] = False
    for _ in range(30):  # the group commits retry every second (real time)
        await tick(clock, 0.5)
        await asyncio.sleep(0.1)
    await advance(clock, 2, *fleet, step=0.5)
    rows = [r for r in await fleet[0].runs_async() if r.slot.timestamp() == T0 + 3600]
    assert [r.status for r in rows] == [RunStatus.SUCCEEDED], rows
    late = rows[0].result["late_result"]
    assert late["status"] == "succeeded" and late["instance_id"] != rows[0].instance_id
    for s in fleet:
        await s.stop()


async def test_the_reaper_waits_while_its_heartbeats_fail_or_lag(
    make: Make, clock: FakeClock
) -> None:
    """A reap asked while the store is out of reach (its call may wait for the lock and run
    the moment it is free, before the holders wrote what they kept), or by a process that
    was frozen itself (its last heartbeat 45 s old), could re-run finished runs."""
    s = make(instance_id="a", instance_ttl=15)  # steady after 6 s of beats
    await s.start()
    await advance(clock, 12, s, step=1)
    assert s.upkeep.may_reap()
    real = s.store.heartbeat

    async def failing(*_: Any, **__: Any) -> Any:
        raise StoreUnavailable("simulated: the write lock is held")

    s.store.heartbeat = failing  # type: ignore[method-assign]
    await advance(clock, 4, s, step=1)
    assert s.fleet.failed and not s.upkeep.may_reap()
    s.store.heartbeat = real  # type: ignore[method-assign]
    await advance(clock, 4, s, step=1)  # beats again, but not steady yet
    assert not s.upkeep.may_reap()
    await advance(clock, 8, s, step=1)
    assert s.upkeep.may_reap()
    clock.advance(45)  # this process was frozen: its last heartbeat is 45 s old
    assert not s.upkeep.may_reap()
    await s.stop()


async def test_a_stop_records_the_slots_a_catch_up_sequence_did_not_reach(
    make: Make, clock: FakeClock
) -> None:
    """``missed=run_all`` runs the missed slots one after the other; a stop comes first.
    The slots it did not reach are recorded (another process may have claimed a later
    slot already, and then no later start's catch-up would find them)."""
    gate = asyncio.Event()
    calls: list[float] = []

    async def handler(ctx: Any) -> None:
        calls.append(ctx.slot.timestamp())
        await gate.wait()

    s = make(shutdown_grace=0.1)
    s.job("60s", id="j", missed="run_all")(handler)
    await s.start()
    gate.set()
    await advance(clock, 60, s, step=60)
    await s.stop()
    gate.clear()
    clock.advance(600)  # ten slots pass while no process runs
    s = make(shutdown_grace=0.1, instance_id="test-2")
    s.job("60s", id="j", missed="run_all")(handler)
    await s.start()
    await tick(clock, 1)
    assert len(calls) == 2  # the first missed slot runs (and waits)
    await s.stop()
    s3 = make(instance_id="test-3")
    async with s3:
        rows = [r for r in await s3.runs_async() if r.job_id == "j"]
    by_slot: dict[float, list[Any]] = {}
    for r in rows:
        by_slot.setdefault(r.slot.timestamp(), []).append((r.status.value, r.reason))
    slots = [T0 + 60 * k for k in range(1, 12)]
    assert sorted(by_slot) == slots, by_slot
    assert all(len(v) == 1 for v in by_slot.values()), by_slot
    assert by_slot[T0 + 120] == [("interrupted", "shutdown")]
    assert all(by_slot[t] == [("skipped", "missed")] for t in slots[2:]), by_slot


async def test_a_fail_open_overlap_skip_is_recorded_under_a_claim(
    make: Make, clock: FakeClock
) -> None:
    """A fail-open slot that meets this process's own run of the job (``overlap=skip``) is
    recorded ``already_executing`` under a claim once the store answers, never claim-less
    beside the row of a process that ran it."""
    s = make()
    s.job("60s", id="j", locking="prefer_global")(Recorder())
    await s.start()
    job = s.get_job("j")
    item = requests.scheduled(job, T0 + 60, clock.now(), instance_id=s.instance_id)
    s.runner.reserve("j")  # a run of the job in progress here
    assert s.outage.run_unclaimed(job, item, "fail open", claim_row=True) is None
    assert not s.writer.unsaved_skips
    [kept] = s.outage.skips
    assert (kept.job_id, kept.slot, kept.skip_reason) == ("j", T0 + 60, "already_executing")
    assert kept.claim == "slot" and not kept.is_catchup
    s.runner.unreserve("j")
    await s.stop()
