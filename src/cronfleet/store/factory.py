"""The one factory of stores: every place that opens a store, or the side tables next to
it, from a URL comes here (``cronfleet.store.open_store`` is :func:`open_store`).

* :func:`open_store` -- the run store named by a URL (``sqlite:///file.db``,
  ``postgresql://…``, ``redis://host:6379/0?prefix=cf:``), or a store object as is.
* :func:`side_tables` -- the side tables (secrets, job health, API tables) of a store.
  Given a store object they share its connection, thread or pool, and the caller opens
  and closes it (the scheduler's store); given a URL, every side table of the process
  opened from that URL shares one store, opened on first use and closed when the last of
  them closes. Each backend's tables live in its package
  (``sqlite/side``, ``postgres/side``, ``redis/side.py``; memory: ``memory_side.py``).
* :func:`open_secret_store`, :func:`open_health_store`, :func:`open_api_store` -- one
  table of :func:`side_tables`.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronfleet.clock import Clock
from cronfleet.errors import StoreError
from cronfleet.store.side import ApiStore, HealthStore, SecretStore, StoreHandle
from cronfleet.store.url import parse_store_url

if TYPE_CHECKING:
    from cronfleet.store.base import Store

__all__ = ["SideTables", "open_api_store", "open_health_store", "open_secret_store",
           "open_store", "side_tables"]


def open_store(target: str | Store, *, clock: Clock | None = None) -> Store:
    """A store from a SQLAlchemy-style URL (``sqlite:///file.db``, ``postgresql://…``,
    ``redis://host:6379/0?prefix=cf:``), or the given store object as is.

    A ``SystemClock`` (the default) leaves leases, claim times and heartbeats to the
    store's own clock (:func:`~cronfleet.clock.judged_by_store`: PostgreSQL's, Redis's
    ``TIME``, SQLite's host clock); on PostgreSQL it also measures this host's skew. Any
    other clock (a test's ``FakeClock``) is used for every timestamp instead.
    """
    from cronfleet.store.base import Store

    if not isinstance(target, str):
        if not isinstance(target, Store):
            raise StoreError(f"expected a store URL or a Store object, got {target!r}")
        return target
    parsed = parse_store_url(target)
    if parsed.dialect == "sqlite":
        from cronfleet.store.sqlite.store import SQLiteStore

        return SQLiteStore(parsed.path, clock=clock)
    if parsed.dialect == "redis":
        from cronfleet.store.redis.store import RedisStore

        return RedisStore(target, clock=clock)
    from cronfleet.store.postgres.store import PostgresStore

    return PostgresStore(target, clock=clock)


@dataclass(frozen=True)
class SideTables:
    """The side tables of one store (each closes the store with it when it owns it)."""

    secrets: SecretStore
    health: HealthStore
    api: ApiStore


def side_tables(target: str | Store, *, clock: Clock | None = None) -> SideTables:
    """The side tables of ``target``: a store object (shared: its connection, opened and
    closed by the caller) or a URL (the process's store for side tables of that URL,
    opened on first use, closed with the last table using it). ``clock``: the API tables'
    timestamps (tokens, audit, catalog), this host's clock by default."""
    store: Any = open_store(target) if not isinstance(target, str) else _store_for_side(target)
    url = str(store.url)
    if url.startswith("memory:"):
        from cronfleet.store.memory_side import (
            MemoryApiStore,
            MemoryHealthStore,
            MemorySecretStore,
            memory_side,
        )

        rows = memory_side(store)
        return SideTables(MemorySecretStore(rows.secrets.rows),
                          MemoryHealthStore(rows.health.rows),
                          MemoryApiStore(rows.api, clock=clock))
    dialect = parse_store_url(url).dialect
    handle = StoreHandle(store, opener=_Owned(target) if isinstance(target, str) else None)
    if dialect == "redis":
        from cronfleet.store.redis.side import RedisApiStore, RedisHealthStore, RedisSecretStore

        return SideTables(RedisSecretStore(handle), RedisHealthStore(handle),
                          RedisApiStore(handle, clock=clock))
    from cronfleet.store.sql_side import SideSQL, SqlApiStore, SqlHealthStore, SqlSecretStore

    db: SideSQL
    if dialect == "sqlite":
        from cronfleet.store.sqlite.side import SQLiteSide

        db = SQLiteSide(handle)
    else:
        from cronfleet.store.postgres.side import PostgresSide

        db = PostgresSide(handle)
    return SideTables(SqlSecretStore(db), SqlHealthStore(db), SqlApiStore(db, clock=clock))


def _store_for_side(url: str) -> Store:
    """The store side tables open from ``url``: on PostgreSQL one connection attempt when
    opened (the caller decides whether to wait for the database, as ``cronfleet run``'s
    start-up does), not the run store's minute of retries."""
    if parse_store_url(url).dialect == "postgres":
        from cronfleet.store.postgres.store import PostgresStore

        pg = PostgresStore(url)
        pg.open_timeout = pg.connect_timeout + 1
        return pg
    return open_store(url)


@dataclass
class _Held:
    store: Any
    users: int


_OPENED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Held]] = (
    weakref.WeakKeyDictionary())
_OPENING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary())


@dataclass(frozen=True)
class _Owned:
    """The store of side tables opened from ``url``: one per URL and event loop in this
    process, shared by every such table (a process's vault, health and API tables from one
    URL hold one store, not one each), opened by the first, closed by the last to close."""

    url: str

    async def acquire(self, store: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            lock = _OPENING.setdefault(loop, asyncio.Lock())
        except TypeError:  # a loop without weak references: this table's own store
            await store.open()
            return store
        async with lock:
            opened = _OPENED.setdefault(loop, {})
            held = opened.get(self.url)
            if held is None:
                await store.open()
                held = opened[self.url] = _Held(store, 0)
            held.users += 1
            return held.store

    async def release(self, store: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            opened = _OPENED.get(loop, {})
        except TypeError:
            opened = {}
        held = opened.get(self.url)
        if held is None or held.store is not store:  # not ours (another loop's)
            await store.close()
            return
        held.users -= 1
        if held.users <= 0:
            del opened[self.url]
            await store.close()


def open_secret_store(target: str | Store) -> SecretStore:
    """The vault's table next to the store named by ``target``."""
    return side_tables(target).secrets


def open_health_store(target: str | Store) -> HealthStore:
    """Per-job health next to the store named by ``target``."""
    return side_tables(target).health


def open_api_store(target: str | Store, *, clock: Clock | None = None) -> ApiStore:
    """Tokens, audit log and the catalog next to the store named by ``target``."""
    return side_tables(target, clock=clock).api
