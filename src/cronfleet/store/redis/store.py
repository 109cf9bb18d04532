"""The Redis store: the whole Store contract (early claims and withdraw included) on one
Redis 6.2+ server, for teams whose only shared service is Redis.

* **Lua scripts, loaded once.** Every state change is one script (``scripts/*.lua``, each
  prefixed with ``common.lua``), run with ``EVALSHA`` and loaded again on ``NOSCRIPT``
  (a restarted server): a burst of 10,000 slots is one round trip for the claims and
  leases and one for the rows that must exist now. A script runs atomically, so two
  instances claiming the same ``(job, slot)`` see one winner.
* **Time from the server.** Scripts read ``TIME``; every claim time, lease expiry, run
  deadline and reaper cut-off is that value, so a skewed host cannot steal a live lease.
  A clock that is not a :class:`~cronfleet.clock.SystemClock` (the tests' ``FakeClock``)
  is passed instead, as on PostgreSQL.
* **Fencing tokens** come from a per-job counter (``INCR {job}:n``): they only grow, across
  deletes and instances. A run row that carries a token is written once per
  ``(job, token)``: a group commit retried after a lost answer updates it.
* **Row decisions** come from :mod:`cronfleet.store.ledger`; the scripts only claim, lease,
  index and apply. Where a dispatch row depends on what the script finds (lease taken or
  busy), the ledger decides it beforehand for each outcome (row templates) and the same
  script writes the one that applies: a batch is one call per chunk, with no window in
  which a claim exists without its row or lease (docs/architecture.md, "The Redis store").
* **Instances** (``instances.lua``): heartbeats, the live set and lost instances judged by
  the server's ``TIME``; a final outcome is never overwritten (late results attached).
* **Keys** start with the URL's ``prefix`` (default ``cronfleet:``); a job's keys carry
  the hash tag ``{job}``. Batched scripts touch many jobs and a few global keys (run ids,
  indexes), so they need one server: Redis Cluster is not supported yet.
* **Lease lanes** (``max_instances`` = N > 1): lane 0 is the job's lease in its state hash
  as ever; only when it is busy does such a run take the lowest free or expired lane
  1..N-1, a field of ``{job}:l`` (indexed by expiry in ``<prefix>lanes`` for the reaper and
  lost-instance breaking). A job with N = 1 never writes either key, and its scripts run
  the commands they always ran (a release or renewal that misses lane 0 looks at the lanes).
* **Schema version** (``<prefix>schema``): written at first open, a newer one is refused.
  The lane keys are new and optional (absent for every N = 1 job), so they need no new
  version.
* **Registry and requests** (``registry.lua``, the RegistryStore contract): one hash of
  rows per declaring instance, one hash per request; a new request is announced on the
  same channel as overrides, so instances take it at once.
* **Announcements**: ``set_override``, new jobs and requests ``PUBLISH <prefix>events``;
  :meth:`RedisStore.subscribe` listens (reconnecting with backoff) and wakes the
  scheduler early. Overrides are still read at fire time.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc

from cronfleet.clock import Clock, SystemClock
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import (
    Declared,
    Dispatch,
    Dispatched,
    DispatchKind,
    Finish,
    FleetRequest,
    Heartbeat,
    Instance,
    LostInstances,
    RunCursor,
    RunFilter,
    RunPage,
    Skip,
    SlotRun,
    Start,
    Started,
    slot_runs_of,
    watermark,
)
from cronfleet.store.driver import REGISTRY_CHUNK, live
from cronfleet.store.rows import dt, ms, msd, registry_rows
from cronfleet.store.url import parse_store_url, redact_url

__all__ = ["SCHEMA_VERSION", "RedisStore"]

log = logging.getLogger("cronfleet.store.redis")

SCHEMA_VERSION = 1
"""The key layout this code writes and reads (``<prefix>schema``)."""

_SCRIPTS = (
    "states", "set_override", "dispatch", "leases", "put_runs", "withdraw", "renew",
    "reap", "prune", "read_runs", "instances", "registry",
)  # fmt: skip
_CLAIM = {"slot": "s", "token": "t", "none": "n"}


def _kind(it: Dispatch) -> str:
    """The script's claim code: s slot, e early, t token, n none, r recovery."""
    if it.kind is DispatchKind.RECOVERY:
        return "r"
    if it.kind is DispatchKind.EARLY:
        return "e"
    return _CLAIM[it.claim]


_CHUNK = 5000  # requests per script call: a long script blocks every other client
_ROWS_CHUNK = 1000  # row templates per dispatch call (unleased bursts write their rows)
# placeholders in dispatch's row templates, filled by the script (dispatch.lua)
_T_NOW, _T_DEADLINE, _SLOT0 = (datetime.fromtimestamp(t / 1000, UTC) for t in (1, 2, 0))
_HOLDER = "@@cronfleet:holder@@"
# run rows per script call: a group commit of 10,000 rows in one script would hold the
# server while other processes wait to claim
_PUT_CHUNK = 500
_PRUNE_CHUNK = 2000  # jobs + claims + runs one retention call may examine (prune.lua)
_STATES_CHUNK = 20_000  # job state rows per script call (start-up with 100,000 jobs)
_CALL_TIMEOUT = 60.0  # seconds one script call may take, connection wait included
CONFIRM_TIMEOUT = 5.0  # seconds a fresh connection has to answer PING (confirm_outage)


def _load_scripts() -> dict[str, str]:
    base = resources.files("cronfleet.store.redis") / "scripts"
    common = (base / "common.lua").read_text("utf-8")
    return {n: common + "\n" + (base / f"{n}.lua").read_text("utf-8") for n in _SCRIPTS}


# -- rows <-> records ------------------------------------------------------------------------


def _s(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def run_fields(r: RunRecord, dedupe: str | None = None) -> dict[str, str]:
    """A record as the run hash's fields (strings; absent = None)."""
    f: dict[str, str] = {
        "j": r.job_id,
        "sl": str(round(r.slot.timestamp() * 1000)),
        "tb": r.triggered_by.value,
        "st": r.status.value,
        "ma": "1" if r.manual else "0",
        "ca": "1" if r.is_catchup else "0",
        "re": "1" if r.is_recovery else "0",
        "at": str(r.attempt),
        "lg": json.dumps(r.logs, default=str) if r.logs else "[]",
    }
    if r.id is not None:
        f["id"] = str(r.id)
    for key, value in (
        ("rs", r.reason), ("in", r.instance_id), ("e", r.error), ("fb", r.forced_by),
    ):  # fmt: skip
        if value is not None:
            f[key] = _s(value)
    if r.fencing_token is not None:
        f["tk"] = str(r.fencing_token)
    for key, when in (("cl", r.claimed_at), ("sa", r.started_at), ("fa", r.finished_at)):
        if when is not None:
            f[key] = str(msd(when))
    if not r.status.finished and r.deadline is not None:
        f["dl"] = str(msd(r.deadline))
    if r.result is not None:
        f["r"] = json.dumps(r.result, default=str)
    if r.params is not None:
        f["pa"] = json.dumps(r.params, default=str)
    if dedupe is not None:
        f["dd"] = dedupe
    return f


def _t(f: Mapping[str, str], key: str) -> datetime | None:
    v = f.get(key)
    return None if v is None else dt(int(v))


def run_record(flat: Sequence[Any]) -> RunRecord:
    """A run hash (``HGETALL``'s flat list) as a record."""
    it = iter(flat)
    f = {_d(k): _d(v) for k, v in zip(it, it, strict=True)}
    slot = dt(int(f["sl"]))
    assert slot is not None
    return RunRecord(
        id=int(f["id"]),
        job_id=f["j"],
        slot=slot,
        triggered_by=TriggeredBy(f["tb"]),
        status=RunStatus(f["st"]),
        instance_id=f.get("in"),
        fencing_token=int(f["tk"]) if "tk" in f else None,
        manual=f.get("ma") == "1",
        is_catchup=f.get("ca") == "1",
        is_recovery=f.get("re") == "1",
        attempt=int(f.get("at", "1")),
        reason=f.get("rs"),
        claimed_at=_t(f, "cl"),
        started_at=_t(f, "sa"),
        finished_at=_t(f, "fa"),
        deadline=_t(f, "dl"),
        result=json.loads(f["r"]) if "r" in f else None,
        error=f.get("e"),
        logs=list(json.loads(f["lg"])) if "lg" in f else [],
        params=json.loads(f["pa"]) if "pa" in f else None,
        forced_by=f.get("fb"),
    )


def _d(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _i(v: Any) -> int | None:
    v = _d(v)
    return None if v is None or v is False or v == "" else int(v)


def _state(row: Sequence[Any]) -> JobState:
    r = [None if v is False else _d(v) for v in row]  # JSON false / RESP nil: absent
    o = r[1]
    cmax, smax = _i(r[9]), _i(r[10])
    mark = watermark(cmax, smax)
    return JobState(
        job_id=str(r[0]),
        enabled_override=None if o is None else o == "1",
        override_by=r[2],
        override_at=dt(_i(r[3])),
        override_note=r[4],
        override_until=dt(_i(r[5])),
        lease_holder=r[6],
        lease_token=_i(r[7]),
        lease_until=dt(_i(r[8])),
        last_slot=dt(None if mark is None else int(mark)),
        created_at=dt(_i(r[11])),
    )


class RedisStore:
    """Claims, leases, overrides and the run ledger on Redis (see the module doc)."""

    lanes = True  # max_instances > 1: lanes 1..N-1 in {job}:l (common.lua, take_lane)

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str | None = None,
        clock: Clock | None = None,
        max_connections: int = 16,
    ) -> None:
        parsed = parse_store_url(url)
        if parsed.dialect != "redis":
            raise StoreError(f"not a Redis URL: {redact_url(url)!r}")
        self.url = url
        self.prefix = prefix if prefix is not None else parsed.prefix
        self.conninfo = parsed.conninfo
        self.clock: Clock = clock or SystemClock()
        self._server_time = isinstance(self.clock, SystemClock)
        self._max_connections = max_connections
        self._client: aioredis.Redis | None = None
        self._sources = _load_scripts()
        self._sha: dict[str, str] = {}
        self._callbacks: list[Callable[[], object]] = []
        self._listener: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.prune_chunk = _PRUNE_CHUNK
        """The most jobs, claims and runs one retention script call examines."""

    def __repr__(self) -> str:
        return f"RedisStore({redact_url(self.url)!r}, prefix={self.prefix!r})"

    # -- plumbing -------------------------------------------------------------------------

    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            raise StoreError(f"{self!r} is not open")
        return self._client

    def _now_arg(self) -> str:
        return "" if self._server_time else str(ms(self.clock.now()))

    async def _run(self, name: str, *args: Any) -> Any:
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
            await self._check_server(client)
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

    async def _check_server(self, client: aioredis.Redis) -> None:
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
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
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
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    # -- job state ----------------------------------------------------------------------------

    async def _states(self, mode: str, job_ids: Sequence[str]) -> dict[str, JobState]:
        out: dict[str, JobState] = {}
        ids = list(dict.fromkeys(job_ids))
        for i in range(0, max(len(ids), 1), _STATES_CHUNK):
            part = json.dumps(ids[i : i + _STATES_CHUNK])
            created: dict[str, datetime | None] = {}  # one call's new rows share a time
            for row in json.loads(await self._run("states", mode, part)):
                if len(row) == 2:  # {job, created}: nothing else stored (states.lua)
                    c = row[1]
                    when = created[c] if c in created else created.setdefault(c, dt(int(c)))
                    out[row[0]] = JobState(job_id=row[0], created_at=when)
                else:
                    st = _state(row)
                    out[st.job_id] = st
        return out

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return await self._states("ensure", job_ids)

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return await self._states("read", job_ids) if job_ids else {}

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        wanted = set(job_ids)
        rows = json.loads(await self._run("states", "overrides", "[]"))
        return {st.job_id: st for st in map(_state, rows) if st.job_id in wanted}

    async def set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        flag = "" if enabled is None else ("1" if enabled else "0")
        until_ms = msd(until)
        row = await self._run(
            "set_override", job_id, flag, by or "", note or "",
            "" if until_ms is None else str(until_ms),
        )  # fmt: skip
        return _state(row)

    # -- writing rows -------------------------------------------------------------------------

    async def _put(
        self,
        rows: Sequence[tuple[RunRecord, str | None]],
        releases: Sequence[tuple[str, int | None]] = (),
    ) -> list[tuple[int, int]]:
        """Write ``(record, dedupe reason)`` rows and release ``(job, token)`` leases in
        one script; sets each record's id; returns ``(id, how)`` (1 inserted, 2 updated,
        0 not written)."""
        rel = [x for j, tok in releases if tok is not None for x in (j, str(tok))]
        if not rows and not rel:
            return []
        fields = [run_fields(r, dd) for r, dd in rows]
        out: list[tuple[int, int]] = []
        for i in range(0, max(len(fields), 1), _PUT_CHUNK):
            part = json.dumps(fields[i : i + _PUT_CHUNK], separators=(",", ":"))
            last = i + _PUT_CHUNK >= len(fields)
            res = json.loads(await self._run("put_runs", part, *(rel if last else ())))
            out.extend((int(res[k]), int(res[k + 1])) for k in range(0, len(res), 2))
        late: list[tuple[RunRecord, int]] = []
        for (rec, _), (rid, how) in zip(rows, out, strict=True):
            if how:
                rec.id = rid
            if how == 3:
                late.append((rec, rid))
        if late:
            await self._attach_late(late)
        return out

    async def _attach_late(self, late: Sequence[tuple[RunRecord, int]]) -> None:
        """Rows the fence refused (their slot already holds another final outcome): each
        outcome is attached to the stored row as its late result (ledger.attach_late_result),
        only while that row still holds the status it was read with."""
        stored = {r.id: r for r in await self._get_many([rid for _, rid in late])}
        now = dt(ms(await self.now()))
        fields = []
        for rec, rid in late:
            old = stored.get(rid)
            if old is None:
                continue
            kept = ledger.attach_late_result(old, rec, now)
            fields.append({
                "id": str(rid), "j": old.job_id, "la": old.status.value,
                "r": json.dumps(kept.result, default=str),
                "lg": json.dumps(kept.logs, default=str),
            })  # fmt: skip
        if fields:
            await self._run("put_runs", json.dumps(fields, separators=(",", ":")))

    # -- the hot path -------------------------------------------------------------------------

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        """Claims, leases and the rows that must exist now in one script per chunk: the
        rows are decided here by :func:`ledger.dispatch_run` before the call, as templates
        for each outcome the script may find (lease taken or busy), and the script writes
        the one that applies. Nothing is left for a second call, so a process that dies
        (or pauses) after the claims leaves no claim without its row or its lease."""
        self._redis()
        leased = [
            it.job_id
            for it in items
            if it.lease and not it.defer and not it.skip_reason and it.lanes == 1
        ]
        if len(set(leased)) != len(leased):
            raise StoreError("one batch may take at most one lease per job")
        out = [Dispatched(request=it, won=False) for it in items]
        start = 0
        while start < len(items):
            end, argv, templates = self._dispatch_args(items, start, instance_id)
            raw = await self._run(
                "dispatch", instance_id, json.dumps(argv, separators=(",", ":")),
                json.dumps(templates, separators=(",", ":")), _HOLDER,
            )  # fmt: skip
            self._dispatched(items[start:end], out[start:end], json.loads(raw), instance_id)
            start = end
        return out

    @staticmethod
    def _dispatch_args(
        items: Sequence[Dispatch], start: int, instance_id: str
    ) -> tuple[int, list[str], list[dict[str, str]]]:
        """One chunk's arguments from ``start``: ``(end, items, templates)``."""
        argv: list[str] = []
        templates: list[dict[str, str]] = []
        shared: dict[tuple[TriggeredBy, bool, int], str] = {}

        def template(it: Dispatch, taken: bool) -> str:
            rec, _, _ = ledger.dispatch_run(
                it, slot=_SLOT0, now=_T_NOW, deadline=_T_DEADLINE, token=None,
                instance=instance_id, lease_taken=taken, holder=_HOLDER,
            )  # fmt: skip
            templates.append(run_fields(rec))
            return str(len(templates))

        end = start
        while end < len(items) and end - start < _CHUNK and len(templates) < _ROWS_CHUNK:
            it = items[end]
            end += 1
            lease = it.lease and not it.defer and not it.skip_reason
            ok = busy = ""
            # the hot path (a leased run starting now) has no row here: the group commit
            # writes it; a crash before that leaves its claim under its lease (the reaper)
            if it.record or it.defer or it.skip_reason or not it.lease:
                ok = template(it, True)
            if lease and it.kind is not DispatchKind.EARLY:
                if (
                    it.kind is DispatchKind.SCHEDULED and not it.logs and it.result is None
                    and it.params is None and it.forced_by is None and not it.wait_if_busy
                    and not it.manual and not it.is_recovery
                ):  # fmt: skip
                    key = (it.triggered_by, it.is_catchup, it.lanes)
                    if key not in shared:  # one template for every plain busy slot
                        plain = Dispatch.scheduled("", 0.0, lease=True, catchup=it.is_catchup)
                        plain.triggered_by, plain.lanes = it.triggered_by, it.lanes
                        shared[key] = template(plain, False)
                    busy = shared[key]
                else:
                    busy = template(it, False)
            # the lease field: '0' none, '1' the job's lease, 'N' its N lanes (max_instances)
            argv += (
                _kind(it), it.job_id, str(ms(it.slot)),
                ("1" if it.lanes == 1 else str(it.lanes)) if lease else "0",
                str(ms(it.hold)), "" if it.reclaim_token is None else str(it.reclaim_token),
                ok, busy,
            )  # fmt: skip
        return end, argv, templates

    @staticmethod
    def _dispatched(
        chunk: Sequence[Dispatch], out: Sequence[Dispatched], res: Sequence[Any], instance: str
    ) -> None:
        """The script's answer into ``out``: the records it wrote (ids set) or that the
        group commit will write, decided again by the ledger with the script's values."""
        now = int(res[0])
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        ids: list[int] = []
        for k, it in enumerate(chunk):
            won, tok, taken, holder, busy, rid = res[1 + k * 6 : 7 + k * 6]
            d = out[k]
            d.won, d.token = bool(won), _i(tok)
            ids.append(int(rid or 0))
            if busy:
                d.busy, d.holder = True, _d(holder) or None
                holders[it.job_id] = d.holder
            elif taken:
                acquired.add(it.job_id if it.lanes == 1 else ledger.lane_key(d.token))
            elif d.won and it.lease and not it.defer and not it.skip_reason:
                holders[it.job_id] = _d(holder) or None
        now_dt = dt(now)
        assert now_dt is not None
        slots = [dt(ms(it.slot)) for it in chunk]
        deadlines = [dt(now + ms(it.hold)) for it in chunk]
        ledger.dispatch_runs(
            out, slots=slots, deadlines=deadlines, now=now_dt, instance=instance,  # type: ignore[arg-type]
            acquired=acquired, holders=holders,
        )  # fmt: skip
        for d, rid in zip(out, ids, strict=True):
            if rid and d.run is not None:
                d.run.id = rid

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        if not items:
            return 0
        argv = [x for j, slot, tok in items for x in (j, ms(slot), tok)]
        return int(await self._run("withdraw", *argv))

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        self._redis()
        leased = [it for it in items if it.lease]
        single = [it.job_id for it in leased if it.lanes == 1]
        if len(set(single)) != len(single):
            raise StoreError("one batch may take at most one lease per job")
        argv: list[Any] = [len(leased)]
        for it in leased:
            argv += (it.job_id, "" if it.token is None else it.token, ms(it.hold), it.lanes)
        argv += [it.run_id for it in items]
        res = await self._run("leases", instance_id, *argv)
        now = int(res[0])
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for k, it in enumerate(leased):
            taken, holder = res[1 + 2 * k], res[2 + 2 * k]
            if taken:
                acquired.add(it.job_id if it.lanes == 1 else ledger.lane_key(it.token))
            else:
                holders[it.job_id] = _d(holder) or None
        base = 1 + 2 * len(leased)
        runs: dict[int, RunRecord] = {}
        for flat in res[base : base + len(items)]:
            if flat:
                r = run_record(flat)
                runs[int(r.id or 0)] = r
        rows: list[tuple[RunRecord, str | None]] = []
        now_dt, out = dt(now), []
        for it in items:
            st = Started(request=it, run=None)
            out.append(st)
            run = runs.get(it.run_id)
            if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
                st.holder = holders.get(it.job_id)
                if it.wait_if_busy:
                    continue
                if run is not None:
                    run.status = RunStatus.SKIPPED
                    run.reason = ledger.ALREADY_EXECUTING
                    run.finished_at, run.deadline = now_dt, None
                    run.result = ledger.busy_result()
                    run.logs.append(ledger.busy_log(st.holder, it.lanes))
                    rows.append((run, None))
            elif run is not None and run.status is RunStatus.PENDING:
                run.status = RunStatus.RUNNING
                run.started_at, run.deadline = now_dt, dt(now + ms(it.hold))
                rows.append((run, None))
            st.run = run
        await self._put(rows)
        return out

    async def finish(self, items: Sequence[Finish]) -> None:
        self._redis()
        await self._put(
            [(f.run, None) for f in items], [(f.run.job_id, f.release_token) for f in items]
        )

    async def record_skips(self, items: Sequence[Skip]) -> int:
        self._redis()
        rows: list[tuple[RunRecord, str | None]] = []
        for sk in items:
            slot = dt(ms(sk.slot))
            assert slot is not None
            rows.append((
                RunRecord(
                    id=None, job_id=sk.job_id, slot=slot, triggered_by=sk.triggered_by,
                    status=RunStatus.SKIPPED, instance_id=sk.instance_id, reason=sk.reason,
                    result=sk.result if sk.result is not None else ledger.skip_result(sk.reason),
                    logs=list(sk.logs),
                ),
                sk.reason,
            ))  # fmt: skip
        if not rows:
            return 0
        # claimed_at / finished_at are the store's time: read it in the same call's terms
        now = dt(ms(await self.now()))
        for r, _ in rows:
            r.claimed_at = r.finished_at = now
        done = await self._put(rows)
        return sum(1 for _, how in done if how == 1)

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        if items:
            await self._run("renew", *[x for j, t, h in items for x in (j, t, ms(h))])

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        before, nohold, after = ledger.interrupted_log_parts(instance_id)
        now, reaped_ids, lost = await self._run(
            "reap", instance_id, ledger.INTERRUPTED_REASON, ledger.INTERRUPTED_ERROR,
            before, nohold, after,
        )  # fmt: skip
        reaped = await self._get_many([int(i) for i in reaped_ids])
        now_dt = dt(int(now))
        assert now_dt is not None
        rebuilt: list[tuple[RunRecord, str | None]] = []
        for j, tok, holder, slot, claimed in (map(_d, x) for x in lost):
            claimed_at = dt(_i(claimed)) or now_dt
            rebuilt.append((
                ledger.lost_run(
                    j, int(tok), holder or None, dt(_i(slot)), claimed_at,
                    now=now_dt, marked_by=instance_id,
                ),
                None,
            ))  # fmt: skip
        done = await self._put(rebuilt)
        return reaped + [r for (r, _), (_, how) in zip(rebuilt, done, strict=True) if how == 1]

    # -- instances (InstanceStore) ------------------------------------------------------------

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        raw = await self._run(
            "instances", "beat", me.instance_id, me.host, me.pid, me.role, me.version,
            round(ttl * 1000),
        )  # fmt: skip
        now, lost, lost_at, lost_by, live = json.loads(raw)
        beat = Heartbeat(now=int(now) / 1000.0, live=tuple(live or ()))
        if lost:
            beat.lost, beat.lost_at, beat.lost_by = True, dt(_i(lost_at)), lost_by or None
        return beat

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        # the ledger's lines, split where the lost instance's id goes (one script writes them)
        mark = "\x00"
        err = ledger.instance_lost_error(mark).split(mark)
        line = ledger.instance_lost_log(mark, ttl, instance_id).split(mark)
        raw = await self._run(
            "instances", "break", instance_id, round(ttl * 1000),
            ledger.INSTANCE_LOST_REASON, err[0], err[1], line[0], line[1],
        )  # fmt: skip
        _, declared, ids = json.loads(raw)
        out = LostInstances()
        if not declared:
            return out
        out.instances = [_instance(i, row, live=False) for i, row in declared]
        out.runs = await self._get_many([int(i) for i in ids or ()])
        return out

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        now, rows = json.loads(await self._run("instances", "list"))
        cut = int(now) - round(ttl * 1000)
        found = [
            _instance(i, row, live=_live(row, cut))
            for i, row in (rows or ())
        ]
        found.sort(key=lambda x: (msd(x.started_at) or 0, x.instance_id))
        return found

    async def leave(self, instance_id: str) -> None:
        await self._run("instances", "leave", instance_id)

    # -- the job registry and requests (RegistryStore) ---------------------------------------

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        # in chunks of REGISTRY_CHUNK rows, one script call each (~20 ms of the server,
        # which runs nothing else during a script)
        if jobs is not None:
            wanted = {d.job_id: d for d in jobs}
            had = await self._run("registry", "ids", instance_id)
            gone = [j for j in map(_d, had) if j not in wanted]
            rows = list(wanted.values())
            for k in range(0, len(rows), REGISTRY_CHUNK):
                await self._run("registry", "put", instance_id,
                                registry_rows(rows[k:k + REGISTRY_CHUNK], spec_as_text=True))
            for k in range(0, len(gone), REGISTRY_CHUNK):
                await self._run("registry", "drop", instance_id,
                                json.dumps(gone[k:k + REGISTRY_CHUNK]))
        await self._run("registry", "publish", instance_id)

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        now, found, insts = json.loads(await self._run("registry", "list"))
        cut = int(now) - round(ttl * 1000)
        live = {i for i, raw in insts or () if _live(json.loads(raw), cut)}
        out = []
        for inst, seen, rows in found or ():
            seen_at = dt(_i(seen))
            for job_id, raw in rows:
                r = json.loads(raw)
                out.append(Declared(
                    job_id=job_id, instance_id=inst, team=r["t"], source=r["s"], digest=r["d"],
                    spec=json.loads(r["p"]), declared_at=dt(_i(r["da"])), seen_at=seen_at,
                    live=inst in live,
                ))  # fmt: skip
        out.sort(key=lambda d: (d.job_id, d.instance_id))
        return out

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        r = request
        rid, now = await self._run(
            "registry", "submit", r.kind, r.job_id, r.requested_by,
            json.dumps(r.payload, default=str), r.target or "",
        )  # fmt: skip
        return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                            payload=dict(r.payload), target=r.target, id=int(rid),
                            requested_at=dt(int(now)))

    async def take_requests(
        self, instance_id: str, job_ids: Sequence[str]
    ) -> list[FleetRequest]:
        raw = await self._run("registry", "take", instance_id, json.dumps(list(job_ids)))
        return sorted(map(_request, raw), key=lambda q: q.id or 0)

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        done = await self._run(
            "registry", "answer", request_id, "" if run_id is None else run_id,
            error or "", "1" if only_untaken else "0",
        )  # fmt: skip
        return int(done) == 1

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        done = await self._run("registry", "note", request_id, json.dumps(payload, default=str))
        return int(done) == 1

    async def get_request(self, request_id: int) -> FleetRequest | None:
        flat = await self._run("registry", "get", request_id)
        return _request(flat) if flat else None

    # -- reading the ledger -------------------------------------------------------------------

    async def _get_many(self, ids: Sequence[int]) -> list[RunRecord]:
        if not ids:
            return []
        return [run_record(f) for f in await self._run("read_runs", "get", *ids)]

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        return slot_runs_of(await self.list_runs(job_id, limit=limit, before_id=before_id))

    async def last_slot_runs(self, job_ids: Sequence[str]) -> dict[str, SlotRun]:
        return {j: s for j, r in (await self.last_runs(job_ids)).items()
                for s in slot_runs_of([r])}

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        rows = await self._run(
            "read_runs", "list", limit, "" if status is None else RunStatus(status).value,
            job_id or "", "" if before_id is None else before_id,
        )  # fmt: skip
        return [run_record(f) for f in rows]

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        only: list[Any] = []
        if where.job_ids is not None:
            only = ["1", *sorted(where.job_ids)]
        rows = await self._run(
            "read_runs", "find", limit + 1,
            "" if after is None else after.slot_ms, "" if after is None else after.id,
            "" if where.status is None else RunStatus(where.status).value,
            where.job_id or "", where.instance_id or "",
            "" if where.since is None else msd(where.since),
            "" if where.until is None else msd(where.until),
            *only,
        )  # fmt: skip
        return RunPage.of([run_record(f) for f in rows], limit)

    async def get_run(self, run_id: int) -> RunRecord | None:
        found = await self._get_many([run_id])
        return found[0] if found else None

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        if not job_ids:
            return {}
        rows = await self._run("read_runs", "last", *dict.fromkeys(job_ids))
        return {r.job_id: r for r in map(run_record, rows)}

    async def prune(
        self, *, claims_older_than: float, runs_older_than: float, runs_per_job: int
    ) -> tuple[int, int]:
        """:data:`~cronfleet.store.base.RETENTION_RULE`, in bounded pieces: each script
        call examines at most :attr:`prune_chunk` jobs, claims and runs and hands back a
        cursor (``prune.lua``), so other clients' calls run between the pieces instead of
        waiting behind one pass over the whole ledger. The cut-offs are fixed for the pass.
        """
        claims_cut, runs_cut = ms(claims_older_than), ms(runs_older_than)
        nc = nr = 0
        cursor = ""
        while True:
            c, r, _, cursor = await self._run(
                "prune", claims_cut, runs_cut, runs_per_job, cursor, self.prune_chunk
            )
            nc, nr = nc + int(c), nr + int(r)
            cursor = _d(cursor)
            if not cursor:
                return nc, nr
            await asyncio.sleep(0)


def _instance(instance_id: str, row: Mapping[str, Any], *, live: bool) -> Instance:
    """An instance from its JSON row (``instances.lua``)."""
    return Instance(
        instance_id=instance_id, host=str(row.get("h", "")), pid=int(row.get("p", 0)),
        role=str(row.get("r", "")), version=str(row.get("v", "")),
        started_at=dt(_i(row.get("sa"))), heartbeat_at=dt(_i(row.get("hb"))),
        lost_at=dt(_i(row.get("la"))), lost_by=row.get("lb") or None, live=live,
    )  # fmt: skip


def _live(row: Mapping[str, Any], cut: int) -> bool:
    """An instance row (``instances.lua``) is live: not declared lost, heartbeat not
    older than ``cut`` (ms)."""
    return live(row.get("la") or None, int(row.get("hb", 0)), cut)


def _request(flat: Sequence[Any]) -> FleetRequest:
    """A request hash (``registry.lua``'s flat list, its ``id`` appended)."""
    it = iter(flat)
    f = {_d(k): _d(v) for k, v in zip(it, it, strict=True)}
    return FleetRequest(
        kind=f["k"], job_id=f["j"], requested_by=f["b"], payload=dict(json.loads(f["p"])),
        target=f.get("tg"), id=int(f["id"]), requested_at=_t(f, "ra"),
        taken_by=f.get("tb"), taken_at=_t(f, "ta"), answered_at=_t(f, "aa"),
        run_id=_i(f.get("ri")), error=f.get("e"),
    )  # fmt: skip
