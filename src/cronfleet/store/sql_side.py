"""The side tables on SQL, written once for SQLite and PostgreSQL over a :class:`SideSQL`:
each dialect package runs its own named statements (``sqlite/side/queries.sql``,
``postgres/side/queries.sql``, the same names in both) on the run store's connection.

* Tokens are stored as SHA-256 digests (a token is 256 random bits, so a slow password
  hash would add nothing but latency to every request); the plaintext is shown once.
* Catalog writes bump a store-wide ``version`` (``max(version) + 1`` inside the writing
  statement, one writer at a time: SQLite's write lock, a transaction-scoped advisory lock
  on PostgreSQL), so a scheduler can tell with one ``max(version)`` read whether anything
  changed, and read what did in ``(version, id)`` keyset pages (``defs_changed``, index
  ``job_defs_change``): writers take turns until commit, so a version becomes visible only
  after every lower one. Deleted definitions stay as tombstones, so the runs of a deleted
  job keep their team. Every statement that writes ``job_defs`` sets the version that way
  and runs through :meth:`SqlApiStore._write_defs`.
* A health record is one transaction with the job's row locked: exactly one process sees
  each transition.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from cronfleet.clock import Clock, SystemClock
from cronfleet.errors import StoreError
from cronfleet.shares import BUCKETS, bucket_of
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
    dt,
    hash_token,
    new_token,
    prefix_end,
    repeated,
    req_dt,
)

__all__ = ["Rows", "SideSQL", "SqlApiStore", "SqlHealthStore", "SqlSecretStore", "Step"]

Rows = list[tuple[Any, ...]]
COUNT_CAP = 10_000
"""A team's definitions are counted up to this many (an index scan); past it the count is
the database's estimate (PostgreSQL's statistics; SQLite counts them all)."""
Step = tuple[str, tuple[Any, ...]]  # (statement name, parameters)


class SideSQL(Protocol):
    """A dialect's side-table statements on its store's connection."""

    estimates: bool
    """``defs_estimate`` answers an estimate (PostgreSQL's statistics), not a count."""

    def time(self, at: datetime) -> Any:
        """A ``TIMESTAMPTZ``-or-integer column's value (SQLite: integer ms)."""
        ...

    async def query(self, name: str, params: tuple[Any, ...] = ()) -> Rows:
        """One named statement, on its own."""
        ...

    async def write(self, name: str, params: tuple[Any, ...] = (), *, catalog: bool = False
                    ) -> Rows:
        """One named statement; ``catalog``: serialised against every catalog writer."""
        ...

    async def write_each(self, name: str, params: Sequence[tuple[Any, ...]], *,
                         catalog: bool = False,
                         keep: Callable[[list[Rows]], bool] = lambda rows: True
                         ) -> list[Rows]:
        """One transaction: the named statement once per parameter tuple, in order; it
        commits when ``keep(the rows of each)`` is true, and is rolled back otherwise.
        ``catalog``: serialised against every catalog writer."""
        ...

    async def atomic(self, first: Sequence[Step], read: Step,
                     then: Callable[[Rows], Sequence[Step]]) -> Rows:
        """One transaction: the ``first`` statements, then ``read`` (its rows locked on
        PostgreSQL; SQLite has one writer at a time), then the statements ``then(rows)``
        computes from what was read. Returns the rows read."""
        ...

    async def announce(self, kind: str) -> None:
        """Tell the other processes that something of ``kind`` changed (if the database
        can: PostgreSQL ``NOTIFY`` on the store's channel)."""
        ...

    async def close(self) -> None: ...


def _at(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    assert isinstance(value, datetime)
    return value


# -- secrets ------------------------------------------------------------------------------------


def _secret(r: tuple[Any, ...]) -> SecretRow:
    hosts = tuple(json.loads(r[7])) if r[7] is not None else None
    return SecretRow(r[0], r[1], r[2], bytes(r[3]), bytes(r[4]), _at(r[5]), _at(r[6]), hosts)


class SqlSecretStore:
    """The ``secrets`` table (ciphertext only) next to the run store."""

    def __init__(self, db: SideSQL) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"SqlSecretStore({self._db!r})"

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        rows = await self._db.query("secret_get", (namespace, name))
        return _secret(rows[0]) if rows else None

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        at = self._db.time(now)
        put: Step = ("secret_put", (namespace, name, key_id, nonce, ciphertext, at, at,
                                    None if hosts is None else json.dumps(list(hosts))))
        found = await self._db.atomic([], ("secret_exists", (namespace, name)),
                                      lambda rows: [put])
        return not found

    async def delete_secret(self, namespace: str, name: str) -> bool:
        return bool(await self._db.query("secret_delete", (namespace, name)))

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        if namespace is None:
            rows = await self._db.query("secrets_all")
        else:
            rows = await self._db.query("secrets_of_namespace", (namespace,))
        return [_secret(r) for r in rows]

    async def close(self) -> None:
        await self._db.close()


# -- job health ---------------------------------------------------------------------------------


def _health(row: tuple[Any, ...]) -> JobHealth:
    at = None if row[6] is None else _at(row[6])
    return JobHealth(row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], at)


class SqlHealthStore:
    """The ``job_health`` table: one row per job."""

    def __init__(self, db: SideSQL) -> None:
        self._db = db

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        found: list[tuple[JobHealth, JobHealth]] = []

        def update(rows: Rows) -> list[Step]:
            before = _health(rows[0]) if rows else JobHealth(job_id)
            after = before.after(ok, duration, now)
            found.append((before, after))
            return [("health_write", (after.last_outcome, after.consecutive_failures,
                                      after.successes, after.failures, after.last_duration,
                                      self._db.time(now), job_id))]

        # one transaction, the row locked: exactly one process sees each transition
        await self._db.atomic([("health_ensure", (job_id,))], ("health_lock", (job_id,)),
                              update)
        return found[-1]

    async def get(self, job_id: str) -> JobHealth:
        rows = await self._db.query("health_get", (job_id,))
        return _health(rows[0]) if rows else JobHealth(job_id)

    async def close(self) -> None:
        await self._db.close()


# -- tokens, audit log, catalog -----------------------------------------------------------------


def _token(r: tuple[Any, ...]) -> TokenInfo:
    return TokenInfo(r[0], r[1], r[2], r[3], req_dt(r[4]), r[5], dt(r[6]), dt(r[7]))


def _def(r: tuple[Any, ...], spec: dict[str, Any] | None = None) -> JobDef:
    """A definition from its row; ``spec``: the one just written (not parsed back)."""
    return JobDef(r[0], r[1], json.loads(r[2]) if spec is None else spec, int(r[3]),
                  req_dt(r[4]), req_dt(r[5]), r[6], r[7], dt(r[8]), r[9])


class SqlApiStore:
    """Tokens, audit log, job definitions and reserved ids (times: integer ms of
    ``clock``, in both dialects)."""

    def __init__(self, db: SideSQL, *, clock: Clock | None = None) -> None:
        self._db = db
        self.clock: Clock = clock or SystemClock()
        self._touches = TokenTouches()

    def __repr__(self) -> str:
        return f"SqlApiStore({self._db!r})"

    def _now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    async def close(self) -> None:
        await self._db.close()

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        check_role(role)
        token_id, plaintext = new_token()
        now = self._now_ms()
        await self._db.query("token_insert", (token_id, name, team, role,
                                              hash_token(plaintext), now, created_by))
        return plaintext, TokenInfo(token_id, name, team, role, req_dt(now), created_by,
                                    None, None)

    async def authenticate(self, plaintext: str) -> TokenInfo | None:
        rows = await self._db.query("token_by_hash", (hash_token(plaintext),))
        if not rows:
            return None
        info = _token(rows[0])
        if self._touches.due(info.id):  # no write on every request
            await self._db.query("token_touch", (self._now_ms(), info.id))
        return info

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]:
        if team is None:
            rows = await self._db.query("tokens_all")
        else:
            rows = await self._db.query("tokens_of_team", (team,))
        return [_token(r) for r in rows]

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        rows = await self._db.query("token_revoke", (self._now_ms(), id_or_name, id_or_name))
        return [_token(r) for r in rows]

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None:
        await self._db.query("audit_insert", (
            self._now_ms(), team, actor, action, target,
            json.dumps(details or {}, default=str, sort_keys=True)))

    async def audit_entries(self, team: str, *, limit: int = 50,
                            before_id: int | None = None) -> list[AuditEntry]:
        rows = await self._db.query(
            "audit_page", (team, before_id if before_id is not None else 2**62, limit))
        return [AuditEntry(int(r[0]), req_dt(r[1]), r[2], r[3], r[4], r[5], json.loads(r[6]))
                for r in rows]

    async def catalog_version(self) -> int:
        rows = await self._db.query("catalog_version")
        return int(rows[0][0])

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]:
        rows = await self._db.query("defs_all" if include_deleted else "defs_live")
        return [_def(r) for r in rows]

    async def job_defs_changed(self, after: ChangeKey, limit: int) -> list[JobDef]:
        rows = await self._db.query("defs_changed", (after[0], after[1], limit))
        return [_def(r) for r in rows]

    async def job_def(self, job_id: str) -> JobDef | None:
        rows = await self._db.query("def_get", (job_id,))
        return _def(rows[0]) if rows else None

    async def job_defs_in(self, buckets: Sequence[int], after: ShareKey, limit: int
                          ) -> tuple[list[JobDef], ShareKey | None]:
        out: list[JobDef] = []
        wanted = sorted(set(buckets))
        first, last = after
        i = bisect.bisect_left(wanted, first)
        while i < len(wanted):
            b = wanted[i]
            rows = await self._db.query("defs_of_bucket",
                                        (b, last if b == first else "", limit - len(out)))
            out += [_def(r) for r in rows]
            if len(out) >= limit:
                return out, (b, out[-1].id)
            if rows:
                i += 1
                continue
            # nothing there: skip to the next bucket holding anything (a small catalog
            # costs two reads, not one per bucket)
            [(present,)] = await self._db.query("defs_next_bucket", (b + 1,))
            if present is None:
                break
            i = bisect.bisect_left(wanted, int(present))
        # written without a bucket (an older cronfleet, during a rolling upgrade): last,
        # the bucket of each judged here
        if first > BUCKETS:
            return out, None
        seen, mine = last if first == BUCKETS else "", set(wanted)
        while True:
            rows = await self._db.query("defs_unbucketed", (seen, limit - len(out)))
            if not rows:
                return out, None
            seen = rows[-1][0]
            out += [d for d in map(_def, rows) if bucket_of(d.id) in mine]
            if len(out) >= limit:
                return out, (BUCKETS, seen)

    async def job_defs_page(self, team: str, *, after: str = "", prefix: str = "",
                            limit: int, include_deleted: bool = False) -> list[JobDef]:
        if prefix:
            rows = await self._db.query("defs_page_below", (
                team, include_deleted, after, prefix, prefix_end(prefix), limit))
        else:
            rows = await self._db.query("defs_page", (team, include_deleted, after, "",
                                                      limit))
        return [_def(r) for r in rows]

    async def job_def_teams(self, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        rows = await self._db.query("defs_teams", (json.dumps(list(ids)),))
        return {str(r[0]): str(r[1]) for r in rows}

    async def count_job_defs(self, team: str) -> DefCount:
        if not self._db.estimates:  # SQLite: no estimate kept, the exact count at once
            rows = await self._db.query("defs_estimate", (team,))
            return DefCount(int(rows[0][0]))
        rows = await self._db.query("defs_count_capped", (team, COUNT_CAP + 1))
        counted = int(rows[0][0])
        if counted <= COUNT_CAP:
            return DefCount(counted)
        rows = await self._db.query("defs_estimate", (team,))
        n = int(rows[0][0]) if rows and rows[0][0] is not None else counted
        return DefCount(max(n, counted), estimated=True)

    @staticmethod
    def _create_params(job_id: str, team: str, spec: dict[str, Any], by: str | None,
                       role: str | None, now: int) -> tuple[Any, ...]:
        """``def_create``'s parameters (one definition, alone or in a batch)."""
        return (job_id, team, json.dumps(spec, sort_keys=True), now, now, by, by, role,
                bucket_of(job_id), job_id, team)

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        made, _ = await self.create_job_defs([(job_id, spec)], team, by, role)
        return made[0] if made else None

    async def create_job_defs(self, items: Sequence[tuple[str, dict[str, Any]]], team: str,
                              by: str | None, role: str | None = None, *,
                              dry_run: bool = False) -> tuple[list[JobDef], list[str]]:
        dupes = repeated([job_id for job_id, _ in items])
        if dupes:
            return [], dupes
        if not items:
            return [], []
        now = self._now_ms()
        # the one insert statement of a definition, once per item, in one transaction
        results = await self._db.write_each(
            "def_create", [self._create_params(job_id, team, spec, by, role, now)
                           for job_id, spec in items],
            catalog=True, keep=lambda each: not dry_run and all(each))
        taken = [job_id for (job_id, _), rows in zip(items, results, strict=True) if not rows]
        if taken:
            return [], taken
        if not dry_run:
            await self._announce()
        return [_def(rows[0], spec) for (_, spec), rows in zip(items, results, strict=True)], []

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        rows = await self._write_defs(
            "def_update", (json.dumps(spec, sort_keys=True), self._now_ms(), by, role, job_id,
                           team, expect_version, expect_version))
        return _def(rows[0]) if rows else None

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool:
        now = self._now_ms()
        return bool(await self._write_defs("def_delete", (now, now, by, job_id, team)))

    async def _write_defs(self, name: str, params: tuple[Any, ...]) -> Rows:
        """An update or a delete of ``job_defs`` (a new definition goes through
        :meth:`create_job_defs`): the statement ``name`` runs serialised against every
        catalog writer (``catalog=True``) and sets the row it writes to the next
        store-wide version (``(SELECT coalesce(max(version), 0) + 1 FROM job_defs)``),
        which puts the row in the change feed; other schedulers are told when it wrote
        anything."""
        rows = await self._db.write(name, params, catalog=True)
        if rows:
            await self._announce()
        return rows

    async def _announce(self) -> None:
        """Tell other schedulers the catalog changed (the change is stored: they see it
        at their next look anyway). A batch (``create_job_defs``: one transaction under
        the same lock) announces once."""
        with contextlib.suppress(StoreError):
            await self._db.announce("catalog")

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        if not jobs:
            return
        now = self._now_ms()
        for start in range(0, len(jobs), 500):
            chunk = [list(j) for j in jobs[start:start + 500]]
            await self._db.write("ids_reserve", (now, json.dumps(chunk)))

    async def reserved_ids(self, team: str) -> list[str]:
        return [str(r[0]) for r in await self._db.query("ids_of_team", (team,))]

    async def reserved_team(self, job_id: str) -> str | None:
        rows = await self._db.query("id_team", (job_id,))
        return str(rows[0][0]) if rows else None
