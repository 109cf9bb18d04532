"""A team's job definitions read by key (``ApiStore.job_defs_page``, ``job_def_teams``,
``count_job_defs``) on every store: keyset pages in code point order that lose nothing at
their edges, an id prefix's range, tombstones only when asked, another team's never; on
Redis also for definitions written before the teams' sets existed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cronfleet.clock import FakeClock
from cronfleet.store import Store
from cronfleet.store.factory import SideTables, side_tables
from cronfleet.store.side import prefix_end

from .redis_server import RedisServer, new_prefix


def spec(job_id: str) -> dict[str, Any]:
    return {"id": job_id, "schedule": "0 * * * *", "http": {"url": "https://example.com/x"}}


@pytest.fixture
def side(store: Store, clock: FakeClock) -> SideTables:
    return side_tables(store, clock=clock)


# ids whose code point order differs from a locale's (case, punctuation, digits)
IDS = ["A.z", "B", "a", "a-b", "a.b", "a/c", "a0", "a1", "a10", "a2", "aB", "ab", "b", "b:1",
       "z"]


async def test_pages_in_code_point_order_lose_nothing_at_their_edges(side: SideTables
                                                                     ) -> None:
    api = side.api
    for job_id in reversed(IDS):
        assert await api.create_job_def(job_id, "t", spec(job_id), "me") is not None
        assert await api.create_job_def(f"{job_id}.o", "other", spec(job_id), "me")
    assert sorted(IDS) == IDS
    for limit in (1, 2, 4, 15, 16):
        seen: list[str] = []
        after = ""
        while True:
            page = await api.job_defs_page("t", after=after, limit=limit)
            assert len(page) <= limit
            assert all(d.team == "t" and d.spec == spec(d.id) for d in page)
            seen += [d.id for d in page]
            if len(page) < limit:
                break
            after = page[-1].id
        assert seen == IDS, limit
    assert await api.job_defs_page("nobody", limit=10) == []


async def test_a_prefix_reads_its_range_only(side: SideTables) -> None:
    api = side.api
    for job_id in IDS:
        await api.create_job_def(job_id, "t", spec(job_id), "me")
    async def ids(prefix: str, after: str = "", limit: int = 50) -> list[str]:
        return [d.id for d in await api.job_defs_page("t", prefix=prefix, after=after,
                                                     limit=limit)]

    assert await ids("a") == [i for i in IDS if i.startswith("a")]
    assert await ids("a1") == ["a1", "a10"]
    assert await ids("a", after="a1") == ["a10", "a2", "aB", "ab"]
    assert await ids("a", after="0") == [i for i in IDS if i.startswith("a")]
    assert await ids("a", after="b") == []
    assert await ids("a", limit=2) == ["a", "a-b"]
    assert await ids("b:") == ["b:1"]
    assert await ids("c") == []
    assert prefix_end("a1") == "a2" and prefix_end("z") == "{"


async def test_tombstones_only_when_asked_teams_and_counts(side: SideTables) -> None:
    api = side.api
    for job_id in ("a", "b", "c"):
        await api.create_job_def(job_id, "t", spec(job_id), "me")
    await api.create_job_def("x", "u", spec("x"), "me")
    assert await api.delete_job_def("b", "t", "me")
    assert [d.id for d in await api.job_defs_page("t", limit=10)] == ["a", "c"]
    both = await api.job_defs_page("t", limit=10, include_deleted=True)
    assert [(d.id, d.deleted_at is not None) for d in both] == [
        ("a", False), ("b", True), ("c", False)]
    assert [d.id for d in await api.job_defs_page("t", limit=1, after="a",
                                                  include_deleted=True)] == ["b"]
    assert await api.job_def_teams(["a", "b", "x", "nope"]) == {"a": "t", "b": "t", "x": "u"}
    assert await api.job_def_teams([]) == {}
    counted = await api.count_job_defs("t")
    assert (counted.n, counted.estimated, counted.text()) == (2, False, "2")
    assert (await api.count_job_defs("nobody")).n == 0
    # revived by its team: live again, in its place
    assert await api.create_job_def("b", "t", spec("b"), "me") is not None
    assert [d.id for d in await api.job_defs_page("t", limit=10)] == ["a", "b", "c"]
    assert (await api.count_job_defs("t")).n == 3


async def test_redis_definitions_written_before_the_team_sets_are_found(
        redis_session: RedisServer, clock: FakeClock) -> None:
    from cronfleet.store.redis import RedisStore
    from cronfleet.store.redis.side import client_of

    prefix = new_prefix()
    store = RedisStore(f"{redis_session.url}?prefix={prefix}", clock=clock)
    await store.open()
    try:
        c = client_of(store)
        for i, (job_id, deleted) in enumerate((("old1", None), ("old2", 5), ("old3", None))):
            old = {"id": job_id, "team": "t", "spec": spec(job_id), "version": i + 1,
                   "created_at": 0, "updated_at": 0, "created_by": None,
                   "updated_by": None, "deleted_at": deleted, "saved_role": None}
            await c.hset(f"{prefix}side:defs", job_id, json.dumps(old))
        await c.set(f"{prefix}side:defs:version", 3)
        api = side_tables(store, clock=clock).api
        await api.create_job_def("new", "t", spec("new"), "me")
        assert [d.id for d in await api.job_defs_page("t", limit=10)] == [
            "new", "old1", "old3"]
        assert [d.id for d in await api.job_defs_page("t", limit=10,
                                                      include_deleted=True)] == [
            "new", "old1", "old2", "old3"]
        assert (await api.count_job_defs("t")).n == 3
    finally:
        await store.close()


async def test_redis_pages_read_on_past_tombstones_left_in_the_live_set(
        redis_session: RedisServer, clock: FakeClock) -> None:
    """A definition deleted while the team sets were built may stay in its live set
    (``_build_teams``): a page skips it and reads on from the last id it read, full and
    in order, with ``after`` and ``prefix`` too."""
    from cronfleet.store.redis import RedisStore
    from cronfleet.store.redis.side import client_of

    prefix = new_prefix()
    store = RedisStore(f"{redis_session.url}?prefix={prefix}", clock=clock)
    await store.open()
    try:
        api = side_tables(store, clock=clock).api
        ids = [f"j{i}" for i in range(8)]
        for job_id in ids:
            assert await api.create_job_def(job_id, "t", spec(job_id), "me") is not None
        for job_id in ("j1", "j2", "j3", "j6"):
            assert await api.delete_job_def(job_id, "t", "me")
        # as if deleted while the sets were built: still a live member
        await client_of(store).zadd(f"{prefix}side:defs:live:t", {"j1": 0, "j2": 0,
                                                                   "j3": 0, "j6": 0})
        live = ["j0", "j4", "j5", "j7"]
        for limit in (1, 2, 3, 10):
            got: list[str] = []
            after = ""
            while True:
                page = [d.id for d in await api.job_defs_page("t", after=after, limit=limit)]
                got += page
                if len(page) < limit:
                    break
                after = page[-1]
            assert got == live, limit
        assert [d.id for d in await api.job_defs_page("t", prefix="j", after="j0",
                                                      limit=2)] == ["j4", "j5"]
        assert [d.id for d in await api.job_defs_page("t", limit=10,
                                                      include_deleted=True)] == ids
    finally:
        await store.close()


async def test_a_large_team_is_counted_up_to_the_cap_then_estimated(
        side: SideTables, store: Store, store_kind: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``COUNT_CAP`` definitions a SQL store stops counting: PostgreSQL answers its
    statistics' estimate (labelled as such, never below what it counted); SQLite counts
    them all (exact). Memory and Redis always count (exact)."""
    from cronfleet.store import sql_side

    monkeypatch.setattr(sql_side, "COUNT_CAP", 3)
    api = side.api
    for i in range(8):
        await api.create_job_def(f"t{i}", "t", spec(f"t{i}"), "me")
    await api.create_job_def("u0", "u", spec("u0"), "me")
    assert (await api.count_job_defs("u")).n == 1  # under the cap: exact everywhere
    if store_kind == "postgres":
        import psycopg

        from .pg import pg_url

        with psycopg.connect(pg_url(), autocommit=True) as conn:  # the statistics
            conn.execute(f'ANALYZE "{store.schema}".job_defs')  # type: ignore[arg-type]
        counted = await api.count_job_defs("t")
        assert counted.estimated and counted.n >= 4, counted  # 8 of 9 rows: ~8
        assert counted.text().startswith("~")
    else:
        counted = await api.count_job_defs("t")
        assert (counted.n, counted.estimated) == (8, False)
