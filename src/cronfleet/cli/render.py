"""How the operator commands show things: times, durations, run statuses, overrides,
the jobs table and one run in full (rich)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cronfleet.attempts import attempts_of
from cronfleet.cli.common import (
    _console,
)

if TYPE_CHECKING:
    from cronfleet.model import RunRecord
    from cronfleet.views import JobView


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
    "interrupted": "magenta", "cancelled": "bright_black", "running": "cyan", "pending": "blue",
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


def _declared_by(fj: Any, now: datetime) -> str:
    """Who declares a job of the registry (a ``FleetJob``): live instances, the ones gone
    (with when they were last seen), a conflict between declarers."""
    if fj is None:
        return "-"
    live = [d.instance_id for d in fj.rows if d.live]
    gone = [f"{d.instance_id} (gone, seen {_rel(d.seen_at, now)})" if d.seen_at is not None
            else f"{d.instance_id} (gone)" for d in fj.rows if not d.live]
    text = ", ".join(live + gone)
    if not live:
        text = "NO LIVE INSTANCE: " + text
    conflict = fj.conflict
    if conflict is not None:
        text += f"\nCONFLICT: {conflict}"
    return text


WIDE_FROM = 120
"""Terminal width (columns) from which ``jobs`` and ``history`` print every column."""


def _narrow(console: Any, wide: bool) -> bool:
    """Print the narrow form of a table: not asked ``--wide``, and in a pipe or a terminal
    narrower than :data:`WIDE_FROM` columns."""
    return not wide and (not console.is_terminal or console.width < WIDE_FROM)


def _narrow_table(title: str | None, cols: Sequence[str], rows: Sequence[Sequence[Any]],
                  flex: str, width: int) -> Any:
    """A table whose rows never wrap: one line per row within ``width`` columns. Every
    column keeps its text whole but ``flex``, which takes the width left and is cut with
    an ellipsis."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    def size(cell: Any) -> int:
        return int(Text(cell).cell_len if isinstance(cell, str) else cell.cell_len)

    widths = [max([len(c), *(size(r[i]) for r in rows)]) for i, c in enumerate(cols)]
    at = list(cols).index(flex)
    room = width - 2 * (len(cols) - 1)  # SIMPLE_HEAD without edge padding: two between
    keep = min(widths[at], max(len(flex), 20))  # what the flex column gets at least
    others = [i for i in range(len(cols)) if i != at]
    while sum(widths[i] for i in others) + keep > room:  # cut the widest other (a long id)
        widest = max(others, key=lambda i: widths[i])
        if widths[widest] <= max(len(cols[widest]), 10):
            break
        widths[widest] -= 1
    widths[at] = max(min(widths[at], room - sum(widths[i] for i in others)), len(flex))
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=False, padding=(0, 1), collapse_padding=True)
    for col, w in zip(cols, widths, strict=True):
        table.add_column(col, no_wrap=True, overflow="ellipsis", width=w)
    for row in rows:
        table.add_row(*row)
    return table


def _one_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _jobs_table(views: Sequence[JobView], now: datetime, title: str | None = None,
                fleet: Mapping[str, Any] | None = None,
                holders: Mapping[str, str] | None = None, narrow: bool = False,
                width: int = 80) -> Any:
    """The jobs table; with ``fleet`` (the registry's ``FleetJob`` by id, when any
    process published), a "declared by" column; ``holders``: the instance whose running
    run holds each job's lease (:func:`cronfleet.views.lease_holders`). ``narrow``: job,
    schedule, next run, last run and override, one line each (``--wide`` for every
    column)."""
    from rich.table import Table

    if narrow:
        rows = []
        for v in views:
            job = v.job
            nxt = ("done" if v.done(now) else "never") if v.next_fire is None else \
                _rel(v.next_fire, now)
            if v.paused(now):
                resumes = v.next_run(now)
                nxt = "paused" if resumes is None else f"paused, then {_rel(resumes, now)}"
            last = _status(v.last)
            if v.last is not None:
                when = v.last.finished_at or v.last.started_at or v.last.slot
                last.append(f" {_rel(when, now)}", style="dim")
            rows.append([_t(job.id), _t(job.schedule_text or job.schedule.expr), _t(nxt),
                         last, _t(_one_line(_override_text(v, now)))])
        return _narrow_table(title, ["job", "schedule", "next run", "last run", "override"],
                             rows, "override", width)
    table = Table(title=title, title_justify="left")
    cols = ["job", "schedule", "description", "next run", "last run", "override",
            "lease holder"]
    if fleet:
        cols.append("declared by")
    for col in cols:
        table.add_column(col, overflow="fold")
    for v in views:
        job = v.job
        nxt = ("done" if v.done(now) else "never") if v.next_fire is None else \
            f"{_short(v.next_fire, now, job.schedule.tz)} ({_rel(v.next_fire, now)})"
        if v.paused(now):  # the next slot that will run, not one the pause skips
            resumes = v.next_run(now)
            nxt = "paused" if resumes is None else \
                f"paused; then {_short(resumes, now, job.schedule.tz)} ({_rel(resumes, now)})"
        last = _status(v.last)
        if v.last is not None:
            when = v.last.finished_at or v.last.started_at or v.last.slot
            last.append(f"\n{_rel(when, now)}", style="dim")
        cells = [
            _t(job.id), _t(f"{job.schedule.expr}\n{job.schedule.tz}" if job.schedule_text is None
               else f"{job.schedule_text}\n= {job.schedule.expr}\n{job.schedule.tz}"),
            _t(job.description or job.schedule.describe()), _t(nxt), last,
            _t(_override_text(v, now)), _t((holders or {}).get(job.id) or "-"),
        ]
        if fleet:
            cells.append(_t(_declared_by(fleet.get(job.id), now)))
        table.add_row(*cells)
    return table


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
        ("claimed", _iso(run.claimed_at)),
        ("started", _iso(run.started_at) + late),
        ("finished", _iso(run.finished_at)),
        ("duration", _duration(run.duration)),
        ("reason", run.reason or "-"),
        ("params", "-" if run.params is None else json.dumps(run.params, sort_keys=True)),
        ("forced by", run.forced_by or "-"),
        ("result", "-" if run.result is None else json.dumps(run.result, default=str)),
        ("error", run.error or "-"),
    ]
    for key, value in rows:
        console.print(Text(f"{key:<14}", style="dim") + Text(value))
    tried = attempts_of(run)
    console.print(Text(f"attempts ({len(tried)})", style="bold"))
    for a in tried:
        status = (a.response or {}).get("status")
        line = (f"  {a.number}  {_iso(a.started_at)}  {_duration(a.duration):>8}  {a.outcome}"
                + (f"  HTTP {status}" if status is not None else "")
                + (f"  {a.error.splitlines()[0]}" if a.error else "")
                + ("" if a.retry_in is None else f"  (next in {a.retry_in:g}s)"))
        console.print(Text(line))
    console.print(Text(f"logs ({len(run.logs)} line(s))", style="bold"))
    for line in run.logs:
        console.print(Text("  " + line.replace("\n", "\n  ")))


def _running_table(items: list[dict[str, Any]], now: datetime) -> Any:
    """The "running now" table (`runs --running`, `status`)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="running now", title_justify="left")
    for col in ("run", "job", "instance", "started", "for", "lease until"):
        table.add_column(col, overflow="fold")
    for it in items:
        started = None if it["started_at"] is None else datetime.fromisoformat(it["started_at"])
        lease = None if it["lease_until"] is None else datetime.fromisoformat(it["lease_until"])
        table.add_row(
            str(it["run_id"]), _t(it["job_id"]), _t(it["instance_id"] or "-"),
            _t(_short(started, now) if started else "-"),
            _t(_span((now - started).total_seconds()) if started else "-"),
            _t(f"{_short(lease, now)} ({_rel(lease, now)})" if lease else "- (no lease)"),
        )
    if not items:
        table.add_row("-", Text("nothing running", style="dim"), "", "", "", "")
    return table
