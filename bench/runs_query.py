"""Runs across jobs on PostgreSQL: ``GET /api/runs?status=failed&since=1d`` with 10 million
runs in the ledger.

    .venv/bin/python bench/runs_query.py                  # 10,000,000 runs, ~5 minutes
    .venv/bin/python bench/runs_query.py --runs 1000000   # smoke run

Database: ``CRONFLEET_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
a fresh schema, dropped afterwards (``--keep`` keeps it).

The schema is made by the store itself (every migration, 0005's indexes included). The
ledger is then bulk-loaded in one ``INSERT … SELECT … FROM generate_series`` with the
``runs`` indexes dropped and rebuilt afterwards from their own definitions: 1,000 jobs,
each run once a minute for ``runs / 1000`` minutes up to now (10 M runs: ~7 days), 2 %
failed, 1 % skipped, 10 running, the rest succeeded, on 4 instances.

Measured, each after a warm-up, nearest-rank percentiles:

- **store**: ``PostgresStore.find_runs(RunFilter(status=FAILED, since=now - 1 day), limit=50)``
  (the first page), with the team's 1,000 job ids as the API passes them;
- **api**: ``GET /api/runs?status=failed&since=1d`` through the ASGI app (httpx
  ``ASGITransport``), a running ``Scheduler`` declaring the 1,000 jobs, a viewer token:
  authentication, team scoping, the query and the JSON of 50 runs;
- **deep page**: the same request from a cursor 20 pages in;
- **peer**: the store query with the two indexes of migration 0005 dropped (what the
  ledger offered before: ``runs_job_id`` and a scan), fewer repetitions.

Target: api p99 <= 50 ms. Figures and the command go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from stats import pct  # noqa: E402

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
JOBS = 1000
NEW_INDEXES = ("runs_status_slot", "runs_slot")  # migration 0005


def fmt(values: list[float]) -> str:
    return (f"p50 {pct(values, 50) * 1000:7.2f} ms  p99 {pct(values, 99) * 1000:7.2f} ms  "
            f"max {max(values) * 1000:7.2f} ms  (n={len(values)})")


def _noop(ctx: Any) -> None:
    return None


def load(base: str, schema: str, runs: int) -> None:
    import psycopg
    from psycopg import sql

    s = sql.Identifier(schema)
    with psycopg.connect(base, autocommit=True) as conn:
        defs = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND "
            "tablename = 'runs' AND indexname <> 'runs_pkey'", (schema,)).fetchall()
        for name, _ in defs:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(s, sql.Identifier(name)))
        t = time.perf_counter()
        # run i: job i % JOBS, slot = now - (n - i / JOBS) minutes (ids follow time)
        conn.execute(sql.SQL("""
            INSERT INTO {s}.runs (job_id, slot, triggered_by, status, reason, instance_id,
                                  fencing_token, attempt, claimed_at, started_at,
                                  finished_at, deadline, error, logs)
            SELECT 'job-' || lpad((i %% {jobs})::text, 4, '0'),
                   t.slot, 'schedule', t.status,
                   CASE WHEN t.status = 'skipped' THEN 'already_executing' END,
                   'bench-' || (i %% 4), i, 1, t.slot, t.slot + interval '2 ms',
                   CASE WHEN t.status <> 'running' THEN t.slot + interval '40 ms' END,
                   t.slot + interval '1 hour',
                   CASE WHEN t.status = 'failed' THEN 'RuntimeError: boom' END, '[]'::jsonb
            FROM generate_series(1, %(n)s) AS i,
            LATERAL (SELECT date_trunc('minute', now())
                            - make_interval(mins => ((%(n)s - i) / {jobs})::int) AS slot,
                            CASE WHEN i > %(n)s - 10 THEN 'running'
                                 WHEN i %% 50 = 7 THEN 'failed'
                                 WHEN i %% 100 = 3 THEN 'skipped'
                                 ELSE 'succeeded' END AS status) AS t
        """).format(s=s, jobs=sql.Literal(JOBS)), {"n": runs})
        print(f"loaded {runs:,} runs in {time.perf_counter() - t:.1f} s", flush=True)
        t = time.perf_counter()
        for _, definition in defs:
            conn.execute(definition)
        conn.execute(sql.SQL("VACUUM ANALYZE {}.runs").format(s))
        print(f"rebuilt {len(defs)} indexes and analyzed in {time.perf_counter() - t:.1f} s",
              flush=True)


async def measure(url: str, base: str, schema: str, repeat: int, peer_repeat: int
                  ) -> dict[str, list[float]]:
    import httpx
    import psycopg
    from psycopg import sql

    from cronfleet import Scheduler
    from cronfleet.api.app import create_app
    from cronfleet.model import Job, RunStatus
    from cronfleet.store import PostgresStore
    from cronfleet.store.base import RunCursor, RunFilter
    from cronfleet.store.factory import open_api_store

    # an API process (`cronfleet run --role api`): no timers, so no retention pass, which
    # at start would trim this ledger to runs_per_job and lock it meanwhile
    s = Scheduler(store=url, instance_id="bench-api", timers=False)
    for n in range(JOBS):
        s.add_job(Job.create("0 0 1 1 *", _noop, id=f"job-{n:04d}"))
    api_store = open_api_store(url)
    token, _ = await api_store.create_token(name="bench", team="default", role="viewer",
                                            created_by="bench")
    out: dict[str, list[float]] = {}
    await s.start()
    try:
        store: Any = s.store
        ids = frozenset(s.jobs)
        since = datetime.now(UTC) - timedelta(days=1)
        where = RunFilter(status=RunStatus.FAILED, since=since, job_ids=ids)
        first = await store.find_runs(where, limit=50)
        assert len(first.runs) == 50 and first.next_cursor is not None, "no failed runs?"
        samples = []
        for _ in range(repeat):
            t = time.perf_counter()
            await store.find_runs(where, limit=50)
            samples.append(time.perf_counter() - t)
        out["store"] = samples

        app = create_app(s, api_store=api_store)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://bench", headers=headers) as client:
            async def get(q: str) -> dict[str, Any]:
                r = await client.get(f"/api/runs?{q}")
                assert r.status_code == 200, r.text
                body: dict[str, Any] = r.json()
                return body

            body = await get("status=failed&since=1d")
            assert len(body["items"]) == 50
            for _ in range(10):
                await get("status=failed&since=1d")
            samples = []
            for _ in range(repeat):
                t = time.perf_counter()
                await get("status=failed&since=1d")
                samples.append(time.perf_counter() - t)
            out["api"] = samples
            cursor = None
            for _ in range(20):
                page = await get("status=failed&since=1d" + (f"&cursor={cursor}" if cursor
                                                              else ""))
                cursor = page["next_cursor"]
            samples = []
            for _ in range(repeat):
                t = time.perf_counter()
                await get(f"status=failed&since=1d&cursor={cursor}")
                samples.append(time.perf_counter() - t)
            out["api_deep"] = samples
            assert RunCursor.decode(cursor)  # a real cursor was used

    finally:
        await s.stop()
        await api_store.close()
    # the peer: the same query once the indexes of migration 0005 are gone
    with psycopg.connect(base, autocommit=True) as conn:
        for name in NEW_INDEXES:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema),
                                                            sql.Identifier(name)))
    peer = PostgresStore(url)
    await peer.open()
    try:
        await peer.find_runs(where, limit=50)
        samples = []
        for _ in range(peer_repeat):
            t = time.perf_counter()
            await peer.find_runs(where, limit=50)
            samples.append(time.perf_counter() - t)
        out["peer"] = samples
    finally:
        await peer.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=500)
    ap.add_argument("--peer-repeat", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="Keep the schema afterwards.")
    a = ap.parse_args()
    import psycopg
    from psycopg import sql

    from cronfleet.store import PostgresStore

    base = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    schema = f"cf_bench_runs_{uuid.uuid4().hex[:8]}"
    url = f"{base}?schema={schema}"
    print(f"schema {schema}; {a.runs:,} runs of {JOBS:,} jobs", flush=True)

    async def migrate() -> None:
        store = PostgresStore(url)
        await store.open()
        await store.close()

    try:
        asyncio.run(migrate())
        load(base, schema, a.runs)
        res = asyncio.run(measure(url, base, schema, a.repeat, a.peer_repeat))
    finally:
        if not a.keep:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)))
    print()
    print("GET /api/runs?status=failed&since=1d, first page of 50")
    print(f"  store (find_runs)        {fmt(res['store'])}")
    print(f"  api (ASGI, httpx)        {fmt(res['api'])}")
    print(f"  api, 21st page (cursor)  {fmt(res['api_deep'])}")
    print(f"  peer: store without the 0005 indexes  {fmt(res['peer'])}")
    print(f"  ratio peer / store (p50) {pct(res['peer'], 50) / pct(res['store'], 50):,.0f}x")
    verdict = "PASS" if pct(res["api"], 99) <= 0.050 else "FAIL"
    print(f"target api p99 <= 50 ms: {verdict}")


if __name__ == "__main__":
    main()
