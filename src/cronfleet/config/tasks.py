"""The ``[[tasks]]`` of ``cronfleet.toml``, mapped onto the one job spec.

Each entry is renamed into spec keys (``cron`` -> ``schedule``, ``config_json`` parsed into
``config``) and checked by :func:`cronfleet.spec.validate_job` in one go, so every problem
of a task -- its schedule, its ``http`` table, ``retry``, ``notify`` -- is reported in the
same round; each problem is placed at its key (the column inside a cron expression for a
syntax error). Handler tasks, http tasks and command tasks (``command = [...]``) accept
the same keys (``retry``, ``notify`` and ``auto_pause_after`` included); only
``allow_private_targets`` is for http tasks, and ``shell``, ``env``, ``cwd``,
``kill_grace``, ``success_codes``, ``max_output`` are for command tasks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol

from cronfleet import spec
from cronfleet.config.keys import (
    HTTP_KEYS,
    HTTP_ONLY,
    SPEC_TO_TASK,
    TASK_KEYS,
    TASK_TO_SPEC,
    did_you_mean,
)
from cronfleet.config.locate import Locator
from cronfleet.config.problems import Problem
from cronfleet.config.settings import Config
from cronfleet.plugins import (
    BUILTIN_PROVIDER,
    Schedule,
    Task,
    check_handler,
    describe_value,
    import_object,
)

__all__ = ["Reader", "handler_name", "read_tasks", "task_problem"]


class Reader(Protocol):
    """What reading the tasks needs of the file's reader
    (:class:`cronfleet.config.reader.Reader`): where a key is, and where problems go."""

    display: str
    loc: Locator
    sched_table: str
    warnings: list[Problem]

    def problem(self, message: str, *, at: tuple[int, int] | None = None,
                line: int | None = None, task: str | None = None,
                key: str | None = None) -> None: ...

    def warn(self, message: str, *, at: tuple[int, int] | None = None,
             task: str | None = None, key: str | None = None) -> None: ...

    def where(self, table: str, index: int, key: str | None) -> tuple[int, int] | None: ...

    def key_position(self, table: str, index: int, key: str
                     ) -> tuple[int, int] | None: ...

_SPEC_KEYS = spec.SPEC_KEYS
# the task keys given to its Schedule as written (a [[tasks]] entry and a Schedule name
# them alike); retry, notify and auto_pause_after go in converted, except as read
_CONVERTED = ("retry", "notify", "auto_pause_after", "except")
_SCHEDULE_FIELDS = tuple(f.task for f in spec.FIELDS if f.task is not None
                         and f.task == f.schedule and f.key not in _CONVERTED)


def task_problem(problem: spec.FieldProblem) -> tuple[str, str]:
    """A spec problem as ``(task key, message)``: ``http.url`` -> ``("http", "url: ...")``,
    ``notify.email.host`` -> ``("notify", "email: host: ...")``, ``schedule`` -> ``cron``."""
    top, _, rest = problem.key.partition(".")
    name, index = spec.split_index(top)
    key = SPEC_TO_TASK.get(name, name) + index
    if rest and not problem.message.startswith("unknown key"):
        return key, f"{rest.replace('.', ': ')}: {problem.message}"
    return key, problem.message


def read_tasks(r: Reader, tasks: list[Any], config: Config) -> None:
    """Check every ``[[tasks]]`` entry; the valid ones become ``config.tasks``."""
    first_line: dict[str, int | None] = {}
    for index, raw in enumerate(tasks):
        header = r.loc.table("tasks", index)
        if not isinstance(raw, dict):
            r.problem(f"task #{index + 1}: expected a table", line=header, key="tasks")
            continue
        task = _read_task(r, index, raw, config, first_line)
        if task is not None:
            config.tasks.append(task)


def _read_task(r: Reader, index: int, raw: dict[str, Any], config: Config,
               first_line: dict[str, int | None]) -> Task | None:
    task_id = raw.get("id")
    label = f"{task_id!r}" if isinstance(task_id, str) and task_id else f"#{index + 1}"
    tid = task_id if isinstance(task_id, str) else None
    where = f"task {label}"
    failed = False

    def bad(key: str, message: str, at: tuple[int, int] | None = None) -> None:
        nonlocal failed
        failed = True
        r.problem(f"{where}: {key}: {message}", at=at or r.where("tasks", index, key),
                  task=tid, key=key)

    for key in raw:
        if key not in TASK_KEYS:
            r.problem(f"{where}: unknown key {key!r}{did_you_mean(key, TASK_KEYS)}",
                      at=r.key_position("tasks", index, key), task=tid, key=key)
    if "id" not in raw:
        bad("id", 'missing (every task needs a unique id, e.g. id = "cleanup")')
    if "cron" not in raw and "at" not in raw:
        bad("cron", 'missing (when it runs, e.g. cron = "*/5 * * * *" or cron = "5m"; '
                    'or at = "2026-12-24T18:00:00+01:00" for a one-off)')
    handler_path = raw.get("handler")
    is_http = "http" in raw
    is_command = "command" in raw
    if is_http and handler_path is not None:
        bad("http", "a task has either a handler or an http request, not both")
    if is_command and handler_path is not None:
        bad("command", "a task has either a handler or a command, not both")
    elif not is_http:
        for key in HTTP_ONLY:
            if key in raw:
                bad(key, "only applies to http tasks (add http = { url = \"...\" })")
    unbound = (handler_path is None and not is_http and not is_command
               and config.provider == BUILTIN_PROVIDER)
    if unbound and config.handlers is not None and isinstance(task_id, str):
        handler_path = f"{config.handlers}:{handler_name(task_id)}"
        unbound = False
    if isinstance(task_id, str) and task_id in first_line:
        bad("id", f"duplicate id {task_id!r} (first declared at line {first_line[task_id]})")
    elif isinstance(task_id, str):
        first_line[task_id] = (r.where("tasks", index, "id") or (None, 0))[0]

    fields: dict[str, Any] = {
        TASK_TO_SPEC.get(k, k): v for k, v in raw.items()
        if k in TASK_KEYS and k not in ("handler", "config_json")
        and (is_http or k not in HTTP_ONLY)
    }
    fields.setdefault("id", "placeholder")  # reported above; check the other keys
    if "at" not in raw:
        fields.setdefault("schedule", "@daily")
    if "config_json" in raw:
        try:
            fields["config"] = spec.config_from_json(raw["config_json"])
        except spec.FieldError as exc:
            bad("config_json", exc.message)
    result, problems = spec.validate_job(
        fields, keys=_SPEC_KEYS, http_keys=HTTP_KEYS, timezone=config.timezone,
        catch_up_window=config.catch_up_window,
        base=None if config.path is None else Path(config.path).resolve().parent)
    for p in problems:
        key, message = task_problem(p)
        at = r.where("tasks", index, spec.split_index(key)[0])
        if key == "cron" and p.column is not None and at is not None \
                and isinstance(raw.get("cron"), str):
            at = _cron_column(r, at, raw["cron"], p.column)
        bad(key, message, at)
    handler = None
    if handler_path is not None:
        handler = _read_handler(handler_path, bad, "handler" in raw, config.handlers)
    elif is_http and result is not None and result.http is not None:
        handler = _http_job(result, config, bad)
        why = _refused_target(handler, config)
        if why is not None:
            r.warn(f"{where}: http: url: {why}: the request will be refused (SSRF guard) "
                   "unless allow_private_targets = true on the task or in [scheduler]",
                   at=r.where("tasks", index, "http"), task=tid, key="http")
    elif is_command and result is not None and result.command is not None:
        handler = _command_job(result, config, bad)
    if failed or result is None or (handler is None and (is_http or is_command
                                                         or handler_path)):
        return None
    if unbound:  # runnable once a handlers module is given: `check` warns, `run` refuses
        table = r.sched_table
        message = (
            f"{where}: handler: none yet: the built-in {BUILTIN_PROVIDER!r} provider needs "
            f'handler = "module:function" on the task, or a module whose functions are '
            f"named after the task ids: handlers = \"myapp.tasks\" in [{table}] (or "
            f"CRONFLEET_HANDLERS), function {handler_name(tid or '')!r} here")
        r.warn(message, at=r.where("tasks", index, None), task=tid, key="handler")
        config.unbound.append(r.warnings[-1])
        return None
    kwargs: dict[str, Any] = {k: raw[k] for k in _SCHEDULE_FIELDS if k in raw}
    if "except" in raw:  # as read (a calendar file is read relative to this file once)
        kwargs["exclude"] = getattr(result.schedule, "exclusions", raw["except"])
    if is_http or is_command:
        kwargs["description"] = result.description
    job_fields = result.job_fields()  # validated once: the job is built from these
    if is_command and handler is not None and handler.timeout is not None:
        # a net behind the command's own
        kwargs["timeout"] = job_fields["timeout"] = handler.job_timeout
    schedule = Schedule(**kwargs, retry=result.retry, notify=result.notify,
                        auto_pause_after=result.auto_pause_after)
    return Task(schedule, handler, handler_path, f"{r.display}:{r.loc.table('tasks', index) or 0}",
                job_fields)


def _refused_target(job: Any, config: Config) -> str | None:
    """Why the SSRF guard will refuse this HTTP job's URL (a literal private / loopback
    address or a ``localhost`` name, with private targets not allowed), else None. Names
    are resolved only when sending: a name that resolves to a private address is refused
    then, with the address in the run's error."""
    from cronfleet.jobs.http import ALL_TARGETS, NO_PRIVATE_TARGETS

    if job is None:
        return None
    allowed = (job.allow_private_targets if job.allow_private_targets is not None
               else config.allow_private_targets)
    return (ALL_TARGETS if allowed else NO_PRIVATE_TARGETS).refuses(job.url)


def _http_job(result: spec.JobSpec, config: Config, bad: Any) -> Any:
    """The task's :class:`~cronfleet.jobs.http.HttpJob` (secret references are checked
    there), or None after reporting."""
    from cronfleet.jobs.http import HttpJob, HttpJobInvalid

    try:
        return HttpJob.from_spec(result, runtime=config.http_runtime())
    except HttpJobInvalid as exc:
        for key, message in exc.problems:
            bad("http", f"{key}: {message}")
    return None


def _command_job(result: spec.JobSpec, config: Config, bad: Any) -> Any:
    """The task's :class:`~cronfleet.jobs.command.CommandJob` (secret references are
    checked there), or None after reporting."""
    from cronfleet.jobs.command import CommandJob, CommandJobInvalid

    try:
        return CommandJob.from_spec(result, runtime=config.command_runtime())
    except CommandJobInvalid as exc:
        for key, message in exc.problems:
            bad("command" if key == "secrets" else key, message)
    return None


def handler_name(task_id: str) -> str:
    """The function of the ``handlers`` module that runs a task without a ``handler``: the
    task's id, each character a Python name cannot hold (``-``, ``.``) read as ``_``
    (``daily-report`` -> ``daily_report``)."""
    return re.sub(r"\W", "_", task_id)


def _read_handler(path: object, bad: Any, given: bool = True,
                  module: str | None = None) -> Any:
    """The task's handler: ``handler = "module:function"`` (``given``), else the function
    of the ``handlers`` module named after the task's id."""
    if not isinstance(path, str):
        bad("handler", f"expected 'module:function' text, got {describe_value(path)}")
        return None
    try:
        fn = import_object(path)
    except ValueError as exc:
        bad("handler", str(exc) if given else
            f"{exc} (handlers = {module!r} runs each task without a handler with the "
            "function named after its id)")
        return None
    problem = check_handler(fn, path)
    if problem:
        bad("handler", problem)
        return None
    return fn


def _cron_column(r: Reader, at: tuple[int, int], expr: str, column: int) -> tuple[int, int]:
    """Point at the offending token inside the quoted expression when the text in the
    file is the expression verbatim (no escapes)."""
    line, col = at
    text = r.loc.lines[line - 1]
    quote = text[col - 1: col]
    if quote in ("'", '"') and text[col: col + len(expr)] == expr:
        return line, col + column
    return at
