"""Attempts are records of the run numbered 1..n: an HTTP run with 4 attempts is attempt
4 with four records, a retried handler's 3 attempts are three records; /metrics counts
them by outcome (cronfleet_attempts_total)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cronfleet import Job, RunContext, Scheduler
from cronfleet.attempts import attempts_of
from cronfleet.jobs.http import HttpJob, HttpRuntime
from cronfleet.metrics import render
from cronfleet.model import RetryPolicy

from .conftest import Reply, Server


async def test_an_http_run_of_four_attempts(server: Server, runtime: HttpRuntime,
                                            tmp_path: Path) -> None:
    server.replies = [Reply(503, "busy"), Reply(503, "busy"), Reply(502, "gateway"),
                      Reply(200, "fine")]
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    job = HttpJob(server.url(), runtime=runtime,
                  retry=RetryPolicy(attempts=4, backoff="fixed", delay=1))
    s.add_job(job.job("@daily", id="ping"))
    async with s:
        run = await s.trigger_async("ping", wait=True)
        assert run.id is not None
        stored = await s.get_run_async(run.id)
    assert stored is not None and stored.status.value == "succeeded"
    assert stored.attempt == 4  # the last attempt's number, not 1
    tried = attempts_of(stored)
    assert [a.number for a in tried] == [1, 2, 3, 4]
    assert [a.outcome for a in tried] == ["failed", "failed", "failed", "succeeded"]
    assert [(a.response or {}).get("status") for a in tried] == [503, 503, 502, 200]
    assert [a.retry_in for a in tried] == [1, 1, 1, None]
    assert tried[0].error == "status 503 is not 2xx" and tried[3].error is None
    assert all(a.started_at is not None and a.finished_at is not None
               and a.started_at <= a.finished_at for a in tried)
    assert len(server.requests) == 4  # counted on the receiving side
    assert s.stats.attempts == {"failed": 3, "succeeded": 1}
    text = render(s).decode()
    assert 'cronfleet_attempts_total{outcome="failed"} 3.0' in text
    assert 'cronfleet_attempts_total{outcome="succeeded"} 1.0' in text


async def test_a_retried_handler_run_of_three_attempts(tmp_path: Path) -> None:
    calls: list[int] = []

    async def flaky(ctx: RunContext) -> int:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise RuntimeError(f"boom {len(calls)}")
        return ctx.attempt

    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(dataclasses.replace(Job.create("@daily", flaky, id="j"),
                                  retry=RetryPolicy(attempts=3, backoff="fixed", delay=0)))
    async with s:
        run = await s.trigger_async("j", wait=True)
        assert run.id is not None
        stored = await s.get_run_async(run.id)
    assert calls == [1, 2, 3]
    assert stored is not None and stored.attempt == 3
    tried = attempts_of(stored)
    assert [a.number for a in tried] == [1, 2, 3]
    assert [a.outcome for a in tried] == ["failed", "failed", "succeeded"]
    assert [a.error for a in tried] == ["RuntimeError: boom 1", "RuntimeError: boom 2", None]
    assert tried[0].started_at == stored.started_at and tried[2].response is None
    assert s.stats.attempts == {"failed": 2, "succeeded": 1}


async def test_a_run_tried_once_is_one_attempt(tmp_path: Path) -> None:
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(Job.create("@daily", lambda ctx: {"rows": 3}, id="once"))
    async with s:
        run = await s.trigger_async("once", wait=True)
    [only] = attempts_of(run)
    assert (only.number, only.outcome, only.error) == (1, "succeeded", None)
    assert s.stats.attempts == {"succeeded": 1}


async def test_a_manual_runs_idempotency_key_has_milliseconds_at_most(
        server: Server, runtime: HttpRuntime, tmp_path: Path) -> None:
    import re

    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(HttpJob(server.url(), runtime=runtime).job("@daily", id="ping"))
    async with s:
        run = await s.trigger_async("ping", wait=True)
    key = run.result["idempotency_key"]
    assert re.fullmatch(r"ping:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z", key), key
    seen = server.requests[0].headers
    assert seen["Idempotency-Key"] == key
    assert key == f"ping:{seen['X-Cronfleet-Slot']}"
