"""``max_instances`` = N: a job's lease as N lanes (lane 0 in the job's state row, lanes
1..N-1 beside it), on every store that has lanes (``Store.lanes``: every built-in store)."""

from __future__ import annotations

import asyncio

import pytest

from cronfleet.clock import FakeClock
from cronfleet.errors import StoreError
from cronfleet.model import RunStatus, TriggeredBy
from cronfleet.store import Store
from cronfleet.store.base import (
    Dispatch,
    EarlyClaimStore,
    Finish,
    Instance,
    InstanceStore,
    Start,
    has_lanes,
)

from .conftest import T0, StoreFactory

S = TriggeredBy.SCHEDULE
TTL = 15.0


def item(job: str, slot: float, lanes: int, **kw: object) -> Dispatch:
    d = Dispatch(job_id=job, slot=slot, triggered_by=S, lease=True, **kw)  # type: ignore[arg-type]
    d.lanes = lanes
    return d


@pytest.fixture(autouse=True)
def _lanes_only(store_kind: str, make_store: StoreFactory) -> None:
    if not has_lanes(make_store()):
        pytest.skip(f"the {store_kind} store has no lease lanes yet")


async def test_n_runs_hold_the_lease_and_the_next_is_skipped_naming_the_limit(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    got = []
    for i, (s, who) in enumerate([(store, "one"), (other, "two"), (store, "one")]):
        [d] = await s.dispatch([item("a", T0 + i, 3, hold=60)], who)
        got.append(d)
    assert all(d.started for d in got)
    assert len({d.token for d in got}) == 3
    [fourth] = await other.dispatch([item("a", T0 + 3, 3, hold=60)], "two")
    assert fourth.won and not fourth.started
    assert fourth.run is not None and fourth.run.status is RunStatus.SKIPPED
    assert fourth.run.reason == "already_executing"
    assert fourth.holder == "one, two"
    assert fourth.run.logs == [
        "Skipped: 3 of 3 instances running (max_instances = 3; lanes held by one, two)"
    ]
    # lane 0 is the job's state row as ever
    st = (await other.read_states(["a"]))["a"]
    assert st.lease_holder == "one" and st.lease_token == got[0].token
    # a run ends (the middle lane): exactly one more may start, then the limit again
    run = got[1].run
    assert run is not None
    run.status = RunStatus.SUCCEEDED
    await other.finish([Finish(run, release_token=got[1].token)])
    [fifth] = await other.dispatch([item("a", T0 + 4, 3, hold=60)], "two")
    [sixth] = await store.dispatch([item("a", T0 + 5, 3, hold=60)], "one")
    assert fifth.started and not sixth.started
    # a stale token releases nothing
    await other.finish([Finish(run, release_token=got[1].token)])
    [seventh] = await store.dispatch([item("a", T0 + 6, 3, hold=60)], "one")
    assert not seventh.started


async def test_one_batch_takes_several_lanes_of_one_job(store: Store) -> None:
    await store.ensure_jobs(["a", "b"])
    got = await store.dispatch([item("a", T0 + i, 2, hold=60) for i in range(3)], "one")
    assert [d.started for d in got] == [True, True, False]
    assert got[2].run is not None and got[2].run.reason == "already_executing"
    with pytest.raises(StoreError, match="one lease per job"):
        await store.dispatch([item("b", T0, 1, hold=60), item("b", T0 + 1, 1, hold=60)], "one")


async def test_the_hot_path_and_the_early_claim_take_lanes(store: Store) -> None:
    await store.ensure_jobs(["a"])
    fast = await store.dispatch([item("a", T0 + i, 2, hold=60, record=False) for i in range(2)],
                                "one")
    assert all(d.won and d.started for d in fast)
    early = Dispatch.early_claim("a", T0 + 5, hold=60)
    early.lanes = 2
    [busy] = await store.dispatch([early], "one")
    assert busy.busy and not busy.won  # both lanes held: the early claim is given back
    assert fast[1].run is not None
    fast[1].run.status = RunStatus.SUCCEEDED
    await store.finish([Finish(fast[1].run, release_token=fast[1].token)])
    early = Dispatch.early_claim("a", T0 + 5, hold=60)
    early.lanes = 2
    [kept] = await store.dispatch([early], "one")
    assert kept.won and not kept.busy


async def test_pending_runs_start_on_a_free_lane(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a"])
    [first] = await store.dispatch([item("a", T0, 2, hold=60)], "one")
    [pend] = await other.dispatch([item("a", T0 + 1, 2, hold=60, defer=True)], "two")
    assert first.started and pend.run is not None and pend.run.id is not None
    start = Start(pend.run.id, "a", pend.token, lease=True, hold=60, wait_if_busy=True, lanes=2)
    [go] = await other.start([start], "two")
    assert go.run is not None and go.run.status is RunStatus.RUNNING
    [third] = await other.dispatch([item("a", T0 + 2, 2, hold=60, defer=True)], "two")
    assert third.run is not None and third.run.id is not None
    s3 = Start(third.run.id, "a", third.token, lease=True, hold=60, wait_if_busy=True, lanes=2)
    [wait] = await other.start([s3], "two")
    assert wait.run is None and wait.holder == "one, two"
    s3.wait_if_busy = False
    [skip] = await other.start([s3], "two")
    assert skip.run is not None and skip.run.status is RunStatus.SKIPPED
    assert skip.run.logs[-1].startswith("Skipped: 2 of 2 instances running")


async def test_lanes_expire_renew_and_are_reaped(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [live] = await store.dispatch([item("a", T0, 2, hold=30)], "alive")
    # lane 1: a holder that died before its row was written (hot path)
    [dead] = await store.dispatch([item("a", T0 + 1, 2, hold=30, record=False)], "dead")
    assert live.started and dead.started
    clock.advance(25)
    await store.renew_leases([("a", live.token, 30)])  # type: ignore[list-item]
    clock.advance(10)  # lane 1 expired, lane 0 renewed
    first, second = await asyncio.gather(store.reap_orphans("x"), other.reap_orphans("y"))
    reaped = first + second
    assert [r.fencing_token for r in reaped] == [dead.token]
    assert reaped[0].status is RunStatus.INTERRUPTED and "dead" in reaped[0].logs[-1]
    # the reaped lane is free; the renewed one is not
    [again] = await other.dispatch([item("a", T0 + 35, 2, hold=30)], "two")
    [over] = await other.dispatch([item("a", T0 + 36, 2, hold=30)], "two")
    assert again.started and not over.started
    assert over.holder == "alive, two"


async def test_a_lost_instances_lanes_are_broken(
    store: Store, other: Store, clock: FakeClock
) -> None:
    dead, alive = store, other
    assert isinstance(dead, InstanceStore) and isinstance(alive, InstanceStore)
    await dead.ensure_jobs(["a"])
    await dead.heartbeat(Instance("dead", "h", 1, "all", "1"), ttl=TTL)
    await alive.heartbeat(Instance("alive", "h", 2, "all", "1"), ttl=TTL)
    [mine] = await alive.dispatch([item("a", T0, 2, hold=3600)], "alive")
    [gone] = await dead.dispatch([item("a", T0 + 1, 2, hold=3600, record=False)], "dead")
    assert mine.started and gone.started
    clock.advance(16)
    await alive.heartbeat(Instance("alive", "h", 2, "all", "1"), ttl=TTL)
    lost = await alive.break_lost("alive", ttl=TTL)
    assert [r.fencing_token for r in lost.runs] == [gone.token]
    assert lost.runs[0].reason == "instance_lost"
    [next_] = await alive.dispatch([item("a", T0 + 17, 2, hold=3600)], "alive")
    assert next_.started  # the dead instance's lane was released


async def test_a_lane_taken_over_keeps_the_dead_holders_run_and_renewed_lanes_live(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [zero] = await store.dispatch([item("a", T0, 3, hold=30)], "alive")
    [one] = await store.dispatch([item("a", T0 + 1, 3, hold=30)], "alive")  # lane 1
    # lane 2: a holder that died before its row was written (hot path)
    [dead] = await store.dispatch([item("a", T0 + 2, 3, hold=30, record=False)], "dead")
    assert zero.started and one.started and dead.started
    clock.advance(25)
    await store.renew_leases([("a", zero.token, 30), ("a", one.token, 30)])  # type: ignore[list-item]
    clock.advance(10)  # lane 2 expired; lanes 0 and 1 renewed
    [took] = await other.dispatch([item("a", T0 + 35, 3, hold=30)], "two")
    assert took.started  # the expired lane, taken over: the dead run is kept first ...
    reaped = await other.reap_orphans("x")
    # ... and the reaper marks it (nothing else: the renewed lanes' runs are live)
    assert [r.fencing_token for r in reaped] == [dead.token]
    assert reaped[0].status is RunStatus.INTERRUPTED and "dead" in reaped[0].logs[-1]
    [over] = await other.dispatch([item("a", T0 + 36, 3, hold=30)], "two")
    assert not over.started and over.holder == "alive, two"


async def test_withdrawing_an_early_claim_frees_its_lane(store: Store) -> None:
    assert isinstance(store, EarlyClaimStore)
    await store.ensure_jobs(["a"])
    [first] = await store.dispatch([item("a", T0, 2, hold=60)], "one")
    early = Dispatch.early_claim("a", T0 + 5, hold=60)
    early.lanes = 2
    [kept] = await store.dispatch([early], "one")  # lane 1
    assert first.started and kept.won and not kept.busy and kept.token is not None
    assert await store.withdraw([("a", T0 + 5, kept.token)]) == 1
    [again] = await store.dispatch([item("a", T0 + 6, 2, hold=60)], "one")
    assert again.started  # lane 1 was released with the claim
