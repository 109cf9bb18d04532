"""Alerts for every job kind: health rows, auto-pause and notifications.

:func:`record_and_alert` is the one implementation: it records a finished run in the
job's shared health, pauses the job for the whole fleet after ``auto_pause_after``
consecutive failures, and sends the notifications its ``notify`` policy calls for.

:class:`Alerts`, a listener of the scheduler's
:class:`~cronfleet.runtime.events.RunFinished` events (``install(scheduler, services)``),
is its one caller for every job kind -- handler, command and HTTP jobs alike. It acts
only on jobs with ``notify`` or ``auto_pause_after`` (so a burst of jobs without them
costs one attribute check each), in a task of its own, after the run's row is queued: a
slow webhook never holds the loop or the run, and the run's result never carries its
alerts (the health is the job's row, an auto-pause the job's override and audit, each
notification's outcome a log line). A job kind that needs something of its own in its
alerts supplies it through its handler's ``alert_settings(run)``
(:class:`~cronfleet.alerting.AlertSettings`; HTTP jobs: their secrets namespace, their
SSRF policy, the run's idempotency key and HTTP status).

The implementation lives in :mod:`cronfleet.alerting` (imported by this listener and by
the HTTP job kind, importing neither); its names are re-exported here.

``services`` is what alerts need from the outside world — an
:class:`~cronfleet.jobs.http.HttpRuntime` provides all of it: ``health`` (tracked
through its store, shared by the fleet), ``notifier``, ``vault`` (secrets referenced by a
notification policy), ``client()`` (the guarded HTTP client) and ``pause``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from cronfleet.alerting import (
    AUTO_PAUSE_BY,
    AlertServices,
    AlertSettings,
    Pause,
    RunFacts,
    Scope,
    alert_settings,
    auto_paused,
    notify_resumed,
    record_and_alert,
)
from cronfleet.model import Job, RunStatus
from cronfleet.runtime.events import OverrideChanged, RunFinished, Unsubscribe
from cronfleet.secrets import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.scheduler import Scheduler

__all__ = ["AUTO_PAUSE_BY", "AlertServices", "AlertSettings", "Alerts", "RunFacts",
           "alert_settings", "auto_paused", "install", "notify_resumed", "record_and_alert"]

log = logging.getLogger("cronfleet")


def wants_alerts(job: Job) -> bool:
    """Does the listener act on this job's runs? (every kind: those that ask for alerts)"""
    return job.notify is not None or job.auto_pause_after is not None


class Alerts:
    """A ``RunFinished`` listener doing health, auto-pause and notifications for every job
    that asks for them (``notify`` / ``auto_pause_after``), whatever its kind."""

    def __init__(
        self,
        services: AlertServices,
        *,
        pause: Pause | None = None,
        scope: Scope | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        clock: Clock | None = None,
    ) -> None:
        self.services = services
        self.pause = pause
        self.scope = scope
        self.namespace = namespace
        self.clock = clock  # the scheduler's: dates the health rows
        self._tasks: set[asyncio.Task[None]] = set()
        self._chains: dict[str, asyncio.Task[None]] = {}

    def __call__(self, event: RunFinished) -> asyncio.Task[None] | None:
        # a skip is no outcome; a cancel is an operator's decision, not the job failing
        if not wants_alerts(event.job) or event.run.status in (RunStatus.SKIPPED,
                                                                RunStatus.CANCELLED):
            return None
        # one job's runs are recorded in order (consecutive failures count right)
        prev = self._chains.get(event.job.id)
        task = asyncio.get_running_loop().create_task(self._handle(event, prev))
        self._chains[event.job.id] = task
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._done, event.job.id))
        return task

    def _done(self, job_id: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._chains.get(job_id) is task:
            del self._chains[job_id]

    async def _handle(self, event: RunFinished, prev: asyncio.Task[None] | None) -> None:
        if prev is not None:
            await asyncio.wait({prev})
        job = event.job
        try:
            own = alert_settings(job, event.run)
            await record_and_alert(
                facts(event, own), self.services, notify=job.notify,
                auto_pause_after=job.auto_pause_after,
                namespace=own.namespace or self.namespace, pause=self.pause,
                scope=own.scope or self.scope, clock=self.clock,
                log_line=lambda line: log.info("job %s: %s", job.id, line),
            )
        except Exception as exc:  # alerts never fail anything else
            log.warning("job %s: recording health / notifying failed: %s", job.id, exc)

    def override_changed(self, event: OverrideChanged) -> asyncio.Task[None] | None:
        """A resume of an auto-paused job: the ``resumed`` notification."""
        if event.job.notify is None or not auto_paused(event.before):
            return None
        task = asyncio.get_running_loop().create_task(self._resumed(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _resumed(self, event: OverrideChanged) -> None:
        try:
            await notify_resumed(event, self.services, namespace=self.namespace,
                                 scope=self.scope, clock=self.clock)
        except Exception as exc:  # alerts never fail anything else
            log.warning("job %s: notifying the resume failed: %s", event.job.id, exc)

    async def drain(self, timeout: float = 10.0) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


def facts(event: RunFinished, own: AlertSettings) -> RunFacts:
    """A finished run as alerts see it, whatever the job's kind: ``own`` (the handler's
    :class:`AlertSettings`) may word its outcome and add to what is said of the run."""
    run = event.run
    ok = run.status is RunStatus.SUCCEEDED
    message = own.message or (
        f"run {run.id} {run.status.value}" if ok
        else f"{run.error or run.status.value} (after {run.attempt} attempt"
             f"{'' if run.attempt == 1 else 's'})")
    return RunFacts(
        job_id=event.job.id, slot=run.slot, instance_id=event.instance_id, ok=ok,
        duration=event.duration, message=message,
        # what every kind says of its run wins over what the kind adds
        run={**(own.run or {}), "ok": ok, "status": run.status.value,
             "attempts": run.attempt, "run_id": run.id, "fencing_token": run.fencing_token},
    )


def install(
    scheduler: Scheduler,
    services: AlertServices | None = None,
    *,
    scope: Scope | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> Unsubscribe:
    """Alerts for the jobs of ``scheduler``; auto-pause goes through
    ``scheduler.pause_async`` (an override with a note, for the whole fleet).

    ``services`` defaults to an :class:`~cronfleet.jobs.http.HttpRuntime` on the
    scheduler's store (health shared by the fleet, the store's vault for secrets in a
    notification policy, the SSRF guard on); its ``scope`` is used when none is given.
    ``cronfleet run`` installs alerts by itself; a library user calls this once."""
    if services is None:
        from cronfleet.jobs.http import HttpRuntime

        services = HttpRuntime(store=scheduler.store)
    if scope is None:
        scope = getattr(services, "scope", None)

    async def pause(job_id: str, note: str) -> bool:
        await scheduler.pause_async(job_id, by=AUTO_PAUSE_BY, note=note)
        return True

    alerts = Alerts(services, pause=pause, scope=scope, namespace=namespace,
                    clock=scheduler.clock)
    off_runs = scheduler.subscribe(alerts)
    off_overrides = scheduler.subscribe(alerts.override_changed, OverrideChanged)

    def unsubscribe() -> None:
        off_runs()
        off_overrides()

    return unsubscribe
