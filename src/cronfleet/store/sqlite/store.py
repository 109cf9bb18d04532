"""The embedded default store: one SQLite file in WAL mode.

Several processes on one host coordinate through it: claims are unique rows, leases are
conditional updates, and every write transaction starts with ``BEGIN IMMEDIATE`` so
writers queue on SQLite's lock instead of failing half way. All calls run on one
dedicated thread per store (SQLite connections are not shared across threads), and each
batched call is one transaction; batches travel as a single JSON parameter read with
``json_each`` so a burst of 20,000 slots is still one statement per step.

The contract's operations are :class:`~cronfleet.store.driver.StoreDriver`'s; this
module adds what only SQLite has: the file, its fallback journal, ``quick_check``.
The connection and its thread are :class:`~cronfleet.store.sqlite.transport.SQLiteTransport`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from cronfleet.clock import Clock, SystemClock, judged_by_store
from cronfleet.model import JobState, SkipReason
from cronfleet.store import ledger
from cronfleet.store.base import Dispatch
from cronfleet.store.driver import StoreDriver, dispatch_plan
from cronfleet.store.rows import ms
from cronfleet.store.sqlite.ops import insert_runs
from cronfleet.store.sqlite.transport import SQLiteTransport, apply_migrations

__all__ = ["JOURNAL_SUFFIX", "SQLiteStore", "apply_migrations", "insert_runs"]

log = logging.getLogger("cronfleet.store.sqlite")

JOURNAL_SUFFIX = ".journal.jsonl"
"""The fallback journal of a damaged database: ``<database>.journal.jsonl``."""


class SQLiteStore(StoreDriver):
    """Claims, leases, overrides and the run ledger in one SQLite file."""

    lanes = True  # max_instances > 1: lanes 1..N-1 in the lease_lanes table (v9)
    transport: SQLiteTransport

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
        self.clock: Clock = SystemClock() if clock is None or judged_by_store(clock) else clock
        """What judges leases, claim times, deadlines and heartbeats: the **host's clock**,
        the database clock of a file every process of the fleet shares on one host
        (:func:`~cronfleet.clock.judged_by_store`): processes judging each other's
        heartbeats by clocks 5 s apart declared each other lost at every beat."""
        self.busy_timeout = busy_timeout
        """Seconds a write waits for another process's write lock before the store counts
        as unavailable (a process stopped while holding the lock must not freeze the rest
        for longer)."""
        self.call_timeout = call_timeout if call_timeout and call_timeout > 0 else None
        """Seconds a call may run on the store's thread; past it the running statement is
        interrupted (``sqlite3.Connection.interrupt``), its transaction rolls back and the
        call raises ``StoreUnavailable``."""
        self.transport = SQLiteTransport(
            self.path, clock=self.clock, busy_timeout=busy_timeout,
            call_timeout=self.call_timeout, journal_path=lambda: self.journal_path,
        )  # fmt: skip
        """The connection accessor for code sharing it (the side tables):
        ``store.transport.connection()`` (the open ``sqlite3.Connection``), used only on
        the store's thread through ``await store.transport.call_fn(fn, *args)``."""

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def damaged(self) -> bool:
        """A call found the file corrupted (``StoreDamaged``)."""
        return self.transport.damaged

    @damaged.setter
    def damaged(self, value: bool) -> None:
        self.transport.damaged = value

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
        got = self.transport.plan_now(
            lambda now: dispatch_plan(items, "journal-import", now)) if items else []
        kept = sum(1 for d in got if d.won)
        done = path.with_name(f"{path.name}.imported-{self.transport.now_ms()}")
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

    # -- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        await self.transport.open(self._import_journal)

    async def close(self) -> None:
        await self.transport.close()

    async def now(self) -> float:
        return self.clock.now()

    async def quick_check(self) -> None:
        """SQLite's check of the whole file (``PRAGMA quick_check``), for ``cronfleet
        check``: StoreDamaged naming the first problem found. A damaged page shows on a
        read only when that read touches it; this reads every page once."""

        def go() -> None:
            row = self.transport.connection().execute("PRAGMA quick_check(1)").fetchone()
            if row is None or row[0] != "ok":
                found = "no answer" if row is None else row[0]
                raise sqlite3.DatabaseError(f"database disk image is malformed: {found}")

        await self.transport.call_fn(go, long=True)

    # -- where SQLite reads before it writes ---------------------------------------------

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        # Called at every instant and tiny (the rows with an override set). In WAL mode a
        # read never waits for a writer, so when the store's thread is idle it is read
        # right here, saving two thread hops on the path of every slot.
        t = self.transport
        if t.conn is not None and t.lock.acquire(blocking=False):
            try:
                found = t.guard_unlocked(t.op_now, "read_overrides", (), False)
            finally:
                t.lock.release()
            wanted = set(job_ids)
            return {k: v for k, v in found.items() if k in wanted}
        return await super().read_overrides(job_ids)
