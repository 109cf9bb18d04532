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
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import Clock, SystemClock, judged_by_store
from cronfleet.errors import StoreError
from cronfleet.model import RunStatus
from cronfleet.store.base import Dispatched, DispatchKind, Started
from cronfleet.store.driver import StoreDriver
from cronfleet.store.postgres.ops import session_name
from cronfleet.store.postgres.transport import (
    Cursor,
    PostgresTransport,
    TimeSource,
    _call_timeout,
    apply_migrations,
    within,
)
from cronfleet.store.queries import load_queries
from cronfleet.store.rows import ms
from cronfleet.store.url import redact_url, split_pg_url
from cronfleet.store.url import split_pg_url as split_url  # the old name, kept

__all__ = ["Cursor", "PostgresStore", "apply_migrations", "split_url"]

log = logging.getLogger("cronfleet.store.postgres")

MIN_SERVER = 140000  # PostgreSQL 14: TID range scans (retention); server_version_num
_SKEW_WARN = 1.0
DEFAULT_CALL_TIMEOUT = 10.0
LISTEN_QUIET = 30.0  # seconds the listening connection waits before it checks the server
"""A store call that takes longer makes the store unavailable (a hung server or pooler
that keeps its connections open is an outage, not a wait)."""


class PostgresStore(StoreDriver):
    """Claims, leases, overrides and the run ledger in one PostgreSQL schema.

    ``url``: any libpq URI (``postgresql://user@host/db``, ``postgresql://root@/db`` for the
    local socket), optionally with ``?schema=name`` (default ``cronfleet``), ``pool_min``
    and ``pool_max``. ``clock``: this host's clock. A :class:`SystemClock` (or none) means
    the database clock judges time and the host clock is only compared with it; any other
    clock (a test's ``FakeClock``) is used for every timestamp instead. ``time_source``
    forces one or the other.

    The contract's operations are :class:`~cronfleet.store.driver.StoreDriver`'s; the
    pool and the transactions are :class:`~cronfleet.store.postgres.transport.PostgresTransport`.
    """

    lanes = True  # max_instances > 1: lanes 1..N-1 in the lease_lanes table (v9)
    transport: PostgresTransport

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
        host_clock: Clock = clock or SystemClock()
        source = time_source or opts.get("time_source")
        if source is None:
            source = "database" if judged_by_store(clock) else "clock"
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
        self._tasks: set[asyncio.Task[None]] = set()
        self._callbacks: list[Callable[[], object]] = []
        self._listener: asyncio.Task[None] | None = None
        self._skew_warned = False
        self.transport = PostgresTransport(
            conninfo=conninfo, url=self.url, schema=self.schema, queries=self.q,
            host_clock=host_clock, time_source=self.time_source,
            call_timeout=self.call_timeout, connect_timeout=connect_timeout,
            max_backoff=max_backoff, on_back=self._notify_all,
        )  # fmt: skip
        """The connection accessor for code sharing the store's pool (the side tables):
        ``store.transport.pool`` (an open ``psycopg_pool.AsyncConnectionPool``), with
        ``store.transport.q`` (the named queries, schema in place)."""

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.schema!r})"

    def name_sessions(self, instance_id: str) -> None:
        """The connections opened from now on say which instance they serve
        (``application_name``, unless the URL sets one): the survivor that declares it
        lost ends them (``ops.declare_lost``), and with them a transaction it left open."""
        self.transport.session_name = session_name(instance_id)

    @property
    def available(self) -> bool:
        """False while the database is unreachable (calls fail fast until a probe succeeds)."""
        return self.transport.open_pool is not None and self.transport.down is None

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]]:
        return self.transport.pool

    @property
    def host_clock(self) -> Clock:
        return self.transport.host_clock

    @host_clock.setter
    def host_clock(self, clock: Clock) -> None:
        self.transport.host_clock = clock

    def _remember(self, kind: str, result: Any) -> None:
        """A dispatch or start whose COMMIT went unanswered: its leases are released once
        back (if still ours, without a run row), and the slot claims of a dispatch given
        back before the store is available again."""
        t = self.transport
        if kind == "start":
            out: list[Started] = result
            t.remember_leases([
                (st.request.job_id, st.request.token) for st in out
                if st.request.lease and st.run is not None and st.run.status is RunStatus.RUNNING
            ])  # fmt: skip
            return
        got: list[Dispatched] = result
        t.remember_leases([(d.request.job_id, d.token) for d in got
                           if d.started and d.request.lease and not d.request.early])
        # the scheduler claims these slots again (early ones at their time, the others
        # through its outage backlog): the claims must be gone by then, or nobody would
        # run them. A claim whose row was written with it (a skip, a catch-up run) is
        # kept: the withdrawal refuses a claim whose slot has a row.
        t.remember_claims([
            (d.request.job_id, ms(d.request.slot), d.token) for d in got
            if d.won and d.token is not None and d.request.claim == "slot"
            and d.request.kind is not DispatchKind.RECOVERY
        ])  # fmt: skip

    async def confirm_outage(self) -> bool:
        """True when a *fresh* connection cannot run ``SELECT 1`` within the call deadline
        either: the database is unreachable for everyone, not merely for this process's
        session (a paused process finds its own connection dead; that is no outage)."""
        if self.transport.open_pool is None:
            return False
        try:
            await within(self.transport.fresh_select(), self.call_timeout or 5.0,
                         "outage check")
        except (OSError, TimeoutError, psycopg.OperationalError, psycopg.InterfaceError):
            return True
        except psycopg.Error:
            return False  # the server answered, even if with an error
        return False

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
        t = self.transport
        if t.open_pool is not None:
            return
        deadline = time.monotonic() + self.open_timeout
        delay = 0.2
        while True:
            # a fresh pool for every attempt: one whose open failed is closed for good
            pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
                self.conninfo,
                min_size=self.pool_min,
                max_size=self.pool_max,
                kwargs=t.kwargs(),
                configure=t.configure,
                timeout=self.pool_timeout,
                open=False,
                name=f"cronfleet-{self.schema}",
            )
            try:
                await pool.open(wait=True, timeout=min(self.connect_timeout + 1, self.open_timeout))
                break
            except BaseException as exc:
                # closed whatever ended the open, a cancellation included (a SIGTERM while
                # start-up waits for the database): the pool's workers swallow one in the
                # middle of a connection attempt, and an open pool kept asyncio.run from
                # ever ending
                with contextlib.suppress(Exception):
                    await pool.close()
                if not isinstance(exc, psycopg.OperationalError):
                    raise
                # full jitter: a fleet restarted together does not retry in lockstep
                wait = random.uniform(0, delay)
                if time.monotonic() + wait > deadline:
                    raise t.unavailable(exc) from exc
                log.warning("PostgreSQL store %s: cannot connect (%s); retrying", self.url, exc)
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.max_backoff)
        t.open_pool = pool
        t.down = None
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
        async with self.transport.pool.connection() as conn:
            version = conn.info.server_version
        if version < MIN_SERVER:
            raise StoreError(
                f"PostgreSQL {version // 10000} at {self.url}: "
                f"{MIN_SERVER // 10000} or newer needed (retention walks claims by TID ranges)")

        async def go(cur: Cursor, now: datetime) -> None:
            await cur.execute(b"SET LOCAL statement_timeout = 0")  # a migration may be long
            await apply_migrations(cur, self.schema, self.url)

        await self.transport.run(go, deadline=None)

    async def close(self) -> None:
        t = self.transport
        pool, t.open_pool = t.open_pool, None
        tasks = [x for x in (*self._tasks, t.probe, self._listener) if x is not None]
        await cancel_and_wait(tasks)
        self._tasks.clear()
        t.probe = self._listener = None
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

        return await self.transport.run(go, tx=False)

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

        skew = await self.transport.run(go, tx=False)
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
        """The listening connection. It waits for its socket to become readable (one
        ``add_reader``, no timer), then sends its ``LISTEN`` again (a no-op for the server,
        and what ``pg_stat_activity`` shows of the session): psycopg reads what arrived
        with the answer and hands each notification to the connection's notify handler.
        (``notifies()`` waits in slices of 0.1 s: ten wake-ups of the event loop a second,
        about 2.5 ms of CPU a second in an idle process.) Quiet for ``LISTEN_QUIET``
        seconds, the same round trip checks that the server is still there; a closed
        connection makes the socket readable and the round trip fails: reconnect."""
        delay = 0.2
        first = True
        while self.transport.open_pool is not None:
            conn: AsyncConnection[Any] | None = None
            try:
                conn = await AsyncConnection.connect(self.conninfo, **self.transport.kwargs())
                conn.add_notify_handler(lambda _n: self._notify_all())
                listen = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
                await conn.execute(listen)
                if not first:
                    log.info("PostgreSQL store %s: listening again", self.url)
                    self._notify_all()
                first = False
                delay = 0.2
                while True:
                    await _readable(conn.pgconn.socket, LISTEN_QUIET)
                    await conn.execute(listen)
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


async def _readable(fd: int, within: float) -> None:
    """Return once ``fd`` is readable, or after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await ready
    finally:
        loop.remove_reader(fd)
