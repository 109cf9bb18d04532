"""Background upkeep: retention, orphan reaping (with recovery runs), queued runs polled
for their lease, skips retried, long runs' leases renewed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cronfleet.model import RunRecord
from cronfleet.runtime import requests

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.loop import Loop
    from cronfleet.runtime.parts import FleetView, Jobs, Settings
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.writer import Writer
    from cronfleet.store.base import Store

__all__ = ["Upkeep"]

log = logging.getLogger("cronfleet")


class Upkeep:
    """Built with the store, the clock, the settings, the activity counter, the job table
    (read-only), the runs (queued ones polled, leases renewed), the writer (skips
    retried) and the loop (recovery runs dispatched); the assembler wires ``fleet``."""

    fleet: FleetView

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, activity: Activity,
                 jobs: Jobs, runs: Runs, writer: Writer, loop: Loop) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.instance_id = settings.instance_id
        self.activity = activity
        self.jobs = jobs
        self.runs = runs
        self.writer = writer
        self.loop = loop
        self.last_reap: float | None = None

    async def retention_loop(self) -> None:
        """Retention: at start and then daily."""
        clock = self.clock
        while True:
            await self.prune()
            await clock.sleep_until(clock.now() + 86400.0)

    async def prune(self) -> tuple[int, int]:
        now = self.clock.now()
        try:
            claims, runs = await self.store.prune(
                claims_older_than=now - self.settings.claim_retention,
                runs_older_than=now - self.settings.run_retention,
                runs_per_job=self.settings.runs_per_job,
            )
        except Exception as exc:
            log.warning("retention pass failed (%s); will retry tomorrow", exc)
            return 0, 0
        if claims or runs:
            log.info("retention: deleted %d old claims and %d old runs", claims, runs)
        return claims, runs

    async def orphan_loop(self) -> None:
        while True:
            self.activity.enter()
            try:
                if self.may_reap():
                    await self.reap_orphans()
                await self.runs.poll_queued()
                await self.writer.flush_skips()
            finally:
                self.activity.leave()
            every = min(self.settings.orphan_interval, self.settings.queue_poll)
            await self.clock.sleep_until(self.clock.now() + every)

    def may_reap(self) -> bool:
        """The periodic reaper judges other processes' runs only while this instance's own
        heartbeats go through without a gap (``Fleet.steady``, as for ``break_lost``), the
        last one asked less than ``instance_ttl`` ago and none failed since. After
        the store was out of reach for everybody (a frozen SQLite writer, a hang) -- or
        this process was frozen itself -- every holder first writes the results it kept
        meanwhile: a run that had finished is recorded, not found orphaned by its expired
        lease and re-run (``recover``)."""
        fleet = self.fleet
        if not fleet.enabled:
            return True
        last = fleet.last_ok
        return (
            fleet.steady()
            and not fleet.failed
            and last is not None
            and self.clock.now() - last < fleet.ttl
        )

    async def reap_orphans(self) -> list[RunRecord]:
        """Mark runs of dead instances ``interrupted``; re-run them where ``recover=True``."""
        now = self.clock.now()
        last = self.last_reap
        if last is not None and now - last < self.settings.orphan_interval:
            return []
        self.last_reap = now
        try:
            orphans = await self.store.reap_orphans(self.instance_id)
        except Exception as exc:
            log.warning("orphan check failed (%s)", exc)
            return []
        await self.recover(orphans, "its lease expired")
        return orphans

    async def recover(self, runs: list[RunRecord], why: str) -> None:
        """Log each run marked ``interrupted`` (by the reaper or for a lost instance) and
        re-run its slot where the job says ``recover=True``."""
        items = []
        for run in runs:
            log.warning(
                "job %s: run %s (slot %s on %s) was interrupted: %s",
                run.job_id,
                run.id,
                run.slot.isoformat(),
                run.instance_id,
                why,
            )
            job = self.jobs.get(run.job_id)
            if job is None or not job.recover or run.fencing_token is None or run.manual:
                continue
            items.append(requests.recovery(job, run))
        for item in items:  # one at a time: a batch takes at most one lease per job
            await self.loop.dispatch([item])

    async def renew_loop(self) -> None:
        """Keep the leases of long runs without a timeout alive while they run."""
        while True:
            await self.clock.sleep_until(self.clock.now() + 300.0)
            items = [
                (a.job.id, a.run.fencing_token, a.job.lease_seconds)
                for a in self.runs.active.values()
                if a.leased and a.job.timeout is None and a.run.fencing_token is not None
            ]
            try:
                await self.store.renew_leases(items)
            except Exception as exc:
                log.warning("lease renewal failed (%s)", exc)
