"""Request and response bodies of the REST API (they are also its OpenAPI schema).

Requests forbid unknown keys, so a typo is a 422 naming the key rather than a silently
ignored setting. Durations are ``"30s"``-style text or seconds, as everywhere else.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from cronfleet import spec

Duration = str | float


class Strict(BaseModel):
    # strict: 0 is not false and "5" is not 5 -- a request means what it says
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(BaseModel):
    """An RFC 9457 problem (``application/problem+json``) with cronfleet's extensions."""

    type: str = Field(description="A URI naming the problem type (one per code).")
    title: str = Field(description="The HTTP status phrase.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong (the same text as message).")
    code: str = Field(description="Stable machine-readable code, e.g. JOB_NOT_FOUND.")
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


# -- jobs ---------------------------------------------------------------------------------
#
# A job body is the job spec (cronfleet.spec): the keys a [[tasks]] entry takes, checked by
# spec.validate_job together -- every problem of a body in one 422, as for a config file.
# So the body models below only *document* the fields (their OpenAPI schema is the typed
# model) and accept any JSON value: a wrong type, an unknown key or a value out of range is
# reported by the spec alongside every other problem, never alone by pydantic first.


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
    signature: Literal["cronfleet", "standard-webhooks"] = Field(
        default="cronfleet", description="The signature headers sent with signing_secret: "
                                         "X-Cronfleet-Signature, or Standard Webhooks "
                                         "(webhook-id/-timestamp/-signature).")
    allow_private_targets: bool | None = Field(
        default=None, description="Deprecated here: give it next to `http` (as in a config "
                                  "file); still read for jobs stored before.")


class HttpPatch(HttpSpec):
    """Request fields to change (the others keep their stored values)."""

    url: str | None = Field(default=None, min_length=1, max_length=4096)  # type: ignore[assignment]


class RetrySpec(Strict):
    attempts: int = Field(default=1, ge=1, le=10)
    backoff: Literal["exponential", "linear", "fixed"] = "exponential"
    delay: Duration = 1.0


class EmailSpec(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    host: str
    to: list[str] | str
    sender: str | None = Field(default=None, alias="from")
    port: int | None = Field(default=None, ge=1, le=65535)
    starttls: bool | None = None
    ssl: bool | None = None
    username: str | None = None
    password: str | None = Field(default=None, description="May be ${secrets.NAME}.")
    timeout: Duration | None = None


class NotifySpec(Strict):
    on: list[Literal["failure", "recovery", "success"]] | None = None
    after_failures: int | None = Field(default=None, ge=1)
    webhook: str | None = None
    slack: str | None = None
    email: EmailSpec | None = None


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` references replaced by the definitions."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(dict(defs[ref.removeprefix("#/$defs/")]))
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return cast(dict[str, Any], walk(schema))


def _doc(tp: Any) -> Any:
    """Any JSON value, documented in the OpenAPI schema as ``tp``."""
    return Annotated[Any, WithJsonSchema(_inline(TypeAdapter(tp).json_schema()))]


_SPEC_DOC = "Every problem of the body is reported at once (`details.errors`)."
_NOT_OTHERS: Any = {"additionalProperties": False}


_Schedule = Annotated[str, Field(max_length=spec.TEXT_LIMITS["schedule"])] | Annotated[
    list[Annotated[str, Field(max_length=spec.TEXT_LIMITS["schedule"])]],
    Field(min_length=1, max_length=spec.MAX_SCHEDULES)]
_SCHEDULE_DOC = ("Cron expression, macro or interval, or a list of them (the job runs at "
                 "each instant of any of them, once). Leave it out for a one-off `at`.")
_AT_DOC = ("A one-off instant (ISO 8601, e.g. 2026-12-24T18:00:00+01:00) instead of "
           "`schedule`: the job runs once, then is done.")
_EXCEPT_DOC = ("Exclusions: MM-DD (every year), YYYY-MM-DD, cron expressions (their "
               "instants are removed); calendar files are for config tasks only. "
               "Excluded instants are neither run nor recorded as missed.")


_COMMAND_DOC = ("A command job instead of `http`: the program and its arguments (a list), "
                "or one text with `shell: true`. Needs `[api] allow_command_jobs = true` on "
                "the server (else 403 COMMAND_JOBS_DISABLED): it runs code on the fleet.")


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=_NOT_OTHERS)


_TEXT = spec.TEXT_LIMITS
# how the API documents each field of a job spec (spec.FIELDS, the one list): the body
# models below take their fields from the spec, in its order, each documented from this
# table; a field the spec gains without an entry here fails at import
_API_FIELDS: dict[str, tuple[Any, Any]] = {
    "schedule": (_doc(_Schedule | None), Field(default=None, description=_SCHEDULE_DOC)),
    "at": (_doc(Annotated[str, Field(max_length=100)] | None),
           Field(default=None, description=_AT_DOC)),
    "start": (_doc(Annotated[str, Field(max_length=100)] | None),
              Field(default=None, description="No slot before it (ISO 8601 date-time or "
                                              "date).")),
    "end": (_doc(Annotated[str, Field(max_length=100)] | None),
            Field(default=None, description="No slot after it (inclusive; a date: that "
                                            "whole day).")),
    "except": (_doc(list[Annotated[str, Field(max_length=_TEXT["schedule"])]] | None),
               Field(default=None, alias="except", description=_EXCEPT_DOC)),
    "timezone": (_doc(Annotated[str, Field(max_length=_TEXT["timezone"])] | None), None),
    "description": (_doc(Annotated[str, Field(max_length=_TEXT["description"])] | None),
                    None),
    "enabled": (_doc(bool | None), None),
    "missed": (_doc(Literal[tuple(m.value for m in spec.Missed)] | None), None),
    "catch_up_window": (_doc(Duration | None), None),
    "locking": (_doc(Literal[tuple(m.value for m in spec.Locking)] | None), None),
    "overlap": (_doc(Literal[tuple(m.value for m in spec.Overlap)] | None), None),
    "timeout": (_doc(Duration | None), None),
    "jitter": (_doc(Duration | None), None),
    "recover": (_doc(bool | None), None),
    "config": (_doc(dict[str, Any] | None), None),
    "http": (_doc(HttpSpec | None), None),
    "retry": (_doc(RetrySpec | None), None),
    "notify": (_doc(NotifySpec | None),
               Field(default=None, description="Notifications on failure / recovery / "
                                               "success.")),
    "auto_pause_after": (_doc(Annotated[int, Field(ge=1, le=spec.AUTO_PAUSE_MAX)] | None),
                         Field(default=None, description="Pause the job after this many "
                                                         "failures in a row.")),
    "max_instances": (_doc(Annotated[int, Field(ge=1, le=spec.MAX_INSTANCES)] | None),
                      Field(default=None, description=(
                          f"Concurrent runs of the job across the fleet (1 to "
                          f"{spec.MAX_INSTANCES}; more than 1 needs an overlap other "
                          "than allow)."))),
    "allow_private_targets": (_doc(bool | None),
                              Field(default=None, description="Let the request (and "
                                    "webhooks) reach private addresses.")),
    "command": (_doc(list[Annotated[str, Field(max_length=100_000)]]
                     | Annotated[str, Field(max_length=100_000)] | None),
                Field(default=None, description=_COMMAND_DOC)),
    "shell": (_doc(bool | None),
              Field(default=None, description="Run `command` (one text) with /bin/sh -c.")),
    "env": (_doc(dict[str, str] | None),
            Field(default=None, description="Variables added to the command's environment; "
                                            "values may use ${secrets.NAME} (the team's).")),
    "cwd": (_doc(str | None),
            Field(default=None, description="The command's working directory.")),
    "kill_grace": (_doc(Duration | None),
                   Field(default=None, description="After SIGTERM (timeout, stop), SIGKILL "
                                                   "this much later (default 10s).")),
    "success_codes": (_doc(list[Annotated[int, Field(ge=0, le=255)]] | None),
                      Field(default=None, description="Exit codes that count as success "
                                                      "(default [0]).")),
    "max_output": (_doc(Annotated[int, Field(ge=1024)] | str | None),
                   Field(default=None, description="Bytes of stdout + stderr kept in the run "
                                                   "(default 1MiB: the first and last "
                                                   "halves).")),
}
# a stored job's body: the spec's fields but its id (the path's or JobCreate's) and its
# team (the token's)
_NOT_IN_BODY = ("id", "team")
JobFields = create_model(  # type: ignore[call-overload]
    "JobFields", __base__=_Body, __module__=__name__,
    __doc__="Every field of a stored job except its id (all optional: used by PATCH too).",
    **{("except_" if f.key == "except" else f.key): _API_FIELDS[f.key]
       for f in spec.FIELDS if f.key not in _NOT_IN_BODY},
)


class JobCreate(JobFields):  # type: ignore[misc,valid-type]
    __doc__ = f"A job to store. {_SPEC_DOC}"
    # required in the schema; a missing one is reported by the spec with the rest
    # (``schedule`` or ``at``, ``http`` or ``command``: the spec reports a job with neither)
    model_config = ConfigDict(extra="allow", json_schema_extra={
        **_NOT_OTHERS, "required": ["id"]})

    id: _doc(Annotated[str, Field(min_length=1, max_length=200,  # type: ignore[valid-type]
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")]) = None
    schedule: _doc(_Schedule) = Field(  # type: ignore[valid-type]
        default=None, description=_SCHEDULE_DOC)
    http: _doc(HttpSpec) = None  # type: ignore[valid-type]

    @field_validator("id")
    @classmethod
    def _id_is_text(cls, value: Any) -> Any:
        # the one check made before the spec's: the handler looks the id up first
        if value is not None and not isinstance(value, str):
            raise ValueError(f"expected a job id (text), got {type(value).__name__}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        # the stored spec spells out the request's and the retry's defaults, as it did
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("http"), dict):
                data["http"] = {"method": "GET", "headers": {}, "follow_redirects": True,
                                **data["http"]}
            if isinstance(data.get("retry"), dict):
                data["retry"] = {"attempts": 1, "backoff": "exponential", "delay": 1.0,
                                 **data["retry"]}
        return data


class JobPatch(JobFields):  # type: ignore[misc,valid-type]
    """Fields to change; ``null`` resets a field to its default. ``http`` and ``retry``
    are merged key by key into the stored ones (``notify`` is replaced whole)."""

    http: _doc(HttpPatch | None) = None  # type: ignore[valid-type]
    id: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    @field_validator("id")
    @classmethod
    def _no_rename(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("a job's id cannot be changed (create a new job)")
        return value


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


class Declarer(BaseModel):
    instance: str = Field(description="The instance that declares the job.")
    live: bool = Field(description="Whether that instance is live (heartbeat within the "
                       "instance ttl).")
    source: str
    declared_at: str | None = Field(description="When it first declared this spec.")
    seen_at: str | None = Field(description="When it last said it still declares it.")
    digest: str = Field(description="SHA-256 of the spec it declares.")


class Conflict(BaseModel):
    fields: list[str] = Field(description="The spec fields the declarers disagree on.")
    instances: list[list[str]] = Field(description="The declarers, grouped by spec.")


class JobSummary(BaseModel):
    id: str
    team: str
    source: str = Field(description="code, config, a plugin name, or api (stored job).")
    editable: bool = Field(description="True for jobs stored through the API.")
    schedule: str = Field(description="The canonical cron expression, macro or interval.")
    schedule_text: str | None = Field(None, description="The schedule as written when it "
                                      "was a sentence ('every weekday at 9am'), else null.")
    timezone: str
    description: str
    when: str = Field(description="The schedule in English.")
    config: dict[str, Any] = Field(description="The job's config (a task's config_json, "
                                   "a plugin's or a code job's config), as written.")
    declared_enabled: bool
    enabled: bool
    paused: bool
    next_run: str | None = Field(description="The next slot that will run: null while "
                                 "paused without an end or disabled; after a timed pause, "
                                 "the first fire time at or after its end.")
    next_fire: str | None = Field(description="The schedule's next fire time, whether or "
                                  "not the job is paused (null: it never fires again).")
    last_run: RunBrief | None
    override: Override | None
    lease: Lease | None
    kind: str | None = Field(None, description="handler, http, ... (from the job registry).")
    declared: bool | None = Field(None, description="Whether a live instance of the fleet "
                                  "declares the job (null: not in the job registry).")
    declared_by: list[Declarer] = Field(default_factory=list, description="The instances "
                                        "that declare it, live or not (the job registry).")
    conflict: Conflict | None = Field(None, description="Live declarers disagreeing on "
                                      "its spec, or null.")
    remote: bool = Field(False, description="Declared by other processes only: triggers "
                         "go through the store to a live one.")


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
    params: dict[str, Any] | None = Field(
        None, description="A manual run's parameters (ctx.params), else null.")
    forced: bool = Field(False, description="Run by force while the job was paused.")
    forced_by: str | None = Field(None, description="Who forced it (null: not forced).")


class AttemptOut(BaseModel):
    number: int = Field(description="1..n, in the order the attempts were made.")
    started_at: str | None
    finished_at: str | None
    duration: float | None
    outcome: str = Field(description="succeeded, failed, timed_out, cancelled, "
                                     "interrupted, or running while it runs.")
    error: str | None
    response: dict[str, Any] | None = Field(
        None, description="An HTTP job's response to this attempt (status, headers, body "
                          "excerpt); null for a handler or when no response came.")
    retry_in: float | None = Field(None, description="Seconds waited before the next "
                                                     "attempt; null for the last.")


class RunAttempts(BaseModel):
    run_id: int
    job_id: str
    status: str = Field(description="The run's status: the last attempt's outcome once "
                                    "it ended.")
    items: list[AttemptOut]


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: str | None


class RunningRun(BaseModel):
    run_id: int | None
    job_id: str
    instance_id: str | None
    slot: str | None
    started_at: str | None
    lease_until: str | None = Field(
        description="When the job's lease held by this run expires unless renewed "
                    "(null: a node-local run, which takes no lease).")
    deadline: str | None
    attempt: int
    triggered_by: str


class RunningPage(BaseModel):
    items: list[RunningRun]


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


MAX_BATCH = 1000  # jobs in one POST /api/jobs:batch


class JobBatch(BaseModel):
    __doc__ = (f"Up to {MAX_BATCH} jobs to store at once, all or none; each item is what "
               "POST /api/jobs takes (a JobCreate).")
    jobs: list[Any] = Field(description=f"The jobs (JobCreate objects), at most {MAX_BATCH}; "
                                        "more answer 413.")


class BatchJob(BaseModel):
    id: str
    version: int = Field(description="The definition's catalog version.")


class BatchCreated(BaseModel):
    dry_run: bool = Field(description="true: nothing was stored; these would be.")
    count: int
    jobs: list[BatchJob]


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


class CancelBody(BaseModel):
    """Optional: why the run is cancelled (recorded with it)."""

    model_config = ConfigDict(extra="forbid")

    why: str | None = Field(None, max_length=500, description="Why (recorded in the run's "
                            "error and log, with who asked).")


class CancelAccepted(BaseModel):
    run_id: int
    job_id: str
    instance_id: str | None = Field(description="The instance executing the run.")
    message: str = Field(description="What the instance did: an async handler is "
                         "cancelled at once; a sync handler's thread cannot be stopped, the "
                         "run is recorded cancelled when it returns.")


class TriggerBody(BaseModel):
    """Optional: a trigger without a body runs the job with no parameters."""

    model_config = ConfigDict(extra="forbid")

    params: dict[str, Any] | None = Field(
        None, description="Parameters of this run: the handler reads them in ctx.params; "
                          "stored with the run (params).")
    force: bool = Field(False, strict=True, description=(
        "Run even though the job is paused (by an operator or an auto-pause); the run "
        "records who forced it. Without it a paused job answers 409 JOB_PAUSED."))


class TriggerAccepted(BaseModel):
    run_id: int | None
    job_id: str
    status: str
    instance_id: str | None
    fencing_token: int | None


def _iso_time(value: object) -> object:
    """A time given as ISO 8601 text, never a number: ``0`` (or ``"0"``) is not 1970."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be an ISO 8601 time with a UTC offset as a string "
                         f"(2026-07-01T00:00:00Z), got {type(value).__name__} {value!r}")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time with a UTC offset "
                         "(2026-07-01T00:00:00Z)") from None


IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_time)]


class BackfillBody(BaseModel):
    """Run every slot of the job's schedule with ``from <= slot <= to`` again, in order
    (a past range: ``to`` later than now is refused)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    start: IsoTime = Field(alias="from", description="First slot (included): ISO 8601 "
                                                     "text with a UTC offset.")
    end: IsoTime = Field(alias="to", description="Last slot (included), not later than "
                                                 "now: ISO 8601 text with a UTC offset.")
    only_missing: bool = Field(False, strict=True, description=(
        "Only slots without a succeeded run."))
    rate: float = Field(10.0, gt=0, le=10_000, description=(
        "At most this many slots started a second."))


class BackfillProgress(BaseModel):
    total: int
    done: int
    current: str | None
    ran: int
    present: int = Field(description="Slots left out by only_missing (already succeeded).")
    taken: int = Field(description="Slots another backfill ran at the same time.")
    busy: int
    cancelled: bool
    finished: bool


class BackfillStatus(BaseModel):
    id: int
    job_id: str
    requested_by: str
    requested_at: str | None
    instance_id: str | None = Field(description="The instance running it (null: not yet "
                                                "taken).")
    state: str = Field(description="queued, running, finished, cancelled or failed (failed "
                       "with an INSTANCE_LOST error: the instance running it was lost).")
    error: str | None
    start: str = Field(alias="from")
    end: str = Field(alias="to")
    only_missing: bool
    progress: BackfillProgress | None


# -- cron preview ---------------------------------------------------------------------------


class PreviewRequest(Strict):
    expr: Annotated[str, Field(max_length=2000)] | Annotated[
        list[Annotated[str, Field(max_length=1000)]], Field(min_length=1, max_length=100)
    ] | None = Field(
        default=None,
        description="A cron expression, macro or interval; a list of them (their instants "
                    "united); or a composition text ('0 9 * * 1-5 | 0 12 * * 6 | except "
                    "12-25'). Leave it out for a one-off `at`.")
    timezone: str = Field(default="UTC", max_length=100)
    count: int = Field(default=10, ge=1, le=100)
    after: datetime | None = Field(default=None, strict=False)  # ISO text in JSON
    at: str | None = Field(default=None, max_length=100,
                           description="A one-off instant (ISO 8601) instead of expr.")
    start: str | None = Field(default=None, max_length=100,
                              description="No fire time before it (ISO date-time or date).")
    end: str | None = Field(default=None, max_length=100,
                            description="No fire time after it (a date: that whole day).")
    except_: list[Annotated[str, Field(max_length=1000)]] | None = Field(
        default=None, alias="except", max_length=1000,
        description="Exclusions: MM-DD, YYYY-MM-DD, cron expressions (their instants are "
                    "removed).")


class DstMark(BaseModel):
    time: str
    shift: str


class PreviewOut(BaseModel):
    valid: bool
    expr: str = Field(description="The canonical expression (a sentence compiles to one).")
    sentence: str | None = Field(None, description="The request's text when it was read as "
                                 "a sentence (English or French), else null.")
    timezone: str
    description: str
    next: list[str]
    excluded: list[str] = Field(
        default_factory=list,
        description="Instants of the schedule's expressions removed by `except` inside "
                    "the window shown (from `after` to the last of `next`).")
    done: bool = Field(default=False, description="True for a one-off past its instant or "
                                                   "a schedule past its end.")
    dst: list[DstMark] = Field(
        default_factory=list,
        description="The fire times of `next` that fall on a day the clocks change in the "
                    "schedule's zone, with the change (`+1:00:00` forward, `-1:00:00` back).")


# -- secrets, audit, health -----------------------------------------------------------------


class SecretValue(Strict):
    value: str = Field(min_length=1, max_length=65536)
    hosts: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        default=None, max_length=100,
        description="The hosts the value may be sent to (api.example.com, *.example.com). "
                    "Left out: the secret keeps its hosts; null or []: none (only admins' "
                    "jobs may use it). An editor's job may use a secret only within its "
                    "hosts.")


class SecretInfoOut(BaseModel):
    name: str
    hosts: list[str] | None = None
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
