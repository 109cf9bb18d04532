"""Stores: where claims, leases, overrides and the run ledger live."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cronfleet.clock import Clock
from cronfleet.errors import StoreError
from cronfleet.store.base import Store
from cronfleet.store.sqlite import SQLiteStore
from cronfleet.store.url import parse_store_url

if TYPE_CHECKING:
    from cronfleet.store.memory import MemoryStore
    from cronfleet.store.postgres import PostgresStore
    from cronfleet.store.redis import RedisStore

__all__ = ["MemoryStore", "PostgresStore", "RedisStore", "SQLiteStore", "Store", "open_store"]


def __getattr__(name: str) -> Any:
    # psycopg and its pool cost ~12 MB and import time: only a PostgreSQL user pays for them
    if name == "PostgresStore":
        from cronfleet.store.postgres import PostgresStore

        return PostgresStore
    if name == "RedisStore":
        from cronfleet.store.redis import RedisStore

        return RedisStore
    if name == "MemoryStore":
        from cronfleet.store.memory import MemoryStore

        return MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(target: str | Store, *, clock: Clock | None = None) -> Store:
    """A store from a SQLAlchemy-style URL (``sqlite:///file.db``, ``postgresql://…``,
    ``redis://host:6379/0?prefix=cf:``), or the given store object as is.

    On PostgreSQL a ``SystemClock`` (the default) only measures this host's skew: the
    database clock judges leases and claim times. Any other clock (a test's ``FakeClock``)
    is used for every timestamp instead.
    """
    if not isinstance(target, str):
        if not isinstance(target, Store):
            raise StoreError(f"expected a store URL or a Store object, got {target!r}")
        return target
    parsed = parse_store_url(target)
    if parsed.dialect == "sqlite":
        return SQLiteStore(parsed.path, clock=clock)
    if parsed.dialect == "redis":
        from cronfleet.store.redis import RedisStore

        return RedisStore(target, clock=clock)
    from cronfleet.store.postgres import PostgresStore

    return PostgresStore(target, clock=clock)
