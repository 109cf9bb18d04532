"""Request and response bodies of the REST API (they are also its OpenAPI schema).

Requests forbid unknown keys, so a typo is a 422 naming the key rather than a silently
ignored setting. Durations are ``"30s"``-style text or seconds, as everywhere else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Duration = str | float
JobId = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")


class Strict(BaseModel):
    # strict: 0 is not false and "5" is not 5 -- a request means what it says
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. JOB_NOT_FOUND.")
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


# -- jobs ---------------------------------------------------------------------------------


class HttpSpec(Strict):
    url: str = Field(min_length=1, max_length=4096)
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    timeout: Duration | None = None
    follow_redirects: bool = True
    accept_status: list[int] | None = None
    body_contains: str | None = None
    body_not_contains: str | None = None
    body_regex: str | None = None
    body_not_regex: str | None = None
    signing_secret: str | None = None
    allow_private_targets: bool | None = None


class HttpPatch(HttpSpec):
    """Request fields to change (the others keep their stored values)."""

    url: str | None = Field(default=None, min_length=1, max_length=4096)  # type: ignore[assignment]


class RetrySpec(Strict):
    attempts: int = Field(default=1, ge=1, le=10)
    backoff: Literal["exponential", "linear", "fixed"] = "exponential"
    delay: Duration = 1.0


class JobFields(Strict):
    """Every field of a stored job except its id (all optional: used by PATCH too)."""

    schedule: str | None = Field(default=None, max_length=1000,
                                 description="Cron expression, macro or interval.")
    timezone: str | None = Field(default=None, max_length=100)
    description: str | None = Field(default=None, max_length=2000)
    enabled: bool | None = None
    missed: Literal["skip", "run_once", "run_all"] | None = None
    catch_up_window: Duration | None = None
    locking: Literal["node_local", "prefer_global", "require_global"] | None = None
    overlap: Literal["skip", "queue_one", "allow"] | None = None
    timeout: Duration | None = None
    jitter: Duration | None = None
    config: dict[str, Any] | None = None
    http: HttpSpec | None = None
    retry: RetrySpec | None = None
    auto_pause_after: int | None = Field(default=None, ge=1)


class JobCreate(JobFields):
    id: str = JobId
    schedule: str = Field(max_length=1000, description="Cron expression, macro or interval.")
    http: HttpSpec


class JobPatch(JobFields):
    """Fields to change; ``null`` resets a field to its default. ``http`` and ``retry``
    are merged key by key into the stored ones."""

    http: HttpPatch | None = None


class Override(BaseModel):
    enabled: bool
    by: str | None
    at: str | None
    note: str | None
    until: str | None
    expired: bool


class Lease(BaseModel):
    holder: str | None
    until: str | None
    token: int | None


class RunBrief(BaseModel):
    id: int | None
    status: str
    reason: str | None
    slot: str
    finished_at: str | None
    error: str | None


class JobSummary(BaseModel):
    id: str
    team: str
    source: str = Field(description="code, config, a plugin name, or api (stored job).")
    editable: bool = Field(description="True for jobs stored through the API.")
    schedule: str
    timezone: str
    description: str
    when: str = Field(description="The schedule in English.")
    declared_enabled: bool
    enabled: bool
    paused: bool
    next_run: str | None
    last_run: RunBrief | None
    override: Override | None
    lease: Lease | None


class JobPage(BaseModel):
    items: list[JobSummary]
    next_cursor: str | None


class RunOut(BaseModel):
    id: int | None
    job_id: str
    slot: str | None
    triggered_by: str
    manual: bool
    is_catchup: bool
    is_recovery: bool
    instance_id: str | None
    fencing_token: int | None
    attempt: int
    status: str
    success: bool
    reason: str | None
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    lateness: float | None
    duration: float | None
    result: Any = None
    error: str | None
    logs: list[str]


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class JobStats(BaseModel):
    runs: int = Field(description="Runs among the most recent 100 (skips included).")
    by_status: dict[str, int]
    success_rate: float | None
    avg_duration: float | None
    max_duration: float | None
    avg_lateness: float | None


class JobDetail(JobSummary):
    next_fire_times: list[str]
    recent_runs: list[RunOut]
    stats: JobStats
    spec: dict[str, Any] | None = Field(description="The stored spec (stored jobs only).")
    version: int | None
    created_by: str | None = None
    updated_by: str | None = None


# -- overrides, triggers --------------------------------------------------------------------


class OverrideRequest(Strict):
    enabled: bool | None = Field(description="false: paused everywhere; true: forced on; "
                                             "null: back to the declared value.")
    note: str | None = Field(default=None, max_length=2000)
    until: datetime | Duration | None = Field(
        default=None, description="When a pause ends by itself: a time or a duration.")


class JobStateOut(BaseModel):
    job_id: str
    declared_enabled: bool
    enabled: bool
    override: Override | None
    lease: Lease | None


class TriggerAccepted(BaseModel):
    run_id: int | None
    job_id: str
    status: str
    instance_id: str | None
    fencing_token: int | None


# -- cron preview ---------------------------------------------------------------------------


class PreviewRequest(Strict):
    expr: str = Field(max_length=1000)
    timezone: str = Field(default="UTC", max_length=100)
    count: int = Field(default=10, ge=1, le=100)
    after: datetime | None = Field(default=None, strict=False)  # ISO text in JSON


class PreviewOut(BaseModel):
    valid: bool
    expr: str
    timezone: str
    description: str
    next: list[str]


# -- secrets, audit, health -----------------------------------------------------------------


class SecretValue(Strict):
    value: str = Field(min_length=1, max_length=65536)


class SecretInfoOut(BaseModel):
    name: str
    created_at: str
    updated_at: str


class SecretList(BaseModel):
    items: list[SecretInfoOut]


class SecretWritten(BaseModel):
    name: str
    created: bool


class AuditOut(BaseModel):
    id: int
    at: str
    team: str
    actor: str
    action: str
    target: str
    details: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditOut]
    next_cursor: str | None


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    checks: dict[str, Any]
