"""One conformance suite for every store: each test runs against every store factory
(memory, SQLite, PostgreSQL).

Redis: one private ``redis-server`` per test session (``tests/store/redis_server.py``),
a fresh key prefix per test.

PostgreSQL: ``CRONFLEET_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
each test gets a fresh schema, dropped afterwards. Unreachable, the PostgreSQL tests skip
with the reason, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from cronfleet.clock import FakeClock
from cronfleet.store import PostgresStore, SQLiteStore, Store
from cronfleet.store.memory import MemoryDatabase, MemoryStore

from .pg import drop_schema, new_schema, pg_url, require_pg
from .redis_server import RedisServer, new_prefix

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z, a fixed "now" for the fake clock

StoreFactory = Callable[[], Store]


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def pg_schema(store_kind: str) -> Iterator[str | None]:
    """A fresh schema per PostgreSQL test (dropped afterwards), so tests are independent."""
    if store_kind != "postgres":
        yield None
        return
    require_pg()
    schema = new_schema()
    yield schema
    drop_schema(schema)


@pytest.fixture
def redis_url(store_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The private server's URL with a fresh prefix, for the Redis runs of the suite."""
    if store_kind != "redis":
        return None
    server: RedisServer = request.getfixturevalue("redis_session")
    return f"{server.url}?prefix={new_prefix()}"


@pytest.fixture
def make_store(
    store_kind: str,
    tmp_path: Path,
    clock: FakeClock,
    pg_schema: str | None,
    redis_url: str | None,
) -> StoreFactory:
    """Returns a factory: each call is a new store object (a new "instance") on one database."""
    if store_kind == "memory":
        db = MemoryDatabase()
        return lambda: MemoryStore(db, clock=clock)
    if store_kind == "sqlite":
        path = tmp_path / "cronfleet.db"
        return lambda: SQLiteStore(path, clock=clock)
    if store_kind == "postgres":
        assert pg_schema is not None
        url = pg_url()
        return lambda: PostgresStore(url, schema=pg_schema, clock=clock, pool_max=4)
    if store_kind == "redis":
        from cronfleet.store.redis import RedisStore

        assert redis_url is not None
        return lambda: RedisStore(redis_url, clock=clock)
    raise AssertionError(store_kind)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[Store]:
    s = make_store()
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def other(make_store: StoreFactory, store: Store) -> AsyncIterator[Store]:
    """A second instance's view of the same database."""
    s = make_store()
    await s.open()
    yield s
    await s.close()
