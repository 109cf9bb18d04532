"""Jobs declared in code: ``.venv/bin/python examples/app.py``. (``make run`` runs the
same kind of jobs declared in ``examples/cronfleet.toml`` instead.)

Start it twice in two terminals: both processes share ``cronfleet.db`` and each slot still
runs exactly once -- in one of them only. Do not expect the instance names to alternate:
both wake at the same instant and whichever claims the slot first runs it, so the same
process usually wins every slot (cronfleet promises once, not a rotation; a fleet spreads
load across many jobs, not across the slots of one). Stop the one that runs them with
Ctrl-C: the other takes the next slot. Restart it a minute later with the other stopped
too, and the missed minute is caught up.
"""

from __future__ import annotations

import asyncio
import logging
import os

from cronfleet import Missed, Overlap, RunContext, Scheduler

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
log = logging.getLogger("example")

scheduler = Scheduler(os.environ.get("CRONFLEET_STORE", "sqlite:///cronfleet.db"))


@scheduler.job("5s", id="heartbeat", description="say hello every 5 seconds")
async def heartbeat(ctx: RunContext) -> str:
    log.info(
        "💓 heartbeat for slot %s on %s (token %s)",
        ctx.slot.strftime("%H:%M:%S"),
        ctx.instance_id,
        ctx.fencing_token,
    )
    return "alive"


@scheduler.job(
    "* * * * *",
    id="minutely-report",
    missed=Missed.RUN_ONCE,
    overlap=Overlap.SKIP,
    timeout="50s",
    timezone="Europe/Paris",
    config={"recipients": ["ops@example.com"]},
    description="build a small report every minute",
)
def report(ctx: RunContext) -> dict[str, object]:
    """Plain functions run in a thread pool."""
    ctx.log(f"building the report for {ctx.slot.isoformat()}")
    if ctx.is_catchup:
        log.info("⏰ catching up the %s report", ctx.slot.strftime("%H:%M"))
    log.info(
        "📊 report for %s sent to %s",
        ctx.slot.strftime("%H:%M"),
        ", ".join(ctx.config["recipients"]),
    )
    return {"rows": 42}


@scheduler.job(
    "15s",
    id="slow-sync",
    overlap=Overlap.SKIP,
    timeout="20s",
    description="a job that takes longer than its period",
)
async def slow_sync(ctx: RunContext) -> None:
    log.info("🐢 slow sync started for %s", ctx.slot.strftime("%H:%M:%S"))
    await asyncio.sleep(18)  # the next slot finds the lease held and is recorded as skipped


if __name__ == "__main__":
    log.info(
        "cronfleet example: %d jobs on %s — Ctrl-C to stop",
        len(scheduler.jobs),
        scheduler.store.url,
    )
    scheduler.run()
