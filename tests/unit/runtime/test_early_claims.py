"""Early claims: a plain slot is claimed (with its lease) ``claim_ahead`` seconds before its
time and started at its time; whatever happens in between, each slot is run or recorded
exactly once (docs/internals.md, "Early claims")."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import (
    AlreadyExecuting,
    FakeClock,
    Missed,
    Overlap,
    RunStatus,
    Scheduler,
    StoreUnavailable,
    TriggeredBy,
)
from cronfleet.store.base import Dispatch

from .conftest import T0, Recorder, advance, settle

Make = Callable[..., Scheduler]
SLOT = T0 + 60


@pytest.fixture
def store_kind() -> str:
    """These tests read the SQLite file itself (``claims``, ``lease``): the real store."""
    return "sqlite"


def claims(db: str, job_id: str) -> list[tuple[int, str]]:
    """(slot ms, instance) of each claim of ``job_id``."""
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        return conn.execute(
            "SELECT slot, instance_id FROM claims WHERE job_id = ? ORDER BY slot", (job_id,)
        ).fetchall()
    finally:
        conn.close()


def lease(db: str, job_id: str) -> tuple[Any, ...]:
    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    try:
        row = conn.execute(
            "SELECT lease_holder, lease_token FROM job_state WHERE job_id = ?", (job_id,)
        ).fetchone()
        return tuple(row)
    finally:
        conn.close()


async def one_job(make: Make, running: list, every: str, job_id: str, *,
                  make_kw: dict[str, Any] | None = None, **job: Any) -> tuple[Scheduler, Recorder]:
    """A started scheduler (stopped by ``running``) with one recorded job."""
    s = make(**(make_kw or {}))
    rec = Recorder()
    s.job(every, id=job_id, **job)(rec)
    await s.start()
    running.append(s)
    return s, rec


async def to_window(clock: FakeClock, *schedulers: Scheduler) -> None:
    """Just inside the early-claim window of SLOT (claim_ahead 0.5 s)."""
    clock.set(SLOT - 0.3)
    await settle(*schedulers)


async def test_claimed_before_its_time_started_at_its_time(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await to_window(clock, s)
    assert claims(db, "j") == [(SLOT * 1000, "test-1")]
    assert lease(db, "j")[0] == "test-1"
    assert rec.calls == []  # not before its time
    assert await s.runs_async("j") == []
    clock.set(SLOT)
    await settle(s)
    [ctx] = rec.calls
    assert ctx.slot.timestamp() == SLOT and ctx.triggered_by is TriggeredBy.SCHEDULE
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SUCCEEDED and run.fencing_token == ctx.fencing_token
    assert run.started_at is not None and run.started_at.timestamp() >= SLOT
    assert lease(db, "j") == (None, None)


async def test_claim_ahead_zero_claims_at_the_slot(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j", make_kw=dict(claim_ahead=0))
    await to_window(clock, s)
    assert claims(db, "j") == []
    await advance(clock, 0.3, s)
    assert len(rec.calls) == 1


async def test_pause_after_the_early_claim_is_honoured(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await to_window(clock, s)
    assert len(claims(db, "j")) == 1
    ops = make(instance_id="ops-cli")  # another process pauses it
    ops.job("60s", id="j")(rec)
    await ops.pause_async("j", by="ops")
    clock.set(SLOT)
    await settle(s)
    assert rec.calls == []
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SKIPPED and run.reason == "paused"
    assert run.slot.timestamp() == SLOT
    # the early claim withdrawn, the skip took the slot's claim: its row is the only one
    assert [slot for slot, _ in claims(db, "j")] == [round(SLOT * 1000)]
    assert lease(db, "j") == (None, None)
    await ops.resume_async("j", by="ops")
    await advance(clock, 60, s, step=0.5)
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT + 60]


async def test_a_job_paused_before_the_window_is_not_claimed_early(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await s.pause_async("j", by="ops")
    await to_window(clock, s)
    assert claims(db, "j") == []
    await s.resume_async("j", by="ops")  # resumed before the slot: it runs
    clock.set(SLOT)
    await settle(s)
    assert len(rec.calls) == 1


async def test_a_job_paused_elsewhere_is_claimed_early_once_then_known(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    """The early claims make no store call for the overrides: they go by the last
    reading. A pause by another process that no reading has seen yet is found at the
    instant (the claim withdrawn, the slot recorded ``paused``); from then on the job is
    known paused and not claimed early; resumed elsewhere, it is claimed at its time
    once, then early again."""
    s, rec = await one_job(make, running, "60s", "j")
    ops = make(instance_id="ops-cli")  # another process pauses it
    ops.job("60s", id="j")(rec)
    await ops.pause_async("j", by="ops")
    await to_window(clock, s)
    assert claims(db, "j") == [(SLOT * 1000, "test-1")]  # not known paused yet
    clock.set(SLOT)
    await settle(s)
    assert [slot for slot, _ in claims(db, "j")] == [SLOT * 1000]
    clock.set(SLOT + 60 - 0.3)  # the next window: known paused, not claimed early
    await settle(s)
    assert [slot for slot, _ in claims(db, "j")] == [SLOT * 1000]
    clock.set(SLOT + 60)
    await settle(s)
    await ops.resume_async("j", by="ops")
    clock.set(SLOT + 120 - 0.3)  # resumed, but not known here: claimed at its time
    await settle(s)
    assert [slot for slot, _ in claims(db, "j")] == [SLOT * 1000, (SLOT + 60) * 1000]
    clock.set(SLOT + 120)
    await settle(s)
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT + 120]
    clock.set(SLOT + 180 - 0.3)  # the reading at SLOT + 120 saw it resumed: early again
    await settle(s)
    assert claims(db, "j")[-1] == ((SLOT + 180) * 1000, "test-1")
    assert rec.calls[-1].slot.timestamp() == SLOT + 120
    runs = await s.runs_async("j")
    assert sorted((r.slot.timestamp(), r.status, r.reason) for r in runs) == [
        (SLOT, RunStatus.SKIPPED, "paused"),
        (SLOT + 60, RunStatus.SKIPPED, "paused"),
        (SLOT + 120, RunStatus.SUCCEEDED, None),
    ]


async def test_an_instant_reads_the_overrides_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    """One reading of the overrides per instant, at the instant, whatever the early
    claims did before it."""
    s = make()
    rec = Recorder()
    for i in range(5):
        s.job("1s", id=f"j{i}")(rec)
    await s.start()
    running.append(s)
    real = s.store.read_overrides
    read_at: list[float] = []

    async def counted(ids: Any) -> Any:
        read_at.append(clock.now())
        return await real(ids)

    s.store.read_overrides = counted  # type: ignore[method-assign]
    start = clock.now()
    await advance(clock, 6, s, step=0.25)
    instants = sorted({c.slot.timestamp() for c in rec.calls})
    assert len(instants) == 6 and len(rec.calls) == 30
    assert len(read_at) == len(instants)
    # each at its instant (an early claim's would come 0.5 s before one)
    assert all(t == int(t) and t > start for t in read_at)


async def test_stop_runs_its_early_claims_at_their_time(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    """Both instances claim early; one wins, the other's claim is refused and it moves on.
    Giving the winner's claim back at stop would lose the slot (the loser will not try
    again), so the winner's stop waits for the instant, runs it, and only then stops: a
    rolling deploy loses nothing."""
    # the clock jumps a minute in one step (to_window): no heartbeat happens meanwhile, so
    # a ttl below that would have each declare the other lost (test_fleet.py covers that)
    by_name = {
        "a": make(instance_id="a", instance_ttl=3600),
        "b": make(instance_id="b", instance_ttl=3600),
    }
    ran: list[str] = []
    for name, s in by_name.items():

        async def handler(ctx: Any, name: str = name) -> None:
            ran.append(name)

        s.job("60s", id="j")(handler)
    for s in by_name.values():
        await s.start()
    await to_window(clock, *by_name.values())
    [(slot_ms, winner)] = claims(db, "j")
    assert slot_ms == SLOT * 1000
    loser = by_name["b" if winner == "a" else "a"]
    running.append(loser)
    stopping = asyncio.ensure_future(by_name[winner].stop())
    await settle(loser)
    assert not stopping.done()  # waiting for the instant, not giving the claim back
    assert claims(db, "j") == [(SLOT * 1000, winner)]
    clock.set(SLOT)
    await settle(loser)
    await asyncio.wait_for(stopping, 5)
    assert not by_name[winner].running
    await settle(loser)
    assert ran == [winner]
    [run] = await loser.runs_async("j")
    assert run.instance_id == winner and run.status is RunStatus.SUCCEEDED
    assert run.slot.timestamp() == SLOT
    assert lease(db, "j") == (None, None)


async def test_stop_far_before_a_large_early_instant_gives_the_claims_back(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    """Early claims more than the shutdown grace ahead are not waited for: they are
    withdrawn, as if never made, and a later start's catch-up finds the slot missed."""
    s = make(shutdown_grace=0.1)
    s.job("60s", id="j")(Recorder())
    await s.start()
    await to_window(clock, s)
    assert len(claims(db, "j")) == 1
    await s.stop()  # 0.3 s before the slot, grace 0.1 s: no waiting
    assert claims(db, "j") == []
    assert lease(db, "j") == (None, None)
    clock.set(SLOT + 30)  # down over the slot's time
    again = make()
    rec = Recorder()
    again.job("60s", id="j")(rec)
    await again.start()
    running.append(again)
    await settle(again)
    [ctx] = rec.calls  # the withdrawn slot counts as missed: RUN_ONCE runs it once
    assert ctx.slot.timestamp() == SLOT and ctx.is_catchup


async def test_instance_dying_after_an_early_claim_leaves_an_interrupted_run(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(instance_id="survivor", instance_ttl=15)  # the clock moves 10 s a step
    rec = Recorder()
    s.job("60s", id="j", timeout=60, recover=True)(rec)
    clock.set(SLOT - 0.3)
    await s.store.open()
    await s.store.ensure_jobs(["j"])
    # a process that claimed SLOT early (lease 90 s from the slot) and died before it
    [dead] = await s.store.dispatch(
        [
            Dispatch(
                job_id="j",
                slot=SLOT,
                triggered_by=TriggeredBy.SCHEDULE,
                lease=True,
                hold=90.3,
                record=False,
                early=True,
            )
        ],
        "dead:1:x",
    )
    assert dead.won and dead.token is not None
    await s.store.close()
    await s.start()
    running.append(s)
    await advance(clock, 60.5, s, step=0.5)
    assert rec.calls == []  # SLOT is the dead instance's; its lease still blocks SLOT + 60
    [busy] = await s.runs_async("j")
    assert busy.slot.timestamp() == SLOT + 60 and busy.reason == "already_executing"
    await advance(clock, 40, s, step=10)  # its lease expired: recorded, then recovered
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT]
    runs = await s.runs_async("j", limit=10)
    at_slot = [r for r in runs if r.slot.timestamp() == SLOT]
    assert {(r.status, r.is_recovery) for r in at_slot} == {
        (RunStatus.INTERRUPTED, False),
        (RunStatus.SUCCEEDED, True),
    }
    interrupted = next(r for r in at_slot if not r.is_recovery)
    assert interrupted.instance_id == "dead:1:x" and interrupted.fencing_token == dead.token


async def test_late_early_claim_follows_the_catch_up_policy(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j", missed=Missed.SKIP)
    await to_window(clock, s)
    assert len(claims(db, "j")) == 1
    clock.set(SLOT + 10)  # the loop stalled past late_after (5 s)
    await settle(s)
    assert rec.calls == []
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SKIPPED and run.reason == "missed"
    assert run.slot.timestamp() == SLOT
    assert len(claims(db, "j")) == 1  # the missed record's own claim


async def test_busy_lease_is_decided_at_the_slot(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s = make()
    release = asyncio.Event()
    started: list[float] = []

    async def long(ctx: Any) -> None:
        started.append(ctx.slot.timestamp())
        await release.wait()

    s.job("60s", id="j")(long)
    await s.start()
    running.append(s)
    for t in (SLOT - 0.3, SLOT):  # the first slot, claimed early, is running
        clock.set(t)
        await asyncio.sleep(0.05)
    assert started == [SLOT]
    clock.set(SLOT + 59.7)  # window of the next slot: its lease is busy, nothing claimed
    await asyncio.sleep(0.05)
    assert [c[0] for c in claims(db, "j")] == [SLOT * 1000]
    clock.set(SLOT + 60)
    await asyncio.sleep(0.05)
    runs = await s.runs_async("j")
    skip = next(r for r in runs if r.status is RunStatus.SKIPPED)
    assert skip.slot.timestamp() == SLOT + 60 and skip.reason == "already_executing"
    release.set()
    await settle(s)
    assert started == [SLOT]


async def test_removed_job_gives_its_early_claim_back(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="j")(rec)
    s.job("60s", id="k")(Recorder())
    await s.start()
    running.append(s)
    await to_window(clock, s)
    assert len(claims(db, "j")) == 1
    s.remove_job("j")
    clock.set(SLOT)
    await settle(s)
    assert rec.calls == []
    assert claims(db, "j") == []
    assert lease(db, "j") == (None, None)
    assert await s.runs_async(limit=10) != []  # k ran


async def test_many_instances_early_and_not_fire_each_slot_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    calls: list[tuple[str, float]] = []

    def build(name: str, ahead: float) -> Scheduler:
        s = make(instance_id=name, claim_ahead=ahead)
        for j in range(30):

            async def handler(ctx: Any) -> None:
                calls.append((ctx.job_id, ctx.slot.timestamp()))

            s.job("10s", id=f"job-{j}")(handler)
        return s

    group = [build("a", 0.5), build("b", 2), build("c", 0)]
    for s in group:
        await s.start()
        running.append(s)
    await advance(clock, 60, *group, step=0.25)
    expected = {(f"job-{j}", T0 + k * 10) for j in range(30) for k in range(1, 7)}
    assert sorted(calls) == sorted(expected)
    runs = await group[0].runs_async(limit=1000)
    assert len(runs) == len(expected)
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}


async def test_early_claim_that_fails_is_made_at_the_slot(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    real = s.store.dispatch
    seen: list[bool] = []

    async def early_fails(items: list[Dispatch], instance: str) -> Any:
        seen.append(items[0].early)
        if items[0].early:
            raise StoreUnavailable("down for a moment")
        return await real(items, instance)

    s.store.dispatch = early_fails  # type: ignore[method-assign]
    await to_window(clock, s)
    assert seen == [True] and claims(db, "j") == []
    clock.set(SLOT)
    await settle(s)
    assert seen == [True, False]
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT]
    assert rec.calls[0].fencing_token is not None  # claimed at its time, normally
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SUCCEEDED


async def test_withdraw_failing_keeps_the_claim_and_records_the_pause(
    make: Make, db: str, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await to_window(clock, s)
    await s.pause_async("j", by="ops")

    async def down(items: Any) -> int:
        raise StoreUnavailable("down")

    s.store.withdraw = down  # type: ignore[attr-defined]
    clock.set(SLOT)
    await settle(s)
    assert rec.calls == []
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SKIPPED and run.reason == "paused"
    assert run.fencing_token is not None and run.slot.timestamp() == SLOT
    assert claims(db, "j") == [(SLOT * 1000, "test-1")]
    assert lease(db, "j") == (None, None)


async def test_manual_run_in_the_window_finds_the_lease_taken(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await to_window(clock, s)
    with pytest.raises(AlreadyExecuting) as err:
        await s.trigger_async("j", by="alice")
    assert err.value.holder == "test-1"
    clock.set(SLOT)
    await settle(s)
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT]  # the slot itself ran
    statuses = sorted((r.manual, r.status.value) for r in await s.runs_async("j"))
    assert statuses == [(False, "succeeded"), (True, "skipped")]


async def test_queue_one_job_claimed_early_runs_each_slot(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "10s", "q", overlap=Overlap.QUEUE_ONE)
    await advance(clock, 30, s, step=0.25)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 10, T0 + 20, T0 + 30]
    assert {r.status for r in await s.runs_async("q")} == {RunStatus.SUCCEEDED}


async def test_late_early_claim_that_cannot_be_withdrawn_runs_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    s, rec = await one_job(make, running, "60s", "j")
    await to_window(clock, s)

    async def down(items: Any) -> int:
        raise StoreUnavailable("down")

    s.store.withdraw = down  # type: ignore[attr-defined]
    clock.set(SLOT + 10)  # late, and the claim stays ours: it runs, once
    await settle(s)
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT]
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SUCCEEDED
    assert run.started_at is not None and run.started_at.timestamp() >= SLOT + 10
    await advance(clock, 60, s, step=0.5)
    assert [c.slot.timestamp() for c in rec.calls] == [SLOT, SLOT + 60]
