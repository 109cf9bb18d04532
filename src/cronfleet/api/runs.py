"""Run history: ``GET /api/jobs/{id}/runs`` (newest first, paged by run id), runs across
jobs ``GET /api/runs`` (filters, newest first by slot, cursor paging), what runs now
``GET /api/runs/running`` and ``GET /api/runs/{run_id}``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from cronfleet.api import control
from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    ALL_METHODS,
    Ctx,
    Editor,
    JobIdPath,
    Limit,
    RunIdPath,
    Viewer,
    audit,
    not_allowed,
    now,
    run_teams,
    store_errors,
    team_jobs,
    team_runs,
    visible,
    visible_run,
    who,
)
from cronfleet.api.errors import ApiError, responses
from cronfleet.model import RunStatus
from cronfleet.spec import FieldError, time_bound
from cronfleet.store.base import RunCursor, RunFilter
from cronfleet.views import running_now

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


def _bound(name: str, value: str | None, at: datetime) -> datetime | None:
    if value is None:
        return None
    try:
        return time_bound(value, now=at, tz=UTC)
    except FieldError as exc:
        raise ApiError(422, "VALIDATION_ERROR", f"{name}: {exc.message}",
                       {"errors": [{"field": name, "message": exc.message}]}) from None


TimeQuery = Annotated[str | None, Query(
    max_length=64, description="An ISO 8601 time (UTC without an offset) or a duration "
    "back from now (`1d`, `2h30m`); bounds the run's slot.")]


@router.get("/api/runs", response_model=S.RunPage, responses=responses(401, 403, 404, 422, 503))
async def find_runs(
    ctx: Ctx, token: Viewer,
    status: RunStatus | None = None,
    job: Annotated[str | None, Query(min_length=1, max_length=200,
                                     description="Runs of this job only.")] = None,
    instance: Annotated[str | None, Query(min_length=1, max_length=200,
                                          description="Runs of this instance only.")] = None,
    since: TimeQuery = None,
    until: TimeQuery = None,
    cursor: Annotated[str | None, Query(max_length=64,
                                        description="`next_cursor` of the page before.")] = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    """Runs of every job of the token's team, newest first by (slot, id): one store query
    per page for a team with few stored jobs (by their ids); for a larger one the runs are
    read in order and the team's kept (``deps.team_runs``, at most 20 reads: a page may then
    hold fewer runs than ``limit`` and still have a ``next_cursor``)."""
    at = now(ctx)
    try:
        after = None if cursor is None else RunCursor.decode(cursor)
    except ValueError as exc:
        raise ApiError(422, "VALIDATION_ERROR", str(exc),
                       {"errors": [{"field": "cursor", "message": str(exc)}]}) from None
    since_at, until_at = _bound("since", since, at), _bound("until", until, at)
    if job is not None:  # another team's job is a 404, as on /api/jobs/{id}/runs
        scope: dict[str, Any] = {"job_id": (await visible(ctx, token, job)).id}
    else:
        ids = await team_jobs(ctx, token)
        scope = {} if ids is None else {"job_ids": ids}
    where = RunFilter(status=status, instance_id=instance, since=since_at, until=until_at,
                      **scope)
    if job is None and ids is None:
        runs, nxt = await team_runs(ctx, token.team, where, limit, after)
    else:
        with store_errors("cannot read the runs"):
            page = await ctx.scheduler.store.find_runs(where, limit=limit, after=after)
        runs, nxt = page.runs, page.next_cursor
    return {"items": [r.to_dict() for r in runs],
            "next_cursor": None if nxt is None else nxt.encode()}




@router.get("/api/runs/running", response_model=S.RunningPage,
            responses=responses(401, 403, 503))
async def runs_running(ctx: Ctx, token: Viewer, limit: Limit = 200) -> dict[str, Any]:
    """What runs right now, on which instance, since when, and until when its lease holds."""
    jobs = await team_jobs(ctx, token)
    with store_errors("cannot read the running runs"):
        items = await running_now(ctx.scheduler.store, jobs,
                                  limit=limit if jobs is not None else 500)
    if jobs is None:  # a team with many stored jobs: keep its own
        teams = await run_teams(ctx, [i["job_id"] for i in items])
        items = [i for i in items if teams.get(i["job_id"]) == token.team][:limit]
    return {"items": items}


@router.post("/api/runs/{run_id}/cancel", response_model=S.CancelAccepted, status_code=202,
             responses=responses(401, 403, 404, 409, 503))
async def cancel_run(run_id: RunIdPath, ctx: Ctx, token: Editor,
                     body: Annotated[S.CancelBody | None, Body()] = None) -> dict[str, Any]:
    """Cancel a run wherever it executes in the fleet: the instance holding it gets the
    request through the store and records the run ``cancelled`` with who and why."""
    run = await visible_run(ctx, token, run_id)
    why = (body.why if body is not None else None) or "no reason given"
    try:
        how = await control.cancel_run(ctx, run, by=who(token), why=why)
    except ApiError as exc:
        if exc.status == 409:
            await audit(ctx, token, "run.cancel", run.job_id, {"run_id": run_id,
                                                               "refused": exc.code})
        raise
    await audit(ctx, token, "run.cancel", run.job_id, {"run_id": run_id, "why": why})
    return {"run_id": run_id, "job_id": run.job_id, "instance_id": run.instance_id,
            "message": how}


@router.get("/api/runs/{run_id}", response_model=S.RunOut,
            responses=responses(401, 403, 404, 503))
async def get_run(run_id: RunIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
    out: dict[str, Any] = (await visible_run(ctx, token, run_id)).to_dict()
    return out


@router.get("/api/runs/{run_id}/attempts", response_model=S.RunAttempts,
            responses=responses(401, 403, 404, 503))
async def get_run_attempts(run_id: RunIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
    """The run's attempts, one record each, numbered 1..n (docs/api.md#attempts)."""
    from cronfleet.attempts import attempts_of

    run = await visible_run(ctx, token, run_id)
    return {"run_id": run_id, "job_id": run.job_id, "status": run.status.value,
            "items": [a.to_dict() for a in attempts_of(run)]}
