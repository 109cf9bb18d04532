"""Running a scheduler as the process's main work: until SIGINT / SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import Iterator
from typing import Any

__all__ = ["freeze_made", "freeze_start_up", "raise_if_failed", "run_until_signal",
           "set_on_signals", "stop_on_signals"]


def freeze_start_up() -> None:
    """For a process that belongs to the scheduler (``Scheduler.run()``, ``cronfleet
    run``), once started: move what start-up built (jobs, parsed schedules, imported
    modules) out of the cyclic GC's sight (``gc.freeze``), so that its full collections
    stop rescanning them. At 100,000 jobs a full collection took ~130 ms, landing on a
    burst's lateness or a dashboard request; the objects frozen are never collected, and
    start-up's are kept for the process's life anyway."""
    gc.freeze()


def freeze_made() -> None:
    """For a process that belongs to the scheduler, while it runs, after it made many
    long-lived objects (a catalog's jobs read page by page at start or after a peer left):
    collect the young generations' garbage, then freeze what survived. Without it the
    oldest generation grows with every page and each full collection rescans every job
    made so far: a process loading 250,000 API jobs made 16 of them (3.9 s of its 23.8 s
    of CPU until ready; ``bench/catalog_startup.py --gc``). The jobs are acyclic, so one
    let go later is still freed by its reference count; a collection of the two young
    generations costs what they hold (a few thousand objects)."""
    gc.collect(1)
    gc.freeze()


def set_on_signals(stop: asyncio.Event) -> list[signal.Signals]:
    """From now on SIGINT and SIGTERM set ``stop`` (where the loop can handle signals);
    returns the signals handled."""
    loop = asyncio.get_running_loop()
    added = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            added.append(sig)
    return added


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop`` (where the loop can handle signals)."""
    added = set_on_signals(stop)
    loop = asyncio.get_running_loop()
    try:
        yield
    finally:
        for sig in added:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def run_until_signal(
    *watched: asyncio.Future[Any] | None,
    stop: asyncio.Event | None = None,
    signals: bool = True,
) -> asyncio.Future[Any] | None:
    """Wait until SIGINT / SIGTERM (or ``stop`` is set, or one of ``watched`` — e.g. a
    scheduler's loop task or a server task — ends). Returns the watched future that
    ended, or ``None`` for a signal / ``stop``; starting and stopping what runs is the
    caller's (an ``async with``), so the order of shutdown stays the caller's."""
    stop = stop or asyncio.Event()
    ctx = stop_on_signals(stop) if signals else contextlib.nullcontext()
    with ctx:
        waiter: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        futures: set[asyncio.Future[Any]] = {f for f in watched if f is not None}
        try:
            done, _ = await asyncio.wait({waiter, *futures}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
    for f in futures:
        if f in done:
            return f
    return None


def raise_if_failed(task: asyncio.Future[Any] | None) -> None:
    """Re-raise what a watched task that ended raised (a crashed loop fails the process)."""
    if task is not None and task.done() and not task.cancelled():
        exc = task.exception()
        if exc is not None:
            raise exc

