"""Job health, auto-pause and notifications (webhook, Slack, SMTP via aiosmtpd)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from cronfleet import HttpJob, RunContext, TriggeredBy
from cronfleet.jobs.http import HttpJobFailed, HttpRuntime
from cronfleet.notify import EmailSettings, NotifyPolicy
from cronfleet.secrets import KEY_ENV, Keyring, Vault, generate_key
from cronfleet.store.memory_side import MemoryHealthStore, MemorySecretStore

from .conftest import Reply, Server, Sleeps

HOOK_TOKEN = "hook-token-abcdef-123456"


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
    yield s
    s.close()


def ctx(n: int) -> RunContext:
    return RunContext(job_id="ping", slot=datetime(2026, 3, 2, tzinfo=UTC) + timedelta(hours=n),
                      triggered_by=TriggeredBy.SCHEDULE, instance_id="test", fencing_token=n,
                      config={})


async def run(job: HttpJob, n: int) -> dict[str, Any] | None:
    try:
        return await job(ctx(n))
    except HttpJobFailed:
        return None


async def test_notified_once_per_transition(server: Server, hooks: Server, sleeps: Sleeps,
                                            smtp: tuple[Mailbox, int]) -> None:
    box, port = smtp
    vault = Vault(MemorySecretStore(), Keyring.from_env({KEY_ENV: generate_key()}))
    await vault.set("HOOK", HOOK_TOKEN)
    rt = HttpRuntime(allow_private_targets=True, sleep=sleeps, health=MemoryHealthStore(),
                     vault=vault)
    policy = NotifyPolicy(
        after_failures=2,
        webhook=hooks.url("/webhook?token=${secrets.HOOK}"),
        slack=hooks.url("/slack"),
        email=EmailSettings(host="127.0.0.1", port=port, to=("ops@example.com",),
                            sender="cron@example.com"),
    )
    job = HttpJob(server.url(), notify=policy, runtime=rt)
    outcomes = [500, 500, 500, 200, 200, 500, 500, 200]
    server.replies = [Reply(s) for s in outcomes]
    results = [await run(job, i) for i in range(len(outcomes))]
    await rt.aclose()
    webhook = [json.loads(r.body) for r in hooks.requests if r.path.startswith("/webhook")]
    slack = [json.loads(r.body) for r in hooks.requests if r.path == "/slack"]
    assert [w["event"] for w in webhook] == ["failure", "recovery", "failure", "recovery"]
    assert [w["health"]["consecutive_failures"] for w in webhook] == [2, 0, 2, 0]
    assert webhook[0]["job_id"] == "ping" and "failed after 1 attempt: HTTP 500" in \
        webhook[0]["message"]
    assert webhook[0]["run"]["idempotency_key"] == "ping:2026-03-02T01:00:00Z"
    assert len(slack) == 4 and slack[0]["text"].startswith(":red_circle: cronfleet: job ping "
                                                           "failed (2 consecutive failures)")
    assert len(box.messages) == 4
    first = box.messages[0]
    assert first.rcpt_tos == ["ops@example.com"]
    assert b"Subject: cronfleet: job ping failed" in first.content
    assert results[3] is not None and results[3]["notifications"]["recovery"] == {
        "webhook": {"ok": True}, "slack": {"ok": True}, "email": {"ok": True}}
    assert results[4] is not None and "notifications" not in results[4]
    assert results[4]["health"]["successes"] == 2 and results[4]["health"]["failures"] == 3
    assert all(r.headers.get("Idempotency-Key") is None for r in hooks.requests)
    for r in results:
        assert HOOK_TOKEN not in json.dumps(r)


async def test_on_success_and_failing_channel_never_fails_the_job(
        server: Server, hooks: Server, sleeps: Sleeps, caplog: pytest.LogCaptureFixture) -> None:
    rt = HttpRuntime(allow_private_targets=True, sleep=sleeps, health=MemoryHealthStore())
    hooks.default = Reply(500, "hook down")
    job = HttpJob(server.url(), runtime=rt,
                  notify=NotifyPolicy(on=("success",), webhook=hooks.url("/w")))
    result = await job(ctx(0))
    await rt.aclose()
    assert result["ok"] is True
    assert result["notifications"]["success"]["webhook"] == {
        "ok": False, "error": "RuntimeError: HTTP 500"}
    assert len(hooks.requests) == 3 and sleeps.calls == [1.0, 2.0]
    assert "notification via webhook failed (attempt 3/3)" in caplog.text


async def test_auto_pause_is_an_override_with_a_note(server: Server, sleeps: Sleeps,
                                                     tmp_path: Path) -> None:
    from cronfleet.store import open_store

    db = f"sqlite:///{tmp_path / 'cf.db'}"
    rt = HttpRuntime(store=db, allow_private_targets=True, sleep=sleeps)
    server.default = Reply(503, "down")
    job = HttpJob(server.url(), auto_pause_after=3, runtime=rt)
    results = []
    for n in range(4):
        with pytest.raises(HttpJobFailed) as info:
            await job(ctx(n))
        results.append(info.value.result)
    await rt.aclose()
    assert [r.get("auto_paused") for r in results] == [None, None, True, None]
    assert results[3]["health"]["consecutive_failures"] == 4
    store = open_store(db)
    await store.open()
    try:
        state = (await store.read_overrides(["ping"]))["ping"]
    finally:
        await store.close()
    assert state.enabled_override is False
    assert state.override_by == "cronfleet (auto-pause)"
    assert state.override_note is not None and state.override_note.startswith(
        "auto-paused after 3 consecutive failures; last: GET http://127.0.0.1")


async def test_health_is_shared_through_the_store(server: Server, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cf.db'}"
    a, b = HttpRuntime(store=db, allow_private_targets=True), HttpRuntime(
        store=db, allow_private_targets=True)
    server.replies = [Reply(500), Reply(500), Reply(200)]
    await run(HttpJob(server.url(), runtime=a), 0)
    await run(HttpJob(server.url(), runtime=b), 1)
    result = await run(HttpJob(server.url(), runtime=a), 2)
    await a.aclose()
    await b.aclose()
    assert result is not None
    assert result["health"]["failures"] == 2 and result["health"]["successes"] == 1
    assert result["health"]["last_outcome"] == "succeeded"


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="no channel"):
        NotifyPolicy()
    with pytest.raises(ValueError, match="'sometimes' is not one of"):
        NotifyPolicy(on=("sometimes",), webhook="https://x")
    with pytest.raises(ValueError, match="after_failures"):
        NotifyPolicy(after_failures=0, webhook="https://x")
