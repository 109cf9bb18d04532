"""Events a scheduler publishes, and ``subscribe``.

Published after the fact, off the hot path: :class:`RunFinished` is built when a run's
ended record is settled for the group commit (never during a burst's claims), and only
when somebody listens. A listener is a plain callable or a coroutine function; a
coroutine listener runs in its own task, so a slow listener (a webhook) never holds the
loop or another listener; an exception in a listener is logged and dropped. A plain
listener that starts work of its own may return its task: the scheduler's stop waits for
it (bounded by the grace period), as for coroutine listeners.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cronfleet.model import Job, JobState, RunRecord

__all__ = ["Event", "Events", "Listener", "OverrideChanged", "RunFinished", "RunRetried",
           "RunStarting", "Unsubscribe"]

log = logging.getLogger("cronfleet")


@dataclass(frozen=True, slots=True)
class RunFinished:
    """A run of ``job`` ended (any status but ``skipped``); ``run`` is its final record
    (status, result, error, attempts, timing) as it is being written."""

    job: Job
    run: RunRecord
    instance_id: str

    @property
    def ok(self) -> bool:
        return self.run.success

    @property
    def duration(self) -> float:
        return self.run.duration or 0.0


@dataclass(frozen=True, slots=True)
class RunRetried:
    """Attempt ``attempt`` of a run failed and the handler runs again after ``delay`` s."""

    job: Job
    run: RunRecord
    attempt: int
    delay: float
    error: str | None


@dataclass(frozen=True, slots=True)
class RunStarting:
    """A run's handler is about to be called, in the run's own task (its context is the
    handler's: a listener may set a context variable -- e.g. the current trace span --
    that the handler, sync or async, sees). Published only when somebody listens; its
    listeners are called synchronously and must be quick."""

    job: Job
    run: RunRecord
    instance_id: str


@dataclass(frozen=True, slots=True)
class OverrideChanged:
    """An operator or the auto-pause set or cleared the job's override through this
    scheduler (pause, resume, clear). ``before`` is the state it replaced (read only when
    somebody listens); ``by`` who did it."""

    job: Job
    before: JobState
    after: JobState
    by: str | None


Event = RunFinished | RunRetried | RunStarting | OverrideChanged
Listener = Callable[[Any], Awaitable[None] | None]
Unsubscribe = Callable[[], None]


class Events:
    """Listeners by event type. ``wants(kind)`` is the hot path's one check."""

    __slots__ = ("_listeners", "_tasks")

    def __init__(self) -> None:
        self._listeners: dict[type, list[Listener]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()

    def subscribe(self, listener: Listener, kind: type | tuple[type, ...] = RunFinished
                  ) -> Unsubscribe:
        """Call ``listener(event)`` for every event of ``kind``; returns the unsubscriber."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        for k in kinds:
            self._listeners.setdefault(k, []).append(listener)

        def unsubscribe() -> None:
            for k in kinds:
                found = self._listeners.get(k, [])
                if listener in found:
                    found.remove(listener)
                if not found:
                    self._listeners.pop(k, None)

        return unsubscribe

    def wants(self, kind: type) -> bool:
        return kind in self._listeners

    def publish(self, event: Event) -> None:
        for listener in self._listeners.get(type(event), ()):
            try:
                if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
                    getattr(listener, "__call__", None)  # noqa: B004
                ):
                    task = asyncio.get_running_loop().create_task(
                        self._guard(listener, event)  # type: ignore[arg-type]
                    )
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    result = listener(event)
                    if isinstance(result, asyncio.Future):  # work it started: drained at stop
                        self._tasks.add(result)
                        result.add_done_callback(self._tasks.discard)
            except Exception:
                log.exception("cronfleet: event listener %r failed", listener)

    @staticmethod
    async def _guard(listener: Callable[[Any], Awaitable[None]], event: Event) -> None:
        try:
            await listener(event)
        except Exception:
            log.exception("cronfleet: event listener %r failed", listener)

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) for coroutine listeners still running (at stop)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
