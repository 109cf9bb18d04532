"""Dashboard server time and first-load size, with the REST API's job list as the peer.

A scheduler with 100,000 jobs (SQLite store in a temp dir, timers off: nothing fires) and
one job of one slot a minute with 10,000 runs in its ledger (7 days of slots: the 7-day
timeline shows 10,000 cells). The app is called in-process over ASGI, so the times are the
server's (routing, store reads, rendering), without a network; like `cronfleet run`, the
process freezes its start-up heap once started (``freeze_start_up``). Each figure is the p50 /
p99 of N requests after 3 warm-ups.

    .venv/bin/python bench/dashboard.py              # 100,000 jobs, 200 requests per case
                                                     # (the peer: 20)
    .venv/bin/python bench/dashboard.py --jobs 10000 --n 50
    .venv/bin/python bench/dashboard.py --store postgres   # CRONFLEET_TEST_PG, a new schema

Targets (docs/dashboard.md): jobs page p99 <= 100 ms at 100,000 jobs, a 10,000-slot
timeline p99 <= 200 ms, first load of the jobs page (HTML + CSS + JS, gzip) <= 200 KB.
The timeline is measured warm (the page viewed again or refreshed: the process keeps the
slots and runs of the timelines looked at lately) and cold (caches emptied first), the
cold one twice in the same run: with the store's narrow read (``slot_runs``: id,
slot, status, reason, manual) and, as before it existed, with whole rows (``list_runs``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from stats import pct  # noqa: E402


def _pg_url() -> tuple[str, str]:
    import os
    import uuid

    base = os.environ.get("CRONFLEET_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"cf_bench_dash_{uuid.uuid4().hex[:10]}"
    return f"{base}?schema={schema}", schema


def _insert_runs(kind: str, tmp: Path, url: str, schema: str | None,
                 rows: list[tuple[Any, ...]], created_ms: int) -> None:
    cols = ("job_id, slot, triggered_by, status, reason, instance_id, fencing_token, "
            "claimed_at, started_at, finished_at, error")
    if kind == "sqlite":
        db = sqlite3.connect(tmp / "bench.db")
        db.executemany(f"INSERT INTO runs ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       rows)
        db.execute("UPDATE job_state SET created_at = ? WHERE job_id = 'minutely'",
                   (created_ms,))
        db.commit()
        db.close()
        return
    import psycopg

    def ts(v: Any) -> Any:
        return datetime.fromtimestamp(v / 1000, UTC) if isinstance(v, int) else v

    with psycopg.connect(url.split("?", 1)[0]) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {schema}.runs ({cols}) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(r[0], ts(r[1]), r[2], r[3], r[4], r[5], r[6], ts(r[7]), ts(r[8]),
              ts(r[9]), r[10]) for r in rows])
        cur.execute(f"UPDATE {schema}.job_state SET created_at = %s "
                    "WHERE job_id = 'minutely'", (ts(created_ms),))


def _bulk_runs(kind: str, tmp: Path, url: str, schema: str | None, n_jobs: int,
               n_runs: int, now: datetime) -> float:
    """``n_runs`` ledger rows for the ``n_jobs`` daily jobs, written by the database
    itself (a recursive CTE / generate_series): job ``k % n_jobs``, its daily slot
    ``k // n_jobs + 1`` days back; 1 in 53 failed, 1 in 101 skipped (missed). The
    seconds it took."""
    t = time.perf_counter()
    midnight = int(now.replace(hour=0, minute=0).timestamp())
    if kind == "sqlite":
        db = sqlite3.connect(tmp / "bench.db")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute(f"""
            WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c WHERE k < {n_runs - 1}),
            g(k, job, slot) AS (
              SELECT k, k % {n_jobs},
                     ({midnight} - (k / {n_jobs} + 1) * 86400
                      + ((k % {n_jobs}) % 216) / 9 * 3600
                      + ((k % {n_jobs}) % 216) % 9 * 7 * 60) * 1000 FROM c)
            INSERT INTO runs (job_id, slot, triggered_by, status, reason, instance_id,
                              fencing_token, claimed_at, started_at, finished_at, error)
            SELECT printf('job-%06d', job), slot, 'schedule',
                   CASE WHEN k % 53 = 0 THEN 'failed' WHEN k % 101 = 0 THEN 'skipped'
                        ELSE 'succeeded' END,
                   CASE WHEN k % 53 != 0 AND k % 101 = 0 THEN 'missed' END,
                   'bench', k + 1, slot, slot + 5, slot + 5 + (k % 40) * 25,
                   CASE WHEN k % 53 = 0 THEN 'boom' END
            FROM g""")
        db.commit()
        db.close()
        return time.perf_counter() - t
    import psycopg

    with psycopg.connect(url.split("?", 1)[0]) as conn, conn.cursor() as cur:
        cur.execute(f"""
            INSERT INTO {schema}.runs (job_id, slot, triggered_by, status, reason,
              instance_id, fencing_token, claimed_at, started_at, finished_at, error)
            SELECT 'job-' || lpad((k % {n_jobs})::text, 6, '0'), s, 'schedule',
                   CASE WHEN k % 53 = 0 THEN 'failed' WHEN k % 101 = 0 THEN 'skipped'
                        ELSE 'succeeded' END,
                   CASE WHEN k % 53 != 0 AND k % 101 = 0 THEN 'missed' END,
                   'bench', k + 1, s, s + interval '5 ms',
                   s + (5 + (k % 40) * 25) * interval '1 ms',
                   CASE WHEN k % 53 = 0 THEN 'boom' END
            FROM (SELECT k, to_timestamp({midnight} - (k / {n_jobs} + 1) * 86400
                    + ((k % {n_jobs}) % 216) / 9 * 3600
                    + ((k % {n_jobs}) % 216) % 9 * 7 * 60) AS s
                  FROM generate_series(0, {n_runs - 1}) AS k) g""")
    return time.perf_counter() - t


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def main(n_jobs: int, n: int, kind: str = "sqlite", n_runs: int = 10_000_000,
               reuse: str | None = None) -> dict[str, Any]:
    tmp = Path(reuse) if reuse else Path(tempfile.mkdtemp(prefix="cf-dash-bench-"))
    schema = None
    if kind == "postgres":
        url, schema = _pg_url()
    else:
        url = f"sqlite:///{tmp / 'bench.db'}"
    try:
        return await _main(n_jobs, n, kind, tmp, url, schema, n_runs, reuse is not None)
    finally:
        if schema is not None:
            _drop_schema(url, schema)


async def _main(n_jobs: int, n: int, kind: str, tmp: Path, url: str, schema: str | None,
                n_runs: int = 0, reused: bool = False) -> dict[str, Any]:
    import httpx

    from cronfleet import Job, Scheduler
    from cronfleet.api.app import create_app
    from cronfleet.runtime.process import freeze_start_up
    from cronfleet.store.factory import open_api_store

    sched = Scheduler(store=url, timers=False)

    def noop(ctx: Any) -> None:
        return None

    exprs = [f"{m} {h} * * *" for h in range(24) for m in range(0, 60, 7)]
    for i in range(n_jobs):
        sched.add_job(Job.create(exprs[i % len(exprs)], noop, id=f"job-{i:06d}",
                                 description=f"nightly export of shard {i}"))
    sched.add_job(Job.create("* * * * *", noop, id="minutely", description="every minute"))
    api = open_api_store(url)
    t0 = time.perf_counter()
    await sched.start()
    start_s = time.perf_counter() - t0
    plain, _ = await api.create_token(name="bench", team="default", role="admin")
    # 10,000 runs of "minutely", one per slot of the last 10,000 minutes
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = []
    for k in range(10_000):
        slot = now - timedelta(minutes=k)
        ms = int(slot.timestamp() * 1000)
        status = "failed" if k % 97 == 0 else "skipped" if k % 211 == 0 else "succeeded"
        rows.append(("minutely", ms, "schedule", status, "paused" if status == "skipped"
                     else None, "bench", k + 1, ms, ms + 5, ms + 5 + (k % 50) * 20,
                     "boom" if status == "failed" else None))
    bulk_s = 0.0
    if not reused:  # --reuse: the ledger a previous run wrote (SQLite)
        _insert_runs(kind, tmp, url, schema, rows,
                     int((now - timedelta(days=30)).timestamp() * 1000))
        bulk_s = _bulk_runs(kind, tmp, url, schema, n_jobs, n_runs, now) if n_runs else 0.0
    # a few audit entries, secrets are none (no key): the pages still render
    for k in range(60):
        await api.audit(team="default", actor="bench", action="job.pause",
                        target=f"job-{k:06d}", details={"note": f"n{k}", "via": "bench"})

    app = create_app(sched, api_store=api)
    freeze_start_up()  # as `cronfleet run` does once started (api/serve.py)
    transport = httpx.ASGITransport(app=app)
    out: dict[str, Any] = {"store": kind, "jobs": n_jobs, "requests": n,
                           "runs": n_runs + 10_000, "start_s": round(start_s, 2),
                           "runs_written_s": round(bulk_s, 1)}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
        c.cookies.set("cronfleet_session", plain)

        async def measure(path: str, headers: dict[str, str] | None = None,
                          count: int = n, before: Any = None
                          ) -> tuple[list[float], httpx.Response]:
            times = []
            r = None
            for i in range(count + 3):
                if before is not None:
                    before()
                t = time.perf_counter()
                r = await c.get(path, headers=headers)
                dt = time.perf_counter() - t
                assert r.status_code == 200, (path, r.status_code,
                                              r.text.split("<main", 1)[-1][:600])
                if i >= 3:
                    times.append(dt * 1000)
            assert r is not None
            return times, r

        some_run = (await c.get("/runs?job=job-004242")).text.split('href="/runs/')[1]
        some_run = some_run.split('"')[0]
        cases = {
            "overview (heat map page 1, chart of the hour)": "/",
            "overview, chart of the day": "/?window=24h",
            "overview live refresh (partial)": "/?partial=1",
            "runs page (newest 50 across jobs)": "/runs",
            "runs page of one job": "/runs?job=job-004242",
            "runs page, failed": "/runs?status=failed",
            "run page": f"/runs/{some_run}",
            "job page of a daily job (100 runs)": "/jobs/job-004242",
            "job page 30d (10,000 slots)": "/jobs/minutely?window=30d",
            "audit page": "/audit",
            "audit page filtered": "/audit?action=job.pause&actor=bench",
            "secrets page": "/secrets",
            "tokens page": "/tokens",
            "jobs page (first page, 50 rows)": "/jobs",
            "jobs page, search 'shard 4242'": "/jobs?q=shard+4242",
            "jobs page 1,000 (by id)": "/jobs?page=1000",
            "jobs page sorted by next run": "/jobs?sort=next",
            "jobs page live refresh (partial)": "/jobs?partial=1",
            "job timeline 7d (10,000 slots)": "/jobs/minutely?window=7d",
            "job timeline 24h (1,440 slots)": "/jobs/minutely",
        }
        # the peer reads every job's state row per request: fewer requests
        peer_ms, _ = await measure("/api/jobs?limit=50", count=min(n, 20),
                                   headers={"Authorization": f"Bearer {plain}"})
        out["peer: GET /api/jobs?limit=50"] = {"p50_ms": round(pct(peer_ms, 50), 1),
                                               "p99_ms": round(pct(peer_ms, 99), 1)}
        for name, path in cases.items():
            try:
                ms, r = await measure(path)
            except AssertionError as exc:  # said, and the other cases still measured
                out[name] = {"failed": str(exc)[:600], "held": False}
                continue
            out[name] = {"p50_ms": round(pct(ms, 50), 1), "p99_ms": round(pct(ms, 99), 1),
                         "html_kb": round(len(r.content) / 1024, 1),
                         "vs_peer_p50": round(pct(ms, 50) / pct(peer_ms, 50), 2),
                         "held": pct(ms, 99) <= 300 and len(r.content) <= 200 * 1024}
        # a timeline nobody looked at lately in this process: its slots computed and its
        # 10,000 runs read from the store (the caches emptied before each request)
        from cronfleet.dashboard import read

        def cold() -> None:
            read.RUNS.jobs.clear()
            read.SLOTS.jobs.clear()

        # the first view as it was before slot_runs (whole rows through list_runs),
        # then as it is, interleaved so that both see the same load
        from cronfleet.store.base import slot_runs_of

        store = sched.store
        narrow = store.slot_runs

        async def whole_rows(job_id: str, *, limit: int, before_id: int | None = None
                             ) -> Any:
            return slot_runs_of(await store.list_runs(job_id, limit=limit,
                                                      before_id=before_id))

        cold_ms: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(max(10, n // 10) + 3):
            for which, read_fn in (("before", whole_rows), ("after", narrow)):
                store.slot_runs = read_fn  # type: ignore[method-assign]
                cold()
                t = time.perf_counter()
                r = await c.get("/jobs/minutely?window=7d")
                dt = (time.perf_counter() - t) * 1000
                assert r.status_code == 200
                if i >= 3:
                    cold_ms[which].append(dt)
        store.slot_runs = narrow  # type: ignore[method-assign]
        for which, label in (("before", "before: whole rows (list_runs)"),
                             ("after", "slot_runs (narrow read)")):
            ms = cold_ms[which]
            out[f"job timeline 7d, first view (caches empty), {label}"] = {
                "p50_ms": round(pct(ms, 50), 1), "p99_ms": round(pct(ms, 99), 1),
                "html_kb": round(len(r.content) / 1024, 1),
                "vs_peer_p50": round(pct(ms, 50) / pct(peer_ms, 50), 2)}
        out["first view, before/after p50"] = round(
            pct(cold_ms["before"], 50) / pct(cold_ms["after"], 50), 2)
        r = await c.get("/jobs/minutely?window=7d", headers={"Accept-Encoding": "gzip"})
        out["job timeline 7d, transferred KB (gzip)"] = round(
            int(r.headers.get("content-length") or len(r.content)) / 1024, 1)
        # first load of the jobs page: what a browser transfers (gzip)
        total = 0
        for path in ("/jobs", "/ui/static/app.css", "/ui/static/app.js"):
            r = await c.get(path, headers={"Accept-Encoding": "gzip"})
            total += int(r.headers.get("content-length") or len(r.content))
            if path == "/jobs":
                out["jobs page encoding"] = r.headers.get("content-encoding", "identity")
        out["first load of /jobs, transferred KB"] = round(total / 1024, 1)
    await sched.stop()
    await api.close()
    return out


async def heat(n_jobs: int, n: int) -> dict[str, Any]:
    """The overview of ``n_jobs`` jobs firing every minute, each with the last hour of
    runs (1 in 37 failed): the heat map's first page (trouble first) and the chart."""
    import httpx

    from cronfleet import Job, Scheduler
    from cronfleet.api.app import create_app
    from cronfleet.runtime.process import freeze_start_up
    from cronfleet.store.factory import open_api_store

    tmp = Path(tempfile.mkdtemp(prefix="cf-dash-heat-"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    sched = Scheduler(store=url, timers=False)
    for i in range(n_jobs):
        sched.add_job(Job.create("* * * * *", lambda ctx: None, id=f"m-{i:05d}"))
    api = open_api_store(url)
    await sched.start()
    plain, _ = await api.create_token(name="bench", team="default", role="admin")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = []
    k = 0
    for i in range(n_jobs):
        for m in range(60):
            ms = int((now - timedelta(minutes=m)).timestamp() * 1000)
            k += 1
            bad = k % 37 == 0
            rows.append((f"m-{i:05d}", ms, "schedule", "failed" if bad else "succeeded",
                         None, "bench", k, ms, ms + 5, ms + 900, "boom" if bad else None))
    db = sqlite3.connect(tmp / "bench.db")
    db.executemany("INSERT INTO runs (job_id, slot, triggered_by, status, reason, "
                   "instance_id, fencing_token, claimed_at, started_at, finished_at, error) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    app = create_app(sched, api_store=api)
    freeze_start_up()
    out: dict[str, Any] = {"jobs": n_jobs, "runs in the hour": len(rows)}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://bench") as c:
        c.cookies.set("cronfleet_session", plain)
        for name, path in (("overview", "/"), ("overview page 2", "/?hm=2")):
            times = []
            r = None
            for i in range(min(n, 50) + 3):
                t = time.perf_counter()
                r = await c.get(path)
                if i >= 3:
                    times.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text[:300]
            assert r is not None
            out[name] = {"p50_ms": round(pct(times, 50), 1), "p99_ms": round(pct(times, 99), 1),
                         "html_kb": round(len(r.content) / 1024, 1),
                         "held": pct(times, 99) <= 300 and len(r.content) <= 200 * 1024}
    await sched.stop()
    await api.close()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--runs", type=int, default=10_000_000,
                    help="ledger rows of the daily jobs (besides the 10,000 of minutely)")
    ap.add_argument("--reuse", help="a directory whose bench.db a previous run wrote (its "
                    "--jobs and --runs): the ledger is not written again")
    ap.add_argument("--heat-jobs", type=int, default=1000,
                    help="jobs of the heat map case (each firing every minute)")
    args = ap.parse_args()
    res = asyncio.run(main(args.jobs, args.n, args.store, args.runs, args.reuse))
    res["heat map"] = asyncio.run(heat(args.heat_jobs, args.n))
    not_held = [k for k, v in res.items() if isinstance(v, dict) and v.get("held") is False]
    res["not held (p99 <= 300 ms and <= 200 KB)"] = not_held
    if args.runs < 10_000_000 or args.jobs < 100_000:
        res["not held: the target's scale"] = (
            f"measured at {args.jobs} jobs and {args.runs} runs, not 100,000 and 10,000,000")
    print(json.dumps(res, indent=2))
