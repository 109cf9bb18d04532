"""Jobs created over the API: their spec, its validation, and keeping every scheduler's job
list in step with the definitions stored in the database.

A spec is plain JSON (what ``POST /api/jobs`` takes and what the ``job_defs`` table
holds)::

    {"id": "invoice-run", "schedule": "0 6 * * MON-FRI", "timezone": "Europe/Paris",
     "http": {"url": "https://billing.example.com/run", "method": "POST"},
     "retry": {"attempts": 3, "delay": "10s"}, "timeout": "5m", "overlap": "skip"}

Validation reuses what config files use (:func:`~cronfleet.plugins.schedule_to_job` for
the schedule fields, :class:`~cronfleet.jobs.http.HttpJob` for the request), so a spec is
judged by the same rules whichever way it arrives; every problem is reported at once as
``(field, message, column)``.

:class:`Catalog` loads the definitions when the scheduler starts and then follows changes:
at once for writes made through this process, on a PostgreSQL notification, and otherwise
by reading the store-wide catalog version every ``poll`` seconds (one tiny query).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronfleet.model import DEFAULT_TEAM, Job
from cronfleet.plugins import Schedule, ScheduleError, duration_seconds, schedule_to_job

if TYPE_CHECKING:
    from cronfleet.jobs.http import HttpRuntime
    from cronfleet.scheduler import Scheduler
    from cronfleet.store.api import ApiStore, JobDef

__all__ = ["SCHEDULE_FIELDS", "Catalog", "SpecInvalid", "SpecProblem", "build_job"]

log = logging.getLogger("cronfleet.catalog")

SOURCE = "api"
# spec keys that map onto Schedule fields (the rest: id, http, retry, auto_pause_after)
SCHEDULE_FIELDS = ("schedule", "timezone", "description", "enabled", "missed",
                   "catch_up_window", "locking", "overlap", "timeout", "jitter", "config")
SPEC_FIELDS = ("id", *SCHEDULE_FIELDS, "http", "retry", "auto_pause_after")
HTTP_FIELDS = ("url", "method", "headers", "body", "timeout", "follow_redirects",
               "accept_status", "body_contains", "body_not_contains", "body_regex",
               "body_not_regex", "signing_secret", "allow_private_targets")
RETRY_FIELDS = ("attempts", "backoff", "delay")


@dataclass(frozen=True)
class SpecProblem:
    field: str
    message: str
    column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"field": self.field, "message": self.message}
        if self.column is not None:
            out["column"] = self.column
        return out


class SpecInvalid(ValueError):
    """Every problem of a job spec."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))
        self.problems = problems


def _unknown(table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str
             ) -> list[SpecProblem]:
    return [SpecProblem(f"{prefix}{k}", f"unknown key (expected one of {', '.join(allowed)})")
            for k in table if k not in allowed]


def build_job(spec: Mapping[str, Any], *, team: str = DEFAULT_TEAM,
              runtime: HttpRuntime | None = None) -> Job:
    """The :class:`Job` a spec describes; raises :class:`SpecInvalid` listing every
    problem. The request's secrets are looked up in the team's namespace."""
    from cronfleet.jobs.http import HttpJob, HttpJobInvalid, RetryPolicy

    problems = _unknown(spec, SPEC_FIELDS, "")
    job_id = spec.get("id")
    if not isinstance(job_id, str):
        problems.append(SpecProblem("id", "required: a job id (text)"))
    if "schedule" not in spec:
        problems.append(SpecProblem("schedule", "required: a cron expression, macro or "
                                                "interval (e.g. \"0 6 * * *\" or \"15m\")"))
    config = spec.get("config", {})
    if not isinstance(config, dict):
        problems.append(SpecProblem("config", "expected a JSON object"))
        config = {}
    fields: dict[str, Any] = {
        "id": job_id if isinstance(job_id, str) else "placeholder",
        "cron": spec.get("schedule", "@daily"),
        "config_json": json.dumps(config) if config else "",
        "team": team,
    }
    for key in ("timezone", "description", "enabled", "missed", "catch_up_window",
                "locking", "overlap", "timeout", "jitter"):
        if key in spec and spec[key] is not None:
            fields[key] = spec[key]
    schedule = Schedule(**fields)
    job, errors = schedule_to_job(
        schedule, job_id=fields["id"], handler=_placeholder, timezone="UTC",
        catch_up_window=3600.0, source=SOURCE, config_must_be_object=True)
    for err in errors:
        if err.key == "id" and not isinstance(job_id, str):
            continue
        key = {"cron": "schedule", "config_json": "config"}.get(err.key, err.key)
        problems.append(SpecProblem(key, err.message, err.column))

    http = spec.get("http")
    handler = None
    if not isinstance(http, dict):
        problems.append(SpecProblem("http", 'required: the request, e.g. {"url": '
                                            '"https://example.com/hook"}'))
    else:
        problems += _unknown(http, HTTP_FIELDS, "http.")
        retry_spec = spec.get("retry") or {}
        retry = None
        if not isinstance(retry_spec, dict):
            problems.append(SpecProblem("retry", "expected an object with attempts, backoff, "
                                                 "delay"))
        else:
            problems += _unknown(retry_spec, RETRY_FIELDS, "retry.")
            try:
                kw = {k: v for k, v in retry_spec.items() if k in RETRY_FIELDS}
                if "delay" in kw:
                    kw["delay"] = duration_seconds(kw["delay"])
                retry = RetryPolicy(**kw)
            except ScheduleError as exc:
                problems.append(SpecProblem("retry.delay", exc.message))
            except (ValueError, TypeError) as exc:
                key, _, message = str(exc).partition(": ")
                problems.append(SpecProblem(f"retry.{key}" if message else "retry",
                                            message or str(exc)))
        kwargs = {k: v for k, v in http.items() if k in HTTP_FIELDS}
        if "timeout" in kwargs:
            try:
                kwargs["timeout"] = duration_seconds(kwargs["timeout"])
            except ScheduleError as exc:
                problems.append(SpecProblem("http.timeout", exc.message))
                kwargs.pop("timeout")
        if isinstance(kwargs.get("accept_status"), list):
            kwargs["accept_status"] = tuple(kwargs["accept_status"])
        if "url" not in kwargs:
            problems.append(SpecProblem("http.url", "required: an http(s) URL"))
        elif retry is not None:
            try:
                handler = HttpJob(**kwargs, retry=retry, namespace=team, runtime=runtime,
                                  auto_pause_after=spec.get("auto_pause_after"))
            except HttpJobInvalid as exc:
                for key, message in exc.problems:
                    name = "auto_pause_after" if key == "auto_pause_after" else f"http.{key}"
                    problems.append(SpecProblem(name, message))
            except TypeError as exc:
                problems.append(SpecProblem("http", str(exc)))
    if problems or job is None or handler is None:
        raise SpecInvalid(problems or [SpecProblem("spec", "invalid")])
    description = job.description or f"{handler.method} {handler.url}"
    return Job.create(
        job.schedule, handler, id=job.id, missed=job.missed,
        catch_up_window=job.catch_up_window, locking=job.locking, overlap=job.overlap,
        timeout=job.timeout, jitter=job.jitter, enabled=job.enabled, config=job.config,
        description=description, source=SOURCE, team=team)


def _placeholder(ctx: Any) -> None:  # pragma: no cover - replaced by the HTTP handler
    return None


class Catalog:
    """Keeps ``scheduler``'s jobs in step with the definitions in ``api_store``.

    Only jobs it added are ever replaced or removed: a definition whose id is taken by a
    job declared in code or config is reported and ignored.
    """

    def __init__(self, scheduler: Scheduler, api_store: ApiStore, *,
                 runtime: HttpRuntime | None = None, poll: float = 2.0) -> None:
        self.scheduler = scheduler
        self.api_store = api_store
        self.runtime = runtime
        self.poll = poll
        self._versions: dict[str, int] = {}
        self._seen = -1
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._task is not None

    def is_stored(self, job_id: str) -> bool:
        return job_id in self._versions

    async def start(self) -> None:
        if self._task is not None:
            return
        await self.refresh()
        self._changed = asyncio.Event()
        subscribe = getattr(self.scheduler.store, "subscribe", None)
        if subscribe is not None:
            await subscribe(self._changed.set)
        self._task = asyncio.get_running_loop().create_task(self._watch(),
                                                            name="cronfleet-catalog")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        assert self._changed is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.poll)
            self._changed.clear()
            try:
                await self.refresh()
            except Exception as exc:
                log.warning("cannot read the job catalog (%s); keeping the jobs as they are",
                            exc)

    async def refresh(self) -> None:
        """Apply every definition changed since the last look (cheap when none did)."""
        async with self._lock:
            version = await self.api_store.catalog_version()
            if version == self._seen:
                return
            defs = await self.api_store.job_defs(include_deleted=True)
            for d in defs:
                self._apply(d)
            self._seen = version

    def apply(self, d: JobDef) -> Job | None:
        """Apply one definition now (this process wrote it)."""
        return self._apply(d)

    def _apply(self, d: JobDef) -> Job | None:
        sched = self.scheduler
        if self._versions.get(d.id) == d.version:
            return sched.jobs.get(d.id)
        existing = sched.jobs.get(d.id)
        if existing is not None and d.id not in self._versions:
            if d.deleted_at is None:
                log.error("stored job %r ignored: a job declared in %s has this id",
                          d.id, existing.source)
            return None
        if d.deleted_at is not None:
            if d.id in self._versions:
                del self._versions[d.id]
                with contextlib.suppress(Exception):
                    sched.remove_job(d.id)
                log.info("job %s removed (deleted over the API)", d.id)
            return None
        try:
            job = build_job(d.spec, team=d.team, runtime=self.runtime)
        except SpecInvalid as exc:
            log.error("stored job %r ignored: %s", d.id, exc)
            return None
        if d.id in self._versions:
            sched.replace_job(job)
            log.info("job %s updated (version %d)", d.id, d.version)
        else:
            sched.add_job(job)
            log.info("job %s added from the catalog", d.id)
        self._versions[d.id] = d.version
        return job
