"""One scheduler process of the chaos suite: ``python -m bench.chaos.worker --help``.

Declares ``--jobs`` interval jobs with the scheduler's **default settings** (only the
store and ``--instance-ttl``, the suite's ``instance_ttl`` knob -- 2 s, the default --
are given) and runs until SIGTERM / SIGINT, then stops gracefully. Every handler run
appends one line ``job slot_ms pid started_at`` to ``--record`` (opened ``O_APPEND``, one
``write`` per line) as its first statement, then sleeps ``--sleep`` seconds: the runs are
counted on the handler side, not only in the ledger.

``CRONFLEET_CHAOS_CLOCK_OFFSET`` (seconds) skews this process's clock (a host whose
clock is off: ``SystemClock(offset=…)``). ``--jitter``, ``--variants`` and ``--locking``
(off by default) give the jobs the settings some scenarios are about. Prints
``READY <instance id>`` once started.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from typing import Any

from cronfleet import RunContext, Scheduler
from cronfleet.clock import SystemClock
from cronfleet.runtime.process import run_until_signal

OFFSET_ENV = "CRONFLEET_CHAOS_CLOCK_OFFSET"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--every", default="1s")
    p.add_argument("--sleep", type=float, default=0.4, help="handler duration in seconds")
    p.add_argument("--record", required=True, help="file the handlers append their runs to")
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--instance-ttl", default="2s",
                   help="the scheduler's instance_ttl (the suite's knob and the library's "
                        "default: 2s; the short suite uses 4s)")
    p.add_argument("--jitter", default="",
                   help="comma-separated jitter delays (seconds) given to the jobs in turn "
                        "(stop_jitter: 0.9,1.5); none by default")
    p.add_argument("--variants", default="",
                   help="comma-separated job kinds given to the jobs in turn: plain (the "
                        "defaults), recover (recover=True, timeout 2s), run_all "
                        "(missed=run_all); all plain by default")
    p.add_argument("--locking", default="",
                   help="the jobs' locking (prefer_global: the opt-in fail-open mode)")
    args = p.parse_args()
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format=f"{os.getpid()} %(asctime)s %(levelname)s %(name)s %(message)s",
    )
    offset = float(os.environ.get(OFFSET_ENV, "0") or 0)
    s = Scheduler(
        store=args.store,
        clock=SystemClock(offset=offset) if offset else None,
        instance_ttl=args.instance_ttl,
    )
    fd = os.open(args.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    async def handler(ctx: RunContext) -> None:
        slot_ms = round(ctx.slot.timestamp() * 1000)
        os.write(fd, f"{ctx.job_id} {slot_ms} {pid} {time.time():.3f}\n".encode())
        if args.sleep:
            await asyncio.sleep(args.sleep)

    jitters = [float(x) for x in args.jitter.split(",") if x]
    variants = [x for x in args.variants.split(",") if x]
    for i in range(args.jobs):
        opts: dict[str, Any] = {}
        if jitters:
            opts["jitter"] = jitters[i % len(jitters)]
        kind = variants[i % len(variants)] if variants else "plain"
        if kind == "recover":
            opts.update(recover=True, timeout="2s")
        elif kind == "run_all":
            opts["missed"] = "run_all"
        elif kind != "plain":
            raise SystemExit(f"--variants: unknown job kind {kind!r}")
        if args.locking:
            opts["locking"] = args.locking
        s.job(args.every, id=f"job-{i:04d}", **opts)(handler)

    async def go() -> None:
        async with s:
            print(f"READY {s.instance_id}", flush=True)
            await run_until_signal()
        print(f"STOPPED {s.instance_id} at {time.time():.3f}", flush=True)

    asyncio.run(go())
    os.close(fd)


if __name__ == "__main__":
    main()
