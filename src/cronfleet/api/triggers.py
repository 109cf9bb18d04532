"""``POST /api/jobs/{id}/trigger``: run a job now, in this process, under its lease."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Body

from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    ALL_METHODS,
    Ctx,
    Editor,
    JobIdPath,
    audit,
    is_remote,
    local,
    not_allowed,
    visible,
    who,
)
from cronfleet.api.errors import ApiError, responses
from cronfleet.catalog import SOURCE
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
    if job.source == SOURCE and is_remote(ctx, job):  # created elsewhere a moment ago?
        with contextlib.suppress(StoreError):  # then this process may hold it now
            await ctx.catalog.refresh()
        job = local(ctx, job.id) or job
    if is_remote(ctx, job):
        return await _remote(ctx, token, job.id, params, force)
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


REMOTE_TIMEOUT = 30.0  # seconds a remote trigger waits for a live instance to start it


async def _remote(ctx: Any, token: Any, job_id: str, params: dict[str, Any] | None,
                  force: bool) -> dict[str, Any]:
    """A job another process declares: the request goes through the store to a live
    instance that declares it (the job registry), which starts the run and answers."""
    from cronfleet.errors import NotDeclared, RemoteRefused, RemoteTimeout
    from cronfleet.runtime.registry import remote_trigger

    try:
        got = await remote_trigger(ctx.scheduler.store, job_id, by=who(token),
                                   ttl=ctx.scheduler.instance_ttl, params=params,
                                   force=force, timeout=REMOTE_TIMEOUT,
                                   api_store=ctx.api_store)
    except NotDeclared as exc:
        await audit(ctx, token, "job.trigger", job_id, {"refused": "not_declared"})
        raise ApiError(409, exc.code, str(exc), {"job_id": job_id, "gone": exc.gone}) from None
    except RemoteRefused as exc:
        await audit(ctx, token, "job.trigger", job_id, {"refused": exc.code,
                                                        "instance": exc.instance_id})
        raise ApiError(409, exc.code, str(exc), {"job_id": job_id, "instance": exc.instance_id,
                                                 "run_id": exc.run_id}) from None
    except RemoteTimeout as exc:
        raise ApiError(503, exc.code, str(exc), {"job_id": job_id,
                                                 "request_id": exc.request_id,
                                                 "withdrawn": exc.withdrawn}) from None
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot send the request: {exc}") from None
    details: dict[str, Any] = {"run_id": got.run_id, "instance": got.taken_by,
                               "remote": True}
    if force:
        details["force"] = True
    if params:
        details["params"] = sorted(params)
    await audit(ctx, token, "job.trigger", job_id, details)
    run = None if got.run_id is None else await ctx.scheduler.store.get_run(got.run_id)
    return {"run_id": got.run_id, "job_id": job_id,
            "status": "running" if run is None else run.status.value,
            "instance_id": got.taken_by,
            "fencing_token": None if run is None else run.fencing_token}


router.add_api_route("/api/jobs/{job_id:path}/trigger", not_allowed("POST"),
                     methods=[m for m in ALL_METHODS if m != "POST"], include_in_schema=False)
