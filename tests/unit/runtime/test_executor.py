"""The executor's contract: how a handler's end becomes an Outcome, eager start included."""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet.executor import Outcome, Suspended, execute, finish_async, start_async
from cronfleet.model import RunContext, RunStatus, TriggeredBy

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def ctx() -> RunContext:
    return RunContext(
        job_id="j",
        slot=datetime(2026, 1, 1, tzinfo=UTC),
        triggered_by=TriggeredBy.SCHEDULE,
        instance_id="i",
        fencing_token=1,
        config={},
    )


async def run_eager(handler: Any, timeout: float | None = None) -> tuple[Outcome, RunContext, bool]:
    c = ctx()
    first = start_async(handler, c, time.time)
    if isinstance(first, Outcome):
        return first, c, False
    assert isinstance(first, Suspended)
    task = asyncio.get_running_loop().create_task(
        finish_async(first, c, timeout=timeout, now=time.time), context=first.context
    )
    return await task, c, True


async def test_a_handler_that_never_suspends_needs_no_task() -> None:
    async def quick(c: RunContext) -> dict[str, int]:
        return {"n": 1}

    outcome, _, suspended = await run_eager(quick)
    assert not suspended
    assert outcome.status is RunStatus.SUCCEEDED and outcome.result == {"n": 1}


async def test_suspending_handler_continues_and_sees_results() -> None:
    async def waits(c: RunContext) -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, 41)
        value = await fut
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        return value + 1

    outcome, _, suspended = await run_eager(waits)
    assert suspended and outcome.status is RunStatus.SUCCEEDED and outcome.result == 42


async def test_exception_after_an_await_is_a_failure_with_traceback() -> None:
    async def fails(c: RunContext) -> None:
        await asyncio.sleep(0.001)
        raise ValueError("row 7 is bad")

    outcome, c, _ = await run_eager(fails)
    assert outcome.status is RunStatus.FAILED and outcome.error == "ValueError: row 7 is bad"
    assert "Traceback" in c.logs[-1] and "row 7 is bad" in c.logs[-1]


async def test_exception_from_an_awaited_future_reaches_the_handler() -> None:
    async def catches(c: RunContext) -> str:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.005, fut.set_exception, KeyError("k"))
        try:
            await fut
        except KeyError:
            return "handled"
        return "not reached"

    outcome, _, _ = await run_eager(catches)
    assert outcome.result == "handled"


async def test_timeout_cancels_inside_the_handler() -> None:
    cleaned: list[bool] = []

    async def slow(c: RunContext) -> None:
        try:
            await asyncio.sleep(5)
        finally:
            cleaned.append(True)

    outcome, _, _ = await run_eager(slow, timeout=0.05)
    assert outcome.status is RunStatus.TIMED_OUT and cleaned == [True]


async def test_cancellation_reaches_the_handler() -> None:
    seen: list[str] = []

    async def blocked(c: RunContext) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    c = ctx()
    first = start_async(blocked, c, time.time)
    assert isinstance(first, Suspended)
    task = asyncio.get_running_loop().create_task(
        finish_async(first, c, timeout=None, now=time.time), context=first.context
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_handler_context_variables_do_not_leak() -> None:
    async def sets(c: RunContext) -> str:
        VAR.set("inside")
        await asyncio.sleep(0)
        return VAR.get()

    outcome, _, _ = await run_eager(sets)
    assert outcome.result == "inside"
    assert VAR.get() == "unset"


async def test_unserialisable_results_are_kept_as_repr() -> None:
    async def odd(c: RunContext) -> object:
        return {1, 2}

    outcome, _, _ = await run_eager(odd)
    assert outcome.result == "{1, 2}"


async def test_sync_handler_in_thread_and_its_timeout() -> None:
    def slow(c: RunContext) -> str:
        time.sleep(0.2)
        return "late"

    with ThreadPoolExecutor(2) as pool:
        out = await execute(lambda c: "ok", ctx(), timeout=1, threads=pool, now=time.time)
        assert out.status is RunStatus.SUCCEEDED and out.result == "ok"
        c = ctx()
        out = await execute(slow, c, timeout=0.02, threads=pool, now=time.time)
        assert out.status is RunStatus.TIMED_OUT and "abandoned" in c.logs[-1]
