"""The faces of the facade that code outside it calls: ``Control`` (the registry acting
on another process's request), ``AsyncFacade`` (the blocking twins of ``SyncControl``)
and ``Service`` (``Background``, a scheduler in a thread of its own). The ``Scheduler``
implements all three; the modules that call them import this, never the facade."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cronfleet.runtime.parts import Canceller

if TYPE_CHECKING:
    from datetime import timedelta

    from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
    from cronfleet.runtime.backfill import Backfill

__all__ = ["AsyncFacade", "Control", "Service"]


class Control(Canceller, Protocol):
    """The control calls the registry makes through the facade for the requests of other
    processes (a trigger, a backfill, a cancel), as for local ones."""

    async def trigger_async(
        self, job_id: str, *, by: str = ..., triggered_by: TriggeredBy = ...,
        wait: bool = ..., params: Mapping[str, Any] | None = ..., force: bool = ...,
    ) -> RunRecord: ...

    async def backfill_async(
        self, job_id: str, start: datetime, end: datetime, *, only_missing: bool = ...,
        by: str = ..., rate: float | None = ..., wait: bool = ..., since: float | None = ...,
    ) -> Backfill: ...

    async def cancel_async(self, run_id: int, *, by: str = ..., why: str = ...,
                           timeout: float = ...) -> str: ...


class Service(Protocol):
    """What ``Background`` (a scheduler in a thread of its own) needs of the scheduler."""

    @property
    def loop_task(self) -> asyncio.Task[None] | None: ...

    async def start(self) -> None: ...

    async def stop_async(self) -> None: ...


class AsyncFacade(Control, Protocol):
    """The async control API that ``SyncControl`` (the blocking twins, mixed into the
    ``Scheduler``) calls: from another thread on the scheduler's loop, or in a loop of
    its own."""

    @property
    def running(self) -> bool: ...

    event_loop: asyncio.AbstractEventLoop | None
    loop_thread: int | None

    async def pause_async(self, job_id: str, *, by: str | None = ..., note: str | None = ...,
                          until: datetime | str | float | timedelta | None = ...,
                          ) -> JobState: ...

    async def resume_async(self, job_id: str, *, by: str | None = ..., note: str | None = ...,
                           until: datetime | str | float | timedelta | None = ...,
                           ) -> JobState: ...

    async def clear_override_async(self, job_id: str, *, by: str | None = ...) -> JobState: ...

    async def state_async(self, job_id: str) -> JobState: ...

    async def runs_async(self, job_id: str | None = ..., *, limit: int = ...,
                         status: RunStatus | str | None = ...) -> list[RunRecord]: ...

    async def get_run_async(self, run_id: int) -> RunRecord | None: ...
