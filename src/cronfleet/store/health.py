"""Per-job health shared by the fleet: last outcome, consecutive failures, counts, last
duration. One row per job in a ``job_health`` table next to the run ledger (created here
with ``CREATE TABLE IF NOT EXISTS`` on its own connection, like the secrets table).

:meth:`HealthStore.record` updates a job's row atomically and returns the row before and
after, so exactly one process sees each transition (first failure, recovery ...).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from cronfleet.errors import StoreError

__all__ = [
    "HealthStore",
    "JobHealth",
    "MemoryHealthStore",
    "PostgresHealthStore",
    "SQLiteHealthStore",
    "open_health_store",
]


@dataclass(frozen=True)
class JobHealth:
    job_id: str
    last_outcome: str | None = None  # "succeeded" / "failed"
    consecutive_failures: int = 0
    successes: int = 0
    failures: int = 0
    last_duration: float | None = None
    last_run_at: datetime | None = None

    def after(self, ok: bool, duration: float | None, now: datetime) -> JobHealth:
        return replace(
            self,
            last_outcome="succeeded" if ok else "failed",
            consecutive_failures=0 if ok else self.consecutive_failures + 1,
            successes=self.successes + (1 if ok else 0),
            failures=self.failures + (0 if ok else 1),
            last_duration=duration,
            last_run_at=now,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "last_outcome": self.last_outcome,
            "consecutive_failures": self.consecutive_failures,
            "successes": self.successes,
            "failures": self.failures,
            "last_duration": self.last_duration,
            "last_run_at": self.last_run_at.isoformat() if self.last_run_at else None,
        }


class HealthStore(Protocol):
    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        """Apply one finished run; ``(before, after)``."""
        ...

    async def get(self, job_id: str) -> JobHealth: ...

    async def close(self) -> None: ...


class MemoryHealthStore:
    def __init__(self) -> None:
        self.rows: dict[str, JobHealth] = {}

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        before = self.rows.get(job_id, JobHealth(job_id))
        after = before.after(ok, duration, now)
        self.rows[job_id] = after
        return before, after

    async def get(self, job_id: str) -> JobHealth:
        return self.rows.get(job_id, JobHealth(job_id))

    async def close(self) -> None:
        return None


_COLUMNS = ("job_id, last_outcome, consecutive_failures, successes, failures, last_duration, "
            "last_run_at")


def _from_row(row: tuple[Any, ...]) -> JobHealth:
    at = row[6]
    if isinstance(at, int | float):
        at = datetime.fromtimestamp(at / 1000, UTC)
    return JobHealth(row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], at)


class SQLiteHealthStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                   isolation_level=None)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS job_health (job_id TEXT PRIMARY KEY, "
                "last_outcome TEXT, consecutive_failures INTEGER NOT NULL DEFAULT 0, "
                "successes INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, "
                "last_duration REAL, last_run_at INTEGER) WITHOUT ROWID"
            )
            self._conn = conn
        return self._conn

    async def _in_thread(self, fn: Any) -> Any:
        def go() -> Any:
            with self._lock:
                try:
                    return fn(self._connect())
                except sqlite3.Error as exc:
                    raise StoreError(f"job health in SQLite {self.path}: {exc}") from None

        return await asyncio.to_thread(go)

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        def go(conn: sqlite3.Connection) -> tuple[JobHealth, JobHealth]:
            conn.execute("BEGIN IMMEDIATE")  # one writer at a time: transitions are seen once
            try:
                row = conn.execute(f"SELECT {_COLUMNS} FROM job_health WHERE job_id = ?",
                                   (job_id,)).fetchone()
                before = _from_row(row) if row else JobHealth(job_id)
                after = before.after(ok, duration, now)
                conn.execute(
                    f"INSERT OR REPLACE INTO job_health ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (job_id, after.last_outcome, after.consecutive_failures, after.successes,
                     after.failures, after.last_duration, int(now.timestamp() * 1000)))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return before, after

        result: tuple[JobHealth, JobHealth] = await self._in_thread(go)
        return result

    async def get(self, job_id: str) -> JobHealth:
        def go(conn: sqlite3.Connection) -> JobHealth:
            row = conn.execute(f"SELECT {_COLUMNS} FROM job_health WHERE job_id = ?",
                               (job_id,)).fetchone()
            return _from_row(row) if row else JobHealth(job_id)

        result: JobHealth = await self._in_thread(go)
        return result

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class PostgresHealthStore:
    def __init__(self, url: str) -> None:
        from cronfleet.store.postgres import split_url

        self.conninfo, opts = split_url(url)
        self.schema = opts.get("schema") or "cronfleet"
        self._conn: Any = None

    async def _connection(self) -> Any:
        import psycopg
        from psycopg import sql

        if self._conn is None:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                         connect_timeout=10)
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(self.schema)))
            await conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (job_id text PRIMARY KEY, last_outcome text, "
                "consecutive_failures integer NOT NULL DEFAULT 0, successes bigint NOT NULL "
                "DEFAULT 0, failures bigint NOT NULL DEFAULT 0, last_duration double precision, "
                "last_run_at timestamptz)").format(sql.Identifier(self.schema, "job_health")))
            self._conn = conn
        return self._conn

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        import psycopg
        from psycopg import sql

        table = sql.Identifier(self.schema, "job_health")
        try:
            conn = await self._connection()
            async with conn.transaction():
                await conn.execute(sql.SQL(
                    "INSERT INTO {} (job_id) VALUES (%s) ON CONFLICT DO NOTHING").format(table),
                    (job_id,))
                cur = await conn.execute(sql.SQL(
                    f"SELECT {_COLUMNS} FROM {{}} WHERE job_id = %s FOR UPDATE").format(table),
                    (job_id,))
                row = await cur.fetchone()
                before = _from_row(row) if row else JobHealth(job_id)
                after = before.after(ok, duration, now)
                await conn.execute(sql.SQL(
                    "UPDATE {} SET last_outcome = %s, consecutive_failures = %s, successes = %s, "
                    "failures = %s, last_duration = %s, last_run_at = %s WHERE job_id = %s"
                ).format(table), (after.last_outcome, after.consecutive_failures,
                                  after.successes, after.failures, after.last_duration, now,
                                  job_id))
        except psycopg.Error as exc:
            await self.close()
            raise StoreError(f"job health in PostgreSQL: {type(exc).__name__}: {exc}") from None
        return before, after

    async def get(self, job_id: str) -> JobHealth:
        from psycopg import sql

        conn = await self._connection()
        cur = await conn.execute(sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE job_id = %s").format(
            sql.Identifier(self.schema, "job_health")), (job_id,))
        row = await cur.fetchone()
        return _from_row(row) if row else JobHealth(job_id)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


def open_health_store(url: str) -> HealthStore:
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from cronfleet.store.sqlite import SQLiteStore

        return SQLiteHealthStore(SQLiteStore.from_url(url).path)
    if scheme in ("postgresql", "postgres"):
        return PostgresHealthStore(url)
    raise StoreError(f"unknown store URL {url!r}")
