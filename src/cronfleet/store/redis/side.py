"""The side tables on Redis: secret ciphertext, job health, API tokens, the audit log and
the catalog of API jobs, next to a :class:`~cronfleet.store.redis.RedisStore` under the
same key prefix (``<prefix>side:…``), so ``cronfleet run`` needs only a Redis URL.

Each class answers the same interface as its SQL twin (``SecretStore``, ``HealthStore``,
``ApiStore``); read-modify-write steps (a health transition, a catalog write with its
store-wide version, a token revoke) are optimistic ``WATCH``/``MULTI`` transactions, so
exactly one process sees each transition and versions never commit out of order. Catalog
writes ``PUBLISH <prefix>events`` (the run store's channel) so every scheduler looks at
once. Times are integer milliseconds of this host's clock, as on SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rexc

from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.store.api import (
    ROLES,
    TOKEN_PREFIX,
    ApiStore,
    AuditEntry,
    JobDef,
    TokenInfo,
    hash_token,
)
from cronfleet.store.health import JobHealth
from cronfleet.store.secrets import SecretRow
from cronfleet.store.url import parse_store_url, redact_url

__all__ = ["RedisApiStore", "RedisHealthStore", "RedisSecretStore"]

T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dt(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _req(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class _Side:
    """One small client per user, under the run store's prefix."""

    def __init__(self, url: str, what: str) -> None:
        parsed = parse_store_url(url)
        if parsed.dialect != "redis":
            raise StoreError(f"not a Redis URL: {redact_url(url)!r}")
        self.url = url
        self.what = what
        self.prefix = parsed.prefix
        self._conninfo = parsed.conninfo
        self._client: aioredis.Redis | None = None

    def key(self, name: str) -> str:
        return f"{self.prefix}side:{name}"

    def client(self) -> aioredis.Redis:
        if self._client is None:
            pool = aioredis.BlockingConnectionPool.from_url(
                self._conninfo, max_connections=4, timeout=30, socket_connect_timeout=5,
                socket_timeout=None, socket_keepalive=True,
            )  # no socket_timeout: see RedisStore.open (asyncio.wait_for in redis-py)
            self._client = aioredis.Redis(connection_pool=pool, decode_responses=False)
        return self._client

    async def go(self, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(60):
                return await fn(self.client())
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise StoreUnavailable(
                f"{self.what}: Redis at {redact_url(self.url)} unavailable: {exc}"
            ) from exc
        except rexc.RedisError as exc:
            raise StoreError(f"{self.what}: {exc}") from exc

    async def atomic(
        self, keys: list[str], body: Callable[[Any], Awaitable[T]]
    ) -> T:
        """``body(pipe)`` under ``WATCH keys`` (reads go straight, then ``pipe.multi()``
        and the writes); retried when a watched key changed meanwhile."""

        async def run(client: aioredis.Redis) -> T:
            for _ in range(100):
                async with client.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(*keys)
                        result = await body(pipe)
                        await pipe.execute()
                        return result
                    except rexc.WatchError:
                        continue
            raise StoreError(f"{self.what}: too much contention on {keys}")

        return await self.go(run)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose(close_connection_pool=True)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# -- secrets (ciphertext only) -----------------------------------------------------------------


class RedisSecretStore:
    """Secret ciphertext in one hash, ``namespace \\0 name`` -> JSON."""

    def __init__(self, url: str) -> None:
        self._side = _Side(url, "secrets")
        self._key = self._side.key("secrets")

    def __repr__(self) -> str:
        return f"RedisSecretStore(prefix={self._side.prefix!r})"

    @staticmethod
    def _row(raw: Any) -> SecretRow:
        d = json.loads(raw)
        hosts = d.get("hosts")
        return SecretRow(d["ns"], d["name"], d["key_id"], base64.b64decode(d["nonce"]),
                         base64.b64decode(d["ct"]), _req(d["created"]), _req(d["updated"]),
                         None if hosts is None else tuple(hosts))

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        raw = await self._side.go(lambda c: c.hget(self._key, f"{namespace}\0{name}"))
        return None if raw is None else self._row(raw)

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        field = f"{namespace}\0{name}"
        at = int(now.timestamp() * 1000)

        async def body(pipe: Any) -> bool:
            old = await pipe.hget(self._key, field)
            created = at if old is None else json.loads(old)["created"]
            pipe.multi()
            pipe.hset(self._key, field, json.dumps({
                "ns": namespace, "name": name, "key_id": key_id,
                "nonce": base64.b64encode(nonce).decode(),
                "ct": base64.b64encode(ciphertext).decode(), "created": created, "updated": at,
                "hosts": None if hosts is None else list(hosts),
            }))  # fmt: skip
            return old is None

        return await self._side.atomic([self._key], body)

    async def delete_secret(self, namespace: str, name: str) -> bool:
        n = await self._side.go(lambda c: c.hdel(self._key, f"{namespace}\0{name}"))
        return bool(n)

    async def list_secrets(self, namespace: str | None) -> list[SecretRow]:
        raw = await self._side.go(lambda c: c.hvals(self._key))
        rows = [self._row(r) for r in raw]
        if namespace is not None:
            rows = [r for r in rows if r.namespace == namespace]
        return sorted(rows, key=lambda r: (r.namespace, r.name))

    async def close(self) -> None:
        await self._side.close()


# -- job health -------------------------------------------------------------------------------


class RedisHealthStore:
    """Per-job health rows in one hash, job id -> JSON."""

    def __init__(self, url: str) -> None:
        self._side = _Side(url, "job health")
        self._key = self._side.key("health")

    @staticmethod
    def _row(job_id: str, raw: Any) -> JobHealth:
        if raw is None:
            return JobHealth(job_id)
        d = json.loads(raw)
        return JobHealth(job_id, d["last_outcome"], d["consecutive_failures"], d["successes"],
                         d["failures"], d["last_duration"], _dt(d["last_run_at"]))

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        async def body(pipe: Any) -> tuple[JobHealth, JobHealth]:
            before = self._row(job_id, await pipe.hget(self._key, job_id))
            after = before.after(ok, duration, now)
            d = asdict(after)
            d["last_run_at"] = int(now.timestamp() * 1000)
            pipe.multi()
            pipe.hset(self._key, job_id, json.dumps(d))
            return before, after

        # optimistic: exactly one process sees each transition
        return await self._side.atomic([self._key], body)

    async def get(self, job_id: str) -> JobHealth:
        return self._row(job_id, await self._side.go(lambda c: c.hget(self._key, job_id)))

    async def close(self) -> None:
        await self._side.close()


# -- tokens, audit log, catalog -----------------------------------------------------------------


def _token(raw: Any) -> TokenInfo:
    d = json.loads(raw)
    return TokenInfo(d["id"], d["name"], d["team"], d["role"], _req(d["created_at"]),
                     d["created_by"], _dt(d["revoked_at"]), _dt(d["last_used_at"]))


def _token_json(t: TokenInfo, digest: str) -> str:
    def ms(d: datetime | None) -> int | None:
        return None if d is None else int(d.timestamp() * 1000)

    return json.dumps({"id": t.id, "name": t.name, "team": t.team, "role": t.role,
                       "hash": digest, "created_at": ms(t.created_at),
                       "created_by": t.created_by, "revoked_at": ms(t.revoked_at),
                       "last_used_at": ms(t.last_used_at)})


def _def(raw: Any) -> JobDef:
    d = json.loads(raw)
    return JobDef(d["id"], d["team"], d["spec"], int(d["version"]), _req(d["created_at"]),
                  _req(d["updated_at"]), d["created_by"], d["updated_by"],
                  _dt(d["deleted_at"]), d.get("saved_role"))


def _def_json(job_id: str, team: str, spec: dict[str, Any], version: int, created: int,
              updated: int, created_by: str | None, updated_by: str | None,
              deleted: int | None = None, saved_role: str | None = None) -> str:
    return json.dumps({"id": job_id, "team": team, "spec": spec, "version": version,
                       "created_at": created, "updated_at": updated, "created_by": created_by,
                       "updated_by": updated_by, "deleted_at": deleted,
                       "saved_role": saved_role}, sort_keys=True)


class RedisApiStore(ApiStore):
    """:class:`ApiStore` on Redis (``ApiStore(url)`` builds one for a ``redis://`` URL).

    Keys: ``side:tokens`` (id -> JSON with the SHA-256 digest), ``side:token_hash``
    (digest -> id), ``side:audit`` (id -> JSON) with ``side:audit:<team>`` (ids by id),
    ``side:defs`` (id -> JSON, tombstones kept), ``side:defs:version`` (the store-wide
    catalog version) and ``side:job_ids`` (ids of config / code jobs reserved to their
    team)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._side = _Side(url, "API tables")
        self._touched: dict[str, float] = {}
        k = self._side.key
        self._tokens, self._hashes = k("tokens"), k("token_hash")
        self._audit, self._audit_id = k("audit"), k("audit:id")
        self._defs, self._version = k("defs"), k("defs:version")
        self._reserved = k("job_ids")

    def __repr__(self) -> str:
        return f"RedisApiStore(prefix={self._side.prefix!r})"

    async def close(self) -> None:
        await self._side.close()

    # -- tokens -------------------------------------------------------------------------

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        token_id = secrets.token_hex(4)
        plaintext = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        info = TokenInfo(token_id, name, team, role, _req(_now_ms()), created_by, None, None)
        digest = hash_token(plaintext)

        async def write(c: aioredis.Redis) -> None:
            async with c.pipeline(transaction=True) as pipe:
                pipe.hset(self._tokens, token_id, _token_json(info, digest))
                pipe.hset(self._hashes, digest, token_id)
                await pipe.execute()

        await self._side.go(write)
        return plaintext, info

    async def authenticate(self, plaintext: str) -> TokenInfo | None:
        digest = hash_token(plaintext)

        async def read(c: aioredis.Redis) -> Any:
            token_id = await c.hget(self._hashes, digest)
            return None if token_id is None else await c.hget(self._tokens, token_id)

        raw = await self._side.go(read)
        if raw is None:
            return None
        info = _token(raw)
        if info.revoked_at is not None:
            return None
        mono = time.monotonic()
        if mono - self._touched.get(info.id, -1e9) > 60:
            self._touched[info.id] = mono

            async def touch(pipe: Any) -> None:
                cur = await pipe.hget(self._tokens, info.id)
                if cur is None:
                    return
                d = json.loads(cur)
                d["last_used_at"] = _now_ms()
                pipe.multi()
                pipe.hset(self._tokens, info.id, json.dumps(d))

            await self._side.atomic([self._tokens], touch)
        return info

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]:
        rows = [_token(r) for r in await self._side.go(lambda c: c.hvals(self._tokens))]
        if team is not None:
            rows = [t for t in rows if t.team == team]
        return sorted(rows, key=lambda t: (t.team if team is None else "", t.created_at, t.id))

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        async def body(pipe: Any) -> list[TokenInfo]:
            now = _now_ms()
            out, writes = [], {}
            for raw in await pipe.hvals(self._tokens):
                d = json.loads(raw)
                if d["revoked_at"] is None and id_or_name in (d["id"], d["name"]):
                    d["revoked_at"] = now
                    writes[d["id"]] = json.dumps(d)
                    out.append(_token(writes[d["id"]]))
            pipe.multi()
            if writes:
                pipe.hset(self._tokens, mapping=writes)
            return out

        return await self._side.atomic([self._tokens], body)

    # -- audit --------------------------------------------------------------------------

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None:
        async def write(c: aioredis.Redis) -> None:
            entry_id = int(await c.incr(self._audit_id))
            body = json.dumps({"id": entry_id, "at": _now_ms(), "team": team, "actor": actor,
                               "action": action, "target": target,
                               "details": details or {}}, default=str, sort_keys=True)
            async with c.pipeline(transaction=True) as pipe:
                pipe.hset(self._audit, str(entry_id), body)
                pipe.zadd(f"{self._audit}:{team}", {str(entry_id): entry_id})
                await pipe.execute()

        await self._side.go(write)

    async def audit_entries(self, team: str, *, limit: int = 50,
                            before_id: int | None = None) -> list[AuditEntry]:
        async def read(c: aioredis.Redis) -> list[Any]:
            top = "+inf" if before_id is None else f"({before_id}"
            ids = await c.zrevrangebyscore(f"{self._audit}:{team}", top, "-inf",
                                           start=0, num=limit)
            return list(await c.hmget(self._audit, [_s(i) for i in ids])) if ids else []

        out = []
        for raw in await self._side.go(read):
            if raw is None:
                continue
            d = json.loads(raw)
            out.append(AuditEntry(int(d["id"]), _req(d["at"]), d["team"], d["actor"],
                                  d["action"], d["target"], d["details"]))
        return out

    # -- the catalog --------------------------------------------------------------------

    async def catalog_version(self) -> int:
        return int(await self._side.go(lambda c: c.get(self._version)) or 0)

    async def job_defs(self, *, include_deleted: bool = False) -> list[JobDef]:
        defs = [_def(r) for r in await self._side.go(lambda c: c.hvals(self._defs))]
        if not include_deleted:
            defs = [d for d in defs if d.deleted_at is None]
        return sorted(defs, key=lambda d: d.id)

    async def job_def(self, job_id: str) -> JobDef | None:
        raw = await self._side.go(lambda c: c.hget(self._defs, job_id))
        return None if raw is None else _def(raw)

    async def _write_def(
        self, job_id: str, decide: Callable[[JobDef | None, int, int, str | None], str | None]
    ) -> JobDef | None:
        """Read the definition, the version and the id's reservation, ``decide(old, next
        version, now, reserved team)`` the new JSON (None: no change), write both in one
        transaction, announce."""

        async def body(pipe: Any) -> JobDef | None:
            raw = await pipe.hget(self._defs, job_id)
            version = int(await pipe.get(self._version) or 0) + 1
            held = await pipe.hget(self._reserved, job_id)
            reserved = None if held is None else json.loads(held)["team"]
            new = decide(None if raw is None else _def(raw), version, _now_ms(), reserved)
            pipe.multi()
            if new is None:
                return None
            pipe.hset(self._defs, job_id, new)
            pipe.set(self._version, version)
            pipe.publish(f"{self._side.prefix}events", "catalog")
            return _def(new)

        return await self._side.atomic([self._defs, self._version, self._reserved], body)

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            # a live definition keeps its id; only its own team revives a tombstone; an id
            # reserved by a config or code job stays its team's
            if old is not None and (old.deleted_at is None or old.team != team):
                return None
            if reserved is not None and reserved != team:
                return None
            return _def_json(job_id, team, spec, version, now, now, by, by, None, role)

        return await self._write_def(job_id, decide)

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            if old is None or old.deleted_at is not None or old.team != team:
                return None
            if expect_version is not None and old.version != expect_version:
                return None
            return _def_json(job_id, team, spec, version, _ms(old.created_at), now,
                             old.created_by, by, None, role)

        return await self._write_def(job_id, decide)

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool:
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            if old is None or old.deleted_at is not None or old.team != team:
                return None
            return _def_json(job_id, team, old.spec, version, _ms(old.created_at), now,
                             old.created_by, by, now, old.saved_role)

        return await self._write_def(job_id, decide) is not None

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        if not jobs:
            return
        now = _now_ms()

        async def body(pipe: Any) -> None:
            ids = [j for j, _, _ in jobs]
            old = dict(zip(ids, await pipe.hmget(self._reserved, ids), strict=True))
            writes = {}
            for job_id, team, source in jobs:
                cur = old.get(job_id)
                d = None if cur is None else json.loads(cur)
                if d is None or d["team"] != team or d["source"] != source:
                    writes[job_id] = json.dumps({
                        "team": team, "source": source,
                        "reserved_at": now if d is None else d["reserved_at"],
                    })  # fmt: skip
            pipe.multi()
            if writes:
                pipe.hset(self._reserved, mapping=writes)

        await self._side.atomic([self._reserved], body)

    async def reserved_ids(self, team: str) -> list[str]:
        raw = await self._side.go(lambda c: c.hgetall(self._reserved))
        return sorted(_s(k) for k, v in raw.items() if json.loads(v)["team"] == team)

    async def reserved_team(self, job_id: str) -> str | None:
        raw = await self._side.go(lambda c: c.hget(self._reserved, job_id))
        return None if raw is None else str(json.loads(raw)["team"])


def _ms(d: datetime) -> int:
    return int(d.timestamp() * 1000)


