"""CPU of reading API job definitions from the Redis store, with redis-py's compiled reply
parser (``hiredis``, in the ``redis`` extra) and with its pure-Python one (the peer).

    .venv/bin/python bench/redis_parser.py                 # 100,000 definitions
    .venv/bin/python bench/redis_parser.py --jobs 250000

A private ``redis-server`` holds ``--jobs`` definitions as ``bench/million.py`` writes
them (HTTP jobs, one a second of the hour each). Each case runs in its own child process,
three times, alternating (the best kept), and reads every definition twice: the whole
table (``job_defs``, one ``HVALS``) and by pages of 1,000 (``job_defs_page``, what
``GET /api/jobs`` and the catalog's reads do). The peer's child makes ``import hiredis``
fail, which is what an install without it does: redis-py then parses replies in Python.

Printed: CPU (user + system) and wall time per case, and the peer's ratio to this build.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from fleet_redis import PrivateRedis  # noqa: E402
from million import load_redis  # noqa: E402


def child(url: str, hiredis: bool) -> dict[str, Any]:
    if not hiredis:
        sys.modules["hiredis"] = None  # type: ignore[assignment]  # import fails
    sys.path.insert(0, str(ROOT / "src"))
    import redis.utils

    from cronfleet.store import open_store
    from cronfleet.store.factory import open_api_store

    async def go() -> dict[str, Any]:
        st: Any = open_store(url)
        await st.open()
        api: Any = open_api_store(st)
        out: dict[str, Any] = {"hiredis": redis.utils.HIREDIS_AVAILABLE}
        try:
            for name in ("whole", "pages"):
                c0, t0 = time.process_time(), time.perf_counter()
                if name == "whole":
                    n = len(await api.job_defs())
                else:
                    n, after = 0, ""
                    while page := await api.job_defs_page("default", after=after, limit=1000):
                        n += len(page)
                        after = page[-1].id
                out[name] = {"cpu_s": time.process_time() - c0,
                             "wall_s": time.perf_counter() - t0, "defs": n}
        finally:
            await st.close()
        return out

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--child", choices=["hiredis", "python"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.url, a.child == "hiredis")))
        return
    redis = PrivateRedis()
    try:
        url = redis.url(f"parser_{uuid.uuid4().hex[:6]}")
        load_redis(url, a.jobs, 9)  # the sink's port is never called here
        best: dict[str, dict[str, Any]] = {}
        for _ in range(3):
            for case in ("hiredis", "python"):
                out = subprocess.run([sys.executable, __file__, "--child", case, "--url", url],
                                     check=True, capture_output=True, text=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                if got["hiredis"] != (case == "hiredis"):
                    raise SystemExit(f"case {case}: hiredis available = {got['hiredis']} "
                                     "(install the redis extra: hiredis)")
                for name in ("whole", "pages"):
                    key = f"{case}/{name}"
                    if key not in best or got[name]["cpu_s"] < best[key]["cpu_s"]:
                        best[key] = got[name]
    finally:
        redis.close()
    print(f"{a.jobs:,} job definitions in a private Redis; CPU (user + system) of the "
          "reading process, best of 3")
    for name, what in (("whole", "all at once (job_defs)"),
                       ("pages", "by pages of 1,000 (job_defs_page)")):
        h, p = best[f"hiredis/{name}"], best[f"python/{name}"]
        print(f"  {what:36} hiredis {h['cpu_s']:6.2f} s CPU ({h['wall_s']:5.2f} s wall)   "
              f"python parser {p['cpu_s']:6.2f} s CPU ({p['wall_s']:5.2f} s wall)   "
              f"{p['cpu_s'] / h['cpu_s']:.2f}x")


if __name__ == "__main__":
    main()
