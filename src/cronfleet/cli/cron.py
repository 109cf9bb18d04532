"""Schedule tools: ``cronfleet next`` and ``cronfleet explain`` (no configuration, no
store: they must start fast, so nothing heavy is imported here)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from cronfleet.cli.common import (
    _JSON,
    EXIT_BAD_INPUT,
    EXIT_NO_ANSWER,
    _console,
    _fail,
)
from cronfleet.cron import (
    AnySchedule,
    ComposedSchedule,
    CronSyntaxError,
    NoFireTimeError,
    read_schedule,
)
from cronfleet.views import fire_times

_CRON_EXIT_CODES = """\b
Exit codes:
  0  success
  1  no answer (the schedule never fires again)
  2  bad input: invalid expression, time zone or option"""


def _parse(words: tuple[str, ...], tz: str, exclude: tuple[str, ...] = (),
           now: datetime | None = None) -> tuple[AnySchedule, str | None]:
    """The schedule and, when EXPR was (or held) a sentence, the text as written
    (cron.read_schedule); a one-off in words ('tomorrow at 5pm') is read at ``now``."""
    text = " ".join(words)
    # several pieces joined by '|' (docs/cron.md "Several schedules, one-offs, bounds and
    # exclusions"); --except adds exclusions
    text = " | ".join([text, *(f"except {x}" for x in exclude)])
    try:
        return read_schedule(text, tz, now=now)
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


@click.command("next", epilog=_CRON_EXIT_CODES)
@_EXPR
@_TZ
@click.option("-n", "count", type=click.IntRange(1, 10_000), default=5, show_default=True,
              help="How many fire times.")
@click.option("--after", metavar="ISO",
              help="Start (exclusive), ISO 8601; without an offset it is read in --tz. "
                   "Default: now.")
@click.option("--except", "exclude", multiple=True, metavar="ENTRY",
              help="Exclude MM-DD, YYYY-MM-DD, a cron expression's instants or "
                   "calendar:PATH (repeatable).")
@_JSON
def next_cmd(expr: tuple[str, ...], tz: str, count: int, after: str | None,
             exclude: tuple[str, ...], as_json: bool) -> None:
    """Print the next fire times of EXPR.

    EXPR is a cron expression (5 fields, or 6 with leading seconds), a macro such as
    @daily, an interval such as 5m or '@every 1h30m', or a sentence in English or French
    ('every weekday at 9am', 'du lundi au vendredi à 8h30'). Quote it so the shell does
    not expand '*': cronfleet next '*/5 * * * *' --tz Europe/Paris

    Several pieces joined by '|' compose one schedule:
    cronfleet next '0 9 * * 1-5 | 0 12 * * 6 | end 2026-12-31 | except 12-25';
    'at 2026-12-24T18:00:00+01:00' is a one-off, and so are 'tomorrow at 5pm', 'in 2
    hours', 'le 3 décembre à 9h' (read at --after, default now, in --tz: the absolute
    instant is shown). Excluded instants are listed too.
    """
    try:
        zone: Any = ZoneInfo(tz)
    except Exception:  # the parse below says what is wrong with the zone
        zone = UTC
    start = _after(after, zone)  # also the moment a one-off in words is read at
    schedule, sentence = _parse(expr, tz, exclude, start)
    times = fire_times(schedule, start, count)
    excluded: list[datetime] = []
    if isinstance(schedule, ComposedSchedule) and times:
        excluded = schedule.excluded_between(start, times[-1])
    if not times:  # say why: the schedule's own words
        try:
            schedule.next(start)
        except NoFireTimeError as exc:
            _fail(str(exc), EXIT_NO_ANSWER)
    if as_json:
        click.echo(json.dumps({
            "expr": schedule.expr,
            **({"sentence": sentence} if sentence is not None else {}),
            "tz": str(schedule.tz),
            "description": schedule.describe(),
            "after": start.isoformat(),
            "next": [x.isoformat() for x in times],
            **({"excluded": [x.isoformat() for x in excluded]} if excluded else {}),
        }, indent=2))
        return
    from rich.table import Table

    title = f"{schedule.expr}  ({schedule.tz})"
    if sentence is not None:
        title = f"{sentence} = {title}"
    caption = schedule.describe() + ("\nx: excluded (not a slot)" if excluded else "")
    table = Table(title=title, caption=caption,
                  title_justify="left", caption_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column(f"fire time ({schedule.tz})")
    table.add_column("day")
    table.add_column("UTC", style="dim")
    table.add_column("from start", justify="right")
    rows = sorted([(x, False) for x in times] + [(x, True) for x in excluded],
                  key=lambda r: r[0].timestamp())
    i = 0
    for x, is_excluded in rows:
        i += 0 if is_excluded else 1
        table.add_row("x" if is_excluded else str(i), x.isoformat(), x.strftime("%a"),
                      x.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                      _delta(x.astimezone(UTC) - start.astimezone(UTC)),  # elapsed, not wall
                      style="dim strike" if is_excluded else None)
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


@click.command("explain", epilog=_CRON_EXIT_CODES)
@_EXPR
@_TZ
@_JSON
def explain_cmd(expr: tuple[str, ...], tz: str, as_json: bool) -> None:
    """Explain EXPR: its fields, the day-of-month/day-of-week rule and the DST rule.

    Example: cronfleet explain '30 2 * * *' --tz Europe/Paris
    """
    schedule, sentence = _parse(expr, tz)
    info: dict[str, Any] = schedule.explain()
    if sentence is not None:
        info["sentence"] = sentence
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    if info["kind"] == "composed":
        console = _console()
        console.print(f"[bold]{info['description']}[/bold]")
        if sentence is not None:
            console.print(f"written     {sentence}")
        console.print(f"composition {info['expr']}")
        console.print(f"time zone   {info['tz']}")
        for key in ("at", "start", "end"):
            if info[key]:
                console.print(f"{key:<11} {info[key]}")
        for x in info["except"]:
            console.print(f"except      {x}")
        for part in info["parts"]:
            console.print()
            _explain_one(part)
        return
    _explain_one(info, sentence)


def _explain_one(info: dict[str, Any], sentence: str | None = None) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{info['description']}[/bold]")
    if sentence is not None:
        console.print(f"sentence    {sentence}")
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

