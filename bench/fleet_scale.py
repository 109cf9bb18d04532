"""What a fleet costs as it grows: the same jobs run by 1, 2 and 4 processes, per store.

    .venv/bin/python bench/fleet_scale.py                        # every store, 1/2/4 processes
    .venv/bin/python bench/fleet_scale.py --stores postgres --procs 1 4 --seconds 10
    .venv/bin/python bench/fleet_scale.py --json out.json
    .venv/bin/python bench/fleet_scale.py --saturate --procs 1 3 --seconds 60   # ceiling

The workload: ``--jobs`` (500) jobs every second, half of them an interval (``1s``) and
half a cron expression with seconds (``* * * * * *``), each process running
``Scheduler(store=URL)`` as shipped (the handler records ``time.time()`` next to
``ctx.slot``, as in fleet_redis.py). Stores: PostgreSQL (``CRONFLEET_BENCH_PG``, a
fresh schema per run), a private ``redis-server`` (AOF, ``appendfsync always``), SQLite
(a file in a temp dir).

Window: the slots in ``[W0, W0 + D)``, W0 = 2 s after the last process is ready.
Measured over the window, for the fleet as a whole:

- **CPU per fired slot**: user + system time of every process (``/proc/PID/stat`` at W0
  and W0 + D), divided by the distinct (job, slot) pairs run in the window;
- **store calls per fired slot**: calls of the Store contract's methods (each one
  transaction or script), counted in each process by wrapping the store's public
  coroutine methods, by the second they were made;
- fired share, duplicates (handler side), lateness p50 / p99 (nearest rank).

The ratios are against one process on the same store in the same run (#26's targets:
4 processes <= 1.3x the CPU and <= 1.2x the store calls of one, 100 % fired, 0
duplicates).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from fleet_redis import DEFAULT_PG, PrivateRedis, finish, pct, pg_exec, stop_children  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


# -- the child ----------------------------------------------------------------------------


def count_store_calls(store: Any, buckets: Counter[tuple[int, str]]) -> None:
    """Wrap each public coroutine method of ``store`` so that every call is counted in
    the bucket of the second it was made and its method's name."""
    for name in dir(type(store)):
        if name.startswith("_"):
            continue
        if not inspect.iscoroutinefunction(inspect.getattr_static(type(store), name, None)):
            continue  # (properties are not read: some raise before the store is open)
        method = getattr(store, name)

        def wrap(fn: Any, name: str) -> Any:
            @functools.wraps(fn)
            async def counted(*args: Any, **kw: Any) -> Any:
                buckets[(int(time.time()), name)] += 1
                return await fn(*args, **kw)

            return counted

        setattr(store, name, wrap(method, name))


def child(a: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from cronfleet import RunContext, Scheduler

    recs: list[tuple[str, float, float]] = []
    calls: Counter[tuple[int, str]] = Counter()
    s = Scheduler(store=a.store, instance_id=f"scale{a.index}:{os.getpid()}")
    count_store_calls(s.store, calls)

    async def tick(ctx: RunContext) -> None:
        recs.append((ctx.job_id, ctx.slot.timestamp(), time.time()))

    for i in range(a.jobs):
        schedule = "1s" if i % 2 == 0 else "* * * * * *"
        s.job(schedule, id=f"j-{i}")(tick)

    async def go() -> None:
        async with s:
            print("READY", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    asyncio.run(go())
    Path(a.out).write_text(json.dumps(
        {"recs": recs, "calls": [[sec, name, n] for (sec, name), n in calls.items()]}))


# -- the parent ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def sleep_until(t: float) -> None:
    time.sleep(max(t - time.time(), 0))


def run_one(kind: str, procs_n: int, jobs: int, seconds: int, redis: PrivateRedis | None,
            pg: str) -> dict[str, Any]:
    run = f"scale_{kind}_{procs_n}_{uuid.uuid4().hex[:6]}"
    tmp = Path(tempfile.mkdtemp(prefix="cf-scale-"))
    if kind == "redis":
        assert redis is not None
        store = redis.url(run)
    elif kind == "postgres":
        store = f"{pg}?schema={run}"
    else:
        store = f"sqlite:///{tmp / 'fleet.db'}"
    procs: list[subprocess.Popen[str]] = []
    for i in range(procs_n):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--index", str(i),
               "--store", store, "--jobs", str(jobs), "--out", str(tmp / f"{i}.json")]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    try:
        for p in procs:
            assert p.stdout is not None
            if not p.stdout.readline().startswith("READY"):
                raise RuntimeError(f"a child failed to start (exit {p.wait()})")
        w0 = math.ceil(time.time()) + 2
        w1 = w0 + seconds
        sleep_until(w0)
        cpu0 = sum(cpu_seconds(p.pid) for p in procs)
        sleep_until(w1)
        cpu1 = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(3)  # the window's last slots finish
    finally:
        stop_children(procs, 120)
    recs: list[tuple[str, float, float]] = []
    by_method: Counter[str] = Counter()
    for i in range(procs_n):
        f = tmp / f"{i}.json"
        if f.exists():
            data = json.loads(f.read_text())
            recs += [(j, s, t) for j, s, t in data["recs"]]
            for sec, name, n in data["calls"]:
                if w0 <= int(sec) < w1:
                    by_method[name] += n
    calls = sum(by_method.values())
    shutil.rmtree(tmp, ignore_errors=True)
    if kind == "postgres":
        pg_exec(pg, f'DROP SCHEMA IF EXISTS "{run}" CASCADE')
    inside = [r for r in recs if w0 - 1e-6 <= r[1] < w1 - 1e-6]
    pairs = {(j, round(s, 3)) for j, s, _ in inside}
    late = [t - s for _, s, t in inside]
    expected = jobs * seconds
    fired = len(pairs)
    return {
        "store": kind, "processes": procs_n, "jobs": jobs, "seconds": seconds,
        "expected": expected, "fired": fired, "fired_pct": 100.0 * fired / expected,
        "duplicates": len(inside) - fired, "p50": pct(late, 50), "p99": pct(late, 99),
        "cpu_ms_per_slot": 1000 * (cpu1 - cpu0) / fired if fired else math.nan,
        "calls_per_slot": calls / fired if fired else math.nan,
        "cpu_s": cpu1 - cpu0, "calls": calls,
        "calls_by_method": dict(by_method.most_common()),
    }  # fmt: skip


CEILING_P99 = 0.1  # seconds: #26's lateness bound for the throughput ceiling
STEPS = [2500, 5000, 7500, 10000, 12500, 15000]


def held(r: dict[str, Any]) -> bool:
    return bool(r["fired"] == r["expected"] and r["duplicates"] == 0 and r["p99"] <= CEILING_P99)


def saturate(a: argparse.Namespace) -> None:
    """``--saturate``: each store, each process count, the job counts in order until one is
    not held; the ceiling is the last one held (``--seconds`` windows; #26 asks 60 s)."""
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    steps = sorted(a.saturate or STEPS)
    redis = PrivateRedis() if "redis" in a.stores else None
    results: list[dict[str, Any]] = []
    print(f"throughput ceiling: every-second jobs {steps}, {a.seconds} s windows, processes "
          f"{a.procs}; held = 100 % fired, 0 duplicates, p99 <= {CEILING_P99 * 1000:.0f} ms",
          flush=True)
    try:
        for kind in a.stores:
            for n in a.procs:
                ceiling = 0
                for jobs in steps:
                    r = run_one(kind, n, jobs, a.seconds, redis, pg)
                    r["held"] = held(r)
                    results.append(r)
                    print(f"  {kind:8s} {n} proc  {jobs:>6} jobs/s  fired {r['fired_pct']:.2f}%"
                          f", dup {r['duplicates']}, p50 {r['p50'] * 1000:.1f} ms, p99 "
                          f"{r['p99'] * 1000:.1f} ms  {'held' if r['held'] else 'NOT held'}",
                          flush=True)  # fmt: skip
                    if not r["held"]:
                        break
                    ceiling = jobs
                print(f"  {kind:8s} {n} proc  ceiling: {ceiling or 'below ' + str(steps[0])} "
                      "slots/s", flush=True)
    finally:
        finish(redis, results, a.json)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--procs", type=int, nargs="*", default=[1, 2, 4])
    p.add_argument("--stores", nargs="*", choices=("postgres", "redis", "sqlite"),
                   default=["postgres", "redis", "sqlite"])
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--saturate", type=int, nargs="*", metavar="JOBS",
                   help="the throughput ceiling: for each store and process count, the "
                        "highest of these job counts (every second) held with p99 lateness "
                        f"<= {CEILING_P99 * 1000:.0f} ms, 100 %% fired and 0 duplicates "
                        "(default: 2500 5000 7500 10000 12500 15000)")
    a = p.parse_args()
    if a.child:
        child(a)
        return
    if a.saturate is not None:
        saturate(a)
        return
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    redis = PrivateRedis() if "redis" in a.stores else None
    results: list[dict[str, Any]] = []
    print(f"{a.jobs} jobs every second (half '1s', half '* * * * * *'), {a.seconds} s "
          f"windows, processes {a.procs}", flush=True)
    try:
        for kind in a.stores:
            one: dict[str, Any] | None = None
            for n in a.procs:
                r = run_one(kind, n, a.jobs, a.seconds, redis, pg)
                results.append(r)
                one = one or r
                cpu_x = r["cpu_ms_per_slot"] / one["cpu_ms_per_slot"]
                calls_x = r["calls_per_slot"] / one["calls_per_slot"]
                r["cpu_ratio"], r["calls_ratio"] = cpu_x, calls_x
                print(
                    f"  {kind:8s} {n} proc  fired {r['fired']}/{r['expected']} "
                    f"({r['fired_pct']:.2f}%), dup {r['duplicates']}, lateness p50 "
                    f"{r['p50'] * 1000:.1f} ms p99 {r['p99'] * 1000:.1f} ms, CPU "
                    f"{r['cpu_ms_per_slot']:.3f} ms/slot ({cpu_x:.2f}x), store calls "
                    f"{r['calls_per_slot']:.4f}/slot ({calls_x:.2f}x)", flush=True,
                )  # fmt: skip
                per_s = {m: round(c / a.seconds, 2) for m, c in r["calls_by_method"].items()}
                print(f"    store calls per second: {per_s}", flush=True)
    finally:
        finish(redis, results, a.json)


if __name__ == "__main__":
    main()
