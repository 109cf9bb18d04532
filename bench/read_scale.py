"""Reading at a million (#27 item 5): the API's and the dashboard's job lists and a job's
runs on PostgreSQL with 1,000,000 API job definitions and 10,000,000 run rows.

    .venv/bin/python bench/read_scale.py                          # 1,000,000 / 10,000,000
    .venv/bin/python bench/read_scale.py --defs 100000 --runs 1000000 --n 100
    .venv/bin/python bench/read_scale.py --peer-src /work/main/src --peer-n 10

A private schema of ``CRONFLEET_BENCH_PG`` (default: the local ``test`` database) is
filled with SQL (``generate_series``, no API): ``--defs`` definitions, 90 % of team
``acme`` and 10 % of team ``other`` (ids ``job-0000000`` ...), and ``--runs`` finished runs:
10 % of them on 100 "hot" jobs (``--runs / 1000`` runs each), the rest spread over every
job. The schema is dropped at the end. The service is the ASGI app in-process (httpx
``ASGITransport``: server time, no network) on a control-only scheduler (``timers=False``)
that holds **none** of the API jobs -- a process whose share of them is empty (the catalog
is not loaded: ``ctx.started`` is set), so every API job is read from ``job_defs``. Each
case: ``--n`` requests after 3 warm-ups, nearest-rank p50 / p99 in ms and the answer's
size. The jobs of a page are built from their definitions once and kept (``Catalog.build``,
the last 10,000): a page read again is "warm"; the ``(cold)`` case asks a page no request
asked before every time. Targets: list p99 <= 50 ms, a job's runs p99 <= 50 ms,
dashboard jobs list p99 <= 300 ms and <= 200 KB.

Peer (``--peer-src``): the same requests served by another checkout's ``src`` (main's:
the catalog loads every definition into the scheduler, then lists from memory), run after
this checkout on the same data (it applies its own migrations then; a checkout whose
schema is newer than this one's must not run first: this one would refuse it);
``--peer-n`` requests per case after one warm-up (its requests take seconds at this size),
and not the overview (minutes a request at a million jobs on main).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from api_jobs import run_child  # noqa: E402
from stats import pct  # noqa: E402

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
TEAM = "acme"
HOT = 100  # jobs with many runs

FILL_DEFS = """
INSERT INTO {s}.job_defs (id, team, spec, version, created_at, updated_at, created_by,
                          updated_by, saved_role)
SELECT 'job-' || lpad(i::text, 7, '0'),
       CASE WHEN i % 10 = 9 THEN 'other' ELSE 'acme' END,
       '{{"description": "nightly export of shard ' || i || '", "http": {{"url": '
         || '"https://example.com/hook/' || i || '"}}, "id": "job-' || lpad(i::text, 7, '0')
         || '", "schedule": "' || (i % 60) || ' ' || (i % 24) || ' * * *"}}',
       i + 1, 1764000000000, 1764000000000, 'bench', 'bench', 'admin'
FROM generate_series(0, {defs} - 1) AS i
"""

# runs: the hot jobs' first (ids job-0000000 .. job-0000099, every 10th is team other's),
# then the rest spread over every job; slots one second apart, oldest first
FILL_RUNS = """
INSERT INTO {s}.runs (job_id, slot, triggered_by, status, instance_id, claimed_at,
                      started_at, finished_at, attempt)
SELECT 'job-' || lpad((CASE WHEN i < {hot_rows} THEN i % {hot} ELSE i % {defs} END)::text,
                      7, '0'),
       to_timestamp(1760000000 + i), 'schedule',
       CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END, 'bench',
       to_timestamp(1760000000 + i), to_timestamp(1760000000 + i),
       to_timestamp(1760000000 + i) + interval '150 milliseconds', 1
FROM generate_series(0, {runs} - 1) AS i
"""

RUN_INDEXES = ("runs_job_id", "runs_status_slot", "runs_slot", "runs_job_slot")


def sql(pg: str, statements: list[str]) -> None:
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)  # type: ignore[arg-type]


def index_defs(pg: str, schema: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        rows = conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
                            "AND tablename = 'runs'", (schema,)).fetchall()
    return {r[0]: r[1] for r in rows}


def fill(pg: str, schema: str, defs: int, runs: int) -> dict[str, float]:
    """Definitions and runs by SQL; the runs' secondary indexes dropped during the insert
    and built again after (faster than maintaining them row by row), then ANALYZE and
    VACUUM (the visibility map: index-only scans)."""
    s = f'"{schema}"'
    took: dict[str, float] = {}
    t = time.perf_counter()
    sql(pg, [FILL_DEFS.format(s=s, defs=defs)])
    took["defs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    saved = {k: v for k, v in index_defs(pg, schema).items() if k in RUN_INDEXES}
    sql(pg, [f'DROP INDEX {s}."{k}"' for k in saved])
    sql(pg, ["SET maintenance_work_mem = '512MB'",
             FILL_RUNS.format(s=s, runs=runs, defs=defs, hot=HOT, hot_rows=runs // 10)])
    took["runs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        for d in saved.values():
            conn.execute(d)  # type: ignore[arg-type]
        conn.execute(f"VACUUM ANALYZE {s}.runs")
        conn.execute(f"VACUUM ANALYZE {s}.job_defs")
    took["indexes_s"] = time.perf_counter() - t
    return took


async def migrate(src: str, url: str) -> float:
    sys.path.insert(0, src)
    from cronfleet.store import open_store

    t = time.perf_counter()
    store: Any = open_store(url)
    await store.open()
    await store.close()
    return time.perf_counter() - t


async def measure(url: str, n: int, defs: int, peer: bool) -> dict[str, Any]:
    warm = 1 if peer else 3
    import httpx

    from cronfleet import Scheduler
    from cronfleet.api.app import create_app
    from cronfleet.store.factory import open_api_store

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    sched = Scheduler(store=url, timers=False, instance_ttl="1h")
    api = open_api_store(url)
    await sched.start()
    out["migrate_and_start_s"] = round(time.perf_counter() - t0, 1)
    plain, _ = await api.create_token(name="bench", team=TEAM, role="viewer")
    app = create_app(sched, api_store=api)
    ctx = app.state.cronfleet
    if peer:  # main's code lists API jobs from the scheduler: its catalog loads them all
        t = time.perf_counter()
        await ctx.catalog.start()
        ctx.started = True
        out["catalog_load_s"] = round(time.perf_counter() - t, 1)
    else:  # a process whose share of the API jobs is empty: nothing loaded
        ctx.started = True
    mid = f"job-{(defs // 2) // 10 * 10:07d}"  # an acme job in the middle
    hot = "job-0000042"
    cases: dict[str, Any] = {
        "GET /api/jobs?limit=100": "/api/jobs?limit=100",
        "GET /api/jobs?limit=100&cursor=<middle>": f"/api/jobs?limit=100&cursor={mid}",
        "GET /api/jobs?limit=100&cursor=<a new place each time> (cold)": (
            lambda i: f"/api/jobs?limit=100&cursor=job-{(i * 4099) % defs:07d}"),
        "GET /api/jobs?prefix=job-01234&limit=100": "/api/jobs?prefix=job-01234&limit=100",
        "GET /api/jobs?text=shard 4242&limit=100 (one bounded scan)":
            "/api/jobs?text=shard+4242&limit=100",
        "GET /api/jobs/{hot job}/runs?limit=100": f"/api/jobs/{hot}/runs?limit=100",
        "GET /api/jobs/{job}/runs?limit=100": f"/api/jobs/{mid}/runs?limit=100",
        "GET /api/jobs/{job} (detail)": f"/api/jobs/{mid}",
        "GET /api/runs?limit=100 (the team's, newest)": "/api/runs?limit=100",
        "dashboard /jobs (HTML, 50 rows)": "/jobs",
        f"dashboard /jobs?after={mid}": f"/jobs?after={mid}",
        "dashboard / (overview)": "/",
    }
    if peer:
        del cases["dashboard / (overview)"]
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://bench", timeout=600) as c:
            c.cookies.set("cronfleet_session", plain)
            headers = {"Authorization": f"Bearer {plain}"}
            for name, path in cases.items():
                times = []
                r = None
                for i in range(n + warm):
                    t = time.perf_counter()
                    r = await c.get(path(i) if callable(path) else path, headers=headers)
                    dt = (time.perf_counter() - t) * 1000
                    if i >= warm:
                        times.append(dt)
                assert r is not None
                if r.status_code != 200:
                    out[name] = {"failed": r.status_code, "body": r.text[:300]}
                    continue
                one: dict[str, Any] = {"p50_ms": round(pct(times, 50), 1),
                                       "p99_ms": round(pct(times, 99), 1),
                                       "bytes": len(r.content)}
                if name.startswith("GET /api/"):
                    body = r.json()
                    if "items" in body:
                        one["items"] = len(body["items"])
                        one["next_cursor"] = body.get("next_cursor") is not None
                out[name] = one
    finally:
        await sched.stop_async()
        await api.close()
    return out


def child(a: argparse.Namespace) -> None:
    sys.path.insert(0, a.src)
    print(json.dumps(asyncio.run(measure(a.url, a.n, a.defs, a.peer))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--defs", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=10_000_000)
    ap.add_argument("--n", type=int, default=200, help="requests per case")
    ap.add_argument("--peer-src", default=None, help="another checkout's src (the peer)")
    ap.add_argument("--peer-n", type=int, default=10, help="requests per case of the peer")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--src", default=str(ROOT / "src"), help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    schema = f"read_{uuid.uuid4().hex[:8]}"
    url = f"{pg}?schema={schema}"
    this_src = str(ROOT / "src")
    results: dict[str, Any] = {"defs": a.defs, "runs": a.runs, "n": a.n}
    child_args = ["--url", url, "--defs", str(a.defs)]
    try:
        # the schema as this checkout makes it (the peer applies its own migrations after)
        subprocess.run([sys.executable, "-c", "import asyncio, sys; sys.path.insert(0, "
                        f"{this_src!r}); from cronfleet.store import open_store\n"
                        "async def m():\n s = open_store(sys.argv[1]); await s.open(); "
                        "await s.close()\nasyncio.run(m())", url],
                       check=True, env={**os.environ, "PYTHONPATH": this_src})
        took = fill(pg, schema, a.defs, a.runs)
        results["fill"] = {k: round(v, 1) for k, v in took.items()}
        print(f"filled {a.defs:,} definitions in {took['defs_s']:.1f} s, {a.runs:,} runs in "
              f"{took['runs_s']:.1f} s, indexes + VACUUM ANALYZE {took['indexes_s']:.1f} s",
              flush=True)
        results["this"] = run_child(__file__, this_src, [*child_args, "--n", str(a.n)])
        print(f"this: {json.dumps(results['this'])}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))
        if a.peer_src:
            results["peer"] = run_child(__file__, a.peer_src,
                                        [*child_args, "--n", str(a.peer_n), "--peer"])
            print(f"peer ({a.peer_src}): {json.dumps(results['peer'])}", flush=True)
    finally:
        sql(pg, [f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'])
    this = dict(results["this"])
    print(f"this: migrate + start {this.pop('migrate_and_start_s')} s")
    peer = dict(results.get("peer", {}))
    if peer:
        print(f"peer: migrate + start {peer.pop('migrate_and_start_s')} s, catalog load "
              f"{peer.pop('catalog_load_s')} s")
    for name, v in this.items():
        if "failed" in v:
            print(f"{name:<58} FAILED {v}")
            continue
        line = (f"{name:<58} p50 {v['p50_ms']:7.1f} ms  p99 {v['p99_ms']:7.1f} ms  "
                f"{v['bytes'] / 1000:7.1f} KB")
        p = peer.get(name)
        if p and "p50_ms" in p:
            line += (f"   peer p50 {p['p50_ms']:8.1f} ms p99 {p['p99_ms']:8.1f} ms "
                     f"({p['p50_ms'] / v['p50_ms']:.0f}x)")
        elif p:
            line += f"   peer failed: {p.get('failed')}"
        print(line, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
