"""A lifespan for ASGI apps (FastAPI, Starlette): the scheduler runs in the app's own event
loop from startup to shutdown.

    from fastapi import FastAPI
    from cronfleet.integrations.asgi import lifespan

    app = FastAPI(lifespan=lifespan(scheduler))

Each worker process of the server (``uvicorn --workers 4``, gunicorn with uvicorn workers)
runs its own scheduler against the one store; every slot still runs once. Nothing here
imports FastAPI or Starlette: the lifespan protocol is a plain async context manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from cronfleet.runtime.scheduler import Scheduler

__all__ = ["lifespan"]


def lifespan(scheduler: Scheduler, *, alerts: bool = True,
             then: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
             ) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """``lifespan=`` for ``FastAPI(...)`` / ``Starlette(...)``: starts ``scheduler`` at
    startup (with :func:`cronfleet.alerts.install` when ``alerts``, so ``notify`` and
    ``auto_pause_after`` work), stops it gracefully at shutdown. ``then``: the app's own
    lifespan, entered inside (the scheduler runs while it does)."""

    @contextlib.asynccontextmanager
    async def _lifespan(app: Any) -> AsyncIterator[None]:
        unsubscribe = None
        if alerts:
            from cronfleet.extras import available

            if available("http"):  # alerts (notifications) need httpx
                from cronfleet import alerts as alerts_module

                unsubscribe = alerts_module.install(scheduler)
        try:
            async with scheduler:
                if then is None:
                    yield
                else:
                    async with then(app):
                        yield
        finally:
            if unsubscribe is not None:
                unsubscribe()

    return _lifespan
