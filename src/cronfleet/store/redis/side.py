"""The side tables on Redis: secret ciphertext, job health, API tokens, the audit log and
the catalog of API jobs, on the :class:`~cronfleet.store.redis.RedisStore`'s client (its
pool) under its key prefix (``<prefix>side:…``), so ``cronfleet run`` needs only a Redis
URL.

Each class answers the same interface as its SQL twin (:mod:`cronfleet.store.side`).
Read-modify-write steps (a health transition, a catalog write with its store-wide
version, a token revoke) read, decide in Python, and write with one compare-and-set
script (``scripts/side_cas.lua``): nothing is written when a value read has changed
meanwhile (the step reads again), so exactly one process sees each transition and
versions never commit out of order. Catalog writes ``PUBLISH <prefix>events`` (the run
store's channel) so every scheduler looks at once. Times are integer milliseconds, as on
SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from redis import exceptions as rexc

from cronfleet.clock import Clock, SystemClock
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.shares import bucket_of
from cronfleet.store.side import (
    AuditEntry,
    ChangeKey,
    DefCount,
    JobDef,
    JobHealth,
    SecretRow,
    ShareKey,
    StoreHandle,
    TokenInfo,
    TokenTouches,
    check_role,
    dt,
    hash_token,
    ms,
    new_token,
    prefix_end,
    repeated,
    req_dt,
)
from cronfleet.store.url import redact_url

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from cronfleet.store.redis.store import RedisStore

__all__ = ["RedisApiStore", "RedisHealthStore", "RedisSecretStore", "RedisSide", "client_of"]

T = TypeVar("T")
_CALL_TIMEOUT = 60.0
_TRIES = 100
_SCRIPTS = resources.files("cronfleet.store.redis") / "scripts"
_CAS = (_SCRIPTS / "side_cas.lua").read_text("utf-8")
_FEED = (_SCRIPTS / "side_feed.lua").read_text("utf-8")
_FEED_BUILD = (_SCRIPTS / "side_feed_build.lua").read_text("utf-8")
_FEED_CHUNK = 1000  # definitions indexed per script call when the feed is built


def share_member(job_id: str) -> str:
    """A definition's member in the index of buckets: ``bucket:id``, the bucket written
    with four digits so that members sort by bucket, then id."""
    return f"{bucket_of(job_id):04d}:{job_id}"


def client_of(store: RedisStore) -> aioredis.Redis:
    """The store's client (its connection pool): the one accessor of the store's
    connections."""
    return store.transport.client()


Check = tuple[str, str | None, Any]  # key, hash field (None: a string key), value read
# key, hash field (None: a string key), value; or key, member, score, "zadd" / "zrem"
# (sorted set)
Set = tuple[str, str | None, str] | tuple[str, str, str, str]


class RedisSide:
    """One backend for the three tables: keys, calls with the store's error mapping, and
    the compare-and-set step."""

    def __init__(self, handle: StoreHandle[RedisStore], what: str) -> None:
        self._handle = handle
        self.what = what
        self.prefix = handle.store.prefix
        self._shas: dict[str, str] = {}  # each script's SHA, once loaded

    def key(self, name: str) -> str:
        return f"{self.prefix}side:{name}"

    async def go(self, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        store = await self._handle.get()
        try:
            async with asyncio.timeout(_CALL_TIMEOUT):
                return await fn(client_of(store))
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise StoreUnavailable(
                f"{self.what}: Redis at {redact_url(store.url)} unavailable: {exc}"
            ) from exc
        except rexc.RedisError as exc:
            raise StoreError(f"{self.what}: {exc}") from exc

    async def _cas(self, c: aioredis.Redis, checks: list[Check],
                   sets: list[Set],
                   publish: tuple[str, str] | None) -> bool:
        arg = json.dumps({"check": [[k, f, _text(v)] for k, f, v in checks],
                          "set": [list(s) for s in sets],
                          "publish": None if publish is None else list(publish)})
        return bool(await self.script(c, _CAS, arg))

    async def script(self, c: aioredis.Redis, source: str, *args: Any) -> Any:
        """Run a script (``args``: its ARGV), loaded on first use and again when the
        server forgot it (a restart, ``SCRIPT FLUSH``)."""
        sha = self._shas.get(source)
        if sha is None:
            sha = self._shas[source] = await c.script_load(source)
        try:
            return await c.evalsha(sha, 0, *args)
        except rexc.NoScriptError:
            self._shas[source] = await c.script_load(source)
            return await c.evalsha(self._shas[source], 0, *args)

    async def step(self, body: Callable[[aioredis.Redis],
                                        Awaitable[tuple[T, list[Check], list[Set],
                                                        tuple[str, str] | None]]]) -> T:
        """``body(client)`` reads and answers ``(result, checks, sets, publish)``: the
        sets are written (and the message published) only if every value checked is
        still what was read; otherwise the body runs again."""

        async def run(c: aioredis.Redis) -> T:
            for _ in range(_TRIES):
                result, checks, sets, publish = await body(c)
                if not sets and publish is None:
                    return result
                if await self._cas(c, checks, sets, publish):
                    return result
            raise StoreError(f"{self.what}: too much contention")

        return await self.go(run)

    async def close(self) -> None:
        await self._handle.close()


def _text(v: Any) -> str | None:
    return v.decode() if isinstance(v, bytes) else (None if v is None else str(v))


# -- secrets (ciphertext only) -----------------------------------------------------------------


class RedisSecretStore:
    """Secret ciphertext in one hash, ``namespace \\0 name`` -> JSON."""

    def __init__(self, handle: StoreHandle[RedisStore]) -> None:
        self._side = RedisSide(handle, "secrets")
        self._key = self._side.key("secrets")

    def __repr__(self) -> str:
        return f"RedisSecretStore(prefix={self._side.prefix!r})"

    @staticmethod
    def _row(raw: Any) -> SecretRow:
        d = json.loads(raw)
        hosts = d.get("hosts")
        return SecretRow(d["ns"], d["name"], d["key_id"], base64.b64decode(d["nonce"]),
                         base64.b64decode(d["ct"]), req_dt(d["created"]),
                         req_dt(d["updated"]), None if hosts is None else tuple(hosts))

    async def get_secret(self, namespace: str, name: str) -> SecretRow | None:
        raw = await self._side.go(lambda c: c.hget(self._key, f"{namespace}\0{name}"))
        return None if raw is None else self._row(raw)

    async def put_secret(self, namespace: str, name: str, key_id: str, nonce: bytes,
                         ciphertext: bytes, now: datetime,
                         hosts: tuple[str, ...] | None = None) -> bool:
        field = f"{namespace}\0{name}"
        at = ms(now)

        async def body(c: aioredis.Redis) -> Any:
            old = await c.hget(self._key, field)
            created = at if old is None else json.loads(old)["created"]
            new = json.dumps({
                "ns": namespace, "name": name, "key_id": key_id,
                "nonce": base64.b64encode(nonce).decode(),
                "ct": base64.b64encode(ciphertext).decode(), "created": created, "updated": at,
                "hosts": None if hosts is None else list(hosts),
            })  # fmt: skip
            return old is None, [(self._key, field, old)], [(self._key, field, new)], None

        created: bool = await self._side.step(body)
        return created

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

    def __init__(self, handle: StoreHandle[RedisStore]) -> None:
        self._side = RedisSide(handle, "job health")
        self._key = self._side.key("health")

    @staticmethod
    def _row(job_id: str, raw: Any) -> JobHealth:
        if raw is None:
            return JobHealth(job_id)
        d = json.loads(raw)
        return JobHealth(job_id, d["last_outcome"], d["consecutive_failures"], d["successes"],
                         d["failures"], d["last_duration"], dt(d["last_run_at"]))

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        async def body(c: aioredis.Redis) -> Any:
            old = await c.hget(self._key, job_id)
            before = self._row(job_id, old)
            after = before.after(ok, duration, now)
            d = asdict(after)
            d["last_run_at"] = ms(now)
            return ((before, after), [(self._key, job_id, old)],
                    [(self._key, job_id, json.dumps(d))], None)

        # compare and set: exactly one process sees each transition
        found: tuple[JobHealth, JobHealth] = await self._side.step(body)
        return found

    async def get(self, job_id: str) -> JobHealth:
        return self._row(job_id, await self._side.go(lambda c: c.hget(self._key, job_id)))

    async def close(self) -> None:
        await self._side.close()


# -- tokens, audit log, catalog -----------------------------------------------------------------


def _token(raw: Any) -> TokenInfo:
    d = json.loads(raw)
    return TokenInfo(d["id"], d["name"], d["team"], d["role"], req_dt(d["created_at"]),
                     d["created_by"], dt(d["revoked_at"]), dt(d["last_used_at"]))


def _token_json(t: TokenInfo, digest: str) -> str:
    def opt(d: datetime | None) -> int | None:
        return None if d is None else ms(d)

    return json.dumps({"id": t.id, "name": t.name, "team": t.team, "role": t.role,
                       "hash": digest, "created_at": ms(t.created_at),
                       "created_by": t.created_by, "revoked_at": opt(t.revoked_at),
                       "last_used_at": opt(t.last_used_at)})


def _def(raw: Any) -> JobDef:
    d = json.loads(raw)
    return JobDef(d["id"], d["team"], d["spec"], int(d["version"]), req_dt(d["created_at"]),
                  req_dt(d["updated_at"]), d["created_by"], d["updated_by"],
                  dt(d["deleted_at"]), d.get("saved_role"))


def _def_json(job_id: str, team: str, spec: dict[str, Any], version: int, created: int,
              updated: int, created_by: str | None, updated_by: str | None,
              deleted: int | None = None, saved_role: str | None = None) -> str:
    return json.dumps({"id": job_id, "team": team, "spec": spec, "version": version,
                       "created_at": created, "updated_at": updated, "created_by": created_by,
                       "updated_by": updated_by, "deleted_at": deleted,
                       "saved_role": saved_role}, sort_keys=True)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisApiStore:
    """Tokens, audit log and the catalog on Redis.

    Keys: ``side:tokens`` (id -> JSON with the SHA-256 digest), ``side:token_hash``
    (digest -> id), ``side:audit`` (id -> JSON) with ``side:audit:<team>`` (ids by id),
    ``side:defs`` (id -> JSON, tombstones kept), ``side:defs:version`` (the store-wide
    catalog version), ``side:defs:changes`` (the change feed: each id scored by its
    version, written in the same compare-and-set step as the definition, by
    :meth:`_write_def`), ``side:defs:changes:built`` (set once the definitions written
    before the feed existed are in it), ``side:defs:live:<team>`` (a team's live ids, score
    0: in id order for ``ZRANGEBYLEX``, kept by :meth:`_decided`; may hold an id deleted
    while it was built, which a read skips), ``side:defs:team:<team>`` (the same with its
    tombstones), ``side:defs:teams:built`` (set once the
    definitions written before those sets existed are in them) and ``side:job_ids`` (ids
    of config / code jobs reserved to their team)."""

    def __init__(self, handle: StoreHandle[RedisStore], *, clock: Clock | None = None) -> None:
        self._side = RedisSide(handle, "API tables")
        self.clock: Clock = clock or SystemClock()
        self._touches = TokenTouches()
        k = self._side.key
        self._tokens, self._hashes = k("tokens"), k("token_hash")
        self._audit, self._audit_id = k("audit"), k("audit:id")
        self._defs, self._version = k("defs"), k("defs:version")
        self._changes, self._built = k("defs:changes"), k("defs:changes:built")
        self._shares, self._shares_built = k("defs:shares"), k("defs:shares:built")
        self._reserved = k("job_ids")
        self._team_key, self._live_key = k("defs:team:"), k("defs:live:")
        self._teams_built = k("defs:teams:built")

    def __repr__(self) -> str:
        return f"RedisApiStore(prefix={self._side.prefix!r})"

    def _now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    async def close(self) -> None:
        await self._side.close()

    # -- tokens -------------------------------------------------------------------------

    async def create_token(self, *, name: str, team: str, role: str,
                           created_by: str | None = None) -> tuple[str, TokenInfo]:
        check_role(role)
        token_id, plaintext = new_token()
        info = TokenInfo(token_id, name, team, role, req_dt(self._now_ms()), created_by,
                         None, None)
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
        if self._touches.due(info.id):

            async def touch(c: aioredis.Redis) -> Any:
                cur = await c.hget(self._tokens, info.id)
                if cur is None:
                    return None, [], [], None
                d = json.loads(cur)
                d["last_used_at"] = self._now_ms()
                return (None, [(self._tokens, info.id, cur)],
                        [(self._tokens, info.id, json.dumps(d))], None)

            await self._side.step(touch)
        return info

    async def list_tokens(self, team: str | None = None) -> list[TokenInfo]:
        rows = [_token(r) for r in await self._side.go(lambda c: c.hvals(self._tokens))]
        if team is not None:
            rows = [t for t in rows if t.team == team]
        return sorted(rows, key=lambda t: (t.team if team is None else "", t.created_at, t.id))

    async def revoke_token(self, id_or_name: str) -> list[TokenInfo]:
        async def body(c: aioredis.Redis) -> Any:
            now = self._now_ms()
            out, checks, sets = [], [], []
            for token_id, raw in (await c.hgetall(self._tokens)).items():
                d = json.loads(raw)
                if d["revoked_at"] is None and id_or_name in (d["id"], d["name"]):
                    d["revoked_at"] = now
                    new = json.dumps(d)
                    checks.append((self._tokens, _s(token_id), raw))
                    sets.append((self._tokens, _s(token_id), new))
                    out.append(_token(new))
            return out, checks, sets, None

        revoked: list[TokenInfo] = await self._side.step(body)
        return revoked

    # -- audit --------------------------------------------------------------------------

    async def audit(self, *, team: str, actor: str, action: str, target: str,
                    details: dict[str, Any] | None = None) -> None:
        async def write(c: aioredis.Redis) -> None:
            entry_id = int(await c.incr(self._audit_id))
            body = json.dumps({"id": entry_id, "at": self._now_ms(), "team": team,
                               "actor": actor, "action": action, "target": target,
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
            out.append(AuditEntry(int(d["id"]), req_dt(d["at"]), d["team"], d["actor"],
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

    async def job_defs_changed(self, after: ChangeKey, limit: int) -> list[JobDef]:
        # versions are unique on Redis (the counter is compare-and-set), so the version
        # alone places a definition in the feed
        await self._build_feed()
        raw = await self._side.go(lambda c: self._side.script(
            c, _FEED, self._changes, self._defs, after[0], limit))
        return [_def(r) for r in raw if r is not None]

    async def _build_feed(self) -> None:
        """Put the definitions written before the change feed existed (an older
        cronfleet's) in it, once per store (:meth:`_index_once`): each chunk indexed
        atomically from its current JSON (a score only rises)."""

        async def index(c: aioredis.Redis, found: dict[Any, Any]) -> None:
            await self._side.script(c, _FEED_BUILD, self._changes, self._defs,
                                    *[_s(k) for k in found])

        await self._index_once(self._built, index)

    async def _index_once(self, mark: str,
                          index: Callable[[aioredis.Redis, dict[Any, Any]], Awaitable[None]]
                          ) -> None:
        """Index the definitions written before an index existed (an older cronfleet's),
        once per store: ``index`` each chunk of the definitions' hash (``{id: JSON}``),
        then set ``mark``. The mark is looked at before every read of that index (one
        ``EXISTS``): a store emptied or restored from an older backup meanwhile is
        indexed again. Writers index their own definitions meanwhile (twice is once)."""
        if await self._side.go(lambda c: c.exists(mark)):
            return

        async def build(c: aioredis.Redis) -> None:
            cursor = 0
            while True:
                cursor, found = await c.hscan(self._defs, cursor, count=_FEED_CHUNK)
                assert isinstance(found, dict)
                if found:
                    await index(c, found)
                if cursor == 0:
                    break
            await c.set(mark, "1")

        await self._side.go(build)

    async def job_def(self, job_id: str) -> JobDef | None:
        raw = await self._side.go(lambda c: c.hget(self._defs, job_id))
        return None if raw is None else _def(raw)

    async def job_defs_in(self, buckets: Sequence[int], after: ShareKey, limit: int
                          ) -> tuple[list[JobDef], ShareKey | None]:
        # the index: one sorted set of "bucket:id" members (score 0: ordered by member),
        # read by lexical range; tombstones stay in it and are skipped here
        await self._build_shares()
        first, last = after

        async def read(c: aioredis.Redis) -> tuple[list[JobDef], ShareKey | None]:
            out: list[JobDef] = []
            wanted = sorted(set(buckets))
            i = bisect.bisect_left(wanted, first)
            while i < len(wanted):
                b = wanted[i]
                low = f"({b:04d}:{last}" if b == first and last else f"[{b:04d}:"
                seen = False
                while True:
                    members = await c.zrangebylex(self._shares, low, f"({b:04d};",
                                                  start=0, num=limit - len(out))
                    if not members:
                        break
                    seen = True
                    ids = [_s(m).split(":", 1)[1] for m in members]
                    out += [d for d in map(_def, filter(None, await c.hmget(self._defs, ids)))
                            if d.deleted_at is None]
                    if len(out) >= limit:
                        return out, (b, ids[-1])
                    low = f"({_s(members[-1])}"
                if seen:
                    i += 1
                    continue
                # nothing there: skip to the next bucket holding anything
                following = await c.zrangebylex(self._shares, f"[{b + 1:04d}:", "+",
                                                start=0, num=1)
                if not following:
                    break
                i = bisect.bisect_left(wanted, int(_s(following[0]).split(":", 1)[0]))
            return out, None

        found: tuple[list[JobDef], ShareKey | None] = await self._side.go(read)
        return found

    async def _build_shares(self) -> None:
        """Put the definitions written before buckets existed in the index of buckets,
        once per store (:meth:`_index_once`)."""

        async def index(c: aioredis.Redis, found: dict[Any, Any]) -> None:
            await c.zadd(self._shares, {share_member(_s(k)): 0 for k in found})

        await self._index_once(self._shares_built, index)

    async def job_defs_page(self, team: str, *, after: str = "", prefix: str = "",
                            limit: int, include_deleted: bool = False) -> list[JobDef]:
        await self._build_teams()
        key = (self._team_key if include_deleted else self._live_key) + team
        top = "(" + prefix_end(prefix) if prefix else "+"
        low = "(" + after if after and after >= prefix else "[" + prefix if prefix else "-"
        out: list[JobDef] = []
        while len(out) < limit:
            want = limit - len(out)

            async def read(c: aioredis.Redis, low: str = low, want: int = want) -> Any:
                ids = [_s(i) for i in await c.zrangebylex(key, low, top, 0, want)]
                return ids, (await c.hmget(self._defs, ids) if ids else [])

            ids, raws = await self._side.go(read)
            # a team's sets hold its definitions only (a definition never changes team)
            out += [d for d in map(_def, filter(None, raws))
                    if include_deleted or d.deleted_at is None]
            if len(ids) < want:
                break
            # a tombstone left in the live set (``_build_teams``) was skipped: read on
            low = "(" + ids[-1]
        return out

    async def job_def_teams(self, ids: Sequence[str]) -> dict[str, str]:
        if not ids:
            return {}
        raws = await self._side.go(lambda c: c.hmget(self._defs, list(ids)))
        return {i: _def(raw).team for i, raw in zip(ids, raws, strict=True)
                if raw is not None}

    async def count_job_defs(self, team: str) -> DefCount:
        await self._build_teams()
        return DefCount(int(await self._side.go(
            lambda c: c.zcard(self._live_key + team))))

    async def _build_teams(self) -> None:
        """Put the definitions written before the teams' sets existed in them, once per
        store (:meth:`_index_once`). A definition deleted meanwhile may stay in its live
        set: reads skip it."""

        async def index(c: aioredis.Redis, found: dict[Any, Any]) -> None:
            by_key: dict[str, dict[str, int]] = {}
            for job_id, raw in found.items():
                d = _def(raw)
                by_key.setdefault(self._team_key + d.team, {})[_s(job_id)] = 0
                if d.deleted_at is None:
                    by_key.setdefault(self._live_key + d.team, {})[_s(job_id)] = 0
            for key, members in by_key.items():
                await c.zadd(key, members)

        await self._index_once(self._teams_built, index)

    async def _write_def(
        self, job_id: str, decide: Callable[[JobDef | None, int, int, str | None], str | None]
    ) -> JobDef | None:
        """The one writer of a definition: read it, the version and the id's
        reservation, ``decide(old, next version, now, reserved team)`` the new JSON (None:
        no change), write it, the version and its place in the change feed at once if none
        of the three changed meanwhile, announce."""

        async def body(c: aioredis.Redis) -> Any:
            raw = await c.hget(self._defs, job_id)
            current = await c.get(self._version)
            held = await c.hget(self._reserved, job_id)
            version = int(current or 0) + 1
            new, checks, sets = self._decided(job_id, raw, held, version, self._now_ms(),
                                              decide)
            if new is None:
                return None, [], [], None
            return (new, [*checks, (self._version, None, current)],
                    [*sets, (self._version, None, str(version))],
                    (f"{self._side.prefix}events", "catalog"))

        written: JobDef | None = await self._side.step(body)
        return written

    def _decided(self, job_id: str, raw: Any, held: Any, version: int, now: int,
                 decide: Callable[[JobDef | None, int, int, str | None], str | None]
                 ) -> tuple[JobDef | None, list[Check], list[Set]]:
        """One definition's write: ``decide`` on what was read (its stored JSON ``raw``,
        its reservation ``held``), the values to check, and what to set: the hash field
        and its place in the change feed (every writer of a definition goes through
        here, alone or in a batch)."""
        reserved = None if held is None else json.loads(held)["team"]
        new = decide(None if raw is None else _def(raw), version, now, reserved)
        if new is None:
            return None, [], []
        made = _def(new)
        sets: list[Set] = [(self._defs, job_id, new),
                           (self._changes, job_id, str(version), "zadd"),
                           (self._team_key + made.team, job_id, "0", "zadd"),
                           (self._live_key + made.team, job_id, "0",
                            "zadd" if made.deleted_at is None else "zrem"),
                           (self._shares, share_member(job_id), "0", "zadd")]
        return made, [(self._defs, job_id, raw), (self._reserved, job_id, held)], sets

    @staticmethod
    def _creating(job_id: str, team: str, spec: dict[str, Any], by: str | None,
                  role: str | None
                  ) -> Callable[[JobDef | None, int, int, str | None], str | None]:
        """:meth:`create_job_def`'s decision for one definition (alone or in a batch)."""
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            # a live definition keeps its id; only its own team revives a tombstone; an id
            # reserved by a config or code job stays its team's
            if old is not None and (old.deleted_at is None or old.team != team):
                return None
            if reserved is not None and reserved != team:
                return None
            return _def_json(job_id, team, spec, version, now, now, by, by, None, role)

        return decide

    async def create_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, role: str | None = None) -> JobDef | None:
        return await self._write_def(job_id, self._creating(job_id, team, spec, by, role))

    async def create_job_defs(self, items: Sequence[tuple[str, dict[str, Any]]], team: str,
                              by: str | None, role: str | None = None, *,
                              dry_run: bool = False) -> tuple[list[JobDef], list[str]]:
        dupes = repeated([job_id for job_id, _ in items])
        if dupes:
            return [], dupes
        if not items:
            return [], []
        ids = [job_id for job_id, _ in items]

        async def body(c: aioredis.Redis) -> Any:
            # every definition's own decision (the single create's), then one compare-and-
            # set script for all of them: all written, or none
            raws = await c.hmget(self._defs, ids)
            current = await c.get(self._version)
            helds = await c.hmget(self._reserved, ids)
            now = self._now_ms()
            base = int(current or 0)
            written: list[JobDef] = []
            taken: list[str] = []
            checks: list[Check] = [(self._version, None, current)]
            sets: list[Set] = []
            for i, ((job_id, spec), raw, held) in enumerate(
                    zip(items, raws, helds, strict=True)):
                new, check, put = self._decided(
                    job_id, raw, held, base + 1 + i, now,
                    self._creating(job_id, team, spec, by, role))
                if new is None:
                    taken.append(job_id)
                else:
                    written.append(new)
                    checks += check
                    sets += put
            if taken or dry_run:
                return ([] if taken else written, taken), [], [], None
            return ((written, []), checks,
                    [*sets, (self._version, None, str(base + len(items)))],
                    (f"{self._side.prefix}events", "catalog"))

        out: tuple[list[JobDef], list[str]] = await self._side.step(body)
        return out

    async def update_job_def(self, job_id: str, team: str, spec: dict[str, Any],
                             by: str | None, *, expect_version: int | None = None,
                             role: str | None = None) -> JobDef | None:
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            if old is None or old.deleted_at is not None or old.team != team:
                return None
            if expect_version is not None and old.version != expect_version:
                return None
            return _def_json(job_id, team, spec, version, ms(old.created_at), now,
                             old.created_by, by, None, role)

        return await self._write_def(job_id, decide)

    async def delete_job_def(self, job_id: str, team: str, by: str | None) -> bool:
        def decide(old: JobDef | None, version: int, now: int, reserved: str | None
                   ) -> str | None:
            if old is None or old.deleted_at is not None or old.team != team:
                return None
            return _def_json(job_id, team, old.spec, version, ms(old.created_at), now,
                             old.created_by, by, now, old.saved_role)

        return await self._write_def(job_id, decide) is not None

    async def reserve_ids(self, jobs: list[tuple[str, str, str]]) -> None:
        if not jobs:
            return
        now = self._now_ms()

        async def body(c: aioredis.Redis) -> Any:
            ids = [j for j, _, _ in jobs]
            old = dict(zip(ids, await c.hmget(self._reserved, ids), strict=True))
            checks: list[Check] = []
            sets: list[Set] = []
            for job_id, team, source in jobs:
                cur = old.get(job_id)
                d = None if cur is None else json.loads(cur)
                if d is None or d["team"] != team or d["source"] != source:
                    checks.append((self._reserved, job_id, cur))
                    sets.append((self._reserved, job_id, json.dumps({
                        "team": team, "source": source,
                        "reserved_at": now if d is None else d["reserved_at"],
                    })))  # fmt: skip
            return None, checks, sets, None

        await self._side.step(body)

    async def reserved_ids(self, team: str) -> list[str]:
        raw = await self._side.go(lambda c: c.hgetall(self._reserved))
        return sorted(_s(k) for k, v in raw.items() if json.loads(v)["team"] == team)

    async def reserved_team(self, job_id: str) -> str | None:
        raw = await self._side.go(lambda c: c.hget(self._reserved, job_id))
        return None if raw is None else str(json.loads(raw)["team"])
