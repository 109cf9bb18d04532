"""Writing results: the group commit of ended runs, rows of runs still running, skips.

``Writer`` owns everything waiting to be written: the ``Finish`` records (a run's
"started" and "finished" rows merge into one write), the skips the store could not take
yet, and the events that wake it. The other parts hand it rows (``add``, ``keep_skip``)
and never touch its buffers; it takes the runs ended since the last write from
``Runs.settle`` (which returns them) and only writes. During a burst it waits for the
burst's claims first (``Loop.firing``): results are written after, never in between.
(The rules of what a run's row says live in ``store/ledger.py``; this module only writes.)
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import from_ts, wait_while_moving
from cronfleet.model import RunStatus
from cronfleet.store.base import Finish, Skip, Store
from cronfleet.store.ledger import missed_summary

if TYPE_CHECKING:
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.parts import Firing, Life, RateLimitedLog, ResultSource, Settings
    from cronfleet.runtime.stats import Stats

__all__ = ["MAX_BUFFERED", "Writer"]

log = logging.getLogger("cronfleet")

MAX_BUFFERED = 10_000
Summary = tuple[int, float, float, str | None, list[str]]
"""Skips summarised in one record: count, first and last slot, instance, log line."""
FINISH_CHUNK = 5_000
SKIP_CHUNK = 5_000
"""Skip rows one store call writes at most: an overloaded instant sheds tens of
thousands, and one statement of 300,000 rows outlasted the store's call deadline (#26)."""
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


class Writer:
    """The write-behind of results. Built with the store, the settings, the scheduler's
    life, the stats, the activity counter and the rate-limited warning log; the assembler
    then wires ``runs`` (the source of ended runs), ``loop`` (``firing``) and
    ``claim_rows`` (``Outage.claim_rows``: rows of fail-open runs claimed first)."""

    runs: ResultSource
    loop: Firing
    claim_rows: Callable[[list[Finish]], Awaitable[list[Finish]]]

    def __init__(self, *, store: Store, settings: Settings, life: Life, stats: Stats,
                 activity: Activity, warn: RateLimitedLog) -> None:
        self.store = store
        self.settings = settings
        self.life = life
        self.stats = stats
        self.activity = activity
        self.warn = warn
        self.finishes: list[Finish] = []
        self.writing = 0  # group commits under way (their batch has left finishes)
        self.unsaved_skips: deque[Skip] = deque()  # at most MAX_BUFFERED (keep_skip)
        # (job, reason) -> (count, first, last, instance, log) of the skips beyond it
        self.summaries: dict[tuple[str, str], Summary] = {}
        # skips handed in between two instants (a job removed with due slots): written
        # with the next group commit; kept (bounded) with the others if that write fails
        self.queued_skips: list[Skip] = []
        self.flush_event = asyncio.Event()
        self.record_event = asyncio.Event()
        self._flush_done: asyncio.Event | None = None
        self.progress = 0  # chunks the store took (stop() waits while this moves)
        self.behind = False  # the last group commit failed: results (releases) wait

    # -- what the other parts hand in ---------------------------------------------------

    def add(self, finish: Finish, *, now: bool = False) -> None:
        """A row to write with the next group commit (``now``: wake the writer)."""
        self.finishes.append(finish)
        if now:
            self.flush_event.set()

    def add_all(self, finishes: Iterable[Finish]) -> None:
        self.finishes.extend(finishes)

    def keep_skip(self, skip: Skip) -> None:
        """A skip the store could not take yet: written with the next skips. Bounded
        without losing a slot: beyond :data:`MAX_BUFFERED`, the oldest one joins its job's
        and reason's summary (one record of their count and range, written with them)."""
        if len(self.unsaved_skips) >= MAX_BUFFERED:
            self._summarise(self.unsaved_skips.popleft())
        self.unsaved_skips.append(skip)

    def _summarise(self, skip: Skip) -> None:
        if not self.summaries:
            log.warning("more than %d skipped slots wait for the store: the oldest are kept "
                        "as one summary record per job and reason", MAX_BUFFERED)
        self._merge((skip.job_id, skip.reason),
                    (1, skip.slot, skip.slot, skip.instance_id, skip.logs[-1:]))

    def _merge(self, key: tuple[str, str], add: Summary) -> None:
        had = self.summaries.get(key)
        if had is None:
            self.summaries[key] = add
            return
        count, first, last, who, why = had
        self.summaries[key] = (count + add[0], min(first, add[1]), max(last, add[2]), who,
                               why if first <= add[1] else add[4])

    @staticmethod
    def _summary_rows(summaries: Iterable[tuple[tuple[str, str], Summary]]) -> list[Skip]:
        """One record per ``((job, reason), summary)``, in their order."""
        out = []
        for (job_id, reason), (count, first, last, who, why) in summaries:
            text, result = missed_summary(count, from_ts(first).isoformat(),
                                          from_ts(last).isoformat(), reason)
            out.append(Skip(job_id, first, reason, instance_id=who,
                            logs=[f"Skipped: {text}", *why], result=result))
        return out

    def queue_skips(self, skips: Iterable[Skip]) -> None:
        """Skips to write with the next group commit, however many (each is a slot
        already due: none is dropped unless the store refuses them)."""
        self.queued_skips.extend(skips)
        self.wake()

    def owed_skips(self) -> int:
        """Skips handed in and not written yet."""
        return len(self.queued_skips) + len(self.unsaved_skips) + len(self.summaries)

    def owes(self) -> bool:
        """Rows wait to be written: finished runs, skips handed in (the unsaved ones wait
        for the store's return, not for this process)."""
        return bool(self.finishes or self.queued_skips)

    def wake(self) -> None:
        if not self.flush_event.is_set():
            self.flush_event.set()

    def started_unrecorded(self) -> None:
        if not self.record_event.is_set():
            self.record_event.set()

    # -- writing ------------------------------------------------------------------------

    async def flush_loop(self) -> None:
        life = self.life
        while life.running:
            await self.flush_event.wait()
            self.flush_event.clear()
            firing = self.loop.firing
            if firing is not None:
                # a burst is being claimed: its claims go first, results are written after
                await asyncio.wait({firing})
            await self.flush_once()
            await self.flush_skips(results_first=True)

    async def record_started_loop(self) -> None:
        """Write the rows of fast-path runs still running a moment after they started, so
        the ledger shows them in progress; runs that end sooner are written once, whole."""
        runs = self.runs
        while True:
            await self.record_event.wait()
            self.record_event.clear()
            await asyncio.sleep(self.settings.record_started_after)
            self.finishes.extend(runs.take_unrecorded())
            if self.finishes:
                self.flush_event.set()

    async def flush_once(self) -> None:
        """Group commit: every run started or finished since the last write, one transaction."""
        activity = self.activity
        activity.enter()  # the settled runs leave the activity while their rows wait here
        self.finishes.extend(self.runs.settle())
        activity.leave()
        if not self.finishes:
            return
        merged: dict[int, Finish] = {}
        for f in self.finishes:  # a run's "started" and "finished" rows become one write
            prev = merged.get(id(f.run))
            if prev is None or f.release_token is not None:
                merged[id(f.run)] = f
        batch = list(merged.values())
        self.finishes = []
        store = self.store
        activity.enter()
        self.writing += 1
        try:
            batch = await self.claim_rows(batch)  # rows of fail-open runs: claimed first
            # one transaction per FINISH_CHUNK rows: a huge instant's results stay well
            # inside the store's call deadline; a failed chunk keeps itself and the rest
            while batch:
                chunk = batch[:FINISH_CHUNK]
                await store.finish(chunk)
                del batch[:FINISH_CHUNK]
                self.progress += 1
                if log_runs.isEnabledFor(logging.INFO):
                    log_ended(chunk, self.settings.instance_id)
            self.behind = False
        except Exception as exc:
            self.behind = True
            self.stats.store_errors += 1
            self.warn.warning(
                "finish", "cannot record %d finished runs (%s); will retry", len(batch), exc
            )
            self.finishes = self._bounded(batch + self.finishes)
            if self.life.running:
                self.life.spawn(self._later_flush())
        except asyncio.CancelledError:
            self.finishes = self._bounded(batch + self.finishes)  # counted by stop()
            raise
        finally:
            self.writing -= 1
            activity.leave()
        self._flushed_event().set()

    @staticmethod
    def _bounded(finishes: list[Finish]) -> list[Finish]:
        """The newest :data:`MAX_BUFFERED` rows waiting for the store; dropping older ones
        is said (an error: those runs' outcomes are lost; a run that held a lease leaves
        it to expire and the survivors' reaper records it ``interrupted``)."""
        over = len(finishes) - MAX_BUFFERED
        if over <= 0:
            return finishes
        log.error("the store has not taken the results of %d ended runs; at most %d wait in "
                  "memory: the %d oldest are dropped (jobs %s)", len(finishes), MAX_BUFFERED,
                  over, ", ".join(sorted({f.run.job_id for f in finishes[:over]})[:10]))
        return finishes[over:]

    def _flushed_event(self) -> asyncio.Event:
        if self._flush_done is None:
            self._flush_done = asyncio.Event()
        return self._flush_done

    async def flushed(self) -> None:
        """Wait until finished runs (and their lease releases) have been written -- also
        those of a group commit already under way: its batch has left ``finishes``, but
        its releases are not written until it returns."""
        while (self.finishes or self.runs.ended or self.writing) and self.life.running:
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
        if not self.finishes and not self.writing and not self.runs.ended:
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
        if self.life.running:
            self.life.spawn(self._later_flush())

    async def _later_flush(self) -> None:
        await asyncio.sleep(1.0)
        self.flush_event.set()

    async def record_skips(self, skips: list[Skip],
                           summaries: dict[tuple[str, str], Summary] | None = None, *,
                           between: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write skip records (``summaries``' records first), :data:`SKIP_CHUNK` a store
        call (``between``: awaited between two calls); keep what the store did not take
        for a later try (bounded: :meth:`keep_skip`). A chunk written again after a
        failure adds no row: each skip takes its slot's claim first."""
        sums = list((summaries or {}).items())
        todo = [*self._summary_rows(sums), *skips]
        done = 0

        def keep_the_rest() -> int:
            # the summary records come first in ``todo``: the i-th is ``sums[i]``
            left_sums, left = sums[done:], todo[max(done, len(sums)):]
            for key, summary in left_sums:
                self._merge(key, summary)
            for skip in left:
                self.keep_skip(skip)
            return len(left) + sum(s[0] for _, s in left_sums)

        try:
            while done < len(todo):
                if done and between is not None:
                    await between()
                chunk = todo[done : done + SKIP_CHUNK]
                await self.store.record_skips(chunk)
                done += len(chunk)
                self.progress += 1
        except asyncio.CancelledError:
            keep_the_rest()  # a stop cancelled the writing task: its last writes take them
            raise
        except Exception as exc:
            self.stats.store_errors += 1
            self.warn.warning("skips", "cannot record %d skipped slots (%s); will retry",
                              keep_the_rest(), exc)

    async def flush_skips(self, *, results_first: bool = False) -> None:
        """Write the skips handed in and those waiting for the store (``results_first``:
        the writer's own task, which may write the group commit between two chunks)."""
        if self.owed_skips():
            batch = [*self.queued_skips, *self.unsaved_skips]
            summaries, self.summaries = self.summaries, {}
            self.queued_skips = []
            self.unsaved_skips.clear()
            self.activity.enter()  # idle again once written (``owes``)
            try:
                await self.record_skips(batch, summaries,
                                        between=self._results_first if results_first else None)
            finally:
                self.activity.leave()

    async def _results_first(self) -> None:
        """Between two chunks of skips: a burst being claimed goes first, then the rows of
        runs ended meanwhile (their lease releases: a job's next slot must find its lease
        free), then the loop gets a turn."""
        firing = self.loop.firing
        if firing is not None:
            await asyncio.wait({firing})
        if self.finishes or self.runs.ended:
            await self.flush_once()
        await asyncio.sleep(0)

    async def last_writes(self, flusher: asyncio.Task[None] | None, budget: float) -> None:
        """At stop: the last writes go on while the store takes them (100,000 results are
        many chunks); a store that takes nothing for ``budget`` seconds (hung, down) is
        left behind: those runs' leases expire and the survivors' reaper records them."""
        async def write() -> None:
            if flusher is not None:
                await asyncio.gather(flusher, return_exceptions=True)
            await self.flush_once()
            await self.flush_skips()

        task = asyncio.ensure_future(write())
        if await wait_while_moving(task, lambda: self.progress, budget):
            return
        await cancel_and_wait([task])
        log.warning(
            "cronfleet %s: the store took none of the last results for %g s; %d runs and "
            "%d skips are not recorded (their leases expire and the reaper records them)",
            self.settings.instance_id, budget, len(self.finishes), self.owed_skips(),
        )
