"""Notifications for HTTP jobs: on failure (after retries are exhausted), on recovery (the
first success after a notified failure) and optionally on every success, to a generic JSON
webhook, a Slack-compatible webhook and/or email over SMTP.

Which events a run produces is decided from the job's shared health row (see
:mod:`cronfleet.store.side`) *before and after* the run, so each transition is notified
once across the fleet: the failure when the streak reaches ``after_failures``, the
recovery when a streak that was notified ends. A failing channel is logged and retried a
little (``attempts`` with a short backoff); it never fails the job.
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

from cronfleet.model import EVENTS, EmailSettings, NotifyPolicy

if TYPE_CHECKING:
    import httpx

    from cronfleet.secrets import Redactor
    from cronfleet.store.side import JobHealth

__all__ = [
    "EVENTS",
    "EmailSettings",
    "Notification",
    "Notifier",
    "NotifyPolicy",
    "events_for",
]

log = logging.getLogger("cronfleet.notify")



def events_for(policy: NotifyPolicy, before: JobHealth, after: JobHealth) -> list[str]:
    """What one finished run announces, from the job's health before and after it."""
    if after.last_outcome == "failed":
        if "failure" in policy.on and after.consecutive_failures == policy.after_failures:
            return ["failure"]
        return []
    out = []
    if "recovery" in policy.on and before.consecutive_failures >= policy.after_failures:
        out.append("recovery")
    if "success" in policy.on:
        out.append("success")
    return out


@dataclass(frozen=True)
class Notification:
    event: str
    job_id: str
    slot: str
    instance_id: str
    message: str  # one line, secrets already redacted
    health: dict[str, Any]
    run: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return {"event": self.event, "job_id": self.job_id, "slot": self.slot,
                "instance_id": self.instance_id, "message": self.message,
                "health": self.health, "run": self.run}

    @property
    def title(self) -> str:
        verb = {"failure": "failed", "recovery": "recovered", "success": "succeeded",
                "paused": "paused", "resumed": "resumed"}[self.event]
        return f"cronfleet: job {self.job_id} {verb}"


Sleep = Callable[[float], Awaitable[None]]
SmtpSend = Callable[[EmailSettings, EmailMessage, str | None], None]


def _smtp_send(settings: EmailSettings, message: EmailMessage, password: str | None) -> None:
    cls = smtplib.SMTP_SSL if settings.ssl else smtplib.SMTP
    with cls(settings.host, settings.port, timeout=settings.timeout) as smtp:
        if settings.starttls and not settings.ssl:
            smtp.starttls(context=ssl.create_default_context())
        if settings.username:
            smtp.login(settings.username, password or "")
        smtp.send_message(message)


class Notifier:
    """Delivers notifications; never raises."""

    def __init__(self, *, sleep: Sleep | None = None, attempts: int = 3, delay: float = 1.0,
                 timeout: float = 10.0, smtp_send: SmtpSend | None = None) -> None:
        self.sleep: Sleep = sleep or asyncio.sleep
        self.attempts = attempts
        self.delay = delay
        self.timeout = timeout
        self.smtp_send: SmtpSend = smtp_send or _smtp_send

    async def deliver(self, policy: NotifyPolicy, note: Notification, *,
                      client: httpx.AsyncClient, secrets: dict[str, str],
                      redact: Redactor) -> dict[str, str | None]:
        """Send ``note`` on every channel of ``policy``: ``{channel: None or error}``."""
        from cronfleet.secrets import expand

        results: dict[str, str | None] = {}
        for channel in policy.channels:
            async def send(channel: str = channel) -> None:
                if channel == "webhook":
                    assert policy.webhook is not None
                    await self._post(client, expand(policy.webhook, secrets), note.payload())
                elif channel == "slack":
                    assert policy.slack is not None
                    await self._post(client, expand(policy.slack, secrets),
                                     {"text": _slack_text(note)})
                else:
                    assert policy.email is not None
                    await self._email(policy.email, note, secrets)

            results[channel] = await self._retry(channel, note, send, redact)
        return results

    async def _retry(self, channel: str, note: Notification,
                     send: Callable[[], Awaitable[None]], redact: Redactor) -> str | None:
        error = None
        for n in range(1, self.attempts + 1):
            try:
                await asyncio.wait_for(send(), self.timeout)
                return None
            except Exception as exc:
                text = str(exc)
                error = redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
                log.warning("job %s: %s notification via %s failed (attempt %d/%d): %s",
                            note.job_id, note.event, channel, n, self.attempts, error)
            if n < self.attempts:
                await self.sleep(self.delay * 2 ** (n - 1))
        return error

    async def _post(self, client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> None:
        response = await client.post(url, json=payload, timeout=self.timeout,
                                     follow_redirects=False)
        if not 200 <= response.status_code <= 299:
            raise RuntimeError(f"HTTP {response.status_code}")

    async def _email(self, settings: EmailSettings, note: Notification,
                     secrets: dict[str, str]) -> None:
        from cronfleet.secrets import expand

        msg = EmailMessage()
        msg["Subject"] = note.title
        msg["From"] = settings.sender
        msg["To"] = ", ".join(settings.to)
        health = note.health
        msg.set_content(
            f"{note.message}\n\n"
            f"job: {note.job_id}\nslot: {note.slot}\nevent: {note.event}\n"
            f"consecutive failures: {health.get('consecutive_failures')}\n"
            f"successes / failures: {health.get('successes')} / {health.get('failures')}\n"
            f"instance: {note.instance_id}\n"
        )
        password = expand(settings.password, secrets) if settings.password else None
        await asyncio.to_thread(self.smtp_send, settings, msg, password)


def _slack_text(note: Notification) -> str:
    icon = {"failure": ":red_circle:", "recovery": ":large_green_circle:",
            "success": ":white_check_mark:", "paused": ":double_vertical_bar:",
            "resumed": ":arrow_forward:"}[note.event]
    streak = note.health.get("consecutive_failures") or 0
    extra = f" ({streak} consecutive failures)" if note.event == "failure" and streak > 1 else ""
    return f"{icon} {note.title}{extra}: {note.message}"


def policy_texts(policy: NotifyPolicy) -> Sequence[str | None]:
    """The texts of a policy that may reference ``${secrets.NAME}``."""
    return [policy.webhook, policy.slack, policy.email.password if policy.email else None]
