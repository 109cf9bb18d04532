"""Health, auto-pause and notifications for every job kind, from ``RunFinished``."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from cronfleet import FakeClock, Job, RunContext, Scheduler
from cronfleet.alerts import Alerts, AlertSettings, alert_settings, install
from cronfleet.model import NotifyPolicy, RunRecord

from .conftest import T0, Services


class Script:
    """Fails or succeeds as told, one answer per call."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)

    async def __call__(self, ctx: RunContext) -> str:
        if not self.answers.pop(0):
            raise RuntimeError("backend down")
        return "ok"


def alerting(handler: Any, **fields: Any) -> Job:
    return dataclasses.replace(Job.create("60s", handler, id="j"), **fields)


async def tick(clock: FakeClock, s: Scheduler, alerts: Alerts | None = None) -> None:
    clock.advance(60)
    for _ in range(5):
        await asyncio.sleep(0)
        await s.wait_idle()
    if alerts is not None:
        await alerts.drain()


async def test_plain_job_gets_health_notifications_and_auto_pause(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    s = scheduler
    policy = NotifyPolicy(webhook="https://hooks.example/cron")
    s.add_job(alerting(Script(False, True, False, False), notify=policy, auto_pause_after=2))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    for _ in range(4):
        await tick(clock, s, alerts)
    health = await services.health.get("j")
    assert (health.successes, health.failures, health.consecutive_failures) == (1, 3, 2)
    events = [n.event for n in services.notifier.sent]
    assert events == ["failure", "recovery", "failure", "paused"]
    assert services.notifier.sent[-1].message.startswith(
        "job j paused after 2 consecutive failures; last: RuntimeError: backend down")
    first = services.notifier.sent[0]
    assert first.job_id == "j" and first.instance_id == "test-1"
    assert first.slot == "2026-03-02T00:01:00Z"
    assert first.run["status"] == "failed" and "backend down" in first.message
    [(job_id, note)] = services.paused
    assert job_id == "j" and note.startswith("auto-paused after 2 consecutive failures")


async def test_install_pauses_through_the_scheduler(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    s = scheduler
    calls: list[float] = []

    async def failing(ctx: RunContext) -> None:
        calls.append(ctx.slot.timestamp())
        raise RuntimeError("no")

    s.add_job(alerting(failing, auto_pause_after=1))
    install(s, services)
    await s.start()
    await tick(clock, s)
    for _ in range(50):
        if (await s.state_async("j")).enabled_override is False:
            break
        await asyncio.sleep(0.01)
    state = await s.state_async("j")
    assert state.enabled_override is False and state.override_by == "cronfleet (auto-pause)"
    await tick(clock, s)
    assert calls == [T0 + 60]  # paused for the fleet: the next slot is skipped
    assert services.notifier.sent == []


async def test_jobs_without_policies_are_left_alone(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    s = scheduler
    s.add_job(Job.create("60s", Script(False), id="plain"))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    await tick(clock, s, alerts)
    assert services.notifier.sent == [] and services.paused == []
    assert (await services.health.get("plain")).failures == 0


async def test_a_handler_retrying_itself_is_alerted_like_any_other(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    """``applies_job_policies`` (HTTP jobs) is about retry only: alerts are the listener's
    for every kind, once per run."""

    class OwnRetry(Script):
        applies_job_policies = True

    s = scheduler
    s.add_job(alerting(OwnRetry(False, False), auto_pause_after=2,
                       notify=NotifyPolicy(webhook="https://hooks.example/cron")))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    for _ in range(2):
        await tick(clock, s, alerts)
    health = await services.health.get("j")
    assert (health.failures, health.consecutive_failures) == (2, 2)
    assert [n.event for n in services.notifier.sent] == ["failure", "paused"]
    assert [job_id for job_id, _ in services.paused] == ["j"]


class Settled(Script):
    """A job kind that supplies its alert settings (as HTTP jobs do)."""

    def __init__(self, *answers: bool) -> None:
        super().__init__(*answers)
        self.asked: list[RunRecord | None] = []

    def alert_settings(self, run: RunRecord | None) -> AlertSettings:
        self.asked.append(run)
        if run is None:
            return AlertSettings(namespace="team-a")
        return AlertSettings(namespace="team-a", message=f"my words for {run.status.value}",
                             run={"key": f"k-{run.slot:%H%M}", "status": "ignored"})


async def test_a_job_kind_supplies_what_its_alerts_say(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    s = scheduler
    handler = Settled(False)
    s.add_job(alerting(handler, notify=NotifyPolicy(webhook="https://hooks.example/cron")))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    await tick(clock, s, alerts)
    [note] = services.notifier.sent
    assert note.message == "my words for failed"
    # what every kind says of its run wins over what the kind adds
    assert note.run["key"] == "k-0001" and note.run["status"] == "failed"
    assert note.run["attempts"] == 1 and note.run["ok"] is False
    [run] = handler.asked
    assert run is not None and run.job_id == "j" and run.error == "RuntimeError: backend down"
    assert alert_settings(s.get_job("j")).namespace == "team-a"


async def test_failing_alert_settings_fall_back_to_the_defaults(
    scheduler: Scheduler, clock: FakeClock, services: Services,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Script):
        def alert_settings(self, run: RunRecord | None) -> AlertSettings:
            raise KeyError("nope")

    s = scheduler
    s.add_job(alerting(Broken(False), notify=NotifyPolicy(webhook="https://hooks.example/c")))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    await tick(clock, s, alerts)
    [note] = services.notifier.sent
    assert note.message == "RuntimeError: backend down (after 1 attempt)"
    assert "job j: reading its alert settings failed" in caplog.text
