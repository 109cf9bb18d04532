"""What the REST API keeps next to the run store: access tokens, the audit log, and the
definitions of jobs created over the API (the *catalog*).

Like the secrets table, these tables are part of each dialect's numbered migrations (v2),
in the same SQLite file or PostgreSQL schema as the run store, used through a connection of
their own (:mod:`cronfleet.store.side`). The SQL is written once (``?`` placeholders,
``{p}`` for the schema prefix) and run by one of two small backends.

* Tokens are stored as SHA-256 digests. A token is 256 random bits, so a slow password
  hash would add nothing but latency to every request; the plaintext is shown once.
* Catalog writes bump a store-wide ``version`` (one writer at a time: SQLite's write lock,
  a transaction-scoped advisory lock on PostgreSQL), so a scheduler can tell with one
  ``max(version)`` read whether anything changed. Deleted definitions stay as tombstones,
  so the runs of a deleted job keep their team.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cronfleet.errors import StoreError
from cronfleet.store.side import SideDB, open_side_db
from cronfleet.store.url import parse_store_url

__all__ = [
    "ROLES",
    "ApiStore",
    "AuditEntry",
    "JobDef",
    "TokenInfo",
    "hash_token",
    "open_api_store",
]

ROLES = ("viewer", "editor", "admin")
TOKEN_PREFIX = "cf_"
# pg_advisory_xact_lock key serialising catalog writes ("cronfleet catalog")
_CATALOG_LOCK = 0x63726F6E_636174


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _dt(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    team: str
    role: str
    created_at: datetime
    created_by: str | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def can(self, role: str) -> bool:
        """True when this token's role is ``role`` or above (viewer < editor < admin)."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def to_dict(self) -> dict[str, Any]:
        def iso(d: datetime | None) -> str | None:
            return None if d is None else d.isoformat()

        return {"id": self.id, "name": self.name, "team": self.team, "role": self.role,
                "created_at": iso(self.created_at), "created_by": self.created_by,
                "revoked_at": iso(self.revoked_at), "last_used_at": iso(self.last_used_at)}


@dataclass(frozen=True)
class JobDef:
    """A job created over the API: its spec (JSON-ready) and bookkeeping."""

    id: str
    team: str
    spec: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str | None
    updated_by: str | None
    deleted_at: datetime | None = None
    saved_role: str | None = None  # the role of the token that last saved it


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    team: str
    actor: str
    action: str
    target: str
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at.isoformat(), "team": self.team,
                "actor": self.actor, "action": self.action, "target": self.target,
                "details": self.details}


_TOKEN_COLS = "id, name, team, role, created_at, created_by, revoked_at, last_used_at"
_DEF_COLS = ("id, team, spec, version, created_at, updated_at, created_by, updated_by, "
             "deleted_at, saved_role")
_NEXT_VERSION = "(SELECT coalesce(max(version), 0) + 1 FROM {p}job_defs)"


def _token(r: tuple[Any, ...]) -> TokenInfo:
    created = _dt(r[4])
    assert created is not None
    return TokenInfo(r[0], r[1], r[2], r[3], created, r[5], _dt(r[6]), _dt(r[7]))


def _def(r: tuple[Any, ...]) -> JobDef:
    created, updated = _dt(r[4]), _dt(r[5])
    assert created is not None and updated is not None
    return JobDef(r[0], r[1], json.loads(r[2]), int(r[3]), created, updated, r[6], r[7],
                  _dt(r[8]), r[9])


class ApiStore:
    """Tokens, audit log and job definitions in the store named by ``url``
    (``ApiStore(url)`` of a ``redis://`` URL is a
    :class:`~cronfleet.store.redis.side.RedisApiStore`: the same interface on Redis)."""

    def __new__(cls, url: str) -> ApiStore:
        if cls is ApiStore and parse_store_url(url).dialect == "redis":
            from cronfleet.store.redis.side import RedisApiStore

            return super().__new__(RedisApiStore)
        return super().__new__(cls)

    def __init__(self, url: str) -> None:
        self.url = url
        self._db: SideDB = open_side_db(url, "API tables")
        self._touched: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"ApiStore({self.url!r})"

    async def close(self) -> None:
        await self._db.close()

    # -- tokens -------------------------------------------------------------------------

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        """A new token: ``(plaintext, info)``. Only the digest is stored."""
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        token_id = secrets.token_hex(4)
        plaintext = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        now = _now_ms()
        await self._db.query(
            "INSERT INTO {p}api_tokens (id, name, team, role, hash, created_at, created_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (token_id, name, team, role, hash_token(plaintext), now, created_by))
        info = TokenInfo(token_id, name, team, role, _dt(now) or datetime.now(UTC),
                         created_by, None, None)
        return plaintext, info

    async def authenticate(self, plaintext: str) -> TokenInfo | None:
        """The live (not revoked) token with this plaintext, or None."""
        rows = await self._db.query(
            f"SELECT {_TOKEN_COLS} FROM {{p}}api_tokens WHERE hash = ? AND revoked_at IS NULL",
            (hash_token(plaintext),))
        if not rows:
            return None
        info = _token(rows[0])
        # remember use at most once a minute per token: no write on every request
        mono = time.monotonic()
        if mono - self._touched.get(info.id, -1e9) > 60:
            self._touched[info.id] = mono
            await self._db.query("UPDATE {p}api_tokens SET last_used_at = ? WHERE id = ?",
                                 (_now_ms(), info.id))
        return info

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]:
        if team is None:
            rows = await self._db.query(
                f"SELECT {_TOKEN_COLS} FROM {{p}}api_tokens ORDER BY team, created_at, id")
        else:
            rows = await self._db.query(
                f"SELECT {_TOKEN_COLS} FROM {{p}}api_tokens WHERE team = ? "
                "ORDER BY created_at, id", (team,))
        return [_token(r) for r in rows]

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        """Revoke the token with this id, or every live token with this name."""
        now = _now_ms()
        rows = await self._db.query(
            f"UPDATE {{p}}api_tokens SET revoked_at = ? WHERE revoked_at IS NULL AND "
            f"(id = ? OR name = ?) RETURNING {_TOKEN_COLS}", (now, id_or_name, id_or_name))
        return [_token(r) for r in rows]

    # -- audit --------------------------------------------------------------------------

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None:
        await self._db.query(
            "INSERT INTO {p}audit_log (at, team, actor, action, target, details) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (_now_ms(), team, actor, action, target,
             json.dumps(details or {}, default=str, sort_keys=True)))

    async def audit_entries(self, team: str, *, limit: int = 50,
                            before_id: int | None = None) -> list[AuditEntry]:
        rows = await self._db.query(
            "SELECT id, at, team, actor, action, target, details FROM {p}audit_log "
            "WHERE team = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (team, before_id if before_id is not None else 2**62, limit))
        out = []
        for r in rows:
            at = _dt(r[1])
            assert at is not None
            out.append(AuditEntry(int(r[0]), at, r[2], r[3], r[4], r[5], json.loads(r[6])))
        return out

    # -- the catalog --------------------------------------------------------------------

    async def catalog_version(self) -> int:
        rows = await self._db.query("SELECT coalesce(max(version), 0) FROM {p}job_defs")
        return int(rows[0][0])

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]:
        where = "" if include_deleted else " WHERE deleted_at IS NULL"
        rows = await self._db.query(f"SELECT {_DEF_COLS} FROM {{p}}job_defs{where} ORDER BY id")
        return [_def(r) for r in rows]

    async def job_def(self, job_id: str) -> JobDef | None:
        """The definition, or its tombstone when deleted (``deleted_at`` set)."""
        rows = await self._db.query(f"SELECT {_DEF_COLS} FROM {{p}}job_defs WHERE id = ?",
                                    (job_id,))
        return _def(rows[0]) if rows else None

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        """Insert (or revive a tombstone of the same team); None when a live definition
        has this id, another team's deleted one (its runs keep that team), or the id is
        reserved to another team by a config or code job (:meth:`reserve_ids`)."""
        now = _now_ms()
        rows = await self._db.write(
            f"INSERT INTO {{p}}job_defs AS d (id, team, spec, version, created_at, updated_at, "
            f"created_by, updated_by, saved_role) SELECT ?, ?, ?, {_NEXT_VERSION}, ?, ?, ?, ?, ? "
            "WHERE NOT EXISTS (SELECT 1 FROM {p}job_ids r WHERE r.id = ? AND r.team <> ?) "
            "ON CONFLICT (id) DO UPDATE SET team = excluded.team, spec = excluded.spec, "
            "version = excluded.version, created_at = excluded.created_at, "
            "updated_at = excluded.updated_at, created_by = excluded.created_by, "
            "updated_by = excluded.updated_by, deleted_at = NULL, "
            "saved_role = excluded.saved_role "
            # only its own team revives a tombstone: the old runs keep the id and the team
            f"WHERE d.deleted_at IS NOT NULL AND d.team = excluded.team RETURNING {_DEF_COLS}",
            (job_id, team, json.dumps(spec, sort_keys=True), now, now, by, by, role,
             job_id, team), lock=_CATALOG_LOCK)
        if rows:
            await self._announce()
        return _def(rows[0]) if rows else None

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        """Replace the spec of a live definition of ``team``; None when there is none (or
        when ``expect_version`` no longer matches: someone changed it meanwhile)."""
        rows = await self._db.write(
            f"UPDATE {{p}}job_defs SET spec = ?, version = {_NEXT_VERSION}, updated_at = ?, "
            "updated_by = ?, saved_role = ? WHERE id = ? AND team = ? AND deleted_at IS NULL "
            f"AND (CAST(? AS BIGINT) IS NULL OR version = ?) RETURNING {_DEF_COLS}",
            (json.dumps(spec, sort_keys=True), _now_ms(), by, role, job_id, team,
             expect_version, expect_version), lock=_CATALOG_LOCK)
        if rows:
            await self._announce()
        return _def(rows[0]) if rows else None

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool:
        rows = await self._db.write(
            f"UPDATE {{p}}job_defs SET deleted_at = ?, version = {_NEXT_VERSION}, "
            "updated_at = ?, updated_by = ? WHERE id = ? AND team = ? AND deleted_at IS NULL "
            "RETURNING id", (_now_ms(), _now_ms(), by, job_id, team), lock=_CATALOG_LOCK)
        if rows:
            await self._announce()
        return bool(rows)

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        """Record ``(id, team, source)`` of jobs declared in config or code: their ids stay
        their team's (the runs under an id never pass to another team). A job moved to
        another team in its config moves its reservation with it (the operator's call)."""
        if not jobs:
            return
        now = _now_ms()
        for start in range(0, len(jobs), 500):
            chunk = jobs[start:start + 500]
            values = ", ".join("(?, ?, ?, ?)" for _ in chunk)
            args: list[Any] = []
            for job_id, team, source in chunk:
                args += [job_id, team, source, now]
            await self._db.write(
                f"INSERT INTO {{p}}job_ids AS r (id, team, source, reserved_at) VALUES {values} "
                "ON CONFLICT (id) DO UPDATE SET team = excluded.team, "
                "source = excluded.source WHERE r.team <> excluded.team "
                "OR r.source <> excluded.source", tuple(args))

    async def reserved_ids(self, team: str) -> list[str]:
        """The ids of config or code jobs that belong (or belonged) to ``team``."""
        rows = await self._db.query("SELECT id FROM {p}job_ids WHERE team = ? ORDER BY id",
                                    (team,))
        return [str(r[0]) for r in rows]

    async def reserved_team(self, job_id: str) -> str | None:
        """The team a config or code job with this id belonged to, or None."""
        rows = await self._db.query("SELECT team FROM {p}job_ids WHERE id = ?", (job_id,))
        return str(rows[0][0]) if rows else None

    async def _announce(self) -> None:
        # the change is stored; other schedulers will see it at their next look anyway
        with contextlib.suppress(StoreError):
            await self._db.announce("catalog")


def open_api_store(url: str) -> ApiStore:
    return ApiStore(url)
