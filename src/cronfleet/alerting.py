"""The one implementation of a finished run's alerts: health rows, auto-pause and
notifications (:func:`record_and_alert`), for every job kind.

One caller decides when: the listener of :mod:`cronfleet.alerts` (the scheduler's
``RunFinished`` events), for handler, command and HTTP jobs alike. What a job kind needs
of its alerts it supplies itself, through its handler's ``alert_settings(run)``
(:class:`AlertSettings`: the secrets namespace of its notification policy, the scope its
deliveries run in, what a notification says of its run); HTTP jobs do
(:class:`~cronfleet.jobs.http.HttpJob`). This module imports neither the listener nor a
job kind: both import it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cronfleet.clock import Clock, SystemClock, from_ts, slot_text
from cronfleet.model import JobState, NotifyPolicy
from cronfleet.secrets import DEFAULT_NAMESPACE, Redactor, SecretError, references

if TYPE_CHECKING:
    import httpx

    from cronfleet.model import Job, RunRecord
    from cronfleet.notify import Notifier
    from cronfleet.runtime.events import OverrideChanged
    from cronfleet.secrets import Vault
    from cronfleet.store.side import HealthStore

__all__ = ["AUTO_PAUSE_BY", "AlertServices", "AlertSettings", "HasAlertSettings", "Pause",
           "RunFacts", "Scope", "alert_settings", "auto_paused", "notify_resumed",
           "record_and_alert"]

log = logging.getLogger("cronfleet")
SYSTEM_CLOCK: Clock = SystemClock()  # when the caller gives none

AUTO_PAUSE_BY = "cronfleet (auto-pause)"
"""Who the auto-pause's override is by (its resume is announced)."""

Scope = Callable[[Redactor], AbstractContextManager[Any]]
Pause = Callable[[str, str], Awaitable[bool]]


class AlertServices(Protocol):
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


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """What a job kind supplies to its own alerts (its handler's ``alert_settings(run)``);
    None: the listener's default.

    ``namespace``: the secrets namespace of the job's notification policy. ``scope``: wraps
    the deliveries (HTTP jobs: their SSRF policy and the redaction of the client's logs).
    ``run``: facts added to what a notification says of the run (HTTP jobs: the run's
    ``idempotency_key`` and ``http_status``). ``message``: the run's outcome in the job
    kind's words (HTTP jobs: ``GET https://... -> 200``, or the error without its exception
    name, which already counts the attempts)."""

    namespace: str | None = None
    scope: Scope | None = None
    run: Mapping[str, Any] | None = None
    message: str | None = None


@runtime_checkable
class HasAlertSettings(Protocol):
    """A handler that supplies :class:`AlertSettings` (``run`` is None for a resume)."""

    def alert_settings(self, run: RunRecord | None) -> AlertSettings: ...


NO_SETTINGS = AlertSettings()


def alert_settings(job: Job, run: RunRecord | None = None) -> AlertSettings:
    """The settings ``job``'s handler supplies for the alerts of ``run``; the defaults when
    it supplies none, or when supplying them fails (alerts then go on with the defaults)."""
    handler = job.handler
    if not isinstance(handler, HasAlertSettings):
        return NO_SETTINGS
    try:
        return handler.alert_settings(run)
    except Exception as exc:
        log.warning("job %s: reading its alert settings failed: %s", job.id, exc)
        return NO_SETTINGS


def _no_scope(redact: Redactor) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


async def record_and_alert(
    facts: RunFacts,
    services: AlertServices,
    *,
    notify: NotifyPolicy | None,
    auto_pause_after: int | None,
    namespace: str = DEFAULT_NAMESPACE,
    redact: Redactor | None = None,
    log_line: Callable[[str], None] | None = None,
    pause: Pause | None = None,
    scope: Scope | None = None,
    clock: Clock | None = None,
) -> dict[str, Any]:
    """Update the job's shared health; auto-pause; send the notifications it calls for.

    Returns what happened (for the caller's log and tests; a run's result is settled
    before its alerts): ``health`` (the job's health after this run), ``auto_paused``
    (True when this run paused the job) and ``notifications`` (``{event: {channel:
    {"ok": true} or {"ok": false, "error": …}}}``); each notification outcome is also a
    ``log_line``. ``scope`` wraps the deliveries (HTTP jobs: their private-target rule and
    redaction); ``pause`` defaults to ``services.pause``; ``clock`` (the scheduler's)
    dates the health row."""
    out: dict[str, Any] = {}
    if notify is None and auto_pause_after is None:
        return out
    redact = redact or Redactor()
    say = log_line or (lambda line: None)
    before, after = await services.health.record(
        facts.job_id, facts.ok, round(facts.duration, 3), from_ts((clock or SYSTEM_CLOCK).now())
    )
    out["health"] = after.to_dict()
    paused_note = None
    if (not facts.ok and auto_pause_after is not None
            and after.consecutive_failures == auto_pause_after):
        note = (f"auto-paused after {after.consecutive_failures} consecutive failures; "
                f"last: {facts.message}")
        if await (pause or services.pause)(facts.job_id, note[:500]):
            out["auto_paused"] = True
            say(note)
            paused_note = (f"job {facts.job_id} paused after {after.consecutive_failures} "
                           f"consecutive failures; last: {facts.message}")
    if notify is None:
        return out
    from cronfleet.notify import Notification, events_for

    messages = dict.fromkeys(events_for(notify, before, after), facts.message)
    if paused_note is not None:  # on every channel, whatever `on` says
        messages["paused"] = paused_note
    if not messages:
        return out
    notes = [Notification(event=event, job_id=facts.job_id, slot=slot_text(facts.slot),
                          instance_id=facts.instance_id, message=message,
                          health=after.to_dict(), run=dict(facts.run))
             for event, message in messages.items()]
    out["notifications"] = await _deliver(services, notify, notes, namespace, redact,
                                          say, scope)
    return out


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
                         namespace: str = DEFAULT_NAMESPACE, scope: Scope | None = None,
                         clock: Clock | None = None) -> dict[str, Any] | None:
    """A job the auto-pause had paused is resumed (or its override cleared): say so on
    every channel of its ``notify``. None when there is nothing to say. The job's
    :func:`alert_settings` (namespace, scope) win over ``namespace`` and ``scope``."""
    job = event.job
    if job.notify is None or not auto_paused(event.before) or auto_paused(event.after) \
            or event.after.enabled_override is False:
        return None
    from cronfleet.notify import Notification

    own = alert_settings(job)
    namespace = own.namespace or namespace
    scope = own.scope or scope

    health = await services.health.get(job.id)
    paused_at = event.before.override_at
    message = (f"job {job.id} resumed by {event.by or 'an operator'}"
               + (f"; it was auto-paused at {slot_text(paused_at)}" if paused_at else "")
               + (f" ({event.before.override_note})" if event.before.override_note else ""))
    note = Notification(event="resumed", job_id=job.id,
                        slot=slot_text(event.after.override_at
                                      or from_ts((clock or SYSTEM_CLOCK).now())),
                        instance_id="", message=message, health=health.to_dict(),
                        run={})
    redact = Redactor()
    return await _deliver(services, job.notify, [note], namespace, redact,
                          lambda line: log.info("job %s: %s", job.id, line), scope)


