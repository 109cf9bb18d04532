"""The embedded default store: one SQLite file in WAL mode.

Several processes on one host coordinate through it: claims are unique rows, leases are
conditional updates, and every write transaction starts with ``BEGIN IMMEDIATE`` so
writers queue on SQLite's lock instead of failing half way. All calls run on one
dedicated thread per store (SQLite connections are not shared across threads), and each
batched call is one transaction; batches travel as a single JSON parameter read with
``json_each`` so a burst of 20,000 slots is still one statement per step.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from cronfleet.clock import Clock, SystemClock, wait_done
from cronfleet.errors import StoreDamaged, StoreError, StoreUnavailable
from cronfleet.model import JobState, RunRecord, RunStatus, SkipReason
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
    dt,
    ms,
    registry_rows,
    sqlite_finish_row,
    sqlite_run,
    sqlite_run_row,
    sqlite_state,
)
from cronfleet.store.url import parse_store_url

__all__ = ["SQLiteStore"]

log = logging.getLogger("cronfleet.store.sqlite")
T = TypeVar("T")

JOURNAL_SUFFIX = ".journal.jsonl"
"""The fallback journal of a damaged database: ``<database>.journal.jsonl``."""
DAMAGE_LOG_EVERY = 60.0  # seconds between two CRITICAL lines about a damaged file
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)

# the named queries of queries.sql; the SQL lives there, not in Python strings
Q = load_queries("cronfleet.store.sqlite")
PRUNE_BATCH = 5000
"""Ids (claim tokens, run ids) covered by one retention transaction."""


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def insert_runs(c: sqlite3.Connection, recs: Sequence[RunRecord]) -> None:
    """Insert complete run records and give each its id.

    ``executemany`` is several times faster than one row per statement; inside our
    ``BEGIN IMMEDIATE`` transaction nobody else writes, and ``AUTOINCREMENT`` hands out
    consecutive ids, so the ids are known without ``RETURNING`` (checked afterwards).
    """
    if not recs:
        return
    base = c.execute(Q["next_run_id"]).fetchone()[0]
    c.executemany(Q["insert_run"], [sqlite_run_row(r) for r in recs])
    last = c.execute(Q["last_insert_rowid"]).fetchone()[0]
    if last != base + len(recs):
        raise StoreError(f"run ids were not consecutive ({base}+{len(recs)} != {last})")
    for i, r in enumerate(recs, start=base + 1):
        r.id = i


_state = sqlite_state
_STATUS = {s.value: s for s in RunStatus}  # Enum lookup by value, without its call
_run = sqlite_run


def _instance(row: Sequence[Any], *, live: bool) -> Instance:
    return Instance(
        instance_id=row[0], host=row[1], pid=row[2], role=row[3], version=row[4],
        started_at=dt(row[5]), heartbeat_at=dt(row[6]), lost_at=dt(row[7]), lost_by=row[8],
        live=live,
    )  # fmt: skip


def _request(row: Sequence[Any]) -> FleetRequest:
    return FleetRequest(
        id=row[0], kind=row[1], job_id=row[2], target=row[3], payload=json.loads(row[4]),
        requested_by=row[5], requested_at=dt(row[6]), taken_by=row[7], taken_at=dt(row[8]),
        answered_at=dt(row[9]), run_id=row[10], error=row[11],
    )  # fmt: skip


def _req(value: datetime | None) -> datetime:
    assert value is not None
    return value


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


class SQLiteStore:
    """Claims, leases, overrides and the run ledger in one SQLite file."""

    lanes = True  # max_instances > 1: lanes 1..N-1 in the lease_lanes table (v9)

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        busy_timeout: float = 5.0,
        call_timeout: float | None = 10.0,
    ) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self.clock: Clock = clock or SystemClock()
        self.busy_timeout = busy_timeout
        """Seconds a write waits for another process's write lock before the store counts
        as unavailable (a process stopped while holding the lock must not freeze the rest
        for longer)."""
        self.call_timeout = call_timeout if call_timeout and call_timeout > 0 else None
        """Seconds a call may run on the store's thread; past it the running statement is
        interrupted (``sqlite3.Connection.interrupt``), its transaction rolls back and the
        call raises ``StoreUnavailable``."""
        self._conn: sqlite3.Connection | None = None
        self.damaged = False  # a call found the file corrupted (StoreDamaged)
        self._damage_logged = float("-inf")
        self._executor: ThreadPoolExecutor | None = None
        self._known: set[str] = set()  # job ids whose state row exists
        self._conn_lock = threading.Lock()  # the connection is used by one thread at a time

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SQLiteStore:
        """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite:///:memory:``."""
        if not url.startswith("sqlite:///"):
            raise StoreError(
                f"invalid SQLite URL {url!r}: expected sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db"
            )
        return cls(parse_store_url(url).path, clock=clock)

    # -- plumbing ---------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, long: bool = False) -> T:
        """Run ``fn`` on the store's thread; ``long``: no deadline (opening, migrations
        and retention, which are not on the path of a slot)."""
        if self._executor is None:
            raise StoreError(f"{self!r} is not open")
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, functools.partial(self._guard, fn, *args))
        if self.call_timeout is None or long:
            return await fut
        if not await wait_done(fut, self.call_timeout):
            # interrupt the statement running now; the call's true outcome is reported (a
            # commit that landed meanwhile is a success: nobody may be told otherwise)
            conn = self._conn
            if conn is not None:
                log.warning("SQLite store %s: a call ran past %g s; interrupting it",
                            self.path, self.call_timeout)
                conn.interrupt()
        return await fut

    def _guard(self, fn: Callable[..., T], *args: Any) -> T:
        with self._conn_lock:
            return self._guard_unlocked(fn, *args)

    def _guard_unlocked(self, fn: Callable[..., T], *args: Any) -> T:
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
                    self.path, msg, self.journal_path, self.path,
                )
            self.damaged = True
            return StoreDamaged(f"SQLite store {self.path} is damaged: {msg}")
        if isinstance(exc, sqlite3.OperationalError) and any(
            w in msg for w in ("locked", "busy", "unable to open", "disk I/O", "full",
                               "interrupted")
        ):
            return StoreUnavailable(f"SQLite store {self.path}: {msg}")
        return StoreError(f"SQLite store {self.path}: {msg}")

    # -- the fallback journal (a damaged file) ------------------------------------------

    @property
    def journal_path(self) -> Path | None:
        """``<database>.journal.jsonl`` next to the file (none for ``:memory:``)."""
        return None if self.path == ":memory:" else Path(self.path + JOURNAL_SUFFIX)

    def journal(self, entries: Sequence[tuple[str, float, str]], instance_id: str) -> int:
        """Append ``(job, slot, why)`` entries to the fallback journal: one ``write`` of
        whole lines in append mode (several processes may append at once), then
        ``fsync``. Returns the number of entries written (0 without a journal)."""
        path = self.journal_path
        if path is None or not entries:
            return 0
        data = "".join(
            json.dumps({"job": job, "slot": ms(slot), "why": why, "instance": instance_id},
                       separators=(",", ":")) + "\n"
            for job, slot, why in entries
        ).encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return len(entries)

    def _import_journal(self) -> None:
        """On open: record every slot of the fallback journal as ``skipped /
        store_unavailable`` under a claim (a slot someone claimed meanwhile keeps its own
        outcome: one per slot; a second import finds the claims taken), then rename the
        journal away (``.imported-<ms>``)."""
        path = self.journal_path
        if path is None or not path.exists():
            return
        seen: dict[tuple[str, int], str] = {}
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:  # another process starting with us imported it
            return
        for line in text.splitlines():
            try:
                e = json.loads(line)
                seen.setdefault((str(e["job"]), int(e["slot"])), str(e.get("why", "")))
            except (ValueError, KeyError, TypeError):
                continue  # a torn line (a process killed mid-write): nothing to record
        items = [
            Dispatch.missed(job, slot / 1000.0, reason=SkipReason.STORE_UNAVAILABLE.value,
                            logs=[ledger.journal_log(why, str(path))])
            for (job, slot), why in sorted(seen.items())
        ]
        got = self._dispatch(items, "journal-import") if items else []
        kept = sum(1 for d in got if d.won)
        done = path.with_name(f"{path.name}.imported-{self._now_ms()}")
        try:
            path.rename(done)
        except FileNotFoundError:  # another process imported it too (the claims made
            return  # that once) and renamed it first
        log.warning(
            "SQLite store %s: fallback journal %s: %d slot(s) recorded skipped / "
            "store_unavailable, %d already had an outcome; renamed to %s",
            self.path, path, kept, len(items) - kept, done.name,
        )

    async def confirm_outage(self) -> bool:
        """Never: the file is on this host, so every process of this host sees the same
        failure (a locked, full or corrupted file); running without a claim there would
        run each slot once per process. ``PREFER_GLOBAL`` on SQLite therefore never fails
        open."""
        return False

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self!r} is not open")
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            if c.in_transaction:  # an interrupted statement may have ended it already:
                c.execute("ROLLBACK")  # a failing ROLLBACK would hide the real error
            raise
        else:
            c.execute("COMMIT")

    def _now_ms(self) -> int:
        return ms(self.clock.now())

    # -- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cronfleet-sqlite")
        try:
            await self._call(self._open, long=True)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    def _open(self) -> None:
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
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        self._conn = conn
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
        self._migrate()
        self._import_journal()

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

    def _migrate(self) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            apply_migrations(c, self.path, self._now_ms())
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    async def close(self) -> None:
        if self._executor is None:
            return
        try:
            await self._call(self._close)
        finally:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def now(self) -> float:
        return self.clock.now()

    async def quick_check(self) -> None:
        """SQLite's check of the whole file (``PRAGMA quick_check``), for ``cronfleet
        check``: StoreDamaged naming the first problem found. A damaged page shows on a
        read only when that read touches it; this reads every page once."""

        def go() -> None:
            row = self.conn.execute("PRAGMA quick_check(1)").fetchone()
            if row is None or row[0] != "ok":
                found = "no answer" if row is None else row[0]
                raise sqlite3.DatabaseError(f"database disk image is malformed: {found}")

        await self._call(go, long=True)

    # -- job state --------------------------------------------------------------------

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return await self._call(self._ensure_jobs, list(job_ids))

    def _ensure_jobs(self, job_ids: list[str]) -> dict[str, JobState]:
        with self._tx() as c:
            c.execute(Q["ensure_jobs"], (self._now_ms(), json.dumps(job_ids)))
        self._known.update(job_ids)
        return self._read_states(job_ids)

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return await self._call(self._read_states, list(job_ids))

    def _read_states(self, job_ids: list[str]) -> dict[str, JobState]:
        rows = self.conn.execute(Q["read_states"], (json.dumps(job_ids),)).fetchall()
        return {r[0]: _state(r) for r in rows}

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        # Called at every instant and tiny (the rows with an override set). In WAL mode a
        # read never waits for a writer, so when the store's thread is idle it is read
        # right here, saving two thread hops on the path of every slot.
        if self._conn is not None and self._conn_lock.acquire(blocking=False):
            try:
                return self._guard_unlocked(self._read_overrides, job_ids)
            finally:
                self._conn_lock.release()
        return await self._call(self._read_overrides, job_ids)

    def _read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        wanted = set(job_ids)
        rows = self.conn.execute(Q["read_overrides"]).fetchall()
        return {r[0]: _state(r) for r in rows if r[0] in wanted}

    async def set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        return await self._call(self._set_override, job_id, enabled, by, note, until)

    def _set_override(
        self,
        job_id: str,
        enabled: bool | None,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        now = self._now_ms()
        with self._tx() as c:
            c.execute(Q["ensure_job"], (job_id, now))
            c.execute(
                Q["set_override"],
                (
                    None if enabled is None else int(enabled),
                    by,
                    now,
                    note,
                    None if until is None else ms(until.timestamp()),
                    job_id,
                ),
            )
            self._known.add(job_id)
        return self._read_states([job_id])[job_id]

    # -- the hot path -----------------------------------------------------------------

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        if not items:
            return []
        return await self._call(self._dispatch, list(items), instance_id)

    def _take_leases(
        self,
        c: sqlite3.Connection,
        leases: list[tuple[str, int | None, float, int]],
        instance: str,
    ) -> tuple[set[str], dict[str, str | None]]:
        """Take ``(job, token, hold, lanes)`` leases that are free or expired, one
        statement (and, for items with lanes > 1, :meth:`_take_lanes`). Returns what was
        taken (``ledger.lease_taken`` reads it) and the holders of the busy ones."""
        if not leases:
            return set(), {}
        ids = [w[0] for w in leases]
        single = [w[0] for w in leases if w[3] == 1]
        if len(set(single)) != len(single):
            raise StoreError("one batch may take at most one lease per job")
        now = self._now_ms()
        unknown = [j for j in dict.fromkeys(ids) if j not in self._known]
        if unknown:
            c.execute(Q["ensure_jobs"], (now, json.dumps(unknown)))
            self._known.update(unknown)
        self._keep_lost_runs(c, now)
        if len(single) < len(ids):
            return self._take_lanes(c, leases, instance, now)
        payload = json.dumps([[j, tok, now + ms(hold)] for j, tok, hold, _ in leases])
        acquired = {r[0] for r in c.execute(Q["take_leases"], (instance, now, payload))}
        holders: dict[str, str | None] = {}
        if len(acquired) < len(ids):
            busy = [j for j in ids if j not in acquired]
            holders = dict(
                c.execute(Q["lease_holders"], (json.dumps(busy),)).fetchall()
            )
        return acquired, holders

    def _take_lanes(
        self,
        c: sqlite3.Connection,
        leases: list[tuple[str, int | None, float, int]],
        instance: str,
        now: int,
    ) -> tuple[set[str], dict[str, str | None]]:
        """A batch with items of ``max_instances`` > 1: item by item, lane 0 (the job's
        state row) first, then the lowest free or expired lane 1..N-1."""
        self._keep_lost_runs(c, now, lanes=True)
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for j, tok, hold, n in leases:
            until = now + ms(hold)
            one = json.dumps([[j, tok, until]])
            if c.execute(Q["take_leases"], (instance, now, one)).fetchone() is not None:
                acquired.add(j if n == 1 else ledger.lane_key(tok))
                continue
            if n == 1:
                holders.update(c.execute(Q["lease_holders"], (json.dumps([j]),)).fetchall())
                continue
            c.execute(Q["ensure_lanes"], (j, n))
            if c.execute(Q["take_lane"], (instance, now, j, tok, until, n)).fetchone():
                acquired.add(ledger.lane_key(tok))
                continue
            held = sorted(r[0] for r in c.execute(Q["lane_holders"], (j, n)))
            holders[j] = ", ".join(held)
        return acquired, holders

    def _keep_lost_runs(self, c: sqlite3.Connection, now: int, *, lanes: bool = False) -> None:
        """Before an expired lease is taken over, keep what it proves.

        A fast-path run's row is written after its handler starts; if the holder died
        before that, the claim and the unreleased lease are the only trace. Taking the
        lease would erase it, so the run is written first — open, with its deadline
        passed — and the orphan reaper marks it ``interrupted`` (and recovers it where the
        job asks). Cheap: the partial index holds only unreleased leases. ``lanes``: the
        same for lanes 1..N-1 (only a batch with ``max_instances`` > 1 takes those).
        """
        lost = c.execute(Q["lost_lane_runs" if lanes else "lost_runs"], (now,)).fetchall()
        if lost:
            overdue = dt(now - 1)
            assert overdue is not None
            insert_runs(
                c,
                [
                    ledger.kept_lost_run(
                        job_id, token, holder, dt(slot), _req(dt(claimed)), overdue=overdue
                    )
                    for job_id, token, holder, slot, claimed in lost
                ],
            )

    def _dispatch(self, items: list[Dispatch], instance: str) -> list[Dispatched]:
        out = [Dispatched(request=it, won=False) for it in items]
        with self._tx() as c:
            now = self._now_ms()
            # 1. claims: one statement for every unique slot claim in the batch
            slot_ms = [ms(it.slot) for it in items]
            slot_idx = [
                i
                for i, it in enumerate(items)
                if it.claim == "slot" and it.kind is not DispatchKind.RECOVERY
            ]
            if slot_idx:
                payload = json.dumps([[items[i].job_id, slot_ms[i]] for i in slot_idx])
                won = {(j, s): tok for tok, j, s in c.execute(Q["claim"], (instance, now, payload))}
                for i in slot_idx:
                    tok = won.get((items[i].job_id, slot_ms[i]))
                    if tok is not None:
                        out[i].won, out[i].token = True, tok
            for i, it in enumerate(items):
                if it.kind is DispatchKind.RECOVERY:
                    if c.execute(Q["delete_claim"], (it.reclaim_token,)).rowcount:
                        out[i].won = True
                        out[i].token = c.execute(
                            Q["claim_one"], (it.job_id, slot_ms[i], instance, now)
                        ).fetchone()[0]
                elif it.claim == "token":
                    out[i].won = True
                    out[i].token = c.execute(
                        Q["draw_token"], (it.job_id, instance, now)
                    ).fetchone()[0]
                elif it.claim == "none":
                    out[i].won = True
            # 2. the leases of the runs that start now, one statement
            lease_idx = [
                i
                for i, d in enumerate(out)
                if d.won and items[i].lease and not items[i].defer and not items[i].skip_reason
            ]
            acquired, holders = self._take_leases(
                c,
                [(items[i].job_id, out[i].token, items[i].hold, items[i].lanes)
                 for i in lease_idx],
                instance,
            )
            # an early claim is kept only with its lease: where the lease is busy, the claim
            # goes again (this transaction is the only one that saw it)
            gone = [
                i
                for i in lease_idx
                if items[i].kind is DispatchKind.EARLY
                and not ledger.lease_taken(items[i].job_id, out[i].token, items[i].lanes, acquired)
            ]
            if gone:
                c.execute(Q["delete_claims"], (json.dumps([out[i].token for i in gone]),))
                for i in gone:
                    d = out[i]
                    d.won, d.token, d.busy = False, None, True
                    d.holder = holders.get(d.request.job_id)
            # 3. the run row of each won slot, as the ledger decides; fast-path runs
            #    (record=False) are written by the scheduler's group commit after their
            #    handler has started
            memo: dict[int, datetime] = {}

            def when(value: int) -> datetime:  # one datetime per instant
                got = memo.get(value)
                if got is None:
                    got = memo[value] = _req(dt(value))
                return got

            to_insert = ledger.dispatch_runs(
                out,
                slots=[when(v) for v in slot_ms],
                deadlines=[when(now + ms(it.hold)) for it in items],
                now=when(now),
                instance=instance,
                acquired=acquired,
                holders=holders,
            )
            insert_runs(c, to_insert)
        return out

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        if not items:
            return 0
        return await self._call(self._withdraw, list(items))

    def _withdraw(self, items: list[tuple[str, float, int]]) -> int:
        rows = [(token, job_id, ms(slot)) for job_id, slot, token in items]
        with self._tx() as c:
            deleted = c.executemany(Q["withdraw_claim"], rows).rowcount
            freed = json.dumps([[j, tok] for j, _, tok in items])
            if c.execute(Q["release_leases"], (freed,)).rowcount < len(items):
                c.execute(Q["release_lanes"], (freed,))
        return max(deleted, 0)

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        if not items:
            return []
        return await self._call(self._start, list(items), instance_id)

    def _start(self, items: list[Start], instance: str) -> list[Started]:
        out = [Started(request=it, run=None) for it in items]
        with self._tx() as c:
            now = self._now_ms()
            leased = [it for it in items if it.lease]
            acquired, holders = self._take_leases(
                c, [(it.job_id, it.token, it.hold, it.lanes) for it in leased], instance
            )
            run_now: list[list[Any]] = []
            skip_now: list[list[Any]] = []
            waiting: set[int] = set()
            for st, it in zip(out, items, strict=True):
                if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
                    st.holder = holders.get(it.job_id)
                    if it.wait_if_busy:
                        waiting.add(it.run_id)
                    else:
                        busy = json.dumps(ledger.busy_result())
                        skip_now.append([it.run_id, busy, ledger.busy_log(st.holder, it.lanes)])
                    continue
                run_now.append([it.run_id, now + ms(it.hold)])
            if run_now:
                c.execute(Q["start_runs"], (now, json.dumps(run_now)))
            if skip_now:
                c.execute(
                    Q["skip_busy_runs"], (ledger.ALREADY_EXECUTING, now, json.dumps(skip_now))
                )
            touched = [it.run_id for it in items if it.run_id not in waiting]
            if touched:
                by_id = {
                    r[0]: _run(r)
                    for r in c.execute(Q["runs_by_id"], (json.dumps(touched),))
                }
                for st in out:
                    if st.request.run_id not in waiting:
                        st.run = by_id.get(st.request.run_id)
        return out

    async def finish(self, items: Sequence[Finish]) -> None:
        if not items:
            return
        await self._call(self._finish, list(items))

    def _finish(self, items: list[Finish]) -> None:
        new = [f.run for f in items if f.run.id is None]
        changed = [f.run for f in items if f.run.id is not None]
        releases = [(f.run.job_id, f.release_token) for f in items if f.release_token is not None]
        try:
            with self._tx() as c:
                now = self._now_ms()
                late: list[tuple[RunRecord, RunRecord]] = []  # (stored, incoming)
                tokens = [r.fencing_token for r in new if r.fencing_token is not None]
                if tokens:  # a token's row exists already: update it (one row per token)
                    have = {
                        row.fencing_token: row
                        for row in map(_run, c.execute(Q["runs_by_token"], (json.dumps(tokens),)))
                    }
                    if have:
                        for r in new:
                            got = have.get(r.fencing_token)
                            if got is not None:
                                r.id = got.id
                                changed.append(r)
                        new = [r for r in new if r.id is None]
                if changed:  # the fence: a row holding a final outcome is never overwritten
                    done = {
                        row.id: row
                        for row in map(
                            _run,
                            c.execute(
                                Q["finished_runs_by_id"], (json.dumps([r.id for r in changed]),)
                            ),
                        )
                    }
                    for r in changed:
                        stored = done.get(r.id)
                        if stored is not None and ledger.is_late(stored.status, r.status):
                            late.append((stored, r))
                    if late:
                        fenced = {id(r) for _, r in late}
                        changed = [r for r in changed if id(r) not in fenced]
                insert_runs(c, new)
                if changed:
                    c.executemany(Q["finish_run"], [sqlite_finish_row(r) for r in changed])
                for stored, r in late:
                    kept = ledger.attach_late_result(stored, r, dt(now))
                    c.execute(
                        Q["attach_late"], (_json(kept.result), json.dumps(kept.logs), stored.id)
                    )
                if releases:  # one statement: thousands of tiny ones would queue on the GIL
                    freed = json.dumps(releases)
                    if c.execute(Q["release_leases"], (freed,)).rowcount < len(releases):
                        c.execute(Q["release_lanes"], (freed,))  # max_instances > 1
        except BaseException:
            for r in new:  # rolled back: a retry must insert them again, not update
                r.id = None
            raise

    async def record_skips(self, items: Sequence[Skip]) -> int:
        if not items:
            return 0
        return await self._call(self._record_skips, list(items))

    def _record_skips(self, items: list[Skip]) -> int:
        rows = [
            [
                s.job_id,
                ms(s.slot),
                s.triggered_by.value,
                s.reason,
                s.instance_id,
                _json(s.result if s.result is not None else ledger.skip_result(s.reason)),
                json.dumps(s.logs),
            ]
            for s in items
        ]
        with self._tx() as c:
            now = self._now_ms()
            written = c.execute(Q["record_skips"], (now, json.dumps(rows))).rowcount
        return max(written, 0)

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        if not items:
            return
        await self._call(self._renew, list(items))

    def _renew(self, items: list[tuple[str, int, float]]) -> None:
        with self._tx() as c:
            now = self._now_ms()
            payload = json.dumps([[j, tok, now + ms(hold)] for j, tok, hold in items])
            if c.execute(Q["renew_leases"], (payload,)).rowcount < len(items):
                c.execute(Q["renew_lanes"], (payload,))  # max_instances > 1
            c.execute(Q["renew_deadlines"], (payload,))

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        return await self._call(self._reap, instance_id)

    def _reap(self, instance: str) -> list[RunRecord]:
        with self._tx() as c:
            now = self._now_ms()
            before, anon, after = ledger.interrupted_log_parts(instance)
            rows = c.execute(
                Q["reap"],
                (now, ledger.INTERRUPTED_REASON, ledger.INTERRUPTED_ERROR, before, anon, after),
            ).fetchall()
            reaped = [_run(r) for r in rows]
            # claimed and leased, but the holder died before its run row was written
            now_dt = _req(dt(now))
            rebuilt = [
                ledger.lost_run(
                    job_id, token, holder, dt(slot), _req(dt(claimed)),
                    now=now_dt, marked_by=instance,
                )
                for q in ("lost_runs", "lost_lane_runs")
                for job_id, token, holder, slot, claimed in c.execute(Q[q], (now,)).fetchall()
            ]
            insert_runs(c, rebuilt)
            if rebuilt:
                freed = json.dumps([[r.job_id, r.fencing_token] for r in rebuilt])
                if c.execute(Q["release_leases"], (freed,)).rowcount < len(rebuilt):
                    c.execute(Q["release_lanes"], (freed,))
        return reaped + rebuilt

    # -- instances ----------------------------------------------------------------------

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        return await self._call(self._heartbeat, me, ttl)

    def _heartbeat(self, me: Instance, ttl: float) -> Heartbeat:
        with self._tx() as c:
            now = self._now_ms()
            beat = Heartbeat(now=now / 1000.0)
            row = c.execute(Q["instance_get"], (me.instance_id,)).fetchone()
            if row is None or row[0] is not None:
                if row is not None:
                    beat.lost, beat.lost_at, beat.lost_by = True, dt(row[0]), row[1]
                c.execute(
                    Q["instance_register"],
                    (me.instance_id, me.host, me.pid, me.role, me.version, now),
                )
            else:
                c.execute(Q["instance_beat"], (me.instance_id, now))
            beat.live = tuple(r[0] for r in c.execute(Q["instances_live"], (now - ms(ttl),)))
        return beat

    # -- the job registry and requests -----------------------------------------------

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        await self._call(self._publish_jobs, instance_id, None if jobs is None else list(jobs))

    def _publish_jobs(self, instance: str, jobs: list[Declared] | None) -> None:
        # the changed rows go in chunks of REGISTRY_CHUNK, one short write transaction each
        now = self._now_ms()
        if jobs is not None:
            had = dict(self.conn.execute(Q["registry_of"], (instance,)).fetchall())
            wanted = {d.job_id: d for d in jobs}
            gone = [j for j in had if j not in wanted]
            put = [d for d in wanted.values() if had.get(d.job_id) != d.digest]
            for k in range(0, len(gone), REGISTRY_CHUNK):
                with self._tx() as c:
                    c.execute(Q["registry_drop"],
                              (instance, json.dumps(gone[k:k + REGISTRY_CHUNK])))
            for k in range(0, len(put), REGISTRY_CHUNK):
                with self._tx() as c:
                    c.execute(Q["registry_put"], (instance, now, registry_rows(
                        put[k:k + REGISTRY_CHUNK], spec_as_text=True)))
        with self._tx() as c:
            c.execute(Q["registry_touch"], (instance, now))

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        return await self._call(self._list_declared, ttl)

    def _list_declared(self, ttl: float) -> list[Declared]:
        cut = self._now_ms() - ms(ttl)
        return [
            Declared(job_id=r[0], instance_id=r[1], team=r[2], source=r[3], digest=r[4],
                     spec=json.loads(r[5]), declared_at=dt(r[6]), seen_at=dt(r[7]),
                     live=bool(r[10]) and r[8] is None and r[9] >= cut)
            for r in self.conn.execute(Q["registry_all"]).fetchall()
        ]  # fmt: skip

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        return await self._call(self._submit_request, request)

    def _submit_request(self, r: FleetRequest) -> FleetRequest:
        with self._tx() as c:
            rid, at = c.execute(
                Q["request_add"],
                (r.kind, r.job_id, r.target, json.dumps(r.payload), r.requested_by,
                 self._now_ms()),
            ).fetchone()  # fmt: skip
        return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                            payload=dict(r.payload), target=r.target, id=rid,
                            requested_at=dt(at))

    async def take_requests(
        self, instance_id: str, job_ids: Sequence[str]
    ) -> list[FleetRequest]:
        return await self._call(self._take_requests, instance_id, list(job_ids))

    def _take_requests(self, instance: str, job_ids: list[str]) -> list[FleetRequest]:
        # polled every second by every process: look (a read, the partial index) before
        # taking the file's write lock
        if self.conn.execute(Q["requests_any"]).fetchone() is None:
            return []
        with self._tx() as c:
            rows = c.execute(
                Q["requests_take"], (instance, self._now_ms(), json.dumps(job_ids))
            ).fetchall()
        return sorted((_request(r) for r in rows), key=lambda q: q.id or 0)

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        return await self._call(self._answer_request, request_id, run_id, error, only_untaken)

    def _answer_request(self, rid: int, run_id: int | None, error: str | None,
                        only_untaken: bool) -> bool:
        with self._tx() as c:
            cur = c.execute(
                Q["request_answer"], (rid, self._now_ms(), run_id, error, int(only_untaken))
            )
            return cur.rowcount == 1

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        return await self._call(self._note_request, request_id, json.dumps(payload))

    def _note_request(self, rid: int, payload: str) -> bool:
        with self._tx() as c:
            return c.execute(Q["request_note"], (rid, payload)).rowcount == 1

    async def get_request(self, request_id: int) -> FleetRequest | None:
        return await self._call(self._get_request, request_id)

    def _get_request(self, rid: int) -> FleetRequest | None:
        row = self.conn.execute(Q["request_get"], (rid,)).fetchone()
        return None if row is None else _request(row)

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        return await self._call(self._break_lost, instance_id, ttl)

    def _break_lost(self, me: str, ttl: float) -> LostInstances:
        out = LostInstances()
        with self._tx() as c:
            now = self._now_ms()
            rows = c.execute(Q["instances_declare_lost"], (now, now - ms(ttl), me)).fetchall()
            out.instances = [_instance(r, live=False) for r in rows]
            if not rows:
                return out
            lost = [i.instance_id for i in out.instances]
            payload = [
                [i, ledger.instance_lost_error(i), ledger.instance_lost_log(i, ttl, me)]
                for i in lost
            ]
            out.runs = [
                _run(r)
                for r in c.execute(
                    Q["interrupt_lost"],
                    (now, ledger.INSTANCE_LOST_REASON, json.dumps(payload)),
                ).fetchall()
            ]
            now_dt = _req(dt(now))
            leases = c.execute(Q["leases_of"], (json.dumps(lost),)).fetchall()
            rebuilt = [
                ledger.instance_lost_run(
                    job_id, token, holder, dt(slot), _req(dt(claimed)),
                    now=now_dt, ttl=ttl, marked_by=me,
                )
                for job_id, token, holder, slot, claimed, has_run in leases
                if claimed is not None and not has_run
            ]  # fmt: skip
            insert_runs(c, rebuilt)
            out.runs.extend(rebuilt)
            if leases:
                freed = json.dumps([[job_id, token] for job_id, token, *_ in leases])
                if c.execute(Q["release_leases"], (freed,)).rowcount < len(leases):
                    c.execute(Q["release_lanes"], (freed,))
        return out

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        return await self._call(self._list_instances, ttl)

    def _list_instances(self, ttl: float) -> list[Instance]:
        cut = self._now_ms() - ms(ttl)
        rows = self.conn.execute(Q["instances_all"]).fetchall()
        return [_instance(r, live=r[7] is None and r[6] >= cut) for r in rows]

    async def leave(self, instance_id: str) -> None:
        await self._call(self._leave, instance_id)

    def _leave(self, instance_id: str) -> None:
        with self._tx() as c:
            c.execute(Q["instance_leave"], (instance_id,))

    # -- reading the ledger -----------------------------------------------------------

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        return await self._call(self._list_runs, job_id, limit, status, before_id)

    def _list_runs(
        self, job_id: str | None, limit: int, status: RunStatus | None, before_id: int | None
    ) -> list[RunRecord]:
        sql, args = history_query(
            Q["runs"].rstrip(),
            job_id=job_id,
            status=None if status is None else RunStatus(status).value,
            before_id=before_id,
            limit=limit,
            placeholder="?",
        )
        return [_run(r) for r in self.conn.execute(sql, args)]

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        sql, args = history_query(Q["slot_runs"].rstrip(), job_id=job_id, status=None,
                                  before_id=before_id, limit=limit, placeholder="?")
        status = _STATUS
        new = tuple.__new__  # a NamedTuple without its Python-level __new__: 10,000 rows
        return await self._call(lambda: [
            new(SlotRun, (r[0], r[1] / 1000, status[r[2]], r[3], bool(r[4])))
            for r in self.conn.execute(sql, args)])

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        sql, args = find_runs_query(
            Q["runs"].rstrip(), where, after=after, limit=limit, placeholder="?",
            time=lambda d: round(d.timestamp() * 1000),
            any_job=("job_id IN (SELECT value FROM json_each(?))", json.dumps),
        )  # fmt: skip
        rows = await self._call(lambda: [_run(r) for r in self.conn.execute(sql, args)])
        return RunPage.of(rows, limit)

    async def get_run(self, run_id: int) -> RunRecord | None:
        return await self._call(self._get_run, run_id)

    def _get_run(self, run_id: int) -> RunRecord | None:
        row = self.conn.execute(Q["get_run"], (run_id,)).fetchone()
        return None if row is None else _run(row)

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        if not job_ids:
            return {}
        return await self._call(self._last_runs, list(job_ids))

    def _last_runs(self, job_ids: list[str]) -> dict[str, RunRecord]:
        rows = self.conn.execute(Q["last_runs"], (json.dumps(job_ids),))
        return {r[1]: _run(r) for r in rows}

    async def last_slot_runs(self, job_ids: Sequence[str]) -> dict[str, SlotRun]:
        if not job_ids:
            return {}
        status = _STATUS
        new = tuple.__new__
        ids = json.dumps(list(job_ids))
        return await self._call(lambda: {
            r[0]: new(SlotRun, (r[1], r[2] / 1000, status[r[3]], r[4], bool(r[5])))
            for r in self.conn.execute(Q["last_slot_runs"], (ids,))})

    async def prune(
        self, *, claims_older_than: float, runs_older_than: float, runs_per_job: int
    ) -> tuple[int, int]:
        """The retention rule (``RETENTION_RULE``) in small transactions of at most
        :data:`PRUNE_BATCH` ids each, every one its own call on the store's thread, so the
        slots' claims and the group commit interleave with a large pass (a pass deleting a
        million runs used to hold the thread for 9 s)."""
        claims_before, runs_before = ms(claims_older_than), ms(runs_older_than)
        claims = runs = 0
        lo, hi = await self._call(self._id_range, "claims", "token")
        for start in range(lo, hi + 1, PRUNE_BATCH):
            claims += await self._call(self._delete, "prune_claims_batch",
                                       (start, start + PRUNE_BATCH - 1, claims_before))
        lo, hi = await self._call(self._id_range, "runs", "id")
        for start in range(lo, hi + 1, PRUNE_BATCH):
            runs += await self._call(self._delete, "prune_old_runs_batch",
                                     (start, start + PRUNE_BATCH - 1, runs_before))
        crowded = await self._call(self._crowded, runs_per_job)
        if crowded:
            lo = (await self._call(self._id_range, "runs", "id"))[0]
            hi = max(cut for _, cut in crowded)
            for start in range(lo, hi + 1, PRUNE_BATCH):
                runs += await self._call(self._delete, "prune_runs_per_job_batch",
                                         (start, start + PRUNE_BATCH - 1))
        return claims, runs

    def _id_range(self, table: str, key: str) -> tuple[int, int]:
        row = self.conn.execute(f"SELECT min({key}), max({key}) FROM {table}").fetchone()
        return (row[0], row[1]) if row and row[0] is not None else (1, 0)

    def _delete(self, query: str, params: tuple[Any, ...]) -> int:
        with self._tx() as c:
            return int(c.execute(Q[query], params).rowcount)

    def _crowded(self, per_job: int) -> list[tuple[str, int]]:
        c = self.conn
        rows = [(j, cut) for j, cut in c.execute(Q["prune_crowded_jobs"], (per_job, per_job))
                if cut is not None]
        c.execute("CREATE TEMP TABLE IF NOT EXISTS prune_cut "
                  "(job_id TEXT PRIMARY KEY, cut INTEGER)")
        c.execute("DELETE FROM temp.prune_cut")
        c.executemany("INSERT INTO temp.prune_cut VALUES (?, ?)", rows)
        return rows
