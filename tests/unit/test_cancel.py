"""Stopping background tasks (cronfleet/cancel.py): a task that goes on after its
cancellation -- as one does when Python 3.11's ``wait_for`` loses it inside a library --
is cancelled again until it ends."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cronfleet.cancel import cancel_and_wait


async def test_a_task_that_lost_its_cancellation_is_cancelled_again(
        caplog: pytest.LogCaptureFixture) -> None:
    reached = asyncio.Event()
    cancels = 0

    async def loses_one() -> None:
        nonlocal cancels
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancels += 1  # lost: goes on, and waits with no timeout
        reached.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancels += 1
            raise

    plain = asyncio.create_task(asyncio.sleep(60), name="plain")
    task = asyncio.create_task(loses_one(), name="listener")
    await asyncio.sleep(0)
    caplog.set_level(logging.INFO, "cronfleet")
    await asyncio.wait_for(cancel_and_wait([plain, task], retry=0.05), 5)
    assert task.cancelled() and plain.cancelled()
    assert reached.is_set() and cancels == 2
    said = [r.getMessage() for r in caplog.records]
    assert said == ["cronfleet: listener went on after its cancellation; cancelling it "
                    "again every 0.05 s until it ends"]


async def test_what_the_tasks_raised_is_retrieved_and_ended_ones_are_left_alone() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    finished = asyncio.create_task(asyncio.sleep(0, "done"))
    await asyncio.sleep(0.01)
    assert failed.done() and finished.done()
    await cancel_and_wait([failed, finished])
    assert not finished.cancelled() and finished.result() == "done"
    # retrieved: no "Task exception was never retrieved" when it is collected
    assert failed._log_traceback is False  # type: ignore[attr-defined]
    await cancel_and_wait([])
