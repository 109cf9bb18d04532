"""The keys a ``cronfleet.toml`` may have, the environment variables it reads, and the
did-you-mean hints for keys people reach for."""

from __future__ import annotations

from collections.abc import Sequence

from cronfleet import spec

CONFIG_ENV = "CRONFLEET_CONFIG"
STORE_ENV = "CRONFLEET_STORE"
SCHEDULER_ENV = "CRONFLEET_SCHEDULER"
DEFAULT_CONFIG = "cronfleet.toml"
DEFAULT_STORE = "sqlite:///cronfleet.db"

SCHEDULER_KEYS = (
    "store", "timezone", "catch_up_window", "provider", "handlers", "plugins", "entry_points",
    "shutdown_grace", "run_retention", "runs_per_job", "allow_private_targets",
    "connect_timeout",
    "instance_ttl",
    "log_level", "log_format", "metrics_port",
    "metrics_job_label",
)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
API_KEYS = ("enabled", "host", "port", "metrics", "ready_max_overdue", "private_targets",
            "max_request_body", "allow_command_jobs", "forwarded_allow_ips")
# a task's keys: the spec's fields by their [[tasks]] names (spec.FIELDS), and its handler
TASK_KEYS = (*(f.task for f in spec.FIELDS if f.task is not None), "handler")
# keys of a task's http = {...}, retry = {...} and notify = {...} tables: the spec's
HTTP_KEYS = tuple(k for k in spec.HTTP_KEYS if k != "allow_private_targets")
RETRY_KEYS = spec.RETRY_KEYS
NOTIFY_KEYS = spec.NOTIFY_KEYS
EMAIL_KEYS = spec.EMAIL_KEYS
# task keys that name a spec key differently ("config_json" is JSON text of "config")
TASK_TO_SPEC = {f.task: f.key for f in spec.FIELDS if f.task not in (None, f.key)}
SPEC_TO_TASK = {v: k for k, v in TASK_TO_SPEC.items()}
# keys that only mean something for an http task
HTTP_ONLY = ("allow_private_targets",)
# names people reach for that difflib would not connect to ours
_HINTS = {
    "schedule": "cron", "expr": "cron", "expression": "cron", "every": "cron",
    "interval": "cron", "tz": "timezone", "zone": "timezone", "name": "id",
    "func": "handler", "function": "handler", "callable": "handler", "target": "handler",
    "config": "config_json", "args": "config_json", "params": "config_json",
    "disabled": "enabled", "misfire": "missed", "misfire_grace_time": "catch_up_window",
    "concurrency": "max_instances", "cmd": "command", "argv": "command", "run": "command",
    "environment": "env", "workdir": "cwd", "directory": "cwd", "working_dir": "cwd",
    "database": "store", "db": "store", "url": "store",
    "task": "tasks", "jobs": "tasks", "job": "tasks",
    "exclude": "except", "exclusions": "except", "excluding": "except", "until": "end",
    "start_date": "start", "end_date": "end", "once": "at", "run_at": "at", "date": "at",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def did_you_mean(name: str, allowed: Sequence[str]) -> str:
    return spec.did_you_mean(name, allowed, _HINTS)
