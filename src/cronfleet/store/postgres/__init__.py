"""The fleet store: PostgreSQL (``store.py``), its named queries (``queries.sql``) and its
numbered migrations (``migrations/``)."""

from cronfleet.extras import require

require("postgres")

from cronfleet.store.postgres.store import Cursor, PostgresStore, split_url

__all__ = ["Cursor", "PostgresStore", "split_url"]
