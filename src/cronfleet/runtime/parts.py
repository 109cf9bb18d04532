"""What the runtime parts share, and the narrow faces of the facade they may call.

Each part (``Runs``, ``Writer``, ``Loop``, ...) is built by the assembler
(:meth:`Scheduler._build <cronfleet.runtime.scheduler.Scheduler._build>`) with the
collaborators it uses: the store, the clock, the :class:`Settings`, the :class:`Life` of
the scheduler, the job table as a read-only view (``Mapping[str, Job]``), the stats and
the sibling parts it calls. No part holds the ``Scheduler``; the few calls a part makes
back into the facade (a remote cancel, a trigger or a backfill asked by another process)
go through the :class:`Control` protocol below. This module imports no other runtime
module: the parts import it, never the reverse.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cronfleet.model import Job

if TYPE_CHECKING:
    from datetime import timedelta

    from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
    from cronfleet.runtime.backfill import Backfill

__all__ = ["AsyncFacade", "Control", "Jobs", "Life", "Service", "Settings"]

log = logging.getLogger("cronfleet")

Jobs = Mapping[str, Job]
"""The job table as the parts see it: a read-only, live view of the scheduler's jobs."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The scheduler's options the parts read, fixed for one start (see ``Scheduler``)."""

    instance_id: str
    timers: bool = True
    role: str = "all"
    late_after: float = 5.0
    batch_size: int = 1000
    claim_ahead: float = 0.5
    instance_ttl: float = 15.0
    orphan_interval: float = 15.0
    queue_poll: float = 1.0
    run_retention: float = 30 * 86400.0
    runs_per_job: int = 1000
    claim_retention: float = 7 * 86400.0
    record_started_after: float = 0.25
    shutdown_grace: float = 30.0


class Life:
    """Whether the scheduler runs or is stopping, and its background tasks.

    One per scheduler (kept across restarts). ``running`` and ``stopping`` are written by
    the facade's ``start`` / ``stop`` only; the parts read them. ``spawn`` runs a
    coroutine as a background task that ``stop`` cancels."""

    __slots__ = ("running", "stopping", "tasks")

    def __init__(self) -> None:
        self.running = False
        self.stopping = False
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cronfleet background task failed", exc_info=task.exception())


class Control(Protocol):
    """The control calls a part makes through the facade (the registry's fleet requests,
    ``Overlap.REPLACE``'s cancel of a run wherever it executes)."""

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
