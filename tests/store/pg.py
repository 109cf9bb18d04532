"""Reaching the test PostgreSQL: ``CRONFLEET_TEST_PG``, fresh schemas, CI fails rather
than skips when the server is missing."""

from __future__ import annotations

import functools
import os
import time
import uuid

import psycopg
import pytest
from psycopg import sql

from bench.chaos.faults import TcpProxy  # noqa: F401 - one proxy for tests and bench

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pg_url() -> str:
    return os.environ.get("CRONFLEET_TEST_PG", DEFAULT_URL)


@functools.cache
def _unreachable() -> str | None:
    try:
        with psycopg.connect(pg_url(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_url()} is unreachable ({exc}); set CRONFLEET_TEST_PG"
    return None


def require_pg() -> None:
    """Skip (laptop) or fail (``CI=true``) when the test database cannot be reached."""
    reason = _unreachable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def new_schema(prefix: str = "t") -> str:
    return f"cf_{prefix}_{uuid.uuid4().hex[:12]}"


def drop_schema(schema: str) -> None:
    """Drop a test's schema. A process of the test still finishing (an audit write, a
    heartbeat) can take locks in another order than the DROP: PostgreSQL then picks one
    side as the deadlock's victim, and the DROP is simply tried again."""
    for attempt in range(5):
        try:
            with psycopg.connect(pg_url(), autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)))
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 4:
                raise
            time.sleep(0.2)
