"""The side tables' contract: what lives next to the run ledger (the vault's secret
ciphertexts, per-job health, API tokens, the audit log, the catalog of API jobs and the
ids reserved by config or code jobs), independent of any backend.

This module holds the rows, the three interfaces (:class:`SecretStore`,
:class:`HealthStore`, :class:`ApiStore`) and what every implementation shares (token
digests, the once-a-minute touch of a token). It imports no backend: each backend's
package implements the interfaces on the store's own connection (``sqlite/side``,
``postgres/side``: named statements in their ``queries.sql``, the logic once in
``store/sql_side.py``; ``redis/side.py``: Lua scripts), ``store/memory_side.py`` in memory.
``store/factory.py`` is the one place that opens a store or its side tables from a URL.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

__all__ = [
    "ROLES",
    "TOKEN_PREFIX",
    "ApiStore",
    "AuditEntry",
    "ChangeKey",
    "DefCount",
    "HealthStore",
    "JobDef",
    "JobHealth",
    "Opener",
    "SecretRow",
    "SecretStore",
    "ShareKey",
    "StoreHandle",
    "TokenInfo",
    "TokenTouches",
    "check_role",
    "hash_token",
    "new_token",
    "prefix_end",
    "repeated",
]

ROLES = ("viewer", "editor", "admin")
TOKEN_PREFIX = "cf_"
S = TypeVar("S")
TOUCH_EVERY = 60.0  # seconds between two writes of a token's last_used_at


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")


def new_token() -> tuple[str, str]:
    """``(id, plaintext)`` of a new token: 256 random bits after the prefix and id."""
    token_id = secrets.token_hex(4)
    return token_id, f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"


def ms(dt: datetime) -> int:
    """Integer milliseconds since the epoch (the side tables' time codec)."""
    return int(dt.timestamp() * 1000)


def dt(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC)


def repeated(ids: Sequence[str]) -> list[str]:
    """The ids that occur more than once in ``ids`` (each once, in order of first
    repeat): a batch of definitions with one of them is refused whole."""
    seen: set[str] = set()
    out: list[str] = []
    for i in ids:
        if i in seen and i not in out:
            out.append(i)
        seen.add(i)
    return out


def req_dt(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


class TokenTouches:
    """When each token was last written as used: ``last_used_at`` is written at most once
    a minute per token (by this process), not on every request."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}

    def due(self, token_id: str) -> bool:
        mono = time.monotonic()
        if mono - self._at.get(token_id, -1e9) > TOUCH_EVERY:
            self._at[token_id] = mono
            return True
        return False


# -- secrets (ciphertext only) ----------------------------------------------------------------


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
    """Where the vault keeps its ciphertexts: rows hold the key id, the nonce and the
    ciphertext -- never a plaintext."""

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


# -- job health ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobHealth:
    """Per-job health shared by the fleet: last outcome, consecutive failures, counts,
    last duration."""

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
        """Apply one finished run atomically; ``(before, after)``: exactly one process
        sees each transition (first failure, recovery ...)."""
        ...

    async def get(self, job_id: str) -> JobHealth: ...

    async def close(self) -> None: ...


# -- API tokens, audit log, catalog -----------------------------------------------------------


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


ChangeKey = tuple[int, str]
"""A definition's place in the catalog's change feed: ``(version, id)``. Every write of a
definition gives it the next store-wide version, so the feed in this order lists every
change once, the latest last; ``(0, "")`` is before everything."""

ShareKey = tuple[int, str]
"""A live definition's place in a read of buckets (:meth:`ApiStore.job_defs_in`):
``(bucket, id)`` (:func:`cronfleet.shares.bucket_of`); ``(-1, "")`` is before everything."""


def prefix_end(prefix: str) -> str:
    """The first string after every string that starts with ``prefix`` (a job id prefix,
    ASCII, not empty): ids starting with it are those in ``[prefix, prefix_end(prefix))``,
    a range an index on ``id`` answers (code point order: SQLite's BINARY, PostgreSQL's
    ``COLLATE "C"``, Python's ``str``)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True)
class DefCount:
    """How many live definitions a team has: ``n`` exactly, or an estimate
    (``estimated``: a store that would have to scan to count them says about how many,
    never fewer than it counted)."""

    n: int
    estimated: bool = False

    def text(self) -> str:
        return f"~{self.n:,}" if self.estimated else f"{self.n:,}"

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.n, "estimated": self.estimated}


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


class ApiStore(Protocol):
    """What the REST API keeps next to the run store: access tokens (SHA-256 digests; the
    plaintext is shown once), the audit log, and the definitions of jobs created over the
    API (the *catalog*). Catalog writes bump a store-wide ``version`` one writer at a time,
    so a scheduler can tell with one read whether anything changed and read only what did
    (:meth:`job_defs_changed`); deleted definitions stay as tombstones, so the runs of a
    deleted job keep their team. Every implementation writes definitions in one place that
    gives each the next version under its writer lock (docs/internals.md, "The API and the
    catalog")."""

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        """A new token: ``(plaintext, info)``. Only the digest is stored."""
        ...

    async def authenticate(self, plaintext: str) -> TokenInfo | None:
        """The live (not revoked) token with this plaintext, or None."""
        ...

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]: ...

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        """Revoke the token with this id, or every live token with this name."""
        ...

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None: ...

    async def audit_entries(self, team: str, *, limit: int = 50,
                            before_id: int | None = None) -> list[AuditEntry]: ...

    async def catalog_version(self) -> int: ...

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]: ...

    async def job_defs_changed(self, after: ChangeKey, limit: int) -> list[JobDef]:
        """The change feed: at most ``limit`` definitions (tombstones included) whose
        ``(version, id)`` comes after ``after``, in that order (keyset pages: pass the
        last one's key to read the next page; an index answers each page). Every write of
        a definition takes the next store-wide version, one writer at a time, in the
        same transaction: a version is visible only once every lower one is."""
        ...

    async def job_def(self, job_id: str) -> JobDef | None:
        """The definition, or its tombstone when deleted (``deleted_at`` set)."""
        ...

    async def job_defs_in(self, buckets: Sequence[int], after: ShareKey, limit: int
                          ) -> tuple[list[JobDef], ShareKey | None]:
        """A process's share: at most ``limit`` live definitions whose bucket is one of
        ``buckets``, after ``after`` in ``(bucket, id)`` order, read through the index
        on ``(bucket, id)`` (nothing outside ``buckets`` is read), and the key to pass
        for the next page (``None``: there is none)."""
        ...

    async def job_defs_page(self, team: str, *, after: str = "", prefix: str = "",
                            limit: int, include_deleted: bool = False) -> list[JobDef]:
        """One keyset page of ``team``'s live definitions (``include_deleted``: and its
        tombstones): at most ``limit``, ids after
        ``after`` and starting with ``prefix`` (an id prefix: ASCII, as job ids are), in
        id order (code points, as Python orders ``str``). An index on ``(team, id)``
        answers it without reading the other definitions (docs/internals.md, "Indexes
        the reads use")."""
        ...

    async def job_def_teams(self, ids: Sequence[str]) -> dict[str, str]:
        """The team of each of ``ids`` that has a definition (tombstones included: a
        deleted job's runs keep its team), in one read."""
        ...

    async def count_job_defs(self, team: str) -> DefCount:
        """How many live definitions ``team`` has: exact where counting is cheap, else an
        estimate (:class:`DefCount`), so a page that shows a total never scans."""
        ...

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        """Insert (or revive a tombstone of the same team); None when a live definition
        has this id, another team's deleted one (its runs keep that team), or the id is
        reserved to another team by a config or code job (:meth:`reserve_ids`)."""
        ...

    async def create_job_defs(self, items: Sequence[tuple[str, dict[str, Any]]], team: str,
                              by: str | None, role: str | None = None, *,
                              dry_run: bool = False) -> tuple[list[JobDef], list[str]]:
        """Every ``(id, spec)`` as :meth:`create_job_def` would insert it, in one
        transaction, all or nothing: answers ``(definitions, [])`` when every one was
        written, or ``([], taken ids)`` -- the ids :meth:`create_job_def` would refuse
        (or repeated in ``items``) -- when none was. ``dry_run``: the same decision, and
        nothing is ever written (the definitions answered are what would be stored)."""
        ...

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        """Replace the spec of a live definition of ``team``; None when there is none (or
        when ``expect_version`` no longer matches: someone changed it meanwhile)."""
        ...

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool: ...

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        """Record ``(id, team, source)`` of jobs declared in config or code: their ids stay
        their team's. A job moved to another team in its config moves its reservation
        with it (the operator's call)."""
        ...

    async def reserved_ids(self, team: str) -> list[str]:
        """The ids of config or code jobs that belong (or belonged) to ``team``."""
        ...

    async def reserved_team(self, job_id: str) -> str | None:
        """The team a config or code job with this id belonged to, or None."""
        ...

    async def close(self) -> None: ...


class Opener(Protocol[S]):
    """Where an owned side table gets its store (``store/factory.py``)."""

    async def acquire(self, store: S) -> S:
        """An open store like ``store`` (``store`` itself, opened, or one already open)."""
        ...

    async def release(self, store: S) -> None: ...


class StoreHandle(Generic[S]):
    """The store a side table runs on. Shared (no ``opener``): the caller opens and
    closes it (the scheduler's store). Owned: the factory's ``opener`` hands an open
    store for this table's URL on first use and takes it back when the table closes."""

    def __init__(self, store: S, *, opener: Opener[S] | None = None) -> None:
        self.store = store  # what the table reads its names from (schema, prefix)
        self._opener = opener
        self._held: S | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> S:
        if self._opener is None:
            return self.store
        if self._held is None:
            async with self._lock:
                if self._held is None:
                    self._held = await self._opener.acquire(self.store)
        return self._held

    async def close(self) -> None:
        held, self._held = self._held, None
        if held is not None and self._opener is not None:
            await self._opener.release(held)
