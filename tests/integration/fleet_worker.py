"""One scheduler process for the real-process tests: ``python fleet_worker.py --help``.

Declares ``--jobs`` identical interval jobs and runs until ``--until`` (epoch seconds),
then stops gracefully. Prints ``READY <instance>`` once started. The evidence is read from
the store afterwards, never from this process's output.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from cronfleet import RunContext, Scheduler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--every", default="1s")
    p.add_argument("--prefix", default="job")
    p.add_argument("--sleep", type=float, default=0.0, help="handler duration in seconds")
    p.add_argument("--timeout", default=None)
    p.add_argument("--until", type=float, required=True)
    p.add_argument("--orphan-interval", default="2s")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format=f"{args.name} %(levelname)s %(message)s")

    s = Scheduler(
        store=args.store,
        instance_id=f"{args.name}:{__import__('os').getpid()}",
        orphan_interval=args.orphan_interval,
        shutdown_grace="10s",
    )

    async def handler(ctx: RunContext) -> None:
        if args.sleep:
            await asyncio.sleep(args.sleep)

    for i in range(args.jobs):
        s.job(args.every, id=f"{args.prefix}-{i:04d}", timeout=args.timeout)(handler)

    async def go() -> None:
        async with s:
            print(f"READY {s.instance_id}", flush=True)
            await asyncio.sleep(max(args.until - time.time(), 0))

    asyncio.run(go())
    print(f"DONE {s.instance_id} fired={s.stats.fired} lost={s.stats.claims_lost}", flush=True)


if __name__ == "__main__":
    main()
