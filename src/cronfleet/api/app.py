"""The REST API: one FastAPI app over a running :class:`~cronfleet.Scheduler`.

Every ``/api`` route needs a bearer token; a token belongs to one team and sees only that
team's jobs, runs, secrets and audit entries -- anything else answers 404 exactly as if it
did not exist. Changes go to the store first (and are audited); the scheduler of this
process applies them at once, the others on notification or at their next catalog look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cronfleet.api import schemas as S
from cronfleet.api.errors import ApiError, install, responses
from cronfleet.catalog import Catalog, SpecInvalid, build_job
from cronfleet.clock import from_ts
from cronfleet.cron.duration import DurationError, to_timedelta
from cronfleet.errors import AlreadyExecuting, StoreError
from cronfleet.model import Job, JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.overview import next_fires, state_dict
from cronfleet.store.api import ApiStore, TokenInfo

log = logging.getLogger("cronfleet.api")

__all__ = ["ApiSettings", "create_app"]

MAX_PAGE = 200
JobIdPath = Annotated[str, Path(min_length=1, max_length=200, description="Job id.")]
RunIdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
SecretName = Annotated[str, Path(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$",
                                 description="Letters, digits and _.- (1-128).")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]


@dataclass
class ApiSettings:
    """``metrics``: ``"public"`` (no token, the default: scrapers rarely carry one) or
    ``"token"``. ``ready_max_overdue``: /readyz fails when the loop is this many seconds
    behind its earliest due slot. ``manage_scheduler``: the app's lifespan starts and
    stops the scheduler (for ``uvicorn module:app``)."""

    metrics: Literal["public", "token"] = "public"
    ready_max_overdue: float = 30.0
    manage_scheduler: bool = False
    catalog_poll: float = 2.0


@dataclass
class _Ctx:
    scheduler: Any
    api_store: ApiStore
    settings: ApiSettings
    catalog: Catalog
    http_runtime: Any
    vault: Any = None
    started: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


_bearer = HTTPBearer(auto_error=False, description="A token from `cronfleet tokens create`.")


def _ctx(request: Request) -> _Ctx:
    ctx: _Ctx = request.app.state.cronfleet
    return ctx


async def _ready_ctx(request: Request) -> _Ctx:
    """The context, with the catalog loaded (lazily: the app may be mounted in another
    app whose lifespan never runs ours)."""
    ctx = _ctx(request)
    if not ctx.started:
        async with ctx.lock:
            if not ctx.started:
                if not ctx.scheduler.running:
                    raise ApiError(503, "SCHEDULER_NOT_RUNNING",
                                   "the scheduler is not running in this process")
                try:
                    await ctx.catalog.start()
                except StoreError as exc:
                    raise ApiError(503, "STORE_UNAVAILABLE", f"cannot read jobs: {exc}"
                                   ) from None
                ctx.started = True
    return ctx


async def _token(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenInfo:
    ctx = _ctx(request)
    if creds is None or not creds.credentials:
        raise ApiError(401, "UNAUTHORIZED", "missing bearer token (Authorization: Bearer ...)",
                       headers={"WWW-Authenticate": "Bearer"})
    try:
        info = await ctx.api_store.authenticate(creds.credentials)
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot check the token: {exc}") from None
    if info is None:
        raise ApiError(401, "UNAUTHORIZED", "unknown or revoked token",
                       headers={"WWW-Authenticate": "Bearer"})
    return info


def _role(role: str) -> Any:
    async def check(token: Annotated[TokenInfo, Depends(_token)]) -> TokenInfo:
        if not token.can(role):
            raise ApiError(403, "FORBIDDEN",
                           f"token {token.name!r} has role {token.role}; this needs {role}")
        return token

    return check


Viewer = Annotated[TokenInfo, Depends(_role("viewer"))]
Editor = Annotated[TokenInfo, Depends(_role("editor"))]
Admin = Annotated[TokenInfo, Depends(_role("admin"))]
Ctx = Annotated[_Ctx, Depends(_ready_ctx)]


@contextlib.contextmanager
def _store_errors(what: str) -> Any:
    try:
        yield
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"{what}: {exc}; nothing changed") from None


def _who(token: TokenInfo) -> str:
    return f"{token.name} (team {token.team})"


async def _audit(ctx: _Ctx, token: TokenInfo, action: str, target: str,
                 details: dict[str, Any] | None = None) -> None:
    try:
        await ctx.api_store.audit(team=token.team, actor=token.name, action=action,
                                  target=target, details=details)
    except StoreError as exc:  # the change itself is recorded; say loudly what is missing
        log.error("audit entry lost (%s %s by %s): %s", action, target, _who(token), exc)


async def _visible(ctx: _Ctx, token: TokenInfo, job_id: str) -> Job:
    """The job if the token's team owns it; otherwise 404 (whoever owns it)."""
    job = ctx.scheduler.jobs.get(job_id)
    if job is None:
        with contextlib.suppress(StoreError):
            await ctx.catalog.refresh()  # created by another process a moment ago?
        job = ctx.scheduler.jobs.get(job_id)
    if not isinstance(job, Job) or job.team != token.team:
        raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
    return job


def _now(ctx: _Ctx) -> datetime:
    return from_ts(ctx.scheduler.clock.now())


def _summary(ctx: _Ctx, job: Job, state: JobState | None, last: RunRecord | None,
             now: datetime) -> dict[str, Any]:
    enabled = job.enabled if state is None else state.effective_enabled(job.enabled, now)
    fires = next_fires(job, now, 1)
    try:
        when = job.schedule.describe()
    except Exception:
        when = job.schedule.expr
    sd = state_dict(state, now)
    override = sd["override"]
    paused = bool(override and not override["expired"] and override["enabled"] is False)
    return {
        "id": job.id, "team": job.team, "source": job.source,
        "editable": ctx.catalog.is_stored(job.id),
        "schedule": job.schedule.expr, "timezone": str(job.schedule.tz),
        "description": job.description, "when": when,
        "declared_enabled": job.enabled, "enabled": enabled, "paused": paused,
        "next_run": fires[0].isoformat() if fires else None,
        "last_run": None if last is None else {
            "id": last.id, "status": last.status.value, "reason": last.reason,
            "slot": last.slot.isoformat(),
            "finished_at": None if last.finished_at is None else last.finished_at.isoformat(),
            "error": last.error,
        },
        **sd,
    }


def _stats(runs: list[RunRecord]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for r in runs:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    ended = [r for r in runs if r.status in (RunStatus.SUCCEEDED, RunStatus.FAILED,
                                             RunStatus.TIMED_OUT, RunStatus.INTERRUPTED)]
    ok = sum(1 for r in ended if r.status is RunStatus.SUCCEEDED)
    durations = [d for r in ended if (d := r.duration) is not None]
    lateness = [v for r in runs if (v := r.lateness) is not None]
    return {
        "runs": len(runs), "by_status": by_status,
        "success_rate": round(ok / len(ended), 4) if ended else None,
        "avg_duration": round(sum(durations) / len(durations), 6) if durations else None,
        "max_duration": max(durations) if durations else None,
        "avg_lateness": round(sum(lateness) / len(lateness), 6) if lateness else None,
    }


async def _detail(ctx: _Ctx, job: Job) -> dict[str, Any]:
    store = ctx.scheduler.store
    now = _now(ctx)
    with _store_errors("cannot read the job's state"):
        states = await store.read_states([job.id])
        runs = await store.list_runs(job.id, limit=100)
    out = _summary(ctx, job, states.get(job.id), runs[0] if runs else None, now)
    out["next_fire_times"] = [t.isoformat() for t in next_fires(job, now, 10)]
    out["recent_runs"] = [r.to_dict() for r in runs[:10]]
    out["stats"] = _stats(runs)
    out["spec"] = out["version"] = None
    if ctx.catalog.is_stored(job.id):
        with _store_errors("cannot read the job's definition"):
            d = await ctx.api_store.job_def(job.id)
        if d is not None:
            out.update(spec=d.spec, version=d.version, created_by=d.created_by,
                       updated_by=d.updated_by)
    return out


def _invalid(exc: SpecInvalid) -> ApiError:
    errors = [p.to_dict() for p in exc.problems]
    first = exc.problems[0]
    where = (f" (column {first.column})"
             if first.column is not None and "(column" not in first.message else "")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ApiError(422, "VALIDATION_ERROR", f"{first.field}: {first.message}{where}{more}",
                    {"errors": errors})


def _until(value: datetime | str | float | None, now: datetime) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str) and "T" in value:  # strict bodies keep ISO times as text
        with contextlib.suppress(ValueError):
            value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ApiError(422, "VALIDATION_ERROR", "until: give a time zone (e.g. ...Z)",
                           {"errors": [{"field": "until", "message": "naive datetime"}]})
        until = value
    else:
        try:
            delta = to_timedelta(value, field="until")
        except DurationError as exc:
            raise ApiError(422, "VALIDATION_ERROR", str(exc),
                           {"errors": [{"field": "until", "message": str(exc)}]}) from None
        if delta <= timedelta(0):
            raise ApiError(422, "VALIDATION_ERROR", "until: must be a positive duration",
                           {"errors": [{"field": "until", "message": "not positive"}]})
        try:
            until = now + delta
        except OverflowError:
            raise ApiError(422, "VALIDATION_ERROR", "until: too far in the future",
                           {"errors": [{"field": "until", "message": "too large"}]}) from None
    if until <= now:
        raise ApiError(422, "VALIDATION_ERROR", "until: must be in the future",
                       {"errors": [{"field": "until", "message": "in the past"}]})
    return until


def create_app(
    scheduler: Any,
    *,
    api_store: ApiStore | None = None,
    settings: ApiSettings | None = None,
    http_runtime: Any = None,
    vault: Any = None,
    catalog: Catalog | None = None,
) -> FastAPI:
    """The API app for ``scheduler`` (see :class:`ApiSettings`). Mount it in your own
    ASGI app or serve it with uvicorn; the scheduler must be running (``async with
    scheduler``) unless ``settings.manage_scheduler`` is set."""
    from cronfleet import __version__

    settings = settings or ApiSettings()
    store = api_store or ApiStore(scheduler.store.url)
    if http_runtime is None:
        from cronfleet.jobs.http import HttpRuntime

        http_runtime = HttpRuntime(store=scheduler.store.url)
    if catalog is None:
        catalog = Catalog(scheduler, store, runtime=http_runtime, poll=settings.catalog_poll)
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
    )
    app.state.cronfleet = _Ctx(scheduler, store, settings, catalog, http_runtime, vault,
                               started=catalog.started)
    install(app)
    _routes(app, settings)
    return app


def _routes(app: FastAPI, settings: ApiSettings) -> None:
    auth = responses(401, 403, 503)

    # -- jobs -------------------------------------------------------------------------

    @app.get("/api/jobs", response_model=S.JobPage, tags=["jobs"], responses=auth)
    async def list_jobs(
        ctx: Ctx, token: Viewer,
        paused: bool | None = None,
        status: Annotated[RunStatus | None, Query(description="Status of the last run.")
                          ] = None,
        text: Annotated[str | None, Query(max_length=200,
                                          description="Substring of id or description.")
                        ] = None,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
        limit: Limit = 50,
    ) -> dict[str, Any]:
        jobs = sorted((j for j in ctx.scheduler.jobs.values() if j.team == token.team),
                      key=lambda j: j.id)
        if cursor:
            jobs = [j for j in jobs if j.id > cursor]
        if text:
            needle = text.lower()
            jobs = [j for j in jobs if needle in j.id.lower() or needle in
                    j.description.lower()]
        now = _now(ctx)
        store = ctx.scheduler.store
        items: list[dict[str, Any]] = []
        more = False
        with _store_errors("cannot read job states"):
            states = await store.read_states([j.id for j in jobs]) if jobs else {}
            for job in jobs:
                state = states.get(job.id)
                if paused is not None:
                    s = state_dict(state, now)["override"]
                    is_paused = bool(s and not s["expired"] and s["enabled"] is False)
                    if is_paused != paused:
                        continue
                runs = await store.list_runs(job.id, limit=1)
                last = runs[0] if runs else None
                if status is not None and (last is None or last.status is not status):
                    continue
                if len(items) == limit:
                    more = True
                    break
                items.append(_summary(ctx, job, state, last, now))
        return {"items": items, "next_cursor": items[-1]["id"] if more else None}

    @app.post("/api/jobs", response_model=S.JobDetail, status_code=201, tags=["jobs"],
              responses=responses(401, 403, 409, 503))
    async def create_job(body: S.JobCreate, ctx: Ctx, token: Editor) -> dict[str, Any]:
        spec = body.model_dump(mode="json", exclude_none=True)
        if body.id in ctx.scheduler.jobs:
            raise ApiError(409, "JOB_EXISTS", f"job id {body.id!r} is already taken",
                           {"job_id": body.id})
        try:
            build_job(spec, team=token.team, runtime=ctx.http_runtime)
        except SpecInvalid as exc:
            raise _invalid(exc) from None
        with _store_errors("cannot store the job"):
            d = await ctx.api_store.create_job_def(body.id, token.team, spec, _who(token))
        if d is None:
            raise ApiError(409, "JOB_EXISTS", f"job id {body.id!r} is already taken",
                           {"job_id": body.id})
        job = ctx.catalog.apply(d)
        await _audit(ctx, token, "job.create", body.id, {"spec": spec})
        if job is None:  # a declared job took the id meanwhile (not in this process)
            raise ApiError(409, "JOB_EXISTS", f"job id {body.id!r} is already taken",
                           {"job_id": body.id})
        return await _detail(ctx, job)

    @app.get("/api/jobs/{job_id:path}/runs", response_model=S.RunPage, tags=["runs"],
             responses=responses(401, 403, 404, 503))
    async def job_runs(
        job_id: JobIdPath, ctx: Ctx, token: Viewer,
        status: RunStatus | None = None,
        cursor: Annotated[int | None, Query(ge=1, le=2**63 - 1,
                                            description="Runs older than this run id.")
                          ] = None,
        limit: Limit = 50,
    ) -> dict[str, Any]:
        job = await _visible(ctx, token, job_id)
        with _store_errors("cannot read the run history"):
            runs = await ctx.scheduler.store.list_runs(job.id, limit=limit + 1, status=status,
                                                       before_id=cursor)
        more = len(runs) > limit
        runs = runs[:limit]
        return {"items": [r.to_dict() for r in runs],
                "next_cursor": str(runs[-1].id) if more and runs else None}

    @app.post("/api/jobs/{job_id:path}/trigger", response_model=S.TriggerAccepted,
              status_code=202, tags=["jobs"], responses=responses(401, 403, 404, 409, 503))
    async def trigger(job_id: JobIdPath, ctx: Ctx, token: Editor) -> dict[str, Any]:
        job = await _visible(ctx, token, job_id)
        try:
            run = await ctx.scheduler.trigger_async(job.id, by=_who(token),
                                                    triggered_by=TriggeredBy.API)
        except AlreadyExecuting as exc:
            await _audit(ctx, token, "job.trigger", job.id,
                         {"refused": "already_executing", "holder": exc.holder})
            raise ApiError(409, exc.code, str(exc),
                           {"log": exc.record.to_dict(), "holder": exc.holder}) from None
        except StoreError as exc:
            raise ApiError(503, "STORE_UNAVAILABLE", f"cannot claim the run: {exc}; nothing "
                           "ran") from None
        await _audit(ctx, token, "job.trigger", job.id, {"run_id": run.id})
        return {"run_id": run.id, "job_id": job.id, "status": run.status.value,
                "instance_id": run.instance_id, "fencing_token": run.fencing_token}

    def _not_allowed(allowed: str) -> Any:
        async def refuse(request: Request) -> None:
            raise ApiError(405, "METHOD_NOT_ALLOWED",
                           f"{request.method} is not allowed here (allowed: {allowed})",
                           headers={"Allow": allowed})
        return refuse

    # without these, PATCH /api/jobs/x/runs would reach PATCH /api/jobs/{job_id:path}
    others = ["POST", "PUT", "PATCH", "DELETE", "GET", "HEAD", "OPTIONS"]
    app.add_api_route("/api/jobs/{job_id:path}/runs", _not_allowed("GET"),
                      methods=[m for m in others if m not in ("GET", "HEAD")],
                      include_in_schema=False)
    app.add_api_route("/api/jobs/{job_id:path}/trigger", _not_allowed("POST"),
                      methods=[m for m in others if m != "POST"], include_in_schema=False)

    @app.get("/api/jobs/{job_id:path}", response_model=S.JobDetail, tags=["jobs"],
             responses=responses(401, 403, 404, 503))
    async def get_job(job_id: JobIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
        return await _detail(ctx, await _visible(ctx, token, job_id))

    async def _stored(ctx: _Ctx, token: TokenInfo, job_id: str) -> Job:
        job = await _visible(ctx, token, job_id)
        if not ctx.catalog.is_stored(job.id):
            raise ApiError(
                409, "JOB_READ_ONLY",
                f"job {job.id!r} is declared in {job.source} and is read-only over the API; "
                "change its declaration, or use PUT /api/admin/cron/{id} to pause it and "
                "POST /api/jobs/{id}/trigger to run it", {"job_id": job.id,
                                                          "source": job.source})
        return job

    @app.patch("/api/jobs/{job_id:path}", response_model=S.JobDetail, tags=["jobs"],
               responses=responses(401, 403, 404, 409, 503))
    async def patch_job(job_id: JobIdPath, body: S.JobPatch, ctx: Ctx, token: Editor
                        ) -> dict[str, Any]:
        job = await _stored(ctx, token, job_id)
        with _store_errors("cannot read the job's definition"):
            d = await ctx.api_store.job_def(job.id)
        if d is None or d.deleted_at is not None:
            raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
        changes = body.model_dump(mode="json", exclude_unset=True)
        spec = dict(d.spec)
        for key, value in changes.items():
            if isinstance(value, dict) and key in ("http", "retry"):
                merged = {**(spec.get(key) or {}), **value}
                spec[key] = {k: v for k, v in merged.items() if v is not None}
            elif value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        try:
            build_job(spec, team=token.team, runtime=ctx.http_runtime)
        except SpecInvalid as exc:
            raise _invalid(exc) from None
        with _store_errors("cannot store the change"):
            new = await ctx.api_store.update_job_def(job.id, token.team, spec, _who(token),
                                                     expect_version=d.version)
        if new is None:
            raise ApiError(409, "CONFLICT", f"job {job.id!r} changed meanwhile; read it again "
                           "and retry", {"job_id": job.id})
        updated = ctx.catalog.apply(new) or job
        await _audit(ctx, token, "job.update", job.id, {"changes": changes})
        return await _detail(ctx, updated)

    @app.delete("/api/jobs/{job_id:path}", status_code=204, tags=["jobs"],
                responses=responses(401, 403, 404, 409, 503), response_class=Response)
    async def delete_job(job_id: JobIdPath, ctx: Ctx, token: Editor) -> Response:
        job = await _stored(ctx, token, job_id)
        with _store_errors("cannot delete the job"):
            deleted = await ctx.api_store.delete_job_def(job.id, token.team, _who(token))
            tomb = await ctx.api_store.job_def(job.id)
        if not deleted:
            raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
        if tomb is not None:
            ctx.catalog.apply(tomb)
        await _audit(ctx, token, "job.delete", job.id)
        return Response(status_code=204)

    # -- overrides --------------------------------------------------------------------

    @app.put("/api/admin/cron/{job_id:path}", response_model=S.JobStateOut,
             tags=["overrides"], responses=responses(401, 403, 404, 503))
    async def set_override(job_id: JobIdPath, body: S.OverrideRequest, ctx: Ctx,
                           token: Editor) -> dict[str, Any]:
        job = await _visible(ctx, token, job_id)
        now = _now(ctx)
        if body.enabled is None and body.until is not None:
            raise ApiError(422, "VALIDATION_ERROR", "until: only with enabled true or false",
                           {"errors": [{"field": "until",
                                        "message": "not allowed with enabled null"}]})
        until = _until(body.until, now)
        store = ctx.scheduler.store
        with _store_errors("cannot record the change"):
            state = await store.set_override(job.id, body.enabled, by=_who(token),
                                             note=body.note, until=until)
        ctx.scheduler._poke()
        action = {None: "job.clear_override", False: "job.pause", True: "job.resume"}
        await _audit(ctx, token, action[body.enabled], job.id,
                     {"note": body.note, "until": None if until is None else until.isoformat()})
        return {"job_id": job.id, "declared_enabled": job.enabled,
                "enabled": state.effective_enabled(job.enabled, now), **state_dict(state, now)}

    # -- runs -------------------------------------------------------------------------

    @app.get("/api/runs/{run_id}", response_model=S.RunOut, tags=["runs"],
             responses=responses(401, 403, 404, 503))
    async def get_run(run_id: RunIdPath, ctx: Ctx, token: Viewer) -> dict[str, Any]:
        with _store_errors("cannot read the run"):
            run = await ctx.scheduler.store.get_run(run_id)
            team = None
            if run is not None:
                job = ctx.scheduler.jobs.get(run.job_id)
                if job is not None:
                    team = job.team
                else:  # a deleted stored job keeps its team in its tombstone
                    d = await ctx.api_store.job_def(run.job_id)
                    team = None if d is None else d.team
        if run is None or team != token.team:
            raise ApiError(404, "RUN_NOT_FOUND", f"no run {run_id}", {"run_id": run_id})
        out: dict[str, Any] = run.to_dict()
        return out

    # -- cron preview -----------------------------------------------------------------

    @app.post("/api/cron/preview", response_model=S.PreviewOut, tags=["cron"],
              responses=responses(401, 403))
    async def preview(body: S.PreviewRequest, token: Viewer) -> dict[str, Any]:
        from cronfleet.cron import CronSyntaxError, NoFireTimeError, parse

        try:
            expr = parse(body.expr, tz=body.timezone)
        except CronSyntaxError as exc:
            fld = "timezone" if exc.field == "timezone" else "expr"
            detail = {"field": fld, "message": str(exc), "cron_field": exc.field,
                      "token": exc.token, "column": exc.column}
            raise ApiError(422, "INVALID_CRON", str(exc), {"errors": [detail]}) from None
        after = body.after or datetime.now(UTC)
        if after.tzinfo is None:
            after = after.replace(tzinfo=expr.tz)
        times: list[str] = []
        t = after
        for _ in range(body.count):
            try:
                t = expr.next(t)
            except (NoFireTimeError, OverflowError, ValueError):
                break
            times.append(t.isoformat())
        try:
            description = expr.describe()
        except Exception:
            description = body.expr
        return {"valid": True, "expr": body.expr, "timezone": str(expr.tz),
                "description": description, "next": times}

    # -- secrets ----------------------------------------------------------------------

    def _vault(ctx: _Ctx) -> Any:
        if ctx.vault is None:
            ctx.vault = ctx.http_runtime.vault
        return ctx.vault

    @app.get("/api/secrets", response_model=S.SecretList, tags=["secrets"],
             responses=responses(401, 403, 503))
    async def list_secrets(ctx: Ctx, token: Viewer) -> dict[str, Any]:
        with _store_errors("cannot read secrets"):
            entries = await _vault(ctx).entries(token.team)
        return {"items": [{"name": e.name, "created_at": e.created_at.isoformat(),
                           "updated_at": e.updated_at.isoformat()} for e in entries]}

    @app.put("/api/secrets/{name}", response_model=S.SecretWritten, tags=["secrets"],
             responses={201: {"model": S.SecretWritten, "description": "Created."},
                        **responses(401, 403, 503)})
    async def put_secret(name: SecretName, body: S.SecretValue, ctx: Ctx, token: Admin,
                         response: Response) -> dict[str, Any]:
        from cronfleet.secrets import SecretError, VaultLocked

        try:
            created = await _vault(ctx).set(name, body.value, token.team)
        except VaultLocked as exc:
            raise ApiError(503, "VAULT_LOCKED", str(exc)) from None
        except SecretError as exc:
            raise ApiError(422, "VALIDATION_ERROR", f"name: {exc}",
                           {"errors": [{"field": "name", "message": str(exc)}]}) from None
        except StoreError as exc:
            raise ApiError(503, "STORE_UNAVAILABLE", f"cannot store the secret: {exc}") from None
        await _audit(ctx, token, "secret.set", name, {"created": created})
        response.status_code = 201 if created else 200
        return {"name": name, "created": created}

    @app.delete("/api/secrets/{name}", status_code=204, tags=["secrets"],
                responses=responses(401, 403, 404, 503), response_class=Response)
    async def delete_secret(name: SecretName, ctx: Ctx, token: Admin) -> Response:
        with _store_errors("cannot delete the secret"):
            deleted = await _vault(ctx).delete(name, token.team)
        if not deleted:
            raise ApiError(404, "SECRET_NOT_FOUND", f"no secret {name!r}", {"name": name})
        await _audit(ctx, token, "secret.delete", name)
        return Response(status_code=204)

    # -- audit ------------------------------------------------------------------------

    @app.get("/api/audit", response_model=S.AuditPage, tags=["audit"],
             responses=responses(401, 403, 503))
    async def audit_log(
        ctx: Ctx, token: Admin,
        cursor: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
        limit: Limit = 50,
    ) -> dict[str, Any]:
        with _store_errors("cannot read the audit log"):
            entries = await ctx.api_store.audit_entries(token.team, limit=limit + 1,
                                                        before_id=cursor)
        more = len(entries) > limit
        entries = entries[:limit]
        return {"items": [e.to_dict() for e in entries],
                "next_cursor": str(entries[-1].id) if more and entries else None}

    # -- health, readiness, metrics ---------------------------------------------------

    @app.get("/healthz", response_model=S.Health, tags=["health"])
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=S.Ready, tags=["health"],
             responses={503: {"model": S.Ready, "description": "Not ready."}})
    async def readyz(request: Request, response: Response) -> dict[str, Any]:
        ctx = _ctx(request)
        sched = ctx.scheduler
        health: dict[str, Any] = sched.health()
        checks: dict[str, Any] = {"scheduler": health}
        ok = bool(sched.running)
        try:
            await asyncio.wait_for(sched.store.list_runs(limit=1), 5.0)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unreachable: {type(exc).__name__}: {exc}"
            ok = False
        h = checks["scheduler"]
        if h["timers"]:
            if not h["loop_alive"]:
                ok = False
                checks["loop"] = "the scheduler loop is not running"
            elif h["overdue"] > ctx.settings.ready_max_overdue:
                ok = False
                checks["loop"] = (f"the loop is {h['overdue']:.1f}s behind its earliest due "
                                  f"slot (limit {ctx.settings.ready_max_overdue:g}s)")
            else:
                checks["loop"] = "ok"
        if not ok:
            response.status_code = 503
        return {"status": "ready" if ok else "not ready", "checks": checks}

    metrics_doc: dict[int | str, dict[str, Any]] = {
        200: {"content": {"text/plain": {"schema": {"type": "string"}}},
              "description": "Prometheus text format."}}
    if settings.metrics == "token":
        metrics_doc.update(responses(401, 503))

    @app.get("/metrics", response_class=PlainTextResponse, tags=["health"],
             dependencies=[Depends(_token)] if settings.metrics == "token" else [],
             responses=metrics_doc)
    async def metrics(request: Request) -> PlainTextResponse:
        from cronfleet.metrics import CONTENT_TYPE_LATEST, render

        return PlainTextResponse(render(_ctx(request).scheduler),
                                 media_type=CONTENT_TYPE_LATEST)
