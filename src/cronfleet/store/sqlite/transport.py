"""SQLite's transport: the one connection, its dedicated thread, one ``BEGIN IMMEDIATE``
transaction per plan or call, SQLite's errors translated into the store's.

It executes the named operations of :mod:`cronfleet.store.sqlite.ops`; what to execute
and in which order is decided by :mod:`cronfleet.store.driver`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from cronfleet.clock import Clock, wait_done
from cronfleet.errors import StoreDamaged, StoreError, StoreUnavailable
from cronfleet.shares import bucket_of
from cronfleet.store.driver import Plan, Retention, drive
from cronfleet.store.queries import migrations
from cronfleet.store.rows import dt, ms
from cronfleet.store.sqlite.ops import OPS, Q

__all__ = ["SQLiteTransport", "apply_migrations"]

log = logging.getLogger("cronfleet.store.sqlite")
T = TypeVar("T")

PRUNE_BATCH = 5000
"""Ids (claim tokens, run ids) covered by one retention transaction."""
DAMAGE_LOG_EVERY = 60.0  # seconds between two CRITICAL lines about a damaged file
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)


def _split_sql(script: str) -> list[str]:
    """Statements of a migration file; ``executescript`` would commit our transaction."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def apply_migrations(c: sqlite3.Connection, path: str, now_ms: int) -> list[str]:
    """Bring the file to the newest schema version inside the caller's ``BEGIN
    IMMEDIATE`` (processes starting together apply each migration once). Used by the store
    and by the side-table connections. Returns the files applied."""
    known = migrations("cronfleet.store.sqlite")
    latest = known[-1][0] if known else 0
    # migration 15 gives stored definitions their bucket with the one hash of them
    c.create_function("cronfleet_bucket", 1, bucket_of, deterministic=True)
    c.execute(Q["schema_migrations"])
    row = c.execute(Q["schema_version"]).fetchone()
    current = row[0] or 0
    if current > latest:
        raise StoreError(
            f"SQLite store {path}: schema version {current} is newer than this "
            f"cronfleet understands ({latest}); upgrade cronfleet"
        )
    # every known version not applied yet, in order: a number is handed out before its
    # change lands, so a lower one may arrive after a higher one was applied
    done = {r[0] for r in c.execute(Q["schema_versions"])}
    applied = []
    for version, name, sql in known:
        if version in done:
            continue
        for stmt in _split_sql(sql):
            c.execute(stmt)
        c.execute(Q["migration_applied"], (version, name, now_ms))
        log.info("SQLite store %s: applied migration %s", path, name)
        applied.append(name)
    return applied


class SQLiteTransport:
    """One SQLite connection used by one thread at a time (its dedicated thread, or the
    caller's for a read when that thread is idle), every write in ``BEGIN IMMEDIATE``.

    ``connection()`` is the accessor for code that shares the store's connection (the
    side tables): the open :class:`sqlite3.Connection`; use it only through :meth:`call_fn`
    (on the store's thread, under its lock).
    """

    def __init__(
        self, path: str, *, clock: Clock, busy_timeout: float, call_timeout: float | None,
        journal_path: Callable[[], Path | None],
    ) -> None:
        self.path = path
        self.clock = clock
        self.busy_timeout = busy_timeout
        self.call_timeout = call_timeout
        self.journal_path = journal_path
        self.conn: sqlite3.Connection | None = None
        self.damaged = False  # a call found the file corrupted (StoreDamaged)
        self.known: set[str] = set()  # job ids whose state row exists
        self._damage_logged = float("-inf")
        self._executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()  # the connection is used by one thread at a time

    # -- the thread ---------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._executor is not None

    def connection(self) -> sqlite3.Connection:
        """The open connection (raises when closed)."""
        if self.conn is None:
            raise StoreError(f"SQLite store {self.path} is not open")
        return self.conn

    async def call_fn(self, fn: Callable[..., T], *args: Any, long: bool = False) -> T:
        """Run ``fn`` on the store's thread; ``long``: no deadline (opening, migrations
        and retention, which are not on the path of a slot)."""
        if self._executor is None:
            raise StoreError(f"SQLite store {self.path} is not open")
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, functools.partial(self._guard, fn, *args))
        if self.call_timeout is None or long:
            return await fut
        if not await wait_done(fut, self.call_timeout):
            # interrupt the statement running now; the call's true outcome is reported (a
            # commit that landed meanwhile is a success: nobody may be told otherwise)
            conn = self.conn
            if conn is not None:
                log.warning("SQLite store %s: a call ran past %g s; interrupting it",
                            self.path, self.call_timeout)
                conn.interrupt()
        return await fut

    def _guard(self, fn: Callable[..., T], *args: Any) -> T:
        with self.lock:
            return self.guard_unlocked(fn, *args)

    def guard_unlocked(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` and turn SQLite's errors into the store's (damaged, unavailable or
        other)."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        msg = str(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        if (code is not None and code & 0xFF in _DAMAGE_CODES) or any(
            w in msg for w in ("malformed", "not a database")
        ):
            now = time.monotonic()
            if now - self._damage_logged >= DAMAGE_LOG_EVERY:
                self._damage_logged = now
                log.critical(
                    "SQLite store %s is DAMAGED (%s): nothing runs without a claim; due "
                    "slots are kept in the fallback journal %s. Stop every process, restore "
                    "the file from a backup (`sqlite3 <db> '.backup <file>'` makes one) or recover "
                    "it (`sqlite3 %s .recover`), then start again: the journal is recorded "
                    "in the ledger on open (docs/deployment.md)",
                    self.path, msg, self.journal_path(), self.path,
                )
            self.damaged = True
            return StoreDamaged(f"SQLite store {self.path} is damaged: {msg}")
        if isinstance(exc, sqlite3.OperationalError) and any(
            w in msg for w in ("locked", "busy", "unable to open", "disk I/O", "full",
                               "interrupted")
        ):
            return StoreUnavailable(f"SQLite store {self.path}: {msg}")
        return StoreError(f"SQLite store {self.path}: {msg}")

    # -- transactions and operations ----------------------------------------------------

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        c = self.connection()
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            if c.in_transaction:  # an interrupted statement may have ended it already:
                c.execute("ROLLBACK")  # a failing ROLLBACK would hide the real error
            raise
        else:
            c.execute("COMMIT")

    def now_ms(self) -> int:
        return ms(self.clock.now())

    def plan_now(self, plan: Callable[[datetime], Plan[T]]) -> T:
        """Run a plan to its end in one transaction, on the calling (the store's) thread."""
        with self.tx() as c:
            now = self.now_ms()
            at = dt(now)
            assert at is not None
            return drive(plan(at), lambda name, args: OPS[name](self, c, now, *args))

    async def run_plan(
        self, plan: Callable[[datetime], Plan[T]], *,
        ambiguous: Callable[[T], None] | None = None,
    ) -> T:
        """The plan in one ``BEGIN IMMEDIATE`` on the store's thread (a commit is never
        ambiguous on a local file: ``ambiguous`` is not needed)."""
        return await self.call_fn(self.plan_now, plan)

    def op_now(self, name: str, args: tuple[Any, ...], tx: bool) -> Any:
        if not tx:
            return OPS[name](self, self.connection(), self.now_ms(), *args)
        with self.tx() as c:
            return OPS[name](self, c, self.now_ms(), *args)

    async def call(self, name: str, *args: Any, tx: bool = True, long: bool = False) -> Any:
        """One named operation, in a transaction of its own (``tx=False``: a plain read)."""
        return await self.call_fn(self.op_now, name, args, tx, long=long)

    # -- the dialect's query shape (StoreDriver builds the run queries) ------------------

    placeholder = "?"

    @staticmethod
    def query_time(at: datetime) -> int:
        return round(at.timestamp() * 1000)

    @staticmethod
    def any_job() -> tuple[str, Callable[[list[str]], Any]]:
        return "job_id IN (SELECT value FROM json_each(?))", json.dumps

    @staticmethod
    def query(name: str) -> str:
        return Q[name]

    # -- retention ----------------------------------------------------------------------

    async def prune(self, rule: Retention) -> tuple[int, int]:
        """The retention rule in small transactions of at most :data:`PRUNE_BATCH` ids
        each, every one its own call on the store's thread, so the slots' claims and the
        group commit interleave with a large pass (a pass deleting a million runs used to
        hold the thread for 9 s)."""
        claims_before, runs_before = ms(rule.claims_before), ms(rule.runs_before)
        batch = PRUNE_BATCH
        claims = runs = 0
        lo, hi = await self.call_fn(self._id_range, "claims", "token")
        for start in range(lo, hi + 1, batch):
            claims += await self.call_fn(self._delete, "prune_claims_batch",
                                         (start, start + batch - 1, claims_before))
        lo, hi = await self.call_fn(self._id_range, "runs", "id")
        for start in range(lo, hi + 1, batch):
            runs += await self.call_fn(self._delete, "prune_old_runs_batch",
                                       (start, start + batch - 1, runs_before))
        crowded = await self.call_fn(self._crowded, rule.runs_per_job)
        if crowded:
            lo = (await self.call_fn(self._id_range, "runs", "id"))[0]
            hi = max(cut for _, cut in crowded)
            for start in range(lo, hi + 1, batch):
                runs += await self.call_fn(self._delete, "prune_runs_per_job_batch",
                                           (start, start + batch - 1))
        return claims, runs

    def _id_range(self, table: str, key: str) -> tuple[int, int]:
        row = self.connection().execute(f"SELECT min({key}), max({key}) FROM {table}").fetchone()
        return (row[0], row[1]) if row and row[0] is not None else (1, 0)

    def _delete(self, query: str, params: tuple[Any, ...]) -> int:
        with self.tx() as c:
            return int(c.execute(Q[query], params).rowcount)

    def _crowded(self, per_job: int) -> list[tuple[str, int]]:
        c = self.connection()
        rows = [(j, cut) for j, cut in c.execute(Q["prune_crowded_jobs"], (per_job, per_job))
                if cut is not None]
        c.execute("CREATE TEMP TABLE IF NOT EXISTS prune_cut "
                  "(job_id TEXT PRIMARY KEY, cut INTEGER)")
        c.execute("DELETE FROM temp.prune_cut")
        c.executemany("INSERT INTO temp.prune_cut VALUES (?, ?)", rows)
        return rows

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self, after: Callable[[], None]) -> None:
        """Start the thread, connect, migrate, then ``after()`` on the thread."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cronfleet-sqlite")
        try:
            await self.call_fn(self._open, after, long=True)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    def _open(self, after: Callable[[], None]) -> None:
        if self.path != ":memory:":
            file = Path(self.path).expanduser().resolve()
            parent = file.parent
            if not parent.is_dir():
                raise StoreError(f"SQLite store {self.path}: folder {parent} does not exist")
            # a misconfiguration, not an outage: start-up must not wait for it to pass
            if file.is_dir():
                raise StoreError(f"SQLite store {self.path}: {file} is a directory, not a "
                                 "database file")
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False,
        )
        self.conn = conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if self.path != ":memory:":
            mode = self._retry_locked(
                lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            )
            if str(mode).lower() != "wal":
                log.warning("SQLite store %s: could not switch to WAL mode (%s)", self.path, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        # a burst touches the claim, state and ledger indexes of every job at once: keep
        # them in memory rather than re-reading pages through the OS on every instant
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA temp_store = MEMORY")
        with self.tx() as c:
            apply_migrations(c, self.path, self.now_ms())
        after()

    def _retry_locked(self, fn: Callable[[], T]) -> T:
        """Switching to WAL needs a moment alone with the file and does not wait on the
        busy handler; when many processes start at once, retry until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    async def close(self) -> None:
        if self._executor is None:
            return
        try:
            await self.call_fn(self._close)
        finally:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
