"""Every state change the API makes, in one module: route handlers call these and hold
no rule themselves. Each is a :class:`~cronfleet.Scheduler` or
:class:`~cronfleet.catalog.Catalog` method; this module only turns their refusals into
answers (422, 404, 409, 503).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from cronfleet.api.deps import BATCH_DEADLINE, Context, in_time, local, store_errors
from cronfleet.api.errors import ApiError
from cronfleet.catalog import (
    BatchInvalid,
    ChangedMeanwhile,
    CommandJobsDisabled,
    IdTaken,
    SpecInvalid,
)
from cronfleet.clock import from_ts
from cronfleet.errors import (
    CronfleetError,
    JobNotFound,
    NotDeclared,
    RemoteRefused,
    RemoteTimeout,
    StoreError,
)
from cronfleet.model import Job, JobState, RunRecord
from cronfleet.spec import FieldError, FieldProblem, pause_until
from cronfleet.store.base import FleetRequest
from cronfleet.store.side import JobDef

__all__ = ["backfill", "cancel_backfill", "cancel_run", "create_job", "create_jobs",
           "delete_job", "invalid", "set_override", "taken", "until_time", "update_job"]

REMOTE_TIMEOUT = 30.0  # seconds to wait for a live instance to take a request


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
    if local(ctx, job.id) is not job:  # another process's job (the registry)
        async with in_time("cannot record the change"):
            with store_errors("cannot record the change"):
                remote: JobState = await scheduler.store.set_override(
                    job.id, enabled, by=by, note=note, until=until)
        return remote
    async with in_time("cannot record the change"):
        return await _set_here(scheduler, job, enabled, by=by, note=note, until=until)


async def _set_here(scheduler: Any, job: Job, enabled: bool | None, *, by: str,
                    note: str | None, until: datetime | None) -> JobState:
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


def taken(job_id: str) -> ApiError:
    return ApiError(409, "JOB_EXISTS", f"job id {job_id!r} is already taken",
                    {"job_id": job_id})


@contextlib.contextmanager
def _catalog_errors(job_id: str, what: str) -> Iterator[None]:
    """The catalog's refusals as answers: 422 (every problem), 409, 404, 503."""
    with store_errors(what):
        try:
            yield
        except SpecInvalid as exc:
            raise invalid(exc) from None
        except IdTaken:
            raise taken(job_id) from None
        except CommandJobsDisabled as exc:
            raise ApiError(403, "COMMAND_JOBS_DISABLED", str(exc),
                           {"job_id": job_id, "setting": "[api] allow_command_jobs"}) from None
        except ChangedMeanwhile as exc:
            raise ApiError(409, "CONFLICT", str(exc), {"job_id": job_id}) from None
        except JobNotFound:
            raise ApiError(404, "JOB_NOT_FOUND", f"no job {job_id!r}",
                           {"job_id": job_id}) from None


async def create_job(ctx: Context, job_id: str, spec: dict[str, Any], team: str,
                     by: str, role: str = "admin") -> Job | None:
    """A new stored job (``None``: a declared job took the id meanwhile); ``role``: the
    saving token's (an editor's job may only send secrets to their hosts)."""
    async with in_time("cannot store the job"):
        with _catalog_errors(job_id, "cannot store the job"):
            return await ctx.catalog.create(job_id, spec, team, by, role)


async def create_jobs(ctx: Context, items: Sequence[tuple[int, str, dict[str, Any]]],
                      team: str, by: str, role: str = "admin", *, dry_run: bool = False
                      ) -> tuple[list[tuple[JobDef, Job | None]], list[tuple[int, FieldProblem]]]:
    """Many new stored jobs, all or none (:meth:`Catalog.create_many`): ``items`` are
    ``(index in the request, id, spec)``. Answers what was stored (or would be), or, when
    any item is bad, nothing stored and every problem by its request index."""
    async with in_time("cannot store the jobs", BATCH_DEADLINE):
        with store_errors("cannot store the jobs"):
            try:
                made = await ctx.catalog.create_many([(j, s) for _, j, s in items], team,
                                                     by, role, dry_run=dry_run)
            except BatchInvalid as exc:
                return [], [(items[i][0], p) for i, p in exc.problems]
    return made, []


async def update_job(ctx: Context, job: Job, changes: Mapping[str, Any], team: str,
                     by: str, role: str = "admin") -> Job:
    async with in_time("cannot store the change"):
        with _catalog_errors(job.id, "cannot store the change"):
            return await ctx.catalog.update(job, changes, team, by, role)


async def delete_job(ctx: Context, job: Job, team: str, by: str) -> None:
    async with in_time("cannot delete the job"):
        with _catalog_errors(job.id, "cannot delete the job"):
            await ctx.catalog.delete(job.id, team, by)


async def cancel_run(ctx: Context, run: RunRecord, *, by: str, why: str) -> str:
    """Cancel ``run`` wherever it executes in the fleet (:meth:`Scheduler.cancel_async`);
    what was done, in words. 409 (ended, holder not live), 503 (no answer, store)."""
    assert run.id is not None
    if run.status.finished:  # on every store, even one without a job registry
        raise ApiError(409, "RUN_ENDED", f"run {run.id} of {run.job_id!r} has already ended "
                       f"({run.status.value})", {"run_id": run.id,
                                                 "instance": run.instance_id})
    try:
        how: str = await ctx.scheduler.cancel_async(run.id, by=by, why=why)
    except RemoteRefused as exc:
        raise ApiError(409, exc.code, str(exc), {"run_id": run.id,
                                                 "instance": exc.instance_id}) from None
    except RemoteTimeout as exc:
        raise ApiError(503, exc.code, str(exc), {"run_id": run.id,
                                                 "request_id": exc.request_id,
                                                 "withdrawn": exc.withdrawn}) from None
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot send the cancel: {exc}") from None
    except CronfleetError as exc:  # another process's run on a store without a registry
        raise ApiError(409, "CANCEL_UNSUPPORTED", str(exc), {"run_id": run.id,
                                                             "instance": run.instance_id}
                       ) from None
    return how


def backfill_range(job: Job, start: datetime, end: datetime, now: datetime) -> int:
    """The number of slots of a backfill of ``job`` from ``start`` to ``end``; a range
    :func:`~cronfleet.runtime.backfill.backfill_slots` refuses (reversed, later than
    ``now``, too long) is a 422 naming the field."""
    from cronfleet.runtime.backfill import BadRange, backfill_slots

    try:
        return len(backfill_slots(job, start, end, now=now))
    except BadRange as exc:
        raise ApiError(422, "BAD_RANGE", str(exc),
                       {"job_id": job.id, "errors": [{"field": exc.field,
                                                      "message": exc.message}]}) from None


async def backfill(ctx: Context, job: Job, start: datetime, end: datetime, *, by: str,
                   only_missing: bool, rate: float) -> tuple[FleetRequest, int]:
    """Ask a live instance declaring ``job`` to run its slots from ``start`` to ``end``
    again (:func:`~cronfleet.runtime.registry.remote_backfill`): the request once taken
    and the number of slots. 422 (range), 409 (nobody declares it, refused), 503."""
    from cronfleet.runtime.registry import remote_backfill

    slots = backfill_range(job, start, end, from_ts(ctx.scheduler.clock.now()))
    try:
        got = await remote_backfill(ctx.scheduler.store, job.id, start, end, by=by,
                                    ttl=ctx.scheduler.instance_ttl,
                                    only_missing=only_missing, rate=rate,
                                    timeout=REMOTE_TIMEOUT, api_store=ctx.api_store)
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
    return got, slots


async def cancel_backfill(ctx: Context, backfill_id: int, *, by: str) -> None:
    """Stop backfill ``backfill_id`` (the slot under way ends, later ones do not run).
    409 (already ended), 503 (no answer)."""
    from cronfleet.runtime.registry import remote_cancel_backfill

    try:
        await remote_cancel_backfill(ctx.scheduler.store, backfill_id, by=by,
                                     ttl=ctx.scheduler.instance_ttl, timeout=REMOTE_TIMEOUT)
    except RemoteRefused as exc:
        raise ApiError(409, exc.code, str(exc), {"backfill_id": backfill_id}) from None
    except RemoteTimeout as exc:
        raise ApiError(503, exc.code, str(exc), {"backfill_id": backfill_id}) from None
    except StoreError as exc:
        raise ApiError(503, "STORE_UNAVAILABLE", f"cannot send the cancel: {exc}") from None
