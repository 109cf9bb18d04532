"""The thread-backed mode for sync applications (Flask, Django, gunicorn workers, scripts):
``scheduler.start_in_background()`` runs the scheduler's event loop in a daemon thread of
its own and returns once it has started (or raises what the start raised);
``scheduler.stop()`` called from any other thread stops it gracefully and waits.

At interpreter exit a background scheduler still running is stopped (``atexit``), so a
worker that ends without calling ``stop()`` still releases its leases and records what it
interrupted. Exactly-once does not depend on it: every worker of a pre-fork server may
start its own scheduler against one store, and each slot runs once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

from cronfleet.runtime.faces import Service

S = TypeVar("S", bound=Service)

log = logging.getLogger("cronfleet")

__all__ = ["Background", "Stopped"]


class Stopped(Coroutine[Any, Any, None]):
    """A coroutine that is already done: what ``stop()`` returns when there was nothing
    left to await (a background scheduler it stopped synchronously, or one not running).
    Awaiting it, ``asyncio.run`` of it and forgetting it are all harmless."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def send(self, value: Any) -> Any:
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None


class Background(Generic[S]):
    """One scheduler in one daemon thread with its own event loop."""

    def __init__(self, scheduler: S,
                 on_start: Callable[[S], Awaitable[Any] | Any] | None = None) -> None:
        self.scheduler = scheduler
        self.on_start = on_start
        self.thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, timeout: float = 60.0) -> None:
        self.thread = threading.Thread(target=self._main, name="cronfleet-scheduler",
                                       daemon=True)
        self.thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the scheduler did not start within {timeout:g}s")
        if self._error is not None:
            self.thread.join(timeout)
            raise self._error
        atexit.register(self.stop)

    def stop(self, timeout: float | None = None) -> None:
        """Stop the scheduler (running handlers get its shutdown grace) and join the
        thread. Idempotent; refused from the scheduler's own thread."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        thread, loop, stop = self.thread, self._loop, self._stop
        if thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            raise RuntimeError("stop() from the scheduler's own thread: use 'await "
                               "scheduler.stop()' there")
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(), or logged once running
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            else:
                log.exception("the background scheduler failed")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        service = self.scheduler
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await service.start()
        try:
            if self.on_start is not None:
                result = self.on_start(service)
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
            self._ready.set()
            waiter = asyncio.ensure_future(self._stop.wait())
            watched: set[asyncio.Future[Any]] = {waiter}
            if service.loop_task is not None:
                watched.add(service.loop_task)
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        finally:
            await service.stop_async()
