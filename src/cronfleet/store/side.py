"""Side tables: what lives next to the run store without being part of its migrated schema
(secrets, API tokens, the audit log, stored job definitions).

Each user opens its own small connection -- one SQLite connection behind a lock in a worker
thread, or one autocommit PostgreSQL connection -- and creates its tables with ``CREATE
TABLE IF NOT EXISTS`` in the same SQLite file or the same PostgreSQL schema (``?schema=``,
default ``cronfleet``) as the run store. SQL is written once: ``?`` placeholders and
``{p}`` where the schema prefix goes.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from cronfleet.errors import StoreError
from cronfleet.store.url import parse_store_url

__all__ = ["Rows", "SideDB", "SidePostgres", "SideSQLite", "open_side_db"]

Rows = list[tuple[Any, ...]]


class SideDB(Protocol):
    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows: ...

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        """One statement, serialised against every writer that names the same ``lock``."""
        ...

    async def announce(self, kind: str) -> None:
        """Tell the other processes that something of ``kind`` changed (if the database
        can: PostgreSQL ``NOTIFY`` on the store's channel)."""
        ...

    async def close(self) -> None: ...


class SideSQLite:
    def __init__(self, path: str, ddl: Sequence[str], what: str) -> None:
        self.path = path
        self.what = what
        self._ddl = [d.replace("{p}", "") for d in ddl]
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                   isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            for ddl in self._ddl:
                conn.execute(ddl)
            self._conn = conn
        return self._conn

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        text = sql.replace("{p}", "")

        def go() -> Rows:
            with self._lock:
                try:
                    return self._connect().execute(text, params).fetchall()
                except sqlite3.Error as exc:
                    raise StoreError(f"{self.what} in SQLite {self.path}: {exc}") from None

        return await asyncio.to_thread(go)

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        # SQLite runs one writer at a time: a single statement is already serialised
        return await self.query(sql, params)

    async def announce(self, kind: str) -> None:
        return None  # other processes notice the change when they next look

    async def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()


class SidePostgres:
    def __init__(self, url: str, ddl: Sequence[str], what: str) -> None:
        parsed = parse_store_url(url)
        self.conninfo, self.schema = parsed.conninfo, parsed.schema
        self.what = what
        self.channel = f"cronfleet_{self.schema}"
        self._prefix = '"' + self.schema.replace('"', '""') + '".'
        self._ddl = [d.replace("{p}", self._prefix) for d in ddl]
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Any:
        import psycopg

        if self._conn is None:
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=10)
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._prefix[:-1]}")
            for ddl in self._ddl:
                await conn.execute(ddl)
            self._conn = conn
        return self._conn

    async def _go(self, sql: str, params: tuple[Any, ...], lock: int | None) -> Rows:
        import psycopg

        text = sql.replace("{p}", self._prefix).replace("?", "%s")
        async with self._lock:
            try:
                conn = await self._connection()
                if lock is None:
                    cur = await conn.execute(text, params)
                    return list(await cur.fetchall()) if cur.description else []
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                    cur = await conn.execute(text, params)
                    return list(await cur.fetchall()) if cur.description else []
            except psycopg.Error as exc:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()
                raise StoreError(f"{self.what} in PostgreSQL schema {self.schema!r}: "
                                 f"{type(exc).__name__}: {exc}") from None

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        return await self._go(sql, params, None)

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        return await self._go(sql, params, lock)

    async def announce(self, kind: str) -> None:
        await self.query("SELECT pg_notify(?, ?)", (self.channel, json.dumps({"kind": kind})))

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


def open_side_db(url: str, ddl: Sequence[str], what: str) -> SideSQLite | SidePostgres:
    """The side-table connection for the store named by ``url``. ``ddl``: statements with
    ``{p}`` before table names, in SQL both dialects accept."""
    parsed = parse_store_url(url)
    if parsed.dialect == "sqlite":
        return SideSQLite(parsed.path, ddl, what)
    return SidePostgres(url, ddl, what)
