"""Alerts for every job kind: health rows, auto-pause and notifications.

:func:`record_and_alert` is the one implementation: it records a finished run in the
job's shared health, pauses the job for the whole fleet after ``auto_pause_after``
consecutive failures, and sends the notifications its ``notify`` policy calls for.

- Plain handler jobs get it from :class:`Alerts`, a listener of the scheduler's
  :class:`~cronfleet.runtime.events.RunFinished` events (``install(scheduler, services)``).
  It acts only on jobs with ``notify`` or ``auto_pause_after`` (so a burst of jobs without
  them costs one attribute check each), in a task of its own, after the run's row is
  queued: a slow webhook never holds the loop or the run.
- HTTP jobs call it from inside their handler (``HttpJob._after_run``), as before, so the
  health, ``auto_paused`` flag and notifications stay in their run's result; they declare
  ``applies_job_policies`` and the listener leaves them alone (no double alerts).

``services`` is what alerts need from the outside world — an
:class:`~cronfleet.jobs.http.HttpRuntime` provides all of it: ``store`` (a store URL: health
is tracked through it), ``health``, ``notifier``, ``vault`` (secrets referenced by a
notification policy), ``client()`` (the guarded HTTP client) and ``pause``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from cronfleet.clock import slot_text
from cronfleet.model import Job, JobState, NotifyPolicy, RunStatus
from cronfleet.runtime.events import OverrideChanged, RunFinished, Unsubscribe
from cronfleet.secrets import DEFAULT_NAMESPACE, Redactor, SecretError, references

if TYPE_CHECKING:
    import httpx

    from cronfleet.notify import Notifier
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.secrets import Vault
    from cronfleet.store.side import HealthStore

__all__ = ["AUTO_PAUSE_BY", "AlertServices", "Alerts", "RunFacts", "auto_paused", "install",
           "notify_resumed", "record_and_alert"]

log = logging.getLogger("cronfleet")

AUTO_PAUSE_BY = "cronfleet (auto-pause)"
"""Who the auto-pause's override is by (its resume is announced)."""

Scope = Callable[[Redactor], AbstractContextManager[Any]]
Pause = Callable[[str, str], Awaitable[bool]]


class AlertServices(Protocol):
    store: str | None

    @property
    def health(self) -> HealthStore: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def vault(self) -> Vault | None: ...

    def client(self) -> httpx.AsyncClient: ...

    async def pause(self, job_id: str, note: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class RunFacts:
    """One finished run as alerts see it. ``run``: what a notification says of the run."""

    job_id: str
    slot: datetime
    instance_id: str
    ok: bool
    duration: float
    message: str
    run: Mapping[str, Any]


def _no_scope(redact: Redactor) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


async def record_and_alert(
    facts: RunFacts,
    services: AlertServices,
    into: dict[str, Any],
    *,
    notify: NotifyPolicy | None,
    auto_pause_after: int | None,
    namespace: str = DEFAULT_NAMESPACE,
    redact: Redactor | None = None,
    log_line: Callable[[str], None] | None = None,
    pause: Pause | None = None,
    scope: Scope | None = None,
) -> None:
    """Update the job's shared health; auto-pause; send the notifications it calls for.

    What happened is written into ``into`` as it happens: ``health`` (the job's health
    after this run), ``auto_paused`` (True when this run paused the job) and
    ``notifications`` (``{event: {channel: {"ok": true} or {"ok": false, "error": …}}}``).
    ``scope`` wraps the deliveries (HTTP jobs: their private-target rule and redaction);
    ``pause`` defaults to ``services.pause``."""
    if services.store is None and notify is None and auto_pause_after is None:
        return
    redact = redact or Redactor()
    say = log_line or (lambda line: None)
    before, after = await services.health.record(
        facts.job_id, facts.ok, round(facts.duration, 3), datetime.now(UTC)
    )
    into["health"] = after.to_dict()
    paused_note = None
    if (not facts.ok and auto_pause_after is not None
            and after.consecutive_failures == auto_pause_after):
        note = (f"auto-paused after {after.consecutive_failures} consecutive failures; "
                f"last: {facts.message}")
        if await (pause or services.pause)(facts.job_id, note[:500]):
            into["auto_paused"] = True
            say(note)
            paused_note = (f"job {facts.job_id} paused after {after.consecutive_failures} "
                           f"consecutive failures; last: {facts.message}")
    if notify is None:
        return
    from cronfleet.notify import Notification, events_for

    messages = dict.fromkeys(events_for(notify, before, after), facts.message)
    if paused_note is not None:  # on every channel, whatever `on` says
        messages["paused"] = paused_note
    if not messages:
        return
    notes = [Notification(event=event, job_id=facts.job_id, slot=slot_text(facts.slot),
                          instance_id=facts.instance_id, message=message,
                          health=after.to_dict(), run=dict(facts.run))
             for event, message in messages.items()]
    into["notifications"] = await _deliver(services, notify, notes, namespace, redact,
                                           say, scope)


async def _deliver(services: AlertServices, notify: NotifyPolicy, notes: list[Any],
                   namespace: str, redact: Redactor, say: Callable[[str], None],
                   scope: Scope | None) -> dict[str, Any]:
    """Send each notification on every channel of ``notify`` (secrets of the policy read
    from the vault first): ``{event: {channel: {"ok": ...}}}``, redacted."""
    from dataclasses import replace

    from cronfleet.notify import policy_texts

    refs = references(*policy_texts(notify))
    values: dict[str, str] = {}
    if refs:
        vault = services.vault
        if vault is None:
            raise SecretError("notification settings reference secrets but no vault is "
                              "configured")
        values = await vault.resolve(refs, namespace)
        for v in values.values():
            redact.add(v)
    sent: dict[str, Any] = {}
    with (scope or _no_scope)(redact):
        for note in notes:
            note = replace(note, message=redact(note.message))
            outcome = await services.notifier.deliver(notify, note,
                                                      client=services.client(),
                                                      secrets=values, redact=redact)
            sent[note.event] = {ch: {"ok": True} if err is None
                                else {"ok": False, "error": err}
                                for ch, err in outcome.items()}
            say(f"notified {note.event}: " + ", ".join(
                f"{ch} {'ok' if err is None else 'failed: ' + err}"
                for ch, err in outcome.items()))
    return dict(redact.data(sent))


def auto_paused(state: JobState) -> bool:
    """Is this override the auto-pause's (``auto_pause_after``)?"""
    return state.enabled_override is False and state.override_by == AUTO_PAUSE_BY


async def notify_resumed(event: OverrideChanged, services: AlertServices, *,
                         namespace: str = DEFAULT_NAMESPACE, scope: Scope | None = None
                         ) -> dict[str, Any] | None:
    """A job the auto-pause had paused is resumed (or its override cleared): say so on
    every channel of its ``notify``. None when there is nothing to say."""
    job = event.job
    if job.notify is None or not auto_paused(event.before) or auto_paused(event.after) \
            or event.after.enabled_override is False:
        return None
    from cronfleet.notify import Notification

    health = await services.health.get(job.id)
    paused_at = event.before.override_at
    message = (f"job {job.id} resumed by {event.by or 'an operator'}"
               + (f"; it was auto-paused at {slot_text(paused_at)}" if paused_at else "")
               + (f" ({event.before.override_note})" if event.before.override_note else ""))
    note = Notification(event="resumed", job_id=job.id,
                        slot=slot_text(event.after.override_at or datetime.now(UTC)),
                        instance_id="", message=message, health=health.to_dict(),
                        run={})
    redact = Redactor()
    return await _deliver(services, job.notify, [note], namespace, redact,
                          lambda line: log.info("job %s: %s", job.id, line), scope)


def wants_alerts(job: Job) -> bool:
    """Does the listener act on this job's runs? (jobs that alert themselves do not)."""
    return (job.notify is not None or job.auto_pause_after is not None) and not job.own_policies


class Alerts:
    """A ``RunFinished`` listener doing health, auto-pause and notifications for every job
    that asks for them (``notify`` / ``auto_pause_after``) and does not do it itself."""

    def __init__(
        self,
        services: AlertServices,
        *,
        pause: Pause | None = None,
        scope: Scope | None = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        self.services = services
        self.pause = pause
        self.scope = scope
        self.namespace = namespace
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
        job, run = event.job, event.run
        ok = run.status is RunStatus.SUCCEEDED
        message = (f"run {run.id} {run.status.value}" if ok
                   else f"{run.error or run.status.value} (after {run.attempt} attempt"
                        f"{'' if run.attempt == 1 else 's'})")
        facts = RunFacts(
            job_id=job.id, slot=run.slot, instance_id=event.instance_id, ok=ok,
            duration=event.duration, message=message,
            run={"ok": ok, "status": run.status.value, "attempts": run.attempt,
                 "run_id": run.id, "fencing_token": run.fencing_token},
        )
        out: dict[str, Any] = {}
        try:
            await record_and_alert(
                facts, self.services, out, notify=job.notify,
                auto_pause_after=job.auto_pause_after, namespace=self.namespace,
                pause=self.pause, scope=self.scope,
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
                                 scope=self.scope)
        except Exception as exc:  # alerts never fail anything else
            log.warning("job %s: notifying the resume failed: %s", event.job.id, exc)

    async def drain(self, timeout: float = 10.0) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


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

        services = HttpRuntime(store=scheduler.store.url)
    if scope is None:
        scope = getattr(services, "scope", None)

    async def pause(job_id: str, note: str) -> bool:
        await scheduler.pause_async(job_id, by=AUTO_PAUSE_BY, note=note)
        return True

    alerts = Alerts(services, pause=pause, scope=scope, namespace=namespace)
    off_runs = scheduler.subscribe(alerts)
    off_overrides = scheduler.subscribe(alerts.override_changed, OverrideChanged)

    def unsubscribe() -> None:
        off_runs()
        off_overrides()

    return unsubscribe
