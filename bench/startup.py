"""One process's start-up with many jobs: declaring them, then ``start()`` (store opened,
job state rows ensured, first slots planned), timed apart.

    .venv/bin/python bench/startup.py redis://127.0.0.1:6390/0?prefix=s1: 100000
    PYTHONPATH=/other/tree/src .venv/bin/python bench/startup.py URL 100000   # another rev
    .venv/bin/python bench/startup.py URL 100000 --profile                    # cProfile

Job i fires at second ``i % 60`` of each minute (``bench/fleet_redis.py``'s minute100k).
Run it twice on one URL for the start-up over existing rows. Use a private server.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import time

from cronfleet import RunContext, Scheduler


async def tick(ctx: RunContext) -> None:
    return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("jobs", type=int)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    prof = cProfile.Profile()
    if a.profile:
        prof.enable()
    t0 = time.perf_counter()
    s = Scheduler(store=a.store, instance_id=f"startup:{os.getpid()}")
    for i in range(a.jobs):
        s.job(f"{i % 60} * * * * *", id=f"j-{i}")(tick)
    t1 = time.perf_counter()

    async def go() -> float:
        async with s:
            return time.perf_counter()

    t2 = asyncio.run(go())
    prof.disable()
    print(f"{a.jobs} jobs: declare {t1 - t0:.2f} s, start() {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s")
    if a.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
