"""``cronfleet status``: a live view of the jobs, running leases and recent runs."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from cronfleet.cli.common import (
    _CONFIG,
    _EXIT_CODES,
    _JSON,
    _console,
    _echo_json,
    _load,
    _now,
    _session,
)
from cronfleet.cli.render import (
    _duration,
    _iso,
    _override_text,
    _rel,
    _running_table,
    _short,
    _status,
    _t,
)
from cronfleet.views import job_views, lease_holders, running_now

if TYPE_CHECKING:
    from cronfleet.config import Loaded
    from cronfleet.store.base import Instance, Store
    from cronfleet.views import JobView


# -- status -------------------------------------------------------------------------------


@click.command("status", epilog=_EXIT_CODES)
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
    loaded = _load(config_path, strict=False, fleet=True, stored=True)
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
    now = _now()
    return {
        "now": now,
        "loaded": loaded,
        "views": await job_views(store, loaded.jobs, now),
        "running": await running_now(store, limit=100),
        "recent": await store.list_runs(None, limit=n_runs),
        "instances": await _instances(store, loaded),
    }


async def _instances(store: Store, loaded: Loaded) -> list[Instance]:
    """The fleet's instances (live and lost), when the store keeps them."""
    from cronfleet.store.base import InstanceStore

    if not isinstance(store, InstanceStore):
        return []
    return await store.list_instances(ttl=loaded.config.instance_ttl)


def _instance_dict(i: Instance) -> dict[str, Any]:
    return {
        "instance_id": i.instance_id,
        "host": i.host,
        "pid": i.pid,
        "role": i.role,
        "version": i.version,
        "started_at": i.started_at.isoformat() if i.started_at else None,
        "heartbeat_at": i.heartbeat_at.isoformat() if i.heartbeat_at else None,
        "live": i.live,
        "lost_at": i.lost_at.isoformat() if i.lost_at else None,
        "lost_by": i.lost_by,
    }


def _instances_line(instances: list[Instance], now: datetime) -> str:
    """One line: ``instances: 2 live, 1 lost · a (host, pid 1, 2s ago) · ...``."""
    if not instances:
        return "instances: none registered"
    live = [i for i in instances if i.live]
    parts = [f"instances: {len(live)} live, {len(instances) - len(live)} lost"]
    for i in instances:
        beat = (
            _rel(i.heartbeat_at, now) if i.heartbeat_at is not None else "never"
        )
        state = "" if i.live else ", LOST" + (f" (by {i.lost_by})" if i.lost_by else "")
        parts.append(f"{i.instance_id} ({i.role}, {i.host} pid {i.pid}, beat {beat}{state})")
    return " · ".join(parts)


def _snapshot_dict(snap: dict[str, Any]) -> dict[str, Any]:
    now = snap["now"]
    return {
        "now": now.isoformat(),
        "store": snap["loaded"].config.store,
        "jobs": [v.to_dict(now) for v in snap["views"]],
        "running": snap["running"],
        "recent": [r.to_dict() for r in snap["recent"]],
        "instances": [_instance_dict(i) for i in snap["instances"]],
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
    holders = lease_holders(snap["running"])  # a lease with a run under way only
    jobs = Table(title="jobs (next fire first)", title_justify="left", expand=False)
    for col in ("job", "next fire", "in", "last run", "override", "lease holder"):
        jobs.add_column(col, no_wrap=col == "in", overflow="fold")
    for v in views:
        paused = not v.enabled(now)
        countdown = Text(_rel(v.next_fire, now) if v.next_fire else "never",
                         style="dim" if paused else "bold")
        jobs.add_row(_t(v.job.id), _t(_short(v.next_fire, now, v.job.schedule.tz)), countdown,
                     _status(v.last), _t(_override_text(v, now)),
                     _t(holders.get(v.job.id) or "-"))
    running = _running_table(snap["running"], now)
    recent = Table(title="recent runs", title_justify="left")
    for col in ("run", "job", "slot", "status", "duration", "instance"):
        recent.add_column(col, overflow="fold")
    for r in snap["recent"]:
        recent.add_row(str(r.id), _t(r.job_id), _t(_short(r.slot, now)), _status(r),
                       _t(_duration(r.duration)), _t(r.instance_id or "-"))
    fleet = Text(_instances_line(snap["instances"], now))
    return Group(header, fleet, jobs, running, recent)


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


