"""``cronfleet check``: validate the configuration and every plugin, show each job's next
fire times, warn about jobs whose runs outlast their period."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from cronfleet.cli.common import (
    _CONFIG,
    _EXIT_CODES,
    _JSON,
    EXIT_FAILED,
    EXIT_OK,
    _config_name,
    _console,
    _echo_json,
    _now,
    _report_problems,
)
from cronfleet.cli.render import (
    _iso,
    _t,
)

if TYPE_CHECKING:
    from cronfleet.config import Loaded


# -- check ----------------------------------------------------------------------------


@click.command("check", epilog=_EXIT_CODES)
@click.argument("file", required=False, metavar="[FILE]")
@_CONFIG
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--no-history", is_flag=True,
              help="Do not read the store (skips the runs-longer-than-their-period check "
                   "and, on Redis, the persistence check).")
@_JSON
def check_cmd(file: str | None, config_path: str | None, strict: bool, no_history: bool,
              as_json: bool) -> None:
    """Validate the configuration and every plugin; show each job's next 3 fire times.

    Exit 1 on any error (with --strict, on any warning too). Also warns when a job's
    recent runs last longer than its period (read from the store).
    """
    from cronfleet.config import check_config
    from cronfleet.views import next_fires, period_of

    path = file or config_path
    report = check_config(path)
    loaded, problems = report.loaded, report.problems
    warnings: list[str] = [str(w) for w in report.warnings]
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
                    "config": dict(job.config),
                    "next": [t.isoformat() for t in next_fires(job, now, 3)],
                })
            if not no_history and loaded.jobs:
                history_warnings, note = _overruns(loaded, now)
                warnings += history_warnings
                if note:
                    notes.append(note)
            if not no_history:
                more_warnings, more_notes = _durability(loaded.config.store)
                warnings += more_warnings
                notes += more_notes
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
            if row["config"]:
                desc += "\nconfig: " + json.dumps(row["config"], sort_keys=True)
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


def _durability(url: str) -> tuple[list[str], list[str]]:
    """A Redis store's persistence settings as warnings / notes (other stores: none)."""
    import asyncio

    from cronfleet.store.url import parse_store_url

    if parse_store_url(url).dialect != "redis":
        return [], []
    from cronfleet.store import open_store
    from cronfleet.store.redis import RedisStore

    async def read() -> tuple[list[str], list[str]]:
        store = open_store(url)
        assert isinstance(store, RedisStore)
        async with asyncio.timeout(15):
            await store.open()
            try:
                return await store.durability()
            finally:
                await store.close()

    try:
        return asyncio.run(read())
    except Exception as exc:
        return [], [f"could not read the persistence settings of {url} ({exc})"]


def _overruns(loaded: Loaded, now: datetime) -> tuple[list[str], str | None]:
    """Warnings for jobs whose recent runs outlast their period; a note when the history
    could not be read (never an error: check must work before the first run)."""
    import asyncio

    from cronfleet.store import open_store
    from cronfleet.store.url import parse_store_url
    from cronfleet.views import RECENT_RUNS, opened, overrun_warning

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
            whole = getattr(store, "quick_check", None)  # the SQLite file, every page
            if whole is not None:
                await whole()
        return out

    async def bounded() -> list[str]:
        return await asyncio.wait_for(read(), 15)

    from cronfleet.errors import StoreDamaged

    try:
        return asyncio.run(bounded()), None
    except StoreDamaged as exc:
        return [f"the store is damaged ({exc}): stop every process and restore the file "
                "from a backup or recover it (docs/deployment.md, recovering a damaged "
                "SQLite file)"], None
    except Exception as exc:
        return [], f"could not read the run history from {url} ({exc}); skipped the " \
                   "runs-longer-than-their-period check"

