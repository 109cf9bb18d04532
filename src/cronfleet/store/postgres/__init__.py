"""The fleet store: PostgreSQL (``store.py``), its named queries (``queries.sql``) and its
numbered migrations (``migrations/``)."""

from cronfleet.extras import require

try:
    from cronfleet.store.postgres.store import Cursor, PostgresStore, split_url
except ImportError:
    require("postgres")  # one line naming the pip install
    raise

__all__ = ["Cursor", "PostgresStore", "split_url"]
