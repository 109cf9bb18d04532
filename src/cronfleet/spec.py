"""One job spec: every field a job can have, declared and checked in one place.

The fields are declared once: :data:`FIELDS` lists them (each with its name in the API,
a ``[[tasks]]`` entry and a plugin's :class:`~cronfleet.plugins.Schedule`; the config's
task keys, the Schedule renames and the API's body models are derived from it) and
:class:`JobFields` types them (:class:`~cronfleet.model.Job` and :class:`JobSpec` are
both these fields and a few of their own). The types of the fields -- :class:`Missed`,
:class:`Locking`, :class:`Overlap`, :class:`RetryPolicy`, :class:`NotifyPolicy` -- live
here too (``cronfleet.model`` re-exports them).

Every way of declaring a job maps onto :func:`validate_job`: :meth:`Job.create` (and the
``@scheduler.job`` decorator), a ``[[tasks]]`` entry of ``cronfleet.toml``, a plugin's
:class:`~cronfleet.plugins.Schedule`, a job stored over the REST API (the catalog) and the
request part of :class:`~cronfleet.jobs.http.HttpJob`. It returns a :class:`JobSpec` (the
converted values) or *every* problem at once as :class:`FieldProblem` -- ``key`` is the
canonical, dotted field name (``schedule``, ``retry.attempts``, ``http.url``), ``column``
the 1-based column inside a cron expression. Each face only renames keys (``cron`` ->
``schedule`` in TOML) and places the problems (file:line:column, a 422 body, a
ValueError).

The value converters live here too -- durations, enums, booleans, whole numbers, the
retry and notify policies, the pause ``until`` -- and raise :class:`FieldError` with a
message that does not repeat the key (the caller knows it).

Job ids (one rule): a *name* is 1-200 characters from letters, digits and ``._:@+-``
starting with a letter or a digit; a *job id* is a name or names joined by ``/`` (a
plugin's jobs are ``<plugin name>/<schedule id>``), 200 characters at most. What people
declare by hand -- a ``[[tasks]]`` id, a job stored over the API, a schedule id, a plugin
name -- is a name (``/`` is kept for the plugin prefix); :meth:`Job.create` takes any job
id, so ids with ``/`` declared in code keep working.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from cronfleet import signing
from cronfleet.cron import (
    AnySchedule,
    ComposedSchedule,
    CronExpr,
    CronSyntaxError,
    Exclusion,
    parse,
    parse_exclusion,
    parse_instant,
    parse_schedule,
)
from cronfleet.cron.compose import CALENDAR_PREFIX
from cronfleet.cron.duration import DurationError, to_timedelta

__all__ = [
    "API_SOURCE",
    "AUTO_PAUSE_MAX",
    "BACKOFF_STRATEGIES",
    "COMMAND_KEYS",
    "DEFAULT_CATCH_UP_WINDOW",
    "DEFAULT_INSTANCE_TTL",
    "DEFAULT_TEAM",
    "EVENTS",
    "FIELDS",
    "HTTP_KEYS",
    "HTTP_METHODS",
    "ID_CHARS",
    "JOB_ID_MAX",
    "SPEC_KEYS",
    "CommandSpec",
    "EmailSettings",
    "Face",
    "FieldError",
    "FieldProblem",
    "HttpRequest",
    "JobFields",
    "JobSpec",
    "Locking",
    "Missed",
    "NotifyPolicy",
    "Overlap",
    "RetryPolicy",
    "SpecInvalid",
    "Unkeyable",
    "boolean",
    "byte_size",
    "canonical_spec",
    "check_command",
    "check_job_id",
    "check_name",
    "check_team",
    "config_from_json",
    "default_job_id",
    "describe_value",
    "did_you_mean",
    "duration",
    "enum_value",
    "job_arguments",
    "notify_policy",
    "pause_until",
    "retry_policy",
    "split_index",
    "time_bound",
    "validate_declared",
    "validate_job",
    "value_key",
    "whole_number",
]

JOB_ID_MAX = 200
_NAME_PART = r"[A-Za-z0-9][A-Za-z0-9._:@+-]*"
_NAME = re.compile(rf"^{_NAME_PART}$")
_JOB_ID = re.compile(rf"^{_NAME_PART}(?:/{_NAME_PART})*$")
# the characters of a job id: what a part of one (a cursor, an id prefix) may hold
ID_CHARS = re.compile(r"[A-Za-z0-9._:@+/-]+")
NAME_RULE = (f"use 1-{JOB_ID_MAX} characters from letters, digits and ._:@+- starting with "
             "a letter or digit")
JOB_ID_RULE = (f"use 1-{JOB_ID_MAX} characters from letters, digits and ._:@+- starting "
               "with a letter or digit ('/' only between such parts, as in plugin/schedule)")

HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# an HTTP method is accepted in any case and is the upper-case name from then on: in the
# job, in a stored spec (canonical_spec) and wherever it is shown (docs/http-jobs.md)
DEFAULT_HTTP_TIMEOUT = 30.0
MAX_URL = 4096
# ``max_instances``: concurrent runs of one job across the fleet (the job's lease as N
# lanes; see docs/concepts.md, "Concurrent runs of one job"), on every built-in store; a
# store without lanes (a plugin's) is refused N > 1 at start (runtime.scheduler.check_lanes).
MAX_INSTANCES = 100

# auto_pause_after: consecutive failed runs before the job is paused for the fleet. Beyond
# this it no longer protects anything (a per-minute job failing for 16 hours); a larger
# number is a mistake, refused naming the field (docs/concepts.md, "Alerts").
AUTO_PAUSE_MAX = 1000

@dataclass(frozen=True)
class Face:
    """One field of a job spec as each way of declaring a job names it: ``key`` is the
    canonical key (:func:`validate_job`'s, the REST API's); ``task`` its name in a
    ``[[tasks]]`` entry and ``schedule`` in a plugin's
    :class:`~cronfleet.plugins.Schedule` (None: that face has no such field)."""

    key: str
    task: str | None
    schedule: str | None


def _face(key: str, task: str | None = "", schedule: str | None = "") -> Face:
    return Face(key, key if task == "" else task, key if schedule == "" else schedule)


# a command job: ``command`` (an argv list, or a text with shell = true) and its options,
# beside the job's keys (timeout and retry are the job's; cronfleet.jobs.command)
COMMAND_KEYS = ("command", "shell", "env", "cwd", "kill_grace", "success_codes",
                "max_output")
# THE list of a job spec's fields, in the order problems are reported. A [[tasks]] entry
# says "cron" for "schedule" and "config_json" for a JSON text of "config"; a plugin's
# Schedule says "cron", "config_json" and "exclude" (``except`` is a Python keyword) and
# has no request nor command (its plugin runs it); the API says the canonical keys.
FIELDS: tuple[Face, ...] = (
    _face("id"), _face("schedule", "cron", "cron"), _face("timezone"),
    _face("description"), _face("enabled"), _face("missed"), _face("catch_up_window"),
    _face("locking"), _face("overlap"), _face("timeout"), _face("jitter"),
    _face("recover"), _face("config", "config_json", "config_json"), _face("team"),
    _face("retry"), _face("notify"), _face("auto_pause_after"),
    _face("allow_private_targets", schedule=None), _face("http", schedule=None),
    _face("max_instances"), _face("at"), _face("start"), _face("end"),
    _face("except", schedule="exclude"),
    *(_face(k, schedule=None) for k in COMMAND_KEYS),
)
SPEC_KEYS = tuple(f.key for f in FIELDS)
DEFAULT_KILL_GRACE = 10.0
DEFAULT_MAX_OUTPUT = 1024 * 1024
MAX_MAX_OUTPUT = 64 * 1024 * 1024
MAX_ARGV = 1000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000 ** 2, "mib": 1024 ** 2,
               "gb": 1000 ** 3, "gib": 1024 ** 3}
# a schedule may be composed: several expressions (a list), a one-off ``at`` instead,
# ``start``/``end`` bounds and ``except`` exclusions (cronfleet.cron.compose)
SCHEDULE_KEYS = ("schedule", "at", "start", "end", "except")
MAX_SCHEDULES = 100
MAX_EXCEPT = 1000
HTTP_KEYS = (
    "method", "url", "headers", "body", "timeout", "follow_redirects", "accept_status",
    "body_contains", "body_not_contains", "body_regex", "body_not_regex", "signing_secret",
    "signature", "namespace", "allow_private_targets",
)
RETRY_KEYS = ("attempts", "backoff", "delay")
NOTIFY_KEYS = ("on", "after_failures", "webhook", "slack", "email")
EMAIL_KEYS = ("host", "port", "from", "to", "starttls", "ssl", "username", "password",
              "timeout")
TEXT_LIMITS = {"schedule": 1000, "timezone": 100, "description": 2000}
# the size of everything a job carries (every face: config, API, code); the API's request
# body limit (1 MiB, [api] max_request_body) comes before these
LIMITS = {
    "headers": 100,  # header count
    "header_name": 256,  # characters
    "header_value": 8 * 1024,  # characters
    "body": 256 * 1024,  # characters of http.body
    "accept_status": 100,  # entries
    "match_text": 4096,  # body_contains / body_not_contains / body_regex / body_not_regex
    "signing_secret": 4096,
    "config": 64 * 1024,  # characters of the config object as JSON
}
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token
_HEADER_BREAK = re.compile("[\r\n\0]")
_HEADER_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")  # below 0x20 but the tab, DEL
_HTTP_TEXT_KEYS = ("body_contains", "body_not_contains", "body_regex", "body_not_regex",
                   "signing_secret", "namespace")


# -- the types of a job's fields ---------------------------------------------------------


class Missed(StrEnum):
    """What to do with slots that passed while no instance could fire them."""

    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


class Locking(StrEnum):
    """Whether a slot needs a store-wide claim before it runs."""

    NODE_LOCAL = "node_local"
    PREFER_GLOBAL = "prefer_global"
    REQUIRE_GLOBAL = "require_global"


class Overlap(StrEnum):
    """What a slot does when the previous run of the job still holds the lease."""

    SKIP = "skip"
    QUEUE_ONE = "queue_one"
    ALLOW = "allow"
    REPLACE = "replace"  # cancel the running run (anywhere in the fleet), run the new slot


DEFAULT_CATCH_UP_WINDOW = 3600.0
DEFAULT_INSTANCE_TTL = 1.5
"""The scheduler's ``instance_ttl`` when none is given (``Scheduler``, ``[scheduler]
instance_ttl``): heartbeats every 0.3 s, a dead instance's jobs move within 1.2-1.8 s
(docs/configuration.md)."""
# Teams scope what an API token sees; jobs declared without one belong to this team.
DEFAULT_TEAM = "default"
API_SOURCE = "api"
"""The ``source`` of a job created over the API (its definition is a row of ``job_defs``,
the catalog's): such jobs are not in the job registry, which holds the jobs declared in
code or config (``runtime/registry.py``)."""
_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_team(team: object) -> str | None:
    """The problem with a team name, or None."""
    if not isinstance(team, str) or not _TEAM.match(team):
        return (f"team {team!r} is invalid: use 1-64 characters from letters, digits and "
                "._- starting with a letter or digit")
    return None


BACKOFF_STRATEGIES = ("exponential", "linear", "fixed")
EVENTS = ("failure", "recovery", "success")
"""What a notification policy can announce."""


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` (1-10) in all; the wait after failed attempt ``n`` (1-based) is
    ``delay·2^(n-1)`` (exponential), ``delay·n`` (linear) or ``delay`` (fixed)."""

    attempts: int = 1
    backoff: str = "exponential"
    delay: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or not (
            1 <= self.attempts <= 10
        ):
            raise ValueError(f"attempts: expected a whole number from 1 to 10, got "
                             f"{self.attempts!r}")
        if self.delay < 0:
            raise ValueError(f"delay: must not be negative (got {self.delay!r})")
        if self.backoff not in BACKOFF_STRATEGIES:
            raise ValueError(f"backoff: {self.backoff!r} is not one of "
                             f"{', '.join(BACKOFF_STRATEGIES)}")

    def wait(self, failed_attempt: int) -> float:
        n = failed_attempt - 1
        if self.backoff == "exponential":
            return float(self.delay * (2**n))
        if self.backoff == "linear":
            return float(self.delay * (n + 1))
        return float(self.delay)


@dataclass(frozen=True)
class EmailSettings:
    """SMTP delivery. ``password`` may be ``${secrets.NAME}``."""

    host: str
    to: tuple[str, ...]
    sender: str = "cronfleet@localhost"
    port: int = 25
    starttls: bool = False
    ssl: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 10.0


@dataclass(frozen=True)
class NotifyPolicy:
    on: tuple[str, ...] = ("failure", "recovery")
    after_failures: int = 1
    webhook: str | None = None
    slack: str | None = None
    email: EmailSettings | None = None

    def __post_init__(self) -> None:
        unknown = [e for e in self.on if e not in EVENTS]
        if unknown:
            raise ValueError(f"on: {unknown[0]!r} is not one of {', '.join(EVENTS)}")
        if isinstance(self.after_failures, bool) or not isinstance(self.after_failures, int) \
                or self.after_failures < 1:
            raise ValueError(f"after_failures: expected a whole number of at least 1, got "
                             f"{self.after_failures!r}")
        if not (self.webhook or self.slack or self.email):
            raise ValueError("no channel: set webhook, slack and/or email")

    @property
    def channels(self) -> list[str]:
        return [n for n, v in (("webhook", self.webhook), ("slack", self.slack),
                               ("email", self.email)) if v]



# -- problems ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldProblem:
    """One invalid field: ``key`` is dotted (``retry.attempts``); ``column`` is the
    1-based column inside the cron expression for a ``schedule`` syntax error."""

    key: str
    message: str
    column: int | None = None

    @property
    def field(self) -> str:  # the API's name for the key
        return self.key

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"field": self.key, "message": self.message}
        if self.column is not None:
            out["column"] = self.column
        return out

    def under(self, prefix: str) -> FieldProblem:
        """The same problem with ``prefix.`` in front of its key."""
        return FieldProblem(f"{prefix}.{self.key}" if self.key else prefix, self.message,
                            self.column)


class FieldError(ValueError):
    """What a converter raises: the problem with one value (the key is the caller's)."""

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class SpecInvalid(ValueError):
    """Every problem of a job spec (``problems``), in one exception."""

    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


# -- value converters --------------------------------------------------------------------


def describe_value(value: object) -> str:
    """``a string ('yes')``, ``a number (3)``, ``a table``: what a wrong value is."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    for t, name in names.items():
        if type(value) is t:
            return f"{name} ({value!r})" if t is not dict else name
    return "nothing (null)" if value is None else type(value).__name__


def did_you_mean(name: str, allowed: Sequence[str], hints: Mapping[str, str] | None = None
                 ) -> str:
    # a hint names what people mean (schedule -> cron) and wins over a spelling match
    # (schedule -> shell)
    if hints and hints.get(name.lower()) in allowed:
        close = [hints[name.lower()]]
    else:
        close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@functools.lru_cache(maxsize=1024)
def _text_seconds(value: str) -> float:
    """The seconds of a duration text (the few distinct texts of many jobs: once each;
    a bad text raises each time)."""
    return to_timedelta(value).total_seconds()


def duration(value: object, *, positive: bool = False) -> float:
    """Seconds from ``"30s"``-style text, a number of seconds or a timedelta."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | timedelta):
        raise FieldError(f"expected a duration like '30s' or a number of seconds, got "
                         f"{describe_value(value)}")
    try:
        seconds = (_text_seconds(value) if type(value) is str
                   else to_timedelta(value).total_seconds())
    except DurationError as exc:
        raise FieldError(str(exc).removeprefix("duration: ")) from None
    if positive and seconds <= 0:
        raise FieldError(f"must be positive (got {value!r})")
    return seconds


@functools.cache
def _members(enum: type[Enum]) -> dict[str, Any]:
    """``{str(value): member}`` of an enum, in its order (once per enum)."""
    return {str(m.value): m for m in enum}


def enum_value(enum: type[Enum], value: object) -> Any:
    """The member of ``enum`` named by ``value`` (case-insensitive)."""
    if isinstance(value, enum):
        return value
    members = _members(enum)
    if isinstance(value, str):
        member = members.get(value.lower())
        if member is not None:  # what enum(value.lower()) gives for a text value
            return member if type(member.value) is str else enum(value.lower())
    allowed = list(members)
    hint = did_you_mean(value.lower(), allowed) if isinstance(value, str) else ""
    raise FieldError(f"{value!r} is not one of {', '.join(allowed)}{hint}")


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise FieldError(f"expected true or false, got {describe_value(value)}")
    return value


def check_max_instances(count: int, overlap: Overlap | None) -> str | None:
    """The one rule of ``max_instances`` beside the overlap policy (None: fine)."""
    if count == 1:
        return None
    if overlap is Overlap.ALLOW:
        return (f"{count} with overlap = 'allow': allow sets no limit at all; give "
                "overlap = 'skip', 'queue_one' or 'replace' to cap concurrent runs, or drop "
                "max_instances")
    return None


def whole_number(value: object, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        what = f"from {low} to {high}" if high is not None else f"of at least {low}"
        got = value if isinstance(value, int) and not isinstance(value, bool) \
            else describe_value(value)
        raise FieldError(f"expected a whole number {what}, got {got}")
    return value


def text(value: object, limit: int | None = None, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise FieldError(f"expected text, got {describe_value(value)}")
    if not empty and not value:
        raise FieldError("expected non-empty text")
    if limit is not None and len(value) > limit:
        raise FieldError(f"longer than {limit} characters")
    return value


def config_from_json(value: object, *, strict: bool = True) -> dict[str, Any]:
    """A handler's config from JSON text. ``strict``: anything but a JSON object (or empty
    text) is a problem; otherwise it is passed on as ``{}`` (plugins' opaque text)."""
    if not isinstance(value, str):
        raise FieldError(f"expected a string, got {describe_value(value)}")
    if not value.strip():
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        if strict:
            raise FieldError(f"invalid JSON: {exc}") from None
        return {}
    if isinstance(parsed, dict):
        return parsed
    if strict:
        raise FieldError(f"must be a JSON object ({{...}}), got {type(parsed).__name__} "
                         f"{value.strip()[:40]!r}")
    return {}


def _table(value: object, keys: Sequence[str], example: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    raise FieldError(f"expected a table ({example}), got {describe_value(value)}")


# the keys of a table as a set, per tuple of keys (a tuple is immutable; it is kept, so
# its id is not reused): a membership test per key of every spec, not a scan of ~30 keys
_KEY_SETS: dict[int, tuple[Sequence[str], frozenset[str]]] = {}


def _key_set(keys: Sequence[str]) -> frozenset[str] | Sequence[str]:
    """``keys`` as a frozenset when it is a tuple (kept for the next call), else itself."""
    seen = _KEY_SETS.get(id(keys))
    if seen is not None and seen[0] is keys:
        return seen[1]
    if type(keys) is not tuple or not all(type(k) is str for k in keys):
        return keys
    if len(_KEY_SETS) >= 64:
        _KEY_SETS.clear()
    out = frozenset(keys)
    _KEY_SETS[id(keys)] = (keys, out)
    return out


def _unknown(table: Mapping[str, Any], allowed: Sequence[str], *, listed: bool = True
             ) -> list[FieldProblem]:
    """Unknown keys, each keyed by itself (the caller prefixes its table)."""
    known = _key_set(allowed)
    bad = [k for k in table if k not in known]
    if not bad:  # the usual case: no message to build
        return []
    expected = f" (expected {', '.join(allowed)})" if listed else ""
    return [FieldProblem(str(k), f"unknown key {k!r}{did_you_mean(str(k), allowed)}{expected}")
            for k in bad]


def retry_policy(value: object) -> tuple[RetryPolicy | None, list[FieldProblem]]:
    """``{attempts, backoff, delay}`` (or a RetryPolicy) -> the policy, or every problem
    (keys relative to the table). An unknown backoff is a problem, not a fallback."""
    if isinstance(value, RetryPolicy):
        if value.backoff not in BACKOFF_STRATEGIES:
            return None, [FieldProblem("backoff", _backoff_problem(value.backoff))]
        return value, []
    try:
        table = _table(value, RETRY_KEYS, "attempts, backoff, delay")
    except FieldError as exc:
        return None, [FieldProblem("", exc.message)]
    cache_key = _retry_key(table)
    seen = None if cache_key is None else _retry_policies.get(cache_key)
    if seen is not None:
        return seen, []
    problems = _unknown(table, RETRY_KEYS)
    kwargs: dict[str, Any] = {}
    checks: list[tuple[str, Callable[[Any], Any]]] = [
        ("attempts", lambda v: whole_number(v, 1, 10)),
        ("backoff", _backoff),
        ("delay", duration),
    ]
    for key, convert in checks:
        if key in table:
            try:
                kwargs[key] = convert(table[key])
            except FieldError as exc:
                problems.append(FieldProblem(key, exc.message))
    if problems:
        return None, problems
    policy = RetryPolicy(**kwargs)
    if cache_key is not None:
        if len(_retry_policies) >= RETRY_CACHE_MAX:
            _retry_policies.clear()
        _retry_policies[cache_key] = policy
    return policy, []


# the valid retry tables seen, by value (stored jobs share a few): the policy is frozen,
# so the jobs of one table share it; a bad table is checked (and reported) every time
RETRY_CACHE_MAX = 1024
_retry_policies: dict[tuple[Hashable, ...], RetryPolicy] = {}


def _retry_key(table: Mapping[Any, Any]) -> tuple[Hashable, ...] | None:
    """A key two retry tables share only when every value is the same (of the same type:
    ``1``, ``1.0`` and ``True`` are apart), or None for another kind of value."""
    key: list[Hashable] = []
    for k, v in table.items():
        t = type(v)
        if type(k) is not str or t not in (str, int, float, bool):
            return None
        key.append((k, t, v.hex() if t is float else v))
    return tuple(key)


def _backoff_problem(value: object) -> str:
    hint = did_you_mean(value, BACKOFF_STRATEGIES) if isinstance(value, str) else ""
    return f"{value!r} is not one of {', '.join(BACKOFF_STRATEGIES)}{hint}"


def _backoff(value: object) -> str:
    if not isinstance(value, str) or value not in BACKOFF_STRATEGIES:
        if not isinstance(value, str):
            raise FieldError(f"expected a string, got {describe_value(value)}")
        raise FieldError(_backoff_problem(value))
    return value


def notify_policy(value: object) -> tuple[NotifyPolicy | None, list[FieldProblem]]:
    """``{on, after_failures, webhook, slack, email}`` (or a NotifyPolicy) -> the policy,
    or every problem (keys relative to the table)."""
    if isinstance(value, NotifyPolicy):
        return value, []
    try:
        table = _table(value, NOTIFY_KEYS, 'notify = { webhook = "https://..." }')
    except FieldError as exc:
        return None, [FieldProblem("", exc.message)]
    problems = _unknown(table, NOTIFY_KEYS)
    kwargs: dict[str, Any] = {}
    if "on" in table:
        on = table["on"]
        if isinstance(on, str):
            on = [on]
        if not isinstance(on, list | tuple) or not all(isinstance(e, str) for e in on):
            problems.append(FieldProblem("on", 'expected a list of events, e.g. ["failure", '
                                               '"recovery"]'))
        else:
            bad = [e for e in on if e not in EVENTS]
            if bad:
                problems.append(FieldProblem(
                    "on", f"{bad[0]!r} is not one of {', '.join(EVENTS)}"
                          f"{did_you_mean(bad[0], EVENTS)}"))
            kwargs["on"] = tuple(on)
    if "after_failures" in table:
        try:
            kwargs["after_failures"] = whole_number(table["after_failures"], 1)
        except FieldError as exc:
            problems.append(FieldProblem("after_failures", exc.message))
    for key in ("webhook", "slack"):
        if key in table:
            url = table[key]
            if not isinstance(url, str) or "://" not in url:
                problems.append(FieldProblem(key, f"expected an http(s) URL, got "
                                                  f"{describe_value(url)}"))
            else:
                kwargs[key] = url
    if "email" in table:
        email, email_problems = _email(table["email"])
        problems += [p.under("email") for p in email_problems]
        kwargs["email"] = email
    if not problems and not (kwargs.get("webhook") or kwargs.get("slack")
                             or kwargs.get("email")):
        problems.append(FieldProblem("", "no channel: set webhook, slack and/or email"))
    if problems:
        return None, problems
    return NotifyPolicy(**kwargs), []


def _email(value: object) -> tuple[EmailSettings | None, list[FieldProblem]]:
    try:
        table = _table(value, EMAIL_KEYS, 'email = { host = "smtp.example.com", to = [...] }')
    except FieldError as exc:
        return None, [FieldProblem("", exc.message)]
    problems = _unknown(table, EMAIL_KEYS)
    fields: dict[str, Any] = {}
    host = table.get("host")
    if not isinstance(host, str) or not host:
        problems.append(FieldProblem("host", 'missing (the SMTP server, e.g. host = '
                                             '"smtp.example.com")'))
    else:
        fields["host"] = host
    to = table.get("to")
    if isinstance(to, str):
        to = [to]
    if not isinstance(to, list | tuple) or not to or not all(isinstance(t, str) for t in to):
        problems.append(FieldProblem("to", 'expected a list of addresses, e.g. to = '
                                           '["ops@example.com"]'))
    else:
        fields["to"] = tuple(to)
    converters: dict[str, Callable[[Any], Any]] = {
        "from": text, "username": text, "password": text, "starttls": boolean, "ssl": boolean,
        "port": lambda v: whole_number(v, 1, 65535), "timeout": lambda v: duration(v),
    }
    for key, convert in converters.items():
        if key in table:
            try:
                fields["sender" if key == "from" else key] = convert(table[key])
            except FieldError as exc:
                problems.append(FieldProblem(key, exc.message))
    if problems:
        return None, problems
    return EmailSettings(**fields), []


def _time_or_duration(value: object) -> datetime | float:
    """An aware or naive datetime (ISO 8601 text read as such), or a duration in seconds."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and not _looks_like_duration(value):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            raise FieldError(
                f"{value!r} is neither an ISO 8601 time (e.g. 2026-03-02T18:00:00+01:00) nor "
                "a duration (e.g. 2h, 1h30m)") from None
    return duration(value)


def pause_until(value: object, *, now: datetime, tz: tzinfo) -> datetime:
    """When a pause ends: an aware datetime, ISO 8601 text, or a duration from ``now``.

    The one rule for the scheduler, the API and the CLI: a time **without a UTC offset
    is read in the job's time zone** ``tz`` (what ``cronfleet jobs`` shows); the end must
    be in the future.
    """
    when = _time_or_duration(value)
    if not isinstance(when, datetime):
        if when <= 0:
            raise FieldError(f"{value!r} must be a positive duration")
        try:
            when = now + timedelta(seconds=when)
        except OverflowError:
            raise FieldError(f"{value!r} is too far in the future") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    if when <= now:
        raise FieldError(f"{when.isoformat()} is in the past")
    return when


def time_bound(value: object, *, now: datetime, tz: tzinfo) -> datetime:
    """A ``since`` / ``until`` of a run query: an ISO 8601 time (read in ``tz`` without a
    UTC offset) or a duration meaning that long before ``now`` (``1d``: yesterday, now)."""
    when = _time_or_duration(value)
    if not isinstance(when, datetime):
        if when < 0:
            raise FieldError(f"{value!r} must not be a negative duration")
        try:
            return now - timedelta(seconds=when)
        except OverflowError:
            raise FieldError(f"{value!r} is too far in the past") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=tz)


def _looks_like_duration(value: str) -> bool:
    try:
        to_timedelta(value)
    except DurationError:
        return False
    return True


# -- ids -------------------------------------------------------------------------------------


def check_name(value: object, what: str = "id") -> str | None:
    """The problem with a task id, API job id, schedule id or plugin name, or None: one
    part of a job id (no ``/``, which separates a plugin's name from its schedule ids)."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {describe_value(value)}"
    if not _NAME.match(value) or len(value) > JOB_ID_MAX:
        hint = " ('/' separates a plugin's name from its schedule ids)" if "/" in value else ""
        return f"{what} {value!r} is invalid: {NAME_RULE}{hint}"
    return None


def check_job_id(value: object) -> str | None:
    """The problem with a job id, or None (see the module docstring for the rule)."""
    if not isinstance(value, str) or not _JOB_ID.match(value) or len(value) > JOB_ID_MAX:
        return f"job id {value!r} is invalid: {JOB_ID_RULE}"
    return None


def _main_module_name() -> str | None:
    """What ``__main__`` is called when imported: ``python -m pkg.mod`` -> ``pkg.mod``,
    ``python myjobs.py`` -> ``myjobs``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name:
        return name.removesuffix(".__main__")
    file = getattr(main, "__file__", None)
    return Path(file).stem if isinstance(file, str) and file else None


def default_job_id(fn: Callable[..., Any]) -> str:
    """The id of a job declared without one: ``<module>.<qualified name>`` of ``fn``,
    the same whether its file runs as a script (``python myjobs.py``) or is imported
    (``import myjobs``): ``__main__`` is replaced by the module's own name."""
    module = getattr(fn, "__module__", None) or ""
    if module == "__main__":
        code = getattr(fn, "__code__", None)
        module = _main_module_name() or (
            Path(code.co_filename).stem if code is not None else "main")
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) \
        or type(fn).__name__
    qualname = qualname.replace("<locals>.", "").replace("<lambda>", "lambda")
    raw = f"{module}.{qualname}" if module else qualname
    clean = re.sub(r"[^A-Za-z0-9._:@+-]", "_", raw).lstrip("._:@+-") or "job"
    return clean[:JOB_ID_MAX]


# A URL that is plainly valid: http(s), a host name of letters, digits and hyphens whose
# last label starts with a letter, or a dotted IPv4 address of four numbers 0-255 without
# leading zeros (other address literals are httpx's to check), an optional port 1-99999
# without a leading zero (the range is checked below), then path, query and fragment of
# URL characters only. httpx accepts every such URL with this host and port; anything
# else is judged by httpx itself (its errors are the messages).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_PLAIN_URL = re.compile(
    rf"(?:https?|HTTPS?)://(?:(?:{_LABEL}\.)*[A-Za-z](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?"
    rf"|{_OCTET}(?:\.{_OCTET}){{3}})"
    r"(?::([1-9][0-9]{0,4}))?(?:[/?#][A-Za-z0-9._~!$&'()*+,;=:@%/?#-]*)?")


def _url_problem(url: str) -> str | None:
    """What is wrong with a job's URL before it ever runs (parts written as
    ``${secrets.NAME}`` are judged when the request is built), or None."""
    if url.startswith("${secrets."):
        return None
    probe = re.sub(r"\$\{secrets\.[^}]*\}", "x", url) if "${" in url else url
    plain = _PLAIN_URL.fullmatch(probe)
    if plain is not None and (plain.group(1) is None or int(plain.group(1)) <= 65535):
        return None  # ~2 us, not httpx's ~60 us: a batch checks 1,000 URLs
    return _parsed_url_problem(url, probe)


def _parsed_url_problem(url: str, probe: str) -> str | None:
    """:func:`_url_problem` by httpx's parser (``probe``: ``url`` with its secrets
    replaced)."""
    import httpx

    if any(c in probe for c in "\r\n\t\0 ") or any(ord(c) < 0x20 for c in probe):
        return "contains white space or a control character (percent-encode it)"
    try:
        parsed = httpx.URL(probe)
        port = parsed.port
    except (httpx.InvalidURL, ValueError) as exc:
        return f"not a valid URL: {exc}"
    if not parsed.host:
        return f"no host in {url!r} (e.g. https://example.com/hook)"
    if port is not None and not 1 <= port <= 65535:
        return f"port {port} is not 1-65535"
    return None


def header_problem(name: object, value: object) -> str | None:
    """Why ``name: value`` cannot be a request header, or None. Never quotes the value
    (it may hold a secret)."""
    if not isinstance(name, str) or not _HEADER_NAME.match(name):
        return "not a valid header name (letters, digits and !#$%&'*+.^_`|~-)"
    if len(name) > LIMITS["header_name"]:
        return f"the name is longer than {LIMITS['header_name']} characters"
    if not isinstance(value, str):
        return "expected text"
    if len(value) > LIMITS["header_value"]:
        return f"the value is longer than {LIMITS['header_value']} characters"
    if _HEADER_BREAK.search(value):
        return "the value contains a line break or NUL"
    if _HEADER_CONTROL.search(value):
        return "the value contains a control character"
    if value != value.strip(" \t"):
        return "the value starts or ends with white space"
    if not value.isascii():
        return "the value is not ASCII text (percent-encode or base64 it)"
    return None


# -- the spec ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpRequest:
    """The request part of an HTTP job, validated (see :class:`~cronfleet.jobs.http.HttpJob`
    for what each field does)."""

    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    timeout: float = DEFAULT_HTTP_TIMEOUT
    follow_redirects: bool = True
    accept_status: tuple[int, ...] | None = None
    body_contains: str | None = None
    body_not_contains: str | None = None
    body_regex: str | None = None
    body_not_regex: str | None = None
    signing_secret: str | None = None
    signature: str = "cronfleet"
    namespace: str | None = None

    def kwargs(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if out["namespace"] is None:
            del out["namespace"]
        return out


def check_http(table: Mapping[str, Any], *, keys: Sequence[str] = HTTP_KEYS
               ) -> tuple[HttpRequest | None, list[FieldProblem]]:
    """The request, or every problem (keys relative to the ``http`` table).
    ``allow_private_targets`` inside ``http`` is read by :func:`validate_job`."""
    problems = _unknown(table, keys)
    kw: dict[str, Any] = {}
    url = table.get("url")
    if "url" not in table:
        problems.append(FieldProblem("url", 'missing (e.g. http = { url = '
                                            '"https://example.com/hook" })'))
    elif not isinstance(url, str) or not url.strip():
        problems.append(FieldProblem("url", f"expected an http(s) URL, got {url!r}"))
    else:
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in ("http", "https") and not url.startswith("${secrets."):
            problems.append(FieldProblem("url", f"expected an http:// or https:// URL, got "
                                                f"{url!r}"))
        elif len(url) > MAX_URL:
            problems.append(FieldProblem("url", f"longer than {MAX_URL} characters"))
        elif problem := _url_problem(url):
            problems.append(FieldProblem("url", problem))
        kw["url"] = url
    if "method" in table:
        method = table["method"]
        if not isinstance(method, str) or method.strip().upper() not in HTTP_METHODS:
            hint = did_you_mean(method.upper(), HTTP_METHODS) if isinstance(method, str) else ""
            problems.append(FieldProblem("method", f"{method!r} is not one of "
                                                   f"{', '.join(HTTP_METHODS)}{hint}"))
        else:
            kw["method"] = method.strip().upper()
    if "headers" in table:
        headers = table["headers"]
        if not isinstance(headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            problems.append(FieldProblem("headers", "expected a table of text values"))
        elif len(headers) > LIMITS["headers"]:
            problems.append(FieldProblem("headers", f"at most {LIMITS['headers']} headers, got "
                                                    f"{len(headers)}"))
        else:
            bad = [FieldProblem(f"headers.{name[:64]}", problem)
                   for name, value in headers.items()
                   if (problem := header_problem(name, value))]
            problems += bad
            if not bad:
                kw["headers"] = dict(headers)
    if table.get("body") is not None:
        if not isinstance(table["body"], str):
            problems.append(FieldProblem("body", f"expected text, got "
                                                 f"{type(table['body']).__name__}"))
        elif len(table["body"]) > LIMITS["body"]:
            problems.append(FieldProblem("body", f"longer than {LIMITS['body']} characters "
                                                 f"({len(table['body'])})"))
        else:
            kw["body"] = table["body"]
    if table.get("timeout") is not None:
        try:
            kw["timeout"] = duration(table["timeout"], positive=True)
        except FieldError as exc:
            problems.append(FieldProblem("timeout", exc.message))
    if "follow_redirects" in table:
        try:
            kw["follow_redirects"] = boolean(table["follow_redirects"])
        except FieldError as exc:
            problems.append(FieldProblem("follow_redirects", exc.message))
    status = table.get("accept_status")
    if status is not None:
        if isinstance(status, str | bytes) or not isinstance(status, list | tuple) \
                or not status or not all(isinstance(s, int) and not isinstance(s, bool)
                                         and 100 <= s <= 599 for s in status):
            problems.append(FieldProblem("accept_status",
                                         "expected a non-empty list of status codes 100-599"))
        elif len(status) > LIMITS["accept_status"]:
            problems.append(FieldProblem("accept_status",
                                         f"at most {LIMITS['accept_status']} status codes, got "
                                         f"{len(status)}"))
        else:
            kw["accept_status"] = tuple(status)
    for key in (() if table.keys().isdisjoint(_HTTP_TEXT_KEYS) else _HTTP_TEXT_KEYS):
        value = table.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            problems.append(FieldProblem(key, "expected non-empty text"))
            continue
        limit = LIMITS["signing_secret" if key == "signing_secret" else "match_text"]
        if key != "namespace" and len(value) > limit:
            problems.append(FieldProblem(key, f"longer than {limit} characters"))
            continue
        if key in ("body_regex", "body_not_regex"):
            try:
                re.compile(value)
            except re.error as exc:
                problems.append(FieldProblem(key, f"invalid regular expression: {exc}"))
                continue
        kw[key] = value
    if "signature" in table:
        scheme = table["signature"]
        if scheme not in signing.SCHEMES:
            problems.append(FieldProblem("signature", f"expected one of "
                                         f"{', '.join(map(repr, signing.SCHEMES))}, got "
                                         f"{scheme!r}"))
        else:
            kw["signature"] = scheme
            if "signing_secret" not in kw and "signing_secret" not in table:
                problems.append(FieldProblem("signature", "needs a signing_secret"))
    if isinstance(kw.get("signing_secret"), str):
        problem = signing.key_problem(kw.get("signature", signing.DEFAULT_SCHEME),
                                      kw["signing_secret"])
        if problem:
            problems.append(FieldProblem("signing_secret", problem))
    if problems:
        return None, problems
    return HttpRequest(**kw), []


@dataclass(frozen=True)
class CommandSpec:
    """The command part of a command job, validated (see
    :class:`~cronfleet.jobs.command.CommandJob` for what each field does)."""

    command: tuple[str, ...] | str
    shell: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    kill_grace: float = DEFAULT_KILL_GRACE
    success_codes: tuple[int, ...] = (0,)
    max_output: int = DEFAULT_MAX_OUTPUT

    def kwargs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def byte_size(value: object) -> int:
    """Bytes from a whole number or a text like ``"1MiB"``, ``"512KiB"``, ``"10MB"``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise FieldError(f"expected a size in bytes or a text like '1MiB' or '512KiB', got "
                         f"{describe_value(value)}")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]


def check_command(table: Mapping[str, Any], *, base: str | Path | None = None
                  ) -> tuple[CommandSpec | None, list[FieldProblem]]:
    """The command part of a job from its :data:`COMMAND_KEYS` in ``table`` (keys at the
    job's level), or every problem. ``base``: the directory a relative ``cwd`` is
    resolved against (a config file's); otherwise it stays relative to the process's.
    Secret references (``${secrets.NAME}``) are checked by the job class."""
    problems: list[FieldProblem] = []
    kw: dict[str, Any] = {}
    command = table.get("command")
    shell = table.get("shell")
    if shell is not None:
        try:
            kw["shell"] = boolean(shell)
        except FieldError as exc:
            problems.append(FieldProblem("shell", exc.message))
    if isinstance(command, str):
        if not command.strip():
            problems.append(FieldProblem("command", "empty: give the program and its "
                                                    "arguments"))
        elif not kw.get("shell"):
            problems.append(FieldProblem("command", "a text runs through /bin/sh only with "
                                                    "shell = true; or give a list: "
                                                    'command = ["pg_dump", "-Fc", "app"]'))
        kw["command"] = command
    elif isinstance(command, list | tuple):
        if not command or not all(isinstance(a, str) for a in command) or not command[0]:
            problems.append(FieldProblem("command", "expected a non-empty list of texts, the "
                                                    'program first: ["pg_dump", "-Fc", "app"]'))
        elif len(command) > MAX_ARGV:
            problems.append(FieldProblem("command", f"more than {MAX_ARGV} arguments"))
        elif kw.get("shell"):
            problems.append(FieldProblem("shell", "shell = true takes the command as one "
                                                  "text (command = \"a | b\"), not a list"))
        kw["command"] = tuple(command)
    else:
        problems.append(FieldProblem("command", f"expected a list (the program and its "
                                                f"arguments) or a text with shell = true, got "
                                                f"{describe_value(command)}"))
    env = table.get("env")
    if env is not None:
        if not isinstance(env, Mapping):
            problems.append(FieldProblem("env", f"expected a table of NAME = \"value\", got "
                                                f"{describe_value(env)}"))
        else:
            for name, value in env.items():
                if not isinstance(name, str) or not _ENV_NAME.match(name):
                    problems.append(FieldProblem(f"env.{name}", "not a valid variable name "
                                                 "(letters, digits and _, not starting with "
                                                 "a digit)"))
                elif name.upper().startswith("CRONFLEET_"):
                    problems.append(FieldProblem(f"env.{name}", "CRONFLEET_* variables are "
                                                 "set by cronfleet (the run's identity)"))
                elif not isinstance(value, str):
                    problems.append(FieldProblem(f"env.{name}", f"expected text, got "
                                                 f"{describe_value(value)}"))
            kw["env"] = dict(env)
    cwd = table.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            problems.append(FieldProblem("cwd", "expected a directory path"))
        else:
            kw["cwd"] = str(Path(base) / cwd) if base is not None else cwd
    if table.get("kill_grace") is not None:
        try:
            kw["kill_grace"] = duration(table["kill_grace"])
        except FieldError as exc:
            problems.append(FieldProblem("kill_grace", exc.message))
    codes = table.get("success_codes")
    if codes is not None:
        if isinstance(codes, str | bytes) or not isinstance(codes, list | tuple) or not codes \
                or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255
                           for c in codes):
            problems.append(FieldProblem("success_codes", "expected a non-empty list of exit "
                                                          "codes 0-255, e.g. [0, 3]"))
        else:
            kw["success_codes"] = tuple(codes)
    if table.get("max_output") is not None:
        try:
            size = byte_size(table["max_output"])
            if not 1024 <= size <= MAX_MAX_OUTPUT:
                raise FieldError(f"expected 1KiB to {MAX_MAX_OUTPUT // 1024 ** 2}MiB, got "
                                 f"{size} bytes")
            kw["max_output"] = size
        except FieldError as exc:
            problems.append(FieldProblem("max_output", exc.message))
    if problems:
        return None, problems
    return CommandSpec(**kw), []


@dataclass(frozen=True, eq=False)
class JobFields:
    """The fields every job has, declared once. :class:`~cronfleet.model.Job` is these
    and what runs it (``handler``, ``source``); :class:`JobSpec` is these and what a job
    without a handler runs (its ``http`` request or ``command``)."""

    id: str
    schedule: AnySchedule
    missed: Missed = Missed.RUN_ONCE
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW
    locking: Locking = Locking.REQUIRE_GLOBAL
    overlap: Overlap = Overlap.SKIP
    timeout: float | None = None
    jitter: float = 0.0
    enabled: bool = True
    recover: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    team: str = DEFAULT_TEAM
    retry: RetryPolicy | None = None
    notify: NotifyPolicy | None = None
    auto_pause_after: int | None = None
    # concurrent runs of this job across the fleet, 1 to MAX_INSTANCES (docs/concepts.md,
    # "Concurrent runs of one job")
    max_instances: int = 1
    # the schedule as written when it was a sentence ("every weekday at 9am"); `schedule`
    # is then its canonical expression (cron/words.py)
    schedule_text: str | None = None


_JOB_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(JobFields))


@dataclass(frozen=True)
class JobSpec(JobFields):
    """Every field of a job, converted and valid (build it with :func:`validate_job`)."""

    allow_private_targets: bool | None = None
    http: HttpRequest | None = None
    command: CommandSpec | None = None

    def job_fields(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~cronfleet.model.Job` (all but handler/source):
        the :class:`JobFields`, ``config`` as a dict of its own."""
        out = {name: getattr(self, name) for name in _JOB_FIELD_NAMES}
        out["config"] = dict(self.config)
        return out


def split_index(key: str) -> tuple[str, str]:
    """``"schedule[1]"`` -> ``("schedule", "[1]")``; ``"timeout"`` -> ``("timeout", "")``:
    a face renames the key and keeps the index."""
    name, bracket, rest = key.partition("[")
    return name, bracket + rest


_ENUMS: dict[str, type[Enum]] = {"missed": Missed, "locking": Locking, "overlap": Overlap}
# the plain values of a job: key -> converter, in the order problems are reported
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "description": functools.partial(text, limit=TEXT_LIMITS["description"]),
    "timezone": functools.partial(text, limit=TEXT_LIMITS["timezone"]),
    "jitter": duration,
    "catch_up_window": duration,
    "timeout": functools.partial(duration, positive=True),
    **{key: functools.partial(enum_value, enum) for key, enum in _ENUMS.items()},
    "enabled": boolean,
    "recover": boolean,
    "allow_private_targets": boolean,
    "auto_pause_after": functools.partial(whole_number, low=1, high=AUTO_PAUSE_MAX),
    "max_instances": functools.partial(whole_number, low=1, high=MAX_INSTANCES),
}
_VALUE_KEYS = tuple(k for k in _CONVERTERS if k not in ("description", "timezone"))


def canonical_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A job spec as it is stored and shown: the same keys and values, with an HTTP
    method (any case accepted) written as its upper-case name."""
    out = dict(spec)
    http = out.get("http")
    if isinstance(http, Mapping) and isinstance(http.get("method"), str) and \
            http["method"].strip().upper() in HTTP_METHODS:
        out["http"] = {**http, "method": http["method"].strip().upper()}
    return out


def _composed(
    schedule: object,
    fields: Mapping[str, Any],
    tz: str,
    base: str | Path | bool | None,
    one: Callable[[object, str], AnySchedule | None],
    problems: list[FieldProblem],
) -> AnySchedule | None:
    """A composed schedule from ``schedule`` (one expression or a list: ``schedule[i]``
    problems), ``at``, ``start``, ``end`` and ``except`` (``except[i]``), every problem
    appended; a single expression with nothing else stays a plain ``CronExpr``.
    ``base``: where relative calendar files are; ``False``: calendar files refused."""
    before = len(problems)
    at, start, end, exclude = (fields.get(k) for k in SCHEDULE_KEYS[1:])
    if isinstance(schedule, ComposedSchedule):
        problems.append(FieldProblem("schedule", "already composed: give its parts "
                                                 "(a list, at, start, end, except) instead"))
        return None
    items: list[object] = []
    if isinstance(schedule, list | tuple):
        if not schedule:
            problems.append(FieldProblem("schedule", "empty list: give at least one "
                                                     "expression"))
        elif len(schedule) > MAX_SCHEDULES:
            problems.append(FieldProblem("schedule", f"more than {MAX_SCHEDULES} "
                                                     "expressions"))
        else:
            items = list(schedule)
    elif schedule is not None:
        items = [schedule]
    if items and at is not None:
        problems.append(FieldProblem("at", "a one-off runs instead of a recurring schedule: "
                                           "give either the schedule (cron) or at, not both"))
    # a parsed expression brings its zone (as a lone CronExpr keeps its own); texts are
    # read in the job's zone, and every part must end up in one zone
    zone: str | ZoneInfo = next((x.tz for x in items if isinstance(x, CronExpr)), tz)
    keyed = len(items) > 1 or isinstance(schedule, list | tuple)
    parts: list[CronExpr] = []
    for i, item in enumerate(items):
        key = f"schedule[{i}]" if keyed else "schedule"
        got = one(item, key)
        if isinstance(got, ComposedSchedule):  # a one-off in words: "tomorrow at 5pm"
            problems.append(FieldProblem(key, f"{item!r} is a one-off: give it alone as "
                                              "the schedule, or its instant as at (with "
                                              "start, end or except)"))
        elif got is not None and str(got.tz) != str(zone):
            problems.append(FieldProblem(key, f"in time zone {got.tz}, not {zone} like "
                                              "the others: every expression of a job runs "
                                              "in one zone (give timezone)"))
        elif got is not None:
            parts.append(got)
    bounds: dict[str, Any] = {}
    for key, value in (("at", at), ("start", start), ("end", end)):
        if value is None:
            continue
        try:
            bounds[key] = parse_instant(value, zone, field=key,
                                        end_of_day=key == "end")
        except CronSyntaxError as exc:
            problems.append(FieldProblem(key, exc.reason))
    exclusions = []
    if exclude is not None:
        entries = [exclude] if isinstance(exclude, str) else exclude
        if not isinstance(entries, list | tuple):
            problems.append(FieldProblem("except", f"expected a list of days (MM-DD, "
                                                   f"YYYY-MM-DD), cron expressions or "
                                                   f"calendar:PATH, got "
                                                   f"{describe_value(exclude)}"))
            entries = []
        elif len(entries) > MAX_EXCEPT:
            problems.append(FieldProblem("except", f"more than {MAX_EXCEPT} entries "
                                                   "(use a calendar file)"))
            entries = []
        for i, entry in enumerate(entries):
            key = f"except[{i}]"
            if isinstance(entry, Exclusion):  # already read (a config task's calendar)
                exclusions.append(entry)
                continue
            if isinstance(entry, str) and len(entry) > TEXT_LIMITS["schedule"]:
                problems.append(FieldProblem(key, f"longer than {TEXT_LIMITS['schedule']} "
                                                  "characters"))
                continue
            if base is False and isinstance(entry, str) \
                    and entry.strip().startswith("calendar:"):
                problems.append(FieldProblem(key, "calendar files are not accepted here: "
                                                  "list the days (MM-DD, YYYY-MM-DD)"))
                continue
            try:
                exclusions.append(parse_exclusion(
                    entry, zone, base=None if isinstance(base, bool) else base))
            except CronSyntaxError as exc:
                message = str(exc) if exc.field != "except" else exc.reason
                problems.append(FieldProblem(key, message, exc.column))
    lo, hi, when = bounds.get("start"), bounds.get("end"), bounds.get("at")
    # instants compared as instants (in a repeated hour one zone's datetimes compare by
    # wall time)
    if lo is not None and hi is not None and hi.timestamp() < lo.timestamp():
        problems.append(FieldProblem("end", f"{hi.isoformat()} is before start "
                                            f"{lo.isoformat()}"))
    if when is not None and ((lo is not None and when.timestamp() < lo.timestamp())
                             or (hi is not None and when.timestamp() > hi.timestamp())):
        problems.append(FieldProblem("at", f"{when.isoformat()} is outside start/end: "
                                           "the job would never run"))
    if len(problems) > before or (not parts and when is None):
        return None
    if len(parts) == 1 and not bounds and not exclusions:
        return parts[0]
    composed = ComposedSchedule(parts, tz=zone,
                                at=when, start=lo, end=hi, exclusions=exclusions)
    if when is not None and composed.excluded(when):
        problems.append(FieldProblem("at", f"{when.isoformat()} is excluded by except: "
                                           "the job would never run"))
        return None
    return composed


# -- one validation per distinct set of arguments ---------------------------------------------


class Unkeyable(Exception):
    """A value :func:`value_key` cannot key (mutable past its depth, or of another type)."""


# values keyed by their type and value: equal values of these types validate and
# serialise alike (a datetime does not: equal instants in two zones are equal)
_KEYED_BY_VALUE = frozenset({str, int, bool, timedelta, date})


def value_key(value: object, depth: int = 0,
              identity: tuple[type, ...] = ()) -> Hashable:
    """A hashable key for ``value`` that two values share only when every job field built
    from them is the same: the type is part of it (``1``, ``1.0`` and ``True`` are equal
    in Python, not in a job's spec), a float is keyed by its exact bits (``-0.0``),
    lists, tuples and dicts by their content (dicts in order) up to ``depth`` levels, an
    instance of an ``identity`` type by its identity (the caller keeps it alive, e.g. in
    the cached result). Raises :class:`Unkeyable` for anything else."""
    if value is None:
        return None
    t = type(value)
    if t in _KEYED_BY_VALUE or isinstance(value, Enum):
        return (t, value)
    if isinstance(value, float) and t is float:
        return (t, value.hex())
    if t in identity:
        return (t, id(value))
    if depth > 0:
        if isinstance(value, list | tuple) and (t is list or t is tuple):
            return (t, tuple(value_key(v, depth - 1, identity) for v in value))
        if isinstance(value, dict) and t is dict:
            return (t, tuple((value_key(k), value_key(v, depth - 1, identity))
                             for k, v in value.items()))
    raise Unkeyable(t.__name__)


# Job.create's fields -> how deep value_key looks into them (config: its values must be
# scalars, since the job keeps them; the policies' tables become new frozen objects)
_DECLARED_DEPTH = {"schedule": 1, "except": 1, "config": 1, "retry": 3, "notify": 3}
DECLARED_CACHE_MAX = 1024  # distinct argument sets kept by validate_declared
# kept by the cached fields when valid, so keyed by identity (a RetryPolicy with delay 1
# equals one with 1.0, which the registry writes apart)
_BY_IDENTITY = (CronExpr, Exclusion, RetryPolicy, NotifyPolicy)
_declared_fields: dict[Hashable, dict[str, Any]] = {}  # key -> JobSpec.job_fields()


def _declared_key(fields: Mapping[str, Any]) -> Hashable | None:
    """The key of a declaration's arguments without its id, or ``None`` when one of them
    cannot be keyed or must be read again each time (a ``calendar:`` file)."""
    exclude = fields.get("except")
    entries = [exclude] if isinstance(exclude, str) else exclude
    if isinstance(entries, list | tuple) and any(
            isinstance(e, str) and CALENDAR_PREFIX in e for e in entries):
        return None
    key: list[Hashable] = []
    try:
        for k, v in fields.items():
            if k == "id":
                continue
            if type(v) is str:  # most values (value_key's answer, without the call)
                key.append((k, str, v))
            else:
                key.append((k, value_key(v, _DECLARED_DEPTH.get(k, 0), _BY_IDENTITY)))
    except Unkeyable:
        return None
    return tuple(key)


def validate_declared(fields: Mapping[str, Any]) -> tuple[dict[str, Any] | None,
                                                          list[FieldProblem]]:
    """:func:`validate_job` of a job declared in code (``nested_id``; what
    :meth:`~cronfleet.model.Job.create` calls): the :class:`~cronfleet.model.Job` keyword
    arguments (:meth:`JobSpec.job_fields`), or ``None`` and every problem.

    Declaring 100,000 jobs with the same arguments but their ids validates once: the
    spec of a set of arguments already seen (:func:`value_key` of every field but the
    id) is reused with this job's id once the id passes :func:`check_job_id`. Only valid
    sets are kept, so a bad id or a bad value always takes the full path and gets its
    own message; arguments that cannot be keyed (a datetime, a list in ``config``,
    another type) and ``calendar:`` exclusions (the file is read again) take it too."""
    key = _declared_key(fields)
    job_id = fields.get("id")
    seen = None if key is None else _declared_fields.get(key)
    if seen is None or check_job_id(job_id) is not None:
        spec, problems = validate_job(fields, nested_id=True)
        if spec is None:
            return None, problems
        seen = spec.job_fields()
        if key is None:
            return seen, []
        if len(_declared_fields) >= DECLARED_CACHE_MAX:
            _declared_fields.clear()
        _declared_fields[key] = seen
    out = seen.copy()  # the job's own dicts, as job_fields gives them
    out["id"] = job_id
    out["config"] = dict(seen["config"])
    return out, []


def validate_job(
    fields: Mapping[str, Any],
    *,
    keys: Sequence[str] = SPEC_KEYS,
    http_keys: Sequence[str] = HTTP_KEYS,
    timezone: str = "UTC",
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW,
    nested_id: bool = False,
    require_http: bool = False,
    base: str | Path | None = None,
    calendars: bool = True,
    now: float | None = None,
    for_team: str | None = None,
) -> tuple[JobSpec | None, list[FieldProblem]]:
    """Check every field of a job at once: ``(spec, [])`` or ``(None, every problem)``
    (:func:`job_arguments` as a :class:`JobSpec`)."""
    kwargs, problems = job_arguments(
        fields, keys=keys, http_keys=http_keys, timezone=timezone,
        catch_up_window=catch_up_window, nested_id=nested_id, require_http=require_http,
        base=base, calendars=calendars, now=now, for_team=for_team)
    return (None, problems) if kwargs is None else (JobSpec(**kwargs), [])


def job_arguments(
    fields: Mapping[str, Any],
    *,
    keys: Sequence[str] = SPEC_KEYS,
    http_keys: Sequence[str] = HTTP_KEYS,
    timezone: str = "UTC",
    catch_up_window: float = DEFAULT_CATCH_UP_WINDOW,
    nested_id: bool = False,
    require_http: bool = False,
    base: str | Path | None = None,
    calendars: bool = True,
    now: float | None = None,
    for_team: str | None = None,
) -> tuple[dict[str, Any] | None, list[FieldProblem]]:
    """Check every field of a job at once: ``(kwargs, [])``, the keyword arguments of
    its :class:`JobSpec` (those not left to their defaults: what :func:`validate_job`
    builds it from; a stored API job is built from them without one), or ``(None, every
    problem)``.

    ``now`` (epoch seconds, the face's clock): the moment a job created once (over the
    API) is created at; a one-off in words that depends on it ('tomorrow at 5pm', 'in 2
    hours', a date without its year) is read at ``now``. Without it (a job declared again
    at every start: a config file, code) such a one-off is refused, naming the instant to
    write instead.

    ``fields`` uses the canonical keys (:data:`SPEC_KEYS`); a key outside ``keys`` is a
    problem (with a did-you-mean), as is one outside ``http_keys`` in ``http``. Absent or
    ``None`` values take their defaults; ``timezone`` and ``catch_up_window`` are the
    defaults of the face (``[scheduler]`` values for config tasks). ``schedule`` may be a
    parsed :class:`~cronfleet.cron.CronExpr`. ``nested_id``: the id may contain ``/``
    (a job id, as :meth:`Job.create` takes); otherwise it must be a single name.
    ``require_http``: the job is an HTTP request (a stored API job has no handler).
    ``schedule`` may also be a list of expressions (their instants united), replaced by a
    one-off ``at``, and bounded by ``start``/``end`` and ``except`` exclusions
    (:func:`_composed`); ``base``: the directory a relative ``calendar:`` file is read
    from (a config file's directory); ``calendars=False`` refuses ``calendar:`` files
    (a job stored over the API must not read the server's files). ``for_team``: the team
    the job is built for (a stored API job's owner), its ``team`` whatever ``fields`` say.
    """
    problems = _unknown(fields, keys, listed=False)
    out: dict[str, Any] = {}
    if keys is SPEC_KEYS or not problems:  # (every key is one of keys)
        known = fields
    else:
        key_set = _key_set(keys)
        known = {k: v for k, v in fields.items() if k in key_set}
    get = known.get
    given_keys = known.keys()  # a group of keys none of which is given: one test

    def check_present(keys: Sequence[str]) -> None:
        # only the keys given (a job declared in code gives few): no call for the others
        if given_keys.isdisjoint(keys):
            return
        for key in keys:
            value = get(key)
            if value is not None:
                try:
                    out[key] = _CONVERTERS[key](value)
                except FieldError as exc:
                    problems.append(FieldProblem(key, exc.message, exc.column))

    job_id = fields.get("id")
    if job_id is None:
        problems.append(FieldProblem("id", 'missing: every job needs a unique id (e.g. '
                                           '"cleanup")'))
    else:
        problem = check_job_id(job_id) if nested_id else check_name(job_id, "id")
        if problem:
            problems.append(FieldProblem("id", problem))
    check_present(("description", "timezone"))
    tz = out.get("timezone", timezone)
    if "timezone" in out:
        try:  # the zone on its own, so that a bad expression does not hide it
            parse("1d", tz)
        except CronSyntaxError as exc:
            problems.append(FieldProblem("timezone", exc.reason))
            tz = "UTC"
    schedule = fields.get("schedule")
    expr: AnySchedule | None = None
    schedule_text: str | None = None  # the sentence as written, when it was one
    written: list[tuple[str, bool]] = []  # each expression as written, and if words

    def one(value: object, key: str) -> AnySchedule | None:
        """One expression or sentence (a list's element too), its problem keyed by
        ``key``; a one-off in words is a :class:`ComposedSchedule` with its ``at``."""
        if isinstance(value, CronExpr):
            written.append((value.expr, False))
            return value
        if not isinstance(value, str):
            problems.append(FieldProblem(key, f"expected a string, got "
                                              f"{describe_value(value)}"))
        elif len(value) > TEXT_LIMITS["schedule"]:
            problems.append(FieldProblem(key, f"longer than {TEXT_LIMITS['schedule']} "
                                              "characters"))
        else:
            try:
                got, sentence = parse_schedule(value, tz, now=now, relative=now is not None)
            except CronSyntaxError as exc:
                problems.append(FieldProblem(key, str(exc), exc.column))
            else:
                written.append((value, sentence is not None))
                return got
        return None

    composing = (get("at") is not None or get("start") is not None
                 or get("end") is not None or get("except") is not None)
    if schedule is None and get("at") is None:
        problems.append(FieldProblem("schedule", 'missing: a cron expression, macro or '
                                                 'interval (e.g. "0 6 * * *" or "15m"), '
                                                 'a list of them, or a one-off "at"'))
    elif isinstance(schedule, list | tuple) or composing:
        expr = _composed(schedule, known, tz, base if calendars else False, one, problems)
    else:
        expr = one(schedule, "schedule")
    if any(words for _, words in written):  # shown as written: "every weekday at 9am"
        schedule_text = " | ".join(text for text, _ in written)
    check_present(_VALUE_KEYS)
    team = get("team")
    if team is not None:
        problem = check_team(team)
        if problem:
            problems.append(FieldProblem("team", problem))
        else:
            out["team"] = team
    config = get("config")
    if config is not None:
        if not isinstance(config, Mapping):
            problems.append(FieldProblem("config", f"expected an object, got "
                                                   f"{describe_value(config)}"))
        else:
            try:
                size = len(json.dumps(config, default=str))
            except (TypeError, ValueError, RecursionError):
                size = 0
                problems.append(FieldProblem("config", "expected a JSON object"))
            if size > LIMITS["config"]:
                problems.append(FieldProblem("config", f"larger than {LIMITS['config']} "
                                                       f"characters as JSON ({size})"))
            else:
                out["config"] = dict(config)
    for key, convert_policy in (("retry", retry_policy), ("notify", notify_policy)):
        value = get(key)
        if value is not None:
            policy, policy_problems = convert_policy(value)
            problems += [p.under(key) for p in policy_problems]
            out[key] = policy
    http = get("http")
    if http is None and require_http and get("command") is None:
        problems.append(FieldProblem("http", 'missing: the request, e.g. {"url": '
                                             '"https://example.com/hook"}'))
    elif http is not None:
        if not isinstance(http, Mapping):
            problems.append(FieldProblem("http", f"expected a table (http = {{ ... }}), got "
                                                 f"{describe_value(http)}"))
        else:
            request, http_problems = check_http(http, keys=http_keys)
            problems += [p.under("http") for p in http_problems]
            out["http"] = request
            inner = http.get("allow_private_targets")
            if inner is not None and "allow_private_targets" in http_keys:
                try:
                    inner = boolean(inner)
                except FieldError as exc:
                    problems.append(FieldProblem("http.allow_private_targets", exc.message))
                else:
                    outer = out.get("allow_private_targets")
                    if outer is not None and outer != inner:
                        problems.append(FieldProblem(
                            "http.allow_private_targets",
                            "conflicts with allow_private_targets (give it once, outside "
                            "http)"))
                    out["allow_private_targets"] = inner
    problem = check_max_instances(out.get("max_instances", 1), out.get("overlap"))
    if problem:
        problems.append(FieldProblem("max_instances", problem))
    given = ([] if given_keys.isdisjoint(COMMAND_KEYS)
             else [k for k in COMMAND_KEYS if get(k) is not None])
    if "command" in given:
        command, command_problems = check_command(known, base=base if calendars else None)
        problems += command_problems
        out["command"] = command
        if http is not None:
            problems.append(FieldProblem("command", "a job runs either a command or an http "
                                                    "request, not both"))
    elif given:
        problems += [FieldProblem(k, 'only applies to command jobs (add command = '
                                     '["program", "arg"])') for k in given]
    if problems:
        return None, problems
    assert expr is not None and isinstance(job_id, str)
    description = out.pop("description", "")
    request = out.get("http")
    if request is not None and not description:
        description = f"{request.method} {request.url}"
    command = out.get("command")
    if command is not None and not description:
        import shlex

        description = (command.command if isinstance(command.command, str)
                       else shlex.join(command.command))[:TEXT_LIMITS["description"]]
    out.pop("timezone", None)
    out.setdefault("catch_up_window", catch_up_window)
    if for_team is not None:
        out["team"] = for_team
    out.update(id=job_id, schedule=expr, description=description,
               schedule_text=schedule_text)
    return out, []
