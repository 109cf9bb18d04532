"""Backfills: ``POST /api/jobs/{id}/backfill`` (editor) asks a live instance that declares
the job to run a past range of its slots again; ``GET /api/backfills/{id}`` reads its
progress (written to the store by the instance running it); ``POST
/api/backfills/{id}/cancel`` (editor) stops it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path

from cronfleet.api import control
from cronfleet.api import schemas as S
from cronfleet.api.deps import Ctx, Editor, JobIdPath, Viewer, audit, visible, who
from cronfleet.api.errors import ApiError, responses
from cronfleet.errors import RemoteRefused, StoreError
from cronfleet.store.base import FleetRequest

__all__ = ["backfill_out", "backfill_state", "router", "visible_backfill"]

router = APIRouter(tags=["backfills"])

BackfillId = Path(ge=1, le=2**63 - 1, description="Backfill id (its request's id).")


def backfill_state(req: FleetRequest) -> str:
    if not req.answered:
        return "queued" if req.taken_by is None else "running"
    if req.error is None:
        return "finished"
    return "cancelled" if req.error.startswith("CANCELLED") else "failed"


def backfill_out(req: FleetRequest) -> dict[str, Any]:
    p = req.payload
    assert req.id is not None
    return {
        "id": req.id, "job_id": req.job_id, "requested_by": req.requested_by,
        "requested_at": None if req.requested_at is None else req.requested_at.isoformat(),
        "instance_id": req.taken_by, "state": backfill_state(req), "error": req.error,
        "from": p.get("from"), "to": p.get("to"), "only_missing": bool(p.get("only_missing")),
        "progress": p.get("progress"),
    }


async def visible_backfill(ctx: Any, token: Any, backfill_id: int) -> FleetRequest:
    from cronfleet.runtime.registry import backfill_status

    try:
        req = await backfill_status(ctx.scheduler.store, backfill_id,
                                    ttl=ctx.scheduler.instance_ttl)
        await visible(ctx, token, req.job_id)  # 404 for another team's job
    except RemoteRefused:
        raise ApiError(404, "BACKFILL_NOT_FOUND", f"no backfill {backfill_id}",
                       {"backfill_id": backfill_id}) from None
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(404, "BACKFILL_NOT_FOUND", f"no backfill {backfill_id}",
                           {"backfill_id": backfill_id}) from None
        raise
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot read the backfill: {exc}") from None
    return req


@router.post("/api/jobs/{job_id:path}/backfill", response_model=S.BackfillStatus,
             status_code=202, responses=responses(401, 403, 404, 409, 503))
async def backfill(job_id: JobIdPath, body: S.BackfillBody, ctx: Ctx,
                   token: Editor) -> dict[str, Any]:
    job = await visible(ctx, token, job_id)
    got, slots = await control.backfill(ctx, job, body.start, body.end, by=who(token),
                                        only_missing=body.only_missing, rate=body.rate)
    await audit(ctx, token, "job.backfill", job.id, {
        "backfill_id": got.id, "from": body.start.isoformat(), "to": body.end.isoformat(),
        "slots": slots, "only_missing": body.only_missing, "instance": got.taken_by})
    return backfill_out(got)


@router.get("/api/backfills/{backfill_id}", response_model=S.BackfillStatus,
            responses=responses(401, 404, 503))
async def get_backfill(ctx: Ctx, token: Viewer, backfill_id: int = BackfillId
                       ) -> dict[str, Any]:
    return backfill_out(await visible_backfill(ctx, token, backfill_id))


@router.post("/api/backfills/{backfill_id}/cancel", response_model=S.BackfillStatus,
             responses=responses(401, 403, 404, 409, 503))
async def cancel_backfill(ctx: Ctx, token: Editor, backfill_id: int = BackfillId
                          ) -> dict[str, Any]:
    from cronfleet.runtime.registry import backfill_status

    req = await visible_backfill(ctx, token, backfill_id)
    await control.cancel_backfill(ctx, backfill_id, by=who(token))
    await audit(ctx, token, "job.backfill.cancel", req.job_id, {"backfill_id": backfill_id})
    return backfill_out(await backfill_status(ctx.scheduler.store, backfill_id,
                                              ttl=ctx.scheduler.instance_ttl))
