"""A process's share of the API's jobs (cronfleet/shares.py): the store reads the live
definitions of some buckets only, in ``(bucket, id)`` keyset pages (``job_defs_in``), on
every store; a :class:`Catalog` with ``shares`` holds the definitions of the buckets its
instance owns among its peers, reads those that move to it and lets go of those that
move away."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from cronfleet import Scheduler
from cronfleet.catalog import LET_GO, Catalog
from cronfleet.clock import FakeClock, from_ts
from cronfleet.cron import CronExpr
from cronfleet.runtime.ownership import bucket_key, owner
from cronfleet.shares import BUCKETS, bucket_of
from cronfleet.store import Store
from cronfleet.store.factory import SideTables, side_tables
from cronfleet.store.side import ApiStore, JobDef, ShareKey

from .test_catalog_feed import spec

IDS = [f"job-{i:03d}" for i in range(90)]


class Counting:
    """An :class:`ApiStore` counting the definitions its share reads answered."""

    def __init__(self, inner: ApiStore) -> None:
        self.inner = inner
        self.share_rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_defs_in(self, buckets: Any, after: ShareKey, limit: int
                          ) -> tuple[list[JobDef], ShareKey | None]:
        defs, nxt = await self.inner.job_defs_in(buckets, after, limit)
        self.share_rows += len(defs)
        return defs, nxt


async def read_all(api: ApiStore, buckets: list[int], page: int) -> list[str]:
    out: list[str] = []
    after: ShareKey = (-1, "")
    while True:
        defs, nxt = await api.job_defs_in(buckets, after, page)
        assert len(defs) <= page
        out += [d.id for d in defs]
        if nxt is None:
            return out
        assert defs, "a page that says there is more has rows"
        after = nxt


@pytest.fixture
def side(store: Store, clock: FakeClock) -> SideTables:
    return side_tables(store, clock=clock)


async def test_a_share_reads_the_live_definitions_of_its_buckets_in_key_order(
        side: SideTables) -> None:
    api = side.api
    made, taken = await api.create_job_defs([(j, spec(j)) for j in IDS[:45]], "t", "me")
    assert len(made) == 45 and not taken  # a batch writes each one's bucket too
    for job_id in IDS[45:]:
        assert await api.create_job_def(job_id, "t", spec(job_id), "me") is not None
    for job_id in IDS[::9]:
        assert await api.delete_job_def(job_id, "t", "me")
    live = [j for j in IDS if j not in IDS[::9]]
    buckets = sorted({bucket_of(j) for j in IDS})
    half = buckets[::2]
    expected = sorted((j for j in live if bucket_of(j) in half), key=lambda j: (bucket_of(j), j))
    for page in (1, 4, 1000):  # pages cut inside buckets, between them, or none
        assert await read_all(api, half, page) == expected
    assert await read_all(api, [b for b in range(BUCKETS) if b not in buckets], 10) == []
    everything = await read_all(api, list(range(BUCKETS)), 7)
    assert sorted(everything) == sorted(live) and len(everything) == len(live)


async def test_definitions_written_without_a_bucket_are_read_last(
        store_kind: str, store: Store, side: SideTables) -> None:
    """A definition written by a cronfleet before buckets (rolling upgrade: no bucket,
    or, on Redis, not in the index yet) is still in its share."""
    api = side.api
    for job_id in IDS[:30]:
        await api.create_job_def(job_id, "t", spec(job_id), "me")
    old = IDS[:10]
    if store_kind == "sqlite":
        conn = store.transport.connection()  # type: ignore[attr-defined]
        await store.transport.call_fn(  # type: ignore[attr-defined]
            lambda: conn.execute("UPDATE job_defs SET bucket = NULL WHERE id < 'job-010'"))
    elif store_kind == "postgres":
        import psycopg

        from store.pg import pg_url

        with psycopg.connect(pg_url(), autocommit=True) as c:
            c.execute(f"UPDATE {store.schema}.job_defs SET bucket = NULL "  # type: ignore[attr-defined]
                      "WHERE id < 'job-010'")
    elif store_kind == "redis":
        from cronfleet.store.redis.side import client_of, share_member

        c = client_of(store)  # type: ignore[arg-type]
        prefix = store.prefix  # type: ignore[attr-defined]
        await c.zrem(f"{prefix}side:defs:shares", *[share_member(j) for j in old])
        await c.delete(f"{prefix}side:defs:shares:built")
    else:
        pytest.skip("the memory store judges every bucket itself")
    buckets = sorted({bucket_of(j) for j in IDS[:30]})
    some = buckets[1::2]
    got = await read_all(api, some, 3)
    assert sorted(got) == sorted(j for j in IDS[:30] if bucket_of(j) in some)
    assert len(got) == len(set(got))


async def test_the_bucket_of_sql_is_the_bucket_of_python(store_kind: str, store: Store,
                                                         side: SideTables) -> None:
    """Migration 14 computes the bucket of definitions stored before it in SQL: the same
    value as :func:`bucket_of` (ids with non-ASCII characters too)."""
    if store_kind != "postgres":
        pytest.skip("the expression is PostgreSQL's (SQLite calls bucket_of itself)")
    import psycopg

    from store.pg import pg_url

    ids = ["a", "invoice-run", "été/日本語", "x" * 200, *IDS[:40]]
    with psycopg.connect(pg_url()) as c:
        for job_id in ids:
            (b,) = c.execute("SELECT (('x' || substr(md5(%s), 1, 8))::bit(32)::integer "
                             "& 1023)", (job_id,)).fetchone()  # type: ignore[misc]
            assert b == bucket_of(job_id), job_id


# -- the catalog -----------------------------------------------------------------------------


def instance(store: Store, clock: FakeClock, name: str, peers: tuple[str, ...]
             ) -> tuple[Catalog, Counting, Scheduler]:
    sched = Scheduler(store, clock=clock, instance_id=name)
    counted = Counting(side_tables(store, clock=clock).api)
    catalog = Catalog(sched, counted, page=7, shares=True)  # type: ignore[arg-type]
    sched.ownership.peers = peers
    return catalog, counted, sched


def owned_by(name: str, peers: tuple[str, ...], ids: list[str]) -> set[str]:
    return {j for j in ids if owner(bucket_key(bucket_of(j)), peers) == name}


async def test_each_peer_holds_its_buckets_and_the_share_follows_the_peers(
        store: Store, other: Store, side: SideTables, clock: FakeClock) -> None:
    for job_id in IDS:
        await side.api.create_job_def(job_id, "t", spec(job_id), "me")
    peers = ("p1", "p2")
    c1, n1, s1 = instance(store, clock, "p1", peers)
    c2, _, s2 = instance(other, clock, "p2", peers)
    try:
        await c1.start()
        await c2.start()
        mine1, mine2 = owned_by("p1", peers, IDS), owned_by("p2", peers, IDS)
        assert mine1 and mine2 and mine1 | mine2 == set(IDS)
        assert set(s1.jobs) == mine1 and set(s2.jobs) == mine2
        assert n1.share_rows == len(mine1)  # read only its own share
        # a new definition in p2's bucket: p1's feed passes it by
        new = next(f"new-{i}" for i in range(1000)
                   if owned_by("p2", peers, [f"new-{i}"]))
        await side.api.create_job_def(new, "t", spec(new), "me")
        await c1.refresh()
        await c2.refresh()
        assert new not in s1.jobs and new in s2.jobs
        # p2 is gone: p1 reads p2's share, and only it
        n1.share_rows = 0
        s1.ownership.peers = ("p1",)
        await c1.reshare()
        assert set(s1.jobs) == set(IDS) | {new}
        assert n1.share_rows == len(mine2) + 1
        # p2 is back: p1 holds p2's share parked for LET_GO seconds (a peer back within
        # them costs no read), then lets go of it; no row is read either way
        n1.share_rows = 0
        s1.ownership.peers = peers
        await c1.reshare()
        await c1.let_go()
        assert set(s1.jobs) == set(IDS) | {new} and n1.share_rows == 0
        s1.ownership.peers = ("p1",)  # p2 missing again for a moment: nothing to read
        await c1.reshare()
        s1.ownership.peers = peers
        await c1.reshare()
        assert n1.share_rows == 0
        clock.advance(LET_GO)
        await c1.let_go()
        assert set(s1.jobs) == mine1 and n1.share_rows == 0
        assert {j for j in IDS if c1.held_version(j) is not None} == mine1
        # a job created through p1 in p2's bucket is answered, not held by p1
        other_id = next(f"made-{i}" for i in range(1000)
                        if owned_by("p2", peers, [f"made-{i}"]))
        made = await c1.create(other_id, spec(other_id), "t", "me")
        assert made is not None and made.id == other_id and other_id not in s1.jobs
    finally:
        await c1.stop()
        await c2.stop()


async def test_a_newer_share_stops_the_reading_and_the_next_goes_on(
        store: Store, side: SideTables, clock: FakeClock) -> None:
    """The peers change while a share is being read: what was read stays, only the
    bucket the change cut is read again (at most a page), and the next reading ends with
    exactly the new share."""
    for job_id in IDS:
        await side.api.create_job_def(job_id, "t", spec(job_id), "me")
    c1, n1, s1 = instance(store, clock, "p1", ("p1", "p2", "p3"))
    real = n1.job_defs_in
    calls = 0

    async def one_page_then_change(buckets: Any, after: ShareKey, limit: int) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            s1.ownership.peers = ("p1", "p2")  # p3 went away during the first page
        return await real(buckets, after, limit)

    n1.job_defs_in = one_page_then_change  # type: ignore[method-assign]
    try:
        await c1.start()
        assert calls == 1 and len(s1.jobs) <= 7  # stopped after its first page
        assert c1.started and not c1.ready  # /readyz waits for the rest of the share
        await c1.reshare()
        assert c1.ready
        assert set(s1.jobs) == owned_by("p1", ("p1", "p2"), IDS)
        assert len(s1.jobs) <= n1.share_rows <= len(s1.jobs) + 7
    finally:
        await c1.stop()


async def test_start_up_plans_each_page_before_the_share_is_read(
        store: Store, side: SideTables, clock: FakeClock) -> None:
    """#27 item 3: the first page's jobs are queued for their slots while the rest of the
    share is still being read (the second read held)."""
    import asyncio

    for job_id in IDS[:30]:
        await side.api.create_job_def(job_id, "t", spec(job_id), "me")
    sched = Scheduler(store, clock=clock, instance_id="p1")
    counted = Counting(side_tables(store, clock=clock).api)
    catalog = Catalog(sched, counted, page=10, shares=True)  # type: ignore[arg-type]
    real = counted.job_defs_in
    gate, second = asyncio.Event(), asyncio.Event()
    calls = 0

    async def held(buckets: Any, after: ShareKey, limit: int) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            second.set()
            await gate.wait()
        return await real(buckets, after, limit)

    counted.job_defs_in = held  # type: ignore[method-assign]
    await sched.start()
    try:
        loading = asyncio.create_task(catalog.start())
        await asyncio.wait_for(second.wait(), 10)
        await sched.wait_idle()
        first = set(sched.jobs)
        assert len(first) == 10
        assert first <= set(sched.due.next)  # planned: each has its next slot queued
        assert not loading.done()
        gate.set()
        await asyncio.wait_for(loading, 10)
        await sched.wait_idle()
        assert set(sched.jobs) == set(IDS[:30]) <= set(sched.due.next)
    finally:
        gate.set()
        await catalog.stop()
        await sched.stop()


async def test_a_small_catalog_is_read_without_a_query_per_bucket(
        store_kind: str, side: SideTables) -> None:
    """The empty buckets between those holding definitions are skipped by one probe each
    run of them (an empty catalog: two reads, not 1,024; each bucket holding some: its
    read, the empty read after it, one probe)."""
    if store_kind not in ("sqlite", "postgres"):
        pytest.skip("the SQL stores' reads are counted")
    api = side.api
    db = api._db  # type: ignore[attr-defined]
    real = db.query
    names: list[str] = []

    async def counted(name: str, params: Any = ()) -> Any:
        names.append(name)
        return await real(name, params)

    db.query = counted
    assert await read_all(api, list(range(BUCKETS)), 100) == []
    assert names.count("defs_of_bucket") + names.count("defs_next_bucket") == 2
    for job_id in IDS[:3]:
        await api.create_job_def(job_id, "t", spec(job_id), "me")
    names.clear()
    got = await read_all(api, list(range(BUCKETS)), 100)
    assert sorted(got) == IDS[:3]
    assert names.count("defs_of_bucket") + names.count("defs_next_bucket") <= 2 + 3 * 3


@pytest.mark.parametrize("read_cap", [10_000, 10])
async def test_buckets_that_move_here_are_built_soonest_slot_first(
        store: Store, other: Store, side: SideTables, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch, read_cap: int) -> None:
    """A peer is lost: its buckets' definitions are read whole, then built and handed to
    the scheduler a chunk at a time, the jobs with the nearest slot first (the slots the
    dead peer left undone wait for a few hundred builds, not for its whole share).
    ``read_cap`` 10: read 10 or so at a time (memory stays bounded), each round in order."""
    import cronfleet.catalog as catalog_mod

    monkeypatch.setattr(catalog_mod, "GAIN_CHUNK", 4)
    monkeypatch.setattr(catalog_mod, "GAIN_READ", read_cap)
    # now is 20:26:40; job i fires at minute (i * 7) % 60, so the order is known
    minute = {j: (k * 7) % 60 for k, j in enumerate(IDS)}
    for job_id in IDS:
        await side.api.create_job_def(job_id, "t", spec(job_id, minute[job_id]), "me")
    peers = ("p1", "p2")
    c1, _, s1 = instance(store, clock, "p1", peers)
    added: list[list[str]] = []
    real_add = s1.add_job

    def record(job: Any, *more: Any) -> Any:
        added.append([j.id for j in (job, *more)])
        return real_add(job, *more)

    s1.add_job = record  # type: ignore[method-assign]
    try:
        await c1.start()
        assert set(s1.jobs) == owned_by("p1", peers, IDS)
        added.clear()
        s1.ownership.peers = ("p1",)  # p2 is lost
        await c1.reshare()
        moved = owned_by("p2", peers, IDS)
        order = [j for call in added for j in call]
        assert sorted(order) == sorted(moved) and set(s1.jobs) == set(IDS)
        assert all(len(call) <= 4 for call in added) and len(added) >= len(moved) // 4
        since = from_ts(clock.now() - 2 * s1.instance_ttl)  # the slots just missed too

        def next_fire(job_id: str) -> float:
            return CronExpr(f"{minute[job_id]} * * * *").next(since).timestamp()

        fires = [next_fire(j) for j in order]
        if read_cap > len(IDS):
            assert fires == sorted(fires) and len(set(fires)) > 1
        else:  # several rounds, each sorted: the order starts again at most per round
            drops = sum(1 for a, b in pairwise(fires) if b < a)
            assert 1 <= drops <= len(moved) // read_cap
    finally:
        await c1.stop()


async def test_a_job_that_moves_here_due_at_once_is_built_when_its_page_is_read(
        store: Store, other: Store, side: SideTables, clock: FakeClock) -> None:
    """A lost peer's job due within ``URGENT`` seconds is built as soon as the page that
    holds it is read; the others wait for the whole read and are then built soonest
    first."""
    from cronfleet.catalog import URGENT

    peers = ("p1", "p2")
    moved = sorted(owned_by("p2", peers, IDS), key=lambda j: (bucket_of(j), j))
    urgent = moved[0]  # in the first page read
    assert len(moved) > 14  # more than two pages of 7
    for job_id in IDS:
        body = spec(job_id, 45)  # 20:45: later than URGENT from 20:26:40
        if job_id == urgent:
            body["schedule"] = "*/2 * * * * *"  # every 2 s
        await side.api.create_job_def(job_id, "t", body, "me")
    assert clock.now() % 3600 + URGENT < 45 * 60
    c1, counted, s1 = instance(store, clock, "p1", peers)
    rows_at_add: dict[str, int] = {}
    real_add = s1.add_job

    def record(job: Any, *more: Any) -> Any:
        for j in (job, *more):
            rows_at_add[j.id] = counted.share_rows
        return real_add(job, *more)

    s1.add_job = record  # type: ignore[method-assign]
    try:
        await c1.start()
        base = counted.share_rows
        rows_at_add.clear()
        s1.ownership.peers = ("p1",)  # p2 is lost
        await c1.reshare()
        assert set(rows_at_add) == set(moved) and set(s1.jobs) == set(IDS)
        assert rows_at_add[urgent] - base <= 7  # right after its page
        assert all(rows_at_add[j] - base == len(moved) for j in moved if j != urgent)
    finally:
        await c1.stop()


@pytest.mark.parametrize("freeze", [True, False])
async def test_the_jobs_a_scheduler_process_reads_leave_the_cyclic_gcs_sight(
        store: Store, side: SideTables, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
        freeze: bool) -> None:
    """``freeze`` (``cronfleet run``): every ``FREEZE_EVERY`` jobs made from the catalog,
    what they made is frozen (``gc.freeze``): the full collections stop rescanning them."""
    import gc

    import cronfleet.catalog as catalog_mod

    monkeypatch.setattr(catalog_mod, "FREEZE_EVERY", 20)
    for job_id in IDS:
        await side.api.create_job_def(job_id, "t", spec(job_id), "me")
    sched = Scheduler(store, clock=clock, instance_id="p1")
    catalog = Catalog(sched, side.api, page=7, shares=True, freeze=freeze)
    first = min(IDS, key=lambda j: (bucket_of(j), j))  # the first one read and made
    gc.unfreeze()
    try:
        await catalog.start()
        job = sched.get_job(first)
        tracked = any(o is job for g in range(3) for o in gc.get_objects(g))
        assert (gc.get_freeze_count() > 0) is freeze
        assert tracked is not freeze
    finally:
        gc.unfreeze()
        await catalog.stop()


@pytest.mark.parametrize("urgent", [False, True])
async def test_a_share_whose_reading_fails_is_read_again_at_the_next_pass(
        store: Store, side: SideTables, clock: FakeClock, urgent: bool) -> None:
    """The store fails while the buckets that moved here are read (a restart, connections
    terminated): the watch reads them again at its next pass, until the share is whole.
    (It dropped the reshare: the buckets not read were nobody's -- their owner is this
    instance -- and their slots had no run and no row.) ``urgent``: every other job is due
    within ``URGENT``, built as its page is read; a bucket whose other jobs were not built
    yet is read again too."""
    import asyncio

    for k, job_id in enumerate(IDS):
        body = spec(job_id, 45)
        if urgent and k % 2:
            body["schedule"] = "*/2 * * * * *"
        await side.api.create_job_def(job_id, "t", body, "me")
    peers = ("p1", "p2")
    c1, counted, s1 = instance(store, clock, "p1", peers)
    c1.poll = 0.05
    failures = 2
    real = counted.job_defs_in

    async def flaky(buckets: Any, after: ShareKey, limit: int
                    ) -> tuple[list[JobDef], ShareKey | None]:
        nonlocal failures
        if failures and after != (-1, ""):  # fails after a first page
            failures -= 1
            raise ConnectionError("terminating connection due to administrator command")
        return await real(buckets, after, limit)

    try:
        await c1.start()
        assert set(s1.jobs) == owned_by("p1", peers, IDS)
        counted.job_defs_in = flaky  # type: ignore[method-assign]
        s1.ownership.peers = ("p1",)  # p2 is lost
        c1._peers_changed()
        for _ in range(200):
            if set(s1.jobs) == set(IDS):
                break
            await asyncio.sleep(0.02)
        assert failures == 0 and set(s1.jobs) == set(IDS)
    finally:
        await c1.stop()
