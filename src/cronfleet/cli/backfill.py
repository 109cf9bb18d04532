"""``cronfleet backfill`` and ``cronfleet backfill-cancel``: run a past range of a job's
slots again on a live instance that declares it, through the store."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from cronfleet.cli.common import (
    _BY,
    _CONFIG,
    _EXIT_CODES,
    _JSON,
    EXIT_BAD_INPUT,
    EXIT_BUSY,
    EXIT_FAILED,
    _echo_json,
    _fail,
    _job,
    _load,
    _now,
    _session,
    _who,
)
from cronfleet.cli.operate import _bound


def _summary(progress: dict[str, Any]) -> str:
    return (f"{progress.get('done', 0)}/{progress.get('total', 0)} slots: "
            f"{progress.get('ran', 0)} run, {progress.get('present', 0)} already succeeded, "
            f"{progress.get('taken', 0)} taken by another backfill, "
            f"{progress.get('busy', 0)} skipped")


@click.command("backfill", epilog=_EXIT_CODES)
@click.argument("job_id", metavar="JOB")
@click.option("--from", "start", metavar="TIME", required=True,
              help="First slot (included): ISO 8601 (UTC without an offset) or a duration "
                   "back from now (2d, 6h).")
@click.option("--to", "end", metavar="TIME", default="0s", show_default="now",
              help="Last slot (included), same forms as --from.")
@click.option("--only-missing", is_flag=True,
              help="Only slots without a succeeded run.")
@click.option("--rate", type=click.FloatRange(0.001, 10_000), default=10.0, show_default=True,
              help="At most this many slots started a second.")
@click.option("--no-wait", is_flag=True,
              help="Return once an instance has taken the backfill (prints its id).")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds to wait for a live instance to take the backfill.")
@_BY
@_CONFIG
@_JSON
def backfill_cmd(job_id: str, start: str, end: str, only_missing: bool, rate: float,
                 no_wait: bool, timeout: float, by: str | None, config_path: str | None,
                 as_json: bool) -> None:
    """Run every slot of JOB's schedule from --from to --to again, in order.

    A live instance that declares JOB takes the backfill through the store and runs the
    slots one after another (the next once the previous run ended), recorded
    `triggered_by=backfill` with their slot. Each slot is claimed in the store: two
    backfills of one range running at once run each slot once between them. Progress is
    shown until the end (Ctrl-C cancels the backfill: the slot in progress is cancelled,
    no further slot runs); with --no-wait the command prints the backfill's id, for
    `cronfleet backfill-cancel` and GET /api/backfills/{id}.

    Exits 3 when no live instance declares JOB, 1 when none took it within --timeout or
    when the backfill did not finish (cancelled, failed, or its instance was lost: the
    error says how many slots were done; run it again with --only-missing).
    """
    from cronfleet.errors import NotDeclared, RemoteRefused, RemoteTimeout
    from cronfleet.runtime.backfill import BadRange, backfill_slots
    from cronfleet.runtime.registry import (
        backfill_status,
        remote_backfill,
        remote_cancel_backfill,
    )
    from cronfleet.store.factory import open_api_store

    now = _now()
    first, last = _bound("from", start, now), _bound("to", end, now)
    assert first is not None and last is not None
    loaded = _load(config_path, strict=False, fleet=True, stored=job_id)
    who = by or _who()
    ttl = loaded.config.instance_ttl
    with loaded:
        try:  # the range rule of every face (past only, not reversed, not too long)
            backfill_slots(_job(loaded, job_id), first, last, now=now)
        except BadRange as exc:
            _fail(f"--{exc.field}: {exc.message}", EXIT_BAD_INPUT)

        async def go(store: Any) -> Any:
            req = await remote_backfill(store, job_id, first, last, by=who, ttl=ttl,
                                        only_missing=only_missing, rate=rate,
                                        timeout=timeout, api_store=open_api_store(store))
            assert req.id is not None
            if no_wait:
                return req
            if not as_json:
                click.echo(f"backfill {req.id} of {job_id!r} taken by instance "
                           f"{req.taken_by}", err=True)
            def status(st: Any, rid: int) -> Any:  # a lost instance answers it failed
                return backfill_status(st, rid, ttl=ttl)

            try:
                return await _follow(store, req.id, as_json, status)
            except (KeyboardInterrupt, asyncio.CancelledError):
                await remote_cancel_backfill(store, req.id, by=who, ttl=ttl)
                return await backfill_status(store, req.id, ttl=ttl)

        def refuse(code: str, message: str, exit_code: int) -> None:
            if as_json:
                _echo_json({"code": code, "message": message, "details": {"job_id": job_id}})
            _fail(message, exit_code)

        try:
            got = _session(loaded, go)
        except KeyboardInterrupt:  # asyncio.run re-raises it once go() has cancelled
            _fail(f"backfill of {job_id!r} cancelled", EXIT_FAILED)
        except NotDeclared as exc:
            refuse(exc.code, str(exc), EXIT_BUSY)
        except RemoteRefused as exc:
            refuse(exc.code, f"{exc} (answered by instance {exc.instance_id})",
                   EXIT_BAD_INPUT if exc.code == "BAD_REQUEST" else EXIT_BUSY)
        except RemoteTimeout as exc:
            refuse(exc.code, str(exc), EXIT_FAILED)
    progress = dict(got.payload.get("progress") or {})
    if as_json:
        _echo_json({"id": got.id, "job_id": job_id, "instance_id": got.taken_by,
                    "from": first.isoformat(), "to": last.isoformat(),
                    "only_missing": only_missing, "finished": got.answered,
                    "error": got.error, "progress": progress})
    elif no_wait:
        click.echo(f"backfill {got.id} of {job_id!r} taken by instance {got.taken_by}")
    else:
        click.echo(f"backfill {got.id} of {job_id!r}: {_summary(progress)}"
                   + (f" -- {got.error}" if got.error else ""))
    if got.answered and got.error is not None:
        sys.exit(EXIT_FAILED)


async def _follow(store: Any, request_id: int, quiet: bool, status: Any) -> Any:
    """Poll the backfill's progress until it is answered, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from cronfleet.cli.common import _console

    console = _console(err=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[current]}"), console=console,
                  disable=quiet or not console.is_terminal) as bar:
        task = bar.add_task("backfill", total=None, current="")
        while True:
            got = await status(store, request_id)
            p = got.payload.get("progress") or {}
            bar.update(task, total=p.get("total") or None, completed=p.get("done", 0),
                       current=p.get("current") or "")
            if got.answered:
                return got
            await asyncio.sleep(0.2)


@click.command("backfill-cancel", epilog=_EXIT_CODES)
@click.argument("backfill_id", metavar="BACKFILL_ID", type=int)
@_BY
@_CONFIG
@_JSON
def backfill_cancel_cmd(backfill_id: int, by: str | None, config_path: str | None,
                        as_json: bool) -> None:
    """Cancel backfill BACKFILL_ID (printed by `cronfleet backfill --no-wait`): the slot
    in progress is cancelled, no further slot runs. Exits 3 when it has already ended."""
    from cronfleet.errors import RemoteRefused, RemoteTimeout
    from cronfleet.runtime.registry import remote_cancel_backfill

    loaded = _load(config_path, strict=False)
    who = by or _who()
    ttl = loaded.config.instance_ttl
    with loaded:
        try:
            got = _session(loaded, lambda store: remote_cancel_backfill(
                store, backfill_id, by=who, ttl=ttl))
        except RemoteRefused as exc:
            if as_json:
                _echo_json({"code": exc.code, "message": str(exc),
                            "details": {"backfill_id": backfill_id}})
            _fail(str(exc), EXIT_BAD_INPUT if exc.code == "BACKFILL_NOT_FOUND" else EXIT_BUSY)
        except RemoteTimeout as exc:
            _fail(str(exc), EXIT_FAILED)
    if as_json:
        _echo_json({"backfill_id": backfill_id, "cancelled_by": who,
                    "instance_id": got.taken_by})
        return
    click.echo(f"backfill {backfill_id} cancelled by {who}")
