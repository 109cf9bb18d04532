"""The worker threads of sync handlers: a small pool of *daemon* threads.

Python cannot interrupt a thread. A sync handler still running when ``shutdown_grace``
ends is recorded ``interrupted`` and abandoned; with the standard ``ThreadPoolExecutor``
the interpreter would still join that thread at exit, so the process outlived its stop by
as long as the handler ran. These threads are daemons: the process exits once ``stop()``
returns and whatever the handler was doing ends with it (no ``finally`` of the handler
runs). Async handlers are cancelled properly; work that must be stopped cleanly belongs in
an async handler or a subprocess the handler owns.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["DaemonThreadPool"]

T = TypeVar("T")
_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None


class DaemonThreadPool(Executor):
    """Up to ``max_workers`` daemon threads, started on demand and reused when idle."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "cronfleet-job") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count()
        self._shutdown = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            fut: Future[T] = Future()
            self._queue.put((fut, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                t = threading.Thread(target=self._work, daemon=True,
                                     name=f"{self.prefix}_{next(self._numbers)}")
                t.start()
                self._threads.append(t)
            return fut

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args, kwargs = item
            if fut.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            del item, fut, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()
