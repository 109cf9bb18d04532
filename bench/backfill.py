"""Backfill at fleet scale (#14): 1,000 past slots of each of 100 jobs (100,000 runs) on
PostgreSQL, every slot run exactly once and recorded.

    .venv/bin/python bench/backfill.py             # 100 jobs x 1,000 slots (100,000 runs)
    .venv/bin/python bench/backfill.py --quick     # 20 jobs x 100 slots (2,000 runs)
    .venv/bin/python bench/backfill.py --jobs 50 --slots 200 --peer none

PostgreSQL: ``CRONFLEET_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
a fresh database ``cf_bench_backfill_<random>`` is created and dropped afterwards.

One scheduler process declares the jobs (``* * * * *``, a no-op async handler that
counts its calls by ``(job, slot)``) and runs one backfill per job over the same
past range (``Scheduler.backfill_async(..., rate=None)``), all jobs at once (each
backfill runs its slots in order, one after another: the job's overlap policy). Checked
afterwards, or the run fails:

- handler side: every ``(job, slot)`` of the range called exactly once, nothing else;
- ledger: ``runs`` rows with ``triggered_by='backfill'`` = jobs x slots, all
  ``succeeded``, no ``(job, slot)`` twice (one SQL count).

Peer in the same run (``--peer``): ``sqlite`` (default: the same backfill on a fresh
SQLite file, the embedded default store) or ``none``. Printed: duration, runs/s and the
ratio PostgreSQL / peer. Figures and the command go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def _url_for(base: str, db: str) -> str:
    head, _, tail = base.rpartition("/")
    query = ""
    if "?" in tail:
        tail, query = tail.split("?", 1)
        query = "?" + query
    return f"{head}/{db}{query}"


async def backfill_all(url: str, jobs: int, slots: int) -> dict[str, Any]:
    """Run the backfills on ``url``; returns the duration and the handler's counts."""
    from cronfleet import RunContext, Scheduler
    from cronfleet.model import TriggeredBy

    calls: Counter[tuple[str, float]] = Counter()
    other = Counter[str]()

    async def tick(ctx: RunContext) -> None:
        if ctx.triggered_by is TriggeredBy.BACKFILL:
            calls[(ctx.job_id, ctx.slot.timestamp())] += 1
        else:
            other[ctx.triggered_by.value] += 1

    s = Scheduler(store=url, instance_id=f"bench-backfill:{os.getpid()}",
                  runs_per_job=slots * 2, run_retention="3650d", claim_retention="3650d",
                  catch_up_window=0, max_workers=64)
    ids = [f"bf-{i:03d}" for i in range(jobs)]
    for job_id in ids:
        s.job("* * * * *", id=job_id)(tick)
    # a past range of exactly `slots` minutes, one day back (nothing scheduled fires there)
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)
    start = end - timedelta(minutes=slots - 1)
    async with s:
        t0 = time.perf_counter()
        done = await asyncio.gather(*(
            s.backfill_async(j, start, end, rate=None, by="bench") for j in ids))
        elapsed = time.perf_counter() - t0
    ran = sum(len(bf.ran) for bf in done)
    return {"elapsed": elapsed, "calls": calls, "other": other, "ran": ran,
            "start": start, "end": end, "ids": ids,
            "not_run": sum(bf.taken + bf.busy + bf.present for bf in done)}


def check(res: dict[str, Any], jobs: int, slots: int, ledger: tuple[int, int, int, int]
          ) -> list[str]:
    """Every problem found (empty: every slot ran once and was recorded once)."""
    problems: list[str] = []
    calls: Counter[tuple[str, float]] = res["calls"]
    want = {(j, (res["start"] + timedelta(minutes=k)).timestamp())
            for j in res["ids"] for k in range(slots)}
    twice = [k for k, n in calls.items() if n > 1]
    missing = want - set(calls)
    extra = set(calls) - want
    if twice:
        problems.append(f"{len(twice)} slots ran more than once on the handler side")
    if missing:
        problems.append(f"{len(missing)} slots never ran on the handler side")
    if extra:
        problems.append(f"{len(extra)} calls for slots outside the range")
    rows, distinct, succeeded, tokens = ledger
    if rows != jobs * slots:
        problems.append(f"ledger has {rows} backfill rows, expected {jobs * slots}")
    if distinct != rows:
        problems.append(f"ledger has {rows - distinct} duplicate (job, slot) backfill rows")
    if succeeded != rows:
        problems.append(f"{rows - succeeded} backfill rows are not succeeded")
    if tokens != rows:
        problems.append(f"{rows - tokens} backfill rows carry no fencing token")
    return problems


_LEDGER_SQL = """
SELECT count(*), count(DISTINCT (job_id, slot)),
       count(*) FILTER (WHERE status = 'succeeded'), count(fencing_token)
FROM {runs} WHERE triggered_by = 'backfill'
"""


def pg_ledger(url: str) -> tuple[int, int, int, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(_LEDGER_SQL.format(runs="cronfleet.runs")).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def sqlite_ledger(path: Path) -> tuple[int, int, int, int]:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT count(*), (SELECT count(*) FROM (SELECT DISTINCT job_id, slot FROM runs "
            "WHERE triggered_by = 'backfill')), sum(status = 'succeeded'), "
            "count(fencing_token) FROM runs WHERE triggered_by = 'backfill'").fetchone()
    return int(row[0]), int(row[1]), int(row[2] or 0), int(row[3])


def report(name: str, res: dict[str, Any], jobs: int, slots: int,
           ledger: tuple[int, int, int, int]) -> bool:
    n = jobs * slots
    problems = check(res, jobs, slots, ledger)
    print(f"{name:<10} {n:>7,} runs in {res['elapsed']:8.2f} s  "
          f"{n / res['elapsed']:8.0f} runs/s  ledger rows {ledger[0]:,}  "
          f"handler calls {sum(res['calls'].values()):,}  "
          f"{'OK: every slot once' if not problems else 'FAILED'}", flush=True)
    for p in problems:
        print(f"    {p}")
    if res["other"]:
        print(f"    (other runs during the bench: {dict(res['other'])})")
    return not problems


def run_pg(base: str, jobs: int, slots: int, keep: bool) -> tuple[bool, float]:
    import psycopg

    db = f"cf_bench_backfill_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    url = _url_for(base, db)
    try:
        res = asyncio.run(backfill_all(url, jobs, slots))
        ok = report("postgres", res, jobs, slots, pg_ledger(url))
        return ok, float(res["elapsed"])
    finally:
        if keep:
            print(f"    kept database {db}")
        else:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def run_sqlite(jobs: int, slots: int) -> tuple[bool, float]:
    with tempfile.TemporaryDirectory(prefix="cf-bench-backfill-") as d:
        path = Path(d) / "bench.db"
        res = asyncio.run(backfill_all(f"sqlite:///{path}", jobs, slots))
        ok = report("sqlite", res, jobs, slots, sqlite_ledger(path))
        return ok, float(res["elapsed"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--slots", type=int, default=1000, help="slots per job")
    ap.add_argument("--quick", action="store_true", help="20 jobs x 100 slots")
    ap.add_argument("--peer", choices=("sqlite", "none"), default="sqlite")
    ap.add_argument("--keep", action="store_true", help="keep the PostgreSQL database")
    a = ap.parse_args()
    if a.quick:
        a.jobs, a.slots = 20, 100
    base = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    print(f"backfill: {a.jobs} jobs x {a.slots} slots = {a.jobs * a.slots:,} runs, "
          f"rate unbounded, every job at once (one process)", flush=True)
    ok, pg = run_pg(base, a.jobs, a.slots, a.keep)
    if a.peer == "sqlite":
        peer_ok, peer = run_sqlite(a.jobs, a.slots)
        ok = ok and peer_ok
        print(f"ratio postgres / sqlite duration: {pg / peer:.2f}x "
              f"(runs/s: {peer / pg:.2f}x of sqlite's)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
