"""The side tables in memory (for tests and single-process embedding): the same contract
as the SQL and Redis tables (:mod:`cronfleet.store.side`), in the conformance suite.

:func:`memory_side` gives the tables of a :class:`~cronfleet.store.memory.MemoryStore`:
every store object on one ``MemoryDatabase`` sees the same rows, as processes on one
database file do.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronfleet.clock import Clock, SystemClock
from cronfleet.shares import bucket_of
from cronfleet.store.side import (
    AuditEntry,
    ChangeKey,
    DefCount,
    JobDef,
    JobHealth,
    SecretRow,
    ShareKey,
    TokenInfo,
    TokenTouches,
    check_role,
    hash_token,
    new_token,
    repeated,
    req_dt,
)

if TYPE_CHECKING:
    from cronfleet.store.memory import MemoryStore

__all__ = ["MemoryApiStore", "MemoryHealthStore", "MemorySecretStore", "MemorySide",
           "memory_side"]


class MemorySecretStore:
    """Secret ciphertexts in a dict."""

    def __init__(self, rows: dict[tuple[str, str], SecretRow] | None = None) -> None:
        self.rows: dict[tuple[str, str], SecretRow] = {} if rows is None else rows

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


class MemoryHealthStore:
    """Per-job health rows in a dict."""

    def __init__(self, rows: dict[str, JobHealth] | None = None) -> None:
        self.rows: dict[str, JobHealth] = {} if rows is None else rows

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


@dataclass
class _ApiRows:
    tokens: dict[str, tuple[TokenInfo, str]] = field(default_factory=dict)  # id -> digest
    audit: list[AuditEntry] = field(default_factory=list)
    defs: dict[str, JobDef] = field(default_factory=dict)
    version: int = 0
    reserved: dict[str, tuple[str, str, int]] = field(default_factory=dict)


def _ms(clock: Clock) -> int:
    return int(clock.now() * 1000)


class MemoryApiStore:
    """Tokens, audit log and the catalog in memory."""

    def __init__(self, rows: _ApiRows | None = None, *, clock: Clock | None = None) -> None:
        self._rows = _ApiRows() if rows is None else rows
        self.clock: Clock = clock or SystemClock()
        self._touches = TokenTouches()

    async def close(self) -> None:
        return None

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        check_role(role)
        token_id, plaintext = new_token()
        info = TokenInfo(token_id, name, team, role, req_dt(_ms(self.clock)), created_by,
                         None, None)
        self._rows.tokens[token_id] = (info, hash_token(plaintext))
        return plaintext, info

    async def authenticate(self, plaintext: str) -> TokenInfo | None:
        digest = hash_token(plaintext)
        for info, held in self._rows.tokens.values():
            if held == digest and info.revoked_at is None:
                if self._touches.due(info.id):
                    self._rows.tokens[info.id] = (
                        replace(info, last_used_at=req_dt(_ms(self.clock))), held)
                return info
        return None

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]:
        rows = [t for t, _ in self._rows.tokens.values() if team is None or t.team == team]
        return sorted(rows, key=lambda t: (t.team if team is None else "", t.created_at, t.id))

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        now = req_dt(_ms(self.clock))
        out = []
        for token_id, (info, held) in list(self._rows.tokens.items()):
            if info.revoked_at is None and id_or_name in (info.id, info.name):
                info = replace(info, revoked_at=now)
                self._rows.tokens[token_id] = (info, held)
                out.append(info)
        return out

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None:
        # stored as the SQL tables store it: JSON text (non-JSON values as their str)
        kept = json.loads(json.dumps(details or {}, default=str, sort_keys=True))
        self._rows.audit.append(AuditEntry(len(self._rows.audit) + 1, req_dt(_ms(self.clock)),
                                           team, actor, action, target, kept))

    async def audit_entries(self, team: str, *, limit: int = 50,
                            before_id: int | None = None) -> list[AuditEntry]:
        top = before_id if before_id is not None else 2**62
        found = [e for e in reversed(self._rows.audit) if e.team == team and e.id < top]
        return found[:limit]

    async def catalog_version(self) -> int:
        return self._rows.version

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]:
        return sorted((d for d in self._rows.defs.values()
                       if include_deleted or d.deleted_at is None), key=lambda d: d.id)

    async def job_defs_changed(self, after: ChangeKey, limit: int) -> list[JobDef]:
        changed = sorted((d for d in self._rows.defs.values() if (d.version, d.id) > after),
                         key=lambda d: (d.version, d.id))
        return changed[:limit]

    async def job_def(self, job_id: str) -> JobDef | None:
        return self._rows.defs.get(job_id)

    async def job_defs_in(self, buckets: Sequence[int], after: ShareKey, limit: int
                          ) -> tuple[list[JobDef], ShareKey | None]:
        wanted = set(buckets)
        keyed = sorted(((bucket_of(d.id), d.id), d) for d in self._rows.defs.values()
                       if d.deleted_at is None and bucket_of(d.id) in wanted)
        page = [(k, d) for k, d in keyed if k > after][:limit]
        more = len(page) == limit and page[-1][0] != keyed[-1][0]
        return [d for _, d in page], (page[-1][0] if more else None)

    async def job_defs_page(self, team: str, *, after: str = "", prefix: str = "",
                            limit: int, include_deleted: bool = False) -> list[JobDef]:
        found = sorted((d for d in self._rows.defs.values()
                        if d.team == team and (include_deleted or d.deleted_at is None)
                        and d.id > after
                        and d.id.startswith(prefix)), key=lambda d: d.id)
        return found[:limit]

    async def job_def_teams(self, ids: Sequence[str]) -> dict[str, str]:
        defs = self._rows.defs
        return {i: defs[i].team for i in ids if i in defs}

    async def count_job_defs(self, team: str) -> DefCount:
        return DefCount(sum(1 for d in self._rows.defs.values()
                            if d.team == team and d.deleted_at is None))

    def _bump(self, new: JobDef) -> JobDef:
        """The one writer of a definition: ``new`` carries the next store-wide version
        (``version + 1``), which puts it at the end of the change feed."""
        assert new.version == self._rows.version + 1
        self._rows.version = new.version
        self._rows.defs[new.id] = new
        return new

    def _new_def(self, job_id: str, team: str, spec: dict[str, Any], by: str | None,
                 role: str | None, version: int, now: datetime) -> JobDef | None:
        """The definition :meth:`create_job_def` writes at ``version`` (None: refused)."""
        old = self._rows.defs.get(job_id)
        if old is not None and (old.deleted_at is None or old.team != team):
            return None
        held = self._rows.reserved.get(job_id)
        if held is not None and held[0] != team:
            return None
        return JobDef(job_id, team, _spec(spec), version, now, now, by, by, None, role)

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        new = self._new_def(job_id, team, spec, by, role, self._rows.version + 1,
                            req_dt(_ms(self.clock)))
        return None if new is None else self._bump(new)

    async def create_job_defs(self, items: Sequence[tuple[str, dict[str, Any]]], team: str,
                              by: str | None, role: str | None = None, *,
                              dry_run: bool = False) -> tuple[list[JobDef], list[str]]:
        dupes = repeated([job_id for job_id, _ in items])
        if dupes:  # as every store answers: the repeated ids alone
            return [], dupes
        now = req_dt(_ms(self.clock))
        news = [self._new_def(job_id, team, spec, by, role, self._rows.version + 1 + i, now)
                for i, (job_id, spec) in enumerate(items)]
        taken = [job_id for (job_id, _), new in zip(items, news, strict=True) if new is None]
        if taken:
            return [], taken
        written = [n for n in news if n is not None]
        if not dry_run:
            for new in written:
                self._bump(new)
        return written, []

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        old = self._rows.defs.get(job_id)
        if old is None or old.deleted_at is not None or old.team != team:
            return None
        if expect_version is not None and old.version != expect_version:
            return None
        return self._bump(replace(old, spec=_spec(spec), version=self._rows.version + 1,
                                  updated_at=req_dt(_ms(self.clock)), updated_by=by,
                                  saved_role=role))

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool:
        old = self._rows.defs.get(job_id)
        if old is None or old.deleted_at is not None or old.team != team:
            return False
        now = req_dt(_ms(self.clock))
        self._bump(replace(old, deleted_at=now, version=self._rows.version + 1, updated_at=now,
                           updated_by=by))
        return True

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        now = _ms(self.clock)
        for job_id, team, source in jobs:
            old = self._rows.reserved.get(job_id)
            if old is None or old[:2] != (team, source):
                self._rows.reserved[job_id] = (team, source, now if old is None else old[2])

    async def reserved_ids(self, team: str) -> list[str]:
        return sorted(j for j, (t, _, _) in self._rows.reserved.items() if t == team)

    async def reserved_team(self, job_id: str) -> str | None:
        held = self._rows.reserved.get(job_id)
        return None if held is None else held[0]


def _spec(spec: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(spec, sort_keys=True))
    return copied  # a copy, as a database keeps it: the caller's dict may change


@dataclass
class MemorySide:
    """The side tables of one memory database."""

    secrets: MemorySecretStore = field(default_factory=MemorySecretStore)
    health: MemoryHealthStore = field(default_factory=MemoryHealthStore)
    api: _ApiRows = field(default_factory=_ApiRows)


_BY_DATABASE: dict[int, MemorySide] = {}


def memory_side(store: MemoryStore) -> MemorySide:
    """The side tables of ``store``'s database (made on first use, dropped with it)."""
    db = store.db
    key = id(db)
    side = _BY_DATABASE.get(key)
    if side is None:
        side = _BY_DATABASE[key] = MemorySide()
        weakref.finalize(db, _BY_DATABASE.pop, key, None)
    return side
