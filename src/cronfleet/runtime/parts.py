"""What the runtime parts share: the settings, the scheduler's life, the records they
pass each other, and the narrow views they hold of the parts built after them.

Each part (``Runs``, ``Writer``, ``Loop``, ...) is built by the assembler
(:meth:`Scheduler._build <cronfleet.runtime.scheduler.Scheduler._build>`) with the
collaborators it uses: the store, the clock, the :class:`Settings`, the :class:`Life` of
the scheduler, the job table as a read-only view (:data:`Jobs`), the stats and the
sibling parts it calls. No part holds the ``Scheduler``. A part built before a sibling it
calls is wired to it after both exist and sees it through a protocol of this module
(:class:`ResultSource`, :class:`FleetView`, ...), so that the runtime's import graph
has no cycle, ``TYPE_CHECKING`` imports included. This module imports no runtime part.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cronfleet.model import Job, JobState, RunContext, RunRecord
from cronfleet.runtime.executor import Outcome
from cronfleet.store.base import Dispatch, Dispatched, Finish

__all__ = [
    "WARN_EVERY",
    "Active",
    "Canceller",
    "EarlyView",
    "Firing",
    "FleetView",
    "Jobs",
    "Life",
    "OutageView",
    "Pending",
    "Queued",
    "RateLimitedLog",
    "RegistryView",
    "ResultSource",
    "Settings",
]

log = logging.getLogger("cronfleet")

WARN_EVERY = 10.0
"""Seconds between two warnings of one kind; the ones in between are counted."""

Jobs = Mapping[str, Job]
"""The job table as the parts see it: the scheduler's live table, read-only by its type
(only the facade's ``add_job`` / ``remove_job`` / ``replace_job`` change it)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The scheduler's options the parts read, fixed for one start: built by the facade
    from its own (their defaults and meaning: ``Scheduler``)."""

    instance_id: str
    timers: bool
    role: str
    late_after: float
    batch_size: int
    claim_ahead: float
    instance_ttl: float
    orphan_interval: float
    queue_poll: float
    run_retention: float
    runs_per_job: int
    claim_retention: float
    record_started_after: float
    shutdown_grace: float


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


class RateLimitedLog:
    """``warning(key, msg, *args)``: at most one line per key every ``every`` seconds;
    the next line says how many were held back meanwhile."""

    def __init__(
        self,
        logger: logging.Logger,
        every: float = WARN_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: Any) -> bool:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            msg += " (%d more like this in the last %.0f s)"
            args = (*args, held, now - last if last is not None else 0.0)
        self.logger.warning(msg, *args)
        return True


# -- the records the parts pass each other ----------------------------------------------


@dataclass(slots=True)
class Active:
    """A run executing in this process."""

    job: Job
    run: RunRecord
    leased: bool
    task: asyncio.Task[None] | None = None
    ctx: RunContext | None = None
    outcome: Outcome | None = None
    cancel: tuple[str, str] | None = None  # (by, why) once a cancel was asked for


@dataclass(slots=True)
class Queued:
    """A claimed slot waiting for the lease (``Overlap.QUEUE_ONE``)."""

    job: Job
    run: RunRecord
    leased: bool


@dataclass(slots=True)
class Pending:
    """The slots of one instant claimed shortly before it: each job with its claim result
    and, where the claim was won, its run ready to start."""

    slot: float
    ready: list[tuple[Job, Dispatched, Active | None]] = field(default_factory=list)
    epoch: int = 0  # the fleet epoch the claims were made in (runtime/fleet.py)


# -- the views of the parts built later (wired by the assembler) ------------------------


class Canceller(Protocol):
    """``Overlap.REPLACE`` cancels the run holding the lease wherever it executes: the
    facade's ``cancel_async`` (here directly, elsewhere through the store)."""

    async def cancel_async(self, run_id: int, *, by: str = ..., why: str = ...,
                           timeout: float = ...) -> str: ...


class ResultSource(Protocol):
    """What the writer takes from the runs (``Runs``): the ended runs, settled into rows
    (returned), and the "started" rows of fast-path runs not written yet."""

    @property
    def ended(self) -> Sequence[Active]: ...

    def settle(self) -> list[Finish]: ...

    def take_unrecorded(self) -> list[Finish]: ...


class Firing(Protocol):
    """The instant being claimed (``Loop.firing``): the writer lets its claims go first."""

    @property
    def firing(self) -> asyncio.Future[None] | None: ...


class EarlyView(Protocol):
    """What the loop asks of the early claims (``EarlyClaims``)."""

    @property
    def ahead(self) -> float: ...

    @property
    def pending(self) -> Pending | None: ...

    def lead(self, now: float) -> float: ...

    def may_claim(self, job: Job) -> bool: ...

    def take(self, now: float) -> Pending | None: ...

    async def claim(self, slot: float, now: float) -> None: ...

    async def drop_stale(self, pending: Pending) -> list[tuple[Job, float]]: ...

    async def fire(self, pending: Pending, now: float, states: Mapping[str, JobState]
                   ) -> list[tuple[Job, float]]: ...


class OutageView(Protocol):
    """What the loop hands the outage handling (``Outage``)."""

    @property
    def pending(self) -> bool: ...

    def offline(self, items: list[Dispatch], exc: BaseException | None, fired_mono: float
                ) -> list[Dispatched]: ...

    def answered(self, got: list[Dispatched]) -> None: ...


class FleetView(Protocol):
    """What the loop, the early claims and the upkeep read of this process's membership
    (``Fleet``)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def live(self) -> tuple[str, ...]: ...

    @property
    def epoch(self) -> int: ...

    @property
    def ttl(self) -> float: ...

    @property
    def last_ok(self) -> float | None: ...

    @property
    def failed(self) -> bool: ...

    def steady(self) -> bool: ...

    async def confirm(self, now: float, epoch: int) -> bool: ...


class OwnershipView(Protocol):
    """What the fleet's heartbeat tells and asks the ownership (``runtime/ownership.py``)."""

    @property
    def peers(self) -> tuple[str, ...]: ...

    def plans(self) -> str: ...

    def moves(self, live: tuple[str, ...], plans: Mapping[str, str]) -> bool: ...

    async def update(self, live: tuple[str, ...], plans: Mapping[str, str]) -> None: ...


class RegistryView(Protocol):
    """The fleet's heartbeat syncs the registry (``Registry.sync``) after each beat."""

    async def sync(self) -> None: ...
