"""Instances, heartbeats, lost instances and the late-result fence, on every store."""

from __future__ import annotations

import asyncio

from cronfleet.clock import FakeClock
from cronfleet.model import RunStatus, TriggeredBy
from cronfleet.store import Store
from cronfleet.store.base import Dispatch, Finish, Instance, InstanceStore

from .conftest import T0

S = TriggeredBy.SCHEDULE
TTL = 15.0


def me(name: str) -> Instance:
    return Instance(name, host="h-" + name, pid=100, role="all", version="1.0")


def slot_item(job: str, slot: float, **kw: object) -> Dispatch:
    return Dispatch(job_id=job, slot=slot, triggered_by=S, **kw)  # type: ignore[arg-type]


def istore(s: Store) -> InstanceStore:
    assert isinstance(s, InstanceStore)
    return s


async def test_heartbeat_registers_and_lists_live_instances(
    store: Store, other: Store, clock: FakeClock
) -> None:
    a, b = istore(store), istore(other)
    first = await a.heartbeat(me("one"), ttl=TTL)
    assert not first.lost and first.live == ("one",) and first.now == T0
    clock.advance(5)
    beat = await b.heartbeat(me("two"), ttl=TTL)
    assert beat.live == ("one", "two")
    clock.advance(11)  # "one" last beat 16 s ago: past the ttl
    beat = await b.heartbeat(me("two"), ttl=TTL)
    assert beat.live == ("two",)
    listed = {i.instance_id: i for i in await a.list_instances(ttl=TTL)}
    assert set(listed) == {"one", "two"}
    one = listed["one"]
    assert not one.live and one.host == "h-one" and one.pid == 100 and one.role == "all"
    assert one.version == "1.0" and one.lost_at is None
    assert one.started_at is not None and one.started_at.timestamp() == T0
    assert one.heartbeat_at is not None and one.heartbeat_at.timestamp() == T0
    assert listed["two"].live and listed["two"].heartbeat_at.timestamp() == T0 + 16  # type: ignore[union-attr]
    await b.leave("two")
    assert [i.instance_id for i in await a.list_instances(ttl=TTL)] == ["one"]


async def test_a_usual_beat_writes_the_time_and_plans_and_counts_itself_live(
    store: Store, other: Store, clock: FakeClock
) -> None:
    """The usual beat (outside a transaction on the SQL stores: PostgreSQL reads the live
    set in the same statement, as it was before the beat) answers this instance live with
    the plans it just wrote, even when its previous beat is past the ttl."""
    a, b = istore(store), istore(other)
    await a.heartbeat(me("one"), ttl=TTL)
    await b.heartbeat(me("two"), ttl=TTL)
    clock.advance(TTL + 1)  # both silent past the ttl
    mine = me("one")
    mine.plans = "digest-1"
    beat = await a.heartbeat(mine, ttl=TTL)
    assert not beat.lost and beat.now == T0 + TTL + 1
    assert beat.live == ("one",) and beat.plans == {"one": "digest-1"} and beat.stale
    listed = {i.instance_id: i for i in await b.list_instances(ttl=TTL)}
    assert listed["one"].live and not listed["two"].live
    assert listed["one"].heartbeat_at.timestamp() == T0 + TTL + 1  # type: ignore[union-attr]
    assert (await b.heartbeat(me("two"), ttl=TTL)).plans == {"one": "digest-1", "two": ""}


async def test_a_heartbeat_says_when_another_instance_is_stale_until_it_is_declared_lost(
    store: Store, other: Store, clock: FakeClock
) -> None:
    """``Heartbeat.stale`` tells whether break_lost has work: another instance silent past
    the ttl and not declared lost (the fleet calls break_lost only then)."""
    a, b = istore(store), istore(other)
    assert not (await a.heartbeat(me("one"), ttl=TTL)).stale
    clock.advance(5)
    assert not (await b.heartbeat(me("two"), ttl=TTL)).stale  # "one" is 5 s old: live
    clock.advance(11)  # "one" is 16 s old, "two" 11 s
    beat = await b.heartbeat(me("two"), ttl=TTL)
    assert beat.stale and beat.live == ("two",) and set(beat.plans) == {"two"}
    # its own staleness is no one else's: "one" beats again, it is live and nobody stale
    clock.advance(5)  # "two" is 5 s old
    beat = await a.heartbeat(me("one"), ttl=TTL)
    assert not beat.stale and beat.live == ("one", "two")
    clock.advance(16)  # "two" is 21 s old
    assert (await a.heartbeat(me("one"), ttl=TTL)).stale
    assert [i.instance_id for i in (await a.break_lost("one", ttl=TTL)).instances] == ["two"]
    beat = await a.heartbeat(me("one"), ttl=TTL)
    assert not beat.stale and beat.live == ("one",)  # declared lost: nothing left to break
    await b.leave("two")
    assert not (await a.heartbeat(me("one"), ttl=TTL)).stale


async def test_a_lost_instances_runs_are_interrupted_and_its_leases_broken_once(
    store: Store, other: Store, clock: FakeClock
) -> None:
    dead, alive = istore(store), istore(other)
    await dead.ensure_jobs(["running", "early", "free"])
    await dead.heartbeat(me("dead"), ttl=TTL)
    await alive.heartbeat(me("alive"), ttl=TTL)
    # a run whose row exists, and an early claim (claim + lease, no row yet)
    [run] = await dead.dispatch([slot_item("running", T0, lease=True, hold=3600)], "dead")
    [early] = await dead.dispatch(
        [Dispatch.early_claim("early", T0 + 1, hold=3600)], "dead"
    )
    assert run.started and early.won
    clock.advance(10)
    await alive.heartbeat(me("alive"), ttl=TTL)
    assert (await alive.break_lost("alive", ttl=TTL)).instances == []  # not lost yet
    clock.advance(6)  # dead's last heartbeat is 16 s old
    await alive.heartbeat(me("alive"), ttl=TTL)
    first, second = await asyncio.gather(
        alive.break_lost("alive", ttl=TTL), dead.break_lost("third", ttl=TTL)
    )
    broke = first if first.instances else second
    assert [i.instance_id for i in first.instances + second.instances] == ["dead"]
    assert not (first.runs and second.runs)
    by_job = {r.job_id: r for r in broke.runs}
    assert set(by_job) == {"running", "early"}
    for rec in by_job.values():
        assert rec.status is RunStatus.INTERRUPTED and rec.reason == "instance_lost"
        assert rec.instance_id == "dead" and rec.id is not None
        assert rec.error is not None and "dead" in rec.error
        assert any("declared lost" in line and "dead" in line for line in rec.logs)
    assert by_job["running"].fencing_token == run.token
    assert by_job["early"].fencing_token == early.token
    assert by_job["early"].slot.timestamp() == T0 + 1
    states = await alive.read_states(["running", "early"])
    assert all(st.lease_holder is None for st in states.values())
    # the next slots run on the survivor at once (no hour-long lease in the way)
    got = await alive.dispatch(
        [slot_item("running", T0 + 17, lease=True, hold=3600),
         slot_item("early", T0 + 17, lease=True, hold=3600)], "alive",
    )  # fmt: skip
    assert all(g.started for g in got)
    listed = {i.instance_id: i for i in await alive.list_instances(ttl=TTL)}
    assert listed["dead"].lost_at is not None and listed["dead"].lost_by in ("alive", "third")
    assert await alive.break_lost("alive", ttl=TTL) == type(first)()  # nothing left


async def test_a_woken_zombie_learns_it_was_lost_and_its_late_result_is_fenced(
    store: Store, other: Store, clock: FakeClock
) -> None:
    zombie, alive = istore(store), istore(other)
    await zombie.ensure_jobs(["a", "b"])
    await zombie.heartbeat(me("z"), ttl=TTL)
    [res] = await zombie.dispatch([slot_item("a", T0, lease=True, hold=3600)], "z")
    # a fast-path run: its row is written by the group commit, after the break
    [fast] = await zombie.dispatch(
        [slot_item("b", T0, lease=True, hold=3600, record=False)], "z"
    )
    clock.advance(20)
    await alive.heartbeat(me("alive"), ttl=TTL)
    lost = await alive.break_lost("alive", ttl=TTL)
    assert {r.job_id for r in lost.runs} == {"a", "b"}
    # the zombie wakes: its handlers "succeeded"; the group commit writes that
    assert res.run is not None and fast.run is not None
    for r in (res.run, fast.run):
        r.status = RunStatus.SUCCEEDED
        r.result = {"n": 42}
    fast.run.id = None  # never written by the zombie: an insert
    await zombie.finish(
        [Finish(res.run, release_token=res.token), Finish(fast.run, release_token=fast.token)]
    )
    for job in ("a", "b"):
        rows = await alive.list_runs(job)
        assert len(rows) == 1, rows  # one row per slot: no second outcome
        [row] = rows
        assert row.status is RunStatus.INTERRUPTED and row.reason == "instance_lost"
        late = row.result["late_result"]
        assert late["status"] == "succeeded" and late["result"] == {"n": 42}
        assert late["instance_id"] == "z"
        assert any(line.startswith("Late result from z: succeeded") for line in row.logs)
    beat = await zombie.heartbeat(me("z"), ttl=TTL)
    assert beat.lost and beat.lost_by == "alive" and beat.lost_at is not None
    assert beat.live == ("alive", "z")  # re-registered
    again = await zombie.heartbeat(me("z"), ttl=TTL)
    assert not again.lost


async def test_a_terminal_row_is_never_overwritten_by_another_outcome(
    store: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=60)], "one")
    assert res.run is not None
    res.run.status = RunStatus.INTERRUPTED
    res.run.reason = "shutdown"
    await store.finish([Finish(res.run, release_token=res.token)])
    res.run.status = RunStatus.SUCCEEDED
    res.run.reason = None
    await store.finish([Finish(res.run)])
    [row] = await store.list_runs("a")
    assert row.status is RunStatus.INTERRUPTED and row.reason == "shutdown"
    assert row.result["late_result"]["status"] == "succeeded"
    # the same outcome written twice (a retried group commit) is not a late result
    res.run.status = RunStatus.INTERRUPTED
    res.run.reason = "shutdown"
    await store.finish([Finish(res.run)])
    [row] = await store.list_runs("a")
    assert row.status is RunStatus.INTERRUPTED


async def test_a_resolved_claim_cannot_be_withdrawn(
    store: Store, other: Store, clock: FakeClock
) -> None:
    from cronfleet.store.base import EarlyClaimStore

    zombie, alive = istore(store), istore(other)
    if not isinstance(zombie, EarlyClaimStore):
        return
    await zombie.ensure_jobs(["a"])
    await zombie.heartbeat(me("z"), ttl=TTL)
    [early] = await zombie.dispatch([Dispatch.early_claim("a", T0 + 1, hold=3600)], "z")
    clock.advance(20)
    await alive.heartbeat(me("alive"), ttl=TTL)
    [row] = (await alive.break_lost("alive", ttl=TTL)).runs
    # the zombie wakes and gives its (late) early claim back: the slot stays resolved
    assert early.token is not None
    assert await zombie.withdraw([("a", T0 + 1, early.token)]) == 0
    [again] = await alive.dispatch([Dispatch.missed("a", T0 + 1, reason="missed")], "alive")
    assert not again.won  # still claimed: no second row for the slot
    assert [r.id for r in await alive.list_runs("a")] == [row.id]
