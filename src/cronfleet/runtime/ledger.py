"""Writing results: the group commit of ended runs, rows of runs still running, skips.

``Ledger`` owns everything waiting to be written: the ``Finish`` records (a run's
"started" and "finished" rows merge into one write), the skips the store could not take
yet, and the events that wake the writer. During a burst the writer waits for the burst's
claims first (``Loop.firing``): results are written after, never in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from cronfleet.model import RunStatus
from cronfleet.store.base import Finish, Skip

if TYPE_CHECKING:
    from cronfleet.runtime.scheduler import Scheduler

__all__ = ["MAX_BUFFERED", "Ledger"]

log = logging.getLogger("cronfleet")

MAX_BUFFERED = 10_000
FINISH_CHUNK = 5_000
log_runs = logging.getLogger("cronfleet")  # the one line per ended run


def log_ended(batch: list[Finish], instance_id: str) -> None:
    """One line per ended run, once its row is written (so its run id is known); the
    JSON log format (cronfleet.logs) reads the fields passed as ``extra``."""
    for f in batch:
        run = f.run
        if run.status is RunStatus.RUNNING or run.finished_at is None:
            continue
        slot = run.slot.isoformat()
        duration = (None if run.started_at is None
                    else round((run.finished_at - run.started_at).total_seconds(), 6))
        fields = {
            "job": run.job_id, "slot": slot, "run_id": run.id, "instance": instance_id,
            "fencing_token": run.fencing_token, "outcome": run.status.value,
            "duration": duration, "attempt": run.attempt,
        }
        level = logging.WARNING if run.status in _FAILED else logging.INFO
        log_runs.log(level, "job %s slot %s %s%s", run.job_id, slot, run.status.value,
                     f": {_first_line(run.error)}" if run.error else "",
                     extra={"cronfleet": fields})


_FAILED = (RunStatus.FAILED, RunStatus.TIMED_OUT)


def _first_line(error: str) -> str:
    """The error of the per-run line: its first line (a multi-line error is in the run)."""
    first, _, rest = error.partition("\n")
    return first + (" (more in the run's log)" if rest.strip() else "")


class Ledger:
    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.finishes: list[Finish] = []
        self.writing = 0  # group commits under way (their batch has left finishes)
        self.unsaved_skips: deque[Skip] = deque(maxlen=MAX_BUFFERED)
        self.flush_event = asyncio.Event()
        self.record_event = asyncio.Event()
        self._flush_done: asyncio.Event | None = None
        self.progress = 0  # chunks the store took (stop() waits while this moves)
        self.behind = False  # the last group commit failed: results (releases) wait

    def wake(self) -> None:
        if not self.flush_event.is_set():
            self.flush_event.set()

    def started_unrecorded(self) -> None:
        if not self.record_event.is_set():
            self.record_event.set()

    async def flush_loop(self) -> None:
        s = self.s
        while s.running:
            await self.flush_event.wait()
            self.flush_event.clear()
            firing = s.loop.firing
            if firing is not None:
                # a burst is being claimed: its claims go first, results are written after
                await asyncio.wait({firing})
            await self.flush_once()
            if self.unsaved_skips:
                await self.flush_skips()

    async def record_started_loop(self) -> None:
        """Write the rows of fast-path runs still running a moment after they started, so
        the ledger shows them in progress; runs that end sooner are written once, whole."""
        runs = self.s.runner
        while True:
            await self.record_event.wait()
            self.record_event.clear()
            await asyncio.sleep(self.s.record_started_after)
            for a in list(runs.unrecorded.values()):
                if a.run.id is None and a.run.status is RunStatus.RUNNING:
                    self.finishes.append(Finish(a.run))
            runs.unrecorded.clear()
            if self.finishes:
                self.flush_event.set()

    async def flush_once(self) -> None:
        """Group commit: every run started or finished since the last write, one transaction."""
        s = self.s
        s.runner.settle()
        if not self.finishes:
            return
        merged: dict[int, Finish] = {}
        for f in self.finishes:  # a run's "started" and "finished" rows become one write
            prev = merged.get(id(f.run))
            if prev is None or f.release_token is not None:
                merged[id(f.run)] = f
        batch = list(merged.values())
        self.finishes = []
        s.activity.enter()
        self.writing += 1
        try:
            batch = await s.outage.claim_rows(batch)  # rows of fail-open runs: claimed first
            # one transaction per FINISH_CHUNK rows: a huge instant's results stay well
            # inside the store's call deadline; a failed chunk keeps itself and the rest
            while batch:
                chunk = batch[:FINISH_CHUNK]
                await s.store.finish(chunk)
                del batch[:FINISH_CHUNK]
                self.progress += 1
                if log_runs.isEnabledFor(logging.INFO):
                    log_ended(chunk, s.instance_id)
            self.behind = False
        except Exception as exc:
            self.behind = True
            s.stats.store_errors += 1
            s.outage.warn.warning(
                "finish", "cannot record %d finished runs (%s); will retry", len(batch), exc
            )
            self.finishes = (batch + self.finishes)[-MAX_BUFFERED:]
            if s.running:
                s.spawn(self._later_flush())
        except asyncio.CancelledError:
            self.finishes = (batch + self.finishes)[-MAX_BUFFERED:]  # counted by stop()
            raise
        finally:
            self.writing -= 1
            s.activity.leave()
        self._flushed_event().set()

    def _flushed_event(self) -> asyncio.Event:
        if self._flush_done is None:
            self._flush_done = asyncio.Event()
        return self._flush_done

    async def flushed(self) -> None:
        """Wait until finished runs (and their lease releases) have been written -- also
        those of a group commit already under way: its batch has left ``finishes``, but
        its releases are not written until it returns."""
        while (self.finishes or self.s.runner.ended or self.writing) and self.s.running:
            ev = self._flushed_event()
            ev.clear()
            self.flush_event.set()
            await ev.wait()

    async def write_behind(self, wait: float) -> None:
        """Before an instant is claimed: when a group commit failed (the store was away),
        write what waits first -- among it the lease releases of this process's runs that
        ended meanwhile. Otherwise the first instant after the store's return meets those
        leases (each slot recorded ``already_executing``, run by nobody) until the next
        retry, up to a second later. Waits at most ``wait`` seconds: a store still away
        fails the write (fast) or keeps it, and the instant goes on."""
        if not self.finishes and not self.writing:
            self.behind = False
            return
        done = self._flushed_event()
        done.clear()
        self.flush_event.set()
        try:
            async with asyncio.timeout(wait):
                await done.wait()
        except TimeoutError:
            pass

    def flush_later(self) -> None:
        """Another group commit in a second (rows that must wait for another's row)."""
        if self.s.running:
            self.s.spawn(self._later_flush())

    async def _later_flush(self) -> None:
        await asyncio.sleep(1.0)
        self.flush_event.set()

    async def record_skips(self, skips: list[Skip]) -> None:
        """Write skip records; keep them (bounded) for a later try if the store is down."""
        s = self.s
        try:
            await s.store.record_skips(skips)
        except Exception as exc:
            s.stats.store_errors += 1
            s.outage.warn.warning(
                "skips", "cannot record %d skipped slots (%s); will retry", len(skips), exc
            )
            self.unsaved_skips.extend(skips)

    async def flush_skips(self) -> None:
        if self.unsaved_skips:
            batch = list(self.unsaved_skips)
            self.unsaved_skips.clear()
            await self.record_skips(batch)
