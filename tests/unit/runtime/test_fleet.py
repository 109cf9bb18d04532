"""Instances, heartbeats and lost instances in the runtime: a dead holder's jobs move to
the survivors within the instance ttl, a woken zombie is fenced and re-joins, and work is
spread over the live instances (docs/concepts.md, "Instances, leases and fencing")."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, RunStatus, Scheduler, TriggeredBy
from cronfleet.errors import StoreUnavailable
from cronfleet.runtime.ownership import owner
from cronfleet.store.base import Dispatch, Instance, InstanceStore, LostInstances

from .conftest import STORE_KINDS, T0, Recorder, advance, settle

Make = Callable[..., Scheduler]
TTL = 3.0


async def spin() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def until(cond: Callable[[], object], timeout: float = 10.0) -> None:
    """Real-time wait for ``cond`` (a store thread is involved on SQLite)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.005)


async def freeze(z: Scheduler) -> None:
    """``z`` stops answering: no heartbeat, no loop (a SIGSTOP, as far as the store sees)."""
    for t in [t for t in z.life.tasks if "heartbeat_loop" in repr(t.get_coro())]:
        t.cancel()
    z.life.stopping = True
    z.wake()
    await asyncio.gather(z.loop.task, return_exceptions=True)  # type: ignore[arg-type]


def istore(s: Scheduler) -> InstanceStore:
    assert isinstance(s.store, InstanceStore)
    return s.store


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_lost_holders_jobs_run_on_the_survivor_within_the_ttl(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(instance_id="survivor", instance_ttl=TTL)
    rec = Recorder()
    s.job("10s", id="r", recover=True)(rec)  # no timeout: its lease lasts an hour
    s.job("10s", id="n")(rec)
    await s.store.open()
    store = istore(s)
    await store.ensure_jobs(["r", "n"])
    # a process that registered, claimed both slots of T0 (leases of one hour) and died
    await store.heartbeat(Instance("dead:1:x", "h", 1, "all", "0"), ttl=TTL)
    dead = [
        Dispatch(job_id=j, slot=T0, triggered_by=TriggeredBy.SCHEDULE, lease=True, hold=3600)
        for j in ("r", "n")
    ]
    results = await store.dispatch(dead, "dead:1:x")
    await s.store.close()
    await s.start()
    running.append(s)
    await advance(clock, TTL + 2, s, step=0.25)
    runs = {r.id: r for r in await s.runs_async(limit=50)}
    for res in results:
        got = runs[res.run.id]  # type: ignore[union-attr]
        assert got.status is RunStatus.INTERRUPTED and got.reason == "instance_lost"
        assert "dead:1:x" in (got.error or "")
    recovered = [c for c in rec.calls if c.is_recovery]
    assert [c.job_id for c in recovered] == ["r"]
    assert recovered[0].slot.timestamp() == T0
    assert recovered[0].fencing_token > results[0].token  # type: ignore[operator]
    # the next slot (T0 + 10) runs on the survivor, an hour before the lease would expire
    await advance(clock, 10 - (TTL + 2) + 0.5, s, step=0.5)
    on_time = sorted(c.job_id for c in rec.calls if c.slot.timestamp() == T0 + 10)
    assert on_time == ["n", "r"]
    listed = {i.instance_id: i for i in await store.list_instances(ttl=TTL)}
    assert listed["survivor"].live and not listed["dead:1:x"].live
    assert listed["dead:1:x"].lost_by == "survivor"


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_woken_zombie_is_fenced_logs_it_and_rejoins(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    async def slow(ctx: Any) -> str:
        calls.append(ctx.instance_id)
        await release.wait()
        return "late"

    z = make(instance_id="zombie", instance_ttl=TTL)
    z.job("60s", id="j")(slow)
    await z.start()
    running.append(z)
    await advance(clock, 59.5, z, step=0.5)
    clock.set(T0 + 60.1)  # the handler starts and does not end: no waiting for idle here
    await until(lambda: calls)
    assert calls == ["zombie"]
    # the zombie stops answering: no heartbeat, no loop (a SIGSTOP, as far as the store sees)
    beats = [t for t in z.life.tasks if "heartbeat_loop" in repr(t.get_coro())]
    assert len(beats) == 1
    beats[0].cancel()
    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("60s", id="j")(slow)
    await s.start()
    running.append(s)
    await advance(clock, TTL + 2, s, step=0.25)
    [row] = await s.runs_async("j")
    assert row.status is RunStatus.INTERRUPTED and row.reason == "instance_lost"
    # the zombie wakes: its handler ends; the success is kept as a late result
    caplog.set_level(logging.WARNING, logger="cronfleet")
    epoch = z.fleet.epoch
    assert not await z.fleet.confirm(clock.now(), epoch)  # learns it was declared lost
    assert z.fleet.epoch == epoch + 1
    assert "was declared lost by survivor" in caplog.text
    release.set()
    await settle(z, s)
    rows = await s.runs_async("j")
    assert len(rows) == 1, rows
    [row] = rows
    assert row.status is RunStatus.INTERRUPTED
    assert row.result["late_result"]["status"] == "succeeded"
    assert row.result["late_result"]["result"] == "late"
    # it re-joined: both are live again, the next slot runs once in the fleet
    assert (await z.fleet.beat()) is not None
    z.life.spawn(z.fleet.heartbeat_loop())
    assert z.fleet.live == ("survivor", "zombie")
    health = z.health()
    assert health["instances_live"] == ["survivor", "zombie"]
    assert health["times_declared_lost"] == 1
    await advance(clock, 60, z, s, step=0.5)
    nxt = [r for r in await s.runs_async("j") if r.slot.timestamp() == T0 + 120]
    assert len(nxt) == 1 and nxt[0].status is RunStatus.SUCCEEDED
    assert calls.count("zombie") + calls.count("survivor") == 2


async def test_a_zombie_does_not_start_its_stale_early_claims(
    make: Make, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    z = make(instance_id="zombie", instance_ttl=TTL)
    zrec = Recorder()
    z.job("60s", id="j")(zrec)
    await z.start()
    running.append(z)
    await advance(clock, 59.75, z, step=0.25)  # inside the claim window of T0 + 60
    assert z.early.pending is not None and z.early.pending.ready
    await freeze(z)
    s = make(instance_id="survivor", instance_ttl=TTL)
    srec = Recorder()
    s.job("60s", id="j", recover=True)(srec)
    await s.start()
    running.append(s)
    await advance(clock, TTL + 2.5, s, step=0.25)
    rows = [r for r in await s.runs_async("j") if r.slot.timestamp() == T0 + 60]
    [row] = [r for r in rows if not r.is_recovery]
    assert row.status is RunStatus.INTERRUPTED and row.reason == "instance_lost"
    assert [c.is_recovery for c in srec.calls] == [True]  # the survivor ran it
    # the zombie wakes at what was its instant: it must not start the stale claim
    caplog.set_level(logging.WARNING, logger="cronfleet")
    z.life.stopping = False
    await z.loop.fire_due(clock.now())
    await settle(z, s)
    assert zrec.calls == []
    assert "not starting them" in caplog.text
    z.life.stopping = True


async def test_work_is_spread_over_the_live_instances(
    make: Make, clock: FakeClock, running: list
) -> None:
    ids = [f"i{n}" for n in range(3)]
    fleet = [make(instance_id=i, instance_ttl=TTL) for i in ids]
    per: Counter[str] = Counter()

    async def count(ctx: Any) -> None:
        per[ctx.instance_id] += 1

    for s in fleet:
        for n in range(300):
            s.job("10s", id=f"job-{n:03d}")(count)
        await s.start()
        running.append(s)
    await advance(clock, 1, *fleet, step=0.25)  # heartbeats: everyone knows the fleet
    assert all(s.fleet.live == tuple(ids) for s in fleet)
    per.clear()
    await advance(clock, 30, *fleet, step=0.25)  # three instants, 900 runs
    assert sum(per.values()) == 900
    shares = {i: per[i] / 900 for i in ids}
    assert all(0.25 <= v <= 0.42 for v in shares.values()), shares
    # each ran exactly the jobs it owns
    expected = Counter(owner(f"job-{n:03d}", tuple(ids)) for n in range(300))
    assert {i: per[i] for i in ids} == {i: 3 * expected[i] for i in ids}


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_lost_instances_are_looked_for_only_when_a_heartbeat_saw_a_stale_one(
    make: Make, clock: FakeClock, running: list
) -> None:
    """break_lost is a store round trip (a write on PostgreSQL): it runs after a beat that
    saw another instance silent past the ttl, not after every beat."""
    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("10s", id="n")(Recorder())
    store = istore(s)
    calls: list[float] = []
    real = store.break_lost

    async def counted(instance_id: str, *, ttl: float) -> Any:
        calls.append(clock.now())
        return await real(instance_id, ttl=ttl)

    store.break_lost = counted  # type: ignore[method-assign]
    await s.start()
    running.append(s)
    peer = Instance("peer:1:x", "h", 1, "all", "0")
    for _ in range(int(4 * TTL / 0.25)):  # a live peer for four ttls: ~20 beats each
        await store.heartbeat(peer, ttl=TTL)
        await advance(clock, 0.25, s, step=0.25)
    assert s.fleet.live == ("peer:1:x", "survivor") and s.fleet.steady()
    assert calls == []
    silent = clock.now()
    await advance(clock, TTL + 2, s, step=0.25)  # the peer went silent
    assert calls and all(t > silent + TTL for t in calls)
    listed = {i.instance_id: i for i in await store.list_instances(ttl=TTL)}
    assert listed["peer:1:x"].lost_by == "survivor"
    seen = len(calls)
    await advance(clock, 2 * TTL, s, step=0.25)  # declared lost: nothing left to look for
    assert len(calls) == seen


async def test_jobs_of_a_stale_instance_move_only_once_it_is_declared_lost(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A beat that saw a stale instance runs ``break_lost`` then ``divide``. When the
    store call of ``break_lost`` fails, nothing was declared and the stale instance's
    leases still hold: its jobs stay where they were (moved, each slot would meet its
    lease: ``already_executing``) until a later pass declares it."""
    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("10s", id="n")(Recorder())
    await s.start()
    running.append(s)
    fleet = s.fleet
    seen: list[tuple[str, ...]] = []
    fails = [True]

    async def update(live: tuple[str, ...], plans: Any) -> None:
        seen.append(live)

    async def break_lost(instance_id: str, *, ttl: float) -> Any:
        if fails[0]:
            raise StoreUnavailable("simulated outage")
        return LostInstances()

    fleet.ownership.update = update  # type: ignore[method-assign]
    istore(s).break_lost = break_lost  # type: ignore[method-assign]
    with fleet._lock:  # the beat: "peer" stale, so not in the live set
        fleet.view, fleet.stale = (("survivor",), {}), True
    await fleet._after_beat()
    assert seen == []
    fails[0] = False
    await fleet._after_beat()
    assert seen == [("survivor",)]


async def test_a_beat_that_moves_jobs_does_not_wait_for_a_quiet_moment(
    make: Make, clock: FakeClock, running: list
) -> None:
    """After a beat from the heartbeat thread, the loop's part waits for a moment clear
    of the next instant and of its early claims -- unless the beat moves jobs: a survivor
    whose peer declared the lost instance first sees only a smaller live set (no stale
    row), and waiting out the quiet window (most of a second with ``claim_ahead`` 0.5 s)
    took its share of the lost jobs a beat later (kill9 at 2.0-2.1 s)."""
    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("1s", id="n")(Recorder())
    await s.start()
    running.append(s)
    fleet = s.fleet
    nxt = fleet.due.heap[0]
    await advance(clock, nxt - 0.3 - clock.now(), s, step=0.05)  # inside the quiet window
    assert fleet.due.heap[0] == nxt and fleet.early.ahead == 0.5
    seen: list[tuple[str, ...]] = []

    async def update(live: tuple[str, ...], plans: Any) -> None:
        seen.append(live)

    fleet.ownership.update = update  # type: ignore[method-assign]
    mine = fleet.ownership.plans()
    assert fleet.ownership.peers == ("survivor",)
    # the same live set: the loop's part waits for the quiet moment (past the instant)
    with fleet._lock:
        fleet.view, fleet.stale = (("survivor",), {"survivor": mine}), False
    quiet = asyncio.ensure_future(fleet._judge())
    await spin()
    assert not quiet.done() and seen == []
    await advance(clock, 0.4, s, step=0.1)
    assert quiet.done() and seen == [("survivor",)]
    # a live set with a new peer moves jobs: at once, inside the next quiet window
    await advance(clock, fleet.due.heap[0] - 0.3 - clock.now(), s, step=0.05)
    with fleet._lock:
        fleet.view = (("peer", "survivor"), {"peer": mine, "survivor": mine})
    moving = asyncio.ensure_future(fleet._judge())
    await spin()
    assert moving.done() and seen[-1] == ("peer", "survivor")


def test_rendezvous_moves_only_the_jobs_of_the_instance_that_left() -> None:
    jobs = [f"j{n}" for n in range(1000)]
    three = ("a", "b", "c")
    two = ("a", "b")
    before = {j: owner(j, three) for j in jobs}
    after = {j: owner(j, two) for j in jobs}
    moved = [j for j in jobs if before[j] != after[j]]
    assert moved and all(before[j] == "c" for j in moved)
    assert owner("x", ()) is None


async def _interrupted_slot(s: Scheduler, job_id: str, slot: float) -> Any:
    """The store's row of ``slot`` claimed by a dead instance and marked interrupted."""
    from cronfleet.store.base import Finish

    await s.store.open()
    await s.store.ensure_jobs([job_id])
    [res] = await s.store.dispatch(
        [Dispatch(job_id=job_id, slot=slot, triggered_by=TriggeredBy.SCHEDULE, lease=True,
                  hold=90)], "dead:1:x",
    )  # fmt: skip
    run = res.run
    run.status, run.reason = RunStatus.INTERRUPTED, "instance_lost"
    await s.store.finish([Finish(run, release_token=res.token)])
    await s.store.close()
    return run


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_recovery_that_meets_the_next_slots_lease_waits_and_runs(
    make: Make, clock: FakeClock, running: list
) -> None:
    release = asyncio.Event()
    calls: list[tuple[float, bool]] = []

    async def handler(ctx: Any) -> None:
        calls.append((ctx.slot.timestamp(), ctx.is_recovery))
        if not ctx.is_recovery:
            await release.wait()

    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("10s", id="j", timeout=60, recover=True)(handler)
    lost = await _interrupted_slot(s, "j", T0)
    clock.set(T0 + 9)
    await s.start()
    running.append(s)
    clock.set(T0 + 10.1)  # the next slot starts and holds the lease
    await until(lambda: calls)
    assert calls == [(T0 + 10, False)]
    await s.upkeep.recover([lost], "test")  # the recovery meets that lease
    assert "j" in s.runner.recovering
    for _ in range(3):  # polled, still busy: it waits (no already_executing row)
        clock.advance(1)
        await asyncio.sleep(0.05)
    assert calls == [(T0 + 10, False)]
    release.set()  # the next slot's run ends: the recovery gets the lease
    await settle(s)
    assert calls == [(T0 + 10, False), (T0, True)]
    rows = [r for r in await s.runs_async("j") if r.slot.timestamp() == T0]
    assert sorted((r.status.value, r.is_recovery) for r in rows) == [
        ("interrupted", False), ("succeeded", True)
    ]


async def test_a_recovery_that_never_gets_the_lease_is_recorded_superseded(
    make: Make, clock: FakeClock, running: list
) -> None:
    release = asyncio.Event()

    async def handler(ctx: Any) -> None:
        await release.wait()

    s = make(instance_id="survivor", instance_ttl=TTL)
    s.job("10s", id="j", timeout=60, recover=True, catch_up_window=20)(handler)
    lost = await _interrupted_slot(s, "j", T0)
    clock.set(T0 + 9)
    await s.start()
    running.append(s)
    clock.set(T0 + 10.1)
    await until(lambda: s.runner.running.get("j"))
    await s.upkeep.recover([lost], "test")
    for _ in range(12):  # past the catch-up window (20 s) of its slot
        clock.advance(1)
        await asyncio.sleep(0.02)
    await until(lambda: "j" not in s.runner.recovering)
    release.set()
    await settle(s)
    [rec] = [r for r in await s.runs_async("j") if r.slot.timestamp() == T0 and r.is_recovery]
    assert rec.status is RunStatus.SKIPPED and rec.reason == "superseded"
    assert "superseded" in rec.logs[-1]


async def test_after_a_store_outage_nobody_declares_the_others_lost(
    make: Make, clock: FakeClock, running: list
) -> None:
    """Every heartbeat is stale after the store was away longer than the ttl (a held
    SQLite lock, a cut): the first process back must not declare the rest of the fleet
    lost. A process judges the others only after a whole ttl of its own heartbeats."""
    from cronfleet.errors import StoreUnavailable

    a = make(instance_id="a", instance_ttl=TTL)
    b = make(instance_id="b", instance_ttl=TTL)
    for s in (a, b):
        s.job("1h", id="j")(Recorder())
        await s.start()
        running.append(s)
    await advance(clock, 2 * TTL, a, b, step=0.25)
    assert a.fleet.live == ("a", "b") and a.fleet.steady() and b.fleet.steady()

    async def away(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the store is away")

    for s in (a, b):
        s.store.heartbeat = away  # type: ignore[method-assign]
    await advance(clock, 3 * TTL, a, b, step=0.25)  # both heartbeats now older than the ttl
    del a.store.heartbeat  # type: ignore[method-assign]
    await advance(clock, 1.0, a, b, step=0.25)  # a is back first; b's row is still stale
    assert a.fleet.last_ok is not None and not a.fleet.steady()
    del b.store.heartbeat  # type: ignore[method-assign]
    await advance(clock, 2 * TTL, a, b, step=0.25)
    listed = {i.instance_id: i for i in await istore(a).list_instances(ttl=TTL)}
    assert listed["a"].lost_at is None and listed["b"].lost_at is None, listed
    assert listed["a"].live and listed["b"].live
    assert a.fleet.epoch == 0 and b.fleet.epoch == 0
    # the rule still catches a dead one: b stops beating for good, a declares it lost
    b.store.heartbeat = away  # type: ignore[method-assign]
    await advance(clock, 2 * TTL, a, b, step=0.25)
    listed = {i.instance_id: i for i in await istore(a).list_instances(ttl=TTL)}
    assert listed["b"].lost_at is not None and listed["b"].lost_by == "a"


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_zombies_claims_made_after_it_was_declared_lost_are_not_lost(
    make: Make, clock: FakeClock, running: list
) -> None:
    """Claims a process made early between being declared lost and learning it were
    never seen by the survivors: they are withdrawn and claimed again, so each slot still
    runs once (they used to be dropped: no run, no row -- silent gaps)."""
    z = make(instance_id="zombie", instance_ttl=TTL)
    s = make(instance_id="survivor", instance_ttl=TTL, claim_ahead=0)  # claims at the instant
    zrec, srec = Recorder(), Recorder()
    ids = [f"j{n}" for n in range(8)]
    for job_id in ids:
        z.job("60s", id=job_id)(zrec)
        s.job("60s", id=job_id)(srec)
    for sched in (z, s):
        await sched.start()
        running.append(sched)
    await advance(clock, 50, z, s, step=0.25)
    # the zombie's heartbeats stop (its loop goes on): the survivor declares it lost
    for t in [t for t in z.life.tasks if "heartbeat_loop" in repr(t.get_coro())]:
        t.cancel()
    await advance(clock, TTL + 2, z, s, step=0.25)
    listed = {i.instance_id: i for i in await istore(s).list_instances(ttl=TTL)}
    assert listed["zombie"].lost_at is not None
    # ... and afterwards claims its share of T0 + 60 early, not knowing
    await advance(clock, 60 - 50 - (TTL + 2) - 0.25, z, s, step=0.25)
    assert z.early.pending is not None and any(r.won for _, r, _ in z.early.pending.ready)
    await advance(clock, 3, z, s, step=0.25)
    await settle(z, s)
    assert z.fleet.epoch == 1  # it learnt it had been declared lost
    ran = Counter(c.job_id for c in zrec.calls + srec.calls if c.slot.timestamp() == T0 + 60)
    assert ran == Counter({job_id: 1 for job_id in ids}), ran
    for job_id in ids:
        rows = [r for r in await s.runs_async(job_id) if r.slot.timestamp() == T0 + 60]
        assert [r.status for r in rows] == [RunStatus.SUCCEEDED], rows


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_zombies_claim_it_cannot_withdraw_gets_its_final_row(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie claims a slot early after the fleet declared it lost (the survivors broke
    the claims they saw before this one existed), then learns it was lost and cannot
    withdraw the claim (the store's answer did not come). Nobody else will see that claim:
    the zombie records the slot ``interrupted / instance_lost`` (chaos ``flaky``: 16
    slots without any row)."""
    from cronfleet.errors import StoreUnavailable

    z = make(instance_id="zombie", instance_ttl=TTL)
    zrec = Recorder()
    z.job("60s", id="j")(zrec)
    await z.start()
    running.append(z)
    await advance(clock, 30, z, step=0.5)
    await freeze(z)
    s = make(instance_id="survivor", instance_ttl=TTL)
    srec = Recorder()
    s.job("60s", id="j")(srec)
    await s.start()
    running.append(s)
    await advance(clock, TTL + 2.5, s, step=0.25)  # the survivor declares the zombie lost
    assert "zombie" not in s.fleet.live
    await advance(clock, T0 + 59.25 - clock.now(), s, step=0.25)
    z.life.stopping = False
    await z.early.claim(T0 + 60, clock.now())  # before the survivor's early claim
    assert z.early.pending is not None and [r.won for _, r, _ in z.early.pending.ready] == [True]

    async def unanswered(items: Any) -> int:
        raise StoreUnavailable("no answer")

    monkeypatch.setattr(z.store, "withdraw", unanswered)
    await advance(clock, 1.0, s, step=0.25)  # the survivor finds the slot claimed
    await z.loop.fire_due(clock.now())
    await settle(z, s)
    rows = [r for r in await s.runs_async("j") if r.slot.timestamp() == T0 + 60]
    assert [(r.status, r.reason, r.instance_id) for r in rows] == [
        (RunStatus.INTERRUPTED, "instance_lost", "zombie")]
    ran = [c.slot.timestamp() for c in zrec.calls + srec.calls]
    assert T0 + 60 not in ran  # nobody ran it: its one row says why
    z.life.stopping = True
