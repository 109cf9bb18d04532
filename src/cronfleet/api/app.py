"""The REST API: one FastAPI app over a running :class:`~cronfleet.Scheduler`.

Every ``/api`` route needs a bearer token; a token belongs to one team and sees only that
team's jobs, runs, secrets and audit entries -- anything else answers 404 exactly as if it
did not exist. Changes go to the store first (and are audited); the scheduler of this
process applies them at once, the others on notification or at their next catalog look.

This module builds the app; each resource has its router module (``jobs``, ``runs``,
``triggers``, ``overrides``, ``cron``, ``secrets``, ``audit``, ``health``), what they
depend on is in ``deps``, the state changes in ``control``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from cronfleet import __version__
from cronfleet.api import (
    audit,
    backfills,
    cron,
    health,
    jobs,
    overrides,
    runs,
    secrets,
    triggers,
)
from cronfleet.api.deps import ApiSettings, Context
from cronfleet.api.errors import install, responses
from cronfleet.api.limits import BodyLimit
from cronfleet.catalog import Catalog
from cronfleet.errors import StoreError
from cronfleet.store.factory import open_api_store
from cronfleet.store.side import ApiStore

log = logging.getLogger("cronfleet.api")

__all__ = ["ApiSettings", "create_app"]


def create_app(
    scheduler: Any,
    *,
    api_store: ApiStore | None = None,
    settings: ApiSettings | None = None,
    http_runtime: Any = None,
    vault: Any = None,
    catalog: Catalog | None = None,
    signin_codes: Any = None,
) -> FastAPI:
    """The API app for ``scheduler`` (see :class:`ApiSettings`). Mount it in your own
    ASGI app or serve it with uvicorn; the scheduler must be running (``async with
    scheduler``) unless ``settings.manage_scheduler`` is set."""
    settings = settings or ApiSettings()
    store = api_store or open_api_store(scheduler.store)
    if http_runtime is None:
        from cronfleet.jobs.http import HttpRuntime  # httpx, only when not given one

        http_runtime = HttpRuntime(store=scheduler.store)
    if catalog is None:
        catalog = Catalog(scheduler, store, runtime=http_runtime, poll=settings.catalog_poll,
                          allow_commands=settings.allow_command_jobs)
    else:
        store = catalog.api_store

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.manage_scheduler:
            await scheduler.start()
        if scheduler.running:  # stored jobs fire from the start, not from the first request
            try:
                await catalog.start()
            except StoreError as exc:
                log.warning("cannot read the job catalog yet (%s); trying again on the first "
                            "request", exc)
        try:
            yield
        finally:
            await catalog.stop()
            if settings.manage_scheduler:
                await scheduler.stop()

    app = FastAPI(
        title="cronfleet",
        version=__version__,
        description="Operate cronfleet jobs: pause across replicas, trigger, read history, "
                    "manage HTTP jobs and secrets. Every /api route needs a bearer token.",
        lifespan=lifespan,
        responses=responses(400, 422),
        docs_url=None,  # served by the dashboard from the package's own assets (offline)
        redoc_url=None,
    )
    app.state.cronfleet = Context(scheduler, store, settings, catalog, http_runtime, vault,
                                  started=catalog.started)
    install(app)
    app.add_middleware(BodyLimit, limit=settings.max_request_body)
    # order matters: .../runs and .../trigger before the greedy /api/jobs/{job_id:path}
    for router in (jobs.router, runs.router, triggers.router, backfills.router,
                   jobs.item_router,
                   overrides.router, cron.router, secrets.router, audit.router,
                   health.router(settings)):
        app.include_router(router)
    if settings.dashboard:
        from cronfleet.dashboard import install as install_dashboard

        install_dashboard(app, signin_codes)
    return app
