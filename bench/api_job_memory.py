"""Bytes of Python objects per API job a process holds (tracemalloc): N hourly HTTP jobs
as ``bench/million.py`` stores them (``"S M * * * *"``, 3,600 distinct schedules, a POST
to their own URL), built from their stored spec (``catalog.build_job``) and added to a
``Scheduler``. The schedules' cache is warmed first, so the figure is the job's own cost
(its ``Job``, its HTTP handler, its id and URL), not its schedule's
(``bench/cron_memory.py``). ``--src`` measures another checkout's code the same way (the
peer: e.g. ``git worktree add /tmp/before <rev>``).

    .venv/bin/python bench/api_job_memory.py --jobs 30000 [--src /tmp/before/src]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(n: int) -> dict[str, float]:
    from cronfleet.catalog import build_job
    from cronfleet.jobs.http import HttpRuntime
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.spec import canonical_spec
    from cronfleet.store import MemoryStore

    def spec(i: int) -> dict[str, object]:
        job_id = f"m{i:07d}"
        out: dict[str, object] = json.loads(json.dumps(canonical_spec({
            "id": job_id, "schedule": f"{i % 60} {i // 60 % 60} * * * *",
            "http": {"url": f"http://127.0.0.1:9999/hook/{job_id}", "method": "POST"}})))
        return out

    sched = Scheduler(store=MemoryStore())
    runtime = HttpRuntime(store=sched.store)
    specs = [spec(i) for i in range(n)]
    for i in range(3600):  # every schedule once: the figure is the job's own
        build_job(spec(10**6 + i), runtime=runtime)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for sp in specs:
        sched.add_job(build_job(sp, team="default", runtime=runtime))
    del specs
    gc.collect()
    after = tracemalloc.take_snapshot()
    grown = sum(d.size_diff for d in after.compare_to(before, "filename"))
    return {"jobs": n, "bytes_per_job": grown / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30000)
    ap.add_argument("--src", type=Path, help="another checkout's src: the peer")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    rows = [("this checkout", HERE.parent / "src")]
    if a.src:
        rows.append((f"peer {a.src}", a.src))
    for name, src in rows:
        out = subprocess.run([sys.executable, __file__, "--child", str(a.jobs)],
                             env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name}: {r['jobs']:,} API jobs, {r['bytes_per_job']:,.0f} bytes each")


if __name__ == "__main__":
    main()
