"""``POST /api/jobs/{id}/trigger``: run a job now, in this process, under its lease."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    ALL_METHODS,
    Ctx,
    Editor,
    JobIdPath,
    audit,
    not_allowed,
    visible,
    who,
)
from cronfleet.api.errors import ApiError, responses
from cronfleet.errors import AlreadyExecuting, JobPaused, StoreError
from cronfleet.model import TriggeredBy

__all__ = ["router"]

router = APIRouter(tags=["jobs"])


@router.post("/api/jobs/{job_id:path}/trigger", response_model=S.TriggerAccepted,
             status_code=202, responses=responses(401, 403, 404, 409, 503))
async def trigger(job_id: JobIdPath, ctx: Ctx, token: Editor,
                  body: Annotated[S.TriggerBody | None, Body()] = None) -> dict[str, Any]:
    job = await visible(ctx, token, job_id)
    params, force = (None, False) if body is None else (body.params, body.force)
    try:
        run = await ctx.scheduler.trigger_async(job.id, by=who(token),
                                                triggered_by=TriggeredBy.API,
                                                params=params, force=force)
    except JobPaused as exc:
        await audit(ctx, token, "job.trigger", job.id, {"refused": "paused"})
        raise ApiError(409, exc.code, str(exc), {
            "job_id": job.id, "by": exc.by, "note": exc.note,
            "until": None if exc.until is None else exc.until.isoformat()}) from None
    except AlreadyExecuting as exc:
        await audit(ctx, token, "job.trigger", job.id,
                    {"refused": "already_executing", "holder": exc.holder})
        raise ApiError(409, exc.code, str(exc),
                       {"log": exc.record.to_dict(), "holder": exc.holder}) from None
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot claim the run: {exc}; nothing "
                       "ran") from None
    details: dict[str, Any] = {"run_id": run.id}
    if run.forced_by is not None:
        details["forced"] = True
    if params:
        details["params"] = sorted(params)  # the keys: values may be sensitive
    await audit(ctx, token, "job.trigger", job.id, details)
    return {"run_id": run.id, "job_id": job.id, "status": run.status.value,
            "instance_id": run.instance_id, "fencing_token": run.fencing_token}


router.add_api_route("/api/jobs/{job_id:path}/trigger", not_allowed("POST"),
                     methods=[m for m in ALL_METHODS if m != "POST"], include_in_schema=False)
