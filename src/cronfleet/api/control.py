"""Every state change the API makes, in one module: route handlers call these and hold
no rule themselves. Each goes through a :class:`~cronfleet.Scheduler` or
:class:`~cronfleet.catalog.Catalog` method where one exists; the two calls that still
reach past them are marked ``LEAD:`` (see docs/architecture.md, "API").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from cronfleet.api.deps import Context, store_errors
from cronfleet.api.errors import ApiError
from cronfleet.catalog import SpecInvalid, build_job
from cronfleet.errors import JobNotFound
from cronfleet.model import Job, JobState
from cronfleet.spec import FieldError, pause_until

__all__ = ["create_job", "delete_job", "invalid", "set_override", "taken", "until_time",
           "update_job"]


def _problem(field: str, message: str, detail: str) -> ApiError:
    return ApiError(422, "VALIDATION_ERROR", message,
                    {"errors": [{"field": field, "message": detail}]})


def until_time(enabled: bool | None, value: datetime | str | float | None, job: Job,
               now: datetime) -> datetime | None:
    """The end of a timed pause or force-on (a clear takes none), by the one rule of
    :func:`cronfleet.spec.pause_until`: an ISO time (without an offset: in the job's time
    zone) or a positive duration from now, in the future."""
    if value is None:
        return None
    if enabled is None:
        raise _problem("until", "until: only with enabled true or false",
                       "not allowed with enabled null")
    try:
        return pause_until(value, now=now, tz=job.schedule.tz)
    except FieldError as exc:
        raise _problem("until", f"until: {exc.message}", exc.message) from None


async def set_override(ctx: Context, job: Job, enabled: bool | None, *, by: str,
                       note: str | None, until: datetime | None) -> JobState:
    """Pause (``False``), force on (``True``) or clear (``None``) for every process."""
    scheduler = ctx.scheduler
    with store_errors("cannot record the change"), _gone(job.id):
        if enabled is False:
            state: JobState = await scheduler.pause_async(job.id, by=by, note=note, until=until)
        elif enabled is None:
            state = await scheduler.clear_override_async(job.id, by=by)
        else:
            state = await scheduler.resume_async(job.id, by=by, note=note, until=until)
    return state


@contextlib.contextmanager
def _gone(job_id: str) -> Iterator[None]:
    """A job removed from this process meanwhile (deleted over the API) is a 404."""
    try:
        yield
    except JobNotFound:
        raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id}) from None


def invalid(exc: SpecInvalid) -> ApiError:
    """A 422 naming every problem of a job spec."""
    errors = [p.to_dict() for p in exc.problems]
    first = exc.problems[0]
    where = (f" (column {first.column})"
             if first.column is not None and "(column" not in first.message else "")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ApiError(422, "VALIDATION_ERROR", f"{first.field}: {first.message}{where}{more}",
                    {"errors": errors})


def _validate(ctx: Context, spec: Mapping[str, Any], team: str) -> None:
    try:
        build_job(spec, team=team, runtime=ctx.http_runtime)
    except SpecInvalid as exc:
        raise invalid(exc) from None


def taken(job_id: str) -> ApiError:
    return ApiError(409, "JOB_EXISTS", f"job id {job_id!r} is already taken",
                    {"job_id": job_id})


# LEAD: the three job changes below belong on Catalog (create / update / delete a stored
# job: validate, write with the version check, apply); they live here, in one place,
# until catalog.py (SPEC) offers them.


async def create_job(ctx: Context, job_id: str, spec: dict[str, Any], team: str,
                     by: str) -> Job | None:
    """Validate, store and apply a new job; ``None`` when it was stored but a declared job
    took the id meanwhile (in another process)."""
    if job_id in ctx.scheduler.jobs:
        raise taken(job_id)
    _validate(ctx, spec, team)
    with store_errors("cannot store the job"):
        d = await ctx.api_store.create_job_def(job_id, team, spec, by)
    if d is None:
        raise taken(job_id)
    return ctx.catalog.apply(d)


async def update_job(ctx: Context, job: Job, changes: Mapping[str, Any], team: str,
                     by: str) -> Job:
    """Merge ``changes`` into the stored spec (``http`` and ``retry`` key by key; ``None``
    removes a key), validate the result and store it if nobody changed it meanwhile."""
    with store_errors("cannot read the job's definition"):
        d = await ctx.api_store.job_def(job.id)
    if d is None or d.deleted_at is not None:
        raise ApiError(404, "JOB_NOT_FOUND", f"no job {job.id!r}", {"job_id": job.id})
    spec = dict(d.spec)
    for key, value in changes.items():
        if isinstance(value, dict) and key in ("http", "retry"):
            merged = {**(spec.get(key) or {}), **value}
            spec[key] = {k: v for k, v in merged.items() if v is not None}
        elif value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    _validate(ctx, spec, team)
    with store_errors("cannot store the change"):
        new = await ctx.api_store.update_job_def(job.id, team, spec, by,
                                                 expect_version=d.version)
    if new is None:
        raise ApiError(409, "CONFLICT", f"job {job.id!r} changed meanwhile; read it again "
                       "and retry", {"job_id": job.id})
    return ctx.catalog.apply(new) or job


async def delete_job(ctx: Context, job: Job, team: str, by: str) -> None:
    with store_errors("cannot delete the job"):
        deleted = await ctx.api_store.delete_job_def(job.id, team, by)
        tomb = await ctx.api_store.job_def(job.id)
    if not deleted:
        raise ApiError(404, "JOB_NOT_FOUND", f"no job {job.id!r}", {"job_id": job.id})
    if tomb is not None:
        ctx.catalog.apply(tomb)
