"""Run history: ``GET /api/jobs/{id}/runs`` (newest first, paged by run id) and
``GET /api/runs/{run_id}``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    ALL_METHODS,
    Ctx,
    JobIdPath,
    Limit,
    RunIdPath,
    Viewer,
    not_allowed,
    store_errors,
    visible,
    visible_run,
)
from cronfleet.api.errors import responses
from cronfleet.model import RunStatus

__all__ = ["router"]

router = APIRouter(tags=["runs"])


@router.get("/api/jobs/{job_id:path}/runs", response_model=S.RunPage,
            responses=responses(401, 403, 404, 503))
async def job_runs(
    job_id: JobIdPath, ctx: Ctx, token: Viewer,
    status: RunStatus | None = None,
    cursor: Annotated[int | None, Query(ge=1, le=2**63 - 1,
                                        description="Runs older than this run id.")] = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    job = await visible(ctx, token, job_id)
    with store_errors("cannot read the run history"):
        runs = await ctx.scheduler.store.list_runs(job.id, limit=limit + 1, status=status,
                                                   before_id=cursor)
    more = len(runs) > limit
    runs = runs[:limit]
    return {"items": [r.to_dict() for r in runs],
            "next_cursor": str(runs[-1].id) if more and runs else None}


router.add_api_route("/api/jobs/{job_id:path}/runs", not_allowed("GET"),
                     methods=[m for m in ALL_METHODS if m not in ("GET", "HEAD")],
                     include_in_schema=False)


@router.get("/api/runs/{run_id}", response_model=S.RunOut,
            responses=responses(401, 403, 404, 503))
async def get_run(run_id: RunIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
    out: dict[str, Any] = (await visible_run(ctx, token, run_id)).to_dict()
    return out
