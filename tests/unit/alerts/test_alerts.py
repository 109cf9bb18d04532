"""Health, auto-pause and notifications for plain handler jobs, from ``RunFinished``."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from cronfleet import FakeClock, Job, RunContext, Scheduler
from cronfleet.alerts import Alerts, install
from cronfleet.model import NotifyPolicy

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


async def test_jobs_without_policies_or_applying_their_own_are_left_alone(
    scheduler: Scheduler, clock: FakeClock, services: Services
) -> None:
    class OwnPolicies(Script):
        applies_job_policies = True

    s = scheduler
    s.add_job(Job.create("60s", Script(False), id="plain"))
    s.add_job(dataclasses.replace(
        Job.create("60s", OwnPolicies(False), id="http-like"), auto_pause_after=1,
        notify=NotifyPolicy(webhook="https://hooks.example/cron")))
    alerts = Alerts(services)
    s.subscribe(alerts)
    await s.start()
    await tick(clock, s, alerts)
    assert services.notifier.sent == [] and services.paused == []
    assert (await services.health.get("plain")).failures == 0
