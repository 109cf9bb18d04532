"""Backfills: ``POST /api/jobs/{id}/backfill`` (editor) asks a live instance that declares
the job to run a past range of its slots again; ``GET /api/backfills/{id}`` reads its
progress (written to the store by the instance running it); ``POST
/api/backfills/{id}/cancel`` (editor) stops it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path

from cronfleet.api import schemas as S
from cronfleet.api.deps import Ctx, Editor, JobIdPath, Viewer, audit, visible, who
from cronfleet.api.errors import ApiError, responses
from cronfleet.errors import NotDeclared, RemoteRefused, RemoteTimeout, StoreError
from cronfleet.store.base import FleetRequest

__all__ = ["router"]

router = APIRouter(tags=["backfills"])

REMOTE_TIMEOUT = 30.0  # seconds to wait for a live instance to take a backfill
BackfillId = Path(ge=1, le=2**63 - 1, description="Backfill id (its request's id).")


def _state(req: FleetRequest) -> str:
    if not req.answered:
        return "queued" if req.taken_by is None else "running"
    if req.error is None:
        return "finished"
    return "cancelled" if req.error.startswith("CANCELLED") else "failed"


def _status(req: FleetRequest) -> dict[str, Any]:
    p = req.payload
    assert req.id is not None
    return {
        "id": req.id, "job_id": req.job_id, "requested_by": req.requested_by,
        "requested_at": None if req.requested_at is None else req.requested_at.isoformat(),
        "instance_id": req.taken_by, "state": _state(req), "error": req.error,
        "from": p.get("from"), "to": p.get("to"), "only_missing": bool(p.get("only_missing")),
        "progress": p.get("progress"),
    }


async def _visible_backfill(ctx: Any, token: Any, backfill_id: int) -> FleetRequest:
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
    from cronfleet.runtime.backfill import backfill_slots
    from cronfleet.runtime.registry import remote_backfill

    job = await visible(ctx, token, job_id)
    try:
        slots = backfill_slots(job, body.start, body.end)
    except ValueError as exc:
        raise ApiError(422, "BAD_RANGE", str(exc), {"job_id": job.id}) from None
    try:
        got = await remote_backfill(ctx.scheduler.store, job.id, body.start, body.end,
                                    by=who(token), ttl=ctx.scheduler.instance_ttl,
                                    only_missing=body.only_missing, rate=body.rate,
                                    timeout=REMOTE_TIMEOUT)
    except NotDeclared as exc:
        raise ApiError(409, exc.code, str(exc), {"job_id": job.id, "gone": exc.gone}) from None
    except RemoteRefused as exc:
        raise ApiError(409, exc.code, str(exc), {"job_id": job.id,
                                                 "instance": exc.instance_id}) from None
    except RemoteTimeout as exc:
        raise ApiError(503, exc.code, str(exc), {"job_id": job.id,
                                                 "backfill_id": exc.request_id,
                                                 "withdrawn": exc.withdrawn}) from None
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot send the request: {exc}") from None
    await audit(ctx, token, "job.backfill", job.id, {
        "backfill_id": got.id, "from": body.start.isoformat(), "to": body.end.isoformat(),
        "slots": len(slots), "only_missing": body.only_missing, "instance": got.taken_by})
    return _status(got)


@router.get("/api/backfills/{backfill_id}", response_model=S.BackfillStatus,
            responses=responses(401, 404, 503))
async def get_backfill(ctx: Ctx, token: Viewer, backfill_id: int = BackfillId
                       ) -> dict[str, Any]:
    return _status(await _visible_backfill(ctx, token, backfill_id))


@router.post("/api/backfills/{backfill_id}/cancel", response_model=S.BackfillStatus,
             responses=responses(401, 403, 404, 409, 503))
async def cancel_backfill(ctx: Ctx, token: Editor, backfill_id: int = BackfillId
                          ) -> dict[str, Any]:
    from cronfleet.runtime.registry import backfill_status, remote_cancel_backfill

    req = await _visible_backfill(ctx, token, backfill_id)
    try:
        await remote_cancel_backfill(ctx.scheduler.store, backfill_id, by=who(token),
                                     ttl=ctx.scheduler.instance_ttl, timeout=REMOTE_TIMEOUT)
    except RemoteRefused as exc:
        raise ApiError(409, exc.code, str(exc), {"backfill_id": backfill_id}) from None
    except RemoteTimeout as exc:
        raise ApiError(503, exc.code, str(exc), {"backfill_id": backfill_id}) from None
    await audit(ctx, token, "job.backfill.cancel", req.job_id, {"backfill_id": backfill_id})
    return _status(await backfill_status(ctx.scheduler.store, backfill_id,
                                         ttl=ctx.scheduler.instance_ttl))
