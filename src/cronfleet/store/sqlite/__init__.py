"""The embedded store: one SQLite file (``store.py``), its named queries
(``queries.sql``) and its numbered migrations (``migrations/``)."""

from cronfleet.store.sqlite.store import SQLiteStore, insert_runs

__all__ = ["SQLiteStore", "insert_runs"]
