"""Stopping background tasks: cancel them and wait until every one has ended, even when
a library lost the cancellation.

A cancellation can be lost on Python 3.11: ``asyncio.wait_for`` returns the inner result
when its task is cancelled just as the inner awaitable completes (CPython gh-86296, fixed
in 3.12 by the rewrite of ``wait_for`` on ``asyncio.timeout``). psycopg 3.1 waits on its
sockets through ``wait_for``: a task cancelled while it connects can go on as if nothing
happened. The PostgreSQL store's listener then went on to ``LISTEN`` and waited for
notifications with no timeout, and ``close()``, waiting for it with ``gather``, never
returned (found by the tests on the lowest versions every floor allows). Here a task
still running ``RETRY`` seconds after its cancellation is cancelled again, until it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("cronfleet")

__all__ = ["RETRY", "cancel_and_wait"]

# seconds a cancelled task is given to end before it is cancelled again
RETRY = 0.5


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, retry: float = RETRY
                          ) -> None:
    """Cancel ``tasks`` and return once all have ended. What they raised is retrieved and
    dropped (as ``gather(..., return_exceptions=True)`` does): they were being stopped."""
    every = list(tasks)
    pending = {t for t in every if not t.done()}
    for task in pending:
        task.cancel()
    told: set[asyncio.Future[Any]] = set()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=retry)
        for task in pending:
            if task not in told:
                told.add(task)
                log.info("cronfleet: %s went on after its cancellation; cancelling it "
                         "again every %g s until it ends", _name(task), retry)
            task.cancel()
    for task in every:
        if not task.cancelled():
            task.exception()


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
