"""PostgreSQL's transport: the pool, one ``BEGIN`` per plan or call (with the
transaction's ``now()``), retries of deadlocks and serialization failures, the store's
outage state (fail fast while down, one probe reconnecting with backoff) and what a
commit left unanswered is given back once the database is back.

It executes the named operations of :mod:`cronfleet.store.postgres.ops`; what to execute
and in which order is decided by :mod:`cronfleet.store.driver`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import random
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from cronfleet.clock import Clock, wait_done
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.store.driver import Plan, Retention, drive_async, withdraw_plan
from cronfleet.store.postgres.ops import OPS
from cronfleet.store.queries import migrations

__all__ = ["Cursor", "PostgresTransport", "apply_migrations", "within"]

log = logging.getLogger("cronfleet.store.postgres")
T = TypeVar("T")
Query = str | bytes | sql.SQL | sql.Composed
TimeSource = Literal["database", "clock"]

# the first of the advisory-lock key pair used by migrations ("cfmg")
_MIGRATION_LOCK = 0x63666D67
IDLE_TX_MIN = 5.0  # seconds: the shortest idle-in-transaction limit set on a session
PROBE_MAX_BACKOFF = 1.0
"""Seconds at most between two reconnect probes while the database is down (full jitter
below it): every process fires on time again within about a second of its return."""
PRUNE_TIMEOUT = 120.0  # one piece of a retention pass (each is bounded: seconds at most)
PRUNE_BATCH = 5000  # runs one retention piece considers at most
PRUNE_BLOCKS = 50  # claims table blocks one retention piece considers (~5,000 claims)
PRUNE_JOBS = 500  # jobs whose cap one retention piece applies
MAX_ID = 2**63 - 1


def _tid(text: str) -> tuple[int, int]:
    """``(block, offset)`` of a ``ctid`` written ``(12,3)``."""
    block, offset = text.strip("()").split(",")
    return int(block), int(offset)


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



class PostgresTransport:
    """The pool and the transactions of one PostgreSQL store.

    ``pool`` is the accessor for code that shares the store's connections (the side
    tables): the open :class:`psycopg_pool.AsyncConnectionPool` (``async with
    store.transport.pool.connection() as conn``); :attr:`q` holds the store's named
    queries with its schema in place, :attr:`schema` the schema.
    """

    def __init__(
        self, *, conninfo: str, url: str, schema: str, queries: Mapping[str, str],
        host_clock: Clock, time_source: TimeSource, call_timeout: float | None,
        connect_timeout: float, max_backoff: float, on_back: Callable[[], None],
    ) -> None:
        self.conninfo = conninfo
        self.url = url
        self.schema = schema
        self.q = queries
        self.host_clock = host_clock
        self.time_source = time_source
        self.call_timeout = call_timeout
        self.connect_timeout = connect_timeout
        self.max_backoff = max_backoff
        self.channel = f"cronfleet_{schema}"
        self.prune_batch, self.prune_blocks, self.prune_jobs = (
            PRUNE_BATCH, PRUNE_BLOCKS, PRUNE_JOBS)
        self.on_back = on_back  # the database answers again (announcements may be missed)
        self.known: set[str] = set()  # job ids whose state row exists
        self.open_pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] | None = None
        self.down: BaseException | None = None  # the failure while the database is down
        self.probe: asyncio.Task[None] | None = None
        self._ambiguous: deque[tuple[str, int]] = deque(maxlen=100_000)
        self._ambiguous_early: list[tuple[str, int, int]] = []
        self._begin = b"BEGIN; SELECT now()" if time_source == "database" else b"BEGIN"
        # application_name of the connections: the instance they serve (ops.session_name),
        # so that the survivor declaring it lost can end them (ops.declare_lost)
        self.session_name: str | None = None

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]]:
        if self.open_pool is None:
            raise StoreError(f"PostgreSQL store {self.url} is not open")
        return self.open_pool

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"autocommit": True}
        lowered = self.conninfo.lower()
        if "connect_timeout" not in lowered:
            kw["connect_timeout"] = max(1, round(self.connect_timeout))
        if "keepalives" not in lowered:  # notice a silently dead peer within ~30 s
            kw.update(keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        if "application_name" not in lowered:
            kw["application_name"] = self.session_name or "cronfleet"
        return kw

    async def configure(self, conn: AsyncConnection[Any]) -> None:
        # UTC datetimes; the server: no statement outlives the client's deadline, and
        # neither does a transaction left idle by a stopped process (its claims and lease
        # rows would block the survivors' takeover; with 30 s, a process frozen inside a
        # transaction delayed its failover to 30 s). A live call never idles that long:
        # its whole transaction is inside the same deadline. Without a deadline: 30 s.
        limit = self.call_timeout
        stmt = f"{round(limit * 1000)}ms" if limit else "0"
        idle = f"{round(max(limit, IDLE_TX_MIN) * 1000)}ms" if limit else "30s"
        await conn.execute(
            f"SET TIME ZONE 'UTC'; SET statement_timeout = '{stmt}'; "
            f"SET idle_in_transaction_session_timeout = '{idle}'".encode()
        )

    # -- outages ------------------------------------------------------------------------

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"PostgreSQL store {self.url}: {exc}".strip())

    def mark_down(self, exc: BaseException) -> None:
        if self.down is None:
            log.warning("PostgreSQL store %s is unavailable: %s; reconnecting", self.url, exc)
        self.down = exc
        if self.probe is None or self.probe.done():
            self.probe = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Probe the database with backoff while it is down; then let calls through."""
        delay = 0.2
        while self.open_pool is not None:
            await asyncio.sleep(random.uniform(0, delay))  # full jitter: no fleet in lockstep
            try:
                await within(self.fresh_select(), self.call_timeout or 30.0, "probe")
                # drop the pooled connections that died with it
                await within(self.pool.check(), self.call_timeout or 30.0, "pool check")
                await within(self._withdraw_ambiguous_early(), self.call_timeout, "give-back")
            except Exception as exc:
                self.down = exc
                # capped low: the fleet is back on time within ~1 s of the database (a
                # probe is one fresh connection; full jitter keeps the fleet apart)
                delay = min(delay * 2, PROBE_MAX_BACKOFF, self.max_backoff)
                log.debug("PostgreSQL store %s still unavailable: %s", self.url, exc)
                continue
            log.warning("PostgreSQL store %s is available again", self.url)
            self.down = None
            await self.release_ambiguous()
            self.on_back()  # anything announced while we were away
            if self.down is None:
                return
            # a call failed again meanwhile: its mark_down found this probe still running
            # and started none, so this one goes on (else every call failed fast for ever)
            delay = 0.2

    async def fresh_select(self) -> None:
        conn = await AsyncConnection.connect(self.conninfo, **self.kwargs())
        try:
            await conn.execute("SELECT 1")
        finally:
            await conn.close()

    # -- what a commit left unanswered --------------------------------------------------

    def remember_leases(self, pairs: Sequence[tuple[str, int | None]]) -> None:
        """Leases taken by a transaction whose COMMIT went unanswered: released (if still
        ours and without a run row) once the database is back."""
        self._ambiguous.extend((j, t) for j, t in pairs if t is not None)

    def remember_claims(self, rows: Sequence[tuple[str, int, int | None]]) -> None:
        """``(job, slot ms, token)`` slot claims whose COMMIT went unanswered: given back
        before the store is marked available again."""
        self._ambiguous_early.extend((j, s, t) for j, s, t in rows if t is not None)

    async def _withdraw_ambiguous_early(self) -> None:
        """Slot claims whose COMMIT went unanswered (early or not) are given back on a
        connection of their own, before the store is marked available: the scheduler took
        the batch as failed and claims those slots again, which must find them free (a
        claim whose slot has a row stays)."""
        if not self._ambiguous_early:
            return
        rows = sorted(set(self._ambiguous_early))
        conn = await AsyncConnection.connect(self.conninfo, **self.kwargs())
        try:
            async with conn.transaction():
                cur = Cursor(conn.cursor(), self.q)
                now = datetime.fromtimestamp(self.host_clock.now(), UTC)
                await drive_async(withdraw_plan(rows),
                                  lambda name, args: OPS[name](self, cur, now, *args))
        finally:
            await conn.close()
        self._ambiguous_early.clear()
        log.warning("PostgreSQL store %s: gave back the claims of %d slots whose commit was "
                    "not acknowledged", self.url, len(rows))

    async def release_ambiguous(self) -> None:
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
            released = await self.run(go)
        except StoreError as exc:
            # kept for the next return of the store: dropped, they held their jobs until
            # the leases expired (every slot meanwhile skipped already_executing)
            self._ambiguous.extend(pairs)
            log.warning(
                "PostgreSQL store %s: cannot release %d leases yet (%s)", self.url, len(pairs),
                exc,
            )
            return
        if released:
            log.warning(
                "PostgreSQL store %s: released %d leases taken by a batch whose commit was "
                "not acknowledged", self.url, released,
            )

    # -- transactions -------------------------------------------------------------------

    async def run(
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
        if self.down is not None:
            raise self.unavailable(self.down)
        limit = self.call_timeout if deadline == "default" else deadline
        try:
            return await within(self._attempts(fn, tx, ambiguous), limit, "store call")
        except TimeoutError as exc:
            self.mark_down(exc)
            raise self.unavailable(exc) from exc

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
                        now = self._clock_now() or datetime.fromtimestamp(
                            self.host_clock.now(), UTC)
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
                self.mark_down(exc)
                raise self.unavailable(exc) from exc
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

    async def run_plan(
        self, plan: Callable[[datetime], Plan[T]], *,
        ambiguous: Callable[[T], None] | None = None,
    ) -> T:
        """The plan in one transaction, a fresh plan per attempt (deadlocks are retried)."""

        async def go(cur: Cursor, now: datetime) -> T:
            return await drive_async(plan(now), lambda name, args: OPS[name](self, cur, now, *args))

        return await self.run(go, ambiguous=ambiguous)

    async def call(self, name: str, *args: Any, tx: bool = True,
                   deadline: float | Literal["default"] | None = "default") -> Any:
        """One named operation, in a transaction of its own (``tx=False``: a plain read;
        ``deadline``: as :meth:`run`)."""
        op = OPS[name]

        async def go(cur: Cursor, now: datetime) -> Any:
            return await op(self, cur, now, *args)

        return await self.run(go, tx=tx, deadline=deadline)

    async def prune(self, rule: Retention) -> tuple[int, int]:
        """The retention rule in bounded pieces, each its own short transaction, so that
        a pass over a ledger of any size holds no lock or snapshot for long and the
        scheduler's calls run between the pieces (one transaction over 100 million runs
        would outlast any deadline, and prune nothing):

        1. claims, a range of :attr:`prune_blocks` table blocks per piece (TID range
           scans), except each job's claim of its newest slot (found before the walk, a
           loose index scan, :attr:`prune_jobs` jobs per read);
        2. the old runs, :attr:`prune_batch` ids per piece (a walk of the primary key),
           except each job's newest claim-less skip (read once, before the walk);
        3. the runs beyond each job's cap among those left, :attr:`prune_jobs` jobs at a
           time (a loose index scan), at most :attr:`prune_batch` rows per delete.
        """
        claims = runs = 0
        blocks = await self._prune("prune_claim_blocks", tx=False)
        # the places of the claims kept (each job's newest slot), in table order
        places: list[tuple[int, int]] = []
        after = ""
        while page := await self._prune("prune_newest_claims", after, self.prune_jobs,
                                        tx=False):
            after = page[-1][0]
            places += [_tid(tid) for _, tid in page if tid is not None]
        places.sort()
        for lo in range(0, blocks, self.prune_blocks):
            hi = lo + self.prune_blocks
            here = places[bisect.bisect_left(places, (lo, 0)):bisect.bisect_left(places, (hi, 0))]
            claims += await self._prune("prune_claims_in", lo, hi, rule.claims_before,
                                        [f"({b},{o})" for b, o in here])
        keep: dict[str, int] = await self._prune("prune_kept_skips", tx=False)
        kept = sorted(keep.values())
        lo = -MAX_ID - 1
        while True:
            hi = await self._prune("prune_run_bound", lo, self.prune_batch, tx=False)
            top = MAX_ID if hi is None else hi
            near = kept[bisect.bisect_right(kept, lo):bisect.bisect_right(kept, top)]
            runs += await self._prune("prune_old_runs_in", lo, top, rule.runs_before, near)
            if hi is None:
                break
            lo = hi
        after = ""  # the jobs with runs, a page at a time
        while jobs := await self._prune("prune_run_jobs", after, self.prune_jobs, tx=False):
            after = jobs[-1]
            cuts = await self._prune("prune_cuts_of", jobs, rule.runs_per_job, tx=False)
            while cuts:
                n = await self._prune("prune_runs_beyond", cuts, keep, self.prune_batch)
                runs += n
                if n < self.prune_batch:
                    break
        return claims, runs

    async def _prune(self, name: str, *args: Any, tx: bool = True) -> Any:
        """One piece of a retention pass: :meth:`call` with the piece's deadline."""
        return await self.call(name, *args, tx=tx, deadline=PRUNE_TIMEOUT)

    async def announce(self, cur: Cursor, kind: str, job_ids: Sequence[str]) -> None:
        """``NOTIFY`` the store's channel inside the transaction (sent at commit)."""
        payload = json.dumps({"kind": kind, "jobs": list(job_ids)[:100]})
        await cur.execute(cur.q["notify"], (self.channel, payload))

    # -- the dialect's query shape (StoreDriver builds the run queries) ------------------

    placeholder = "%s"

    @staticmethod
    def query_time(at: datetime) -> datetime:
        return at

    @staticmethod
    def any_job() -> tuple[str, Callable[[list[str]], Any]]:
        return "job_id = ANY(%s::text[])", list

    def query(self, name: str) -> str:
        return self.q[name]


def _dumps(rows: Any) -> str:
    return json.dumps(rows, default=str, separators=(",", ":"))
