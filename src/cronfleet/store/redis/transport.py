"""Redis's transport: the client and its pool, the Lua scripts (one per change, each
atomic on the server), the server's ``TIME`` (or the test clock) and the announcements
channel. What each script call means is :mod:`cronfleet.store.redis.ops`'s; the store's
rules are :mod:`cronfleet.store.driver`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Callable, Collection
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc

from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import Clock, judged_by_store
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.store.driver import Retention
from cronfleet.store.redis.ops import OPS, _d
from cronfleet.store.rows import ms
from cronfleet.store.url import redact_url

__all__ = ["SCHEMA_VERSION", "RedisTransport"]

log = logging.getLogger("cronfleet.store.redis")

SCHEMA_VERSION = 1
"""The key layout this code writes and reads (``<prefix>schema``)."""

_SCRIPTS = (
    "states", "set_override", "dispatch", "leases", "put_runs", "withdraw", "renew",
    "reap", "prune", "read_runs", "instances", "registry", "give_back",
)  # fmt: skip
_PRUNE_CHUNK = 2000  # jobs + claims + runs one retention call may examine (prune.lua)
_CALL_TIMEOUT = 60.0  # seconds one script call may take, connection wait included
CONFIRM_TIMEOUT = 5.0  # seconds a fresh connection has to answer PING (confirm_outage)
_GIVE_BACK_CHUNK = 5000  # (job, slot) pairs per give_back.lua call
_GIVE_BACK_MAX_DELAY = 2.0  # seconds between tries while the server stays away


def _load_scripts() -> dict[str, str]:
    base = resources.files("cronfleet.store.redis") / "scripts"
    common = (base / "common.lua").read_text("utf-8")
    return {n: common + "\n" + (base / f"{n}.lua").read_text("utf-8") for n in _SCRIPTS}


class RedisTransport:
    """The client (a blocking connection pool), the scripts (loaded once, again on
    ``NOSCRIPT``), the server's time or the test clock, and the announcements channel.

    ``client()`` is the accessor for code that shares the store's connection pool (the
    side tables): the open ``redis.asyncio.Redis`` client; :attr:`prefix` is the store's
    key prefix.
    """

    def __init__(self, *, url: str, conninfo: str, prefix: str, clock: Clock,
                 max_connections: int) -> None:
        self.url = url
        self.conninfo = conninfo
        self.prefix = prefix
        self.clock = clock
        self._server_time = judged_by_store(clock)
        self._max_connections = max_connections
        self._client: aioredis.Redis | None = None
        self._sources = _load_scripts()
        self._sha: dict[str, str] = {}
        self._callbacks: list[Callable[[], object]] = []
        self._listener: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.known: set[str] | None = None  # Redis ensures the state rows in its scripts
        self.prune_chunk = _PRUNE_CHUNK
        """The most jobs, claims and runs one retention script call examines."""
        # (job, slot ms, instance) of dispatch calls whose answer never arrived
        self._unanswered: set[tuple[str, str, str]] = set()
        self._giving = asyncio.Lock()
        self._give_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"RedisTransport({redact_url(self.url)!r}, prefix={self.prefix!r})"

    def client(self) -> aioredis.Redis:
        """The open client (raises when closed)."""
        return self._redis()

    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            raise StoreError(f"Redis store {redact_url(self.url)} is not open")
        return self._client

    def _now_arg(self) -> str:
        return "" if self._server_time else str(ms(self.clock.now()))

    async def run(self, name: str, *args: Any) -> Any:
        """Run one script (EVALSHA; loaded again on NOSCRIPT); connection errors raise
        :class:`StoreUnavailable`."""
        client = self._redis()
        argv = (self.prefix, self._now_arg(), *args)
        try:
            async with asyncio.timeout(_CALL_TIMEOUT):
                sha = self._sha.get(name)
                if sha is None:
                    sha = self._sha[name] = await client.script_load(self._sources[name])
                try:
                    return await client.evalsha(sha, 0, *argv)
                except rexc.NoScriptError:  # the server restarted (or SCRIPT FLUSH)
                    self._sha[name] = sha = await client.script_load(self._sources[name])
                    return await client.evalsha(sha, 0, *argv)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"Redis at {redact_url(self.url)} unavailable: {exc}") from exc
        except rexc.ResponseError as exc:
            raise StoreError(f"Redis script {name} failed: {exc}") from exc

    # -- what an unanswered call left -------------------------------------------------------

    def remember_unanswered(self, pairs: Collection[tuple[str, int]], instance: str) -> None:
        """Slot claims of a dispatch call that raised :class:`StoreUnavailable`: the server
        may have run the script and the answer been lost (a cut connection). The caller
        took the batch as failed; they are given back as soon as the server answers
        (:meth:`give_back`), by a task of their own and before any later dispatch."""
        if not pairs:
            return
        self._unanswered.update((j, str(slot), instance) for j, slot in pairs)
        if self._give_task is None or self._give_task.done():
            self._give_task = asyncio.get_running_loop().create_task(
                self._give_back_soon(), name="cronfleet-redis-give-back"
            )

    async def _give_back_soon(self) -> None:
        delay = 0.2
        while self._unanswered and self._client is not None:
            await asyncio.sleep(random.uniform(0, delay))  # full jitter: no fleet in lockstep
            try:
                await self.give_back()
            except StoreError as exc:
                delay = min(delay * 2, _GIVE_BACK_MAX_DELAY)
                log.debug("Redis store %s: give-back not yet possible: %s",
                          redact_url(self.url), exc)

    async def give_back(self) -> None:
        """Give back what unanswered dispatch calls may have claimed (``give_back.lua``:
        each slot's claim, and its lease, if this instance made it and no run row carries
        its token). Raises :class:`StoreUnavailable` while the server is still away (the
        pairs are kept); a dispatch waits for this first, so its claims of the same slots
        cannot reach the server before the give-back."""
        if not self._unanswered and not self._giving.locked():
            return
        async with self._giving:
            if not self._unanswered:
                return
            rows = sorted(self._unanswered)
            given = 0
            for i in range(0, len(rows), _GIVE_BACK_CHUNK):
                part = rows[i : i + _GIVE_BACK_CHUNK]
                given += int(await self.run("give_back", *[x for row in part for x in row]))
                self._unanswered.difference_update(part)
            log.log(
                logging.WARNING if given else logging.DEBUG,
                "Redis store %s: gave back the claims of %d slots (of %d asked) made by "
                "dispatch calls whose answer was lost", redact_url(self.url), given, len(rows),
            )

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        if self._client is not None:
            return
        # a blocking pool: callers beyond max_connections wait for a connection (the
        # plain pool raises "Too many connections" instead). socket_timeout=None: redis-py
        # implements it with asyncio.wait_for, which on Python 3.11 can swallow a task's
        # cancellation (a scheduler's stop then hangs); each call is bounded by
        # asyncio.timeout in _run instead.
        pool = aioredis.BlockingConnectionPool.from_url(
            self.conninfo, max_connections=self._max_connections, timeout=30,
            socket_connect_timeout=5, socket_timeout=None, socket_keepalive=True,
        )
        client = aioredis.Redis(connection_pool=pool)
        try:
            await self.check_server(client)
            await client.set(self.prefix + "schema", SCHEMA_VERSION, nx=True)
            found = int(await client.get(self.prefix + "schema") or 0)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            await client.aclose(close_connection_pool=True)
            raise StoreUnavailable(
                f"Redis at {redact_url(self.url)} unavailable: {exc}"
            ) from exc
        except BaseException:
            await client.aclose(close_connection_pool=True)
            raise
        if found > SCHEMA_VERSION:
            await client.aclose(close_connection_pool=True)
            raise StoreError(
                f"the Redis data under prefix {self.prefix!r} has schema version {found}, "
                f"newer than this cronfleet understands ({SCHEMA_VERSION}); upgrade cronfleet"
            )
        # (future layouts migrate here, from `found` up to SCHEMA_VERSION)
        self._client = client

    async def confirm_outage(self) -> bool:
        """True when a *fresh* connection (not one of the pool's) cannot PING within
        :data:`CONFIRM_TIMEOUT` either: the server is unreachable for everyone, not merely
        for this process's connections (``PREFER_GLOBAL`` fails open only then). A server
        that answers, even with an error, is no outage."""
        if self._client is None:
            return False
        fresh = aioredis.Redis.from_url(
            self.conninfo, socket_connect_timeout=CONFIRM_TIMEOUT, socket_timeout=None,
            single_connection_client=True,
        )
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                await fresh.ping()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError, TimeoutError):
            return True
        except rexc.RedisError:
            return False
        finally:
            with contextlib.suppress(Exception):
                await fresh.aclose()
        return False

    async def check_server(self, client: aioredis.Redis) -> None:
        info = await client.info("server")
        version = str(info.get("redis_version", "0"))
        parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
        if parts < (6, 2):
            raise StoreError(f"Redis {version} at {redact_url(self.url)}: 6.2 or newer needed")

    async def durability(self) -> tuple[list[str], list[str]]:
        """``(warnings, notes)`` about the server's persistence for exactly-once
        (``cronfleet check``): off or snapshot-only is a warning, ``appendfsync
        everysec`` a note; ``CONFIG`` refused (renamed, ACL) is a warning saying so."""
        client = self._redis()
        where = f"Redis at {redact_url(self.url)}"
        try:
            conf: dict[Any, Any] = {}
            for name in ("appendonly", "appendfsync", "save"):
                conf.update(await client.config_get(name))
        except rexc.ResponseError as exc:
            return [
                f"{where}: could not read its persistence settings (CONFIG GET refused: "
                f"{exc}); make sure AOF is on (appendonly yes, appendfsync always or "
                "everysec), or claims acknowledged before a crash can be lost and their "
                "slots run again"
            ], []
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"{where} unavailable: {exc}") from exc
        conf = {_d(k): _d(v) for k, v in conf.items()}
        aof = conf.get("appendonly") == "yes"
        fsync = conf.get("appendfsync", "")
        save = conf.get("save", "")
        if not aof and not save:
            return [
                f"{where}: persistence is off (appendonly no, no save points): a restart "
                "loses every claim, lease and run record, and slots claimed before it can "
                "run again; set appendonly yes with appendfsync always (docs/deployment.md)"
            ], []
        if not aof:
            return [
                f"{where}: only RDB snapshots (save {save!r}, appendonly no): claims made "
                "since the last snapshot are lost on a crash and their slots can run again; "
                "set appendonly yes with appendfsync always (docs/deployment.md)"
            ], []
        if fsync == "no":
            return [
                f"{where}: appendfsync no: the OS decides when claims reach the disk (often "
                "30 s); a machine crash can lose them and their slots can run again; set "
                "appendfsync always (docs/deployment.md)"
            ], []
        if fsync == "everysec":
            return [], [
                f"{where}: appendfsync everysec: a machine crash can lose the last second of "
                "claims (their slots can run again); appendfsync always closes that window"
            ]
        return [], []

    async def close(self) -> None:
        await cancel_and_wait(t for t in (self._give_task, self._listener) if t is not None)
        self._give_task = self._listener = None
        client, self._client = self._client, None
        if client is not None:
            await client.aclose(close_connection_pool=True)

    async def now(self) -> float:
        if not self._server_time:
            return self.clock.now()
        try:
            sec, usec = await self._redis().time()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc
        return sec + usec / 1e6

    # -- announcements ----------------------------------------------------------------------

    async def subscribe(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` whenever any instance changes an override or adds jobs (and
        after a reconnect, since announcements may have been missed)."""
        self._callbacks.append(callback)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="cronfleet-redis-listen"
            )

    def _notify_all(self) -> None:
        for cb in list(self._callbacks):
            try:
                res = cb()
                if inspect.isawaitable(res):
                    task = asyncio.ensure_future(res)
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            except Exception:
                log.exception("cronfleet: change callback failed")

    async def _listen(self) -> None:
        delay = 0.2
        first = True
        while self._client is not None:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.prefix + "events")
                if not first:
                    self._notify_all()
                first, delay = False, 0.2
                while True:
                    msg = await pubsub.get_message(timeout=30.0)
                    if msg is not None:
                        self._notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("cronfleet: Redis listener lost (%s); reconnecting", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8

    async def prune(self, rule: Retention) -> tuple[int, int]:
        """The retention rule in bounded pieces: each script call examines at most
        :attr:`prune_chunk` jobs, claims and runs and hands back a cursor (``prune.lua``),
        so other clients' calls run between the pieces instead of waiting behind one pass
        over the whole ledger. The cut-offs are fixed for the pass."""
        claims_cut, runs_cut = ms(rule.claims_before), ms(rule.runs_before)
        nc = nr = 0
        cursor = ""
        while True:
            c, r, _, cursor = await self.run(
                "prune", claims_cut, runs_cut, rule.runs_per_job, cursor, self.prune_chunk
            )
            nc, nr = nc + int(c), nr + int(r)
            cursor = _d(cursor)
            if not cursor:
                return nc, nr
            await asyncio.sleep(0)

    async def call(self, name: str, *args: Any, tx: bool = True) -> Any:
        """One named operation (one script call, atomic by itself)."""
        return await OPS[name](self, *args)
