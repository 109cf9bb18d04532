"""Handlers for ``examples/cronfleet.toml`` (``make run``).

Each handler receives a :class:`cronfleet.RunContext`: which slot it runs, why, the task's
``config_json`` parsed as ``ctx.config``, and ``ctx.log`` for lines kept with the run
(``cronfleet show-run ID``). ``async def`` handlers run on the event loop, plain ``def``
ones in a thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import random

from cronfleet import RunContext

log = logging.getLogger("example")


async def heartbeat(ctx: RunContext) -> str:
    log.info("💓 heartbeat for slot %s on %s (fencing token %s)",
             ctx.slot.strftime("%H:%M:%S"), ctx.instance_id, ctx.fencing_token)
    return "alive"


def sync_inventory(ctx: RunContext) -> dict[str, object]:
    """Plain functions run in a thread pool; ctx.config comes from config_json."""
    source, batch = ctx.config["source"], ctx.config["batch"]
    changed = random.randint(0, batch)
    ctx.log(f"pulled {batch} records from {source}, {changed} changed")
    log.info("🔄 synced %d/%d %s records for slot %s",
             changed, batch, source, ctx.slot.strftime("%H:%M:%S"))
    return {"changed": changed}


async def slow_export(ctx: RunContext) -> None:
    """Takes longer than its period: the next slot finds the lease held and is recorded as
    skipped (already_executing); 'cronfleet check' then warns about it."""
    log.info("🐢 export started for slot %s", ctx.slot.strftime("%H:%M:%S"))
    await asyncio.sleep(18)
    log.info("🐢 export for slot %s done", ctx.slot.strftime("%H:%M:%S"))


def report(ctx: RunContext) -> dict[str, object]:
    if ctx.is_catchup:
        log.info("⏰ catching up the %s report", ctx.slot.strftime("%H:%M"))
    recipients = ", ".join(ctx.config["recipients"])
    ctx.log(f"report for {ctx.slot.isoformat()} sent to {recipients}")
    log.info("📊 report for %s (Paris time) sent to %s", ctx.slot.strftime("%H:%M"), recipients)
    return {"rows": 42}
