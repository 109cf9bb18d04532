"""One owner plans each job (runtime/ownership.py, docs/concepts.md "One owner plans each
job"): a non-owner makes no store call for a job's slots, and when the live set changes
(an instance joins, hands over at stop, is lost) every slot still ends with exactly one
final row, run once on the handler side -- on every store."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, Job, RunStatus, Scheduler
from cronfleet.runtime.ownership import owner, plan_key, plans_digest
from cronfleet.store.memory import MemoryStore

from .conftest import T0, advance, hold, settle

Make = Callable[..., Scheduler]
TTL = 3.0
KINDS = ["memory", "sqlite", "redis", "postgres"]
JOBS = [f"job-{n:02d}" for n in range(24)]


class Counted:
    """Every handler call, by (job, slot), and which instance ran it."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, float]] = Counter()
        self.by: dict[tuple[str, float], str] = {}

    async def __call__(self, ctx: Any) -> None:
        key = (ctx.job_id, ctx.slot.timestamp())
        self.calls[key] += 1
        self.by[key] = ctx.instance_id


def declare(s: Scheduler, handler: Counted, every: str = "2s") -> Scheduler:
    for job_id in JOBS:
        s.job(every, id=job_id)(handler)
    return s


def claims_of(s: Scheduler) -> dict[str, set[str]]:
    """Wrap ``s.store.dispatch``: the job ids each call of this instance asked for."""
    seen: dict[str, set[str]] = defaultdict(set)
    real = s.store.dispatch

    async def dispatch(items: Any, instance: str) -> Any:
        for it in items:
            seen[instance].add(it.job_id)
        return await real(items, instance)

    s.store.dispatch = dispatch  # type: ignore[method-assign]
    return seen


async def final_rows(s: Scheduler, lo: float, hi: float, every: float = 2.0
                     ) -> dict[tuple[str, float], list[Any]]:
    """The rows of every job's slots in [lo, hi], by (job, slot); each slot present."""
    out: dict[tuple[str, float], list[Any]] = {}
    for job_id in JOBS:
        rows = await s.runs_async(job_id, limit=1000)
        slot = lo
        while slot <= hi:
            out[(job_id, slot)] = [r for r in rows if r.slot.timestamp() == slot]
            slot += every
    return out


def assert_each_slot_once(rows: dict[tuple[str, float], list[Any]], handler: Counted) -> None:
    gaps = [k for k, v in rows.items() if not v]
    twice = {k: v for k, v in rows.items() if len(v) > 1}
    assert not gaps, f"{len(gaps)} slots without a row, e.g. {gaps[:3]}"
    assert not twice, twice
    for key, (row,) in rows.items():
        ran = handler.calls[key]
        assert ran <= 1, (key, ran)
        if row.status is RunStatus.SUCCEEDED:
            assert ran == 1, (key, row)
        else:  # recorded, not run: missed while nobody planned it, or overtaken
            assert ran == 0 and row.status is RunStatus.SKIPPED, (key, row)


async def pair(make: Make, handler: Counted, running: list) -> tuple[Scheduler, Scheduler]:
    """Two instances, a and b, declaring the same jobs, started."""
    a = declare(make(instance_id="a", instance_ttl=TTL), handler)
    b = declare(make(instance_id="b", instance_ttl=TTL), handler)
    for s in (a, b):
        await s.start()
        running.append(s)
    return a, b


def test_the_digest_is_the_set_of_jobs_and_schedules() -> None:
    s1, s2 = Scheduler(store=MemoryStore()), Scheduler(store=MemoryStore())
    s1.job("1s", id="a")(print)
    s1.job("* * * * *", id="b")(print)
    s2.job("* * * * *", id="b")(print)
    s2.job("1s", id="a")(print)
    keys = [[plan_key(j) for j in s.iter_jobs()] for s in (s1, s2)]
    assert plans_digest(keys[0]) == plans_digest(keys[1])  # order does not matter
    s3 = Scheduler(store=MemoryStore())
    s3.job("1s", id="a")(print)
    s3.job("*/2 * * * *", id="b")(print)  # the same id, another schedule: not a peer
    assert plans_digest([plan_key(j) for j in s3.iter_jobs()]) != plans_digest(keys[0])


def test_the_digest_follows_added_removed_and_replaced_jobs() -> None:
    """Kept in O(1) per change (XOR of the jobs' key hashes): always the digest of the
    table as it is; a node-local job is not in it (every process plans it)."""
    s = Scheduler(store=MemoryStore())
    for n in range(5):
        s.job("1s", id=f"j{n}")(print)

    def recomputed() -> str:
        return plans_digest(plan_key(j) for j in s.iter_jobs() if j.locking.value != "node_local")

    first = s.ownership.plans()
    assert first == recomputed()
    s.job("* * * * *", id="extra")(print)
    assert s.ownership.plans() == recomputed() != first
    extra = s.ownership.plans()
    s.replace_job(Job.create("* * * * *", print, id="extra", timezone="Europe/Paris"))
    assert s.ownership.plans() == recomputed() not in (first, extra)  # its zone is planned
    s.replace_job(dataclasses.replace(s.get_job("extra"), description="same plan"))
    assert s.ownership.plans() == recomputed()
    s.remove_job("extra")
    assert s.ownership.plans() == first
    s.job("1s", id="local", locking="node_local")(print)
    assert s.ownership.plans() == first


@pytest.mark.parametrize("store_kind", KINDS)
async def test_only_the_owner_claims_a_jobs_slots(
    make: Make, clock: FakeClock, running: list
) -> None:
    handler = Counted()
    ids = ("a", "b", "c")
    fleet = [declare(make(instance_id=i, instance_ttl=TTL), handler) for i in ids]
    for s in fleet:
        await s.start()
        running.append(s)
    await advance(clock, TTL + 1, *fleet, step=0.25)  # steady heartbeats: all know the fleet
    assert all(s.ownership.peers == ids for s in fleet)
    seen = [claims_of(s) for s in fleet]
    start = clock.now()
    await advance(clock, 10, *fleet, step=0.25)
    for s, got in zip(fleet, seen, strict=True):
        mine = {j for j in JOBS if owner(j, ids) == s.instance_id}
        assert got[s.instance_id] == mine  # its own jobs, and no other
        assert s.ownership.parked == len(JOBS) - len(mine)
    lo = (start // 2 + 1) * 2
    rows = await final_rows(fleet[0], lo, lo + 6)
    assert_each_slot_once(rows, handler)
    assert all(handler.by[k] == owner(k[0], ids) for k in rows)


@pytest.mark.parametrize("store_kind", KINDS)
async def test_a_joining_and_a_leaving_instance_leave_no_slot_behind(
    make: Make, clock: FakeClock, running: list
) -> None:
    """a runs alone; b joins (for a heartbeat interval both plan b's share: the store
    keeps one claim); b stops (its share goes back to a). Every slot: one final row."""
    handler = Counted()
    a = declare(make(instance_id="a", instance_ttl=TTL), handler)
    await a.start()
    running.append(a)
    await advance(clock, 5, a, step=0.25)
    start = clock.now()
    b = declare(make(instance_id="b", instance_ttl=TTL), handler)
    await b.start()
    await advance(clock, 10, a, b, step=0.25)
    assert a.ownership.peers == b.ownership.peers == ("a", "b")
    moved = {j for j in JOBS if owner(j, ("a", "b")) == "b"}
    assert moved and all(handler.by[(j, s)] == "b" for (j, s) in handler.by
                         if j in moved and s > start + 4)
    await b.stop()
    await advance(clock, 10, a, step=0.25)
    assert a.ownership.peers == ("a",) and a.ownership.parked == 0
    await settle(a)
    lo = (start // 2 + 1) * 2
    rows = await final_rows(a, lo, clock.now() - 3)
    assert_each_slot_once(rows, handler)
    late = [k for k, (r,) in rows.items() if r.status is not RunStatus.SUCCEEDED]
    assert not late, late  # the handover at stop cost no slot


async def a_then_b(make: Make, clock: FakeClock, handler: Counted, running: list,
                   prepare: Callable[[Scheduler], object]) -> tuple[Scheduler, Scheduler]:
    """a started and beating for 2 s, then b declared, ``prepare(b)``, and started."""
    a = declare(make(instance_id="a", instance_ttl=TTL), handler)
    await a.start()
    running.append(a)
    await advance(clock, 2, a, step=0.25)
    b = declare(make(instance_id="b", instance_ttl=TTL), handler)
    prepare(b)
    await b.start()
    running.append(b)
    return a, b


@pytest.mark.parametrize("store_kind", KINDS)
async def test_an_instance_joining_a_live_fleet_reads_and_plans_its_share_only(
    make: Make, clock: FakeClock, running: list
) -> None:
    """b starts while a is live: its first heartbeat comes before any planning, so it
    reads the state rows of its own share only and queues nothing else; a's share stays
    a's (every slot still has one final row, run by its owner)."""
    handler = Counted()
    asked: list[str] = []

    def count_reads(b: Scheduler) -> None:
        real = b.store.ensure_jobs

        async def ensure_jobs(job_ids: Any) -> Any:
            asked.extend(job_ids)
            return await real(job_ids)

        b.store.ensure_jobs = ensure_jobs  # type: ignore[method-assign]

    a, b = await a_then_b(make, clock, handler, running, count_reads)
    share = {j for j in JOBS if owner(j, ("a", "b")) == "b"}
    assert 0 < len(share) < len(JOBS)
    assert set(asked) == share and len(asked) == len(share)
    assert set(b.due.next) == share and b.ownership.parked == len(JOBS) - len(share)
    start = clock.now()
    await advance(clock, 8, a, b, step=0.25)
    assert a.ownership.peers == b.ownership.peers == ("a", "b")
    await settle(a, b)
    lo = (start // 2 + 1) * 2
    rows = await final_rows(a, lo, clock.now() - 3)
    assert_each_slot_once(rows, handler)
    assert all(handler.by[k] == owner(k[0], ("a", "b")) for k, (r,) in rows.items()
               if r.status is RunStatus.SUCCEEDED and k[1] > start + 4)


@pytest.mark.parametrize("store_kind", ["memory", "postgres"])
async def test_an_instance_joining_with_other_jobs_plans_them_all(
    make: Make, clock: FakeClock, running: list
) -> None:
    """b declares one more job than a (a rolling deploy): not a peer (their digests
    differ), so b parks nothing at start; both plan every job, and each slot keeps one
    final row."""
    handler = Counted()
    a, b = await a_then_b(make, clock, handler, running,
                          lambda b: b.job("2s", id="only-b")(handler))
    await settle(b)
    assert b.ownership.peers == ("b",) and b.ownership.parked == 0
    assert set(b.due.next) == {*JOBS, "only-b"}
    start = clock.now()
    await advance(clock, 8, a, b, step=0.25)
    await settle(a, b)
    assert a.ownership.parked == 0 and b.ownership.parked == 0
    lo = (start // 2 + 1) * 2
    assert_each_slot_once(await final_rows(a, lo, clock.now() - 3), handler)


@pytest.mark.parametrize("store_kind", KINDS)
async def test_a_lost_instances_share_is_taken_from_the_watermark(
    make: Make, clock: FakeClock, running: list
) -> None:
    """b stops answering (no heartbeat, no loop): a takes its share once b's heartbeat
    is older than the ttl; b's slots due meanwhile each get one final row."""
    handler = Counted()
    a, b = await pair(make, handler, running)
    await advance(clock, 4, a, b, step=0.25)
    assert a.ownership.peers == ("a", "b")
    start = clock.now()
    for t in list(b.life.tasks):
        t.cancel()
    b.life.stopping = True
    b.wake()
    await advance(clock, TTL + 8, a, step=0.25)
    assert a.ownership.peers == ("a",) and a.ownership.parked == 0
    lo = (start // 2 + 1) * 2
    rows = await final_rows(a, lo, clock.now() - 3)
    assert_each_slot_once(rows, handler)
    theirs = {j for j in JOBS if owner(j, ("a", "b")) == "b"}
    assert {handler.by[(j, x)] for (j, x) in rows if j in theirs and x > start + 1} == {"a"}
    # back on time once taken over: within the ttl and a heartbeat interval
    ontime = [(x, r) for (j, x), (r,) in rows.items() if j in theirs and x >= start + TTL + 2]
    assert ontime and all(r.status is RunStatus.SUCCEEDED and r.started_at is not None
                          and r.started_at.timestamp() - x <= 0.5 for x, r in ontime), ontime


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_jobs_added_while_running_go_to_their_owner(
    make: Make, clock: FakeClock, running: list
) -> None:
    handler = Counted()
    a, b = await pair(make, handler, running)
    await advance(clock, 2, a, b, step=0.25)
    for s in (a, b):
        s.job("2s", id="late-comer")(handler)
    await advance(clock, 8, a, b, step=0.25)  # the digests differ, then agree again
    assert a.ownership.peers == b.ownership.peers == ("a", "b")
    boss = owner("late-comer", ("a", "b"))
    other = b if boss == "a" else a
    assert "late-comer" in other.due.parked
    ran = {k: v for k, v in handler.calls.items() if k[0] == "late-comer"}
    assert ran and set(ran.values()) == {1}
    last = max(s for _, s in ran)
    assert handler.by[("late-comer", last)] == boss
    assert last > T0
    for s in (a, b):  # removed: parked nowhere (the count of the log line, .parked)
        parked = s.ownership.parked
        s.remove_job("late-comer")
        assert "late-comer" not in s.due.parked
        assert s.ownership.parked == parked - (s is other)


ODD = [f"odd-{n:02d}" for n in range(12)]  # every 2 s too, at odd seconds
HOLD_TTL = 30.0


@pytest.mark.parametrize("store_kind", KINDS)
async def test_two_planners_one_late_one_on_time_leave_one_row_per_slot(
    make: Make, clock: FakeClock, running: list
) -> None:
    """Two instances that both plan the same jobs (here for the whole test: their job
    tables differ, so they are not peers; while a joining instance's first heartbeat is
    not yet seen, it is the same case, for an interval). One's loop is held inside an
    instant while later slots come due, then records them: the slots of the held instant
    ``missed`` (planned late), the other jobs' slots that came due meanwhile ``skipped /
    overloaded`` (shed). The other instance:

    1. ran them on time: the late one's records take no slot (the run holds its claim),
       no slot gets a second row;
    2. is held a little longer: the first one's records take the slots' claims, and the
       other's own records find them taken.

    Every slot: one final row, a run only where the handler ran, and once."""
    handler = Counted()
    # a claims nothing ahead, so its hold falls inside an instant (b's, in its claim
    # ahead of one: b's late slots are planned, not shed)
    # a ttl past the holds: a held loop here is busy, not lost (its heartbeats are the
    # loop's on a FakeClock; a loss would turn a run into ``interrupted``)
    a = declare(make(instance_id="a", instance_ttl=HOLD_TTL, claim_ahead=0), handler)
    b = declare(make(instance_id="b", instance_ttl=HOLD_TTL), handler)
    for s in (a, b):
        for job_id in ODD:
            s.job("1-59/2 * * * * *", id=job_id)(handler)
    b.job("2s", id="b-only")(handler)  # another table: a and b each plan every job
    for s in (a, b):
        await s.start()
        running.append(s)
    await advance(clock, 4, a, b, step=0.25)
    assert a.ownership.parked == b.ownership.parked == 0
    assert a.ownership.peers == ("a",) and b.ownership.peers == ("b",)
    start = clock.now()

    # 1. a held for 6 s while b runs every slot on time
    gate = hold(a)
    await advance(clock, 6, b, step=0.25)
    held_from, held_to = start, clock.now()
    gate.set()
    await advance(clock, 4, a, b, step=0.25)
    assert a.stats.skips.get("overloaded", 0) >= len(ODD) // 2  # a did shed b's slots

    # 2. both held; a goes on first and records; then b, which finds them taken
    gate_a, gate_b = hold(a), hold(b)
    both_from = clock.now()
    await advance(clock, 6, step=0.25)
    both_to = clock.now()
    gate_a.set()
    await advance(clock, 0.25, a)
    lost_by_b = b.stats.claims_lost
    gate_b.set()
    await advance(clock, 6, a, b, step=0.25)
    await settle(a, b)
    assert b.stats.claims_lost > lost_by_b  # b planned them too: no row

    hi = clock.now() - 3
    rows = {}
    for group, first in ((JOBS, (start // 2 + 1) * 2), (ODD, (start // 2) * 2 + 1)):
        for job_id in group:
            got = await a.runs_async(job_id, limit=1000)
            x = first
            while x <= hi:
                rows[(job_id, x)] = [r for r in got if r.slot.timestamp() == x]
                x += 2
    assert_each_slot_once(rows, handler)
    phase1 = {k: r for k, (r,) in rows.items() if held_from + 1 < k[1] < held_to - 1}
    assert phase1 and all(r.status is RunStatus.SUCCEEDED and r.instance_id == "b"
                          for r in phase1.values()), phase1
    phase2 = {k: r for k, (r,) in rows.items() if both_from + 1 < k[1] < both_to - 1}
    assert phase2 and all(r.status is RunStatus.SKIPPED and r.instance_id == "a"
                          and handler.calls[k] == 0 for k, r in phase2.items()), phase2
    reasons = Counter(r.reason for r in phase2.values())
    assert reasons["overloaded"] and reasons["missed"], reasons  # both kinds of record


async def test_each_update_leaves_every_job_with_its_owner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An update judges only the jobs that can have moved (a join: this instance's; a
    leave: the parked ones; a judgement cut short by a newer view: all of them). Through
    joins, leaves, swaps and updates overtaken mid-way, the parked set is always exactly
    the jobs another peer owns (:func:`owner` over the whole live set)."""
    import asyncio
    import random

    from cronfleet.runtime import ownership as mod

    monkeypatch.setattr(mod, "UPDATE_CHUNK", 7)  # many turns of the loop per update
    s = Scheduler(store=MemoryStore(), instance_id="me")
    ids = [f"j{n}" for n in range(300)]
    for job_id in ids:
        s.job("1s", id=job_id)(print)
    own = s.ownership
    gained: list[str] = []

    async def gain(job_ids: list[str]) -> None:
        gained.extend(job_ids)

    monkeypatch.setattr(own, "gain", gain)
    digest = own.plans()
    judged: list[str] = []
    real_mine = own.mine

    def mine(job: Job) -> bool:
        judged.append(job.id)
        return real_mine(job)

    monkeypatch.setattr(own, "mine", mine)
    others = ["b", "c", "d", "e"]
    rng = random.Random(7)

    def expected(live: tuple[str, ...]) -> set[str]:
        return set() if len(live) < 2 else {j for j in ids if owner(j, live) != "me"}

    def view() -> tuple[str, ...]:
        return ("me", *sorted(rng.sample(others, rng.randint(0, len(others)))))

    def plans(live: tuple[str, ...]) -> dict[str, str]:
        return dict.fromkeys(live, digest)

    for _ in range(60):
        first = view()
        if rng.random() < 0.3:  # a newer view overtakes an update under way
            second = view()
            task = asyncio.get_running_loop().create_task(own.update(first, plans(first)))
            await asyncio.sleep(0)
            await own.update(second, plans(second))
            await task
            first = second
        else:
            await own.update(first, plans(first))
        assert own.peers == first
        assert s.due.parked == expected(first), first
    # a join judges only the jobs this instance plans
    await own.update(("me", "b"), plans(("me", "b")))
    kept = len(ids) - len(s.due.parked)
    judged.clear()
    await own.update(("me", "b", "c"), plans(("me", "b", "c")))
    assert len(judged) == kept
    assert s.due.parked == expected(("me", "b", "c"))
    # a leave judges only the parked ones
    parked = len(s.due.parked)
    judged.clear()
    await own.update(("me", "c"), plans(("me", "c")))
    assert len(judged) == parked
    assert s.due.parked == expected(("me", "c"))
    assert gained  # jobs moved here along the way were handed to gain()
