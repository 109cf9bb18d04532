"""Handler retry: ``Job.retry`` runs a failed handler again with backoff inside the same
slot; every attempt is in the run's log, ``attempt`` is the last one's number, and the
outcome is the last attempt's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from cronfleet import FakeClock, Job, RunContext, RunStatus, Scheduler
from cronfleet.model import RetryPolicy
from cronfleet.runtime.events import RunFinished, RunRetried

from .conftest import STORE_KINDS, T0, advance, settle

Make = Callable[..., Scheduler]


class Flaky:
    """Fails its first ``fails`` calls, then returns the attempt number."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.attempts: list[int] = []

    async def __call__(self, ctx: RunContext) -> int:
        self.attempts.append(ctx.attempt)
        if len(self.attempts) <= self.fails:
            raise RuntimeError(f"boom {len(self.attempts)}")
        return ctx.attempt


def with_retry(job: Job, **policy: Any) -> Job:
    return dataclasses.replace(job, retry=RetryPolicy(**policy))


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_retried_until_it_succeeds_every_attempt_recorded(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    flaky = Flaky(fails=2)
    s.add_job(with_retry(Job.create("60s", flaky, id="j"), attempts=3, backoff="fixed",
                         delay=2))
    finished: list[RunFinished] = []
    retried: list[RunRetried] = []
    s.subscribe(finished.append)
    s.subscribe(retried.append, RunRetried)
    await s.start()
    running.append(s)
    await advance(clock, 60, s)
    assert flaky.attempts == [1]  # the backoff waits on the scheduler's clock
    await advance(clock, 4, s)
    assert flaky.attempts == [1, 2, 3]
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SUCCEEDED and run.result == 3 and run.attempt == 3
    assert run.slot.timestamp() == T0 + 60
    assert run.started_at is not None and run.started_at.timestamp() == T0 + 60
    text = "\n".join(run.logs)
    assert "attempt 1/3 failed" in text and "RuntimeError: boom 1" in text
    assert "attempt 2/3 failed" in text and "retrying in 2s" in text
    assert "attempt 3/3 succeeded" in text
    assert [e.attempt for e in retried] == [1, 2] and [e.delay for e in retried] == [2, 2]
    assert [e.run.attempt for e in finished] == [3] and finished[0].ok
    assert s.stats.retries == 2


async def test_the_last_attempt_decides(make: Make, clock: FakeClock, running: list) -> None:
    s = make()
    calls: list[int] = []

    def always_fails(ctx: RunContext) -> None:  # a sync handler, in the thread pool
        calls.append(ctx.attempt)
        raise ValueError(f"no {ctx.attempt}")

    s.job("60s", id="j", retry=RetryPolicy(attempts=2, delay=0))(always_fails)
    await s.start()
    running.append(s)
    await advance(clock, 60, s)
    await settle(s)
    assert calls == [1, 2]
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.FAILED and run.attempt == 2
    assert run.error == "ValueError: no 2"


async def test_handlers_with_their_own_retry_are_not_retried_again(
    make: Make, clock: FakeClock, running: list
) -> None:
    """HTTP jobs retry per request themselves (``applies_job_policies``)."""

    class OwnRetry(Flaky):
        applies_job_policies = True

    s = make()
    own = OwnRetry(fails=5)
    s.add_job(with_retry(Job.create("60s", own, id="j"), attempts=3, delay=0))
    await s.start()
    running.append(s)
    await advance(clock, 60, s)
    assert own.attempts == [1]
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.FAILED and run.attempt == 1


def test_the_lease_covers_every_attempt() -> None:
    async def h(ctx: RunContext) -> None:
        return None

    job = Job.create("60s", h, id="j", timeout=10)
    assert job.lease_seconds == 40
    retried = with_retry(job, attempts=3, backoff="exponential", delay=5)
    assert retried.lease_seconds == 3 * 10 + (5 + 10) + 30
