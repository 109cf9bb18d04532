"""One process's start-up with many jobs: declaring them, then ``start()`` (store opened,
job state rows ensured, first slots planned), timed apart.

    .venv/bin/python bench/startup.py redis://127.0.0.1:6390/0?prefix=s1: 100000
    PYTHONPATH=/other/tree/src .venv/bin/python bench/startup.py URL 100000   # another rev
    .venv/bin/python bench/startup.py URL 100000 --profile                    # cProfile

Job i fires at second ``i % 60`` of each minute (``bench/fleet_redis.py``'s minute100k).
The process's CPU time is printed too: on a shared machine it moves less than the wall
clock (a store server's own CPU is not in it).
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
    t0, c0 = time.perf_counter(), time.process_time()
    s = Scheduler(store=a.store, instance_id=f"startup:{os.getpid()}")
    for i in range(a.jobs):
        s.job(f"{i % 60} * * * * *", id=f"j-{i}")(tick)
    t1, c1 = time.perf_counter(), time.process_time()

    async def go() -> float:
        async with s:
            return time.perf_counter()

    t2 = asyncio.run(go())
    c2 = time.process_time()
    prof.disable()
    print(f"{a.jobs} jobs: declare {t1 - t0:.2f} s, start() {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s (this process's CPU: declare {c1 - c0:.2f} s, "
          f"start() and stop {c2 - c1:.2f} s)")
    if a.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
