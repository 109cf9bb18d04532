"""Exceptions raised by cronfleet's public API.

Every error names what is wrong and where (job id, field), so an operator can act on the
message alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from cronfleet.model import RunRecord

__all__ = [
    "AlreadyExecuting",
    "CronfleetError",
    "DuplicateJob",
    "JobNotFound",
    "JobPaused",
    "NotDeclared",
    "RemoteRefused",
    "RemoteTimeout",
    "StoreDamaged",
    "StoreError",
    "StoreUnavailable",
]


class CronfleetError(Exception):
    """Base class of every cronfleet error."""


class JobNotFound(CronfleetError, KeyError):
    """The job id is not known to this scheduler."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r}"


class DuplicateJob(CronfleetError, ValueError):
    """Two jobs were declared with the same id."""


class AlreadyExecuting(CronfleetError):
    """A manual trigger found the job's lease held by a running run.

    ``record`` is the skip record written to the ledger, the same shape a scheduled slot
    gets under ``Overlap.SKIP``; ``holder`` names the instance that holds the lease.
    """

    code = "CRON_JOB_ALREADY_EXECUTING"

    def __init__(self, job_id: str, holder: str | None, record: RunRecord) -> None:
        self.job_id = job_id
        self.holder = holder
        self.record = record
        super().__init__(
            f"job {job_id!r} is already executing (lease held by {holder or 'another run'})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": str(self),
            "details": {"log": self.record.to_dict()},
        }


class JobPaused(CronfleetError):
    """A manual trigger of a job paused by an override (an operator's pause or an
    auto-pause) without ``force``: nothing was run or recorded."""

    code = "JOB_PAUSED"

    def __init__(self, job_id: str, by: str | None, note: str | None,
                 until: datetime | None) -> None:
        self.job_id = job_id
        self.by = by
        self.note = note
        self.until = until
        what = f"job {job_id!r} is paused (by {by or 'unknown'}"
        what += f" until {until.isoformat()}" if until is not None else ""
        what += f": {note})" if note else ")"
        super().__init__(f"{what}; trigger it with force to run it anyway")


class StoreError(CronfleetError):
    """The store rejected an operation (bad URL, schema too new, constraint)."""


class StoreUnavailable(StoreError):
    """The store did not answer; callers decide whether to fail open or closed."""


class StoreDamaged(StoreError):
    """The store's data is damaged (a corrupted SQLite file): not an outage that passes by
    itself; an operator must restore or recover it. Nothing runs without a claim; due
    slots go to the store's fallback journal (``SQLiteStore.journal``)."""


class NotDeclared(CronfleetError):
    """No live instance of the fleet declares the job a request is meant for (the job
    registry); ``gone``: the instances that declared it before, no longer live.
    ``stored``: a job created over the API, and no instance of the fleet is live."""

    code = "JOB_NOT_DECLARED"

    def __init__(self, job_id: str, gone: list[str] | None = None, *,
                 stored: bool = False) -> None:
        self.job_id = job_id
        self.gone = list(gone or [])
        msg = f"no live instance declares job {job_id!r}"
        if stored:
            msg = (f"no live instance can run job {job_id!r}: it is stored over the API, "
                   "and no process with timers of the fleet is live")
        elif self.gone:
            msg += f" (declared before by {', '.join(self.gone)}, no longer live)"
        else:
            msg += " (no instance of the fleet ever declared it)"
        super().__init__(msg)


class RemoteTimeout(CronfleetError):
    """A request sent through the store got no answer in time. ``withdrawn``: nobody had
    taken it, and it never will be; otherwise an instance took it and may still act."""

    code = "REQUEST_TIMEOUT"

    def __init__(self, request_id: int, job_id: str, timeout: float, *, withdrawn: bool) -> None:
        self.request_id = request_id
        self.job_id = job_id
        self.withdrawn = withdrawn
        how = ("withdrawn: no live instance took it" if withdrawn
               else f"taken, but not answered yet (see request {request_id})")
        super().__init__(f"request {request_id} for job {job_id!r}: no answer within "
                         f"{timeout:g}s; {how}")


class RemoteRefused(CronfleetError):
    """The instance that took a request refused it: ``code`` is the refusal's error code
    (``JOB_PAUSED``, ``CRON_JOB_ALREADY_EXECUTING``, ...), ``run_id`` the skip it recorded
    when there is one, ``instance_id`` who answered."""

    def __init__(self, code: str, message: str, *, job_id: str, instance_id: str | None,
                 run_id: int | None = None) -> None:
        self.code = code
        self.job_id = job_id
        self.instance_id = instance_id
        self.run_id = run_id
        super().__init__(message)
