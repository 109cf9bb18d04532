"""PostgreSQL retention at size: one pass over a large ledger while the same process fires
every-second jobs, in bounded pieces (the store's ``prune``) and, as the peer in the same
run, as the one transaction of the previous release (its three statements, kept here).

    .venv/bin/python bench/postgres_prune.py [--runs N] [--jobs M] [--firing K]

Each mode gets a fresh schema with ``--runs`` finished runs (and as many claims) of ``--jobs``
jobs, all 60 days old (past the 30-day and 7-day retention), then one process runs ``--firing``
every-second jobs (half ``1s``, half ``* * * * * *``) on that store: 10 s idle, then the
retention pass, then 5 s after. It prints the pass's time, the rows deleted, the longest
piece, and the firing lateness (handler side) before and while the pass runs.
``CRONFLEET_BENCH_PG`` names the database (default: the local ``test`` database).
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet_redis import DEFAULT_PG, pg_exec  # noqa: E402
from stats import pct  # noqa: E402

# the previous release's retention: one transaction, three statements (the peer)
ONE_TRANSACTION = [
    "SET LOCAL statement_timeout = '120s'",
    """DELETE FROM {s}.claims WHERE claimed_at < %(claims)s AND (slot IS NULL OR (job_id, slot)
       NOT IN (SELECT job_id, max(slot) FROM {s}.claims WHERE slot IS NOT NULL GROUP BY job_id))""",
    """DELETE FROM {s}.runs WHERE finished_at < %(runs)s AND status NOT IN ('running', 'pending')
       AND id NOT IN (SELECT max(id) FROM {s}.runs WHERE dedupe IS NOT NULL GROUP BY job_id)""",
    """DELETE FROM {s}.runs WHERE id IN (
         SELECT id FROM (SELECT id, status,
                                row_number() OVER (PARTITION BY job_id ORDER BY id DESC) AS n
                         FROM {s}.runs) AS ranked
         WHERE n > %(per_job)s AND status NOT IN ('running', 'pending'))
       AND id NOT IN (SELECT max(id) FROM {s}.runs WHERE dedupe IS NOT NULL GROUP BY job_id)""",
]

FILL = """
INSERT INTO {s}.runs (job_id, slot, triggered_by, status, claimed_at, started_at, finished_at)
SELECT 'old-' || (i % {jobs}), to_timestamp(1000000000 + i), 'schedule', 'succeeded',
       now() - interval '60 days', now() - interval '60 days', now() - interval '60 days'
FROM generate_series(1, {runs}) AS i;
INSERT INTO {s}.claims (job_id, slot, instance_id, claimed_at)
SELECT 'old-' || (i % {jobs}), to_timestamp(1000000000 + i), 'bench', now() - interval '60 days'
FROM generate_series(1, {runs}) AS i;
ANALYZE {s}.runs; ANALYZE {s}.claims;
"""

IDLE, AFTER = 10.0, 5.0


def child(a: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE.parent / "src"))
    from cronfleet import RunContext, Scheduler

    recs: list[tuple[float, float]] = []
    # the pass at start keeps everything (ten years): the measured pass is the one below
    s = Scheduler(store=a.store, instance_id=f"prune:{os.getpid()}", run_retention="3650d",
                  claim_retention="3650d")

    async def tick(ctx: RunContext) -> None:
        recs.append((ctx.slot.timestamp(), time.time()))

    for i in range(a.firing):
        s.job("1s" if i % 2 == 0 else "* * * * * *", id=f"f-{i}")(tick)

    async def one_transaction() -> tuple[int, int]:
        t = s.store.transport  # type: ignore[attr-defined]
        cut = datetime.fromtimestamp(time.time() - 30 * 86400, UTC)
        params = {"claims": datetime.fromtimestamp(time.time() - 7 * 86400, UTC), "runs": cut,
                  "per_job": 1000}
        counts: list[int] = []

        async def go(cur: Any, now: datetime) -> None:
            for q in ONE_TRANSACTION:
                await cur.execute(q.format(s=f'"{t.schema}"'), params if "%(" in q else None)
                counts.append(cur.rowcount)

        await t.run(go, deadline=None)
        return counts[1], counts[2] + counts[3]

    async def go() -> dict[str, Any]:
        async with s:
            await asyncio.sleep(IDLE + 3)
            t = s.store.transport  # type: ignore[attr-defined]
            longest, longest_name = 0.0, ""
            pieces = 0
            real = t._prune

            async def timed(name: str, *args: Any, tx: bool = True) -> Any:
                nonlocal longest, longest_name, pieces
                t0 = time.perf_counter()
                try:
                    return await real(name, *args, tx=tx)
                finally:
                    took = time.perf_counter() - t0
                    if took > longest:
                        longest, longest_name = took, name
                    pieces += 1

            t._prune = timed
            began = time.time()
            error = None
            try:
                if a.mode == "pieces":
                    claims, runs = await s.store.prune(
                        claims_older_than=time.time() - 7 * 86400,
                        runs_older_than=time.time() - 30 * 86400, runs_per_job=1000)
                else:
                    claims, runs = await one_transaction()
            except Exception as exc:  # the peer's 120 s limit, at a large size
                claims = runs = 0
                error = f"{type(exc).__name__}: {exc}"
            ended = time.time()
            await asyncio.sleep(AFTER)
        if a.mode != "pieces":
            longest, longest_name, pieces = ended - began, "the transaction", 1
        return {"began": began, "ended": ended, "claims": claims, "runs": runs,
                "longest": longest, "longest_name": longest_name, "pieces": pieces,
                "error": error}

    out = asyncio.run(go())
    out["recs"] = recs
    Path(a.out).write_text(json.dumps(out))


def run_mode(mode: str, a: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    schema = f"prune_{mode}_{uuid.uuid4().hex[:6]}"
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    store = f"{pg}?schema={schema}"
    sys.path.insert(0, str(HERE.parent / "src"))
    from cronfleet.store import PostgresStore

    async def migrate() -> None:
        st = PostgresStore(pg, schema=schema)
        await st.open()
        await st.close()

    asyncio.run(migrate())
    t0 = time.perf_counter()
    with psycopg.connect(pg, autocommit=True) as conn:
        for stmt in FILL.format(s=f'"{schema}"', jobs=a.jobs, runs=a.runs).split(";"):
            if stmt.strip():
                conn.execute(stmt)  # type: ignore[call-overload]
    filled = time.perf_counter() - t0
    out = Path(f"/tmp/cf-prune-{schema}.json")
    try:
        subprocess.run([sys.executable, __file__, "--child", "--mode", mode, "--store", store,
                        "--firing", str(a.firing), "--out", str(out)], check=True)
        data = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
        pg_exec(pg, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    began, ended = data["began"], data["ended"]
    idle = [t - s for s, t in data["recs"] if began - IDLE <= s < began]
    during = [t - s for s, t in data["recs"] if began <= s < ended]
    expected_during = a.firing * sum(1 for k in range(int(began) + 1, int(ended) + 1))
    return {"mode": mode, "runs": a.runs, "jobs": a.jobs, "fill_s": filled,
            "took_s": ended - began, "claims": data["claims"], "runs_deleted": data["runs"],
            "pieces": data["pieces"], "longest_piece_s": data["longest"],
            "longest_piece": data["longest_name"],
            "error": data["error"], "idle_p50": pct(idle, 50), "idle_p99": pct(idle, 99),
            "during_p50": pct(during, 50), "during_p99": pct(during, 99),
            "fired_during": len(during), "due_during": expected_during,
            "load": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2_000_000)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--firing", type=int, default=300)
    ap.add_argument("--modes", nargs="+", default=["pieces", "one-transaction"])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    print(f"{a.runs:,} runs and {a.runs:,} claims of {a.jobs:,} jobs past retention; "
          f"{a.firing} every-second jobs firing in the pruning process; load {os.getloadavg()}")
    results = []
    for mode in a.modes:
        r = run_mode(mode, a)
        results.append(r)
        ms = 1000
        print(f"  {mode:16} pass {r['took_s']:.1f} s ({r['claims']:,} claims, "
              f"{r['runs_deleted']:,} runs, {r['pieces']} piece(s), longest "
              f"{r['longest_piece_s'] * ms:.0f} ms: {r['longest_piece']})"
              f"{' ERROR ' + r['error'] if r['error'] else ''}"
              f"; firing p50/p99 idle {r['idle_p50'] * ms:.1f}/{r['idle_p99'] * ms:.1f} ms, "
              f"during {r['during_p50'] * ms:.1f}/{r['during_p99'] * ms:.1f} ms "
              f"({r['fired_during']:,} of {r['due_during']:,} fired); fill {r['fill_s']:.0f} s")
    if len(results) == 2 and results[0]["took_s"]:
        p, o = results
        print(f"  one transaction / pieces: pass {o['took_s'] / p['took_s']:.2f}x, firing p99 "
              f"during {o['during_p99'] / p['during_p99']:.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
