"""What one scheduler process costs by itself, thread by thread: the event loop's thread
and the heartbeat thread, from the kernel's per-thread CPU clocks (exact, not sampled),
over a window after start-up. This checkout against another one (``--src``, the peer),
alternated round by round.

    .venv/bin/python bench/process_cpu.py                                   # PostgreSQL, idle
    .venv/bin/python bench/process_cpu.py --jobs 125 --schedule '* * * * * *'
    .venv/bin/python bench/process_cpu.py --store redis://127.0.0.1:6379/0 --src /tmp/before/src

The process runs ``Scheduler(store=URL)`` as shipped with ``--jobs`` jobs on
``--schedule`` (default: one job once a year, an idle process: what a fleet member costs
whatever its share). Each round is a fresh schema (PostgreSQL) or key prefix (Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread (by role) and of the whole process."""
    out: dict[str, float] = {"process": time.process_time()}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        role = "loop" if t is threading.main_thread() else (
            "heartbeat" if t.name.startswith("cronfleet-heartbeat") else "other")
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # ended meanwhile
            continue
        out[role] = out.get(role, 0.0) + cpu
    return out


def child(a: argparse.Namespace) -> None:
    sys.path.insert(0, a.src)
    from cronfleet import RunContext, Scheduler

    runs = 0

    async def tick(ctx: RunContext) -> None:
        nonlocal runs
        runs += 1

    async def go() -> dict[str, Any]:
        s = Scheduler(store=a.store, instance_id=f"cpu-{os.getpid()}")
        for i in range(a.jobs):
            s.job(a.schedule, id=f"j-{i}")(tick)
        async with s:
            await asyncio.sleep(a.warmup)
            before, t0, runs0 = thread_cpu(), time.monotonic(), runs
            await asyncio.sleep(a.seconds)
            after, span = thread_cpu(), time.monotonic() - t0
        return {"ms_per_s": {k: round(1000 * (after[k] - before.get(k, 0.0)) / span, 2)
                             for k in after}, "runs": runs - runs0, "seconds": span}

    print(json.dumps(asyncio.run(go())), flush=True)


def store_url(base: str) -> str:
    run = f"cpu_{uuid.uuid4().hex[:8]}"
    if base.startswith("postgres"):
        return f"{base}?schema={run}"
    if base.startswith("redis"):
        return f"{base}?prefix={run}"
    return base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=DEFAULT_PG, help=f"store URL (default {DEFAULT_PG})")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--schedule", default="0 0 1 1 *")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--src", help="the peer: another checkout's src directory")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    sides = [("this", str(ROOT / "src"))] + ([("peer", a.src)] if a.src else [])
    print(f"{a.jobs} job(s) on {a.schedule!r}, {a.store}, {a.seconds:g} s windows", flush=True)
    results: list[dict[str, Any]] = []
    for k in range(a.rounds):
        for name, src in sides if k % 2 == 0 else sides[::-1]:
            cmd = [sys.executable, __file__, "--child", "--src", src,
                   "--store", store_url(a.store), "--jobs", str(a.jobs),
                   "--schedule", a.schedule, "--seconds", str(a.seconds),
                   "--warmup", str(a.warmup)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r.update(side=name, src=src, round=k + 1)
            results.append(r)
            ms = r["ms_per_s"]
            print(f"  {name:4s} round {k + 1}: process {ms['process']:6.2f} ms/s  loop "
                  f"{ms.get('loop', 0):6.2f}  heartbeat {ms.get('heartbeat', 0):6.2f}  "
                  f"other threads {ms.get('other', 0):5.2f}  ({r['runs']} runs)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
