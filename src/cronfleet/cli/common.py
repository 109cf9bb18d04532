"""What every command shares: exit codes, common options, loading the configuration,
finding a job, opening the store for one command, failing with a message."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from cronfleet.errors import StoreError
from cronfleet.views import opened

if TYPE_CHECKING:
    from cronfleet.config import Loaded, Problem
    from cronfleet.model import Job
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
  3  the job is already executing, paused without --force, or declared by no
     live instance of the fleet (trigger); the run has ended, is not executing
     or its instance is not live (cancel)"""


def _console(err: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=err, highlight=False, soft_wrap=True)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


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


def _load(config_path: str | None, *, strict: bool, fleet: bool = False,
          stored: str | bool = False) -> Loaded:
    """The declared jobs, or exit 1 with every problem. ``strict=False`` (operator
    commands): a plugin that fails to load is left out with a warning. ``fleet``: the
    jobs other processes declare in the store's registry join ``loaded.jobs`` too
    (handler-less, listed in ``loaded.remote``; ``loaded.fleet`` holds the registry), and
    the jobs created over the API that ``stored`` names: a job id (the one a command acts
    on, read by its id), or ``True`` for every one (a view of the whole fleet)."""
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
    if fleet:
        _add_fleet(loaded, stored)
    return loaded


def _add_fleet(loaded: Loaded, stored: str | bool) -> None:
    """Read the store's job registry and the live definitions of the jobs created over
    the API that ``stored`` names (``job_defs``: they are not in the registry) into
    ``loaded`` (see :func:`_load`)."""
    from cronfleet.catalog import SpecInvalid, job_elsewhere
    from cronfleet.runtime.registry import fleet_jobs, job_from_spec
    from cronfleet.store.base import RegistryStore
    from cronfleet.store.factory import open_api_store

    ttl = loaded.config.instance_ttl

    async def read(store: Store) -> tuple[dict[str, Any], list[Any]]:
        if not isinstance(store, RegistryStore):  # no registry: no side tables either
            return {}, []
        if stored is False:
            return await fleet_jobs(store, ttl=ttl), []
        api = open_api_store(store)
        try:
            if stored is True:
                defs = await api.job_defs()
            else:
                one = await api.job_def(stored)
                defs = [] if one is None or one.deleted_at is not None else [one]
            return await fleet_jobs(store, ttl=ttl), defs
        finally:
            await api.close()

    found, defs = _session(loaded, read)
    loaded.fleet = dict(found)
    local = set(loaded.job_ids())
    for d in defs:
        if d.id in local or d.id in loaded.fleet:
            continue
        try:
            job = job_elsewhere(d)
        except SpecInvalid as exc:
            click.echo(f"warning: stored job {d.id!r} is left out: {exc}", err=True)
            continue
        loaded.jobs.append(job)
        loaded.remote.add(d.id)
    for job_id, fj in sorted(loaded.fleet.items()):
        if job_id in local:
            continue
        cur = fj.current
        try:
            job = job_from_spec(job_id, cur.spec, team=cur.team, source=cur.source)
        except ValueError as exc:
            click.echo(f"warning: job {job_id!r} of the registry (declared by "
                       f"{cur.instance_id}) is left out: its schedule cannot be read here: "
                       f"{exc}", err=True)
            continue
        loaded.jobs.append(job)
        loaded.remote.add(job_id)


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

