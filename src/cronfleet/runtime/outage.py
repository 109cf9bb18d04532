"""What the scheduler does with slots while the store does not answer.

One owner (:class:`Outage`, built by ``start()``) for every rule of a store outage:

* **REQUIRE_GLOBAL** (the default for fleet-wide jobs): the slot does not run. It is kept
  in the *backlog*; when the store answers again the backlog goes through the job's
  ``missed`` policy (SKIP: every slot recorded ``skipped / store_unavailable``; RUN_ONCE:
  the newest one runs under a claim, the others are recorded; RUN_ALL: each runs under a
  claim, oldest first, up to the cap), inside the job's catch-up window. A slot another
  instance ran meanwhile loses its claim and gets no row (one outcome per slot). A job
  whose later slot already ran under a claim since the store came back records its
  backlog as skipped (superseded).
* **PREFER_GLOBAL** (opt-in) fails open only on a *confirmed outage*: the error is
  :class:`~cronfleet.errors.StoreUnavailable` (never an arbitrary exception), a fresh
  connection also fails within the store's deadline (``Store.confirm_outage``: PostgreSQL
  a fresh connection's ``SELECT 1``, Redis a fresh connection's ``PING``; SQLite and the
  memory store never confirm one), the slot is at most ``late_after`` old on a fresh
  clock reading, and no more than ``late_after`` of monotonic time passed since the instant
  began firing (a paused process never runs stale slots). Otherwise it is handled like
  REQUIRE_GLOBAL. A fail-open run's row is written under a claim of its slot once the
  store answers (``claim_rows``): one final row per slot, a lost claim's outcome kept as
  the slot's late result.
* **Overlap holds inside the process** for every run without a claim (fail open and
  node-local): ``SKIP`` records ``already_executing`` while a run of the job is in progress
  here; ``QUEUE_ONE`` waits for it (one waiting run at most); ``REPLACE`` cancels this
  process's runs of the job (the only ones it reaches without the store) and starts the
  slot when they ended (a newer slot replaces a waiting one: ``skipped / superseded``).
  Under REQUIRE_GLOBAL nothing runs without a claim: the backlog's slot replaces the run
  in progress through the store once it answers (``Runs.replace_running``).
* Warnings repeat at most once per :data:`~cronfleet.runtime.parts.WARN_EVERY` seconds
  per kind, with a count.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from cronfleet.clock import from_ts
from cronfleet.errors import StoreDamaged, StoreUnavailable
from cronfleet.model import Job, Locking, Missed, Overlap, RunRecord, RunStatus, SkipReason
from cronfleet.runtime import requests
from cronfleet.runtime.parts import RateLimitedLog
from cronfleet.runtime.planning import RUN_ALL_CAP
from cronfleet.runtime.runs import run_age
from cronfleet.store.base import Dispatch, Dispatched, DispatchKind, Finish, RunFilter, Skip
from cronfleet.store.ledger import (
    ALREADY_EXECUTING,
    attach_late_result,
    busy_log,
    busy_result,
    replace_stopped_log,
    replaced_waiting_log,
    skip_result,
    store_unavailable_log,
)

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.loop import Loop
    from cronfleet.runtime.parts import Jobs, Life, Settings
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.stats import Stats
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

__all__ = ["Outage"]

log = logging.getLogger("cronfleet")

MAX_SKIPS = 10_000
"""Claimed ``missed`` records kept for the store's return; older ones go claim-less."""

CONFIRM_FOR = 1.0
"""Seconds one answer of ``Store.confirm_outage`` is reused."""

_UNAVAILABLE = SkipReason.STORE_UNAVAILABLE.value
_SUPERSEDED = SkipReason.SUPERSEDED.value


class Outage:
    """The slots the store did not take. Built with the store, the clock, the settings,
    the scheduler's life, the stats, the job table (read-only), the writer (rows and skips
    it keeps), the runs (runs started without a claim), the loop (a backlog's replay) and
    the warning log it shares with the other parts."""

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, life: Life,
                 stats: Stats, jobs: Jobs, writer: Writer, runs: Runs, loop: Loop,
                 warn: RateLimitedLog) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.instance_id = settings.instance_id
        self.life = life
        self.stats = stats
        self.jobs = jobs
        self.writer = writer
        self.runs = runs
        self.loop = loop
        self.backlog: dict[str, dict[float, str]] = {}  # job -> slot -> the store's error
        self.superseded: dict[str, float] = {}  # job -> newest slot run under a claim since
        self.waiting: set[str] = set()  # QUEUE_ONE jobs with an unclaimed run waiting here
        # REPLACE jobs: the unclaimed run that starts once the replaced ones ended
        self.replacing: dict[str, RunRecord] = {}
        self.skips: list[Dispatch] = []  # claimed missed records the store did not take
        self.journal: list[tuple[str, float, str]] = []  # for a damaged store's journal
        self.journaled: set[tuple[str, float]] = set()  # slots written to it already
        self.warn = warn
        self.replaying = False
        self.retrying: asyncio.Task[None] | None = None
        # runs started without a claim (PREFER_GLOBAL fail open), by id(run): their rows are
        # written under a claim of their slot once the store answers (claim_rows)
        self.unclaimed: dict[int, RunRecord] = {}
        self._confirm_lock = asyncio.Lock()
        self._confirmation: tuple[float, bool] = (float("-inf"), False)

    # -- a chunk the store did not take -----------------------------------------------

    def offline(
        self, items: list[Dispatch], exc: BaseException | None, fired_mono: float
    ) -> list[Dispatched]:
        """The store failed a chunk: decide each slot (see the module's rules)."""
        out: list[Dispatched] = []
        prefer: list[tuple[Job, Dispatch]] = []
        unavailable = isinstance(exc, StoreUnavailable)
        for it in items:
            job = self.jobs.get(it.job_id)
            if job is None:
                continue
            if it.kind is DispatchKind.MISSED and it.skip_reason == _UNAVAILABLE:
                self.keep(job, it.slot, exc)  # a replayed backlog slot: back in the backlog
                continue
            if it.skip_reason and it.kind is DispatchKind.MISSED and (
                job.locking is not Locking.NODE_LOCAL
            ):
                # a slot the catch-up recorded missed, under a claim: claimed again when
                # the store is back (the catch-up's own path, retried as it was planned)
                self.keep_skip(it)
                continue
            if it.skip_reason:
                # a skip the store could not take: written (taking its claim) once it is back
                self.writer.keep_skip(Skip.of(it, self.instance_id, it.skip_reason))
                continue
            if it.kind is DispatchKind.RECOVERY:
                self.warn.warning("recovery", "job %s: store unavailable (%s); the recovery "
                                  "of slot %s waits for it", job.id, exc,
                                  from_ts(it.slot).isoformat())
                continue
            if job.locking is Locking.NODE_LOCAL:
                res = self.run_unclaimed(job, it, "node-local job; the store was unavailable "
                                         f"to record it ({exc})")
                if res is not None:
                    out.append(res)
                continue
            if job.locking is Locking.PREFER_GLOBAL and unavailable:
                prefer.append((job, it))
                continue
            self.keep(job, it.slot, exc)
        if prefer:
            self.life.spawn(self.fail_open(prefer, exc, fired_mono))
        if self.journal:
            self.write_journal()
        return out

    def write_journal(self) -> None:
        """Append the slots kept for a damaged store to its fallback journal (SQLite:
        ``<database>.journal.jsonl``, fsync'd); recorded when a restored store opens."""
        entries, self.journal = self.journal, []
        write = getattr(self.store, "journal", None)
        if write is None:
            return
        try:
            n = write(entries, self.instance_id)
        except OSError as exc:
            log.critical("the store is damaged and its fallback journal cannot be written "
                         "(%s): %d slot(s) are only in this process's memory", exc,
                         len(entries))
            return
        self.warn.warning("journal", "store damaged: %d slot(s) kept in the fallback journal",
                          n)

    def keep_skip(self, it: Dispatch) -> None:
        """A claimed ``missed`` record the store did not take: offered again (claimed) with
        the backlog; beyond :data:`MAX_SKIPS` the oldest are written claim-less."""
        self.skips.append(it)
        if len(self.skips) > MAX_SKIPS:
            old = self.skips.pop(0)
            self.writer.keep_skip(
                Skip(old.job_id, old.slot, old.skip_reason or _UNAVAILABLE,
                     triggered_by=old.triggered_by, instance_id=self.instance_id,
                     logs=list(old.logs), result=old.result)
            )
        if self.retrying is None and not self.life.stopping:
            self.retrying = self.life.spawn(self.retry_loop())

    @property
    def pending(self) -> bool:
        """Slots or records waiting for the store."""
        return bool(self.backlog or self.skips)

    def keep(self, job: Job, slot: float, exc: BaseException | None) -> None:
        """A slot not run for want of the store: into the backlog (bounded per job); with
        a damaged store, into its fallback journal too (the backlog dies with the
        process, and the store may never take it)."""
        slots = self.backlog.setdefault(job.id, {})
        if isinstance(exc, StoreDamaged) and (job.id, slot) not in self.journaled:
            self.journaled.add((job.id, slot))  # a replayed backlog slot: written once
            self.journal.append((job.id, slot, str(exc)))
        slots[slot] = str(exc)
        if len(slots) > RUN_ALL_CAP + 100:
            # the oldest goes to the writer's skips (past its bound: one summary record
            # per job, Writer.keep_skip -- memory stays bounded, no slot is dropped)
            oldest = min(slots)
            why = slots.pop(oldest)
            self.writer.keep_skip(
                Skip(job.id, oldest, _UNAVAILABLE, instance_id=self.instance_id,
                     logs=[store_unavailable_log(why)])
            )
        if self.retrying is None and not self.life.stopping:
            self.retrying = self.life.spawn(self.retry_loop())
        self.warn.warning(
            "require", "job %s: store unavailable (%s); slot %s not run now (the job's "
            "missed policy decides when the store is back)",
            job.id, exc, from_ts(slot).isoformat(),
        )

    async def fail_open(
        self, items: list[tuple[Job, Dispatch]], exc: BaseException | None, fired_mono: float
    ) -> None:
        confirmed = await self.confirmed()
        now, gap = self.clock.now(), time.monotonic() - fired_mono
        for job, it in items:
            stale = now - it.slot > self.settings.late_after or gap > self.settings.late_after
            if not confirmed or stale:
                why = ("the store answers a fresh connection: only this process lost its "
                       "session" if not confirmed else
                       f"the slot is stale ({now - it.slot:.1f} s late, {gap:.1f} s paused)")
                self.warn.warning("no-fail-open", "job %s: PREFER_GLOBAL slot %s not run "
                                  "without a claim: %s", job.id,
                                  from_ts(it.slot).isoformat(), why)
                self.keep(job, it.slot, exc)
                continue
            self.stats.fail_open += 1
            self.warn.warning("fail-open", "job %s: store unavailable (%s); running slot %s "
                              "without a claim (fail open)", job.id, exc,
                              from_ts(it.slot).isoformat())
            self.run_unclaimed(job, it, f"Ran without a claim: the store was unavailable ({exc})",
                               claim_row=True)

    async def confirmed(self) -> bool:
        """``Store.confirm_outage()``, asked once for every chunk failing within
        :data:`CONFIRM_FOR` seconds (a burst of many chunks opens one fresh connection)."""
        async with self._confirm_lock:
            at, answer = self._confirmation
            if time.monotonic() - at < CONFIRM_FOR:
                return answer
            confirm = getattr(self.store, "confirm_outage", None)
            answer = False
            if confirm is not None:
                try:
                    answer = bool(await confirm())
                except Exception:  # unsure is not confirmed
                    answer = False
            self._confirmation = (time.monotonic(), answer)
            return answer

    def run_unclaimed(
        self, job: Job, it: Dispatch, line: str, *, claim_row: bool = False
    ) -> Dispatched | None:
        """Start a run without a claim, the job's overlap enforced in this process.
        ``claim_row`` (fail open): its row is written under a claim of the slot once the
        store answers (:meth:`claim_rows`)."""
        run = RunRecord(
            id=None,
            job_id=job.id,
            slot=from_ts(it.slot),
            triggered_by=it.triggered_by,
            status=RunStatus.RUNNING,
            instance_id=self.instance_id,
            is_catchup=it.is_catchup,
            manual=it.manual,
            started_at=from_ts(self.clock.now()),
            logs=[*it.logs, line],
        )
        if claim_row:
            self.unclaimed[id(run)] = run
        busy = self.runs.running.get(job.id, 0) >= job.max_instances
        if job.overlap is Overlap.REPLACE and busy:
            self.replace_local(job, run)
            return None
        if job.overlap is not Overlap.ALLOW and busy:
            if job.overlap is Overlap.QUEUE_ONE and job.id not in self.waiting:
                self.waiting.add(job.id)
                self.life.spawn(self._after_idle(job, run))
                return None
            if claim_row:  # fail open: recorded under a claim (another may have run it)
                skip = Dispatch.missed(job.id, it.slot, reason=ALREADY_EXECUTING,
                                       result=busy_result(), logs=[busy_log(self.instance_id)])
                skip.triggered_by, skip.is_catchup = it.triggered_by, it.is_catchup
                self.keep_skip(skip)
            else:
                self.writer.keep_skip(
                    Skip(job.id, it.slot, ALREADY_EXECUTING, triggered_by=it.triggered_by,
                         instance_id=self.instance_id, logs=[busy_log(self.instance_id)],
                         result=busy_result())
                )
            self.stats.skip(ALREADY_EXECUTING)
            return None
        self.runs.launch(job, run, leased=False)
        return Dispatched(request=it, won=True, run=run)

    async def claim_rows(self, batch: list[Finish]) -> list[Finish]:
        """The group commit's rows of runs started without a claim (fail open), once the
        store answers: each slot is claimed first, so that it keeps one final row (several
        processes may have run it, and the backlog of another may claim it). A won claim's
        row becomes the run's row; a lost one means the slot has its row from another
        process: this run's outcome is attached to it as its late result
        (``ledger.attach_late_result``), or waits for it (written later) while that row is
        still open. A run still running whose claim is lost is written when it ends.
        Raises what the store raised (the group commit keeps the batch)."""
        if not self.unclaimed:
            return batch
        unclaimed = self.unclaimed
        mine = [f for f in batch if f.run.id is None and id(f.run) in unclaimed]
        if not mine:
            return batch
        out = [f for f in batch if not (f.run.id is None and id(f.run) in unclaimed)]
        items = []
        for f in mine:
            job = self.jobs.get(f.run.job_id)
            items.append(Dispatch.scheduled(
                f.run.job_id, f.run.slot.timestamp(), lease=False, record=True,
                hold=job.lease_seconds if job is not None else 3600.0,
            ))
        got = await self.store.dispatch(items, self.instance_id)
        later: list[Finish] = []
        for f, res in zip(mine, got, strict=True):
            run = f.run
            if res.won and res.run is not None:
                run.id, run.fencing_token = res.run.id, res.token
                unclaimed.pop(id(run), None)
                out.append(f)
                continue
            if not run.status.finished:
                continue  # its outcome is attached when it ends
            stored = await self.slot_row(run)
            if stored is None:
                later.append(f)  # the slot's claim has no final row yet
                continue
            unclaimed.pop(id(run), None)
            out.append(Finish(attach_late_result(stored, run, from_ts(self.clock.now()))))
        if later:
            self.writer.add_all(later)
            self.writer.flush_later()
        return out

    async def slot_row(self, run: RunRecord) -> RunRecord | None:
        """The final row of ``run``'s slot (not a manual run), the oldest if several."""
        page = await self.store.find_runs(
            RunFilter(job_id=run.job_id, since=run.slot,
                      until=run.slot + timedelta(milliseconds=1)),
            limit=20,
        )
        final = [r for r in page.runs if r.status.finished and not r.manual
                 and r.slot == run.slot]
        return min(final, key=lambda r: r.id or 0) if final else None

    def replace_local(self, job: Job, run: RunRecord) -> None:
        """``Overlap.REPLACE`` without a claim: cancel this process's runs of the job (the
        only ones it can reach while the store is away), start ``run`` once they ended. A
        newer slot arriving meanwhile replaces the waiting one, which is recorded
        ``skipped / superseded``."""
        runner = self.runs
        mine = [(key, active) for key, active in list(runner.active.items())
                if active.job.id == job.id and active.run is not run]
        if job.max_instances > 1:  # N lanes: only the oldest run makes way
            mine = sorted(mine, key=lambda ka: run_age(ka[1].run))[:1]
        for key, _active in mine:
            runner.cancel(key, by=f"{self.instance_id} (overlap replace)",
                          why=f"replaced by a newer slot ({run.slot.isoformat()})")
        older = self.replacing.get(job.id)
        self.replacing[job.id] = run
        if older is not None:
            self.writer.keep_skip(
                Skip(job.id, older.slot.timestamp(), _SUPERSEDED,
                     triggered_by=older.triggered_by, instance_id=self.instance_id,
                     logs=[*older.logs, replaced_waiting_log(run.slot.isoformat())],
                     result=skip_result(_SUPERSEDED))
            )
            self.stats.skip(_SUPERSEDED)
            return
        self.life.spawn(self._after_replaced(job))

    async def _after_replaced(self, job: Job) -> None:
        await self.runs.job_idle(job.id, below=job.max_instances)
        run = self.replacing.pop(job.id, None)
        if run is None:
            return
        if self.life.stopping:  # never started: say so (the store may take it at the last writes)
            self.writer.keep_skip(
                Skip(job.id, run.slot.timestamp(), _UNAVAILABLE,
                     triggered_by=run.triggered_by, instance_id=self.instance_id,
                     logs=[*run.logs, replace_stopped_log()])
            )
            return
        run.started_at = from_ts(self.clock.now())
        self.runs.launch(job, run, leased=False)

    async def _after_idle(self, job: Job, run: RunRecord) -> None:
        try:
            await self.runs.job_idle(job.id, below=job.max_instances)
            if self.life.stopping:
                return
            run.started_at = from_ts(self.clock.now())
            self.runs.launch(job, run, leased=False)
        finally:
            self.waiting.discard(job.id)

    def at_stop(self) -> None:
        """Stopping with a backlog: each slot becomes a ``store_unavailable`` skip for the
        last writes (if the store is still away, a later start's catch-up finds them:
        they were never claimed)."""
        for job_id, slots in self.backlog.items():
            for slot, why in sorted(slots.items()):
                self.writer.keep_skip(
                    Skip(job_id, slot, _UNAVAILABLE, instance_id=self.instance_id,
                         logs=[store_unavailable_log(why)])
                )
        self.backlog.clear()
        for it in self.skips:  # last resort: kept as skips (the store may be gone for good)
            self.writer.keep_skip(Skip.of(it, self.instance_id, _UNAVAILABLE))
        self.skips.clear()

    # -- the store is back -------------------------------------------------------------

    def answered(self, got: list[Dispatched]) -> None:
        """A chunk was claimed: the store is back. Note the jobs whose newer slot ran."""
        backlog = self.backlog
        for res in got:
            jid = res.request.job_id
            if jid in backlog and res.won and not res.request.skip_reason:
                slot = res.request.slot
                if slot > self.superseded.get(jid, float("-inf")):
                    self.superseded[jid] = slot
        if not self.replaying:
            self.replaying = True
            self.life.spawn(self.replay())

    async def retry_loop(self) -> None:
        """While a backlog waits, offer it to the store with backoff and full jitter (a
        daily job must not wait for its next slot to learn the store is back)."""
        delay = 0.5
        try:
            while self.pending and not self.life.stopping:
                await asyncio.sleep(random.uniform(0.05, delay))
                if not self.replaying and self.pending:
                    self.replaying = True
                    await self.replay()
                delay = min(delay * 2, 5.0)
        finally:
            self.retrying = None

    async def replay(self) -> None:
        """Hand each job's backlog to its missed policy (see the module's rules)."""
        try:
            backlog, self.backlog = self.backlog, {}
            superseded, self.superseded = self.superseded, {}
            now = self.clock.now()
            items: list[Dispatch] = self.skips
            self.skips = []
            for job_id, slots in backlog.items():
                job = self.jobs.get(job_id)
                if job is None:
                    continue
                ordered = sorted(slots)
                newer = superseded.get(job_id)
                inside = [x for x in ordered if now - x <= job.catch_up_window]
                if newer is not None and all(x < newer for x in inside):
                    inside = []  # a later slot already ran under a claim
                if job.missed is Missed.RUN_ALL:
                    run = inside[-RUN_ALL_CAP:]
                elif job.missed is Missed.RUN_ONCE:
                    run = inside[-1:]
                else:
                    run = []
                chosen = set(run)
                for x in ordered:
                    if x not in chosen:
                        items.append(requests.missed(
                            job, x, f"was not run: the store was unavailable ({slots[x]})",
                            reason=_UNAVAILABLE,
                        ))
                if len(run) == 1:
                    items.append(requests.scheduled(
                        job, run[0], now, catchup=True, queued=self.runs.queued,
                        running=self.runs.running, instance_id=self.instance_id,
                    ))
                elif run:
                    self.life.spawn(self.loop.run_sequence(job, [(x, True) for x in run]))
            if items:
                log.info("store available again: %d slots not run during the outage go "
                         "through their jobs' missed policies", len(items))
                await self.loop.dispatch(items)
        finally:
            self.replaying = False
