"""The one factory of stores: every place that opens a store, or the side tables next to
it, from a URL comes here (``cronfleet.store.open_store`` is :func:`open_store`).

* :func:`open_store` -- the run store named by a URL (``sqlite:///file.db``,
  ``postgresql://…``, ``redis://host:6379/0?prefix=cf:``), or a store object as is.
* :func:`side_tables` -- the side tables (secrets, job health, API tables) of a store.
  Given a store object they share its connection, thread or pool, and the caller opens
  and closes it (the scheduler's store); given a URL they open that store for themselves
  on first use and close it with the tables. Each backend's tables live in its package
  (``sqlite/side``, ``postgres/side``, ``redis/side.py``; memory: ``memory_side.py``).
* :func:`open_secret_store`, :func:`open_health_store`, :func:`open_api_store` -- one
  table of :func:`side_tables`.
"""

from __future__ import annotations

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

    On PostgreSQL a ``SystemClock`` (the default) only measures this host's skew: the
    database clock judges leases and claim times. Any other clock (a test's ``FakeClock``)
    is used for every timestamp instead.
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
    closed by the caller) or a URL (a store opened from it for these tables: opened on
    first use, closed when one of them is closed). ``clock``: the API tables' timestamps
    (tokens, audit, catalog), this host's clock by default."""
    owned = isinstance(target, str)
    store: Any = open_store(target)
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
    handle = StoreHandle(store, owned=owned)
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


def open_secret_store(target: str | Store) -> SecretStore:
    """The vault's table next to the store named by ``target``."""
    return side_tables(target).secrets


def open_health_store(target: str | Store) -> HealthStore:
    """Per-job health next to the store named by ``target``."""
    return side_tables(target).health


def open_api_store(target: str | Store, *, clock: Clock | None = None) -> ApiStore:
    """Tokens, audit log and the catalog next to the store named by ``target``."""
    return side_tables(target, clock=clock).api
