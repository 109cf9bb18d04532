"""``/api/jobs``: list, read, create, change and delete jobs (the last three only for jobs
created over the API)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from cronfleet.api import control
from cronfleet.api import schemas as S
from cronfleet.api.deps import (
    Context,
    Ctx,
    Editor,
    JobIdPath,
    Limit,
    Viewer,
    audit,
    declared_jobs,
    fleet,
    local,
    now,
    store_errors,
    stored,
    stored_job,
    visible,
    who,
)
from cronfleet.api.errors import ApiError, field_errors, responses
from cronfleet.catalog import SOURCE
from cronfleet.model import Job, RunStatus
from cronfleet.spec import ID_CHARS
from cronfleet.views import SCAN_MAX, JobView, job_view, jobs_by_key, next_fires, run_stats

__all__ = ["detail", "item_router", "router", "summary"]

router = APIRouter(tags=["jobs"])

RECENT = 10  # runs shown in a job's detail
STATS_OVER = 100  # runs its statistics cover


def summary(ctx: Context, view: JobView, now_: Any,
            found: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One job in a list: the shared view plus the API's team, editable (a stored
    definition: created over the API, whichever process runs it) and paused, and what the
    fleet's registry says of it (``found``: ``FleetJob`` by id)."""
    stored_job = view.job.source == SOURCE
    out = {**view.to_dict(now_), "team": view.job.team, "editable": stored_job}
    fj = None if found is None else found.get(view.job.id)
    if fj is not None:
        d = fj.to_dict()
        out.update(kind=d["kind"], declared=d["declared"], declared_by=d["declared_by"],
                   conflict=d["conflict"], remote=local(ctx, view.job.id) is not view.job)
    return out


async def detail(ctx: Context, job: Job) -> dict[str, Any]:
    store = ctx.scheduler.store
    t = now(ctx)
    with store_errors("cannot read the job's state"):
        states = await store.read_states([job.id])
        runs = await store.list_runs(job.id, limit=STATS_OVER)
    out = summary(ctx, job_view(job, states.get(job.id), runs[0] if runs else None, t), t,
                  await fleet(ctx))
    out["next_fire_times"] = [x.isoformat() for x in next_fires(job, t, 10)]
    out["recent_runs"] = [r.to_dict() for r in runs[:RECENT]]
    out["stats"] = run_stats(runs)
    out["spec"] = out["version"] = None
    if job.source == SOURCE:
        with store_errors("cannot read the job's definition"):
            d = await ctx.api_store.job_def(job.id)
        if d is not None:
            out.update(spec=d.spec, version=d.version, created_by=d.created_by,
                       updated_by=d.updated_by)
    return out


def _id_part(name: str, value: str | None) -> str:
    """A ``cursor`` or ``prefix``: characters a job id may hold, or a 422 naming it."""
    if not value:
        return ""
    if not ID_CHARS.fullmatch(value):
        message = (f"{value!r} is not part of a job id (letters, digits and ._:@+-/ "
                   "only)")
        raise ApiError(422, "VALIDATION_ERROR", f"{name}: {message}",
                       {"errors": [{"field": name, "message": message}]})
    return value




@router.get("/api/jobs", response_model=S.JobPage, responses=responses(401, 403, 422, 503))
async def list_jobs(
    ctx: Ctx, token: Viewer,
    paused: bool | None = None,
    status: Annotated[RunStatus | None, Query(description="Status of the last run.")] = None,
    prefix: Annotated[str | None, Query(max_length=200, description=(
        "Ids starting with this (an index range: fast at any size)."))] = None,
    text: Annotated[str | None, Query(max_length=200, description=(
        f"Substring of id or description (any case): a scan of at most {SCAN_MAX:,} "
        "jobs per request, which may answer fewer than `limit` items with a "
        "`next_cursor` to go on from."))] = None,
    cursor: Annotated[str | None, Query(max_length=200, description=(
        "`next_cursor` of the page before (the id the page starts after)."))] = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    """The token's team's jobs in id order, declared (code, config) and created over the
    API, in keyset pages: each page reads the stored definitions after the cursor through
    the index ``(team, id)``, never every job."""
    after, start = _id_part("cursor", cursor), _id_part("prefix", prefix)
    t = now(ctx)
    found = await fleet(ctx)
    with store_errors("cannot read the jobs"):
        views, nxt = await jobs_by_key(
            ctx.scheduler.store, declared_jobs(ctx, found), ctx.api_store,
            lambda d: stored_job(ctx, d), t, team=token.team, limit=limit, after=after,
            prefix=start, text=text, paused=paused,
            statuses=None if status is None else (status,))
    return {"items": [summary(ctx, v, t, found) for v in views], "next_cursor": nxt}


@router.post("/api/jobs", response_model=S.JobDetail, status_code=201,
             responses=responses(401, 403, 409, 503))
async def create_job(body: S.JobCreate, ctx: Ctx, token: Editor) -> dict[str, Any]:
    spec = body.model_dump(mode="json", exclude_none=True, by_alias=True)
    job = await control.create_job(ctx, body.id, spec, token.team, who(token), token.role)
    await audit(ctx, token, "job.create", body.id, {"spec": spec})
    if job is None:
        raise control.taken(body.id)
    return await detail(ctx, job)


@router.post("/api/jobs:batch", response_model=S.BatchCreated, status_code=201,
             responses={200: {"model": S.BatchCreated,
                              "description": "dry_run: what would be created; nothing was"},
                        **responses(401, 403, 413, 422, 503)})
async def create_jobs(
    body: S.JobBatch, ctx: Ctx, token: Editor,
    dry_run: Annotated[bool, Query(description="Check everything, store nothing: answers "
                                               "what would be created (200).")] = False,
) -> Any:
    """Up to 1,000 new jobs at once, all or none: each item is judged as ``POST
    /api/jobs`` judges its body; one bad item stores none and the 422 names every problem
    of every bad item as ``jobs[index].field``."""
    if len(body.jobs) > S.MAX_BATCH:
        raise ApiError(413, "TOO_LARGE",
                       f"jobs: {len(body.jobs)} jobs; a batch holds at most {S.MAX_BATCH}",
                       {"field": "jobs", "limit": S.MAX_BATCH, "count": len(body.jobs)})
    problems: list[dict[str, Any]] = []
    items: list[tuple[int, str, dict[str, Any]]] = []
    for i, raw in enumerate(body.jobs):
        where = f"jobs[{i}]"
        if not isinstance(raw, dict):
            problems.append({"field": where, "index": i,
                             "message": f"expected a job (an object), got "
                                        f"{type(raw).__name__}"})
            continue
        try:
            one = S.JobCreate.model_validate(raw)
        except ValidationError as exc:
            problems += [{**e, "field": f"{where}.{e['field']}", "index": i}
                         for e in field_errors(exc.errors(include_url=False))]
            continue
        if one.id is None:
            problems.append({"field": f"{where}.id", "index": i, "message": "Field required"})
            continue
        items.append((i, one.id, one.model_dump(mode="json", exclude_none=True,
                                                by_alias=True)))
    made, bad = await control.create_jobs(ctx, items, token.team, who(token), token.role,
                                          dry_run=dry_run or bool(problems))
    problems += [{**p.under(f"jobs[{i}]").to_dict(), "index": i} for i, p in bad]
    if problems:
        problems.sort(key=lambda p: int(p["index"]))
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ApiError(422, "VALIDATION_ERROR",
                       f"{first['field']}: {first['message']}{more}; no job was created",
                       {"errors": problems})
    if not dry_run:
        await audit(ctx, token, "job.create_batch", f"{len(made)} jobs",
                    {"ids": [d.id for d, _ in made]})
    out = {"dry_run": dry_run, "count": len(made),
           "jobs": [{"id": d.id, "version": d.version} for d, _ in made]}
    return JSONResponse(out, status_code=200 if dry_run else 201)


# the ``/api/jobs/{job_id:path}`` routes: the app includes this router after the runs and
# trigger routers, whose ``.../runs`` and ``.../trigger`` the greedy path would swallow
item_router = APIRouter(tags=["jobs"])


@item_router.get("/api/jobs/{job_id:path}", response_model=S.JobDetail,
                 responses=responses(401, 403, 404, 503))
async def get_job(job_id: JobIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
    return await detail(ctx, await visible(ctx, token, job_id))


@item_router.patch("/api/jobs/{job_id:path}", response_model=S.JobDetail,
                   responses=responses(401, 403, 404, 409, 503))
async def patch_job(job_id: JobIdPath, body: S.JobPatch, ctx: Ctx, token: Editor
                    ) -> dict[str, Any]:
    job = await stored(ctx, token, job_id)
    changes = body.model_dump(mode="json", exclude_unset=True, by_alias=True)
    updated = await control.update_job(ctx, job, changes, token.team, who(token),
                                       token.role)
    await audit(ctx, token, "job.update", job.id, {"changes": changes})
    return await detail(ctx, updated)


@item_router.delete("/api/jobs/{job_id:path}", status_code=204, response_class=Response,
                    responses=responses(401, 403, 404, 409, 503))
async def delete_job(job_id: JobIdPath, ctx: Ctx, token: Editor) -> Response:
    job = await stored(ctx, token, job_id)
    await control.delete_job(ctx, job, token.team, who(token))
    await audit(ctx, token, "job.delete", job.id)
    return Response(status_code=204)
