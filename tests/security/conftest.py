"""The security suite runs against the same service harness as tests/api (a running
scheduler, its app, tokens of teams alpha and beta in every role, SQLite and PostgreSQL)."""

from __future__ import annotations

from api.conftest import (  # noqa: F401 - fixtures, re-exported for this package
    api,
    clean_env,
    clock,
    make_api,
    pg_schema,
    secret_key,
    store_kind,
    store_url,
)
