"""A library-declared job in a process of its own, for the fleet-operations tests (#14):
``python ops_worker.py --store URL --name NAME --count FILE``.

Declares ``tick`` (by default at 03:17 on February 29th, ``--schedule``: it only runs
when triggered -- an hourly default ran once more when a test spanned the hour;
``--overlap``) in code; its handler appends
``tick <instance> <params as JSON>`` to ``--count`` (runs counted on the handler side),
(`` backfill SLOT`` added for a backfill's run), then sleeps ``params["sleep"]``
seconds when given, or waits until the file ``params["until"]`` exists. Prints
``READY <instance>`` once started; stops gracefully on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os

from cronfleet import RunContext, Scheduler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--count", required=True)
    p.add_argument("--schedule", default="17 3 29 2 *")
    p.add_argument("--instance-ttl", default="3s")
    p.add_argument("--overlap", default="skip")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    s = Scheduler(args.store, instance_id=args.name, instance_ttl=args.instance_ttl)

    @s.job(args.schedule, id="tick", description="declared in code", overlap=args.overlap)
    async def tick(ctx: RunContext) -> None:
        line = f"tick {args.name} {json.dumps(dict(ctx.params), sort_keys=True)}"
        if ctx.triggered_by == "backfill":  # a backfilled slot: which one
            line += f" backfill {ctx.slot.isoformat()}"
        line += "\n"
        fd = os.open(args.count, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        if "sleep" in ctx.params:
            await asyncio.sleep(float(ctx.params["sleep"]))
        if "until" in ctx.params:  # held until the test creates that file (60 s at most)
            for _ in range(1200):
                if os.path.exists(ctx.params["until"]):  # noqa: ASYNC240 (a stat)
                    break
                await asyncio.sleep(0.05)

    async def go() -> None:
        async with s:
            print("READY", args.name, flush=True)
            from cronfleet.runtime.process import run_until_signal

            await run_until_signal(s.loop_task)

    asyncio.run(go())


if __name__ == "__main__":
    main()
