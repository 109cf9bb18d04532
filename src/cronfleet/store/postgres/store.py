"""The fleet store: PostgreSQL, shared by every instance on every host.

Same contract as the SQLite store (``tests/store`` runs unchanged against both), built for
many hosts:

* **Time from the database.** Each transaction starts with ``BEGIN; SELECT now()`` (one
  round trip) and every timestamp it writes or compares — claim times, lease expiry, run
  deadlines — is that transaction's ``now()``. An instance with a skewed clock therefore
  cannot take a live lease or reap a live run. The skew between this host and the database
  is measured at open and every ``skew_interval`` seconds (:attr:`PostgresStore.clock_skew`)
  and logged when it exceeds 1 s. Tests inject a ``FakeClock``: any clock that is not a
  :class:`~cronfleet.clock.SystemClock` is used instead of the database clock.
* **Batches as arrays.** A batch travels as a few typed arrays read with ``unnest``, so
  claiming 10,000 slots is one ``INSERT … ON CONFLICT DO NOTHING RETURNING`` and the leases
  one conditional ``UPDATE``. Rows are inserted and locked in key order, so two instances
  claiming overlapping batches queue on each other instead of deadlocking (a deadlock or
  serialization failure is retried anyway).
* **Migrations** run at open in their own schema (default ``cronfleet``) under a
  transaction-level advisory lock: ten processes starting together apply each one once.
* **LISTEN/NOTIFY.** Overrides and new jobs are announced on a per-schema channel;
  :meth:`PostgresStore.subscribe` keeps a dedicated listening connection (reconnecting with
  backoff) that wakes the scheduler early. Overrides are still read at fire time.
* **Connection loss.** Connection errors raise :class:`~cronfleet.errors.StoreUnavailable`
  (the scheduler then fails open or closed per job). While the database is down every call
  fails fast, without waiting on the pool, and one background probe reconnects with
  exponential backoff; nothing is buffered here.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import random
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from cronfleet.clock import Clock, SystemClock, wait_done
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.model import JobState, RunRecord, RunStatus
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
)
from cronfleet.store.queries import find_runs_query, history_query, load_queries, migrations
from cronfleet.store.rows import (
    REGISTRY_CHUNK,
    dumps,
    ms,
    msd,
    pg_finish_row,
    pg_run,
    pg_run_rows,
    pg_state,
    registry_rows,
)
from cronfleet.store.url import parse_store_url, redact_url, split_pg_url
from cronfleet.store.url import split_pg_url as split_url  # the old name, kept

__all__ = ["PostgresStore", "split_url"]

log = logging.getLogger("cronfleet.store.postgres")
T = TypeVar("T")
Query = str | bytes | sql.SQL | sql.Composed
TimeSource = Literal["database", "clock"]

# the first of the advisory-lock key pair used by migrations ("cfmg")
_MIGRATION_LOCK = 0x63666D67
_SKEW_WARN = 1.0
DEFAULT_CALL_TIMEOUT = 10.0
"""A store call that takes longer makes the store unavailable (a hung server or pooler
that keeps its connections open is an outage, not a wait)."""
IDLE_TX_MIN = 5.0  # seconds: the shortest idle-in-transaction limit set on a session
PROBE_MAX_BACKOFF = 1.0
"""Seconds at most between two reconnect probes while the database is down (full jitter
below it): every process fires on time again within about a second of its return."""


PRUNE_TIMEOUT = 120.0


def _call_timeout(value: float | None) -> float | None:
    if value is None or value <= 0:
        return None
    return float(value)


async def within(aw: Coroutine[Any, Any, T], seconds: float | None, what: str) -> T:
    """``aw``'s result if it arrives within ``seconds``, else ``TimeoutError`` at once.

    The late work is cancelled in the background rather than awaited: cancelling a psycopg
    query sends a cancel request and waits for the server (up to 10 s), and a server that
    stopped answering must not hold the caller that long. This process's own lag does not
    count (:func:`~cronfleet.clock.wait_done`)."""
    if seconds is None:
        return await aw
    if _EAGER:  # Python 3.12+: the call's first step (sending its query) runs now
        task: asyncio.Future[T] = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
            aw, loop=asyncio.get_running_loop(), eager_start=True
        )
    else:
        task = asyncio.ensure_future(aw)
    try:
        if await wait_done(task, seconds):
            return task.result()
    except asyncio.CancelledError:
        task.cancel()
        raise
    task.cancel()
    task.add_done_callback(_consume)
    _abandoned.add(task)
    raise TimeoutError(f"{what}: no answer within {seconds:g} s")


_abandoned: set[asyncio.Future[Any]] = set()
_EAGER = sys.version_info >= (3, 12)


def _consume(task: asyncio.Future[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: the caller was already told

_msd = msd
_dumps = dumps
_state = pg_state
_STATUS = {s.value: s for s in RunStatus}  # Enum lookup by value, without its call
_run = pg_run
_run_rows = pg_run_rows


def _instance(row: Sequence[Any], *, live: bool) -> Instance:
    return Instance(
        instance_id=row[0], host=row[1], pid=row[2], role=row[3], version=row[4],
        started_at=row[5], heartbeat_at=row[6], lost_at=row[7], lost_by=row[8], live=live,
    )  # fmt: skip


def _request(row: Sequence[Any]) -> FleetRequest:
    return FleetRequest(
        id=row[0], kind=row[1], job_id=row[2], target=row[3], payload=dict(row[4] or {}),
        requested_by=row[5], requested_at=row[6], taken_by=row[7], taken_at=row[8],
        answered_at=row[9], run_id=row[10], error=row[11],
    )  # fmt: skip


def _run_id(r: RunRecord) -> int:
    return r.id or 0


async def apply_migrations(cur: Cursor, schema: str, label: str) -> list[str]:
    """Bring ``schema`` to the newest version, inside the caller's transaction, under a
    per-schema advisory lock (concurrent starters wait, then find nothing to do). Used by
    the store and by the side-table connections. Returns the files applied."""
    known = migrations("cronfleet.store.postgres")
    latest = known[-1][0] if known else 0
    q = cur.q
    await cur.execute(q["migration_lock"], (_MIGRATION_LOCK, schema))
    await cur.execute(q["create_schema"])
    await cur.execute(q["schema_migrations"])
    await cur.execute(q["schema_version"])
    row = await cur.fetchone()
    current = (row[0] if row else None) or 0
    if current > latest:
        raise StoreError(
            f"PostgreSQL store {label}: schema {schema!r} is at version {current}, newer "
            f"than this cronfleet understands ({latest}); upgrade cronfleet"
        )
    await cur.execute(q["schema_versions"])
    done = {r[0] for r in await cur.fetchall()}
    # every known version not applied yet, in order: a number is handed out before its
    # change lands, so a lower one may arrive after a higher one was applied
    pending = [(v, n, t) for v, n, t in known if v not in done]
    if pending:  # the migration files name tables without a schema
        await cur.execute(q["search_path"])
    for version, name, text in pending:
        await cur.execute(text.encode())  # a script: no parameters, many statements
        await cur.execute(q["migration_applied"], (version, name))
        log.info("PostgreSQL store %s: applied migration %s", label, name)
    return [n for _, n, _ in pending]


class Cursor:
    """The cursor a transaction body gets: ``q`` holds this store's named queries (its
    schema already in place, so nothing depends on ``search_path``)."""

    __slots__ = ("_cur", "q")

    def __init__(self, cur: AsyncCursor[tuple[Any, ...]], queries: Mapping[str, str]) -> None:
        self._cur = cur
        self.q = queries

    async def execute(self, query: Query, params: Any = None) -> None:
        await self._cur.execute(query, params)

    async def fetchone(self) -> tuple[Any, ...] | None:
        return await self._cur.fetchone()

    async def fetchall(self) -> list[tuple[Any, ...]]:
        return await self._cur.fetchall()

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount


class PostgresStore:
    """Claims, leases, overrides and the run ledger in one PostgreSQL schema.

    ``url``: any libpq URI (``postgresql://user@host/db``, ``postgresql://root@/db`` for the
    local socket), optionally with ``?schema=name`` (default ``cronfleet``), ``pool_min``
    and ``pool_max``. ``clock``: this host's clock. A :class:`SystemClock` (or none) means
    the database clock judges time and the host clock is only compared with it; any other
    clock (a test's ``FakeClock``) is used for every timestamp instead. ``time_source``
    forces one or the other.
    """

    lanes = True  # max_instances > 1: lanes 1..N-1 in the lease_lanes table (v9)

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        time_source: TimeSource | None = None,
        pool_min: int = 1,
        pool_max: int = 8,
        pool_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        open_timeout: float = 60.0,
        skew_interval: float = 60.0,
        max_backoff: float = 5.0,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        conninfo, opts = split_pg_url(url)
        try:
            conninfo_to_dict(conninfo)  # a malformed URL is an error now, not an outage
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL URL {redact_url(url)!r}: {exc}") from None
        self.conninfo = conninfo
        self.url = redact_url(url)
        self.schema = schema or opts.get("schema") or "cronfleet"
        if len(self.schema) > 50:
            raise StoreError(f"PostgreSQL store: schema name {self.schema!r} is too long")
        self.host_clock: Clock = clock or SystemClock()
        source = time_source or opts.get("time_source")
        if source is None:
            source = "database" if clock is None or isinstance(clock, SystemClock) else "clock"
        if source not in ("database", "clock"):
            raise StoreError(
                f"PostgreSQL store: time_source must be database or clock, not {source!r}"
            )
        self.time_source: TimeSource = source  # type: ignore[assignment]
        self.pool_min = int(opts.get("pool_min", pool_min))
        self.pool_max = max(self.pool_min, int(opts.get("pool_max", pool_max)))
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        self.open_timeout = open_timeout
        self.skew_interval = skew_interval
        self.max_backoff = max_backoff
        raw_timeout = opts.get("call_timeout")
        self.call_timeout: float | None = _call_timeout(
            float(raw_timeout) if raw_timeout is not None else call_timeout
        )
        """Seconds a store call may take before the store counts as unavailable (client
        side, and the server's ``statement_timeout``); ``None``: no deadline."""
        self.channel = f"cronfleet_{self.schema}"
        self._qschema = '"' + self.schema.replace('"', '""') + '"'
        self.q = load_queries("cronfleet.store.postgres", self._qschema)
        self.clock_skew: float | None = None
        """Host clock minus database clock in seconds (``None`` until measured, or when a
        test clock is in use); refreshed every ``skew_interval`` seconds."""
        self._pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] | None = None
        self._known: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._down: BaseException | None = None  # the failure while the database is down
        self._probe: asyncio.Task[None] | None = None
        self._callbacks: list[Callable[[], object]] = []
        self._ambiguous: deque[tuple[str, int]] = deque(maxlen=100_000)
        self._ambiguous_early: list[tuple[str, int, int]] = []
        self._listener: asyncio.Task[None] | None = None
        self._skew_warned = False
        self._begin = b"BEGIN; SELECT now()" if self.time_source == "database" else b"BEGIN"

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.schema!r})"

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> PostgresStore:
        try:
            ok = parse_store_url(url).dialect == "postgres"
        except StoreError:
            ok = False
        if not ok:
            raise StoreError(
                f"invalid PostgreSQL URL {url!r}: expected postgresql://user@host:5432/dbname"
            )
        return cls(url, clock=clock)

    @property
    def available(self) -> bool:
        """False while the database is unreachable (calls fail fast until a probe succeeds)."""
        return self._pool is not None and self._down is None

    # -- plumbing ---------------------------------------------------------------------

    def _kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"autocommit": True}
        lowered = self.conninfo.lower()
        if "connect_timeout" not in lowered:
            kw["connect_timeout"] = max(1, round(self.connect_timeout))
        if "keepalives" not in lowered:  # notice a silently dead peer within ~30 s
            kw.update(keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        if "application_name" not in lowered:
            kw["application_name"] = "cronfleet"
        return kw

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        # UTC datetimes; a transaction left open by a partitioned instance is ended by the
        # server, so the claims it holds do not block the rest of the fleet for long
        # server: no statement outlives the client's deadline, and neither does a
        # transaction left idle by a stopped process (its claims and lease rows would block
        # the survivors' takeover; with 30 s, a process frozen inside a transaction delayed
        # its failover to 30 s). A live call never idles that long: its whole transaction
        # is inside the same deadline. Without a deadline: 30 s.
        limit = self.call_timeout
        stmt = f"{round(limit * 1000)}ms" if limit else "0"
        idle = f"{round(max(limit, IDLE_TX_MIN) * 1000)}ms" if limit else "30s"
        await conn.execute(
            f"SET TIME ZONE 'UTC'; SET statement_timeout = '{stmt}'; "
            f"SET idle_in_transaction_session_timeout = '{idle}'".encode()
        )

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]]:
        if self._pool is None:
            raise StoreError(f"{self!r} is not open")
        return self._pool

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"PostgreSQL store {self.url}: {exc}".strip())

    def _mark_down(self, exc: BaseException) -> None:
        if self._down is None:
            log.warning("PostgreSQL store %s is unavailable: %s; reconnecting", self.url, exc)
        self._down = exc
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Probe the database with backoff while it is down; then let calls through."""
        delay = 0.2
        while self._pool is not None:
            await asyncio.sleep(random.uniform(0, delay))  # full jitter: no fleet in lockstep
            try:
                await within(self._fresh_select(), self.call_timeout or 30.0, "probe")
                # drop the pooled connections that died with it
                await within(self.pool.check(), self.call_timeout or 30.0, "pool check")
                await within(self._withdraw_ambiguous_early(), self.call_timeout, "give-back")
            except Exception as exc:
                self._down = exc
                # capped low: the fleet is back on time within ~1 s of the database (a
                # probe is one fresh connection; full jitter keeps the fleet apart)
                delay = min(delay * 2, PROBE_MAX_BACKOFF, self.max_backoff)
                log.debug("PostgreSQL store %s still unavailable: %s", self.url, exc)
                continue
            log.warning("PostgreSQL store %s is available again", self.url)
            self._down = None
            await self._release_ambiguous()
            self._notify_all()  # anything announced while we were away
            if self._down is None:
                return
            # a call failed again meanwhile: its _mark_down found this probe still running
            # and started none, so this one goes on (else every call failed fast for ever)
            delay = 0.2

    async def _fresh_select(self) -> None:
        conn = await AsyncConnection.connect(self.conninfo, **self._kwargs())
        try:
            await conn.execute("SELECT 1")
        finally:
            await conn.close()

    async def confirm_outage(self) -> bool:
        """True when a *fresh* connection cannot run ``SELECT 1`` within the call deadline
        either: the database is unreachable for everyone, not merely for this process's
        session (a paused process finds its own connection dead; that is no outage)."""
        if self._pool is None:
            return False
        try:
            await within(self._fresh_select(), self.call_timeout or 5.0, "outage check")
        except (OSError, TimeoutError, psycopg.OperationalError, psycopg.InterfaceError):
            return True
        except psycopg.Error:
            return False  # the server answered, even if with an error
        return False

    async def _withdraw_ambiguous_early(self) -> None:
        """Slot claims whose COMMIT went unanswered (early or not) are given back on a
        connection of their own, before the store is marked available: the scheduler took
        the batch as failed and claims those slots again, which must find them free (a
        claim whose slot has a row stays)."""
        if not self._ambiguous_early:
            return
        rows = sorted(set(self._ambiguous_early))
        conn = await AsyncConnection.connect(self.conninfo, **self._kwargs())
        try:
            async with conn.transaction():
                cur = Cursor(conn.cursor(), self.q)
                await self._withdraw_in(cur, rows)
        finally:
            await conn.close()
        self._ambiguous_early.clear()
        log.warning("PostgreSQL store %s: gave back the claims of %d slots whose commit was "
                    "not acknowledged", self.url, len(rows))

    async def _withdraw_in(self, cur: Cursor, rows: Sequence[tuple[str, int, int]]) -> int:
        await cur.execute(cur.q["withdraw_claims"], {"rows": _dumps([list(r) for r in rows])})
        deleted = [r[0] for r in await cur.fetchall()]
        released = _dumps([[j, tok] for j, _, tok in rows])
        await cur.execute(cur.q["release_leases"], {"rows": released})
        if cur.rowcount < len(rows):
            await cur.execute(cur.q["release_lanes"], {"rows": released})
        return len(deleted)

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        """Give back early claims not started (see ``EarlyClaimStore``): claims deleted
        (fenced by token), leases released, watermarks as if they were never made."""
        if not items:
            return 0
        rows = [(job_id, ms(slot), token) for job_id, slot, token in items]

        async def go(cur: Cursor, now: datetime) -> int:
            return await self._withdraw_in(cur, rows)

        return await self._run(go)

    async def _release_ambiguous(self) -> None:
        """Leases taken by a transaction whose COMMIT went unanswered: the scheduler took
        that batch as failed and never runs those slots under the claim, so release each
        lease that is still ours and has no run row, instead of letting it block the job
        until it expires."""
        if not self._ambiguous:
            return
        pairs = sorted(set(self._ambiguous))
        self._ambiguous.clear()

        async def go(cur: Cursor, now: datetime) -> int:
            await cur.execute(cur.q["release_unrun_leases"], {"rows": _dumps(pairs)})
            released = max(cur.rowcount, 0)
            if released < len(pairs):  # max_instances > 1: lanes 1..N-1
                await cur.execute(cur.q["release_unrun_lanes"], {"rows": _dumps(pairs)})
                released += max(cur.rowcount, 0)
            return released

        try:
            released = await self._run(go)
        except StoreError as exc:
            log.warning(
                "PostgreSQL store %s: cannot release %d leases (%s)", self.url, len(pairs), exc
            )
            return
        if released:
            log.warning(
                "PostgreSQL store %s: released %d leases taken by a batch whose commit was "
                "not acknowledged",
                self.url,
                released,
            )

    def _remember_leases(self, pairs: Sequence[tuple[str, int | None]]) -> None:
        self._ambiguous.extend((j, t) for j, t in pairs if t is not None)

    async def _run(
        self,
        fn: Callable[[Cursor, datetime], Awaitable[T]],
        *,
        tx: bool = True,
        ambiguous: Callable[[T], None] | None = None,
        deadline: float | Literal["default"] | None = "default",
    ) -> T:
        """Run ``fn(cursor, now)`` in one transaction (``tx=False``: a plain read).

        ``now`` is the transaction's database time (or the test clock). Deadlocks and
        serialization failures are retried; a connection found dead before anything was
        sent is replaced once; other connection errors raise ``StoreUnavailable``. If the
        connection dies during ``COMMIT`` nobody knows whether it committed:
        ``ambiguous(result)`` is told, so the caller can undo what it can once back.

        The whole call has ``deadline`` seconds (default :attr:`call_timeout`): a database
        that keeps its connections open but stops answering raises ``StoreUnavailable``
        then and the store is down until a fresh connection answers the probe.
        """
        self.pool  # noqa: B018 -- "is not open" before anything else
        if self._down is not None:
            raise self._unavailable(self._down)
        limit = self.call_timeout if deadline == "default" else deadline
        try:
            return await within(self._attempts(fn, tx, ambiguous), limit, "store call")
        except TimeoutError as exc:
            self._mark_down(exc)
            raise self._unavailable(exc) from exc

    async def _attempts(
        self,
        fn: Callable[[Cursor, datetime], Awaitable[T]],
        tx: bool,
        ambiguous: Callable[[T], None] | None,
    ) -> T:
        pool = self.pool
        attempt = 0
        while True:
            attempt += 1
            began = False
            done = False
            result: Any = None
            try:
                # a retry after a dead pooled connection must not wait long on a pool that
                # cannot reconnect: a down database has to fail fast
                async with pool.connection(None if attempt == 1 else 1.0) as conn:
                    raw = conn.cursor()
                    cur = Cursor(raw, self.q)
                    if not tx:
                        now = self._clock_now() or datetime.now(UTC)
                        began = True
                        return await fn(cur, now)
                    try:
                        await raw.execute(self._begin)
                        began = True
                        if self.time_source == "database":
                            raw.nextset()
                            row = await raw.fetchone()
                            assert row is not None
                            now = row[0]
                        else:
                            now = self._clock_now()  # type: ignore[assignment]
                        result = await fn(cur, now)
                        done = True
                        await raw.execute(b"COMMIT")
                    except (psycopg.Error, StoreError):
                        status = conn.info.transaction_status
                        if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                            with contextlib.suppress(psycopg.Error):
                                await conn.execute(b"ROLLBACK")
                        raise
                return result  # type: ignore[no-any-return]
            except asyncio.CancelledError:
                # past the deadline: if COMMIT was on its way, nobody knows whether it landed
                if done and ambiguous is not None:
                    ambiguous(result)
                raise
            except psycopg.errors.TransactionRollback as exc:
                if attempt >= 5:
                    raise StoreError(f"PostgreSQL store {self.url}: {exc}") from exc
                log.info("PostgreSQL store: %s; retrying the transaction", type(exc).__name__)
                await asyncio.sleep(0.01 * attempt)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not began and attempt == 1 and not self._is_pool_timeout(exc):
                    continue  # a pooled connection died idle: nothing was sent, try another
                if done and ambiguous is not None:
                    ambiguous(result)
                self._mark_down(exc)
                raise self._unavailable(exc) from exc
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {self.url}: {exc}") from exc

    @staticmethod
    def _is_pool_timeout(exc: BaseException) -> bool:
        from psycopg_pool import PoolTimeout

        return isinstance(exc, PoolTimeout)

    def _clock_now(self) -> datetime | None:
        if self.time_source == "clock":
            return datetime.fromtimestamp(round(self.host_clock.now() * 1000) / 1000, UTC)
        return None

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        """Connect (retrying with backoff for up to ``open_timeout`` seconds, so a fleet
        started before its database does not crash-loop), then migrate."""
        if self._pool is not None:
            return
        deadline = time.monotonic() + self.open_timeout
        delay = 0.2
        while True:
            # a fresh pool for every attempt: one whose open failed is closed for good
            pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
                self.conninfo,
                min_size=self.pool_min,
                max_size=self.pool_max,
                kwargs=self._kwargs(),
                configure=self._configure,
                timeout=self.pool_timeout,
                open=False,
                name=f"cronfleet-{self.schema}",
            )
            try:
                await pool.open(wait=True, timeout=min(self.connect_timeout + 1, self.open_timeout))
                break
            except psycopg.OperationalError as exc:
                with contextlib.suppress(Exception):
                    await pool.close()
                # full jitter: a fleet restarted together does not retry in lockstep
                wait = random.uniform(0, delay)
                if time.monotonic() + wait > deadline:
                    raise self._unavailable(exc) from exc
                log.warning("PostgreSQL store %s: cannot connect (%s); retrying", self.url, exc)
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.max_backoff)
        self._pool = pool
        self._down = None
        try:
            await self._migrate()
            if self.time_source == "database":
                await self.measure_skew()
        except BaseException:
            await self.close()
            raise
        if self.time_source == "database" and self.skew_interval > 0:
            self._spawn(self._skew_loop(), "cronfleet-pg-skew")

    async def _migrate(self) -> None:
        async def go(cur: Cursor, now: datetime) -> None:
            await cur.execute(b"SET LOCAL statement_timeout = 0")  # a migration may be long
            await apply_migrations(cur, self.schema, self.url)

        await self._run(go, deadline=None)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        tasks = [t for t in (*self._tasks, self._probe, self._listener) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._probe = self._listener = None
        self._callbacks.clear()
        if pool is not None:
            await pool.close()

    async def now(self) -> float:
        """The database clock (the test clock in ``clock`` mode)."""
        if self.time_source == "clock":
            return self.host_clock.now()

        async def go(cur: Cursor, now: datetime) -> float:
            await cur.execute(self.q["clock"])
            row = await cur.fetchone()
            assert row is not None
            return float(row[0])

        return await self._run(go, tx=False)

    # -- clock skew -------------------------------------------------------------------

    async def measure_skew(self) -> float:
        """Measure host clock minus database clock (midpoint of one round trip), store it in
        :attr:`clock_skew` and warn when it exceeds 1 s: leases stay safe (the database
        judges them) but slots fire early or late on this host by that much."""

        async def go(cur: Cursor, now: datetime) -> float:
            t0 = self.host_clock.now()
            await cur.execute(self.q["clock"])
            row = await cur.fetchone()
            t1 = self.host_clock.now()
            assert row is not None
            return (t0 + t1) / 2 - float(row[0])

        skew = await self._run(go, tx=False)
        self.clock_skew = skew
        if abs(skew) > _SKEW_WARN:
            if not self._skew_warned:
                log.warning(
                    "PostgreSQL store %s: this host's clock is %+.3f s off the database's; "
                    "leases are judged by the database, but slots fire %.1f s %s here; "
                    "fix NTP on this host",
                    self.url,
                    skew,
                    abs(skew),
                    "early" if skew > 0 else "late",
                )
            self._skew_warned = True
        elif self._skew_warned:
            log.warning("PostgreSQL store %s: host clock back within 1 s (%+.3f s)", self.url, skew)
            self._skew_warned = False
        return skew

    async def _skew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.skew_interval)
            with contextlib.suppress(StoreError):
                await self.measure_skew()

    # -- LISTEN / NOTIFY ----------------------------------------------------------------

    async def subscribe(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` whenever any instance changes an override or adds jobs (and
        after a reconnect, since announcements may have been missed). A dedicated
        connection listens and reconnects with backoff; fire-time reads stay the truth."""
        self._callbacks.append(callback)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="cronfleet-pg-listen"
            )

    def _notify_all(self) -> None:
        for cb in list(self._callbacks):
            try:
                res = cb()
                if inspect.isawaitable(res):
                    self._spawn(res, "cronfleet-pg-callback")
            except Exception:
                log.exception("cronfleet: change callback failed")

    async def _listen(self) -> None:
        delay = 0.2
        first = True
        timeout_kw: dict[str, Any] = (
            {"timeout": 30.0}
            if "timeout" in inspect.signature(AsyncConnection.notifies).parameters
            else {}
        )
        while self._pool is not None:
            conn: AsyncConnection[Any] | None = None
            try:
                conn = await AsyncConnection.connect(self.conninfo, **self._kwargs())
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                if not first:
                    log.info("PostgreSQL store %s: listening again", self.url)
                    self._notify_all()
                first = False
                delay = 0.2
                while True:
                    async for _ in conn.notifies(**timeout_kw):
                        self._notify_all()
                    await conn.execute(b"SELECT 1")  # quiet for a while: is the peer alive?
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("PostgreSQL store %s: listener lost (%s); reconnecting", self.url, exc)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(random.uniform(0, delay))  # full jitter
            delay = min(delay * 2, self.max_backoff)

    async def _announce(self, cur: Cursor, kind: str, job_ids: Sequence[str]) -> None:
        payload = json.dumps({"kind": kind, "jobs": list(job_ids)[:100]})
        await cur.execute(cur.q["notify"], (self.channel, payload))

    # -- job state --------------------------------------------------------------------

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        ids = list(job_ids)

        async def go(cur: Cursor, now: datetime) -> dict[str, JobState]:
            await cur.execute(cur.q["ensure_jobs"], {"now": now, "ids": _dumps(ids)})
            created = [r[0] for r in await cur.fetchall()]
            if created:
                await self._announce(cur, "jobs", created)
            return await self._select_states(cur, ids)

        states = await self._run(go)
        self._known.update(ids)
        return states

    @staticmethod
    async def _select_states(cur: Cursor, ids: list[str]) -> dict[str, JobState]:
        await cur.execute(cur.q["read_states"], {"ids": _dumps(ids)})
        return {r[0]: _state(r) for r in await cur.fetchall()}

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        ids = list(job_ids)

        async def go(cur: Cursor, now: datetime) -> dict[str, JobState]:
            return await self._select_states(cur, ids)

        return await self._run(go, tx=False)

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """Only the rows with an override (a partial index): the batch's ids never travel."""

        async def go(cur: Cursor, now: datetime) -> dict[str, JobState]:
            await cur.execute(cur.q["read_overrides"])
            return {r[0]: _state(r) for r in await cur.fetchall()}

        found = await self._run(go, tx=False)
        if not found:
            return found
        wanted = set(job_ids)
        return {k: v for k, v in found.items() if k in wanted}

    async def set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        async def go(cur: Cursor, now: datetime) -> JobState:
            await cur.execute(cur.q["ensure_job"], (job_id, now))
            await cur.execute(cur.q["set_override"], (enabled, by, now, note, until, job_id))
            row = await cur.fetchone()
            assert row is not None
            await self._announce(cur, "override", [job_id])
            return _state(row)

        return await self._run(go)

    # -- the hot path -----------------------------------------------------------------

    async def _update_states(
        self,
        cur: Cursor,
        now: datetime,
        leases: list[tuple[str, int | None, float, int]],
        instance: str,
    ) -> tuple[set[str], dict[str, str | None]]:
        """One statement per batch: take ``(job, token, hold, lanes)`` leases that are free
        or expired (keeping a dead holder's unwritten run first). Returns what was taken
        (``ledger.lease_taken`` reads it) and the holders of the busy ones. A batch with
        items of ``max_instances`` > 1 goes item by item (:meth:`_take_lanes`)."""
        if not leases:
            return set(), {}
        ids = [w[0] for w in leases]
        single = [w[0] for w in leases if w[3] == 1]
        if len(set(single)) != len(single):
            raise StoreError("one batch may take at most one lease per job")
        unknown = [j for j in dict.fromkeys(ids) if j not in self._known]
        if unknown:
            await cur.execute(cur.q["ensure_jobs"], {"now": now, "ids": _dumps(unknown)})
        now_ms = _msd(now) or 0
        if len(single) < len(ids):
            return await self._take_lanes(cur, now, leases, instance)
        rows = [[j, tok, now_ms + ms(hold)] for j, tok, hold, _ in leases]
        await cur.execute(
            cur.q["take_leases"], {"inst": instance, "now": now, "rows": _dumps(rows)}
        )
        wanted = {j: tok for j, tok, _, _ in leases}
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for job_id, token, holder in await cur.fetchall():
            if job_id in wanted:
                if token == wanted[job_id]:
                    acquired.add(job_id)
                else:
                    holders[job_id] = holder
        return acquired, holders

    async def _take_lanes(
        self,
        cur: Cursor,
        now: datetime,
        leases: list[tuple[str, int | None, float, int]],
        instance: str,
    ) -> tuple[set[str], dict[str, str | None]]:
        """Item by item in job_id order (the lock order of every lease writer): lane 0 (the
        job's state row, locked by take_leases), then the lowest free or expired lane
        1..N-1 (``take_lane``) while that lock is held."""
        now_ms = _msd(now) or 0
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for j, tok, hold, n in sorted(leases, key=lambda w: w[0]):
            until = now_ms + ms(hold)
            await cur.execute(
                cur.q["take_leases"],
                {"inst": instance, "now": now, "rows": _dumps([[j, tok, until]])},
            )
            row = await cur.fetchone()
            if row is not None and row[1] == tok:
                acquired.add(j if n == 1 else ledger.lane_key(tok))
                continue
            if n > 1:
                args = {"job": j, "n": n, "now": now, "inst": instance, "tok": tok,
                        "until": until}
                await cur.execute(cur.q["take_lane"], args)
                if await cur.fetchone() is not None:
                    acquired.add(ledger.lane_key(tok))
                    continue
                await cur.execute(cur.q["lane_holders"], {"job": j, "n": n})
                holders[j] = ", ".join(sorted(r[0] for r in await cur.fetchall()))
            else:
                holders[j] = None if row is None else row[2]
        return acquired, holders

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        if not items:
            return []
        reqs = list(items)
        leased = [
            it.job_id for it in reqs
            if it.lease and not it.defer and not it.skip_reason and it.lanes == 1
        ]
        if len(set(leased)) != len(leased):
            raise StoreError("one batch may take at most one lease per job")

        async def go(cur: Cursor, now: datetime) -> list[Dispatched]:
            return await self._dispatch(cur, now, reqs, instance_id)

        def unsure(out: list[Dispatched]) -> None:
            self._remember_leases(
                [(d.request.job_id, d.token) for d in out
                 if d.started and d.request.lease and not d.request.early]
            )
            # the scheduler claims these slots again (early ones at their time, the others
            # through its outage backlog): the claims must be gone by then, or nobody would
            # run them. A claim whose row was written with it (a skip, a catch-up run) is
            # kept: the withdrawal refuses a claim whose slot has a row.
            self._ambiguous_early.extend(
                (d.request.job_id, ms(d.request.slot), d.token) for d in out
                if d.won and d.token is not None and d.request.claim == "slot"
                and d.request.kind is not DispatchKind.RECOVERY
            )

        out = await self._run(go, ambiguous=unsure)
        self._known.update(leased)
        return out

    async def _dispatch(
        self, cur: Cursor, now: datetime, items: list[Dispatch], instance: str
    ) -> list[Dispatched]:
        out = [Dispatched(request=it, won=False) for it in items]
        slot_ms = [ms(it.slot) for it in items]
        # 1. claims: one statement for every unique slot claim in the batch
        slot_idx = [
            i
            for i, it in enumerate(items)
            if it.claim == "slot" and it.kind is not DispatchKind.RECOVERY
        ]
        if slot_idx:
            await cur.execute(
                cur.q["claim"],
                {
                    "inst": instance,
                    "now": now,
                    "rows": _dumps([[items[i].job_id, slot_ms[i]] for i in slot_idx]),
                },
            )
            won = {(j, s): tok for tok, j, s in await cur.fetchall()}
            for i in slot_idx:
                tok = won.get((items[i].job_id, slot_ms[i]))
                if tok is not None:
                    out[i].won, out[i].token = True, tok
        token_idx = [i for i, it in enumerate(items) if it.claim == "token"]
        if token_idx:  # manual runs: a fencing token without a slot
            await cur.execute(
                cur.q["draw_tokens"],
                {
                    "inst": instance,
                    "now": now,
                    "ids": _dumps([items[i].job_id for i in token_idx]),
                },
            )
            tokens = sorted(r[0] for r in await cur.fetchall())
            for i, tok in zip(token_idx, tokens, strict=True):
                out[i].won, out[i].token = True, tok
        for i, it in enumerate(items):
            if it.kind is DispatchKind.RECOVERY:  # crash recovery: rare, one row at a time
                await cur.execute(cur.q["delete_claim"], (it.job_id, it.reclaim_token))
                if cur.rowcount:
                    await cur.execute(
                        cur.q["claim_one"], (it.job_id, slot_ms[i], instance, now)
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    out[i].won, out[i].token = True, row[0]
            elif it.claim == "none":
                out[i].won = True
        # 2. the leases of the runs that start now, one statement (the watermark is
        #    derived from the claims: nothing to write for it)
        lease_idx = [
            i
            for i, d in enumerate(out)
            if d.won and items[i].lease and not items[i].defer and not items[i].skip_reason
        ]
        acquired, holders = await self._update_states(
            cur,
            now,
            [(items[i].job_id, out[i].token, items[i].hold, items[i].lanes) for i in lease_idx],
            instance,
        )
        # an early claim is kept only with its lease: where the lease is busy, the claim
        # goes again (no other transaction ever saw it) and the slot is decided at its time
        gone = [
            i
            for i in lease_idx
            if items[i].kind is DispatchKind.EARLY
            and not ledger.lease_taken(items[i].job_id, out[i].token, items[i].lanes, acquired)
        ]
        if gone:
            await cur.execute(
                cur.q["delete_claims"], {"ids": _dumps([out[i].token for i in gone])}
            )
            for i in gone:
                d = out[i]
                d.won, d.token, d.busy = False, None, True
                d.holder = holders.get(d.request.job_id)
        # 3. the run row of each won slot, as the ledger decides; fast-path runs
        #    (record=False) are written by the scheduler's group commit after their
        #    handler has started
        slot_dt: dict[int, datetime] = {}
        until: dict[float, datetime] = {}
        slots = []
        for at in slot_ms:
            slot = slot_dt.get(at)
            if slot is None:
                slot = slot_dt[at] = datetime.fromtimestamp(at / 1000, UTC)
            slots.append(slot)
        deadlines = []
        for it in items:
            deadline = until.get(it.hold)
            if deadline is None:
                deadline = until[it.hold] = now + timedelta(seconds=it.hold)
            deadlines.append(deadline)
        to_insert = ledger.dispatch_runs(
            out,
            slots=slots,
            deadlines=deadlines,
            now=now,
            instance=instance,
            acquired=acquired,
            holders=holders,
        )
        ids = await self._insert_runs(cur, to_insert)
        for rec, rid in zip(to_insert, ids, strict=True):
            rec.id = rid
        return out

    @staticmethod
    async def _insert_runs(cur: Cursor, recs: Sequence[RunRecord]) -> list[int]:
        """Insert complete run rows; their ids, in the order given (at most 2 statements).

        Rows with a fencing token are upserted on it and matched back by token. For the
        others, identity values are drawn in the ``ORDER BY`` order of the ``SELECT``, so
        sorting the returned ids gives each row its own (another transaction may take ids
        in between, never reorder ours)."""
        if not recs:
            return []
        ids: list[int] = [0] * len(recs)
        fenced = [i for i, r in enumerate(recs) if r.fencing_token is not None]
        plain = [i for i, r in enumerate(recs) if r.fencing_token is None]
        if fenced:
            await cur.execute(cur.q["upsert_runs"], {"rows": _run_rows([recs[i] for i in fenced])})
            by_token = {tok: rid for rid, tok in await cur.fetchall()}
            missing = [recs[i] for i in fenced if recs[i].fencing_token not in by_token]
            if missing:  # fenced: the token's row holds a final outcome already
                by_token.update(await PostgresStore._attach_late(cur, missing, "tokens"))
            for i in fenced:
                ids[i] = by_token[recs[i].fencing_token]
        if plain:
            await cur.execute(cur.q["insert_runs"], {"rows": _run_rows([recs[i] for i in plain])})
            got = sorted(r[0] for r in await cur.fetchall())
            if len(got) != len(plain):
                raise StoreError(f"inserted {len(got)} run rows for {len(plain)} records")
            for i, rid in zip(plain, got, strict=True):
                ids[i] = rid
        return ids

    @staticmethod
    async def _attach_late(
        cur: Cursor, late: Sequence[RunRecord], by: Literal["tokens", "ids"]
    ) -> dict[int, int]:
        """Keep each of ``late`` as the late result of the row that already holds its
        slot's final outcome (found by token or by id); ``{token: row id}``."""
        if by == "tokens":
            await cur.execute(
                cur.q["runs_by_token"], {"tokens": _dumps([r.fencing_token for r in late])}
            )
            stored = {row.fencing_token: row for row in map(_run, await cur.fetchall())}
            pairs = [(stored.get(r.fencing_token), r) for r in late]
        else:
            await cur.execute(cur.q["runs_by_id"], {"ids": _dumps([r.id for r in late])})
            stored_id = {row.id: row for row in map(_run, await cur.fetchall())}
            pairs = [(stored_id.get(r.id), r) for r in late]
        out: dict[int, int] = {}
        for row, rec in pairs:
            if row is None or row.id is None:
                raise StoreError(f"run row of job {rec.job_id} vanished while writing it")
            kept = ledger.attach_late_result(row, rec)
            await cur.execute(
                cur.q["attach_late"],
                {"result": _dumps(kept.result), "logs": _dumps(kept.logs), "id": row.id},
            )
            if row.fencing_token is not None:
                out[row.fencing_token] = row.id
        return out

    # -- instances ----------------------------------------------------------------------

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        async def go(cur: Cursor, now: datetime) -> Heartbeat:
            beat = Heartbeat(now=now.timestamp())
            await cur.execute(cur.q["instance_get"], {"id": me.instance_id})
            row = await cur.fetchone()
            if row is None or row[0] is not None:
                if row is not None:
                    beat.lost, beat.lost_at, beat.lost_by = True, row[0], row[1]
                await cur.execute(
                    cur.q["instance_register"],
                    {"id": me.instance_id, "host": me.host, "pid": me.pid, "role": me.role,
                     "version": me.version, "now": now},
                )  # fmt: skip
            else:
                await cur.execute(cur.q["instance_beat"], {"id": me.instance_id, "now": now})
            await cur.execute(cur.q["instances_live"], {"cut": now - timedelta(seconds=ttl)})
            beat.live = tuple(r[0] for r in await cur.fetchall())
            return beat

        return await self._run(go)

    # -- the job registry and requests -----------------------------------------------

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        # the changed rows go in chunks of REGISTRY_CHUNK, one short transaction each
        # (the loop gets a turn between two: building 100,000 rows in one go held it)
        if jobs is not None:
            wanted = {d.job_id: d for d in jobs}

            async def had_rows(cur: Cursor, now: datetime) -> dict[str, str]:
                await cur.execute(cur.q["registry_of"], {"id": instance_id})
                return {r[0]: r[1] for r in await cur.fetchall()}

            had = await self._run(had_rows)
            gone = [j for j in had if j not in wanted]
            put = [d for d in wanted.values() if had.get(d.job_id) != d.digest]
            for k in range(0, len(gone), REGISTRY_CHUNK):
                await self._run(partial(self._registry_write, "registry_drop", {
                    "id": instance_id, "gone": _dumps(gone[k:k + REGISTRY_CHUNK])}))
            for k in range(0, len(put), REGISTRY_CHUNK):
                rows = registry_rows(put[k:k + REGISTRY_CHUNK])
                await self._run(partial(self._registry_write, "registry_put", {
                    "id": instance_id, "rows": rows}))
        await self._run(partial(self._registry_write, "registry_touch", {"id": instance_id}))

    @staticmethod
    async def _registry_write(name: str, params: dict[str, Any], cur: Cursor,
                              now: datetime) -> None:
        await cur.execute(cur.q[name], {**params, "now": now})

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        async def go(cur: Cursor, now: datetime) -> list[Declared]:
            cut = now - timedelta(seconds=ttl)
            await cur.execute(cur.q["registry_all"])
            return [
                Declared(job_id=r[0], instance_id=r[1], team=r[2], source=r[3], digest=r[4],
                         spec=dict(r[5]), declared_at=r[6], seen_at=r[7],
                         live=bool(r[10]) and r[8] is None and r[9] >= cut)
                for r in await cur.fetchall()
            ]  # fmt: skip

        return await self._run(go)

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        r = request

        async def go(cur: Cursor, now: datetime) -> FleetRequest:
            await cur.execute(cur.q["request_add"], {
                "kind": r.kind, "job": r.job_id, "target": r.target,
                "payload": _dumps(r.payload), "by": r.requested_by, "now": now,
            })  # fmt: skip
            row = await cur.fetchone()
            assert row is not None
            await self._announce(cur, "request", [r.job_id])
            return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                                payload=dict(r.payload), target=r.target, id=row[0],
                                requested_at=row[1])

        return await self._run(go)

    async def take_requests(
        self, instance_id: str, job_ids: Sequence[str]
    ) -> list[FleetRequest]:
        ids = list(job_ids)

        async def go(cur: Cursor, now: datetime) -> list[FleetRequest]:
            await cur.execute(cur.q["requests_take"],
                              {"id": instance_id, "now": now, "jobs": _dumps(ids)})
            return sorted((_request(r) for r in await cur.fetchall()), key=lambda q: q.id or 0)

        return await self._run(go)

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        async def go(cur: Cursor, now: datetime) -> bool:
            await cur.execute(cur.q["request_answer"], {
                "rid": request_id, "now": now, "run": run_id, "error": error,
                "untaken": only_untaken,
            })  # fmt: skip
            return cur.rowcount == 1

        return await self._run(go)

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        async def go(cur: Cursor, now: datetime) -> bool:
            await cur.execute(cur.q["request_note"], {"rid": request_id,
                                                      "payload": _dumps(payload)})
            return cur.rowcount == 1

        return await self._run(go)

    async def get_request(self, request_id: int) -> FleetRequest | None:
        async def go(cur: Cursor, now: datetime) -> FleetRequest | None:
            await cur.execute(cur.q["request_get"], {"rid": request_id})
            row = await cur.fetchone()
            return None if row is None else _request(row)

        return await self._run(go, tx=False)

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        async def go(cur: Cursor, now: datetime) -> LostInstances:
            out = LostInstances()
            await cur.execute(
                cur.q["instances_declare_lost"],
                {"now": now, "cut": now - timedelta(seconds=ttl), "me": instance_id},
            )
            out.instances = [_instance(r, live=False) for r in await cur.fetchall()]
            if not out.instances:
                return out
            lost = [i.instance_id for i in out.instances]
            await cur.execute(
                cur.q["leases_of"], {"ids": _dumps(lost)}
            )  # lock the job_state rows first, in job_id order (as every writer does)
            leases = await cur.fetchall()
            await cur.execute(cur.q["lanes_of"], {"ids": _dumps(lost)})
            leases += await cur.fetchall()
            rows = [
                [i, ledger.instance_lost_error(i), ledger.instance_lost_log(i, ttl, instance_id)]
                for i in lost
            ]
            await cur.execute(
                cur.q["interrupt_lost"],
                {"now": now, "reason": ledger.INSTANCE_LOST_REASON, "rows": _dumps(rows)},
            )
            out.runs = [_run(r) for r in await cur.fetchall()]
            rebuilt = [
                ledger.instance_lost_run(
                    job_id, token, holder, slot, claimed, now=now, ttl=ttl, marked_by=instance_id
                )
                for job_id, token, holder, slot, claimed, has_run in leases
                if claimed is not None and not has_run
            ]
            ids = await self._insert_runs(cur, rebuilt)
            for rec, rid in zip(rebuilt, ids, strict=True):
                rec.id = rid
            out.runs.extend(rebuilt)
            if leases:
                freed = {"rows": _dumps([[j, tok] for j, tok, *_ in leases])}
                await cur.execute(cur.q["release_leases"], freed)
                if cur.rowcount < len(leases):
                    await cur.execute(cur.q["release_lanes"], freed)
            return out

        return await self._run(go)

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        async def go(cur: Cursor, now: datetime) -> list[Instance]:
            cut = now - timedelta(seconds=ttl)
            await cur.execute(cur.q["instances_all"])
            return [
                _instance(r, live=r[7] is None and r[6] >= cut) for r in await cur.fetchall()
            ]

        return await self._run(go)

    async def leave(self, instance_id: str) -> None:
        async def go(cur: Cursor, now: datetime) -> None:
            await cur.execute(cur.q["instance_leave"], {"id": instance_id})

        await self._run(go)

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        if not items:
            return []
        reqs = list(items)

        async def go(cur: Cursor, now: datetime) -> list[Started]:
            return await self._start(cur, now, reqs, instance_id)

        def unsure(out: list[Started]) -> None:
            self._remember_leases(
                [
                    (st.request.job_id, st.request.token)
                    for st in out
                    if st.request.lease
                    and st.run is not None
                    and st.run.status is RunStatus.RUNNING
                ]
            )

        return await self._run(go, ambiguous=unsure)

    async def _start(
        self, cur: Cursor, now: datetime, items: list[Start], instance: str
    ) -> list[Started]:
        out = [Started(request=it, run=None) for it in items]
        leased = [it for it in items if it.lease]
        acquired, holders = await self._update_states(
            cur, now, [(it.job_id, it.token, it.hold, it.lanes) for it in leased], instance
        )
        now_ms = _msd(now) or 0
        run_now: list[tuple[int, int]] = []
        skip_now: list[tuple[int, str]] = []
        waiting: set[int] = set()
        for st, it in zip(out, items, strict=True):
            if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
                st.holder = holders.get(it.job_id)
                if it.wait_if_busy:
                    waiting.add(it.run_id)
                else:
                    skip_now.append((it.run_id, ledger.busy_log(st.holder, it.lanes)))
                continue
            run_now.append((it.run_id, now_ms + ms(it.hold)))
        if run_now:
            await cur.execute(cur.q["start_runs"], {"now": now, "rows": _dumps(run_now)})
        if skip_now:
            await cur.execute(
                cur.q["skip_busy_runs"],
                {
                    "reason": ledger.ALREADY_EXECUTING,
                    "now": now,
                    "result": _dumps(ledger.busy_result()),
                    "rows": _dumps(skip_now),
                },
            )
        touched = [it.run_id for it in items if it.run_id not in waiting]
        if touched:
            await cur.execute(cur.q["runs_by_id"], {"ids": _dumps(touched)})
            by_id = {r[0]: _run(r) for r in await cur.fetchall()}
            for st in out:
                if st.request.run_id not in waiting:
                    st.run = by_id.get(st.request.run_id)
        return out

    async def finish(self, items: Sequence[Finish]) -> None:
        if not items:
            return
        reqs = list(items)
        new = [f.run for f in reqs if f.run.id is None]
        updates = _dumps(
            [
                pg_finish_row(r)
                for r in sorted((f.run for f in reqs if f.run.id is not None), key=_run_id)
            ]
        )
        releases = [(f.run.job_id, f.release_token) for f in reqs if f.release_token is not None]

        changed = [f.run for f in reqs if f.run.id is not None]

        async def go(cur: Cursor, now: datetime) -> list[int]:
            ids = await self._insert_runs(cur, new)
            if len(new) < len(reqs):
                await cur.execute(cur.q["finish_runs"], {"rows": updates})
                done = {r[0] for r in await cur.fetchall()}
                late = [r for r in changed if r.id not in done]
                if late:  # fenced: those rows hold a final outcome already
                    await self._attach_late(cur, late, "ids")
            if releases:
                await cur.execute(cur.q["release_leases"], {"rows": _dumps(releases)})
                if cur.rowcount < len(releases):  # max_instances > 1: lanes 1..N-1
                    await cur.execute(cur.q["release_lanes"], {"rows": _dumps(releases)})
            return ids

        ids = await self._run(go)
        for rec, rid in zip(new, ids, strict=True):
            rec.id = rid  # only once committed: a retried transaction must insert them again

    async def record_skips(self, items: Sequence[Skip]) -> int:
        if not items:
            return 0
        rows: list[list[Any]] = []
        for sk in items:
            result = sk.result if sk.result is not None else ledger.skip_result(sk.reason)
            rows.append(
                [sk.job_id, ms(sk.slot), sk.triggered_by.value, sk.reason, sk.instance_id,
                 result, sk.logs]
            )
        payload = _dumps(rows)

        async def go(cur: Cursor, now: datetime) -> int:
            await cur.execute(cur.q["record_skips"], {"now": now, "rows": payload})
            return max(cur.rowcount, 0)

        return await self._run(go)

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        if not items:
            return
        reqs = sorted(items)

        async def go(cur: Cursor, now: datetime) -> None:
            now_ms = _msd(now) or 0
            args = {"rows": _dumps([[j, tok, now_ms + ms(h)] for j, tok, h in reqs])}
            await cur.execute(cur.q["renew_leases"], args)
            if cur.rowcount < len(reqs):  # max_instances > 1: lanes 1..N-1
                await cur.execute(cur.q["renew_lanes"], args)
            await cur.execute(cur.q["renew_deadlines"], args)

        await self._run(go)

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        async def go(cur: Cursor, now: datetime) -> tuple[list[RunRecord], list[RunRecord]]:
            before, anon, after = ledger.interrupted_log_parts(instance_id)
            await cur.execute(
                cur.q["reap"],
                {
                    "now": now,
                    "reason": ledger.INTERRUPTED_REASON,
                    "error": ledger.INTERRUPTED_ERROR,
                    "before": before,
                    "anon": anon,
                    "after": after,
                },
            )
            reaped = [_run(r) for r in await cur.fetchall()]
            await cur.execute(cur.q["lost_runs"], {"now": now})
            lost = await cur.fetchall()
            await cur.execute(cur.q["lost_lane_runs"], {"now": now})
            lost += await cur.fetchall()
            rebuilt = [
                ledger.lost_run(
                    job_id, token, holder, slot, claimed, now=now, marked_by=instance_id
                )
                for job_id, token, holder, slot, claimed in lost
            ]
            ids = await self._insert_runs(cur, rebuilt)
            for rec, rid in zip(rebuilt, ids, strict=True):
                rec.id = rid
            if rebuilt:
                freed = {"rows": _dumps([[r.job_id, r.fencing_token] for r in rebuilt])}
                await cur.execute(cur.q["release_leases"], freed)
                if cur.rowcount < len(rebuilt):
                    await cur.execute(cur.q["release_lanes"], freed)
            return reaped, rebuilt

        reaped, rebuilt = await self._run(go)
        return reaped + rebuilt

    # -- reading the ledger -----------------------------------------------------------

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        query, args = history_query(
            self.q["runs"].rstrip(),
            job_id=job_id,
            status=None if status is None else RunStatus(status).value,
            before_id=before_id,
            limit=limit,
            placeholder="%s",
        )

        async def go(cur: Cursor, now: datetime) -> list[RunRecord]:
            await cur.execute(query, args)
            return [_run(r) for r in await cur.fetchall()]

        return await self._run(go, tx=False)

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        query, args = history_query(self.q["slot_runs"].rstrip(), job_id=job_id, status=None,
                                    before_id=before_id, limit=limit, placeholder="%s")
        status = _STATUS
        new = tuple.__new__  # a NamedTuple without its Python-level __new__: 10,000 rows

        async def go(cur: Cursor, now: datetime) -> list[SlotRun]:
            await cur.execute(query, args)
            return [new(SlotRun, (r[0], r[1], status[r[2]], r[3], bool(r[4])))
                    for r in await cur.fetchall()]

        return await self._run(go, tx=False)

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        query, args = find_runs_query(
            self.q["runs"].rstrip(), where, after=after, limit=limit, placeholder="%s",
            time=lambda d: d,
            any_job=("job_id = ANY(%s::text[])", list),
        )  # fmt: skip

        async def go(cur: Cursor, now: datetime) -> list[RunRecord]:
            await cur.execute(query, args)
            return [_run(r) for r in await cur.fetchall()]

        return RunPage.of(await self._run(go, tx=False), limit)

    async def get_run(self, run_id: int) -> RunRecord | None:
        async def go(cur: Cursor, now: datetime) -> RunRecord | None:
            await cur.execute(cur.q["get_run"], (run_id,))
            row = await cur.fetchone()
            return None if row is None else _run(row)

        return await self._run(go, tx=False)

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        """The newest run of each job, one statement (an index probe per job)."""
        if not job_ids:
            return {}
        ids = _dumps(list(dict.fromkeys(job_ids)))

        async def go(cur: Cursor, now: datetime) -> dict[str, RunRecord]:
            await cur.execute(cur.q["last_runs"], {"ids": ids})
            return {r[1]: _run(r) for r in await cur.fetchall()}

        return await self._run(go, tx=False)

    async def last_slot_runs(self, job_ids: Sequence[str]) -> dict[str, SlotRun]:
        if not job_ids:
            return {}
        ids = _dumps(list(dict.fromkeys(job_ids)))
        status = _STATUS
        new = tuple.__new__

        async def go(cur: Cursor, now: datetime) -> dict[str, SlotRun]:
            await cur.execute(cur.q["last_slot_runs"], {"ids": ids})
            return {r[0]: new(SlotRun, (r[1], r[2], status[r[3]], r[4], bool(r[5])))
                    for r in await cur.fetchall()}

        return await self._run(go, tx=False)

    async def prune(
        self, *, claims_older_than: float, runs_older_than: float, runs_per_job: int
    ) -> tuple[int, int]:
        claims_before = datetime.fromtimestamp(claims_older_than, UTC)
        runs_before = datetime.fromtimestamp(runs_older_than, UTC)

        async def go(cur: Cursor, now: datetime) -> tuple[int, int]:
            # RETENTION_RULE (store/base.py); upkeep, off the critical path: its own deadline
            await cur.execute(b"SET LOCAL statement_timeout = '120s'")
            await cur.execute(cur.q["prune_claims"], (claims_before,))
            claims = cur.rowcount
            await cur.execute(cur.q["prune_old_runs"], (runs_before,))
            runs = cur.rowcount
            await cur.execute(cur.q["prune_runs_per_job"], (runs_per_job,))
            runs += cur.rowcount
            return claims, runs

        return await self._run(go, deadline=PRUNE_TIMEOUT)
