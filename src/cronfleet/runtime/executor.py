"""Run one handler: async in the loop, sync in a thread pool, with a timeout.

An async run past its timeout is cancelled. A thread cannot be stopped from outside, so
a sync run past its timeout is abandoned — recorded ``timed_out`` at once, its lease
released — and the thread is left to finish on its own (logged, never waited for).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from cronfleet.model import Handler, RunContext, RunStatus, is_async_handler

__all__ = ["Outcome", "execute", "is_async_handler"]

log = logging.getLogger("cronfleet.executor")


@dataclass(slots=True)
class Outcome:
    status: RunStatus
    started: float
    finished: float
    result: Any = None
    error: str | None = None
    reason: str | None = None


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _timed_out(timeout: float | None, started: float, now: float,
               exc: BaseException | None = None) -> Outcome:
    """A run past its timeout; a handler that enforces its own timeout raises a
    ``TimeoutError`` carrying its message and ``result`` (a command job's exit record)."""
    result = getattr(exc, "result", None)
    if result is not None and str(exc):
        return Outcome(RunStatus.TIMED_OUT, started, now, result=_jsonable(result),
                       error=str(exc), reason="timeout")
    return Outcome(
        RunStatus.TIMED_OUT, started, now, error=f"timed out after {timeout:g}s", reason="timeout"
    )


def _failed(exc: BaseException, ctx: RunContext, started: float, now: float) -> Outcome:
    """A failure keeps the traceback in the log and, when the exception carries a ``result``
    (e.g. an HTTP job's attempt records), that result on the run."""
    if getattr(exc, "log_traceback", True):  # a command's exit code needs no traceback
        ctx.log("".join(traceback.format_exception(exc)).rstrip())
    elif log.isEnabledFor(logging.DEBUG):  # an error that says it all: the trace for DEBUG
        log.debug("job %s: %s", ctx.job_id, "".join(traceback.format_exception(exc)).rstrip())
    return Outcome(
        RunStatus.FAILED,
        started,
        now,
        result=_jsonable(getattr(exc, "result", None)),
        error=_error_text(exc),
    )


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def execute(
    handler: Handler,
    ctx: RunContext,
    *,
    timeout: float | None,
    threads: Executor,
    now: Callable[[], float],
    is_async: bool | None = None,
) -> Outcome:
    """Call ``handler(ctx)`` and describe how it ended; never raises (but re-raises
    cancellation so a shutdown can interrupt the run)."""
    started = now()
    try:
        if is_async if is_async is not None else is_async_handler(handler):
            if timeout is None:  # the common case, without a coroutine in between
                result = handler(ctx)
                if inspect.isawaitable(result):
                    result = await result
            else:
                async with asyncio.timeout(timeout):
                    result = await _call_async(handler, ctx)
        else:
            loop = asyncio.get_running_loop()
            cv = contextvars.copy_context()
            fut = loop.run_in_executor(threads, cv.run, handler, ctx)
            try:
                async with asyncio.timeout(timeout):
                    result = await asyncio.shield(fut)
            except TimeoutError:
                ctx.log(
                    f"Timed out after {timeout:g}s: the thread was abandoned and may still "
                    "be running; its result will be ignored"
                )
                fut.add_done_callback(_report_abandoned(ctx.job_id))
                raise
            if inspect.isawaitable(result):
                async with asyncio.timeout(timeout):
                    result = await result
    except TimeoutError as exc:
        return _timed_out(timeout, started, now(), exc)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _failed(exc, ctx, started, now())
    return Outcome(RunStatus.SUCCEEDED, started, now(), result=_jsonable(result))


async def _call_async(handler: Handler, ctx: RunContext) -> Any:
    result = handler(ctx)
    if inspect.isawaitable(result):
        return await result
    return result


def _report_abandoned(job_id: str) -> Callable[[asyncio.Future[Any]], None]:
    def done(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        log.warning(
            "job %s: an abandoned (timed out) thread finished later%s",
            job_id,
            f" with {_error_text(exc)}" if exc else "",
        )

    return done
