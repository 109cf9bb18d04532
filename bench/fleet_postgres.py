"""Fleet on PostgreSQL: two processes sharing one database, cronfleet vs APScheduler 4.

    .venv/bin/python bench/fleet_postgres.py                 # both systems, ~4 minutes
    .venv/bin/python bench/fleet_postgres.py --quick         # 5 s windows, smoke run
    .venv/bin/python bench/fleet_postgres.py --only periodic1k --systems cronfleet
    .venv/bin/python bench/fleet_postgres.py --only minute100k   # opt-in, ~2 minutes
    .venv/bin/python bench/fleet_postgres.py --rev HEAD~3 --systems cronfleet  # committed src/
    .venv/bin/python bench/fleet_postgres.py --only share300 --systems cronfleet  # 3 processes
    .venv/bin/python bench/fleet_postgres.py --only soak300 --systems cronfleet --hogs 2
        # 3 minutes beside CPU hogs: instances declared lost (false losses), gaps, duplicates
    .venv/bin/python bench/fleet_postgres.py --only soak600 --systems cronfleet --hogs 2
        # the same for 10 minutes (#26's soak), ~11 minutes

Database: ``CRONFLEET_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
each (workload, system) run gets its own schema, dropped afterwards.

cronfleet runs as shipped: ``Scheduler(store="postgresql://…?schema=…")`` in each process,
claims, leases and the run ledger on. The peer is APScheduler 4.0.0a6, the fleet setup its
documentation describes: ``AsyncScheduler`` with ``SQLAlchemyDataStore`` (asyncpg engine)
and ``AsyncpgEventBroker``, in two processes, tuned to fire everything: an ``async``
executor, ``max_running_jobs=None``, ``misfire_grace_time=None``, ``CoalescePolicy.all``,
``max_concurrent_jobs=10000``. Its dependencies live in ``bench/.venv-aps4`` (created
here on first use; git-ignored by a ``.gitignore`` inside it).

Both systems schedule intervals on the same epoch grid and record, as the handler's first
statement, ``time.time()`` next to the slot the scheduler says it runs (cronfleet
``ctx.slot``, APScheduler ``current_job.get().scheduled_fire_time``). Lateness = that time
minus the slot. Window: the slots in ``[W0, W0 + D)`` where W0 = 2 s after the last
process is ready (both have scheduled everything); "fired" = distinct (job, slot) pairs run
in the window / expected; duplicates = runs beyond the first of a pair. Percentiles are
nearest-rank. For cronfleet the duplicates are also counted from its ledger, and so are
the instances declared lost (``lost``: run rows ``interrupted / instance_lost``, and the
children's ``is lost`` warnings, logged to a file each): with every process alive to the
end, any of them is a false loss. ``--hogs N`` runs N busy-looping processes beside the
fleet (both cores taken: a starved event loop); ``--instance-ttl`` sets the children's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_redis import stop_children
from stats import pct

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
APS_VENV = HERE / ".venv-aps4"
APS_REQS = [
    "apscheduler==4.0.0a6",
    # versions of its time: newer anyio breaks its asyncpg broker (start_soon from a callback)
    "anyio>=4.4,<4.10",
    "sqlalchemy[asyncio]>=2,<2.1",
    "asyncpg>=0.29",
    "sniffio>=1.3",
]
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    jobs: int
    every: int  # seconds between slots of one job (epoch grid)
    window: float  # seconds of slots measured
    quick_window: float
    spread: bool = False  # job i fires at second i % 60 of each minute
    target: str = ""
    procs: int = 2  # scheduler processes on the one database


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "periodic1k",
            "2 processes, 1,000 schedules due every second",
            1000,
            1,
            20,
            5,
            target="100% fired, 0 duplicates, p99 <= 50 ms",
        ),
        Workload(
            "burst10k",
            "2 processes, 10,000 schedules due at the same instant",
            10_000,
            30,
            1,
            1,
            target="100% fired, p99 <= 1 s",
        ),
        Workload(
            "minute100k",
            "2 processes, 100,000 schedules once a minute, spread over the minute",
            100_000,
            60,
            60,
            60,
            spread=True,
            target="100% fired, p99 <= 100 ms, start-up <= 5 s",
        ),
        Workload(
            "soak300",
            "3 processes, 300 schedules due every second for 3 minutes (with --hogs)",
            300,
            1,
            180,
            10,
            target="100% fired, 0 duplicates, 0 instances declared lost",
            procs=3,
        ),
        Workload(
            "soak600",
            "3 processes, 300 schedules due every second for 10 minutes (with --hogs)",
            300,
            1,
            600,
            10,
            target="100% fired, 0 duplicates, 0 instances declared lost",
            procs=3,
        ),
        Workload(
            "share300",
            "3 processes, 300 schedules due every second: the share each runs",
            300,
            1,
            20,
            5,
            target="100% fired, 0 duplicates, each process 25-42 % of the runs",
            procs=3,
        ),
    )
}
DEFAULT_ONLY = ["periodic1k", "burst10k"]


# -- children: one scheduler process each ---------------------------------------------


async def wait_for_stop() -> None:
    """Run until the parent writes a line (or closes) our stdin."""
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def child_cronfleet(a: argparse.Namespace) -> None:
    sys.path.insert(0, a.src or str(ROOT / "src"))
    from cronfleet import RunContext, Scheduler

    started = time.time()
    recs: list[tuple[str, float, float]] = []
    logging.basicConfig(filename=f"{a.out}.log", level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    ttl = {} if a.instance_ttl is None else {"instance_ttl": a.instance_ttl}
    s = Scheduler(store=a.store, instance_id=f"bench{a.index}:{os.getpid()}", **ttl)

    async def tick(ctx: RunContext) -> None:
        recs.append((ctx.job_id, ctx.slot.timestamp(), time.time()))

    for i in range(a.jobs):
        schedule = f"{i % 60} * * * * *" if a.spread else f"{a.every}s"
        s.job(schedule, id=f"j-{i}")(tick)

    async def go() -> None:
        async with s:
            print(f"READY {time.time() - started:.3f}", flush=True)
            await wait_for_stop()

    asyncio.run(go())
    Path(a.out).write_text(json.dumps({"recs": recs, "errors": s.stats.store_errors}))


APS_RECS: list[tuple[str, float, float]] = []
_APS: dict[str, Any] = {}


async def aps_tick() -> None:
    """APScheduler 4 stores a reference to its task: a module-level function."""
    job = _APS["current_job"].get()
    APS_RECS.append((job.schedule_id, job.scheduled_fire_time.timestamp(), time.time()))


def child_aps4(a: argparse.Namespace) -> None:
    from datetime import UTC, datetime

    from apscheduler import (  # type: ignore[import-not-found]
        AsyncScheduler,
        CoalescePolicy,
        ConflictPolicy,
        TaskDefaults,
        current_job,
    )
    from apscheduler.datastores.sqlalchemy import (  # type: ignore[import-not-found]
        SQLAlchemyDataStore,
    )
    from apscheduler.eventbrokers.asyncpg import (  # type: ignore[import-not-found]
        AsyncpgEventBroker,
    )
    from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-not-found]
    from apscheduler.triggers.interval import IntervalTrigger  # type: ignore[import-not-found]
    from sqlalchemy.ext.asyncio import create_async_engine  # type: ignore[import-not-found]

    started = time.time()
    url = a.store.replace("postgresql://", "postgresql+asyncpg://", 1).split("?")[0]
    _APS["current_job"] = current_job

    async def go() -> None:
        engine = create_async_engine(url, pool_size=10)
        store = SQLAlchemyDataStore(engine, schema=a.schema)
        broker = AsyncpgEventBroker.from_async_sqla_engine(engine)
        defaults = TaskDefaults(
            job_executor="async", max_running_jobs=None, misfire_grace_time=None
        )
        async with AsyncScheduler(
            store,
            broker,
            identity=f"aps{a.index}-{os.getpid()}",
            max_concurrent_jobs=10_000,
            task_defaults=defaults,
        ) as sched:
            if a.index == 0:  # one process declares the schedules, both run them
                first = datetime.fromtimestamp(math.ceil(time.time() / a.every) * a.every, UTC)
                for i in range(a.jobs):
                    trigger = (
                        CronTrigger(second=i % 60, timezone="UTC")
                        if a.spread
                        else IntervalTrigger(seconds=a.every, start_time=first)
                    )
                    await sched.add_schedule(
                        aps_tick,
                        trigger,
                        id=f"j-{i}",
                        coalesce=CoalescePolicy.all,
                        misfire_grace_time=None,
                        conflict_policy=ConflictPolicy.do_nothing,
                    )
            await sched.start_in_background()
            print(f"READY {time.time() - started:.3f}", flush=True)
            await wait_for_stop()
        await engine.dispose()

    asyncio.run(go())
    Path(a.out).write_text(json.dumps({"recs": APS_RECS, "errors": 0}))


# -- the parent: run, measure, print ----------------------------------------------------


def aps_python() -> Path:
    """The APScheduler 4 virtualenv's interpreter, created on first use."""
    py = APS_VENV / "bin" / "python"
    if not py.exists():
        print(f"creating {APS_VENV} for APScheduler 4.0.0a6 ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(APS_VENV)], check=True)
        (APS_VENV / ".gitignore").write_text("*\n")
    stamp = APS_VENV / ".cronfleet-reqs"
    if not stamp.exists() or stamp.read_text() != "\n".join(APS_REQS):
        subprocess.run([str(py), "-m", "pip", "install", "-q", *APS_REQS], check=True)
        stamp.write_text("\n".join(APS_REQS))
    return py


def pg_exec(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def ledger_duplicates(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM \"{schema}\".runs WHERE status = 'succeeded' "  # type: ignore[arg-type]
            "GROUP BY job_id, slot HAVING count(*) > 1) d"
        ).fetchone()
    return int(row[0]) if row else 0


def ledger_lost(url: str, schema: str) -> int:
    """Run rows a survivor wrote for an instance it declared lost."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM \"{schema}\".runs WHERE reason = 'instance_lost'"  # type: ignore[arg-type]
        ).fetchone()
    return int(row[0]) if row else 0


def ledger_outcomes(url: str, schema: str) -> dict[str, int]:
    """Run rows by ``status/reason`` (what became of the slots that did not run)."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT status, coalesce(reason, ''), count(*) FROM \"{schema}\".runs "  # type: ignore[arg-type]
            "GROUP BY 1, 2 ORDER BY 3 DESC"
        ).fetchall()
    return {f"{st}/{why}".rstrip("/"): int(n) for st, why, n in rows}


def hogs(n: int) -> list[subprocess.Popen[str]]:
    """``n`` processes spinning a CPU each (stopped with ``stop_hogs``)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_hogs(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def run_one(
    w: Workload, system: str, base_url: str, quick: bool, src: str | None = None,
    n_hogs: int = 0, instance_ttl: str | None = None,
) -> dict[str, Any]:
    schema = f"bench_{system}_{w.name}_{uuid.uuid4().hex[:6]}"
    window = w.quick_window if quick else w.window
    python = str(aps_python()) if system == "aps4" else sys.executable
    if system == "aps4":
        pg_exec(base_url, f'CREATE SCHEMA "{schema}"')
    store = f"{base_url}{'&' if '?' in base_url else '?'}schema={schema}"
    tmp = Path(tempfile.mkdtemp(prefix="cf-bench-"))
    procs: list[subprocess.Popen[str]] = []
    startup: list[float] = []

    def ready(p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"{system} child failed to start (exit {p.wait()})")
        startup.append(float(line.split()[1]))

    for i in range(w.procs):
        cmd = [python, str(Path(__file__).resolve()), "--child", system, "--index", str(i)]
        cmd += ["--store", store, "--schema", schema, "--jobs", str(w.jobs)]
        cmd += ["--every", str(w.every), "--out", str(tmp / f"{i}.json")]
        if w.spread:
            cmd.append("--spread")
        if src and system == "cronfleet":
            cmd += ["--src", src]
        if instance_ttl and system == "cronfleet":
            cmd += ["--instance-ttl", instance_ttl]
        procs.append(
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
        if i == 0 and system == "aps4":  # it creates its tables at start: one at a time
            ready(procs[0])
    hogging: list[subprocess.Popen[str]] = []
    try:
        for p in procs[1:] if system == "aps4" else procs:
            ready(p)
        hogging = hogs(n_hogs)
        ready_at = time.time()
        if w.every >= 30 and not w.spread:  # one instant: the next boundary after warm-up
            w0 = math.ceil((ready_at + 2) / w.every) * w.every
        else:
            w0 = math.ceil(ready_at) + 2
        w1 = w0 + window
        # late runs still count if their slot is in the window: leave time for them
        time.sleep(max(w1 + (10 if w.every < 30 else 25) - time.time(), 0))
    finally:
        stop_hogs(hogging)
        stop_children(procs)
    recs: list[tuple[str, float, float]] = []
    per_proc: list[list[tuple[str, float, float]]] = []
    for i in range(w.procs):
        f = tmp / f"{i}.json"
        mine = [tuple(r) for r in json.loads(f.read_text())["recs"]] if f.exists() else []
        per_proc.append(mine)  # type: ignore[arg-type]
        recs += mine  # type: ignore[arg-type]
    if w.spread:
        expected = w.jobs * window / 60
    elif w.every >= 30:
        expected = w.jobs * len(range(int(w0), int(w1), w.every))
    else:
        expected = w.jobs * window
    inside = [r for r in recs if w0 - 1e-6 <= r[1] < w1 - 1e-6]
    pairs = {(j, round(s, 3)) for j, s, _ in inside}
    late = [t - s for _, s, t in inside]
    out = {
        "workload": w.name,
        "system": system,
        "expected": int(expected),
        "fired": len(pairs),
        "fired_pct": 100.0 * len(pairs) / expected if expected else math.nan,
        "duplicates": len(inside) - len(pairs),
        "p50": pct(late, 50),
        "p99": pct(late, 99),
        "max": max(late) if late else math.nan,
        "startup": max(startup) if startup else math.nan,
        # the share of the window's runs each process ran (work spreading)
        "shares": [
            round(100.0 * sum(1 for r in mine if w0 - 1e-6 <= r[1] < w1 - 1e-6)
                  / max(len(inside), 1), 1)
            for mine in per_proc
        ],
    }
    if system == "cronfleet":
        out["ledger_duplicates"] = ledger_duplicates(base_url, schema)
        out["lost_rows"] = ledger_lost(base_url, schema)
        out["outcomes"] = ledger_outcomes(base_url, schema)
        logs = [tmp / f"{i}.json.log" for i in range(w.procs)]
        text = "".join(f.read_text() for f in logs if f.exists())
        out["declared_lost"] = text.count(" is lost: ")
        out["lag_warnings"] = text.count("the event loop is")
        out["heartbeat_failures"] = text.count("heartbeat failed")
        out["warnings"] = text.count(" WARNING ")
        out["missing"] = int(expected) - len(pairs)
    pg_exec(base_url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return out


def fmt_s(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x * 1000:.1f} ms" if abs(x) < 1 else f"{x:.2f} s"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--child", choices=("cronfleet", "aps4"))
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--store")
    p.add_argument("--schema")
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--spread", action="store_true")
    p.add_argument("--out")
    p.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=DEFAULT_ONLY)
    p.add_argument("--systems", nargs="*", choices=("cronfleet", "aps4"), default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="also write the results here")
    p.add_argument(
        "--rev", help="benchmark cronfleet as committed at REV (git archive to a temp dir)"
    )
    p.add_argument("--src", help=argparse.SUPPRESS)
    p.add_argument("--hogs", type=int, default=0,
                   help="busy-looping processes beside the fleet while it runs")
    p.add_argument("--instance-ttl", default=None, help="the children's (default: cronfleet's)")
    a = p.parse_args()
    if a.child == "cronfleet":
        child_cronfleet(a)
        return
    if a.child == "aps4":
        child_aps4(a)
        return
    base = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    systems = a.systems or ["cronfleet", "aps4"]
    snapshot = None
    if a.rev:
        snapshot = tempfile.mkdtemp(prefix="cronfleet-rev-")
        archive = subprocess.run(
            ["git", "archive", "--format=tar", a.rev, "src"], cwd=ROOT, capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", snapshot], input=archive, check=True)
        a.src = os.path.join(snapshot, "src")
        print(f"cronfleet as committed at {a.rev}")
    try:
        _run_all(a, base, systems)
    finally:
        if snapshot:
            shutil.rmtree(snapshot, ignore_errors=True)


def _run_all(a: argparse.Namespace, base: str, systems: list[str]) -> None:
    results = []
    for name in a.only:
        w = WORKLOADS[name]
        for system in systems:
            if system == "aps4" and name == "minute100k":
                print("aps4 minute100k: not run (declaring 100,000 schedules takes too long)")
                continue
            print(f"running {name} on {system} ...", flush=True)
            res = run_one(w, system, base, a.quick, a.src, a.hogs, a.instance_ttl)
            results.append(res)
            print("   ", json.dumps({k: v for k, v in res.items() if k not in ("workload",)}))
    print()
    print(
        f"{'workload':<12} {'system':<10} {'fired':>16} {'dups':>5} {'p50':>10} {'p99':>10} "
        f"{'max':>10} {'start-up':>9}"
    )
    for r in results:
        fired = f"{r['fired']}/{r['expected']} ({r['fired_pct']:.1f}%)"
        print(
            f"{r['workload']:<12} {r['system']:<10} {fired:>16} {r['duplicates']:>5} "
            f"{fmt_s(r['p50']):>10} {fmt_s(r['p99']):>10} {fmt_s(r['max']):>10} "
            f"{fmt_s(r['startup']):>9}  shares % {r['shares']}"
        )
    by = {(r["workload"], r["system"]): r for r in results}
    for name in a.only:
        cf, ap = by.get((name, "cronfleet")), by.get((name, "aps4"))
        if cf and ap:
            ratio_p99 = (
                ap["p99"] / cf["p99"] if cf["p99"] and not math.isnan(ap["p99"]) else math.nan
            )
            print(
                f"{name}: fired {cf['fired_pct']:.1f}% vs {ap['fired_pct']:.1f}% "
                f"(x{cf['fired_pct'] / max(ap['fired_pct'], 1e-9):.1f}); "
                f"p99 lateness {fmt_s(cf['p99'])} vs {fmt_s(ap['p99'])} (x{ratio_p99:.0f} lower)"
            )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
