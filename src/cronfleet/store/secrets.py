"""Where the vault keeps its ciphertexts: a small :class:`SecretStore` protocol and its
SQLite, PostgreSQL and in-memory implementations.

They open their own connection from the same store URL as the scheduler's store. The
``secrets`` table is created here with ``CREATE TABLE IF NOT EXISTS`` (not as a numbered
migration: the migration ledger is owned by the run stores), in the same SQLite file or
the same PostgreSQL schema (``?schema=``, default ``cronfleet``). Rows hold only the key
id, the nonce and the ciphertext -- never a plaintext.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from cronfleet.errors import StoreError

__all__ = [
    "MemorySecretStore",
    "PostgresSecretStore",
    "SQLiteSecretStore",
    "SecretRow",
    "SecretStore",
    "open_secret_store",
]


@dataclass(frozen=True)
class SecretRow:
    namespace: str
    name: str
    key_id: str
    nonce: bytes = field(repr=False)
    ciphertext: bytes = field(repr=False)
    created_at: datetime
    updated_at: datetime


@runtime_checkable
class SecretStore(Protocol):
    async def get_secret(self, namespace: str, name: str) -> SecretRow | None: ...

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime) -> bool:
        """Create or replace; True when created."""
        ...

    async def delete_secret(self, namespace: str, name: str) -> bool: ...

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        """Rows sorted by namespace and name (``None``: every namespace)."""
        ...

    async def close(self) -> None: ...


class MemorySecretStore:
    """For tests and embedded use: rows in a dict."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], SecretRow] = {}

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        return self.rows.get((namespace, name))

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime) -> bool:
        old = self.rows.get((namespace, name))
        self.rows[(namespace, name)] = SecretRow(
            namespace, name, key_id, nonce, ciphertext, old.created_at if old else now, now)
        return old is None

    async def delete_secret(self, namespace: str, name: str) -> bool:
        return self.rows.pop((namespace, name), None) is not None

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        return [r for k, r in sorted(self.rows.items())
                if namespace is None or r.namespace == namespace]

    async def close(self) -> None:
        return None


_SQLITE_DDL = """
CREATE TABLE IF NOT EXISTS secrets (
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    key_id     TEXT    NOT NULL,
    nonce      BLOB    NOT NULL,
    ciphertext BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID
"""


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class SQLiteSecretStore:
    """The ``secrets`` table in the scheduler's SQLite file (its own connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteSecretStore({self.path!r})"

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                       isolation_level=None)
                conn.execute(_SQLITE_DDL)
            except sqlite3.Error as exc:
                raise StoreError(f"secrets in SQLite {self.path}: {exc}") from None
            self._conn = conn
        return self._conn

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        def go() -> list[tuple[Any, ...]]:
            with self._lock:
                conn = self._connect()
                try:
                    return conn.execute(sql, params).fetchall()
                except sqlite3.Error as exc:
                    raise StoreError(f"secrets in SQLite {self.path}: {exc}") from None

        return await asyncio.to_thread(go)

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        rows = await self._run(
            "SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at "
            "FROM secrets WHERE namespace = ? AND name = ?", (namespace, name))
        return _row(rows[0]) if rows else None

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime) -> bool:
        rows = await self._run(
            "INSERT INTO secrets (namespace, name, key_id, nonce, ciphertext, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, name) DO UPDATE "
            "SET key_id = excluded.key_id, nonce = excluded.nonce, ciphertext = "
            "excluded.ciphertext, updated_at = excluded.updated_at "
            "RETURNING created_at = updated_at",
            (namespace, name, key_id, nonce, ciphertext, _ms(now), _ms(now)))
        return bool(rows and rows[0][0])

    async def delete_secret(self, namespace: str, name: str) -> bool:
        rows = await self._run(
            "DELETE FROM secrets WHERE namespace = ? AND name = ? RETURNING name",
            (namespace, name))
        return bool(rows)

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        base = ("SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at "
                "FROM secrets")
        if namespace is None:
            rows = await self._run(base + " ORDER BY namespace, name")
        else:
            rows = await self._run(base + " WHERE namespace = ? ORDER BY name", (namespace,))
        return [_row(r) for r in rows]

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _row(r: tuple[Any, ...]) -> SecretRow:
    created, updated = r[5], r[6]
    if isinstance(created, int):
        created, updated = _dt(created), _dt(updated)
    return SecretRow(r[0], r[1], r[2], bytes(r[3]), bytes(r[4]), created, updated)


class PostgresSecretStore:
    """The ``secrets`` table in the scheduler's PostgreSQL schema (its own connection)."""

    def __init__(self, url: str) -> None:
        from cronfleet.store.postgres import split_url

        self.conninfo, opts = split_url(url)
        self.schema = opts.get("schema") or "cronfleet"
        self._conn: Any = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresSecretStore(schema={self.schema!r})"

    async def _run(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg
        from psycopg import sql

        async with self._lock:
            try:
                if self._conn is None:
                    conn = await psycopg.AsyncConnection.connect(
                        self.conninfo, autocommit=True, connect_timeout=10)
                    await conn.execute(sql.SQL(
                        "CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                    await conn.execute(sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.secrets (namespace text NOT NULL, "
                        "name text NOT NULL, key_id text NOT NULL, nonce bytea NOT NULL, "
                        "ciphertext bytea NOT NULL, created_at timestamptz NOT NULL, "
                        "updated_at timestamptz NOT NULL, PRIMARY KEY (namespace, name))"
                    ).format(sql.Identifier(self.schema)))
                    self._conn = conn
                q = sql.SQL(query).format(t=sql.Identifier(self.schema, "secrets"))
                cur = await self._conn.execute(q, params)
                return list(await cur.fetchall()) if cur.description else []
            except psycopg.Error as exc:
                conn, self._conn = self._conn, None
                if conn is not None:
                    await conn.close()
                raise StoreError(f"secrets in PostgreSQL schema {self.schema!r}: "
                                 f"{type(exc).__name__}: {exc}") from None

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        rows = await self._run(
            "SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at "
            "FROM {t} WHERE namespace = %s AND name = %s", (namespace, name))
        return _row(rows[0]) if rows else None

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime) -> bool:
        rows = await self._run(
            "INSERT INTO {t} (namespace, name, key_id, nonce, ciphertext, created_at, "
            "updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, name) DO "
            "UPDATE SET key_id = excluded.key_id, nonce = excluded.nonce, ciphertext = "
            "excluded.ciphertext, updated_at = excluded.updated_at "
            "RETURNING (xmax = 0)",
            (namespace, name, key_id, nonce, ciphertext, now, now))
        return bool(rows and rows[0][0])

    async def delete_secret(self, namespace: str, name: str) -> bool:
        rows = await self._run(
            "DELETE FROM {t} WHERE namespace = %s AND name = %s RETURNING name",
            (namespace, name))
        return bool(rows)

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        base = ("SELECT namespace, name, key_id, nonce, ciphertext, created_at, updated_at "
                "FROM {t}")
        if namespace is None:
            rows = await self._run(base + " ORDER BY namespace, name")
        else:
            rows = await self._run(base + " WHERE namespace = %s ORDER BY name", (namespace,))
        return [_row(r) for r in rows]

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


def open_secret_store(url: str) -> SecretStore:
    """The secret store next to the run store named by ``url``."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from cronfleet.store.sqlite import SQLiteStore

        return SQLiteSecretStore(SQLiteStore.from_url(url).path)
    if scheme in ("postgresql", "postgres"):
        return PostgresSecretStore(url)
    raise StoreError(f"unknown store URL {url!r}: expected sqlite:///path.db or "
                     "postgresql://user@host/db")
