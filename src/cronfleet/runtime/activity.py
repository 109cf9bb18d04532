"""Is the scheduler idle? One counter of things being fired, run or written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Activity"]


class Activity:
    """``busy`` counts work in progress (an instant being fired, a run, a write); ``idle``
    is set when it is zero and nothing waits to be written (``pending()``)."""

    __slots__ = ("busy", "idle", "pending")

    def __init__(self, pending: Callable[[], bool]) -> None:
        self.busy = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.pending = pending

    def enter(self, n: int = 1) -> None:
        self.busy += n
        self.idle.clear()

    def leave(self) -> None:
        self.busy -= 1
        if self.busy == 0 and not self.pending():
            self.idle.set()

    async def wait_idle(self, timeout: float) -> None:
        for _ in range(3):
            async with asyncio.timeout(timeout):
                await self.idle.wait()
            await asyncio.sleep(0)
            if self.busy == 0 and not self.pending():
                return
