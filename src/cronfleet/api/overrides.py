"""``PUT /api/admin/cron/{id}``: pause, timed pause, force on or clear, for every process
sharing the store."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from cronfleet.api import control
from cronfleet.api import schemas as S
from cronfleet.api.deps import Ctx, Editor, JobIdPath, audit, now, visible, who
from cronfleet.api.errors import responses
from cronfleet.views import state_view

__all__ = ["router"]

router = APIRouter(tags=["overrides"])

_ACTION = {None: "job.clear_override", False: "job.pause", True: "job.resume"}


@router.put("/api/admin/cron/{job_id:path}", response_model=S.JobStateOut,
            responses=responses(401, 403, 404, 503))
async def set_override(job_id: JobIdPath, body: S.OverrideRequest, ctx: Ctx,
                       token: Editor) -> dict[str, Any]:
    job = await visible(ctx, token, job_id)
    t = now(ctx)
    until = control.until_time(body.enabled, body.until, job, t)
    state = await control.set_override(ctx, job, body.enabled, by=who(token), note=body.note,
                                       until=until)
    await audit(ctx, token, _ACTION[body.enabled], job.id,
                {"note": body.note, "until": None if until is None else until.isoformat()})
    return state_view(job, state, t)
