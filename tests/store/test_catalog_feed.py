"""The catalog's change feed (``ApiStore.job_defs_changed``) and the :class:`Catalog` that
follows it, on every store (memory, SQLite, PostgreSQL, Redis): another process applies
only the definitions that changed (counted in rows the store returned), reads every one at
start in keyset pages that lose nothing at their edges, and still finds every definition
of a store written before the feed existed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from cronfleet import Scheduler
from cronfleet.catalog import Catalog
from cronfleet.clock import FakeClock
from cronfleet.store import Store
from cronfleet.store.factory import SideTables, side_tables
from cronfleet.store.side import ApiStore, ChangeKey, JobDef

from .redis_server import RedisServer, new_prefix


def spec(job_id: str, minute: int = 0) -> dict[str, Any]:
    return {"id": job_id, "schedule": f"{minute} * * * *",
            "http": {"url": f"https://example.com/{job_id}"}}


class Counting:
    """An :class:`ApiStore` that counts the definitions each read answered."""

    def __init__(self, inner: ApiStore) -> None:
        self.inner = inner
        self.feed_rows = 0
        self.feed_reads = 0
        self.full_rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_defs_changed(self, after: ChangeKey, limit: int) -> list[JobDef]:
        defs = await self.inner.job_defs_changed(after, limit)
        self.feed_rows += len(defs)
        self.feed_reads += 1
        return defs

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]:
        defs = await self.inner.job_defs(include_deleted=include_deleted)
        self.full_rows += len(defs)
        return defs

    def reset(self) -> None:
        self.feed_rows = self.feed_reads = self.full_rows = 0


@pytest.fixture
def side(store: Store, clock: FakeClock) -> SideTables:
    return side_tables(store, clock=clock)


@pytest.fixture
def side2(other: Store, clock: FakeClock) -> SideTables:
    return side_tables(other, clock=clock)


def follower(other: Store, side2: SideTables, clock: FakeClock, page: int
             ) -> tuple[Catalog, Counting]:
    """Another process: its scheduler (not started) and its catalog, reading in pages."""
    counted = Counting(side2.api)
    sched = Scheduler(other, clock=clock)
    return Catalog(sched, counted, page=page), counted  # type: ignore[arg-type]


async def test_the_feed_lists_each_definition_once_at_its_latest_change(
        side: SideTables, side2: SideTables) -> None:
    api = side.api
    for job_id in ("b", "a", "c"):
        assert await api.create_job_def(job_id, "t", spec(job_id), "me") is not None
    assert await side2.api.update_job_def("b", "t", spec("b", 5), "you") is not None
    assert await api.delete_job_def("c", "t", "me")
    feed = await side2.api.job_defs_changed((0, ""), 100)
    assert [(d.id, d.version, d.deleted_at is not None) for d in feed] == [
        ("a", 2, False), ("b", 4, False), ("c", 5, True)]
    assert feed[1].spec == spec("b", 5)
    assert [d.id for d in await api.job_defs_changed((4, "b"), 100)] == ["c"]
    assert await api.job_defs_changed((5, "c"), 100) == []
    assert [d.id for d in await api.job_defs_changed((0, ""), 2)] == ["a", "b"]


@pytest.mark.parametrize("page", [1, 4, 7, 25, 26])
async def test_pages_lose_nothing_at_their_edges(side: SideTables, side2: SideTables,
                                                 page: int) -> None:
    ids = [f"j{i:02d}" for i in range(25)]
    for job_id in reversed(ids):  # versions against the order of the ids
        await side.api.create_job_def(job_id, "t", spec(job_id), "me")
    seen: list[str] = []
    after: ChangeKey = (0, "")
    reads = 0
    while True:
        defs = await side2.api.job_defs_changed(after, page)
        reads += 1
        assert len(defs) <= page
        seen += [d.id for d in defs]
        if len(defs) < page:
            break
        after = (defs[-1].version, defs[-1].id)
    assert seen == list(reversed(ids))
    assert reads == 25 // page + 1


async def test_another_process_applies_only_what_changed(
        side: SideTables, side2: SideTables, other: Store, clock: FakeClock) -> None:
    for i in range(30):
        await side.api.create_job_def(f"j{i:02d}", "t", spec(f"j{i:02d}"), "me")
    catalog, counted = follower(other, side2, clock, page=7)
    await catalog.refresh()  # start-up: every definition, in pages of 7
    assert sorted(catalog.scheduler.jobs) == [f"j{i:02d}" for i in range(30)]
    assert (counted.feed_rows, counted.feed_reads, counted.full_rows) == (30, 5, 0)

    counted.reset()
    await catalog.refresh()  # nothing changed: one version read, no definition
    assert (counted.feed_rows, counted.feed_reads, counted.full_rows) == (0, 0, 0)

    await side.api.update_job_def("j03", "t", spec("j03", 17), "me")
    await side.api.create_job_def("new", "t", spec("new"), "me")
    assert await side.api.delete_job_def("j29", "t", "me")
    await catalog.refresh()
    assert (counted.feed_rows, counted.full_rows) == (3, 0)
    jobs = catalog.scheduler.jobs
    assert str(jobs["j03"].schedule) == "17 * * * *"
    assert "new" in jobs and "j29" not in jobs and len(jobs) == 30


async def test_concurrent_writers_lose_nothing_for_a_reader(
        side: SideTables, side2: SideTables, other: Store, clock: FakeClock) -> None:
    """Two writers commit while another process refreshes again and again in small
    pages: once the writes end, one more refresh has every definition."""
    catalog, counted = follower(other, side2, clock, page=3)
    done = False

    async def reader() -> None:
        while not done:
            await catalog.refresh()
            await asyncio.sleep(0)

    async def writer(api: ApiStore, name: str) -> None:
        for i in range(20):
            await api.create_job_def(f"{name}{i:02d}", "t", spec(f"{name}{i:02d}"), name)
            if i % 3 == 0:
                await api.update_job_def(f"{name}{i:02d}", "t", spec(f"{name}{i:02d}", 9),
                                         name)

    task = asyncio.create_task(reader())
    await asyncio.gather(writer(side.api, "a"), writer(side2.api, "b"))
    done = True
    await task
    await catalog.refresh()
    stored = {d.id: d.version for d in await side.api.job_defs()}
    assert len(stored) == 40
    assert {j: catalog._versions[j] for j in stored} == stored
    assert counted.full_rows == 0  # the feed alone, never the full read


# -- stores written before the feed existed -----------------------------------------------


async def test_a_store_upgraded_from_before_the_feed_applies_every_definition(
        store_kind: str, side: SideTables, side2: SideTables, other: Store,
        clock: FakeClock) -> None:
    """The SQL stores' feed is the version column every definition already had (migration
    13 adds only its index: tests/store/test_upgrade.py opens an older database); Redis
    builds its feed from the definitions once (here: the feed's keys removed, as an
    older cronfleet left the store)."""
    for i in range(12):
        await side.api.create_job_def(f"j{i:02d}", "t", spec(f"j{i:02d}"), "me")
    await side.api.delete_job_def("j05", "t", "me")
    if store_kind == "redis":
        from cronfleet.store.redis.side import client_of

        c = client_of(other)  # type: ignore[arg-type]
        prefix = other.prefix  # type: ignore[attr-defined]
        await c.delete(f"{prefix}side:defs:changes", f"{prefix}side:defs:changes:built")
    catalog, counted = follower(other, side2, clock, page=5)
    await catalog.refresh()
    assert sorted(catalog.scheduler.jobs) == [f"j{i:02d}" for i in range(12) if i != 5]
    assert (counted.feed_rows, counted.full_rows) == (12, 0)
    await side.api.update_job_def("j00", "t", spec("j00", 3), "me")
    counted.reset()
    await catalog.refresh()
    assert counted.feed_rows == 1 and str(catalog.scheduler.jobs["j00"].schedule) == "3 * * * *"


async def test_a_write_missing_from_the_feed_is_read_in_full(
        redis_session: RedisServer, clock: FakeClock) -> None:
    """A process of an older cronfleet (Redis, during a rolling upgrade) writes a
    definition and the version but not the feed: the catalog sees the feed end below the
    version and reads every definition."""
    from cronfleet.store.redis import RedisStore
    from cronfleet.store.redis.side import client_of

    prefix = new_prefix()
    store = RedisStore(f"{redis_session.url}?prefix={prefix}", clock=clock)
    await store.open()
    try:
        api = side_tables(store, clock=clock).api
        await api.create_job_def("new", "t", spec("new"), "me")
        catalog, counted = follower(store, side_tables(store, clock=clock), clock, page=10)
        await catalog.refresh()
        assert (counted.feed_rows, counted.full_rows) == (1, 0)
        c = client_of(store)
        old = {"id": "old", "team": "t", "spec": spec("old"), "version": 2,
               "created_at": 0, "updated_at": 0, "created_by": None, "updated_by": None,
               "deleted_at": None, "saved_role": None}
        await c.hset(f"{prefix}side:defs", "old", json.dumps(old))
        await c.set(f"{prefix}side:defs:version", 2)
        counted.reset()
        await catalog.refresh()
        assert "old" in catalog.scheduler.jobs
        assert (counted.feed_rows, counted.full_rows) == (0, 2)
        counted.reset()
        await catalog.refresh()  # caught up: nothing read again
        assert (counted.feed_rows, counted.full_rows) == (0, 0)
    finally:
        await store.close()


async def test_a_catalog_version_gone_back_restarts_the_feed(clock: FakeClock) -> None:
    """The store now answers a lower version (another database, or one restored from a
    backup): the catalog reads its feed from the beginning, not from its cursor."""
    from cronfleet.store.memory import MemoryDatabase, MemoryStore

    first = side_tables(MemoryStore(MemoryDatabase(), clock=clock), clock=clock).api
    for i in range(3):
        await first.create_job_def(f"j{i}", "t", spec(f"j{i}"), "me")
    store = MemoryStore(MemoryDatabase(), clock=clock)
    catalog, counted = follower(store, side_tables(store, clock=clock), clock, page=10)
    counted.inner = first
    await catalog.refresh()
    restored = side_tables(MemoryStore(MemoryDatabase(), clock=clock), clock=clock).api
    await restored.create_job_def("j0", "t", spec("j0", 11), "me")  # version 1 < 3
    counted.inner = restored
    counted.reset()
    await catalog.refresh()
    assert counted.feed_rows == 1
    assert str(catalog.scheduler.jobs["j0"].schedule) == "11 * * * *"


async def test_postgres_a_version_is_not_visible_before_the_lower_ones(
        clock: FakeClock) -> None:
    """PostgreSQL: a writer whose transaction holds version 1 uncommitted makes the next
    writer wait (the catalog lock until commit), so no reader can see version 2 first and
    move its cursor past 1."""
    import psycopg
    from psycopg import sql

    from cronfleet.store import PostgresStore
    from cronfleet.store.queries import load_queries

    from .pg import drop_schema, new_schema, pg_url, require_pg

    require_pg()
    schema = new_schema()
    store = PostgresStore(pg_url(), schema=schema, clock=clock, pool_max=4)
    await store.open()
    try:
        api = side_tables(store, clock=clock).api
        lock = load_queries("cronfleet.store.postgres.side", "x")["catalog_lock"]
        with psycopg.connect(pg_url()) as slow:  # a transaction, not committed yet
            slow.execute(lock)
            slow.execute(sql.SQL(
                "INSERT INTO {}.job_defs (id, team, spec, version, created_at, updated_at) "
                "SELECT 'first', 't', '{{}}', coalesce(max(version), 0) + 1, 0, 0 "
                "FROM {}.job_defs").format(sql.Identifier(schema), sql.Identifier(schema)))
            second = asyncio.create_task(api.create_job_def("second", "t", spec("b"), "me"))
            await asyncio.sleep(0.5)
            assert not second.done()  # waits for the catalog lock
            assert await api.job_defs_changed((0, ""), 10) == []
            slow.commit()
            made = await asyncio.wait_for(second, 10)
        assert made is not None and made.version == 2
        feed = await api.job_defs_changed((0, ""), 10)
        assert [(d.id, d.version) for d in feed] == [("first", 1), ("second", 2)]
    finally:
        await store.close()
        drop_schema(schema)


async def test_a_batch_enters_the_feed_in_order(side: SideTables, side2: SideTables) -> None:
    """``create_job_defs`` (one transaction for many) gives each definition its own
    consecutive version, so another process reads the batch from the feed like single
    writes; a dry run or a refused batch writes nothing there."""
    await side.api.create_job_def("first", "t", spec("first"), "me")
    items = [(f"b{i}", spec(f"b{i}", i)) for i in range(5)]
    assert await side.api.create_job_defs(items, "t", "me", dry_run=True) != ([], [])
    assert [d.id for d in await side2.api.job_defs_changed((0, ""), 100)] == ["first"]
    defs, taken = await side.api.create_job_defs(items, "t", "me")
    assert taken == [] and [d.version for d in defs] == [2, 3, 4, 5, 6]
    feed = await side2.api.job_defs_changed((1, "first"), 100)
    assert [(d.id, d.version) for d in feed] == [(f"b{i}", 2 + i) for i in range(5)]
    # an id already taken refuses the whole batch: the feed does not move
    assert await side.api.create_job_defs([("new", spec("new")), ("b0", spec("b0"))], "t",
                                          "me") == ([], ["b0"])
    assert await side2.api.job_defs_changed((6, "b4"), 100) == []
