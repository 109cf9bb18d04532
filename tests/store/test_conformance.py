"""The Store contract, checked identically for every store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cronfleet.clock import FakeClock
from cronfleet.model import RunStatus, TriggeredBy
from cronfleet.store import Store
from cronfleet.store.base import (
    Dispatch,
    EarlyClaimStore,
    Finish,
    RunCursor,
    RunFilter,
    Skip,
    Start,
)

from .conftest import T0, StoreFactory

S = TriggeredBy.SCHEDULE


def slot_item(job: str, slot: float, **kw: object) -> Dispatch:
    return Dispatch(job_id=job, slot=slot, triggered_by=S, **kw)  # type: ignore[arg-type]


async def test_open_is_idempotent_and_concurrent_opens_are_safe(make_store: StoreFactory) -> None:
    stores = [make_store() for _ in range(6)]
    await asyncio.gather(*(s.open() for s in stores))
    await stores[0].open()
    states = await stores[1].ensure_jobs(["a"])
    assert states["a"].created_at is not None
    await asyncio.gather(*(s.close() for s in stores))


async def test_ensure_jobs_creates_rows_once(store: Store, clock: FakeClock) -> None:
    first = await store.ensure_jobs(["a", "b"])
    clock.advance(60)
    again = await store.ensure_jobs(["a", "b", "c"])
    assert set(again) == {"a", "b", "c"}
    assert again["a"].created_at == first["a"].created_at
    assert again["c"].created_at is not None
    assert again["c"].created_at > first["a"].created_at  # type: ignore[operator]
    assert again["a"].enabled_override is None and again["a"].lease_holder is None


async def test_ensured_ids_are_remembered_only_where_claims_read_them(
        store: Store, store_kind: str) -> None:
    """The SQL stores remember which jobs have a state row (their claims skip the insert
    for those); memory and Redis ensure the row inside each claim, so they hold no set of
    every job id (#27: ~100 bytes a job for nothing)."""
    ids = [f"j{i}" for i in range(50)]
    await store.ensure_jobs(ids)
    known = store.transport.known  # type: ignore[attr-defined]
    if store_kind in ("memory", "redis"):
        assert known is None
    else:
        assert known is not None and set(ids) <= known


async def test_claims_are_unique_per_slot_across_instances(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a", "b"])
    batch = [slot_item("a", T0), slot_item("b", T0)]
    mine, theirs = await asyncio.gather(
        store.dispatch(batch, "one"), other.dispatch(list(batch), "two")
    )
    for job in ("a", "b"):
        won = [r for r in mine + theirs if r.request.job_id == job and r.won]
        assert len(won) == 1, job
        assert won[0].run is not None and won[0].run.fencing_token == won[0].token
    lost = [r for r in mine + theirs if not r.won]
    assert all(r.run is None and r.token is None for r in lost)
    runs = await store.list_runs(limit=10)
    assert sorted(r.job_id for r in runs) == ["a", "b"]


async def test_fencing_tokens_only_grow(store: Store) -> None:
    await store.ensure_jobs(["a"])
    tokens = []
    for i in range(5):
        [res] = await store.dispatch([slot_item("a", T0 + i)], "one")
        tokens.append(res.token)
    [manual] = await store.dispatch([slot_item("a", T0, claim="token", manual=True)], "one")
    tokens.append(manual.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


async def test_run_rows_record_the_claim(store: Store) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch(
        [slot_item("a", T0, lease=True, hold=90, is_catchup=True, logs=["first line"])], "inst"
    )
    run = res.run
    assert run is not None and run.id is not None
    assert run.status is RunStatus.RUNNING
    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.slot.timestamp() == T0
    assert stored.instance_id == "inst"
    assert stored.fencing_token == res.token
    assert stored.is_catchup and stored.logs == ["first line"]
    assert stored.deadline is not None and stored.deadline.timestamp() == pytest.approx(T0 + 90)


async def test_lease_blocks_overlap_and_names_holder(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a"])
    [first] = await store.dispatch([slot_item("a", T0, lease=True, hold=60)], "one")
    assert first.started
    [second] = await other.dispatch([slot_item("a", T0 + 1, lease=True, hold=60)], "two")
    assert second.won and not second.started
    assert second.holder == "one"
    assert second.run is not None and second.run.status is RunStatus.SKIPPED
    assert second.run.reason == "already_executing"
    assert second.run.result == {"skipped": True, "reason": "already_executing"}
    assert second.run.logs == ["Skipped: the previous run has not finished (lease held by one)"]
    assert second.run.success
    # QUEUE_ONE: the run waits (pending) instead
    [third] = await other.dispatch(
        [slot_item("a", T0 + 2, lease=True, hold=60, wait_if_busy=True)], "two"
    )
    assert third.run is not None and third.run.status is RunStatus.PENDING
    assert third.holder == "one"
    state = (await other.read_states(["a"]))["a"]
    assert state.lease_holder == "one" and state.lease_token == first.token


async def test_finish_releases_lease_and_records_outcome(store: Store, clock: FakeClock) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=60)], "one")
    run = res.run
    assert run is not None
    clock.advance(2)
    run.status = RunStatus.FAILED
    run.error = "ValueError: boom"
    run.result = {"n": 1}
    run.logs.append("hello")
    from cronfleet.clock import from_ts

    run.started_at = from_ts(T0 + 0.5)
    run.finished_at = from_ts(T0 + 2)
    await store.finish([Finish(run, release_token=res.token)])
    stored = await store.get_run(run.id)  # type: ignore[arg-type]
    assert stored is not None
    assert stored.status is RunStatus.FAILED and stored.error == "ValueError: boom"
    assert stored.result == {"n": 1} and stored.logs == ["hello"]
    assert stored.duration == pytest.approx(1.5)
    assert stored.lateness == pytest.approx(0.5)
    state = (await store.read_states(["a"]))["a"]
    assert state.lease_holder is None
    [again] = await store.dispatch([slot_item("a", T0 + 60, lease=True, hold=60)], "two")
    assert again.started


async def test_release_with_a_stale_token_keeps_the_new_lease(
    store: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [old] = await store.dispatch([slot_item("a", T0, lease=True, hold=10)], "one")
    clock.advance(11)  # the lease expired: another instance may take it
    [new] = await store.dispatch([slot_item("a", T0 + 11, lease=True, hold=10)], "two")
    assert new.started
    assert old.run is not None
    old.run.status = RunStatus.SUCCEEDED
    await store.finish([Finish(old.run, release_token=old.token)])
    state = (await store.read_states(["a"]))["a"]
    assert state.lease_holder == "two" and state.lease_token == new.token


async def test_expired_lease_can_be_taken(store: Store, other: Store, clock: FakeClock) -> None:
    await store.ensure_jobs(["a"])
    await store.dispatch([slot_item("a", T0, lease=True, hold=30)], "one")
    clock.advance(29)
    [busy] = await other.dispatch([slot_item("a", T0 + 29, lease=True, hold=30)], "two")
    assert not busy.started
    clock.advance(2)
    [free] = await other.dispatch([slot_item("a", T0 + 31, lease=True, hold=30)], "two")
    assert free.started


async def test_missed_slots_are_claimed_and_recorded(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a"])
    item = slot_item("a", T0 - 60, skip_reason="missed", is_catchup=True, logs=["why"])
    [res] = await store.dispatch([item], "one")
    assert res.won and res.run is not None
    assert res.run.status is RunStatus.SKIPPED and res.run.reason == "missed"
    # the slot is consumed: nobody can run it afterwards
    [late] = await other.dispatch([slot_item("a", T0 - 60, lease=True)], "two")
    assert not late.won
    state = (await store.read_states(["a"]))["a"]
    assert state.last_slot is not None and state.last_slot.timestamp() == T0 - 60


async def test_watermark_only_moves_forward(store: Store) -> None:
    await store.ensure_jobs(["a"])
    await store.dispatch([slot_item("a", T0)], "one")
    await store.dispatch([slot_item("a", T0 - 120)], "one")
    state = (await store.read_states(["a"]))["a"]
    assert state.last_slot is not None and state.last_slot.timestamp() == T0


async def test_a_skip_takes_its_slot_so_a_slot_has_one_final_row(store: Store,
                                                                   other: Store) -> None:
    """A claim-less skip takes its slot's claim: a second skip of the slot (another
    instance, another reason, or a repeat in the batch) writes nothing, a slot claimed by
    a run gets no skip row, and a run cannot claim a slot already skipped. Two instances
    that disagree for a moment (one sheds a slot as overloaded, the other runs it) leave
    one final row."""
    await store.ensure_jobs(["a", "b"])
    skips = [Skip("a", T0, "paused", instance_id="one"), Skip("a", T0 + 60, "paused"),
             Skip("a", T0 + 60, "overloaded", instance_id="one")]
    assert await store.record_skips(skips) == 2
    assert await other.record_skips([Skip("a", T0, "paused", instance_id="two")]) == 0
    assert await other.record_skips([Skip("a", T0, "store_unavailable")]) == 0
    runs = await store.list_runs("a")
    assert sorted((r.slot.timestamp(), r.reason) for r in runs) == [
        (T0, "paused"), (T0 + 60, "paused")]
    assert all(r.status is RunStatus.SKIPPED for r in runs)
    state = (await store.read_states(["a"]))["a"]
    assert state.last_slot is not None and state.last_slot.timestamp() == T0 + 60
    # a run and a skip of the same slot, either order: the first keeps the slot
    [late] = await other.dispatch([slot_item("a", T0 + 60)], "two")
    assert not late.won and late.run is None
    [ran] = await store.dispatch([slot_item("b", T0)], "one")
    assert ran.won
    assert await other.record_skips([Skip("b", T0, "overloaded", instance_id="two")]) == 0
    assert [(r.slot.timestamp(), r.status) for r in await store.list_runs("b")] == [
        (T0, RunStatus.RUNNING)]


async def test_override_is_shared_and_complete(
    store: Store, other: Store, clock: FakeClock
) -> None:
    from cronfleet.clock import from_ts

    await store.ensure_jobs(["a"])
    until = from_ts(T0 + 3600)
    state = await store.set_override("a", False, by="ops", note="vendor outage", until=until)
    assert state.enabled_override is False
    seen = (await other.read_states(["a"]))["a"]
    assert seen.enabled_override is False
    assert seen.override_by == "ops" and seen.override_note == "vendor outage"
    assert seen.override_until == until
    assert seen.override_at is not None and seen.override_at.timestamp() == T0
    assert not seen.effective_enabled(True, from_ts(T0 + 10))
    assert seen.effective_enabled(True, from_ts(T0 + 3600))  # a timed pause ends by itself
    await other.set_override("a", None, by="ops", note=None, until=None)
    cleared = (await store.read_states(["a"]))["a"]
    assert cleared.enabled_override is None and cleared.effective_enabled(True, from_ts(T0))
    # an override can be set before the job's first start
    state = await store.set_override("new-job", True, by=None, note=None, until=None)
    assert state.enabled_override is True


async def test_start_runs_deferred_and_queued_runs(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a", "b"])
    [deferred] = await store.dispatch([slot_item("a", T0, lease=True, hold=60, defer=True)], "one")
    assert deferred.run is not None and deferred.run.status is RunStatus.PENDING
    assert (await store.read_states(["a"]))["a"].lease_holder is None  # no lease while pending
    [st] = await store.start(
        [Start(deferred.run.id, "a", deferred.token, lease=True, hold=60)],
        "one",  # type: ignore[arg-type]
    )
    assert st.run is not None and st.run.status is RunStatus.RUNNING
    assert st.run.started_at is not None
    # a queued run on another instance keeps waiting while the lease is held...
    [queued] = await other.dispatch(
        [slot_item("a", T0 + 1, lease=True, hold=60, wait_if_busy=True)], "two"
    )
    assert queued.run is not None and queued.run.status is RunStatus.PENDING
    start = Start(queued.run.id, "a", queued.token, lease=True, hold=60, wait_if_busy=True)  # type: ignore[arg-type]
    [waiting] = await other.start([start], "two")
    assert waiting.run is None and waiting.holder == "one"
    # ...and starts once it is released
    assert st.run is not None
    st.run.status = RunStatus.SUCCEEDED
    await store.finish([Finish(st.run, release_token=deferred.token)])
    [go] = await other.start([start], "two")
    assert go.run is not None and go.run.status is RunStatus.RUNNING
    # without wait_if_busy a busy start becomes an already_executing skip
    [d2] = await store.dispatch([slot_item("a", T0 + 2, lease=True, hold=60, defer=True)], "one")
    [sk] = await store.start([Start(d2.run.id, "a", d2.token, lease=True, hold=60)], "one")  # type: ignore[union-attr,arg-type]
    assert sk.run is not None and sk.run.status is RunStatus.SKIPPED
    assert sk.run.reason == "already_executing" and sk.holder == "two"
    assert sk.run.logs[-1].endswith("(lease held by two)")


async def test_orphans_are_reaped_once(store: Store, other: Store, clock: FakeClock) -> None:
    await store.ensure_jobs(["a", "b"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=30)], "dead")
    [alive] = await store.dispatch([slot_item("b", T0, lease=True, hold=30)], "alive")
    assert await other.reap_orphans("two") == []  # lease still live
    clock.advance(25)
    await store.renew_leases([("b", alive.token, 30)])  # type: ignore[list-item]
    clock.advance(10)
    first, second = await asyncio.gather(store.reap_orphans("one"), other.reap_orphans("two"))
    reaped = first + second
    assert [r.id for r in reaped] == [res.run.id]  # type: ignore[union-attr]
    assert reaped[0].status is RunStatus.INTERRUPTED and reaped[0].reason == "lease_expired"
    assert "dead" in reaped[0].logs[-1]
    assert await store.reap_orphans("one") == []


async def test_reclaim_gives_one_instance_a_higher_token(store: Store, other: Store) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=30)], "dead")
    item = slot_item("a", T0, lease=True, hold=30, reclaim_token=res.token, is_recovery=True)
    mine, theirs = await asyncio.gather(
        store.dispatch([item], "one"), other.dispatch([item], "two")
    )
    winners = [r for r in mine + theirs if r.won]
    assert len(winners) == 1
    assert winners[0].token is not None and res.token is not None
    assert winners[0].token > res.token
    assert winners[0].run is not None and winners[0].run.is_recovery


async def test_list_runs_newest_first_with_filters(store: Store) -> None:
    await store.ensure_jobs(["a", "b"])
    for i in range(5):
        await store.dispatch([slot_item("a", T0 + i), slot_item("b", T0 + i)], "one")
    await store.record_skips([Skip("a", T0 + 10, "paused")])
    runs = await store.list_runs("a", limit=3)
    assert [r.slot.timestamp() for r in runs] == [T0 + 10, T0 + 4, T0 + 3]
    assert [r.slot.timestamp() for r in await store.list_runs("a", status=RunStatus.SKIPPED)] == [
        T0 + 10
    ]
    older = await store.list_runs("a", limit=10, before_id=runs[-1].id)
    assert [r.slot.timestamp() for r in older] == [T0 + 2, T0 + 1, T0]
    assert len(await store.list_runs(limit=100)) == 11
    assert await store.get_run(10_000) is None


async def test_slot_runs_are_list_runs_narrowed(store: Store) -> None:
    """The slot timeline's read: the same rows as the history, newest first, with the
    slot in epoch seconds, the status, the reason and the manual flag."""
    from cronfleet.store.base import SlotRun, SlotRunStore

    assert isinstance(store, SlotRunStore)
    await store.ensure_jobs(["a", "b"])
    for i in range(5):
        await store.dispatch([slot_item("a", T0 + i + 0.25), slot_item("b", T0 + i)], "one")
    await store.record_skips([Skip("a", T0 + 10, "paused")])
    full = await store.list_runs("a", limit=100)
    narrow = await store.slot_runs("a", limit=100)
    assert narrow == [SlotRun(r.id, r.slot.timestamp(), r.status, r.reason, r.manual)
                      for r in full if r.id is not None]
    assert [(n.at, n.status, n.reason) for n in narrow[:2]] == [
        (T0 + 10, RunStatus.SKIPPED, "paused"), (T0 + 4.25, RunStatus.RUNNING, None)]
    assert all(isinstance(n.status, RunStatus) and isinstance(n.manual, bool)
               for n in narrow)
    page = await store.slot_runs("a", limit=2, before_id=narrow[1].id)
    assert page == narrow[2:4]
    assert await store.slot_runs("nobody", limit=10) == []


@pytest.fixture(autouse=True)
def tiny_prune_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite prunes in id ranges: with ranges of 2 ids every retention test below crosses
    batch boundaries, so the rule must hold across them."""
    from cronfleet.store.sqlite import transport as sqlite_store

    monkeypatch.setattr(sqlite_store, "PRUNE_BATCH", 2)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


async def test_find_runs_across_jobs_filters_and_pages(store: Store, other: Store) -> None:
    from cronfleet.store.base import SlotRun, SlotRunStore, slot_runs_of

    assert isinstance(store, SlotRunStore)
    jobs = ["a", "b", "c"]
    await store.ensure_jobs(jobs)
    # slots T0..T0+9 of three jobs, alternating instances; every third one fails
    for i in range(10):
        who = store if i % 2 == 0 else other
        done = await who.dispatch([slot_item(j, T0 + i) for j in jobs], f"inst{i % 2}")
        for k, res in enumerate(done):
            assert res.run is not None
            res.run.status = RunStatus.FAILED if (i + k) % 3 == 0 else RunStatus.SUCCEEDED
            res.run.instance_id = f"inst{i % 2}"
            await who.finish([Finish(res.run)])
    await store.record_skips([Skip("a", T0 + 20, "paused")])
    everything = await store.list_runs(limit=1000)
    assert len(everything) == 31

    def expect(where: RunFilter) -> list[tuple[float, str]]:
        rows = sorted(everything, key=lambda r: (r.slot, r.id or 0), reverse=True)
        return [(r.slot.timestamp(), r.job_id) for r in rows if where.matches(r)]

    filters = [
        RunFilter(),
        RunFilter(status=RunStatus.FAILED),
        RunFilter(status=RunStatus.FAILED, since=_at(T0 + 3), until=_at(T0 + 8)),
        RunFilter(job_id="b", status=RunStatus.SUCCEEDED),
        RunFilter(instance_id="inst1", since=_at(T0 + 5)),
        RunFilter(status=RunStatus.SKIPPED),
        RunFilter(until=_at(T0)),
        RunFilter(job_ids=frozenset({"a", "c"}), status=RunStatus.SUCCEEDED),
        RunFilter(job_ids=frozenset(), status=RunStatus.SUCCEEDED),
    ]
    for where in filters:
        # paged 4 at a time through the cursor, text form included: every run once, in order
        got: list[tuple[float, str]] = []
        after = None
        for _ in range(20):
            page = await store.find_runs(where, limit=4, after=after)
            assert len(page.runs) <= 4
            got += [(r.slot.timestamp(), r.job_id) for r in page.runs]
            if page.next_cursor is None:
                break
            assert len(page.runs) == 4
            after = RunCursor.decode(page.next_cursor.encode())
        assert got == expect(where), where
        # the narrow read: the same runs, pages and cursors, as (job id, SlotRun) pairs
        narrow: list[tuple[str, SlotRun]] = []
        after = None
        for _ in range(20):
            spage = await store.find_slot_runs(where, limit=4, after=after)
            wpage = await store.find_runs(where, limit=4, after=after)
            assert spage.next_cursor == wpage.next_cursor
            assert spage.runs == [(r.job_id, s) for r in wpage.runs for s in slot_runs_of([r])]
            narrow += spage.runs
            if spage.next_cursor is None:
                break
            after = spage.next_cursor
        assert [(s.at, j) for j, s in narrow] == expect(where), where
    assert expect(RunFilter(status=RunStatus.FAILED))  # the data covers every filter
    window = RunFilter(status=RunStatus.FAILED, since=_at(T0 + 3), until=_at(T0 + 8))
    assert len(expect(window)) == 5
    assert expect(RunFilter(until=_at(T0))) == []
    # a run written after the first page was read does not shift the pages that follow
    first = await store.find_runs(RunFilter(status=RunStatus.FAILED), limit=2)
    [late] = await store.dispatch([slot_item("c", T0 + 30)], "inst0")
    assert late.run is not None
    late.run.status = RunStatus.FAILED
    await store.finish([Finish(late.run)])
    rest = await store.find_runs(RunFilter(status=RunStatus.FAILED), limit=100,
                                 after=first.next_cursor)
    failed = expect(RunFilter(status=RunStatus.FAILED))
    assert [(r.slot.timestamp(), r.job_id) for r in first.runs + rest.runs] == failed


def test_run_cursor_text_is_checked() -> None:
    assert RunCursor.decode(RunCursor(1_700_000_000_123, 42).encode()) == RunCursor(
        1_700_000_000_123, 42
    )
    for bad in ("", "12", "x.1", "1.y", "1.2.3"):
        with pytest.raises(ValueError, match="cursor"):
            RunCursor.decode(bad)


async def test_prune_keeps_each_jobs_newest_claim(store: Store, clock: FakeClock) -> None:
    await store.ensure_jobs(["monthly", "often"])
    await store.dispatch([slot_item("monthly", T0)], "one")
    for i in range(3):
        [r] = await store.dispatch([slot_item("often", T0 + i)], "one")
        assert r.run is not None
        r.run.status = RunStatus.SUCCEEDED
        from cronfleet.clock import from_ts

        r.run.finished_at = from_ts(T0 + i)
        await store.finish([Finish(r.run)])
    clock.advance(40 * 86400)
    claims, runs = await store.prune(
        claims_older_than=clock.now() - 7 * 86400,
        runs_older_than=clock.now() - 30 * 86400,
        runs_per_job=1000,
    )
    assert claims == 2  # the two older "often" claims; each job keeps its newest
    assert runs == 3  # finished runs older than 30 days; the open "monthly" run stays
    # the kept claims still block a second run of their slots
    dups = await store.dispatch([slot_item("monthly", T0), slot_item("often", T0 + 2)], "two")
    assert [d.won for d in dups] == [False, False]


async def test_prune_caps_runs_per_job(store: Store) -> None:
    await store.ensure_jobs(["a"])
    await store.record_skips([Skip("a", T0 + i, "paused") for i in range(12)])
    _, runs = await store.prune(claims_older_than=0, runs_older_than=0, runs_per_job=5)
    assert runs == 7
    kept = await store.list_runs("a", limit=100)
    assert [r.slot.timestamp() for r in kept] == [T0 + i for i in range(11, 6, -1)]


async def test_one_lease_per_job_per_batch(store: Store) -> None:
    from cronfleet.errors import StoreError

    await store.ensure_jobs(["a"])
    with pytest.raises(StoreError, match="at most one lease per job"):
        await store.dispatch(
            [slot_item("a", T0, lease=True), slot_item("a", T0 + 1, lease=True)], "one"
        )
    assert await store.list_runs("a") == []  # the transaction rolled back


async def test_fast_path_run_is_written_by_finish(store: Store, clock: FakeClock) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=60, record=False)], "one")
    assert res.started and res.run is not None and res.run.id is None
    assert await store.list_runs("a") == []  # not written yet: the handler starts first
    run = res.run
    await store.finish([Finish(run)])  # "started" row, lease kept
    assert run.id is not None
    [stored] = await store.list_runs("a")
    assert stored.status is RunStatus.RUNNING and stored.fencing_token == res.token
    assert (await store.read_states(["a"]))["a"].lease_token == res.token
    run.status = RunStatus.SUCCEEDED
    await store.finish([Finish(run, release_token=res.token)])
    [stored] = await store.list_runs("a")
    assert stored.status is RunStatus.SUCCEEDED and stored.id == run.id
    assert (await store.read_states(["a"]))["a"].lease_holder is None
    # a run that ends before its "started" row was written is inserted once, complete
    [res2] = await store.dispatch([slot_item("a", T0 + 60, lease=True, record=False)], "one")
    assert res2.run is not None
    res2.run.status = RunStatus.FAILED
    res2.run.error = "boom"
    await store.finish([Finish(res2.run, release_token=res2.token)])
    runs = await store.list_runs("a")
    assert [(r.status, r.error) for r in runs] == [
        (RunStatus.FAILED, "boom"),
        (RunStatus.SUCCEEDED, None),
    ]


async def test_reaper_writes_the_run_a_dead_holder_never_recorded(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [res] = await store.dispatch([slot_item("a", T0, lease=True, hold=30, record=False)], "dead")
    clock.advance(31)
    [orphan] = await other.reap_orphans("two")
    assert orphan.status is RunStatus.INTERRUPTED and orphan.reason == "lease_expired"
    assert orphan.fencing_token == res.token and orphan.slot.timestamp() == T0
    assert orphan.instance_id == "dead" and orphan.id is not None
    assert await store.reap_orphans("one") == []
    [stored] = await store.list_runs("a")
    assert stored.status is RunStatus.INTERRUPTED
    assert (await store.read_states(["a"]))["a"].lease_holder is None


async def test_read_overrides_returns_only_jobs_with_one(store: Store) -> None:
    await store.ensure_jobs(["a", "b", "c"])
    await store.set_override("b", False, by="ops", note=None, until=None)
    await store.set_override("x", False, by="ops", note=None, until=None)
    got = await store.read_overrides(["a", "b", "c"])
    assert list(got) == ["b"] and got["b"].enabled_override is False


async def test_taking_over_an_expired_lease_keeps_the_dead_holders_run(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await store.ensure_jobs(["a"])
    [dead] = await store.dispatch([slot_item("a", T0, lease=True, hold=30, record=False)], "dead")
    clock.advance(31)
    # the next slot takes the expired lease before any reaper looked
    [nxt] = await other.dispatch([slot_item("a", T0 + 31, lease=True, hold=30)], "two")
    assert nxt.started
    [orphan] = await other.reap_orphans("two")
    assert orphan.status is RunStatus.INTERRUPTED and orphan.fencing_token == dead.token
    assert orphan.instance_id == "dead" and orphan.slot.timestamp() == T0
    assert (await store.read_states(["a"]))["a"].lease_token == nxt.token


def early_store(store: Store) -> EarlyClaimStore:
    if not isinstance(store, EarlyClaimStore):
        pytest.skip(f"{type(store).__name__} does not claim early")
    return store


async def test_early_claim_is_kept_only_with_its_lease(store: Store, other: Store) -> None:
    es = early_store(store)
    await es.ensure_jobs(["a", "b"])
    [busy] = await other.dispatch([slot_item("b", T0 - 60, lease=True, hold=600)], "two")
    assert busy.started
    early = [
        slot_item(j, T0, lease=True, hold=60, record=False, early=True) for j in ("a", "b")
    ]
    a, b = await es.dispatch(early, "one")
    assert a.won and a.token is not None and not a.busy
    assert a.run is not None and a.run.status is RunStatus.RUNNING and a.run.id is None
    assert not b.won and b.busy and b.token is None and b.run is None and b.holder == "two"
    assert [r.job_id for r in await es.list_runs(limit=10)] == ["b"]  # only two's run of b
    # b's early claim left no trace: the slot is claimable at its time
    [later] = await other.dispatch([slot_item("b", T0)], "two")
    assert later.won and later.token is not None and later.token > (a.token or 0)
    # a's claim is real: nobody else gets the slot
    [lost] = await other.dispatch([slot_item("a", T0, lease=True)], "two")
    assert not lost.won and not lost.busy
    state = (await es.read_states(["a"]))["a"]
    assert state.lease_holder == "one" and state.lease_token == a.token


async def test_withdrawn_early_claim_is_as_if_never_made(store: Store, other: Store) -> None:
    es = early_store(store)
    await es.ensure_jobs(["a"])
    [old] = await es.dispatch([slot_item("a", T0 - 60)], "one")
    [a] = await es.dispatch(
        [slot_item("a", T0, lease=True, hold=60, record=False, early=True)], "one"
    )
    assert a.won and a.token is not None
    assert (await es.read_states(["a"]))["a"].last_slot.timestamp() == T0  # type: ignore[union-attr]
    assert await es.withdraw([("a", T0 + 1, a.token)]) == 0  # wrong slot: nothing
    assert await es.withdraw([("a", T0, a.token)]) == 1
    state = (await es.read_states(["a"]))["a"]
    assert state.lease_holder is None and state.lease_token is None
    assert state.last_slot is not None and state.last_slot.timestamp() == T0 - 60
    [b] = await other.dispatch([slot_item("a", T0, lease=True)], "two")
    assert b.won and b.started and b.token is not None and b.token > a.token > (old.token or 0)
    # withdrawing a claim whose lease another run took leaves that lease alone
    assert await es.withdraw([("a", T0, a.token)]) == 0
    assert (await es.read_states(["a"]))["a"].lease_token == b.token


# -- the watermark rule, the retention rule and last_runs (store/base.py) ----------------------


async def test_watermark_is_the_one_rule(store: Store, clock: FakeClock) -> None:
    """``last_slot`` = watermark(newest claimed slot, newest claim-less skip), on every
    store; manual tokens and lost early claims do not move it."""
    from cronfleet.store.base import watermark

    await store.ensure_jobs(["a", "b"])
    assert (await store.read_states(["a"]))["a"].last_slot is None  # from created_at then
    await store.dispatch([slot_item("a", T0 - 60)], "one")
    await store.dispatch([slot_item("a", T0, claim="token", manual=True)], "one")
    await store.record_skips([Skip("a", T0 - 120, "paused")])
    state = (await store.read_states(["a"]))["a"]
    assert state.last_slot is not None
    assert state.last_slot.timestamp() == watermark(T0 - 60, T0 - 120) == T0 - 60
    await store.record_skips([Skip("a", T0 + 30, "disabled")])
    state = (await store.read_states(["a"]))["a"]
    assert state.last_slot is not None and state.last_slot.timestamp() == T0 + 30
    # the same value wherever a state is read
    await store.set_override("a", False, by="t", note=None, until=None)
    over = (await store.read_overrides(["a"]))["a"]
    assert over.last_slot == state.last_slot
    assert (await store.ensure_jobs(["a"]))["a"].last_slot == state.last_slot
    # an early claim kept only with its lease: a busy lease leaves the watermark alone
    await store.dispatch([slot_item("b", T0, lease=True, hold=600)], "one")
    [busy] = await store.dispatch(
        [slot_item("b", T0 + 60, lease=True, hold=60, record=False, early=True)], "two"
    )
    assert busy.busy
    b = (await store.read_states(["b"]))["b"]
    assert b.last_slot is not None and b.last_slot.timestamp() == T0


async def test_retention_keeps_what_the_watermark_reads(store: Store, clock: FakeClock) -> None:
    """The retention rule: each job's newest claimed slot and newest claim-less skip survive any
    age, so the watermark is the same before and after prune; manual tokens do not."""
    await store.ensure_jobs(["a"])
    [first] = await store.dispatch([slot_item("a", T0, lease=True, hold=30)], "one")
    await store.dispatch([slot_item("a", T0 + 60)], "one")
    # a recovery re-claims the older slot with a newer token: the newest SLOT is kept
    assert first.token is not None
    [rec] = await store.dispatch(
        [slot_item("a", T0, reclaim_token=first.token, is_recovery=True)], "one"
    )
    assert rec.won
    await store.dispatch([slot_item("a", T0, claim="token", manual=True)], "one")
    await store.record_skips([Skip("a", T0 - 60, "paused")])
    before = (await store.read_states(["a"]))["a"].last_slot
    clock.advance(400 * 86400)
    claims, _ = await store.prune(
        claims_older_than=clock.now() - 7 * 86400,
        runs_older_than=clock.now() - 30 * 86400,
        runs_per_job=1,
    )
    # slot T0 (re-claimed), the skip's claim of T0 - 60 and the manual token; T0 + 60 stays
    assert claims == 3
    after = (await store.read_states(["a"]))["a"].last_slot
    assert after == before and after is not None and after.timestamp() == T0 + 60
    [dup] = await store.dispatch([slot_item("a", T0 + 60)], "two")
    assert not dup.won
    skips = [r for r in await store.list_runs("a", limit=100) if r.reason == "paused"]
    assert len(skips) == 1  # the newest claim-less skip outlives both age and count limits


async def test_retention_is_the_one_rule(store: Store, clock: FakeClock) -> None:
    """Every store prunes exactly what ``driver.Retention`` keeps: a ledger of slot claims,
    manual tokens, claimed skips, claim-less skips and an open run, cut by age and by
    count, leaves the claims and runs the rule's two methods name (and no other)."""
    from cronfleet.store.driver import ClaimRow, Retention, RunRow

    claims: list[ClaimRow] = []
    await store.ensure_jobs(["a", "b"])
    for i in range(6):
        for job in ("a", "b"):
            clock.advance(3600)
            [d] = await store.dispatch([Dispatch.missed(job, T0 + 60 * i, reason="missed")],
                                       "one")
            assert d.won and d.token is not None
            claims.append(ClaimRow(d.token, job, round((T0 + 60 * i) * 1000),
                                   round(clock.now() * 1000)))
        if i in (1, 4):
            clock.advance(60)
            await store.record_skips([Skip("a", T0 + 60 * i + 30, "paused")])
            # the skip took its slot's claim (its token is the store's: a stand-in here,
            # the rule reads only the job, slot and age)
            claims.append(ClaimRow(-i, "a", round((T0 + 60 * i + 30) * 1000),
                                   round(clock.now() * 1000)))
    clock.advance(60)
    [m] = await store.dispatch([Dispatch.manual_run("b", clock.now(), lease=False)], "one")
    assert m.token is not None and m.run is not None and not m.run.status.finished
    claims.append(ClaimRow(m.token, "b", None, round(clock.now() * 1000)))
    runs = []
    for job in ("a", "b"):
        for r in await store.list_runs(job, limit=1000):
            assert r.id is not None
            runs.append(RunRow(r.id, job, not r.status.finished,
                               None if r.finished_at is None
                               else round(r.finished_at.timestamp() * 1000),
                               r.fencing_token is None))
    cut = T0 + 3.5 * 3600 * 2  # the first three instants are older
    clock.advance(86400)
    rule = Retention(claims_before=cut, runs_before=cut, runs_per_job=3)
    kept_claims, kept_runs = rule.kept_claims(claims), rule.kept_runs(runs)
    assert 0 < len(kept_claims) < len(claims) and 0 < len(kept_runs) < len(runs)
    got = await store.prune(claims_older_than=cut, runs_older_than=cut, runs_per_job=3)
    assert got == (len(claims) - len(kept_claims), len(runs) - len(kept_runs))
    left = {r.id for job in ("a", "b") for r in await store.list_runs(job, limit=1000)}
    assert left == kept_runs
    for c in claims:  # a slot whose claim was pruned can be claimed again, no other
        if c.slot is not None:
            [again] = await store.dispatch([slot_item(c.job_id, c.slot / 1000)], "probe")
            assert again.won is ((c.job_id, c.token) not in kept_claims), c


async def test_retention_ranks_the_runs_left_after_the_age_cut(store: Store) -> None:
    """A job's runs can finish in another order than their ids: a newer run that finished
    long ago goes for its age first, and only then are the runs left ranked by id (it does
    not take one of the ``runs_per_job`` places of the runs that stay)."""
    from cronfleet.clock import from_ts
    from cronfleet.store.driver import Retention, RunRow

    await store.ensure_jobs(["c"])
    ids = []
    for i in range(5):
        [d] = await store.dispatch([slot_item("c", T0 + i)], "one")
        assert d.run is not None
        d.run.status = RunStatus.SUCCEEDED
        d.run.started_at = from_ts(T0 + i)
        d.run.finished_at = from_ts(T0 + 10 if i == 3 else T0 + 10 * 86400 + i)
        await store.finish([Finish(d.run)])
        assert d.run.id is not None
        ids.append(d.run.id)
    cut = T0 + 86400
    rows = [RunRow(r.id, "c", False, round(r.finished_at.timestamp() * 1000), False)
            for r in await store.list_runs("c", limit=100)
            if r.id is not None and r.finished_at is not None]
    expected = Retention(claims_before=T0 - 1, runs_before=cut, runs_per_job=2).kept_runs(rows)
    assert expected == {ids[2], ids[4]}
    await store.prune(claims_older_than=T0 - 1, runs_older_than=cut, runs_per_job=2)
    assert {r.id for r in await store.list_runs("c", limit=100)} == expected


async def test_last_runs_is_the_newest_run_of_each_job(store: Store) -> None:
    await store.ensure_jobs(["a", "b", "c"])
    assert await store.last_runs([]) == {}
    for i in range(3):
        await store.dispatch([slot_item("a", T0 + i), slot_item("b", T0 + i)], "one")
    await store.record_skips([Skip("a", T0 + 10, "paused")])
    last = await store.last_runs(["a", "b", "c", "unknown"])
    assert set(last) == {"a", "b"}
    assert last["a"].reason == "paused" and last["a"].slot.timestamp() == T0 + 10
    assert last["b"].slot.timestamp() == T0 + 2
    newest_b = (await store.list_runs("b", limit=1))[0]
    assert last["b"] == newest_b


async def test_last_slot_runs_are_last_runs_narrowed(store: Store) -> None:
    """The overview's read of every job's newest run: the same runs as ``last_runs``, as
    :class:`SlotRun` rows (id, slot in epoch seconds, status, reason, manual)."""
    from cronfleet.store.base import SlotRun, SlotRunStore

    assert isinstance(store, SlotRunStore)
    await store.ensure_jobs(["a", "b", "c"])
    assert await store.last_slot_runs([]) == {}
    for i in range(3):
        await store.dispatch([slot_item("a", T0 + i + 0.25), slot_item("b", T0 + i)], "one")
    await store.record_skips([Skip("a", T0 + 10, "paused")])
    await store.record_skips([Skip("b", T0 - 50, "missed")])  # an older slot, a newer id
    ids = ["a", "b", "c", "unknown"]
    full = await store.last_runs(ids)
    narrow = await store.last_slot_runs(ids)
    assert narrow == {j: SlotRun(r.id, r.slot.timestamp(), r.status, r.reason, r.manual)
                      for j, r in full.items() if r.id is not None}
    assert set(narrow) == {"a", "b"}
    assert (narrow["a"].at, narrow["a"].status, narrow["a"].reason) == (
        T0 + 10, RunStatus.SKIPPED, "paused")
    assert (narrow["b"].at, narrow["b"].reason) == (T0 - 50, "missed")
    assert all(isinstance(n.status, RunStatus) and isinstance(n.manual, bool)
               for n in narrow.values())
    # since: only the newest runs at or after it, or of one of the statuses given
    assert await store.last_slot_runs(ids, since=T0 + 10) == {"a": narrow["a"]}
    assert await store.last_slot_runs(ids, since=T0 + 10.001) == {}
    assert await store.last_slot_runs(ids, since=T0 + 11, statuses=[RunStatus.SKIPPED]) == \
        narrow
    assert await store.last_slot_runs(ids, since=T0 + 11, statuses=[RunStatus.FAILED]) == {}
    assert await store.last_slot_runs(["b"], since=T0 - 50) == {"b": narrow["b"]}


async def test_last_runs_follow_every_write_to_the_ledger(store: Store, clock: FakeClock) -> None:
    """Each job's newest run as it is claimed, finished and skipped, and once retention
    deleted it (the run before it is then the newest, or the job has none): always the
    ledger's newest row, through both reads."""
    from cronfleet.clock import from_ts
    from cronfleet.store.base import SlotRun, SlotRunStore

    assert isinstance(store, SlotRunStore)

    async def newest(job: str) -> tuple[int, float, RunStatus, str | None] | None:
        runs = await store.list_runs(job, limit=1)
        full = (await store.last_runs([job])).get(job)
        narrow = (await store.last_slot_runs([job])).get(job)
        if not runs:
            assert full is None and narrow is None
            return None
        r = runs[0]
        assert r.id is not None and full == r
        assert narrow == SlotRun(r.id, r.slot.timestamp(), r.status, r.reason, r.manual)
        return r.id, r.slot.timestamp(), r.status, r.reason

    await store.ensure_jobs(["a", "b", "c"])
    assert await newest("a") is None
    [d] = await store.dispatch([slot_item("a", T0)], "one")
    assert d.run is not None
    got = await newest("a")
    assert got is not None and got[0] == d.run.id and got[2] is d.run.status
    d.run.status = RunStatus.FAILED
    d.run.finished_at = from_ts(T0 + 1)
    await store.finish([Finish(d.run)])
    assert await newest("a") == (d.run.id, T0, RunStatus.FAILED, None)
    await store.record_skips([Skip("a", T0 - 60, "missed")])  # an older slot, a newer id
    got = await newest("a")
    assert got is not None and got[1:] == (T0 - 60, RunStatus.SKIPPED, "missed")
    # c: one run, finished long ago; b: its newest run by id finished long ago, the one
    # before it recently
    [d] = await store.dispatch([slot_item("c", T0)], "one")
    assert d.run is not None
    d.run.status = RunStatus.SUCCEEDED
    d.run.finished_at = from_ts(T0 + 10)
    await store.finish([Finish(d.run)])
    assert await newest("c") is not None
    finished = {}
    for i, done in enumerate((T0 + 40 * 86400, T0 + 10)):
        [d] = await store.dispatch([slot_item("b", T0 + i)], "one")
        assert d.run is not None and d.run.id is not None
        d.run.status = RunStatus.SUCCEEDED
        d.run.finished_at = from_ts(done)
        await store.finish([Finish(d.run)])
        finished[d.run.id] = done
    clock.advance(40 * 86400)
    await store.prune(claims_older_than=T0 - 1, runs_older_than=T0 + 86400,
                      runs_per_job=1000)
    await newest("a")  # whatever retention kept of it, both reads agree with the ledger
    assert await newest("c") is None  # its one run was older than the cut
    got = await newest("b")
    assert got is not None and finished[got[0]] == T0 + 40 * 86400
    assert (got[1], got[2]) == (T0, RunStatus.SUCCEEDED)
    assert "c" not in await store.last_slot_runs(["a", "b", "c"])
