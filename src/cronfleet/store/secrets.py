"""Where the vault keeps its ciphertexts: a small :class:`SecretStore` protocol and its
SQLite, PostgreSQL and in-memory implementations.

They open their own connection (:mod:`cronfleet.store.side`) from the same store URL as
the scheduler's store; the ``secrets`` table is part of each dialect's numbered migrations
(v2), in the same SQLite file or the same PostgreSQL schema (``?schema=``, default
``cronfleet``). Rows hold only the key id, the nonce and the ciphertext -- never a
plaintext.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from cronfleet.store.side import SideDB, SidePostgres, SideSQLite
from cronfleet.store.url import parse_store_url

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
    hosts: tuple[str, ...] | None = None  # where the value may be sent (None: nowhere)


@runtime_checkable
class SecretStore(Protocol):
    async def get_secret(self, namespace: str, name: str) -> SecretRow | None: ...

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        """Create or replace (value and hosts); True when created."""
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
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        old = self.rows.get((namespace, name))
        self.rows[(namespace, name)] = SecretRow(
            namespace, name, key_id, nonce, ciphertext, old.created_at if old else now, now,
            hosts)
        return old is None

    async def delete_secret(self, namespace: str, name: str) -> bool:
        return self.rows.pop((namespace, name), None) is not None

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        return [r for k, r in sorted(self.rows.items())
                if namespace is None or r.namespace == namespace]

    async def close(self) -> None:
        return None


# timestamps: integer milliseconds in SQLite, timestamptz in PostgreSQL (migrations v2)
_COLS = "namespace, name, key_id, nonce, ciphertext, created_at, updated_at, hosts"


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _row(r: tuple[Any, ...]) -> SecretRow:
    created, updated = r[5], r[6]
    if isinstance(created, int):
        created, updated = _dt(created), _dt(updated)
    hosts = tuple(json.loads(r[7])) if r[7] is not None else None
    return SecretRow(r[0], r[1], r[2], bytes(r[3]), bytes(r[4]), created, updated, hosts)


class _SideSecretStore:
    """The ``secrets`` table next to the run store, on a side connection
    (:mod:`cronfleet.store.side`); the SQL is the same for both dialects."""

    _db: SideDB

    def _time(self, dt: datetime) -> Any:
        return dt

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        rows = await self._db.query(
            f"SELECT {_COLS} FROM {{p}}secrets WHERE namespace = ? AND name = ?",
            (namespace, name))
        return _row(rows[0]) if rows else None

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        at = self._time(now)
        rows = await self._db.query(
            f"INSERT INTO {{p}}secrets ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (namespace, name) DO UPDATE SET key_id = excluded.key_id, "
            "nonce = excluded.nonce, ciphertext = excluded.ciphertext, "
            "updated_at = excluded.updated_at, hosts = excluded.hosts "
            "RETURNING created_at = updated_at",
            (namespace, name, key_id, nonce, ciphertext, at, at,
             None if hosts is None else json.dumps(list(hosts))))
        return bool(rows and rows[0][0])

    async def delete_secret(self, namespace: str, name: str) -> bool:
        rows = await self._db.query(
            "DELETE FROM {p}secrets WHERE namespace = ? AND name = ? RETURNING name",
            (namespace, name))
        return bool(rows)

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        base = f"SELECT {_COLS} FROM {{p}}secrets"
        if namespace is None:
            rows = await self._db.query(base + " ORDER BY namespace, name")
        else:
            rows = await self._db.query(base + " WHERE namespace = ? ORDER BY name",
                                        (namespace,))
        return [_row(r) for r in rows]

    async def close(self) -> None:
        await self._db.close()


class SQLiteSecretStore(_SideSecretStore):
    """The ``secrets`` table in the scheduler's SQLite file (its own connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = SideSQLite(path, "secrets")

    def __repr__(self) -> str:
        return f"SQLiteSecretStore({self.path!r})"

    def _time(self, dt: datetime) -> Any:
        return _ms(dt)


class PostgresSecretStore(_SideSecretStore):
    """The ``secrets`` table in the scheduler's PostgreSQL schema (its own connection)."""

    def __init__(self, url: str) -> None:
        db = SidePostgres(url, "secrets")
        self.schema = db.schema
        self._db = db

    def __repr__(self) -> str:
        return f"PostgresSecretStore(schema={self.schema!r})"


def open_secret_store(url: str) -> SecretStore:
    """The secret store next to the run store named by ``url``."""
    parsed = parse_store_url(url)
    if parsed.dialect == "redis":
        from cronfleet.store.redis.side import RedisSecretStore

        return RedisSecretStore(url)
    if parsed.dialect == "sqlite":
        return SQLiteSecretStore(parsed.path)
    return PostgresSecretStore(url)
