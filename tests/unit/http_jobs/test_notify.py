"""Job health, auto-pause and notifications of HTTP jobs: the alerts listener's, as for
every job kind (no alert code runs inside the HTTP handler).

A real scheduler (a SQLite file, an injected clock) runs an HTTP job against a local test
server, with alerts installed as ``cronfleet run`` installs them (``alerts.install`` with
the HTTP runtime as services). Notifications land in local receivers: the test server's
twin for webhooks and Slack, aiosmtpd for e-mail. What the alerts did is read where a user
reads it: the job's health row, its override, the receivers and the process log; the run's
result holds the request's record only."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from cronfleet import FakeClock, HttpJob, Job, RunContext, Scheduler
from cronfleet.alerts import install
from cronfleet.jobs.http import HttpRuntime
from cronfleet.model import JobState, RetryPolicy, RunRecord, RunStatus
from cronfleet.notify import EmailSettings, NotifyPolicy
from cronfleet.secrets import KEY_ENV, Keyring, Vault, generate_key
from cronfleet.store.factory import open_secret_store
from cronfleet.store.side import JobHealth

from .conftest import Reply, Server, Sleeps

HOOK_TOKEN = "hook-token-abcdef-123456"
T0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
ALERT_KEYS = ("health", "auto_paused", "notifications")


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[Mailbox, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


@pytest.fixture
def hooks() -> Iterator[Server]:
    s = Server()
    s.default = Reply(204, b"")
    yield s
    s.close()


@dataclass
class Fleet:
    """One scheduler with alerts installed, its HTTP runtime (the alerts' services too)."""

    s: Scheduler
    clock: FakeClock
    rt: HttpRuntime
    url: str

    async def start(self, *jobs: Job) -> None:
        for job in jobs:
            self.s.add_job(job)
        install(self.s, self.rt)
        await self.s.start()

    async def tick(self, n: int = 1) -> None:
        """``n`` slots of a 60 s job, each run to its end."""
        for _ in range(n):
            self.clock.advance(60)
            for _ in range(5):
                await asyncio.sleep(0)
                await self.s.wait_idle()

    async def health(self, job_id: str, runs: int) -> JobHealth:
        """The job's health row once ``runs`` runs are recorded in it (the listener works
        after the run is settled, in a task of its own)."""
        for _ in range(500):
            row = await self.rt.health.get(job_id)
            if row.successes + row.failures >= runs:
                return row
            await asyncio.sleep(0.02)
        raise AssertionError(f"{job_id}: {runs} runs never recorded: {row}")

    async def state(self, job_id: str, paused: bool = True) -> JobState:
        for _ in range(500):
            state = await self.s.state_async(job_id)
            if (state.enabled_override is False) == paused:
                return state
            await asyncio.sleep(0.02)
        raise AssertionError(f"{job_id}: never {'paused' if paused else 'resumed'}")

    async def runs(self, job_id: str) -> list[RunRecord]:
        """The job's runs, oldest first."""
        return list(reversed(await self.s.runs_async(job_id, limit=100)))


@pytest.fixture
async def fleet(tmp_path: Path, sleeps: Sleeps) -> AsyncIterator[Fleet]:
    url = f"sqlite:///{tmp_path / 'cf.db'}"
    clock = FakeClock(T0)
    vault = Vault(open_secret_store(url), Keyring.from_env({KEY_ENV: generate_key()}))
    rt = HttpRuntime(store=url, vault=vault, allow_private_targets=True, sleep=sleeps,
                     clock=clock)
    s = Scheduler(store=url, clock=clock, instance_id="test-1")
    yield Fleet(s, clock, rt, url)
    await s.stop()
    await rt.aclose()


def http_job(server: Server, **fields: Any) -> Job:
    runtime = fields.pop("runtime")
    return HttpJob(server.url(), runtime=runtime, **fields).job("60s", id="ping")


def no_alerts_in(runs: list[RunRecord]) -> None:
    for run in runs:
        assert isinstance(run.result, dict) and "attempts" in run.result, run
        assert not set(ALERT_KEYS) & set(run.result), run.result


async def test_notified_once_per_transition(
    fleet: Fleet, server: Server, hooks: Server, smtp: tuple[Mailbox, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    box, port = smtp
    assert fleet.rt.vault is not None
    await fleet.rt.vault.set("HOOK", HOOK_TOKEN, hosts=["127.0.0.1"])
    policy = NotifyPolicy(
        after_failures=2,
        webhook=hooks.url("/webhook?token=${secrets.HOOK}"),
        slack=hooks.url("/slack"),
        email=EmailSettings(host="127.0.0.1", port=port, to=("ops@example.com",),
                            sender="cron@example.com"),
    )
    outcomes = [500, 500, 500, 200, 200, 500, 500, 200]
    server.replies = [Reply(s) for s in outcomes]
    await fleet.start(http_job(server, notify=policy, runtime=fleet.rt))
    with caplog.at_level(logging.INFO, logger="cronfleet"):
        for n in range(1, len(outcomes) + 1):
            await fleet.tick()
            health = await fleet.health("ping", n)
        await fleet.s.stop()  # waits for the listener's last deliveries
    assert (health.successes, health.failures, health.consecutive_failures) == (3, 5, 0)
    webhook = [json.loads(r.body) for r in hooks.requests if r.path.startswith("/webhook")]
    slack = [json.loads(r.body) for r in hooks.requests if r.path == "/slack"]
    assert [w["event"] for w in webhook] == ["failure", "recovery", "failure", "recovery"]
    assert [w["health"]["consecutive_failures"] for w in webhook] == [2, 0, 2, 0]
    first = webhook[0]
    # the run's outcome in the HTTP job's words (alert_settings), not "HttpJobFailed: ..."
    assert first["job_id"] == "ping" and first["instance_id"] == "test-1"
    assert first["message"] == f"GET {server.url()} failed after 1 attempt: HTTP 500"
    assert webhook[1]["message"] == f"GET {server.url()} -> 200"
    runs = await fleet.runs("ping")
    assert [r.status for r in runs] == [RunStatus.FAILED] * 3 + [RunStatus.SUCCEEDED] * 2 + [
        RunStatus.FAILED] * 2 + [RunStatus.SUCCEEDED]
    # what the notification says of the run: every kind's facts, and the HTTP job's own
    # (run_id: None for a run whose row was not written yet when it ended, any kind)
    assert first["run"] == {
        "ok": False, "status": "failed", "attempts": 1, "run_id": first["run"]["run_id"],
        "fencing_token": runs[1].fencing_token, "http_status": 500,
        "idempotency_key": server.requests[1].headers["Idempotency-Key"]}
    assert first["run"]["idempotency_key"] == "ping:2026-03-02T00:02:00Z"
    assert len(slack) == 4 and slack[0]["text"].startswith(":red_circle: cronfleet: job ping "
                                                           "failed (2 consecutive failures)")
    assert len(box.messages) == 4
    assert box.messages[0].rcpt_tos == ["ops@example.com"]
    assert b"Subject: cronfleet: job ping failed" in box.messages[0].content
    assert all(r.path == f"/webhook?token={HOOK_TOKEN}" for r in hooks.requests
               if r.path.startswith("/webhook"))
    assert all(r.headers.get("Idempotency-Key") is None for r in hooks.requests)
    # the run's result is the request's record: the alerts are in the health row, the
    # receivers and the process log
    no_alerts_in(runs)
    assert "job ping: notified recovery: webhook ok, slack ok, email ok" in caplog.text
    assert HOOK_TOKEN not in caplog.text
    for run in runs:
        assert HOOK_TOKEN not in json.dumps(run.result) + "\n".join(run.logs)


async def test_on_success_and_failing_channel_never_fails_the_job(
    fleet: Fleet, server: Server, hooks: Server, sleeps: Sleeps,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks.default = Reply(500, "hook down")
    await fleet.start(http_job(server, runtime=fleet.rt,
                               notify=NotifyPolicy(on=("success",), webhook=hooks.url("/w"))))
    with caplog.at_level(logging.INFO, logger="cronfleet"):
        await fleet.tick()
        await fleet.health("ping", 1)
        await fleet.s.stop()
    [run] = await fleet.runs("ping")
    assert run.status is RunStatus.SUCCEEDED and run.result["ok"] is True
    no_alerts_in([run])
    assert len(hooks.requests) == 3 and sleeps.calls == [1.0, 2.0]
    assert "notification via webhook failed (attempt 3/3)" in caplog.text
    assert "job ping: notified success: webhook failed: RuntimeError: HTTP 500" in caplog.text


async def test_auto_pause_is_an_override_counted_once_per_run(
    fleet: Fleet, server: Server, hooks: Server, sleeps: Sleeps
) -> None:
    """Each run retries itself (2 requests, Retry-After honoured) and counts as one failure:
    the job is paused after exactly 3 runs, once, and the pause is announced once."""
    server.default = Reply(503, "down", headers={"Retry-After": "7"})
    await fleet.start(http_job(server, runtime=fleet.rt, auto_pause_after=3,
                               retry=RetryPolicy(attempts=2, delay=1.0),
                               notify=NotifyPolicy(on=("success",),
                                                   webhook=hooks.url("/hook"))))
    for n in range(1, 4):
        await fleet.tick()
        health = await fleet.health("ping", n)
    state = await fleet.state("ping")
    assert (health.failures, health.consecutive_failures) == (3, 3)
    assert state.override_by == "cronfleet (auto-pause)"
    assert state.override_note is not None and state.override_note.startswith(
        f"auto-paused after 3 consecutive failures; last: GET {server.url()} failed after "
        "2 attempts: HTTP 503")
    await fleet.tick(2)  # paused for the fleet: nothing more is sent
    await fleet.s.stop()
    assert len(server.requests) == 6 and sleeps.calls == [7.0, 7.0, 7.0]
    runs = await fleet.runs("ping")
    ran = [r for r in runs if r.status is not RunStatus.SKIPPED]
    assert [(r.status, len(r.result["attempts"])) for r in ran] == [(RunStatus.FAILED, 2)] * 3
    no_alerts_in(ran)
    assert (await fleet.rt.health.get("ping")).failures == 3
    paused = [json.loads(r.body) for r in hooks.requests]
    assert [p["event"] for p in paused] == ["paused"]
    assert paused[0]["message"].startswith("job ping paused after 3 consecutive failures")
    assert paused[0]["run"]["http_status"] == 503


async def test_a_failed_self_retrying_run_records_its_last_attempt(
    fleet: Fleet, server: Server, hooks: Server
) -> None:
    server.default = Reply(503, "down")
    await fleet.start(http_job(server, runtime=fleet.rt, retry=RetryPolicy(attempts=2),
                               notify=NotifyPolicy(webhook=hooks.url("/hook"))))
    await fleet.tick()
    await fleet.health("ping", 1)
    await fleet.s.stop()
    [run] = await fleet.runs("ping")
    [failure] = [json.loads(r.body) for r in hooks.requests]
    assert (run.attempt, failure["run"]["attempts"]) == (2, 2)


async def test_resume_of_an_auto_paused_http_job_is_announced(
    fleet: Fleet, server: Server, hooks: Server
) -> None:
    server.default = Reply(500)
    await fleet.start(http_job(server, runtime=fleet.rt, auto_pause_after=1,
                               notify=NotifyPolicy(on=("success",),
                                                   webhook=hooks.url("/hook"))))
    await fleet.tick()
    await fleet.state("ping")
    await fleet.s.resume_async("ping", by="alice")
    await fleet.s.stop()
    events = [json.loads(r.body) for r in hooks.requests]
    assert [e["event"] for e in events] == ["paused", "resumed"]
    assert events[1]["message"].startswith("job ping resumed by alice; it was auto-paused")


async def test_deliveries_follow_the_jobs_own_target_policy(
    fleet: Fleet, server: Server, hooks: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The runtime lets private targets through, the HTTP job does not: its webhook on
    127.0.0.1 is refused by the guard, as its request is; a handler job's is sent."""
    hook = NotifyPolicy(webhook=hooks.url("/hook"))

    async def failing(ctx: RunContext) -> None:
        raise RuntimeError("backend down")

    guarded = HttpJob(server.url(), runtime=fleet.rt, allow_private_targets=False,
                      notify=hook).job("60s", id="guarded")
    await fleet.start(guarded, Job.create("60s", failing, id="plain", notify=hook))
    with caplog.at_level(logging.INFO, logger="cronfleet"):
        await fleet.tick()
        await fleet.health("guarded", 1)
        await fleet.health("plain", 1)
        await fleet.s.stop()
    assert server.requests == []  # the job's own request was refused too
    assert [json.loads(r.body)["job_id"] for r in hooks.requests] == ["plain"]
    assert "job guarded: notified failure: webhook failed: UnsafeTarget: refusing " \
           "127.0.0.1: 127.0.0.1 is a loopback address" in caplog.text


async def test_notification_secrets_are_read_in_the_jobs_namespace(
    fleet: Fleet, server: Server, hooks: Server
) -> None:
    assert fleet.rt.vault is not None
    await fleet.rt.vault.set("HOOK", HOOK_TOKEN, namespace="team-a", hosts=["127.0.0.1"])
    await fleet.start(http_job(server, runtime=fleet.rt, namespace="team-a",
                               notify=NotifyPolicy(on=("success",), webhook=hooks.url(
                                   "/hook?token=${secrets.HOOK}"))))
    await fleet.tick()
    await fleet.health("ping", 1)
    await fleet.s.stop()
    [hook] = hooks.requests
    assert hook.path == f"/hook?token={HOOK_TOKEN}"
    assert json.loads(hook.body)["event"] == "success"


async def test_health_is_shared_through_the_store(
    fleet: Fleet, server: Server, tmp_path: Path
) -> None:
    """Two processes in turn (each its own scheduler and runtime) keep one health row."""
    server.replies = [Reply(500), Reply(500), Reply(200)]
    await fleet.start(http_job(server, runtime=fleet.rt, auto_pause_after=10))
    await fleet.tick(2)
    await fleet.health("ping", 2)
    await fleet.s.stop()
    rt = HttpRuntime(store=fleet.url, allow_private_targets=True)
    other = Fleet(Scheduler(store=fleet.url, clock=fleet.clock, instance_id="test-2"),
                  fleet.clock, rt, fleet.url)
    try:
        await other.start(http_job(server, runtime=rt, auto_pause_after=10))
        await other.tick()
        row = await other.health("ping", 3)
    finally:
        await other.s.stop()
        await rt.aclose()
    assert (row.failures, row.successes, row.consecutive_failures) == (2, 1, 0)
    assert row.last_outcome == "succeeded"


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="no channel"):
        NotifyPolicy()
    with pytest.raises(ValueError, match="'sometimes' is not one of"):
        NotifyPolicy(on=("sometimes",), webhook="https://x")
    with pytest.raises(ValueError, match="after_failures"):
        NotifyPolicy(after_failures=0, webhook="https://x")


async def test_a_run_cut_by_the_jobs_timeout_is_a_failure_for_its_alerts(
    fleet: Fleet, server: Server, hooks: Server
) -> None:
    """The handler is cancelled by the job's ``timeout`` (here while it waits to retry):
    the listener still records the failure and announces it, as for every kind."""

    async def forever(seconds: float) -> None:
        await asyncio.Event().wait()

    server.default = Reply(503, "down")
    rt = HttpRuntime(allow_private_targets=True, sleep=forever)
    job = HttpJob(server.url(), runtime=rt, retry=RetryPolicy(attempts=2),
                  notify=NotifyPolicy(webhook=hooks.url("/hook"))).job(
                      "60s", id="ping", timeout=0.5)
    try:
        await fleet.start(job)
        await fleet.tick()
        health = await fleet.health("ping", 1)
        await fleet.s.stop()
    finally:
        await rt.aclose()
    [run] = await fleet.runs("ping")
    assert run.status is RunStatus.TIMED_OUT
    assert (health.failures, health.consecutive_failures) == (1, 1)
    [failure] = [json.loads(r.body) for r in hooks.requests]
    assert failure["event"] == "failure" and failure["run"]["status"] == "timed_out"
    assert failure["message"].startswith("timed out after 0.5s")
