"""Side tables: what lives next to the run ledger (secrets, API tokens, the audit log,
stored job definitions, job health), on a connection of its own.

The tables are part of each dialect's numbered migrations (``sqlite/migrations``,
``postgres/migrations``): a side connection brings the file or schema to the newest
version when it first connects, exactly as the run store does at open, so a command that
only touches secrets still finds (or upgrades) the same schema. Each user opens its own
small connection -- one SQLite connection behind a lock in a worker thread, or one
autocommit PostgreSQL connection -- in the same SQLite file or the same PostgreSQL schema
(``?schema=``, default ``cronfleet``) as the run store.

The side-table SQL is written once for both dialects: ``?`` placeholders and ``{p}`` where
the schema prefix goes (the PostgreSQL backend turns them into ``%s`` and the quoted
schema).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.store.url import parse_store_url

__all__ = ["Rows", "SideDB", "SidePostgres", "SideSQLite", "Statement", "open_side_db"]

Rows = list[tuple[Any, ...]]
Statement = tuple[str, tuple[Any, ...]]


class SideDB(Protocol):
    dialect: Literal["sqlite", "postgres"]

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows: ...

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        """One statement, serialised against every writer that names the same ``lock``."""
        ...

    async def atomic(self, first: Sequence[Statement], read: Statement,
                     then: Callable[[Rows], Sequence[Statement]]) -> Rows:
        """One transaction: the ``first`` statements, then ``read`` (its rows locked on
        PostgreSQL when it says ``FOR UPDATE``; SQLite has one writer at a time), then the
        statements ``then(rows)`` computes from what was read. Returns the rows read."""
        ...

    async def announce(self, kind: str) -> None:
        """Tell the other processes that something of ``kind`` changed (if the database
        can: PostgreSQL ``NOTIFY`` on the store's channel)."""
        ...

    async def close(self) -> None: ...


class SideSQLite:
    dialect: Literal["sqlite", "postgres"] = "sqlite"

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            from cronfleet.store.sqlite.store import apply_migrations

            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                   isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("BEGIN IMMEDIATE")
            try:
                apply_migrations(conn, self.path, round(time.time() * 1000))
            except BaseException:
                conn.execute("ROLLBACK")
                conn.close()
                raise
            conn.execute("COMMIT")
            self._conn = conn
        return self._conn

    async def _in_thread(self, fn: Callable[[sqlite3.Connection], Rows]) -> Rows:
        def go() -> Rows:
            with self._lock:
                try:
                    return fn(self._connect())
                except sqlite3.Error as exc:
                    raise StoreError(f"{self.what} in SQLite {self.path}: {exc}") from None

        return await asyncio.to_thread(go)

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        text = sql.replace("{p}", "")
        return await self._in_thread(lambda c: c.execute(text, params).fetchall())

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        # SQLite runs one writer at a time: a single statement is already serialised
        return await self.query(sql, params)

    async def atomic(self, first: Sequence[Statement], read: Statement,
                     then: Callable[[Rows], Sequence[Statement]]) -> Rows:
        def go(c: sqlite3.Connection) -> Rows:
            c.execute("BEGIN IMMEDIATE")  # one writer at a time: what is read stays true
            try:
                for sql, params in first:
                    c.execute(sql.replace("{p}", ""), params)
                rows = c.execute(read[0].replace("{p}", "").replace(" FOR UPDATE", ""),
                                 read[1]).fetchall()
                for sql, params in then(rows):
                    c.execute(sql.replace("{p}", ""), params)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return rows

        return await self._in_thread(go)

    async def announce(self, kind: str) -> None:
        return None  # other processes notice the change when they next look

    async def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()


class SidePostgres:
    dialect: Literal["sqlite", "postgres"] = "postgres"

    def __init__(self, url: str, what: str) -> None:
        parsed = parse_store_url(url)
        self.conninfo, self.schema = parsed.conninfo, parsed.schema
        self.what = what
        self.channel = f"cronfleet_{self.schema}"
        self._prefix = '"' + self.schema.replace('"', '""') + '".'
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Any:
        from cronfleet.extras import require

        require("postgres")
        import psycopg

        if self._conn is None:
            from cronfleet.store.postgres.store import Cursor, apply_migrations
            from cronfleet.store.queries import load_queries

            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=10)
            try:
                queries = load_queries("cronfleet.store.postgres", self._prefix[:-1])
                async with conn.transaction():
                    await apply_migrations(Cursor(conn.cursor(), queries), self.schema,
                                           f"schema {self.schema!r}")
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    def _text(self, sql: str) -> str:
        return sql.replace("{p}", self._prefix).replace("?", "%s")

    async def _go(self, sql: str, params: tuple[Any, ...], lock: int | None) -> Rows:
        async def body(conn: Any) -> Rows:
            if lock is None:
                cur = await conn.execute(self._text(sql), params)
                return list(await cur.fetchall()) if cur.description else []
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                cur = await conn.execute(self._text(sql), params)
                return list(await cur.fetchall()) if cur.description else []

        return await self._with_conn(body)

    async def _with_conn(self, body: Callable[[Any], Any]) -> Rows:
        import psycopg

        async with self._lock:
            try:
                conn = await self._connection()
                result: Rows = await body(conn)
                return result
            except (psycopg.Error, OSError) as exc:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()
                # a connection that failed or broke: the store is unreachable (start-up
                # waits for it, runtime/reach.py); any other error is the store's answer
                kind = (StoreUnavailable
                        if isinstance(exc, OSError | psycopg.OperationalError
                                      | psycopg.InterfaceError)
                        else StoreError)
                raise kind(f"{self.what} in PostgreSQL schema {self.schema!r}: "
                           f"{type(exc).__name__}: {exc}") from None

    async def query(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        return await self._go(sql, params, None)

    async def write(self, sql: str, params: tuple[Any, ...] = (), *, lock: int | None = None
                    ) -> Rows:
        return await self._go(sql, params, lock)

    async def atomic(self, first: Sequence[Statement], read: Statement,
                     then: Callable[[Rows], Sequence[Statement]]) -> Rows:
        async def body(conn: Any) -> Rows:
            async with conn.transaction():
                for sql, params in first:
                    await conn.execute(self._text(sql), params)
                cur = await conn.execute(self._text(read[0]), read[1])
                rows = list(await cur.fetchall())
                for sql, params in then(rows):
                    await conn.execute(self._text(sql), params)
            return rows

        return await self._with_conn(body)

    async def announce(self, kind: str) -> None:
        await self.query("SELECT pg_notify(?, ?)", (self.channel, json.dumps({"kind": kind})))

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


def open_side_db(url: str, what: str) -> SideSQLite | SidePostgres:
    """The side-table connection for the store named by ``url``."""
    parsed = parse_store_url(url)
    if parsed.dialect == "sqlite":
        return SideSQLite(parsed.path, what)
    return SidePostgres(url, what)
