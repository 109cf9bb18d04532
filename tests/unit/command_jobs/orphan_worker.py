"""A scheduler process that starts one command job and waits to be killed:
``python orphan_worker.py DB SCRIPT KILL_GRACE``."""

from __future__ import annotations

import asyncio
import sys

from cronfleet import Scheduler
from cronfleet.jobs.command import CommandJob


async def main(db: str, script: str, grace: float) -> None:
    s = Scheduler(store=f"sqlite:///{db}", timers=False)
    s.add_job(CommandJob(script, shell=True, kill_grace=grace).job("@daily", id="long"))
    async with s:
        await s.trigger_async("long", wait=False)
        print("STARTED", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
