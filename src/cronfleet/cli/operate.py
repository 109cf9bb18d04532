"""Operating the jobs through the store shared with the running processes: ``jobs``,
``history``, ``runs``, ``show-run``, ``trigger``, ``pause``, ``resume``, ``clear-override``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from cronfleet.cli.common import (
    _BY,
    _CONFIG,
    _EXIT_CODES,
    _JSON,
    EXIT_BAD_INPUT,
    EXIT_BUSY,
    EXIT_FAILED,
    _console,
    _control,
    _echo_json,
    _fail,
    _job,
    _load,
    _now,
    _session,
    _who,
)
from cronfleet.cli.render import (
    _duration,
    _iso,
    _jobs_table,
    _narrow,
    _narrow_table,
    _one_line,
    _print_run,
    _rel,
    _running_table,
    _short,
    _status,
    _t,
)
from cronfleet.errors import AlreadyExecuting, JobPaused
from cronfleet.model import RunStatus
from cronfleet.spec import ID_CHARS
from cronfleet.views import JobView, lease_holders, running_now, state_view

if TYPE_CHECKING:
    from cronfleet.catalog import Catalog
    from cronfleet.model import Job, JobState
    from cronfleet.runtime.scheduler import Scheduler


# -- jobs, history, show-run ------------------------------------------------------------


@asynccontextmanager
async def _catalog(loaded: Any, scheduler: Scheduler, *,
                   allow_commands: bool = False) -> AsyncIterator[Catalog]:
    """A :class:`~cronfleet.catalog.Catalog` of ``scheduler`` over the side tables of the
    configured store (``catalog.api_store``), closed after the block."""
    from cronfleet.catalog import Catalog
    from cronfleet.store.factory import open_api_store

    api_store = open_api_store(loaded.config.store)
    try:
        yield Catalog(scheduler, api_store, allow_commands=allow_commands)
    finally:
        await api_store.close()


_WIDE = click.option("--wide", is_flag=True,
                     help="Every column, wrapped to fit (default at 120 columns and more; "
                          "narrower terminals and pipes get one line per row).")


@click.group("jobs", epilog=_EXIT_CODES, invoke_without_command=True)
@_CONFIG
@_JSON
@_WIDE
@click.option("--team", "team", default="default", show_default=True,
              help="Whose jobs created over the API are listed (declared jobs: every team's).")
@click.option("--prefix", default="", help="Only the jobs whose id starts with this.")
@click.option("--after", default="", help="Start after this id (the `--after` the last page "
                                          "printed).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True,
              help="Jobs per page.")
@click.pass_context
def jobs_cmd(ctx: click.Context, config_path: str | None, as_json: bool, wide: bool,
             team: str, prefix: str, after: str, limit: int) -> None:
    """List the jobs: schedule, next run, last outcome, override and lease holder; `jobs
    create FILE` / `jobs delete ID` manage the jobs created over the API.

    One page in id order: the declared jobs (config, code, the fleet's registry) and the
    team's jobs created over the API, read from the store by key (never all of them); a
    page that is not the last ends with the command printing the next one."""
    if ctx.invoked_subcommand is not None:
        return
    from cronfleet.catalog import SOURCE
    from cronfleet.views import jobs_by_key

    for name, value in (("--prefix", prefix), ("--after", after)):
        if value and not ID_CHARS.fullmatch(value):
            _fail(f"{name}: {value!r} is not part of a job id (letters, digits and "
                  "._:@+-/ only)", EXIT_BAD_INPUT)
    loaded = _load(config_path, strict=False, fleet=True)
    now = _now()
    declared = [j for j in loaded.jobs if j.source != SOURCE]
    teams = sorted({j.team for j in declared} | {team})
    scheduler = loaded.scheduler(timers=False)

    async def read(store: Any) -> tuple[list[JobView], str | None, dict[str, str]]:
        views: list[JobView] = []
        nxt: str | None = None
        async with _catalog(loaded, scheduler, allow_commands=True) as catalog:  # shown only
            for t in teams:  # id order across teams: each team's page, then merged
                page, more = await jobs_by_key(
                    store, declared, catalog.api_store if t == team else None, catalog.build,
                    now, team=t, limit=limit, after=after, prefix=prefix)
                views += page
                if more is not None:
                    nxt = more if nxt is None else min(nxt, more)
        views.sort(key=lambda v: v.job.id)
        if nxt is not None:
            views = [v for v in views if v.job.id <= nxt]
        if len(views) > limit:
            views = views[:limit]
            nxt = views[-1].job.id
        ids = frozenset(v.job.id for v in views)
        return views, nxt, lease_holders(await running_now(store, ids, limit=1000))

    with loaded:
        views, nxt, holders = _session(loaded, read)
    # a job created over the API runs on the process holding it, never here
    loaded.remote.update(v.job.id for v in views if v.job.source == SOURCE)
    more = (None if nxt is None else f"more: cronfleet jobs --team {team}"
            + (f" --prefix {prefix}" if prefix else "") + f" --after {nxt}")
    if as_json:
        _echo_json([{**v.to_dict(now), "team": v.job.team, **_fleet_dict(loaded, v.job.id)}
                    for v in views])
        if more is not None:
            click.echo(more, err=True)
        return
    if not views:
        click.echo(f"no jobs declared in {loaded.config.display} nor by any process of "
                   f"the fleet, nor created over the API for team {team}"
                   + (f" with ids after {after!r}" if after else "")
                   + (f" starting with {prefix!r}" if prefix else ""))
        return
    console = _console()
    console.print(_jobs_table(views, now, fleet=loaded.fleet, holders=holders,
                              narrow=_narrow(console, wide), width=console.width))
    if more is not None:
        click.echo(more)




def _fleet_dict(loaded: Any, job_id: str) -> dict[str, Any]:
    """What the registry says of ``job_id`` (``jobs --json``): its kind and policies as
    declared, who declares it, whether a live instance does, conflicts."""
    fj = loaded.fleet.get(job_id)
    if fj is None:  # not in the registry: a job of this config, or created over the API
        return {"declared": None, "declared_by": [], "conflict": None,
                "remote": job_id in loaded.remote}
    d = fj.to_dict()
    return {"kind": d["kind"], "policies": {k: d.get(k) for k in (
        "missed", "catch_up_window", "locking", "overlap", "timeout", "jitter", "recover",
        "retry", "notify", "auto_pause_after")}
        | {"max_instances": d.get("max_instances", 1)},
        "declared": d["declared"], "declared_by": d["declared_by"], "conflict": d["conflict"],
        "remote": job_id in loaded.remote}


_TEAM = click.option("--team", default="default", show_default=True,
                     help="The team the job belongs to (an API token of another team does "
                          "not see it).")


def _read_spec(path: str) -> dict[str, Any]:
    """A job body from FILE: JSON (``.json``, or text starting with ``{``) or a TOML
    snippet (the API body's keys, e.g. ``id``, ``schedule``, ``[http]``); exit 2 on a file
    that cannot be read or parsed, naming the line and column."""
    import json
    import tomllib
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}", EXIT_BAD_INPUT)
    if path.endswith(".json") or text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            _fail(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", EXIT_BAD_INPUT)
        if not isinstance(value, dict):
            _fail(f"{path}: expected a JSON object (the job), got {type(value).__name__}",
                  EXIT_BAD_INPUT)
        return value
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _fail(f"{path}: invalid TOML: {exc}", EXIT_BAD_INPUT)


@jobs_cmd.command("create", epilog=_EXIT_CODES)
@click.argument("path", metavar="FILE")
@_TEAM
@_BY
@_CONFIG
@_JSON
def jobs_create_cmd(path: str, team: str, by: str | None, config_path: str | None,
                    as_json: bool) -> None:
    """Create a job as `POST /api/jobs` does, from FILE: a JSON body or a TOML snippet
    (`id`, `schedule`, `[http]`, ...). Every problem is reported at once, by field; nothing
    is stored unless the whole job is valid. Running processes pick it up within seconds."""
    from cronfleet.catalog import IdTaken
    from cronfleet.spec import SpecInvalid, check_job_id

    spec = _read_spec(path)
    job_id = spec.get("id")
    if not isinstance(job_id, str) or (problem := check_job_id(job_id)) is not None:
        what = "is missing" if job_id is None else (
            problem if isinstance(job_id, str) else "must be text")
        _fail(f"{path}: id: {what}", EXIT_BAD_INPUT)
    loaded = _load(config_path, strict=False)
    who = by or _who()
    with loaded:
        scheduler = loaded.scheduler(timers=False)

        async def go(store: Any) -> Any:
            async with _catalog(loaded, scheduler) as catalog:
                job = await catalog.create(job_id, spec, team, who)
                await catalog.api_store.audit(
                    team=team, actor=who, action="job.create", target=job_id,
                    details={"spec": spec, "via": "cli"})
                return job

        try:
            _control(lambda: _session(loaded, go), loaded.config.store)
        except SpecInvalid as exc:
            for p in exc.problems:
                where = f"{path}: {p.key}" if p.key else path
                click.echo(f"{where}: {p.message}", err=True)
            _fail(f"job {job_id!r} not created: {len(exc.problems)} problem(s)",
                  EXIT_BAD_INPUT)
        except IdTaken as exc:
            _fail(f"{path}: id: {exc}", EXIT_BAD_INPUT)
    if as_json:
        _echo_json({"id": job_id, "team": team, "spec": spec, "created_by": who})
        return
    click.echo(f"created job {job_id!r} (team {team}) in {loaded.config.store}")


_MAX_BATCH = 1000  # the API's batch limit (POST /api/jobs:batch)


def _read_jsonl(path: str) -> list[tuple[int, str, dict[str, Any]]]:
    """Every job of a JSON Lines file (``-``: standard input) as ``(line, id, spec)``;
    blank lines are skipped. Exit 2 at the first line that cannot be read (invalid JSON,
    with its column; not an object; no valid id), before anything is stored."""
    import json
    from pathlib import Path

    from cronfleet.spec import check_job_id

    try:
        text = (sys.stdin.read() if path == "-"
                else Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}",
              EXIT_BAD_INPUT)
    name = "<stdin>" if path == "-" else path
    out: list[tuple[int, str, dict[str, Any]]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            _fail(f"{name}:{n}:{exc.colno}: invalid JSON: {exc.msg}; nothing was created",
                  EXIT_BAD_INPUT)
        if not isinstance(value, dict):
            _fail(f"{name}:{n}: expected a JSON object (a job), got {type(value).__name__}; "
                  "nothing was created", EXIT_BAD_INPUT)
        job_id = value.get("id")
        if job_id is None:
            _fail(f"{name}:{n}: id: is missing; nothing was created", EXIT_BAD_INPUT)
        if (problem := check_job_id(job_id)) is not None:
            _fail(f"{name}:{n}: id: {problem}; nothing was created", EXIT_BAD_INPUT)
        out.append((n, job_id, value))
    return out


@jobs_cmd.command("import", epilog=_EXIT_CODES)
@click.argument("path", metavar="FILE.jsonl")
@click.option("--dry-run", is_flag=True,
              help="Check every job (as the store would) and create none.")
@click.option("--batch-size", type=click.IntRange(1, _MAX_BATCH), default=_MAX_BATCH,
              show_default=True, help="Jobs per transaction.")
@_TEAM
@_BY
@_CONFIG
@_JSON
def jobs_import_cmd(path: str, dry_run: bool, batch_size: int, team: str, by: str | None,
                    config_path: str | None, as_json: bool) -> None:
    """Create many jobs from FILE.jsonl (`-`: standard input): one job per line, each what
    `POST /api/jobs` takes. The whole file is read first; then every batch is checked
    (spec, ids repeated in the file or already taken) and only when every job is valid
    are they created, one transaction per batch, as `POST /api/jobs:batch` does. Every
    problem is reported by line; a file with one bad job creates nothing."""
    import time

    from cronfleet.catalog import BatchInvalid

    name = "<stdin>" if path == "-" else path
    jobs = _read_jsonl(path)
    problems: list[tuple[int, str]] = []
    first: dict[str, int] = {}
    for n, job_id, _ in jobs:
        if job_id in first:
            problems.append((n, f"id: job id {job_id!r} is already on line {first[job_id]}"))
        first.setdefault(job_id, n)
    batches = [jobs[i:i + batch_size] for i in range(0, len(jobs), batch_size)]
    loaded = _load(config_path, strict=False)
    who = by or _who()
    started = time.monotonic()
    created: list[int] = []  # jobs created, per batch
    with loaded:
        scheduler = loaded.scheduler(timers=False)

        async def go(store: Any) -> None:
            async with _catalog(loaded, scheduler) as catalog:
                for batch in batches:  # check every batch first: nothing made yet
                    try:
                        await catalog.create_many([(j, s) for _, j, s in batch], team, who,
                                                  dry_run=True)
                    except BatchInvalid as exc:
                        problems.extend((batch[i][0], str(p)) for i, p in exc.problems)
                if problems or dry_run:
                    return
                for batch in batches:
                    made = await catalog.create_many([(j, s) for _, j, s in batch], team,
                                                     who)
                    created.append(len(made))
                    await catalog.api_store.audit(
                        team=team, actor=who, action="job.create_batch",
                        target=f"{len(made)} jobs",
                        details={"ids": [d.id for d, _ in made], "via": "cli"})

        try:
            _control(lambda: _session(loaded, go), loaded.config.store)
        except BatchInvalid as exc:  # taken meanwhile, after the check
            line = batches[len(created)][exc.problems[0][0]][0]
            _fail(f"{name}:{line}: {exc}; created {sum(created)} jobs in {len(created)} "
                  f"batches before it (lines up to "
                  f"{batches[len(created) - 1][-1][0] if created else 0})", EXIT_FAILED)
    seconds = time.monotonic() - started
    if problems:
        for n, message in sorted(problems):
            click.echo(f"{name}:{n}: {message}", err=True)
        _fail(f"{len(problems)} problem(s) in {len({n for n, _ in problems})} job(s); "
              "nothing was created", EXIT_BAD_INPUT)
    summary = {"dry_run": dry_run, "jobs": len(jobs), "created": sum(created),
               "batches": len(batches), "seconds": round(seconds, 3), "team": team}
    if as_json:
        _echo_json(summary)
    elif dry_run:
        click.echo(f"dry run: {len(jobs)} jobs valid in {len(batches)} batches "
                   f"({seconds:.2f}s); nothing was created")
    else:
        click.echo(f"created {sum(created)} jobs (team {team}) in {len(batches)} batches in "
                   f"{seconds:.2f}s in {loaded.config.store}")


@jobs_cmd.command("delete", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="ID")
@_BY
@_CONFIG
def jobs_delete_cmd(job_id: str, by: str | None, config_path: str | None) -> None:
    """Delete a job created over the API (or with `jobs create`), as `DELETE /api/jobs/ID`
    does: its runs stay in the history. A job declared in code or config is refused."""
    from cronfleet.errors import JobNotFound

    loaded = _load(config_path, strict=False)
    who = by or _who()
    with loaded:
        if any(j.id == job_id for j in loaded.jobs):
            _fail(f"job {job_id!r} is declared in {loaded.config.display}, not created over "
                  "the API: remove it there", EXIT_BAD_INPUT)
        scheduler = loaded.scheduler(timers=False)

        async def go(store: Any) -> str | None:
            async with _catalog(loaded, scheduler) as catalog:
                d = await catalog.api_store.job_def(job_id)
                if d is None or d.deleted_at is not None:
                    return None
                # the definition is enough: nothing to read or build first (the catalog
                # would read every definition to hold them all)
                await catalog.delete(job_id, d.team, who)
                await catalog.api_store.audit(team=d.team, actor=who, action="job.delete",
                                              target=job_id, details={"via": "cli"})
                return d.team

        try:
            team = _control(lambda: _session(loaded, go), loaded.config.store)
        except JobNotFound:
            team = None
    if team is None:
        _fail(f"no job {job_id!r} created over the API in {loaded.config.store}",
              EXIT_BAD_INPUT)
    click.echo(f"deleted job {job_id!r} (team {team}); its runs stay in the history")


_STATUSES = ["pending", "running", "succeeded", "failed", "timed_out", "skipped",
             "interrupted", "cancelled"]


def _bound(name: str, value: str | None, now: datetime) -> datetime | None:
    """``--since`` / ``--until``: an ISO time (UTC without an offset) or a duration back
    from now, by the API's rule (:func:`cronfleet.spec.time_bound`); exit 2 otherwise."""
    if value is None:
        return None
    from datetime import UTC

    from cronfleet.spec import FieldError, time_bound

    try:
        return time_bound(value, now=now, tz=UTC)
    except FieldError as exc:
        _fail(f"--{name}: {exc.message}", EXIT_BAD_INPUT)


def _run_filters(f: Callable[..., None]) -> Callable[..., None]:
    for opt in reversed([
        click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20,
                     show_default=True, help="How many runs, newest first."),
        click.option("--status", type=click.Choice(_STATUSES), default=None,
                     help="Only runs with this status."),
        click.option("--since", metavar="TIME", default=None,
                     help="Runs whose slot is at or after TIME: ISO 8601 (UTC without an "
                          "offset) or a duration back from now (1d, 2h30m)."),
        click.option("--until", metavar="TIME", default=None,
                     help="Runs whose slot is before TIME (same forms as --since)."),
        click.option("--instance", metavar="ID", default=None,
                     help="Only runs of this instance."),
    ]):
        f = opt(f)
    return f


@click.command("history", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="[JOB]", required=False)
@_run_filters
@_CONFIG
@_JSON
@_WIDE
def history_cmd(job_id: str | None, limit: int, status: str | None, since: str | None,
                until: str | None, instance: str | None, config_path: str | None,
                as_json: bool, wide: bool) -> None:
    """The runs of JOB, newest first (also for a job no longer declared); without JOB, the
    runs of every job (e.g. `history --status failed --since 1d`)."""
    _list_runs(job_id, limit=limit, status=status, since=since, until=until,
               instance=instance, config_path=config_path, as_json=as_json, wide=wide)


@click.command("runs", epilog=_EXIT_CODES)
@click.option("--running", is_flag=True,
              help="What runs now: run, job, instance, start and lease expiry.")
@_run_filters
@click.option("--job", "job_id", metavar="JOB", default=None, help="Only runs of JOB.")
@_CONFIG
@_JSON
@_WIDE
def runs_cmd(running: bool, limit: int, status: str | None, since: str | None,
             until: str | None, instance: str | None, job_id: str | None,
             config_path: str | None, as_json: bool, wide: bool) -> None:
    """Runs across jobs, newest first (the filters of `history`); --running: what runs
    right now and where."""
    if not running:
        _list_runs(job_id, limit=limit, status=status, since=since, until=until,
                   instance=instance, config_path=config_path, as_json=as_json, wide=wide)
        return
    loaded = _load(config_path, strict=False)
    with loaded:
        items = _session(loaded, lambda store: running_now(store, limit=limit))
    if as_json:
        _echo_json(items)
        return
    _console().print(_running_table(items, _now()))


def _list_runs(job_id: str | None, *, limit: int, status: str | None, since: str | None,
               until: str | None, instance: str | None, config_path: str | None,
               as_json: bool, wide: bool = False) -> None:
    from cronfleet.store.base import RunFilter

    loaded = _load(config_path, strict=False)
    now = _now()
    where = RunFilter(status=None if status is None else RunStatus(status), job_id=job_id,
                      instance_id=instance, since=_bound("since", since, now),
                      until=_bound("until", until, now))
    with loaded:
        declared = {j.id: j for j in loaded.jobs}
        page = _session(loaded, lambda store: store.find_runs(where, limit=limit))
    runs = page.runs
    if job_id is not None and job_id not in declared and not runs:
        _job(loaded, job_id)  # exits 2 with a did-you-mean
    if as_json:
        _echo_json([r.to_dict() for r in runs])
        return
    console = _console()
    if job_id is not None and job_id not in declared:
        console.print(_t(f"note: {job_id!r} is not declared in {loaded.config.display}; "
                         "showing its recorded history"), style="yellow")
    what = f"runs of {job_id!r}" if job_id is not None else "runs"
    if not runs:
        filters = [f"{k} {v}" for k, v in (("with status", status), ("since", since),
                                            ("until", until), ("on instance", instance)) if v]
        click.echo(f"no {what}" + (" " + ", ".join(filters) if filters else ""))
        return
    from rich.table import Table

    tz = declared[job_id].schedule.tz if job_id in declared else None
    title = f"{job_id}: last {len(runs)} run(s)" if job_id is not None else \
        f"last {len(runs)} run(s) across jobs"
    if _narrow(console, wide):  # one line per run: no trigger, no instance
        rows = []
        for r in runs:
            row = [str(r.id), _t(_short(r.slot, now, tz)), _status(r),
                   _t(_duration(r.duration)), _t(_one_line(r.error or ""))]
            if job_id is None:
                row.insert(1, _t(r.job_id))
            rows.append(row)
        names = ["run", "slot", "status", "duration", "error"]
        if job_id is None:
            names.insert(1, "job")
        console.print(_narrow_table(title, names, rows, "error", console.width))
        return
    table = Table(title=title, title_justify="left")
    cols: tuple[str, ...] = ("run", "slot", "trigger", "status", "duration", "instance",
                             "error")
    if job_id is None:
        cols = ("run", "job", *cols[1:])
    for col in cols:
        table.add_column(col, justify="right" if col == "run" else "left", overflow="fold")
    for r in runs:
        row = [str(r.id), _t(_short(r.slot, now, tz)), _t(r.triggered_by.value), _status(r),
               _t(_duration(r.duration)), _t(r.instance_id or "-"),
               _t((r.error or "").splitlines()[0][:80] if r.error else "")]
        if job_id is None:
            row.insert(1, _t(r.job_id))
        table.add_row(*row)
    console.print(table)


@click.command("show-run", epilog=_EXIT_CODES)
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
        from cronfleet.attempts import attempts_of

        _echo_json({**run.to_dict(), "attempts": [a.to_dict() for a in attempts_of(run)]})
        return
    _print_run(run)


# -- trigger, pause, resume, clear-override ---------------------------------------------


def _params(values: tuple[str, ...]) -> dict[str, str] | None:
    """``--param k=v`` (repeatable) as the run's parameters: text values; exit 2 on a
    value without ``=``, an empty key or a key given twice."""
    if not values:
        return None
    out: dict[str, str] = {}
    for raw in values:
        key, sep, value = raw.partition("=")
        key = key.strip()
        if not sep or not key:
            _fail(f"--param: {raw!r} is not KEY=VALUE", EXIT_BAD_INPUT)
        if key in out:
            _fail(f"--param: {key!r} is given twice", EXIT_BAD_INPUT)
        out[key] = value
    return out


@click.command("trigger", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@click.option("--param", "params", metavar="KEY=VALUE", multiple=True,
              help="A parameter for this run (repeatable): the handler reads it in "
                   "ctx.params; stored with the run.")
@click.option("--force", is_flag=True,
              help="Run even though the job is paused (the run records who forced it).")
@click.option("--remote", is_flag=True,
              help="Ask a live instance of the fleet to run it, even when the job is "
                   "declared in this configuration too.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds to wait for a live instance to start the run (remote).")
@click.option("--no-wait", is_flag=True,
              help="Return once the run has started (remote), without waiting for its end.")
@_BY
@_CONFIG
@_JSON
def trigger_cmd(job_id: str, params: tuple[str, ...], force: bool, remote: bool,
                timeout: float, no_wait: bool, by: str | None, config_path: str | None,
                as_json: bool) -> None:
    """Run JOB now and wait for it to end.

    A job declared in this configuration runs in this process. A job only other
    processes declare (in code, their configuration, plugins or the API catalog; see
    `cronfleet jobs`), or any job with --remote, runs on a live instance that declares it:
    the request goes through the store (PostgreSQL: NOTIFY; other stores: within a second)
    and the command prints the run once it has ended (--no-wait: once it has started).
    No live instance declaring the job, or none answering within --timeout: nothing runs,
    exit 3 / 1.

    The run takes the job's lease like any run, so it never overlaps a run elsewhere in
    the fleet: when one holds the lease the skip is recorded and the command exits 3,
    naming the holder. A paused job (by an operator or an auto-pause) runs only with
    --force; otherwise nothing runs and the command exits 3. Exits 1 when the run does not
    succeed.
    """
    values = _params(params)
    loaded = _load(config_path, strict=False, fleet=True, stored=job_id)
    with loaded:
        _job(loaded, job_id)
        if remote or job_id in loaded.remote:
            run = _trigger_remote(loaded, job_id, values, force=force, by=by or _who(),
                                  timeout=timeout, wait=not no_wait, as_json=as_json)
        else:
            run = _trigger_here(loaded, job_id, values, force=force, by=by, as_json=as_json)
    if as_json:
        _echo_json(run.to_dict())
    else:
        _print_run(run)
    if run.status.finished and run.status.value != "succeeded":
        sys.exit(EXIT_FAILED)


def _trigger_here(loaded: Any, job_id: str, values: dict[str, str] | None, *, force: bool,
                  by: str | None, as_json: bool) -> Any:
    scheduler = loaded.scheduler(timers=False)
    try:
        return _control(lambda: scheduler.trigger(job_id, by=by or _who(), params=values,
                                                  force=force),
                        loaded.config.store)
    except JobPaused as exc:
        if as_json:
            _echo_json({"code": exc.code, "message": str(exc),
                        "details": {"job_id": job_id, "by": exc.by, "note": exc.note,
                                    "until": _iso(exc.until) if exc.until else None}})
        _fail(f"{exc}: --force", EXIT_BUSY)
    except AlreadyExecuting as exc:
        if as_json:
            _echo_json(exc.to_dict())
        _fail(
            f"job {job_id!r} is already executing: the lease is held by "
            f"{exc.holder or 'another run'} (skip recorded as run {exc.record.id})",
            EXIT_BUSY,
        )


def _trigger_remote(loaded: Any, job_id: str, values: dict[str, str] | None, *, force: bool,
                    by: str, timeout: float, wait: bool, as_json: bool) -> Any:
    """Through the store (``remote_trigger``): the run once started, or once ended."""
    import asyncio

    from cronfleet.errors import NotDeclared, RemoteRefused, RemoteTimeout
    from cronfleet.runtime.registry import remote_trigger
    from cronfleet.store.factory import open_api_store

    ttl = loaded.config.instance_ttl

    async def go(store: Any) -> Any:
        got = await remote_trigger(store, job_id, by=by, ttl=ttl, params=values, force=force,
                                   timeout=timeout, api_store=open_api_store(store))
        assert got.run_id is not None
        if not as_json:
            click.echo(f"run {got.run_id} of {job_id!r} started on instance {got.taken_by}",
                       err=True)
        while True:
            run = await store.get_run(got.run_id)
            if run is not None and (not wait or run.status.finished):
                return run
            await asyncio.sleep(0.2)

    def refuse(code: str, message: str, exit_code: int, **details: Any) -> None:
        if as_json:
            _echo_json({"code": code, "message": message, "details": {"job_id": job_id,
                                                                      **details}})
        _fail(message, exit_code)

    try:
        return _session(loaded, go)
    except NotDeclared as exc:
        refuse(exc.code, str(exc), EXIT_BUSY, gone=exc.gone)
    except RemoteRefused as exc:
        hint = ": --force" if exc.code == JobPaused.code else ""
        refuse(exc.code, f"{exc} (answered by instance {exc.instance_id})" + hint, EXIT_BUSY,
               instance=exc.instance_id, run_id=exc.run_id)
    except RemoteTimeout as exc:
        refuse(exc.code, str(exc), EXIT_FAILED, request_id=exc.request_id,
               withdrawn=exc.withdrawn)
    raise AssertionError("unreachable")


@click.command("cancel", epilog=_EXIT_CODES)
@click.argument("run_id", metavar="RUN_ID", type=int)
@click.option("--why", metavar="TEXT", default=None, help="Why (recorded with the run).")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds to wait for the instance executing the run to answer.")
@_BY
@_CONFIG
@_JSON
def cancel_cmd(run_id: int, why: str | None, timeout: float, by: str | None,
               config_path: str | None, as_json: bool) -> None:
    """Cancel RUN_ID wherever it executes in the fleet.

    The request goes through the store to the instance executing the run, which records
    it `cancelled` with who and why. An async handler is cancelled at once; a sync
    handler's thread cannot be stopped: the run is recorded cancelled when it returns.
    Exits 3 when the run has ended, is not executing, or its instance is not live.
    """
    from cronfleet.errors import RemoteRefused, RemoteTimeout
    from cronfleet.runtime.registry import remote_cancel

    loaded = _load(config_path, strict=False)
    who = by or _who()
    reason = why or "no reason given"
    ttl = loaded.config.instance_ttl
    with loaded:
        try:
            got = _session(loaded, lambda store: remote_cancel(
                store, run_id, by=who, why=reason, ttl=ttl, timeout=timeout))
        except RemoteRefused as exc:
            if as_json:
                _echo_json({"code": exc.code, "message": str(exc),
                            "details": {"run_id": run_id, "instance": exc.instance_id}})
            _fail(str(exc), EXIT_BAD_INPUT if exc.code == "RUN_NOT_FOUND" else EXIT_BUSY)
        except RemoteTimeout as exc:
            if as_json:
                _echo_json({"code": exc.code, "message": str(exc),
                            "details": {"run_id": run_id, "request_id": exc.request_id}})
            _fail(str(exc), EXIT_FAILED)
    if as_json:
        _echo_json({"run_id": run_id, "job_id": got.job_id, "instance_id": got.taken_by,
                    "by": who, "why": reason})
        return
    click.echo(f"cancel of run {run_id} ({got.job_id!r}) taken by instance {got.taken_by}; "
               f"the run is recorded cancelled by {who} ({reason}) once its handler stops")


def _until(value: str, job: Job, now: datetime) -> datetime:
    from cronfleet.spec import FieldError, pause_until

    try:
        return pause_until(value, now=now, tz=job.schedule.tz)
    except FieldError as exc:
        _fail(f"--until: {exc.message}", EXIT_BAD_INPUT)


def _state_before(loaded: Any, job: Job) -> JobState | None:
    """The job's state before a resume, when its resume may have to be announced."""
    if job.notify is None:
        return None
    return _session(loaded, lambda store: store.read_states([job.id])).get(job.id)


def _announce_resume(loaded: Any, job: Job, before: JobState | None, after: JobState,
                     who: str) -> None:
    """An auto-paused job resumed from here is announced on its channels, as the service
    announces a resume made through it (cronfleet.alerts.notify_resumed)."""
    if before is None:
        return
    import asyncio

    from cronfleet.alerts import notify_resumed
    from cronfleet.runtime.events import OverrideChanged

    runtime = loaded.config.http_runtime()

    async def go() -> dict[str, Any] | None:
        try:
            return await notify_resumed(OverrideChanged(job, before, after, who), runtime,
                                        scope=runtime.scope)
        finally:
            await runtime.aclose()

    sent = asyncio.run(go())
    for event, channels in (sent or {}).items():
        for channel, outcome in channels.items():
            click.echo(f"notified {event} via {channel}: "
                       + ("ok" if outcome["ok"] else f"failed: {outcome['error']}"), err=True)


def _print_state(job: Job, state: JobState, message: str, as_json: bool) -> None:
    now = _now()
    if as_json:
        _echo_json(state_view(job, state, now))
        return
    click.echo(message)
    if state.lease_live(now):
        click.echo(f"note: a run is in progress (lease held by {state.lease_holder}); "
                   "this does not stop it")


@click.command("pause", epilog=_EXIT_CODES)
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
    loaded = _load(config_path, strict=False, fleet=True, stored=job_id)
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


@click.command("resume", epilog=_EXIT_CODES)
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
    loaded = _load(config_path, strict=False, fleet=True, stored=job_id)
    with loaded:
        job = _job(loaded, job_id)
        before = _state_before(loaded, job)
        scheduler = loaded.scheduler(timers=False)
        who = by or _who()
        state = _control(lambda: scheduler.resume(job_id, by=who, note=note),
                         loaded.config.store)
        _announce_resume(loaded, job, before, state, who)
    extra = "" if job.enabled else " although it is declared enabled = false"
    _print_state(job, state, f"resumed {job_id!r} by {who}: forced on{extra}", as_json)


@click.command("clear-override", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@_BY
@_CONFIG
@_JSON
def clear_override_cmd(job_id: str, by: str | None, config_path: str | None,
                       as_json: bool) -> None:
    """Remove JOB's pause or force-on: back to its declared enabled setting."""
    loaded = _load(config_path, strict=False, fleet=True, stored=job_id)
    with loaded:
        job = _job(loaded, job_id)
        before = _state_before(loaded, job)
        scheduler = loaded.scheduler(timers=False)
        who = by or _who()
        state = _control(lambda: scheduler.clear_override(job_id, by=who),
                         loaded.config.store)
        _announce_resume(loaded, job, before, state, who)
    declared = "enabled" if job.enabled else "disabled (enabled = false)"
    _print_state(job, state, f"cleared the override of {job_id!r}: back to its declared "
                             f"setting, {declared}", as_json)


