"""The blocking facade: each control method of :class:`Scheduler` without ``await``, for
scripts and threads outside the scheduler's event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cronfleet.model import JobState, RunRecord, RunStatus

if TYPE_CHECKING:
    from cronfleet.runtime.backfill import Backfill
    from cronfleet.runtime.faces import AsyncFacade

__all__ = ["SyncControl", "call_sync"]

T = TypeVar("T")


def call_sync(facade: AsyncFacade, make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` to completion: on the scheduler's loop when it runs (from another
    thread), else in a loop of its own. Refused inside an event loop."""

    async def go() -> T:
        return await make()

    loop = facade.event_loop
    if facade.running and loop is not None:
        if threading.get_ident() == facade.loop_thread:
            raise RuntimeError(
                "this is the scheduler's event loop: use the async variant "
                "(e.g. await scheduler.trigger_async(...))"
            )
        return asyncio.run_coroutine_threadsafe(go(), loop).result()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    if in_loop:
        raise RuntimeError(
            "called from inside an event loop: use the async variant "
            "(e.g. await scheduler.trigger_async(...))"
        )
    # outside the except block: a handler's traceback must not carry "no running event
    # loop ... During handling of the above exception" as its context
    return asyncio.run(go())


class SyncControl:
    """Mixed into :class:`Scheduler`: the blocking twins of its ``*_async`` methods."""

    @property
    def _me(self) -> AsyncFacade:
        return cast("AsyncFacade", self)

    def trigger(self, job_id: str, *, by: str = "manual", wait: bool = False,
                params: Mapping[str, Any] | None = None, force: bool = False) -> RunRecord:
        return call_sync(self._me, lambda: self._me.trigger_async(
            job_id, by=by, wait=wait, params=params, force=force))

    def backfill(self, job_id: str, start: datetime, end: datetime, *,
                 only_missing: bool = False, by: str = "backfill",
                 rate: float | None = 10.0) -> Backfill:
        """The blocking twin of :meth:`Scheduler.backfill_async` (waits for its end)."""
        return call_sync(self._me, lambda: self._me.backfill_async(
            job_id, start, end, only_missing=only_missing, by=by, rate=rate))

    def pause(
        self,
        job_id: str,
        *,
        by: str | None = None,
        note: str | None = None,
        until: datetime | str | float | timedelta | None = None,
    ) -> JobState:
        me = self._me
        return call_sync(me, lambda: me.pause_async(job_id, by=by, note=note, until=until))

    def resume(
        self,
        job_id: str,
        *,
        by: str | None = None,
        note: str | None = None,
        until: datetime | str | float | timedelta | None = None,
    ) -> JobState:
        me = self._me
        return call_sync(me, lambda: me.resume_async(job_id, by=by, note=note, until=until))

    def clear_override(self, job_id: str, *,
                       by: str | None = None) -> JobState:
        return call_sync(self._me, lambda: self._me.clear_override_async(job_id, by=by))

    def state(self, job_id: str) -> JobState:
        return call_sync(self._me, lambda: self._me.state_async(job_id))

    def runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | str | None = None,
    ) -> list[RunRecord]:
        return call_sync(self._me, lambda: self._me.runs_async(job_id, limit=limit, status=status))

    def get_run(self, run_id: int) -> RunRecord | None:
        return call_sync(self._me, lambda: self._me.get_run_async(run_id))
