"""What every route depends on: the app's context (scheduler, catalog, API store,
settings), the bearer token and its role, team scoping (a job of another team is a 404),
the audit trail and the mapping of store errors to 503."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cronfleet.api.errors import ApiError
from cronfleet.catalog import SOURCE, Catalog
from cronfleet.clock import from_ts
from cronfleet.errors import StoreError
from cronfleet.model import Job, RunRecord
from cronfleet.store.side import ApiStore, JobDef, TokenInfo
from cronfleet.views import kept_runs

if TYPE_CHECKING:
    from cronfleet.store.base import RunCursor, RunFilter

log = logging.getLogger("cronfleet.api")

__all__ = [
    "ALL_METHODS",
    "BATCH_DEADLINE",
    "MAX_PAGE",
    "Admin",
    "ApiSettings",
    "Context",
    "Ctx",
    "Editor",
    "JobIdPath",
    "Limit",
    "RunIdPath",
    "SecretName",
    "Viewer",
    "audit",
    "context",
    "not_allowed",
    "now",
    "ready_context",
    "store_errors",
    "stored",
    "team_jobs",
    "team_runs",
    "token",
    "visible",
    "visible_run",
    "who",
]

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
    stops the scheduler (for ``uvicorn module:app``). ``max_request_body``: a larger request
    body answers 413 (bytes). ``allow_command_jobs``: accept and run command jobs stored
    over the API (off by default: they execute code on every host of the fleet)."""

    metrics: Literal["public", "token"] = "public"
    ready_max_overdue: float = 30.0
    manage_scheduler: bool = False
    catalog_poll: float = 2.0
    max_request_body: int = 1024 * 1024
    dashboard: bool = True
    # jobs that run a command (code execution on the fleet): off unless turned on
    allow_command_jobs: bool = False
    # the peers whose X-Forwarded-Proto / -For uvicorn believes (addresses, networks, "*");
    # None: uvicorn's default, $FORWARDED_ALLOW_IPS else 127.0.0.1 and ::1
    forwarded_allow_ips: list[str] | None = None


@dataclass
class Context:
    """What the app serves: one per app, in ``app.state.cronfleet``."""

    scheduler: Any
    api_store: ApiStore
    settings: ApiSettings
    catalog: Catalog
    http_runtime: Any
    vault: Any = None
    started: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # remote_jobs: job id -> ((digest, team, source), the Job or None when unreadable);
    # a registry row's spec is parsed once per digest, not at every request
    remote_cache: dict[str, tuple[tuple[str, str, str], Job | None]] = field(
        default_factory=dict)
    # fleet(): (loop time of the read, the registry as read), read again every heartbeat
    fleet_cache: tuple[float, dict[str, Any]] | None = None

    def get_vault(self) -> Any:
        if self.vault is None:
            self.vault = self.http_runtime.vault
        return self.vault


def context(request: Request) -> Context:
    ctx: Context = request.app.state.cronfleet
    return ctx


async def ready_context(request: Request) -> Context:
    """The context, with the catalog loaded (lazily: the app may be mounted in another
    app whose lifespan never runs ours)."""
    ctx = context(request)
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


_bearer = HTTPBearer(auto_error=False, description="A token from `cronfleet tokens create`.")


async def token(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenInfo:
    ctx = context(request)
    if creds is None or not creds.credentials:
        raise ApiError(401, "UNAUTHORIZED", "missing bearer token (Authorization: Bearer ...)",
                       headers={"WWW-Authenticate": "Bearer"})
    try:
        async with asyncio.timeout(INTERACTIVE_DEADLINE):
            info = await ctx.api_store.authenticate(creds.credentials)
    except StoreError as exc:
        raise unavailable(f"cannot check the token: {exc}") from None
    except TimeoutError:
        raise unavailable(f"cannot check the token: the store did not answer within "
                          f"{INTERACTIVE_DEADLINE:g}s") from None
    if info is None:
        raise ApiError(401, "UNAUTHORIZED", "unknown or revoked token",
                       headers={"WWW-Authenticate": "Bearer"})
    return info


def _role(role: str) -> Any:
    async def check(tok: Annotated[TokenInfo, Depends(token)]) -> TokenInfo:
        if not tok.can(role):
            raise ApiError(403, "FORBIDDEN",
                           f"token {tok.name!r} has role {tok.role}; this needs {role}")
        return tok

    return check


Viewer = Annotated[TokenInfo, Depends(_role("viewer"))]
Editor = Annotated[TokenInfo, Depends(_role("editor"))]
Admin = Annotated[TokenInfo, Depends(_role("admin"))]
Ctx = Annotated[Context, Depends(ready_context)]


INTERACTIVE_DEADLINE = 2.0
"""Seconds a store call of an API request may take (token check, a change and its audit
entry each): past it the request answers 503 with ``Retry-After``, never a client's own
timeout."""
BATCH_DEADLINE = 30.0
"""Seconds a batch of up to 1,000 new jobs may take (validation and its one transaction)."""
RETRY_AFTER = "5"  # seconds, the 503's Retry-After: a store that hangs may be failing over


def unavailable(message: str) -> ApiError:
    """The 503 of a store that failed or did not answer in time, with ``Retry-After``."""
    return ApiError(503, "STORE_UNAVAILABLE", message, headers={"Retry-After": RETRY_AFTER})


@contextlib.contextmanager
def store_errors(what: str) -> Iterator[None]:
    """A store error inside the block answers 503: ``what``, and that nothing changed."""
    try:
        yield
    except StoreError as exc:
        raise unavailable(f"{what}: {exc}; nothing changed") from None


@contextlib.asynccontextmanager
async def in_time(what: str, deadline: float = INTERACTIVE_DEADLINE
                  ) -> AsyncIterator[None]:
    """The block's store calls get ``deadline`` seconds (:data:`INTERACTIVE_DEADLINE`
    unless said, :data:`BATCH_DEADLINE` for a batch of jobs): a store that
    does not answer (a stalled connection, a pool with no connection to give) answers 503
    with ``Retry-After`` instead of holding the request. A change that timed out may still
    be recorded when the store comes back: every change the API makes can be sent again."""
    try:
        async with asyncio.timeout(deadline):
            yield
    except TimeoutError:
        raise unavailable(f"{what}: the store did not answer within "
                          f"{deadline:g}s; the change may or may not be "
                          "recorded: send it again when the store answers") from None


def who(tok: TokenInfo) -> str:
    return f"{tok.name} (team {tok.team})"


def now(ctx: Context) -> datetime:
    return from_ts(ctx.scheduler.clock.now())


async def audit(ctx: Context, tok: TokenInfo, action: str, target: str,
                details: dict[str, Any] | None = None) -> None:
    try:
        async with asyncio.timeout(INTERACTIVE_DEADLINE):
            await ctx.api_store.audit(team=tok.team, actor=tok.name, action=action,
                                      target=target, details=details)
    except (StoreError, TimeoutError) as exc:  # the change is recorded: say what is missing
        log.error("audit entry lost (%s %s by %s): %s", action, target, who(tok),
                  exc or f"no answer within {INTERACTIVE_DEADLINE:g}s")


REGISTRY_EVERY = 3.0
"""Seconds between two reads of the whole job registry by an API process: a job declared
or dropped elsewhere shows within that. The heartbeat interval of the former default ttl
(15 s): now that processes beat every 0.4 s, reading 100,000 registry rows (seconds) that
often would make nearly every request pay for it."""


async def fleet(ctx: Context) -> dict[str, Any]:
    """The fleet's job registry (``FleetJob`` by id; ``{}`` on a store without one).

    Read from the store at most every :data:`REGISTRY_EVERY` seconds (or once per
    heartbeat, ``instance_ttl / 5``, if longer) and kept in ``ctx.fleet_cache``; in between, only
    the instances are read again (a few rows), so who is live is always current. A GET
    /api/jobs of a 100,000-job fleet no longer reads 100,000 registry rows per request."""
    from cronfleet.runtime.registry import fleet_jobs
    from cronfleet.store.base import RegistryStore

    store = ctx.scheduler.store
    if not isinstance(store, RegistryStore):
        return {}
    ttl = ctx.scheduler.instance_ttl
    at = asyncio.get_running_loop().time()
    with store_errors("cannot read the job registry"):
        cached = ctx.fleet_cache
        if cached is None or at - cached[0] >= max(REGISTRY_EVERY, ttl / 5) or at < cached[0]:
            found = await fleet_jobs(store, ttl=ttl)
            ctx.fleet_cache = (at, found)
            return found
        live = {i.instance_id for i in await store.list_instances(ttl=ttl) if i.live}
    found = cached[1]
    for fj in found.values():
        for d in fj.rows:
            d.live = d.instance_id in live
    return found


def local(ctx: Context, job_id: str) -> Job | None:
    """The job this process holds with this id (no copy of the job table: it may hold
    many), or None."""
    from cronfleet.errors import JobNotFound

    try:
        job: Job = ctx.scheduler.get_job(job_id)
    except JobNotFound:
        return None
    return job


def declared_here(ctx: Context) -> list[Job]:
    """The jobs this process declares in code or config (its API jobs, whichever it
    holds, are read from ``job_defs``)."""
    return [j for j in ctx.scheduler.iter_jobs() if isinstance(j, Job) and j.source != SOURCE]


def remote_jobs(ctx: Context, found: Mapping[str, Any]) -> dict[str, Job]:
    """The jobs of the registry this process does not declare, as handler-less jobs
    (their team from the registry: team scoping holds for them too); API jobs are read
    from ``job_defs`` only, whatever the registry says. Each spec is read once per digest
    (``ctx.remote_cache``): the registry is still read at every call, only the parsing
    is kept."""
    from cronfleet.runtime.registry import job_from_spec

    cache = ctx.remote_cache
    out: dict[str, Job] = {}
    for job_id, fj in found.items():
        cur = fj.current
        if cur.source == SOURCE:  # job_defs is the truth of API jobs (a deleted
            continue  # one may linger in other processes' rows until their next refresh)
        here = local(ctx, job_id)
        if here is not None and here.source != SOURCE:
            continue
        key = (cur.digest, cur.team, cur.source)
        hit = cache.get(job_id)
        if hit is None or hit[0] != key:
            job: Job | None = None
            with contextlib.suppress(ValueError):  # a schedule only its host can read
                job = job_from_spec(job_id, cur.spec, team=cur.team, source=cur.source)
            hit = cache[job_id] = (key, job)
        if hit[1] is not None:
            out[job_id] = hit[1]
    if len(cache) > 2 * max(len(found), 1000):  # ids gone from the registry
        for job_id in [j for j in cache if j not in found]:
            del cache[job_id]
    return out


def declared_jobs(ctx: Context, found: Mapping[str, Any]) -> list[Job]:
    """Every declared job of the fleet: this process's and the registry's others (never
    an API job: those are read from ``job_defs``)."""
    return [*declared_here(ctx), *remote_jobs(ctx, found).values()]


def is_remote(ctx: Context, job: Job) -> bool:
    """A job another process declares (from the registry), or an API job this process
    does not hold: not one of this process's jobs."""
    return local(ctx, job.id) is not job


def stored_job(ctx: Context, d: JobDef) -> Job | None:
    """The job of a live stored definition: the one this process holds when it holds
    it (at this version), else built from the definition on demand."""
    here = local(ctx, d.id)
    if here is not None and here.source == SOURCE and ctx.catalog.held_version(d.id) == d.version:
        return here
    return ctx.catalog.build(d)


async def stored_def(ctx: Context, job_id: str) -> JobDef | None:
    """The live stored definition with this id (one read by key), or None."""
    with store_errors("cannot read the job's definition"):
        d = await ctx.api_store.job_def(job_id)
    return d if d is not None and d.deleted_at is None else None


async def visible(ctx: Context, tok: TokenInfo, job_id: str) -> Job:
    """The job if the token's team owns it -- declared here, stored over the API (read
    from ``job_defs`` by its id, whether this process holds it or not), or declared by
    another process of the fleet (the job registry); otherwise 404 (whoever owns it). A
    declared job wins an id a stored definition also has (the catalog ignores that
    definition)."""
    job = local(ctx, job_id)
    if job is not None and job.source == SOURCE:
        job = None
    if job is None:
        d = await stored_def(ctx, job_id)
        if d is not None:
            job = stored_job(ctx, d) if d.team == tok.team else None
            if job is None:
                raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
    if job is None:
        job = remote_jobs(ctx, {k: v for k, v in (await fleet(ctx)).items()
                                if k == job_id}).get(job_id)
    if not isinstance(job, Job) or job.team != tok.team:
        raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
    return job


SCOPE_IDS = 1000
"""A team with at most this many stored jobs has its runs read by the list of its ids;
a larger one by reading runs in order and keeping its own (:func:`run_teams`)."""


async def team_jobs(ctx: Context, tok: TokenInfo) -> frozenset[str] | None:
    """The ids whose runs the token's team sees: its jobs here, its jobs created over the
    API and deleted since, and its declared jobs gone from the config (their runs keep the
    team, as in :func:`visible_run`); None when the team has more than
    :data:`SCOPE_IDS` stored jobs (then the caller keeps a page's runs by
    :func:`run_teams`). Reads at most :data:`SCOPE_IDS` + 1 definitions, never all."""
    with store_errors("cannot read the job definitions"):
        defs = await ctx.api_store.job_defs_page(tok.team, limit=SCOPE_IDS + 1,
                                                 include_deleted=True)
        if len(defs) > SCOPE_IDS:
            return None
        reserved = await ctx.api_store.reserved_ids(tok.team)
    ids = {j.id for j in declared_here(ctx) if j.team == tok.team}
    ids.update(d.id for d in defs)
    ids.update(reserved)
    # the jobs other processes declare (the registry rows carry the team)
    ids.update(j for j, fj in (await fleet(ctx)).items()
               if fj.current.source != SOURCE and fj.current.team == tok.team)
    return frozenset(ids)


async def run_teams(ctx: Context, job_ids: Sequence[str]) -> dict[str, str]:
    """The team of each job id that has one (the runs of a page): declared here, a stored
    definition or its tombstone, a reserved id of a config job, the registry. One read of
    the definitions for the page, then only for ids none of those name."""
    out: dict[str, str] = {}
    rest = []
    for job_id in dict.fromkeys(job_ids):
        here = local(ctx, job_id)
        if here is not None and here.source != SOURCE:
            out[job_id] = here.team
        else:
            rest.append(job_id)
    with store_errors("cannot read the job definitions"):
        out.update(await ctx.api_store.job_def_teams(rest))
        found = None
        for job_id in rest:
            if job_id in out:
                continue
            team = await ctx.api_store.reserved_team(job_id)
            if team is None:
                found = await fleet(ctx) if found is None else found
                fj = found.get(job_id)
                team = None if fj is None else fj.current.team
            if team is not None:
                out[job_id] = team
    return out


async def team_runs(ctx: Context, team: str, where: RunFilter, limit: int,
                    after: RunCursor | None
                    ) -> tuple[list[RunRecord], RunCursor | None]:
    """Up to ``limit`` runs of ``team`` matching ``where`` (which names no job), newest
    first: pages of every job's runs, the team's kept (:func:`run_teams`, one read of the
    definitions per page), paged by :func:`cronfleet.views.kept_runs`."""

    async def theirs(job_ids: Sequence[str]) -> set[str]:
        return {j for j, t in (await run_teams(ctx, job_ids)).items() if t == team}

    with store_errors("cannot read the runs"):
        return await kept_runs(ctx.scheduler.store, where, theirs, limit=limit, after=after)


async def visible_run(ctx: Context, tok: TokenInfo, run_id: int) -> RunRecord:
    """The run if the token's team owns its job (a deleted stored job keeps its team in its
    tombstone, a job gone from the config in ``job_ids``); otherwise 404."""
    with store_errors("cannot read the run"):
        run: RunRecord | None = await ctx.scheduler.store.get_run(run_id)
    team = None if run is None else (await run_teams(ctx, [run.job_id])).get(run.job_id)
    if run is None or team != tok.team:
        raise ApiError(404, "RUN_NOT_FOUND", f"no run {run_id}", {"run_id": run_id})
    return run


async def stored(ctx: Context, tok: TokenInfo, job_id: str) -> Job:
    """A visible job created over the API; 409 for a job declared in code or config."""
    job = await visible(ctx, tok, job_id)
    if job.source != SOURCE:
        raise ApiError(
            409, "JOB_READ_ONLY",
            f"job {job.id!r} is declared in {job.source} and is read-only over the API; "
            "change its declaration, or use PUT /api/admin/cron/{id} to pause it and "
            "POST /api/jobs/{id}/trigger to run it", {"job_id": job.id,
                                                      "source": job.source})
    return job


def not_allowed(allowed: str) -> Any:
    """A route answering 405 with ``Allow: allowed`` (keeps PATCH /api/jobs/x/runs from
    reaching PATCH /api/jobs/{job_id:path})."""

    async def refuse(request: Request) -> None:
        raise ApiError(405, "METHOD_NOT_ALLOWED",
                       f"{request.method} is not allowed here (allowed: {allowed})",
                       headers={"Allow": allowed})

    return refuse


ALL_METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET", "HEAD", "OPTIONS")
