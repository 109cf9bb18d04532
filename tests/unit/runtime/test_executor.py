"""The executor's contract: how a handler's end becomes an Outcome."""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet.model import RunContext, RunStatus, TriggeredBy
from cronfleet.runtime.executor import Outcome, execute

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")
POOL = ThreadPoolExecutor(2)


def ctx() -> RunContext:
    return RunContext(
        job_id="j",
        slot=datetime(2026, 1, 1, tzinfo=UTC),
        triggered_by=TriggeredBy.SCHEDULE,
        instance_id="i",
        fencing_token=1,
        config={},
    )


async def run(handler: Any, timeout: float | None = None) -> tuple[Outcome, RunContext]:
    c = ctx()
    task = asyncio.get_running_loop().create_task(
        execute(handler, c, timeout=timeout, threads=POOL, now=time.time)
    )
    return await task, c


async def test_result_of_a_quick_handler() -> None:
    async def quick(c: RunContext) -> dict[str, int]:
        return {"n": 1}

    outcome, _ = await run(quick)
    assert outcome.status is RunStatus.SUCCEEDED and outcome.result == {"n": 1}


async def test_suspending_handler_keeps_one_task_throughout() -> None:
    # libraries such as anyio (httpx) tie cancel scopes to the current task
    async def waits(c: RunContext) -> bool:
        before = asyncio.current_task()
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, 41)
        await fut
        await asyncio.sleep(0)
        return asyncio.current_task() is before

    outcome, _ = await run(waits)
    assert outcome.status is RunStatus.SUCCEEDED and outcome.result is True


async def test_exception_after_an_await_is_a_failure_with_traceback() -> None:
    async def fails(c: RunContext) -> None:
        await asyncio.sleep(0.001)
        raise ValueError("row 7 is bad")

    outcome, c = await run(fails)
    assert outcome.status is RunStatus.FAILED and outcome.error == "ValueError: row 7 is bad"
    assert "Traceback" in c.logs[-1] and "row 7 is bad" in c.logs[-1]


async def test_a_failure_keeps_the_result_its_exception_carries() -> None:
    class Failed(Exception):
        def __init__(self, message: str) -> None:
            super().__init__(message)
            self.result = {"attempts": [{"status": 503}]}

    async def fails(c: RunContext) -> None:
        raise Failed("3 attempts failed")

    outcome, _ = await run(fails)
    assert outcome.status is RunStatus.FAILED
    assert outcome.result == {"attempts": [{"status": 503}]}


async def test_timeout_cancels_inside_the_handler() -> None:
    cleaned: list[bool] = []

    async def slow(c: RunContext) -> None:
        try:
            await asyncio.sleep(5)
        finally:
            cleaned.append(True)

    outcome, _ = await run(slow, timeout=0.05)
    assert outcome.status is RunStatus.TIMED_OUT and cleaned == [True]
    assert outcome.error == "timed out after 0.05s"


async def test_cancellation_reaches_the_handler() -> None:
    seen: list[str] = []

    async def blocked(c: RunContext) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.get_running_loop().create_task(
        execute(blocked, ctx(), timeout=None, threads=POOL, now=time.time)
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_handler_context_variables_stay_in_its_task() -> None:
    async def sets(c: RunContext) -> str:
        VAR.set("inside")
        await asyncio.sleep(0)
        return VAR.get()

    outcome, _ = await run(sets)
    assert outcome.result == "inside"
    assert VAR.get() == "unset"


async def test_unserialisable_results_are_kept_as_repr() -> None:
    async def odd(c: RunContext) -> object:
        return {1, 2}

    outcome, _ = await run(odd)
    assert outcome.result == "{1, 2}"


async def test_sync_handler_in_thread_and_its_timeout() -> None:
    def slow(c: RunContext) -> str:
        time.sleep(0.2)
        return "late"

    out = await execute(lambda c: "ok", ctx(), timeout=1, threads=POOL, now=time.time)
    assert out.status is RunStatus.SUCCEEDED and out.result == "ok"
    c = ctx()
    out = await execute(slow, c, timeout=0.02, threads=POOL, now=time.time)
    assert out.status is RunStatus.TIMED_OUT and "abandoned" in c.logs[-1]
