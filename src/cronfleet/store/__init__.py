"""Stores: where claims, leases, overrides and the run ledger live."""

from __future__ import annotations

from cronfleet.clock import Clock
from cronfleet.errors import StoreError
from cronfleet.store.base import Store
from cronfleet.store.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "open_store"]


def open_store(target: str | Store, *, clock: Clock | None = None) -> Store:
    """A store from a SQLAlchemy-style URL (``sqlite:///file.db``, ``postgresql://…``),
    or the given store object as is."""
    if not isinstance(target, str):
        if not isinstance(target, Store):
            raise StoreError(f"expected a store URL or a Store object, got {target!r}")
        return target
    scheme = target.split(":", 1)[0].lower()
    if scheme == "sqlite":
        return SQLiteStore.from_url(target, clock=clock)
    if scheme in ("postgresql", "postgres"):
        raise StoreError(
            f"store {target!r}: the PostgreSQL store is not available in this version yet; "
            "use sqlite:///cronfleet.db"
        )
    raise StoreError(
        f"unknown store URL {target!r}: expected sqlite:///path.db or postgresql://user@host/db"
    )
