"""Stores: where claims, leases, overrides and the run ledger live."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cronfleet.store.base import Store
from cronfleet.store.factory import open_store, side_tables
from cronfleet.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from cronfleet.store.memory import MemoryStore
    from cronfleet.store.postgres import PostgresStore
    from cronfleet.store.redis import RedisStore

__all__ = ["MemoryStore", "PostgresStore", "RedisStore", "SQLiteStore", "Store", "open_store",
           "side_tables"]


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
