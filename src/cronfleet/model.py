"""Data shared by the scheduler, the executor and every store.

Times inside records are aware UTC datetimes; the loop itself works in epoch seconds
(see :mod:`cronfleet.clock`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

# a job's fields and their types are the spec's (declared once, in cronfleet.spec); they
# are re-exported here, where the runtime and the stores have always found them
from cronfleet.spec import (
    BACKOFF_STRATEGIES,
    DEFAULT_CATCH_UP_WINDOW,
    DEFAULT_TEAM,
    EVENTS,
    EmailSettings,
    JobFields,
    Locking,
    Missed,
    NotifyPolicy,
    Overlap,
    RetryPolicy,
    check_team,
    validate_declared,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import date

    from cronfleet.cron import CronExpr

    ScheduleArg = str | CronExpr | Sequence[str | CronExpr] | None
    InstantArg = str | datetime | date | None

__all__ = [
    "BACKOFF_STRATEGIES",
    "DEFAULT_TEAM",
    "EVENTS",
    "EmailSettings",
    "Handler",
    "Job",
    "JobState",
    "Locking",
    "Missed",
    "NotifyPolicy",
    "Overlap",
    "RetryPolicy",
    "RunContext",
    "RunRecord",
    "RunStatus",
    "SkipReason",
    "TriggeredBy",
    "check_team",
    "enabled_at",
    "is_async_handler",
    "skip_reason",
]



class TriggeredBy(StrEnum):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    API = "api"
    RECOVERY = "recovery"
    BACKFILL = "backfill"


class RunStatus(StrEnum):
    PENDING = "pending"  # claimed, waiting for its jitter delay or a queued lease
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"  # stopped by an operator (Runs.cancel) or replaced (REPLACE)

    @property
    def finished(self) -> bool:
        return self not in (RunStatus.PENDING, RunStatus.RUNNING)


class SkipReason(StrEnum):
    PAUSED = "paused"
    DISABLED = "disabled"
    MISSED = "missed"
    ALREADY_EXECUTING = "already_executing"
    STORE_UNAVAILABLE = "store_unavailable"
    SUPERSEDED = "superseded"  # a recovery that never got its job's lease in time, or a
    # REPLACE slot waiting without a claim (store away) that a newer slot replaced
    OVERLOADED = "overloaded"  # came due while this process was busy with earlier slots
    # and could not start on time (runtime/loop.py, docs/concepts.md "Overload")


RunResult = Any
Handler = Callable[["RunContext"], Awaitable[Any] | Any]

LEASE_GRACE = 30.0
LEASE_WITHOUT_TIMEOUT = 3600.0


def _problems_text(job_id: object, schedule: object, problems: list[Any]) -> str:
    """``job 'x': timeout: ...; schedule '61 * * * *': ...``: every problem of a job."""
    parts = []
    for p in problems:
        if p.key == "id":
            parts.append(p.message if p.message.startswith("job id") else
                         f"job id {job_id!r}: {p.message}")
        elif p.key == "schedule" and isinstance(schedule, str):
            parts.append(f"schedule {schedule!r}: {p.message}")
        else:
            parts.append(str(p))
    head = "" if problems and problems[0].key == "id" else f"job {job_id!r}: "
    return head + "; ".join(parts)


_NO_DEFAULT = object()
# Job.create's defaults that validate_job gives too (None values are always defaults)
_CREATE_DEFAULTS: dict[str, Any] = {
    "missed": Missed.RUN_ONCE, "catch_up_window": DEFAULT_CATCH_UP_WINDOW,
    "locking": Locking.REQUIRE_GLOBAL, "overlap": Overlap.SKIP, "jitter": 0, "enabled": True,
    "recover": False, "description": "", "team": DEFAULT_TEAM, "max_instances": 1,
}


# Job.create's arguments checked by validate_job besides the id and the schedule parts
_CREATE_KEYS = ("timezone", "missed", "catch_up_window", "locking", "overlap", "timeout",
                "jitter", "enabled", "recover", "config", "description", "team", "retry",
                "notify", "auto_pause_after", "max_instances")
_CREATE_DEFAULT_VALUES = tuple(_CREATE_DEFAULTS.get(k, _NO_DEFAULT) for k in _CREATE_KEYS)


@dataclass(frozen=True, eq=False)
class Job(JobFields):
    """A declared unit of work: the job's fields (:class:`cronfleet.spec.JobFields`, with
    ``id`` and ``schedule`` first), what runs it and where it was declared. Build it with
    :meth:`Job.create`, which validates."""

    handler: Handler | None = None
    source: str = "code"

    @classmethod
    def create(
        cls,
        schedule: ScheduleArg,
        handler: Handler | None,
        *,
        id: str,
        timezone: str | None = None,
        at: InstantArg = None,
        start: InstantArg = None,
        end: InstantArg = None,
        exclude: Sequence[str] | str | None = None,
        missed: Missed | str = Missed.RUN_ONCE,
        catch_up_window: str | float | timedelta = DEFAULT_CATCH_UP_WINDOW,
        locking: Locking | str = Locking.REQUIRE_GLOBAL,
        overlap: Overlap | str = Overlap.SKIP,
        timeout: str | float | timedelta | None = None,
        jitter: str | float | timedelta = 0,
        enabled: bool = True,
        recover: bool = False,
        config: Mapping[str, Any] | None = None,
        description: str = "",
        source: str = "code",
        team: str = DEFAULT_TEAM,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        notify: NotifyPolicy | Mapping[str, Any] | None = None,
        auto_pause_after: int | None = None,
        max_instances: int = 1,
    ) -> Job:
        """Validate every field (see :func:`cronfleet.spec.validate_job`) and build the
        job; raises ``ValueError`` naming every problem at once.

        ``schedule``: one expression or a list of them (their instants united), or
        ``None`` with ``at`` (a one-off instant). ``start``/``end`` bound the slots
        (inclusive); ``exclude`` lists the exclusions (the spec's ``except``: ``"12-25"``,
        ``"2026-12-24"``, a cron expression, ``"calendar:PATH"``)."""
        given = (timezone, missed, catch_up_window, locking, overlap, timeout, jitter,
                 enabled, recover, config, description, team, retry, notify,
                 auto_pause_after, max_instances)  # in _CREATE_KEYS' order
        # a value that is exactly its default needs no checking (declaring 100,000 jobs
        # in code must stay cheap); validate_job fills in the same defaults
        fields: dict[str, Any] = {"id": id, "schedule": schedule}
        if at is not None or start is not None or end is not None or exclude is not None:
            fields.update({"at": at, "start": start, "end": end, "except": exclude})
        for key, value, default in zip(_CREATE_KEYS, given, _CREATE_DEFAULT_VALUES,
                                       strict=True):
            if value is None or value is default or (
                    type(value) is type(default) and value == default):
                continue
            fields[key] = value
        # validated once per distinct set of arguments (every job after the first of
        # 100,000 alike checks its id only); every problem still names this job
        kwargs, problems = validate_declared(fields)
        if kwargs is None:
            raise ValueError(_problems_text(id, schedule, problems))
        if cls is not Job or _JOB_POST_INIT:
            return cls(handler=handler, source=source, **kwargs)
        # what the frozen dataclass's __init__ does (object.__setattr__ of every field,
        # each one given: JobSpec.job_fields names all but these two), in one update
        # instead of 21 calls: ~1 us against ~5 us a job
        job = object.__new__(cls)
        vars(job).update(kwargs, handler=handler, source=source)
        return job

    @cached_property
    def period(self) -> float | None:
        """Seconds between slots for interval schedules, else None."""
        p = self.schedule.period
        return None if p is None else p.total_seconds()

    @cached_property
    def is_async(self) -> bool:
        return self.handler is not None and is_async_handler(self.handler)

    @cached_property
    def own_policies(self) -> bool:
        """The handler applies its retry itself (HTTP jobs: per request, Retry-After
        honoured) and says so with ``applies_job_policies = True``; the runtime's retry then
        leaves it to the handler. Alerts (notify, auto-pause) are the listener's for every
        job kind."""
        return bool(getattr(self.handler, "applies_job_policies", False))

    @cached_property
    def lease_seconds(self) -> float:
        """Lease length: timeout + 30 s, or 1 h for a job without a timeout (renewed while
        it runs). A handler retried by the runtime (``retry``) holds it for every attempt
        and every wait in between: ``attempts × timeout + waits + 30 s``."""
        if self.timeout is None:
            return LEASE_WITHOUT_TIMEOUT
        retry = self.retry
        if retry is None or retry.attempts <= 1 or self.own_policies:
            return self.timeout + LEASE_GRACE
        waits = sum(retry.wait(n) for n in range(1, retry.attempts))
        return retry.attempts * self.timeout + waits + LEASE_GRACE


_JOB_POST_INIT = hasattr(Job, "__post_init__")  # Job.create's shortcut only without one


@dataclass(slots=True)
class JobState:
    """The shared per-job row: pause override and execution lease."""

    job_id: str
    enabled_override: bool | None = None
    override_by: str | None = None
    override_at: datetime | None = None
    override_note: str | None = None
    override_until: datetime | None = None
    lease_holder: str | None = None
    lease_token: int | None = None
    lease_until: datetime | None = None
    last_slot: datetime | None = None
    created_at: datetime | None = None

    def override_at_time(self, now: datetime) -> bool | None:
        """The override in force at ``now``: ``None`` when there is none or its ``until``
        has passed."""
        if self.override_until is not None and self.override_until <= now:
            return None
        return self.enabled_override

    def effective_enabled(self, declared: bool, now: datetime) -> bool:
        """The override wins until its ``until`` passes; then the declared value."""
        override = self.override_at_time(now)
        return declared if override is None else override

    def enabled_at(self, job: Job, now: datetime) -> bool:
        """THE rule for "is ``job`` enabled at ``now``" (see :func:`enabled_at`)."""
        return self.effective_enabled(job.enabled, now)

    def skip_reason(self, job: Job, now: datetime) -> SkipReason | None:
        """Why a slot of ``job`` at ``now`` is not run, or ``None`` when it runs: ``paused``
        while a pause override is in force, else ``disabled`` when the job is off (declared
        ``enabled=False`` and not forced on, including after a pause expired)."""
        override = self.override_at_time(now)
        if override is False:
            return SkipReason.PAUSED
        if override is None and not job.enabled:
            return SkipReason.DISABLED
        return None

    def lease_live(self, now: datetime) -> bool:
        return (
            self.lease_holder is not None
            and self.lease_until is not None
            and self.lease_until > now
        )


def enabled_at(job: Job, state: JobState | None, now: datetime) -> bool:
    """Is ``job`` enabled at ``now`` given its shared state row (``None``: no override)?"""
    return job.enabled if state is None else state.effective_enabled(job.enabled, now)


def skip_reason(job: Job, state: JobState | None, now: datetime) -> SkipReason | None:
    """Why ``job`` does not run at ``now`` (``paused`` / ``disabled``), or ``None``."""
    if state is None:
        return None if job.enabled else SkipReason.DISABLED
    return state.skip_reason(job, now)


def is_async_handler(handler: Handler) -> bool:
    """``async def`` functions, and objects whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = inspect.getattr_static(type(handler), "__call__", None)
    return inspect.isfunction(call) and inspect.iscoroutinefunction(call)


@dataclass(slots=True)
class RunRecord:
    """One execution, or one deliberate non-execution, of one job."""

    id: int | None
    job_id: str
    slot: datetime
    triggered_by: TriggeredBy
    status: RunStatus
    instance_id: str | None = None
    fencing_token: int | None = None
    manual: bool = False
    is_catchup: bool = False
    is_recovery: bool = False
    attempt: int = 1
    reason: str | None = None
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    deadline: datetime | None = None
    result: Any = None
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    # a manual run's parameters (``ctx.params``) and who forced it while the job was paused
    # or disabled (None: not forced)
    params: dict[str, Any] | None = None
    forced_by: str | None = None

    @property
    def success(self) -> bool:
        return self.status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED)

    @property
    def lateness(self) -> float | None:
        """Seconds between the nominal slot and the handler's start."""
        if self.started_at is None or self.manual:
            return None
        return (self.started_at - self.slot).total_seconds()

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        def iso(d: datetime | None) -> str | None:
            return None if d is None else d.isoformat()

        return {
            "id": self.id,
            "job_id": self.job_id,
            "slot": iso(self.slot),
            "triggered_by": self.triggered_by.value,
            "manual": self.manual,
            "is_catchup": self.is_catchup,
            "is_recovery": self.is_recovery,
            "instance_id": self.instance_id,
            "fencing_token": self.fencing_token,
            "attempt": self.attempt,
            "status": self.status.value,
            "success": self.success,
            "reason": self.reason,
            "claimed_at": iso(self.claimed_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "lateness": self.lateness,
            "duration": self.duration,
            "result": self.result,
            "error": self.error,
            "logs": list(self.logs),
            "params": self.params,
            "forced": self.forced_by is not None,
            "forced_by": self.forced_by,
        }


@dataclass(slots=True)
class RunContext:
    """What a handler receives: which slot it runs, why, and a log it can write to."""

    job_id: str
    slot: datetime
    triggered_by: TriggeredBy
    instance_id: str
    fencing_token: int | None
    config: Mapping[str, Any]
    run_id: int | None = None
    is_catchup: bool = False
    is_recovery: bool = False
    manual: bool = False
    attempt: int = 1
    logs: list[str] = field(default_factory=list)
    params: Mapping[str, Any] = field(default_factory=dict)
    """The parameters of a manual run (``cronfleet trigger --param k=v``, the API's
    ``params``); empty for scheduled runs."""
    # set by the scheduler: writes the run's row now (see save()); None elsewhere
    saver: Callable[[bool], Awaitable[int | None]] | None = field(default=None, repr=False)

    async def save(self, *, wait: bool = False) -> int | None:
        """Write the run's row now, with its log lines so far, so a long run's output is
        visible (``show-run``, the API) while it runs. ``wait``: return once it is written
        (a few seconds at most), with the run's id -- None outside a scheduler or while
        the store cannot be written."""
        if self.saver is not None:
            run_id = await self.saver(wait)
            if run_id is not None:
                self.run_id = run_id
        return self.run_id

    @property
    def schedule_id(self) -> str:
        """The job id without its plugin prefix (``plugin/schedule`` → ``schedule``)."""
        return self.job_id.rsplit("/", 1)[-1]

    def log(self, message: str) -> None:
        """Append a line to the run's log (stored with the run record)."""
        self.logs.append(str(message))
