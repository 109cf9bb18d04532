"""``GET /api/jobs`` with 100,000 jobs declared by another process of the fleet (#14):
the API process declares nothing itself; every job comes from the job registry.

    .venv/bin/python bench/api_jobs.py                       # 100,000 jobs, 30 requests
    .venv/bin/python bench/api_jobs.py --jobs 10000 --n 50
    .venv/bin/python bench/api_jobs.py --peer-src /work/main/src   # before/after

One SQLite store in a temp dir: a "declarer" instance publishes the jobs to the registry
(``publish_jobs``, as a running scheduler does) and keeps its heartbeat; the API runs on a
control-only scheduler (``timers=False``) over ASGI (httpx ``ASGITransport``), a viewer
token. Measured after 3 warm-ups, nearest-rank percentiles:

- ``GET /api/jobs?limit=50`` (the first page), ``?cursor=`` of a page in the middle,
  and ``?text=`` (a search matching 11 jobs: a request looks at a bounded number of
  jobs, so the case follows ``next_cursor`` to the first page with items, timing every
  request it took);
- peer (``--peer-src``): the same requests served by another checkout's ``src`` (e.g. the
  code before this change), in a child process of the same run, on the same data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stats import pct

ROOT = Path(__file__).resolve().parents[1]


async def publish(url: str, n_jobs: int) -> None:
    from cronfleet.store import open_store
    from cronfleet.store.base import Declared, Instance

    store: Any = open_store(url)
    await store.open()
    try:
        await store.heartbeat(Instance("declarer", host="bench", pid=1, role="all",
                                       version="bench"), ttl=3600)
        exprs = [f"{m} {h} * * *" for h in range(24) for m in range(0, 60, 7)]
        rows = []
        for i in range(n_jobs):
            spec = {"kind": "handler", "schedule": exprs[i % len(exprs)], "zone": "UTC",
                    "missed": "run_once", "catch_up_window": 3600.0, "locking":
                    "prefer_global", "overlap": "skip", "timeout": None, "jitter": 0.0,
                    "enabled": True, "recover": False, "retry": None, "notify": None,
                    "auto_pause_after": None, "description": f"nightly export of shard {i}",
                    "config": {}}
            rows.append(Declared(f"job-{i:06d}", "", team="default", source="code",
                                 digest=f"d{i}", spec=spec))
        for attempt in range(3):  # one call of 100,000 rows: on a loaded box it can pass
            try:  # the SQLite store's 10 s call limit (then it is interrupted, rolled back)
                await store.publish_jobs("declarer", rows)
                break
            except Exception as exc:
                print(f"publish attempt {attempt + 1} failed: {exc}", flush=True)
        else:
            raise SystemExit("could not publish the registry")
    finally:
        await store.close()


async def measure(url: str, n: int, n_jobs: int) -> dict[str, Any]:
    import httpx

    from cronfleet import Scheduler
    from cronfleet.api.app import create_app
    try:
        from cronfleet.store.factory import open_api_store
    except ImportError:  # a peer checkout from before store/factory.py
        from cronfleet.store.api import ApiStore as open_api_store  # type: ignore

    sched = Scheduler(store=url, timers=False, instance_ttl="1h")
    api = open_api_store(url)
    await sched.start()
    plain, _ = await api.create_token(name="bench", team="default", role="viewer")
    app = create_app(sched, api_store=api)
    out: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://bench") as c:
            headers = {"Authorization": f"Bearer {plain}"}
            shard = min(4242, n_jobs * 2 // 3)
            cases = {
                "GET /api/jobs?limit=50": "/api/jobs?limit=50",
                "GET /api/jobs?limit=50&cursor=<middle>":
                    f"/api/jobs?limit=50&cursor=job-{n_jobs // 2:06d}",
                # job 4242 (the docs' figures), or two thirds in for fewer jobs
                f"GET /api/jobs?text=shard {shard}": f"/api/jobs?text=shard+{shard}",
            }
            for name, path in cases.items():
                times = []
                for i in range(n + 3):
                    t = time.perf_counter()
                    items, pages = await walk(c, path, headers)
                    dt = (time.perf_counter() - t) * 1000
                    if i >= 3:
                        times.append(dt)
                assert items, path
                out[name] = {"p50_ms": round(pct(times, 50), 1),
                             "p99_ms": round(pct(times, 99), 1), "items": len(items),
                             "requests": pages}
    finally:
        await sched.stop_async()
    return out


async def walk(c: Any, path: str, headers: dict[str, str]) -> tuple[list[Any], int]:
    """The first page of ``path`` that has items, following ``next_cursor`` as a client
    does: a text search looks at a bounded number of jobs a request and answers an empty
    page with a cursor to go on from. Returns its items and the requests made."""
    url, pages = path, 0
    while True:
        r = await c.get(url, headers=headers)
        pages += 1
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        body = r.json()
        if body["items"] or body["next_cursor"] is None:
            return body["items"], pages
        url = f"{path}&cursor={body['next_cursor']}"


def child(a: argparse.Namespace) -> None:
    sys.path.insert(0, a.src)
    print(json.dumps(asyncio.run(measure(a.url, a.n, a.jobs))))


def run_child(script: str, src: str, args: list[str]) -> dict[str, Any]:
    """``script --child --src SRC ARGS`` on ``src`` (this checkout's or a peer's): the JSON
    object its last line prints (bench/read_scale.py uses it too)."""
    done = subprocess.run([sys.executable, script, "--child", "--src", src, *args],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": src})
    if done.returncode != 0:
        raise SystemExit(f"child on {src} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=30, help="requests per case")
    ap.add_argument("--peer-src", default=None, help="another checkout's src (the peer)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--src", default=str(ROOT / "src"), help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    sys.path.insert(0, str(ROOT / "src"))
    with tempfile.TemporaryDirectory(prefix="cf-api-jobs-") as d:
        url = f"sqlite:///{Path(d) / 'bench.db'}"
        t = time.perf_counter()
        asyncio.run(publish(url, a.jobs))
        print(f"{a.jobs:,} jobs published by another instance in "
              f"{time.perf_counter() - t:.1f} s (SQLite, loaded shared machine)", flush=True)
        args = ["--url", url, "--n", str(a.n), "--jobs", str(a.jobs)]
        runs = {"this": run_child(__file__, str(ROOT / "src"), args)}
        if a.peer_src:
            runs["peer"] = run_child(__file__, a.peer_src, args)
    for name in runs["this"]:
        this = runs["this"][name]
        line = (f"{name:<42} this p50 {this['p50_ms']:8.1f} ms  p99 {this['p99_ms']:8.1f} ms"
                f"  ({this.get('requests', 1)} request(s))")
        if "peer" in runs:
            peer = runs["peer"][name]
            line += (f"   peer p50 {peer['p50_ms']:8.1f} ms  p99 {peer['p99_ms']:8.1f} ms"
                     f"   peer/this p50 {peer['p50_ms'] / this['p50_ms']:.1f}x")
        print(line, flush=True)


if __name__ == "__main__":
    main()
