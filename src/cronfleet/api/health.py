"""``/healthz`` (the process answers), ``/readyz`` (store reachable, loop on time) and
``/metrics`` (Prometheus text; public or token-protected per :class:`ApiSettings`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import PlainTextResponse

from cronfleet.api import schemas as S
from cronfleet.api.deps import ApiSettings, context, token
from cronfleet.api.errors import responses
from cronfleet.health import readiness

__all__ = ["router"]


def router(settings: ApiSettings) -> APIRouter:
    """The health routes; ``/metrics`` asks for a token when ``settings.metrics`` says so."""
    r = APIRouter(tags=["health"])
    r.add_api_route("/healthz", healthz, methods=["GET"], response_model=S.Health)
    r.add_api_route("/readyz", readyz, methods=["GET"], response_model=S.Ready,
                    responses={503: {"model": S.Ready, "description": "Not ready."}})
    doc: dict[int | str, dict[str, Any]] = {
        200: {"content": {"text/plain": {"schema": {"type": "string"}}},
              "description": "Prometheus text format."}}
    if settings.metrics == "token":
        doc.update(responses(401, 503))
    r.add_api_route("/metrics", metrics, methods=["GET"], response_class=PlainTextResponse,
                    dependencies=[Depends(token)] if settings.metrics == "token" else [],
                    responses=doc)
    return r


async def healthz() -> dict[str, Any]:
    return {"status": "ok"}


async def readyz(request: Request, response: Response) -> dict[str, Any]:
    ctx = context(request)
    ok, checks = await readiness(ctx.scheduler, ctx.settings.ready_max_overdue)
    if not ok:
        response.status_code = 503
    return {"status": "ready" if ok else "not ready", "checks": checks}


async def metrics(request: Request) -> PlainTextResponse:
    from cronfleet.metrics import CONTENT_TYPE_LATEST, render  # prometheus_client, on use

    return PlainTextResponse(render(context(request).scheduler), media_type=CONTENT_TYPE_LATEST)
