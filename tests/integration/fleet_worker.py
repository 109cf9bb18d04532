"""One scheduler process for the real-process tests: ``python fleet_worker.py --help``.

Declares ``--jobs`` identical interval jobs (``--locking``: ``PREFER_GLOBAL`` unless told;
``default`` leaves the library's default) and ``--require-jobs``
``REQUIRE_GLOBAL`` ones, and runs until ``--until`` (epoch seconds), then stops gracefully.
Prints ``READY <instance>`` once started. The evidence is read from the store afterwards,
never from this process's output.

``--count FILE``: each handler appends ``job slot instance recovery`` to FILE when its
work is done (runs counted on the handler side). ``--instance-ttl``, ``--recover``.
``--block-loop SECONDS``: a node-local async job every 2 s holds the event loop that long.
``--max-instances N`` on every job; ``--spans FILE``: each handler appends ``job slot
instance start end`` (wall-clock seconds, taken in the handler) when its work is done.

Fleet options: ``--role api`` runs no timers (a control-only process); ``--clock-offset``
skews this process's clock; ``--pause-job/--pause-at/--pause-for`` pause a job for every
process, from this one, at a given time.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time

from cronfleet import Locking, RunContext, Scheduler
from cronfleet.clock import SystemClock


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--require-jobs", type=int, default=0, help="REQUIRE_GLOBAL jobs (req-NNNN)")
    p.add_argument("--every", default="1s")
    p.add_argument("--prefix", default="job")
    p.add_argument("--sleep", type=float, default=0.0, help="handler duration in seconds")
    p.add_argument("--timeout", default=None)
    p.add_argument("--until", type=float, required=True)
    p.add_argument("--orphan-interval", default="2s")
    p.add_argument("--role", choices=("all", "worker", "api"), default="all")
    p.add_argument("--clock-offset", type=float, default=0.0, help="skew this host's clock (s)")
    p.add_argument("--pause-job", action="append", default=[], help="job id to pause")
    p.add_argument("--pause-at", type=float, default=None, help="epoch seconds (real time)")
    p.add_argument("--pause-for", default=None, help="a duration; none: until resumed")
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--locking", default="prefer_global",
                   help="locking of --jobs: node_local, prefer_global, require_global, default")
    p.add_argument("--command-log", default=None,
                   help="command jobs instead of handlers: each run appends "
                        "'<job> <slot> <token>' to this file (counted on the command side)")
    p.add_argument("--instance-ttl", default=None,
                   help="default: the library's (spec.DEFAULT_INSTANCE_TTL)")
    p.add_argument("--block-loop", type=float, default=0.0,
                   help="an async job every 2 s holds the event loop this many seconds "
                        "(time.sleep on the loop thread: a sync call where it does not belong)")
    p.add_argument("--recover", action="store_true", help="recover=True on every job")
    p.add_argument(
        "--count", default=None,
        help="file each handler appends 'job slot instance recovery' to (handler-side count)",
    )
    p.add_argument("--max-instances", type=int, default=1, help="max_instances of every job")
    p.add_argument("--spans", default=None,
                   help="file each handler appends 'job slot instance start end' to")
    args = p.parse_args()
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format=f"{args.name} %(asctime)s %(levelname)s %(name)s %(message)s",
    )

    s = Scheduler(
        store=args.store,
        instance_id=f"{args.name}:{os.getpid()}",
        orphan_interval=args.orphan_interval,
        shutdown_grace="10s",
        clock=SystemClock(offset=args.clock_offset),
        timers=args.role != "api",
        **({} if args.instance_ttl is None else {"instance_ttl": args.instance_ttl}),
    )

    def count(ctx: RunContext) -> None:
        line = f"{ctx.job_id} {ctx.slot.timestamp():.0f} {args.name} {int(ctx.is_recovery)}\n"
        fd = os.open(args.count, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one small O_APPEND write: never interleaved
        finally:
            os.close(fd)

    def span(ctx: RunContext, began: float) -> None:
        line = (f"{ctx.job_id} {ctx.slot.timestamp():.0f} {args.name} {began:.6f} "
                f"{time.time():.6f}\n")
        fd = os.open(args.spans, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    async def handler(ctx: RunContext) -> None:
        began = time.time()
        if args.sleep:
            await asyncio.sleep(args.sleep)
        if args.count:
            count(ctx)  # after the work: a run cut short (kill -9) is not counted
        if args.spans:
            span(ctx, began)

    locking: dict[str, object] = (
        {} if args.locking == "default" else {"locking": Locking(args.locking)})
    if args.max_instances != 1:
        locking["max_instances"] = args.max_instances
    for i in range(args.jobs):
        if args.command_log:
            from cronfleet.jobs.command import CommandJob

            line = 'echo "$CRONFLEET_JOB $CRONFLEET_SLOT $CRONFLEET_FENCING_TOKEN"'
            command = CommandJob(["/bin/sh", "-c", f"{line} >> {args.command_log}"])
            s.add_job(command.job(args.every, id=f"{args.prefix}-{i:04d}"))
            continue
        s.job(
            args.every, id=f"{args.prefix}-{i:04d}", timeout=args.timeout, recover=args.recover,
            **locking,
        )(handler)
    if args.block_loop:

        async def hold_the_loop(ctx: RunContext) -> None:
            time.sleep(args.block_loop)  # noqa: ASYNC251 -- the point: the loop runs nothing

        s.job("2s", id="hold-the-loop", locking=Locking.NODE_LOCAL)(hold_the_loop)
    for i in range(args.require_jobs):
        s.job(
            args.every,
            id=f"req-{i:04d}",
            timeout=args.timeout,
            locking=Locking.REQUIRE_GLOBAL,
        )(handler)

    async def pause_later() -> None:
        assert args.pause_at is not None
        await asyncio.sleep(max(args.pause_at - time.time(), 0))
        for job_id in args.pause_job:
            asked = time.time()
            state = await s.pause_async(job_id, by=args.name, note="test", until=args.pause_for)
            # asked / written: the pause holds for the slots after it was written
            print(f"PAUSED {job_id} asked {asked:.3f} written {time.time():.3f} until "
                  f"{state.override_until}", flush=True)

    async def go() -> None:
        async with s:
            print(f"READY {s.instance_id}", flush=True)
            if args.pause_job and args.pause_at is not None:
                asyncio.get_running_loop().create_task(pause_later())
            await asyncio.sleep(max(args.until - time.time(), 0))
            skew = getattr(s.store, "clock_skew", None)
            if skew is not None:
                print(f"SKEW {skew:+.3f}", flush=True)

    asyncio.run(go())
    print(
        f"DONE {s.instance_id} fired={s.stats.fired} lost={s.stats.claims_lost} "
        f"store_errors={s.stats.store_errors}",
        flush=True,
    )


if __name__ == "__main__":
    main()
