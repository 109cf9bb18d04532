"""The ``cronfleet`` command line.

``main`` is a click group; each command is a plain click command registered on it. Commands
import what they need inside the function, so ``cronfleet next`` stays fast to start.

Schedule tools: ``next``, ``explain``. Running: ``run``, ``check``. Operating (against the
same store as the running processes): ``jobs``, ``history``, ``show-run``, ``trigger``,
``pause``, ``resume``, ``clear-override``, ``status``. Secrets: ``secrets set|list|delete|
rotate-key|generate-key`` (docs/secrets.md). See docs/cli.md.

Exit codes (shared by every command):
    0  success
    1  failure: invalid configuration or plugin, store error, a triggered run that did not
       succeed, or no answer (a schedule that never fires again)
    2  bad input: an invalid expression, time zone, option or argument; an unknown job or
       run id
    3  the job is already executing (``trigger``)
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cronfleet import __version__

if TYPE_CHECKING:
    from cronfleet.config import Loaded, Problem
    from cronfleet.model import Job, JobState, RunRecord
    from cronfleet.overview import JobView
    from cronfleet.store.base import Store

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NO_ANSWER = 1
EXIT_BAD_INPUT = 2
EXIT_BUSY = 3

_EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure: invalid configuration or plugin, store error, a triggered run
     that did not succeed, or no answer (a schedule that never fires again)
  2  bad input: invalid expression, time zone, option or argument;
     unknown job or run id
  3  the job is already executing (trigger)"""

_CRON_EXIT_CODES = """\b
Exit codes:
  0  success
  1  no answer (the schedule never fires again)
  2  bad input: invalid expression, time zone or option"""


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=_EXIT_CODES,
)
@click.version_option(__version__, prog_name="cronfleet")
def main() -> None:
    """cronfleet: a cron scheduler that fires each slot exactly once across a fleet."""


def _console(err: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=err, highlight=False, soft_wrap=True)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def _parse(words: tuple[str, ...], tz: str) -> Any:
    from cronfleet.cron import CronSyntaxError, parse

    text = " ".join(words)
    try:
        return parse(text, tz)
    except CronSyntaxError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


def _after(value: str | None, tz: Any) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        _fail(
            f"--after: {value!r} is not an ISO 8601 date-time (e.g. 2024-03-31T01:30:00+01:00)",
            EXIT_BAD_INPUT,
        )
    return t if t.tzinfo is not None else t.replace(tzinfo=tz)


_EXPR = click.argument("expr", nargs=-1, required=True)
_TZ = click.option(
    "--tz", "tz", default="UTC", show_default=True, metavar="ZONE",
    help="IANA time zone the schedule runs in, e.g. Europe/Paris.",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@main.command("next", epilog=_CRON_EXIT_CODES)
@_EXPR
@_TZ
@click.option("-n", "count", type=click.IntRange(1, 10_000), default=5, show_default=True,
              help="How many fire times.")
@click.option("--after", metavar="ISO",
              help="Start (exclusive), ISO 8601; without an offset it is read in --tz. "
                   "Default: now.")
@_JSON
def next_cmd(expr: tuple[str, ...], tz: str, count: int, after: str | None,
             as_json: bool) -> None:
    """Print the next fire times of EXPR.

    EXPR is a cron expression (5 fields, or 6 with leading seconds), a macro such as
    @daily, or an interval such as 5m or '@every 1h30m'. Quote it so the shell does not
    expand '*': cronfleet next '*/5 * * * *' --tz Europe/Paris
    """
    from cronfleet.cron import NoFireTimeError

    schedule = _parse(expr, tz)
    start = _after(after, schedule.tz)
    times: list[datetime] = []
    t = start
    try:
        for _ in range(count):
            t = schedule.next(t)
            times.append(t)
    except NoFireTimeError as exc:
        if not times:
            _fail(str(exc), EXIT_NO_ANSWER)
    if as_json:
        click.echo(json.dumps({
            "expr": schedule.expr,
            "tz": str(schedule.tz),
            "description": schedule.describe(),
            "after": start.isoformat(),
            "next": [x.isoformat() for x in times],
        }, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{schedule.expr}  ({schedule.tz})", caption=schedule.describe(),
                  title_justify="left", caption_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column(f"fire time ({schedule.tz})")
    table.add_column("day")
    table.add_column("UTC", style="dim")
    table.add_column("from start", justify="right")
    for i, x in enumerate(times, 1):
        table.add_row(str(i), x.isoformat(), x.strftime("%a"),
                      x.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                      _delta(x.astimezone(UTC) - start.astimezone(UTC)))  # elapsed, not wall
    _console().print(table)


def _delta(td: Any) -> str:
    secs = int(td.total_seconds())
    days, rem = divmod(secs, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, seconds = divmod(rem, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours else []
    parts += [f"{minutes}m"] if minutes else []
    parts += [f"{seconds}s"] if seconds or not parts else []
    return "+" + "".join(parts)


@main.command("explain", epilog=_CRON_EXIT_CODES)
@_EXPR
@_TZ
@_JSON
def explain_cmd(expr: tuple[str, ...], tz: str, as_json: bool) -> None:
    """Explain EXPR: its fields, the day-of-month/day-of-week rule and the DST rule.

    Example: cronfleet explain '30 2 * * *' --tz Europe/Paris
    """
    schedule = _parse(expr, tz)
    info = schedule.explain()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{info['description']}[/bold]")
    console.print(f"expression  {info['expr']}")
    if info.get("expanded"):
        console.print(f"expands to  {info['expanded']}")
    console.print(f"time zone   {info['tz']}")
    if info["kind"] == "interval":
        console.print(f"interval    every {info['period']} ({info['period_seconds']} s), "
                      "slots counted from 1970-01-01T00:00:00Z")
    else:
        table = Table(show_header=True, title_justify="left")
        table.add_column("field")
        table.add_column("text")
        table.add_column("matches")
        for f in info["fields"]:
            matches = _ranges(f["values"])
            if f.get("specials"):
                matches = ", ".join(filter(None, [matches, *f["specials"]]))
            table.add_row(f["name"], f["text"], matches or "-")
        console.print(table)
        rule = info["day_rule"]
        console.print(
            "day rule    "
            + ("AND: a day must match day-of-month and day-of-week (one starts with '*')"
               if rule == "and" else
               "OR: a day matching day-of-month or day-of-week fires (neither starts with '*')")
        )
    console.print(f"DST         {info['dst']}: {info['dst_rule']}")


def _ranges(values: list[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


# -- shared by the operator commands ---------------------------------------------------

_CONFIG = click.option(
    "-c", "--config", "config_path", metavar="FILE", default=None,
    help="The cronfleet.toml to use. Default: $CRONFLEET_CONFIG, else ./cronfleet.toml "
         "if it exists, else no file (entry-point plugins and the default store).",
)
_BY = click.option(
    "--by", metavar="NAME", default=None,
    help="Who is asking; recorded with the change. Default: user@host.",
)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _report_problems(problems: Sequence[Problem], what: str) -> None:
    for p in problems:
        click.echo(str(p), err=True)
        excerpt = p.excerpt()
        if excerpt:
            click.echo(excerpt, err=True)
    n = len(problems)
    click.echo(f"{n} error{'' if n == 1 else 's'} in {what}", err=True)


def _config_name(config_path: str | None) -> str:
    import os

    from cronfleet.config import CONFIG_ENV, DEFAULT_CONFIG

    return config_path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG


def _load(config_path: str | None, *, strict: bool) -> Loaded:
    """The declared jobs, or exit 1 with every problem. ``strict=False`` (operator
    commands): a plugin that fails to load is left out with a warning."""
    from cronfleet.config import ConfigError, load_config

    try:
        loaded = load_config(config_path).load(strict=strict)
    except ConfigError as exc:
        _report_problems(exc.problems, _config_name(config_path))
        sys.exit(EXIT_FAILED)
    if loaded.problems:
        click.echo(
            f"warning: {len(loaded.problems)} plugin problem(s); the jobs of the plugins that "
            "failed are left out (see 'cronfleet check'):", err=True,
        )
        for p in loaded.problems:
            click.echo(f"  {p}", err=True)
    return loaded


def _job(loaded: Loaded, job_id: str) -> Job:
    from cronfleet.plugins import names_near

    for job in loaded.jobs:
        if job.id == job_id:
            return job
    ids = loaded.job_ids()
    known = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
    _fail(
        f"no job {job_id!r} in {loaded.config.display}{names_near(job_id, ids)}; "
        f"jobs: {known or 'none'}",
        EXIT_BAD_INPUT,
    )


def _session(loaded: Loaded, fn: Callable[[Store], Coroutine[Any, Any, T]]) -> T:
    """Open the configured store, run ``fn(store)``, close it; exit 1 on a store error."""
    import asyncio

    from cronfleet.errors import StoreError
    from cronfleet.overview import opened
    from cronfleet.store import open_store

    store = open_store(loaded.config.store)

    async def go() -> T:
        async with opened(store):
            return await fn(store)

    try:
        return asyncio.run(go())
    except StoreError as exc:
        _fail(f"store {loaded.config.store}: {exc}", EXIT_FAILED)


def _control(fn: Callable[[], T], store: str) -> T:
    from cronfleet.errors import StoreError

    try:
        return fn()
    except StoreError as exc:
        _fail(f"store {store}: {exc}", EXIT_FAILED)


def _who() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(dt: datetime | None, tz: Any = None) -> str:
    if dt is None:
        return "-"
    return (dt.astimezone(tz) if tz is not None else dt).isoformat(sep=" ", timespec="seconds")


def _short(dt: datetime | None, now: datetime, tz: Any = None) -> str:
    """Compact time for tables: the time of day when it is today (in ``tz``, default UTC),
    with the date otherwise; always with its offset (Z for UTC)."""
    if dt is None:
        return "-"
    local = dt.astimezone(tz or UTC)
    offset = local.strftime("%z")
    zone = "Z" if offset == "+0000" else f"{offset[:3]}:{offset[3:]}"
    if local.date() == now.astimezone(local.tzinfo).date():
        return local.strftime("%H:%M:%S") + zone
    return local.strftime("%Y-%m-%d %H:%M:%S") + zone


def _span(seconds: float) -> str:
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _rel(dt: datetime | None, now: datetime) -> str:
    if dt is None:
        return ""
    delta = (dt - now).total_seconds()
    return f"in {_span(delta)}" if delta >= 0 else f"{_span(delta)} ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.3f}s" if seconds < 10 else _span(seconds)


_STATUS_STYLE = {
    "succeeded": "green", "failed": "bold red", "timed_out": "red", "skipped": "yellow",
    "interrupted": "magenta", "running": "cyan", "pending": "blue",
}


def _status(run: RunRecord | None) -> Any:
    from rich.text import Text

    if run is None:
        return Text("never run", style="dim")
    text = Text(run.status.value, style=_STATUS_STYLE.get(run.status.value, ""))
    if run.reason:
        text.append(f" ({run.reason})", style="dim")
    return text


def _override_text(view: JobView, now: datetime) -> str:
    s = view.state
    if view.override_active(now) and s is not None:
        if s.enabled_override:
            out = f"forced on by {s.override_by or '?'}"
        else:
            out = f"paused by {s.override_by or '?'}"
            if s.override_until is not None:
                out += f" until {_short(s.override_until, now, view.job.schedule.tz)}"
        if s.override_note:
            out += f": {s.override_note}"
        return out
    if not view.job.enabled:
        return "disabled (declared)"
    return "-"


def _t(value: str) -> Any:
    """Plain text for a rich cell: ids and notes are never read as markup."""
    from rich.text import Text

    return Text(value)


# -- run ------------------------------------------------------------------------------

_ROLES = {
    "all": "timers on, REST API on",
    "worker": "timers on, no REST API",
    "api": "no timers: this process fires nothing (manual triggers run here); REST API on",
}


@main.command("run", epilog=_EXIT_CODES)
@_CONFIG
@click.option(
    "--role", type=click.Choice(["all", "worker", "api"]), default=None,
    help="all: timers and the REST API; worker: timers only; api: the REST API, no timers. "
         "Default: all, or api when CRONFLEET_SCHEDULER=0.",
)
@click.option("--host", default=None, help="API address (default: [api] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="API port (default: [api] port, 8080; 0 picks a free one).")
@click.option("--no-api", is_flag=True, help="Do not serve the REST API (role all or api).")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
    show_default=True, help="Log verbosity (logs go to stderr).",
)
def run_cmd(config_path: str | None, role: str | None, host: str | None, port: int | None,
            no_api: bool, log_level: str) -> None:
    """Run the declared jobs (and those created over the API) until SIGINT or SIGTERM,
    then stop gracefully.

    Everything is validated first (the config, every plugin, every schedule); any problem
    stops the start with exit code 1 -- nothing fires. Start the same command on several
    hosts against one store: each slot runs once across all of them.
    """
    import asyncio
    import logging

    from cronfleet.api.app import ApiSettings
    from cronfleet.api.serve import serve
    from cronfleet.config import SCHEDULER_ENV, ConfigError, timers_from_env
    from cronfleet.errors import CronfleetError

    try:
        from_env = timers_from_env()
    except ConfigError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    role_origin = "--role"
    if role is None:
        role = "api" if from_env is False else "all"
        role_origin = f"{SCHEDULER_ENV}=0" if from_env is False else "default"
    loaded = _load(config_path, strict=True)
    config = loaded.config
    api_on = role in ("all", "api") and config.api_enabled and not no_api
    if role == "api" and not api_on:
        loaded.cleanup()
        _fail("--role api serves only the REST API, which is off here "
              "(--no-api or [api] enabled = false)", EXIT_BAD_INPUT)
    if not loaded.jobs and not api_on and not _has_stored_jobs(config.store):
        loaded.cleanup()
        _fail(
            f"nothing to run: {config.display} declares no [[tasks]], no plugin declares a "
            "schedule, no job was created over the API, and the API is off (pass --config "
            "FILE or set CRONFLEET_CONFIG)",
            EXIT_FAILED,
        )
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )
    log = logging.getLogger("cronfleet.cli")
    log.info("config %s; store %s (from %s)", config.display, config.store, config.store_origin)
    for p in loaded.plugins:
        log.info(
            "%s %r (%s, priority %d): %d job(s)%s",
            "provider" if p.provider else "plugin", p.name, p.origin, p.priority, len(p.jobs),
            (": " + ", ".join(p.jobs[:8]) + (", ..." if len(p.jobs) > 8 else ""))
            if p.jobs else "",
        )
    for warning in loaded.warnings:
        log.warning("%s", warning)
    if not loaded.jobs:
        log.info("no declared jobs: running the jobs created over the API")
    if from_env is False and role != "api":
        log.warning("--role %s overrides %s=0: timers are on", role, SCHEDULER_ENV)
    log.info("role %s (%s): %s", role, role_origin,
             _ROLES[role] if api_on or role == "worker" else "timers on, REST API off")
    _check_vault(loaded)
    code = EXIT_OK
    try:
        scheduler = loaded.scheduler(timers=role != "api")
        settings = ApiSettings(metrics=config.api_metrics,  # type: ignore[arg-type]
                               ready_max_overdue=config.api_ready_max_overdue)
        asyncio.run(serve(scheduler, api=api_on, host=host or config.api_host,
                          port=config.api_port if port is None else port, settings=settings,
                          http_runtime=config.http_runtime()))
    except CronfleetError as exc:
        log.error("cronfleet cannot run: %s", exc)
        code = EXIT_FAILED
    finally:
        loaded.cleanup()
    sys.exit(code)


def _has_stored_jobs(url: str) -> bool:
    """Whether the store holds jobs created over the API (False when it cannot tell)."""
    import asyncio

    from cronfleet.errors import CronfleetError
    from cronfleet.store.api import ApiStore
    from cronfleet.store.url import parse_store_url

    try:
        if parse_store_url(url).no_file_yet:
            return False
    except CronfleetError:
        return False

    async def go() -> bool:
        store = ApiStore(url)
        try:
            return bool(await store.job_defs())
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except (CronfleetError, OSError):
        return False


# -- check ----------------------------------------------------------------------------


@main.command("check", epilog=_EXIT_CODES)
@click.argument("file", required=False, metavar="[FILE]")
@_CONFIG
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--no-history", is_flag=True,
              help="Do not read the store (skips the runs-longer-than-their-period check).")
@_JSON
def check_cmd(file: str | None, config_path: str | None, strict: bool, no_history: bool,
              as_json: bool) -> None:
    """Validate the configuration and every plugin; show each job's next 3 fire times.

    Exit 1 on any error (with --strict, on any warning too). Also warns when a job's
    recent runs last longer than its period (read from the store).
    """
    from cronfleet.config import ConfigError, load_config
    from cronfleet.overview import next_fires, period_of

    path = file or config_path
    problems: list[Problem] = []
    loaded = None
    try:
        loaded = load_config(path).load(strict=False)
        problems = loaded.problems
    except ConfigError as exc:
        problems = exc.problems
    warnings: list[str] = list(loaded.warnings) if loaded else []
    notes: list[str] = []
    now = _now()
    rows: list[dict[str, Any]] = []
    if loaded is not None:
        with loaded:
            for job in loaded.jobs:
                period = period_of(job, now)
                if job.jitter and period and job.jitter >= period:
                    warnings.append(
                        f"job {job.id!r}: jitter {job.jitter:g}s is not shorter than its "
                        f"period {period:g}s, so a run can start after the next slot is due"
                    )
                rows.append({
                    "id": job.id,
                    "source": job.source,
                    "schedule": job.schedule.expr,
                    "timezone": str(job.schedule.tz),
                    "description": job.description,
                    "when": job.schedule.describe(),
                    "enabled": job.enabled,
                    "next": [t.isoformat() for t in next_fires(job, now, 3)],
                })
            if not no_history and loaded.jobs:
                history_warnings, note = _overruns(loaded, now)
                warnings += history_warnings
                if note:
                    notes.append(note)
    name = loaded.config.display if loaded else _config_name(path)
    failed = bool(problems) or (strict and bool(warnings))
    if as_json:
        _echo_json({
            "config": name,
            "valid": not problems,
            "store": loaded.config.store if loaded else None,
            "provider": loaded.config.provider if loaded else None,
            "plugins": [
                {"name": p.name, "origin": p.origin, "priority": p.priority,
                 "provider": p.provider, "jobs": p.jobs}
                for p in (loaded.plugins if loaded else [])
            ],
            "errors": [p.to_dict() for p in problems],
            "warnings": warnings,
            "notes": notes,
            "jobs": rows,
        })
        sys.exit(EXIT_FAILED if failed else EXIT_OK)
    console = _console()
    if loaded is not None and rows:
        from rich.table import Table

        table = Table(title=f"{name}: {len(rows)} job(s), store {loaded.config.store}",
                      title_justify="left", show_lines=True)
        table.add_column("job", overflow="fold")
        table.add_column("schedule", overflow="fold")
        table.add_column("description", overflow="fold")
        table.add_column("next 3 fire times", overflow="fold", min_width=25)
        for row in rows:
            desc = row["when"] + (f"\n{row['description']}" if row["description"] else "")
            if not row["enabled"]:
                desc += "\n(declared enabled = false)"
            table.add_row(_t(row["id"]), _t(f"{row['schedule']}\n{row['timezone']}"),
                          _t(desc), _t("\n".join(_iso(datetime.fromisoformat(t))
                                                  for t in row["next"]) or "never"))
        console.print(table)
    for note in notes:
        console.print(_t(f"note: {note}"), style="dim")
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if problems:
        _report_problems(problems, name)
    elif failed:
        click.echo(f"{len(warnings)} warning(s) in {name} (--strict)", err=True)
    else:
        console.print(_t(f"OK: {name} is valid ({len(rows)} job(s))"), style="green")
    sys.exit(EXIT_FAILED if failed else EXIT_OK)


def _overruns(loaded: Loaded, now: datetime) -> tuple[list[str], str | None]:
    """Warnings for jobs whose recent runs outlast their period; a note when the history
    could not be read (never an error: check must work before the first run)."""
    import asyncio

    from cronfleet.overview import RECENT_RUNS, opened, overrun_warning
    from cronfleet.store import open_store
    from cronfleet.store.url import parse_store_url

    url = loaded.config.store
    if parse_store_url(url).no_file_yet:
        return [], "no run history yet (the store file does not exist), so the " \
                   "runs-longer-than-their-period check was skipped"
    store = open_store(url)

    async def read() -> list[str]:
        out = []
        async with opened(store):
            for job in loaded.jobs:
                runs = await store.list_runs(job.id, limit=RECENT_RUNS)
                warning = overrun_warning(job, runs, now)
                if warning:
                    out.append(warning)
        return out

    async def bounded() -> list[str]:
        return await asyncio.wait_for(read(), 15)

    try:
        return asyncio.run(bounded()), None
    except Exception as exc:
        return [], f"could not read the run history from {url} ({exc}); skipped the " \
                   "runs-longer-than-their-period check"


# -- jobs, history, show-run ------------------------------------------------------------


@main.command("jobs", epilog=_EXIT_CODES)
@_CONFIG
@_JSON
def jobs_cmd(config_path: str | None, as_json: bool) -> None:
    """List the jobs: schedule, next run, last outcome, override and lease holder."""
    from cronfleet.overview import job_views

    loaded = _load(config_path, strict=False)
    now = _now()
    with loaded:
        views = _session(loaded, lambda store: job_views(store, loaded.jobs, now))
    if as_json:
        _echo_json([v.to_dict(now) for v in views])
        return
    if not views:
        click.echo(f"no jobs declared in {loaded.config.display}")
        return
    _console().print(_jobs_table(views, now))


def _jobs_table(views: Sequence[JobView], now: datetime, title: str | None = None) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("job", "schedule", "description", "next run", "last run", "override",
                "lease holder"):
        table.add_column(col, overflow="fold")
    for v in views:
        job = v.job
        nxt = "never" if v.next_fire is None else \
            f"{_short(v.next_fire, now, job.schedule.tz)} ({_rel(v.next_fire, now)})"
        last = _status(v.last)
        if v.last is not None:
            when = v.last.finished_at or v.last.started_at or v.last.slot
            last.append(f"\n{_rel(when, now)}", style="dim")
        table.add_row(
            _t(job.id), _t(f"{job.schedule.expr}\n{job.schedule.tz}"),
            _t(job.description or job.schedule.describe()), _t(nxt), last,
            _t(_override_text(v, now)), _t(v.lease_holder(now) or "-"),
        )
    return table


@main.command("history", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="How many runs, newest first.")
@click.option("--status", type=click.Choice(
    ["pending", "running", "succeeded", "failed", "timed_out", "skipped", "interrupted"]),
    default=None, help="Only runs with this status.")
@_CONFIG
@_JSON
def history_cmd(job_id: str, limit: int, status: str | None, config_path: str | None,
                as_json: bool) -> None:
    """The runs of JOB, newest first (also for a job no longer declared)."""
    from cronfleet.model import RunStatus

    loaded = _load(config_path, strict=False)
    with loaded:
        declared = {j.id: j for j in loaded.jobs}
        st = None if status is None else RunStatus(status)
        runs = _session(loaded, lambda store: store.list_runs(job_id, limit=limit, status=st))
    if job_id not in declared and not runs:
        _job(loaded, job_id)  # exits 2 with a did-you-mean
    if as_json:
        _echo_json([r.to_dict() for r in runs])
        return
    console = _console()
    if job_id not in declared:
        console.print(_t(f"note: {job_id!r} is not declared in {loaded.config.display}; "
                         "showing its recorded history"), style="yellow")
    if not runs:
        click.echo(f"no runs of {job_id!r}" + (f" with status {status}" if status else ""))
        return
    from rich.table import Table

    tz = declared[job_id].schedule.tz if job_id in declared else None
    table = Table(title=f"{job_id}: last {len(runs)} run(s)", title_justify="left")
    now = _now()
    for col in ("run", "slot", "trigger", "status", "duration", "instance", "error"):
        table.add_column(col, justify="right" if col == "run" else "left", overflow="fold")
    for r in runs:
        table.add_row(
            str(r.id), _t(_short(r.slot, now, tz)), _t(r.triggered_by.value), _status(r),
            _t(_duration(r.duration)), _t(r.instance_id or "-"),
            _t((r.error or "").splitlines()[0][:80] if r.error else ""),
        )
    console.print(table)


@main.command("show-run", epilog=_EXIT_CODES)
@click.argument("run_id", type=int)
@_CONFIG
@_JSON
def show_run_cmd(run_id: int, config_path: str | None, as_json: bool) -> None:
    """One run in full: times, outcome, result, error and logs."""
    loaded = _load(config_path, strict=False)
    with loaded:
        run = _session(loaded, lambda store: store.get_run(run_id))
    if run is None:
        _fail(f"no run with id {run_id} in {loaded.config.store}", EXIT_BAD_INPUT)
    if as_json:
        _echo_json(run.to_dict())
        return
    _print_run(run)


def _print_run(run: RunRecord) -> None:
    from rich.text import Text

    console = _console()
    title = Text(f"run {run.id} · job {run.job_id} · ", style="bold")
    title.append_text(_status(run))
    console.print(title)
    flags = [name for name, on in (
        ("manual", run.manual and run.triggered_by.value != "manual"),
        ("catch-up", run.is_catchup and run.triggered_by.value != "catchup"),
        ("recovery", run.is_recovery and run.triggered_by.value != "recovery"),
    ) if on]
    late = "" if run.lateness is None else f" (late {run.lateness:.3f}s)"
    rows = [
        ("slot", _iso(run.slot)),
        ("triggered by", run.triggered_by.value + (f" ({', '.join(flags)})" if flags else "")),
        ("instance", run.instance_id or "-"),
        ("fencing token", "-" if run.fencing_token is None else str(run.fencing_token)),
        ("attempt", str(run.attempt)),
        ("claimed", _iso(run.claimed_at)),
        ("started", _iso(run.started_at) + late),
        ("finished", _iso(run.finished_at)),
        ("duration", _duration(run.duration)),
        ("reason", run.reason or "-"),
        ("result", "-" if run.result is None else json.dumps(run.result, default=str)),
        ("error", run.error or "-"),
    ]
    for key, value in rows:
        console.print(Text(f"{key:<14}", style="dim") + Text(value))
    console.print(Text(f"logs ({len(run.logs)} line(s))", style="bold"))
    for line in run.logs:
        console.print(Text("  " + line.replace("\n", "\n  ")))


# -- trigger, pause, resume, clear-override ---------------------------------------------


@main.command("trigger", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@_BY
@_CONFIG
@_JSON
def trigger_cmd(job_id: str, by: str | None, config_path: str | None, as_json: bool) -> None:
    """Run JOB now, in this process, and wait for it to end.

    The run takes the job's lease like any run, so it never overlaps a run elsewhere in
    the fleet: when one holds the lease the skip is recorded and the command exits 3,
    naming the holder. Exits 1 when the run does not succeed.
    """
    from cronfleet.errors import AlreadyExecuting

    loaded = _load(config_path, strict=False)
    with loaded:
        _job(loaded, job_id)
        scheduler = loaded.scheduler(timers=False)
        try:
            run = _control(lambda: scheduler.trigger(job_id, by=by or _who()),
                           loaded.config.store)
        except AlreadyExecuting as exc:
            if as_json:
                _echo_json(exc.to_dict())
            _fail(
                f"job {job_id!r} is already executing: the lease is held by "
                f"{exc.holder or 'another run'} (skip recorded as run {exc.record.id})",
                EXIT_BUSY,
            )
    if as_json:
        _echo_json(run.to_dict())
    else:
        _print_run(run)
    if run.status.value != "succeeded":
        sys.exit(EXIT_FAILED)


def _until(value: str, job: Job, now: datetime) -> datetime:
    from datetime import timedelta

    from cronfleet.cron.duration import DurationError, parse_duration

    try:
        td: timedelta | None = parse_duration(value)
    except DurationError:
        td = None
    if td is not None:
        if td.total_seconds() <= 0:
            _fail(f"--until: {value!r} must be a positive duration", EXIT_BAD_INPUT)
        return now + td
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        _fail(
            f"--until: {value!r} is neither an ISO 8601 time (e.g. 2026-03-02T18:00:00+01:00) "
            "nor a duration (e.g. 2h, 1h30m)",
            EXIT_BAD_INPUT,
        )
    if t.tzinfo is None:
        t = t.replace(tzinfo=job.schedule.tz)
    if t <= now:
        _fail(f"--until: {t.isoformat()} is in the past", EXIT_BAD_INPUT)
    return t


def _print_state(job: Job, state: JobState, message: str, as_json: bool) -> None:
    from cronfleet.overview import state_dict

    now = _now()
    if as_json:
        _echo_json({"job_id": job.id, "declared_enabled": job.enabled,
                    "enabled": state.effective_enabled(job.enabled, now),
                    **state_dict(state, now)})
        return
    click.echo(message)
    if state.lease_live(now):
        click.echo(f"note: a run is in progress (lease held by {state.lease_holder}); "
                   "this does not stop it")


@main.command("pause", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@click.option("--until", "until", metavar="TIME", default=None,
              help="End of the pause: an ISO time (without an offset, read in the job's time "
                   "zone) or a duration from now (2h, 1h30m). Default: until resumed.")
@click.option("--note", metavar="TEXT", default=None, help="Why (shown by 'cronfleet jobs').")
@_BY
@_CONFIG
@_JSON
def pause_cmd(job_id: str, until: str | None, note: str | None, by: str | None,
              config_path: str | None, as_json: bool) -> None:
    """Pause JOB for every process sharing the store, until resumed or until TIME.

    Paused slots are recorded as skipped (reason paused); a run in progress is not stopped.
    """
    loaded = _load(config_path, strict=False)
    with loaded:
        job = _job(loaded, job_id)
        until_dt = None if until is None else _until(until, job, _now())
        scheduler = loaded.scheduler(timers=False)
        who = by or _who()
        state = _control(lambda: scheduler.pause(job_id, by=who, note=note, until=until_dt),
                         loaded.config.store)
    msg = f"paused {job_id!r} by {who}"
    if until_dt is not None:
        msg += f" until {_iso(until_dt, job.schedule.tz)} ({_rel(until_dt, _now())})"
    if note:
        msg += f": {note}"
    _print_state(job, state, msg, as_json)


@main.command("resume", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@click.option("--note", metavar="TEXT", default=None, help="Why.")
@_BY
@_CONFIG
@_JSON
def resume_cmd(job_id: str, note: str | None, by: str | None, config_path: str | None,
               as_json: bool) -> None:
    """Force JOB on for every process (even if declared enabled = false).

    'cronfleet clear-override JOB' returns it to its declared setting instead.
    """
    loaded = _load(config_path, strict=False)
    with loaded:
        job = _job(loaded, job_id)
        scheduler = loaded.scheduler(timers=False)
        who = by or _who()
        state = _control(lambda: scheduler.resume(job_id, by=who, note=note),
                         loaded.config.store)
    extra = "" if job.enabled else " although it is declared enabled = false"
    _print_state(job, state, f"resumed {job_id!r} by {who}: forced on{extra}", as_json)


@main.command("clear-override", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@_BY
@_CONFIG
@_JSON
def clear_override_cmd(job_id: str, by: str | None, config_path: str | None,
                       as_json: bool) -> None:
    """Remove JOB's pause or force-on: back to its declared enabled setting."""
    loaded = _load(config_path, strict=False)
    with loaded:
        job = _job(loaded, job_id)
        scheduler = loaded.scheduler(timers=False)
        who = by or _who()
        state = _control(lambda: scheduler.clear_override(job_id, by=who),
                         loaded.config.store)
    declared = "enabled" if job.enabled else "disabled (enabled = false)"
    _print_state(job, state, f"cleared the override of {job_id!r}: back to its declared "
                             f"setting, {declared}", as_json)


# -- status -------------------------------------------------------------------------------


@main.command("status", epilog=_EXIT_CODES)
@_CONFIG
@click.option("--once", is_flag=True, help="Print one frame and exit (no live view).")
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--runs", "n_runs", type=click.IntRange(1, 500), default=10, show_default=True,
              help="How many recent runs to show.")
@click.option("--frames", type=click.IntRange(1), default=None, hidden=True)
@_JSON
def status_cmd(config_path: str | None, once: bool, interval: float, n_runs: int,
               frames: int | None, as_json: bool) -> None:
    """A live view: jobs with their next fire counting down, running leases, recent runs.

    Ctrl-C leaves. --once (or --json) prints a single frame.
    """
    loaded = _load(config_path, strict=False)
    with loaded:
        if as_json:
            snap = _session(loaded, lambda store: _snapshot(store, loaded, n_runs))
            _echo_json(_snapshot_dict(snap))
            return
        if once:
            snap = _session(loaded, lambda store: _snapshot(store, loaded, n_runs))
            _console().print(_render(snap, _now()))
            return
        with contextlib.suppress(KeyboardInterrupt):
            _session(loaded, lambda store: _live(store, loaded, n_runs, interval, frames))


async def _snapshot(store: Store, loaded: Loaded, n_runs: int) -> dict[str, Any]:
    from cronfleet.model import RunStatus
    from cronfleet.overview import job_views

    now = _now()
    return {
        "now": now,
        "loaded": loaded,
        "views": await job_views(store, loaded.jobs, now),
        "running": await store.list_runs(None, limit=100, status=RunStatus.RUNNING),
        "recent": await store.list_runs(None, limit=n_runs),
    }


def _snapshot_dict(snap: dict[str, Any]) -> dict[str, Any]:
    now = snap["now"]
    return {
        "now": now.isoformat(),
        "store": snap["loaded"].config.store,
        "jobs": [v.to_dict(now) for v in snap["views"]],
        "running": [r.to_dict() for r in snap["running"]],
        "recent": [r.to_dict() for r in snap["recent"]],
    }


def _render(snap: dict[str, Any], now: datetime) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    views: list[JobView] = sorted(
        snap["views"], key=lambda v: (v.next_fire is None, v.next_fire or now)
    )
    header = Text(f"cronfleet status · {_iso(now)} · store {snap['loaded'].config.store}",
                  style="bold")
    jobs = Table(title="jobs (next fire first)", title_justify="left", expand=False)
    for col in ("job", "next fire", "in", "last run", "override", "lease holder"):
        jobs.add_column(col, no_wrap=col == "in", overflow="fold")
    for v in views:
        paused = not v.enabled(now)
        countdown = Text(_rel(v.next_fire, now) if v.next_fire else "never",
                         style="dim" if paused else "bold")
        jobs.add_row(_t(v.job.id), _t(_short(v.next_fire, now, v.job.schedule.tz)), countdown,
                     _status(v.last), _t(_override_text(v, now)),
                     _t(v.lease_holder(now) or "-"))
    running = Table(title="running now", title_justify="left")
    for col in ("run", "job", "slot", "for", "instance"):
        running.add_column(col, overflow="fold")
    for r in snap["running"]:
        running.add_row(str(r.id), _t(r.job_id), _t(_short(r.slot, now)),
                        _t(_span((now - r.started_at).total_seconds()) if r.started_at else "-"),
                        _t(r.instance_id or "-"))
    if not snap["running"]:
        running.add_row("-", Text("nothing running", style="dim"), "", "", "")
    recent = Table(title="recent runs", title_justify="left")
    for col in ("run", "job", "slot", "status", "duration", "instance"):
        recent.add_column(col, overflow="fold")
    for r in snap["recent"]:
        recent.add_row(str(r.id), _t(r.job_id), _t(_short(r.slot, now)), _status(r),
                       _t(_duration(r.duration)), _t(r.instance_id or "-"))
    return Group(header, jobs, running, recent)


async def _live(store: Store, loaded: Loaded, n_runs: int, interval: float,
                frames: int | None) -> None:
    import asyncio

    from rich.live import Live

    snap = await _snapshot(store, loaded, n_runs)
    shown = 1
    with Live(_render(snap, _now()), console=_console(), refresh_per_second=4,
              transient=False) as live:
        next_read = asyncio.get_running_loop().time() + interval
        while frames is None or shown < frames:
            await asyncio.sleep(min(1.0, interval))
            if asyncio.get_running_loop().time() >= next_read:
                snap = await _snapshot(store, loaded, n_runs)
                next_read += interval
            live.update(_render(snap, _now()))  # countdowns move every second
            shown += 1


# -- secrets ---------------------------------------------------------------------------


def _check_vault(loaded: Loaded) -> None:
    """With HTTP jobs declared, refuse to start (exit 1, a clear message) when encrypted
    secrets exist that the configured key cannot decrypt."""
    import asyncio

    from cronfleet.errors import CronfleetError
    from cronfleet.jobs.http import HttpJob

    if not any(isinstance(j.handler, HttpJob) for j in loaded.jobs):
        return
    from cronfleet.secrets import Keyring, Vault
    from cronfleet.store.secrets import open_secret_store

    async def go() -> None:
        store = open_secret_store(loaded.config.store)
        try:
            await Vault(store, Keyring.from_env()).check()
        finally:
            await store.close()

    try:
        asyncio.run(go())
    except CronfleetError as exc:
        loaded.cleanup()
        _fail(f"cronfleet cannot run: secrets: {exc}", EXIT_FAILED)


_SECRETS_EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure: invalid configuration, store error, no or wrong secret key
  2  bad input: invalid name, empty value, unknown secret"""

_NAMESPACE = click.option(
    "--namespace", metavar="NAME", default="default", show_default=True,
    help="The namespace the secret belongs to.",
)


@main.group("secrets", epilog=_SECRETS_EXIT_CODES)
def secrets_group() -> None:
    """Encrypted secrets, referenced as ${secrets.NAME} by HTTP tasks.

    Values are encrypted with AES-256-GCM under the key in CRONFLEET_SECRET_KEY (base64 of
    32 bytes) or the file named by CRONFLEET_SECRET_KEY_FILE, and stored next to the runs
    in the configured store. No command ever prints a value. See docs/secrets.md.
    """


def _vault(config_path: str | None, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """Run ``fn(vault)`` on the configured store; exit 1 on a config, key or store error."""
    import asyncio

    from cronfleet.config import ConfigError, load_config
    from cronfleet.errors import CronfleetError
    from cronfleet.secrets import Keyring, UnknownSecret, Vault
    from cronfleet.store.secrets import open_secret_store

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report_problems(exc.problems, _config_name(config_path))
        sys.exit(EXIT_FAILED)
    try:
        keyring = Keyring.from_env()
        store = open_secret_store(config.store)
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)

    async def go() -> T:
        try:
            return await fn(Vault(store, keyring))
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except UnknownSecret as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)


def _read_value(name: str) -> str:
    """The value from stdin when it is not a terminal (one trailing newline dropped), else
    from a hidden, confirmed prompt. Never from argv."""
    if sys.stdin is not None and not sys.stdin.isatty():
        value = sys.stdin.read()
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    else:
        value = click.prompt(f"Value of {name}", hide_input=True, confirmation_prompt=True,
                             default="", show_default=False)
    if not value:
        _fail(f"secret {name!r}: the value is empty (pipe it on stdin or type it at the "
              "prompt)", EXIT_BAD_INPUT)
    return value


@secrets_group.command("set", epilog=_SECRETS_EXIT_CODES)
@click.argument("name")
@_NAMESPACE
@_CONFIG
@_JSON
def secrets_set_cmd(name: str, namespace: str, config_path: str | None, as_json: bool) -> None:
    """Create or replace secret NAME. The value is read from stdin (e.g. 'printf %s "$TOKEN"
    | cronfleet secrets set TOKEN') or from a hidden prompt -- never from the command line.
    """
    from cronfleet.secrets import check_secret_name

    problem = check_secret_name(name)
    if problem:
        _fail(problem, EXIT_BAD_INPUT)
    value = _read_value(name)
    created = _vault(config_path, lambda v: v.set(name, value, namespace))
    if as_json:
        _echo_json({"name": name, "namespace": namespace, "created": created})
    else:
        click.echo(f"{'created' if created else 'updated'} secret {name!r} in namespace "
                   f"{namespace!r}")


@secrets_group.command("list", epilog=_SECRETS_EXIT_CODES)
@_NAMESPACE
@click.option("--all", "all_namespaces", is_flag=True, help="Every namespace.")
@_CONFIG
@_JSON
def secrets_list_cmd(namespace: str, all_namespaces: bool, config_path: str | None,
                     as_json: bool) -> None:
    """Names, key ids and dates of the secrets -- never their values."""
    infos = _vault(config_path, lambda v: v.entries(None if all_namespaces else namespace))
    if as_json:
        _echo_json([i.to_dict() for i in infos])
        return
    if not infos:
        where = "any namespace" if all_namespaces else f"namespace {namespace!r}"
        click.echo(f"no secrets in {where}")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("namespace", "name", "created", "updated", "key id"):
        table.add_column(col)
    for i in infos:
        table.add_row(_t(i.namespace), _t(i.name), _iso(i.created_at), _iso(i.updated_at),
                      i.key_id)
    _console().print(table)


@secrets_group.command("delete", epilog=_SECRETS_EXIT_CODES)
@click.argument("name")
@_NAMESPACE
@_CONFIG
@_JSON
def secrets_delete_cmd(name: str, namespace: str, config_path: str | None,
                       as_json: bool) -> None:
    """Delete secret NAME (exit 2 if there is none)."""
    deleted = _vault(config_path, lambda v: v.delete(name, namespace))
    if as_json:
        _echo_json({"name": name, "namespace": namespace, "deleted": deleted})
    if not deleted:
        _fail(f"no secret {name!r} in namespace {namespace!r}", EXIT_BAD_INPUT)
    if not as_json:
        click.echo(f"deleted secret {name!r} from namespace {namespace!r}")


@secrets_group.command("rotate-key", epilog=_SECRETS_EXIT_CODES)
@_CONFIG
@_JSON
def secrets_rotate_cmd(config_path: str | None, as_json: bool) -> None:
    """Re-encrypt every secret under the current key.

    Set CRONFLEET_SECRET_KEY (or _FILE) to the new key and CRONFLEET_SECRET_KEY_PREVIOUS to
    the old one(s), comma separated; afterwards the old keys are no longer needed.
    """

    async def rotate(vault: Any) -> tuple[int, str]:
        count = await vault.rotate()
        return count, vault.keyring.current.id

    count, key_id = _vault(config_path, rotate)
    if as_json:
        _echo_json({"reencrypted": count, "key_id": key_id})
    else:
        click.echo(f"re-encrypted {count} secret{'' if count == 1 else 's'} under key {key_id}")


@secrets_group.command("generate-key")
def secrets_generate_key_cmd() -> None:
    """Print a new random key (base64 of 32 bytes) for CRONFLEET_SECRET_KEY."""
    from cronfleet.secrets import generate_key

    click.echo(generate_key())


if __name__ == "__main__":  # python -m cronfleet.cli
    main()


# -- tokens ---------------------------------------------------------------------------

_TOKENS_EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure: invalid configuration, store error
  2  bad input: invalid team or name, no such token"""


@main.group("tokens", epilog=_TOKENS_EXIT_CODES)
def tokens_group() -> None:
    """Bearer tokens for the REST API.

    A token belongs to one team and has one role: viewer (read), editor (also change jobs,
    pause, trigger) or admin (also secrets and the audit log). Only a SHA-256 digest is
    stored: the token is printed once, at creation. See docs/api.md.
    """


def _api_store(config_path: str | None, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """Run ``fn(api_store)`` on the configured store; exit 1 on a config or store error."""
    import asyncio

    from cronfleet.config import ConfigError, load_config
    from cronfleet.errors import CronfleetError
    from cronfleet.store.api import ApiStore

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report_problems(exc.problems, _config_name(config_path))
        sys.exit(EXIT_FAILED)

    async def go() -> T:
        store = ApiStore(config.store)
        try:
            return await fn(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)


@tokens_group.command("create", epilog=_TOKENS_EXIT_CODES)
@click.option("--team", required=True, help="The team whose jobs, runs and secrets it sees.")
@click.option("--role", type=click.Choice(["viewer", "editor", "admin"]), required=True,
              help="viewer: read; editor: also change; admin: also secrets and audit.")
@click.option("--name", default=None, help="A label (default: <team>-<role>); shown in the "
                                           "audit log.")
@_CONFIG
@_JSON
def tokens_create(team: str, role: str, name: str | None, config_path: str | None,
                  as_json: bool) -> None:
    """Create a token and print it once."""
    from cronfleet.model import check_team

    problem = check_team(team)
    if problem:
        _fail(problem, EXIT_BAD_INPUT)
    name = name or f"{team}-{role}"
    if not name.strip() or len(name) > 100:
        _fail(f"--name {name!r}: expected 1-100 characters", EXIT_BAD_INPUT)
    plaintext, info = _api_store(
        config_path, lambda s: s.create_token(name=name, team=team, role=role,
                                              created_by=_who()))
    if as_json:
        _echo_json({"token": plaintext, **info.to_dict()})
        return
    click.echo(plaintext)
    click.echo(f"token {info.id} ({info.name}): team {info.team}, role {info.role}. It is "
               "shown only now: store it in your secret manager.", err=True)


@tokens_group.command("list", epilog=_TOKENS_EXIT_CODES)
@click.option("--team", default=None, help="Only this team's tokens.")
@click.option("--all", "show_all", is_flag=True, help="Include revoked tokens.")
@_CONFIG
@_JSON
def tokens_list(team: str | None, show_all: bool, config_path: str | None,
                as_json: bool) -> None:
    """List tokens (never their values)."""
    tokens = _api_store(config_path, lambda s: s.list_tokens(team))
    if not show_all:
        tokens = [t for t in tokens if t.revoked_at is None]
    if as_json:
        _echo_json([t.to_dict() for t in tokens])
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("ID", "NAME", "TEAM", "ROLE", "CREATED", "LAST USED", "REVOKED"):
        table.add_column(col)
    for t in tokens:
        table.add_row(t.id, t.name, t.team, t.role, _iso(t.created_at), _iso(t.last_used_at),
                      _iso(t.revoked_at))
    if not tokens:
        click.echo("no tokens" + (f" for team {team}" if team else ""), err=True)
        return
    _console().print(table)


@tokens_group.command("revoke", epilog=_TOKENS_EXIT_CODES)
@click.argument("token", metavar="ID_OR_NAME")
@_CONFIG
@_JSON
def tokens_revoke(token: str, config_path: str | None, as_json: bool) -> None:
    """Revoke a token by id, or every live token with this name. Takes effect on the next
    request."""
    revoked = _api_store(config_path, lambda s: s.revoke_token(token))
    if not revoked:
        _fail(f"no live token with id or name {token!r} (see 'cronfleet tokens list')",
              EXIT_BAD_INPUT)
    if as_json:
        _echo_json([t.to_dict() for t in revoked])
        return
    for t in revoked:
        click.echo(f"revoked token {t.id} ({t.name}, team {t.team})")
