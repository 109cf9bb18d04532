"""Bytes of Python objects per API job a process holds (tracemalloc): N hourly HTTP jobs
as ``bench/million.py`` stores them (``"S M * * * *"``, 3,600 distinct schedules, a POST
to their own URL), built from their stored spec (``catalog.build_job``) and added to a
``Scheduler``. The schedules' cache is warmed first, so the figure is the job's own cost
(its ``Job``, its HTTP handler, its id and URL), not its schedule's
(``bench/cron_memory.py``). ``--src`` measures another checkout's code the same way (the
peer: e.g. ``git worktree add /tmp/before <rev>``).

    .venv/bin/python bench/api_job_memory.py --jobs 30000 [--src /tmp/before/src]
    .venv/bin/python bench/api_job_memory.py --jobs 30000 --store redis [--src ...]

``--store sqlite|redis``: what a started process holds per API job once its catalog has
loaded them from a store (the definitions seeded as ``bench/catalog_refresh.py`` writes
them: a temp SQLite file, or a throwaway prefix on ``--redis``), everything it keeps
counted -- the jobs, their timers and watermarks, the catalog's versions, the store
object's own tables, the strings read -- after one job was built first (the imports).
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


def through_catalog(n: int, store: str, redis: str) -> dict[str, float]:
    """Bytes held per job after a started scheduler's catalog loaded ``n`` definitions
    from ``store`` (``sqlite`` or ``redis``)."""
    import asyncio
    import tempfile
    import uuid

    sys.path.insert(0, str(HERE))
    import catalog_refresh  # the seeding of N definitions, as that bench writes them
    from cronfleet import Scheduler
    from cronfleet.catalog import Catalog, build_job
    from cronfleet.jobs.http import HttpRuntime
    from cronfleet.store.factory import open_store, side_tables

    if store == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp(prefix='cf-jobmem-')}/jobs.db"
    else:
        url = f"{redis}?prefix=jobmem{uuid.uuid4().hex[:8]}:"

    async def go() -> dict[str, float]:
        await catalog_refresh.seed(store, url, n)
        st = open_store(url)
        await st.open()
        sched = Scheduler(st)
        runtime = HttpRuntime(store=st)  # as the service's catalog is given one
        catalog = Catalog(sched, side_tables(st).api, runtime=runtime)
        build_job(catalog_refresh.spec(10**7), runtime=runtime)  # a first build's imports
        async with sched:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            await catalog.start()
            held = len(sched.jobs)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            await catalog.stop()
        await st.close()
        await catalog_refresh.cleanup(store, url)
        if held != n:
            raise SystemExit(f"the catalog holds {held} jobs, not {n}")
        grown = sum(d.size_diff for d in after.compare_to(before, "filename"))
        return {"jobs": n, "bytes_per_job": grown / n}

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30000)
    ap.add_argument("--src", type=Path, help="another checkout's src: the peer")
    ap.add_argument("--store", choices=["sqlite", "redis"],
                    help="load the jobs through a started process's catalog from this store")
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(through_catalog(a.child, a.store, a.redis) if a.store
                         else child(a.child)))
        return
    rows = [("this checkout", HERE.parent / "src")]
    if a.src:
        rows.append((f"peer {a.src}", a.src))
    for name, src in rows:
        cmd = [sys.executable, __file__, "--child", str(a.jobs)]
        if a.store:
            cmd += ["--store", a.store, "--redis", a.redis]
        out = subprocess.run(cmd,
                             env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        how = f", loaded from {a.store} by a started catalog" if a.store else ""
        print(f"{name}: {r['jobs']:,} API jobs{how}, {r['bytes_per_job']:,.0f} bytes each")


if __name__ == "__main__":
    main()
