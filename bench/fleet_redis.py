"""Fleet on Redis vs PostgreSQL: three cronfleet processes sharing one store, in the same run.

    .venv/bin/python bench/fleet_redis.py                  # every workload, both stores
    .venv/bin/python bench/fleet_redis.py --quick          # 5 s windows, smoke run
    .venv/bin/python bench/fleet_redis.py --only periodic1k --stores redis

Redis: a private ``redis-server`` started here on a free port in a temp dir, with AOF and
``appendfsync always`` (the setting docs/deployment.md recommends); never the shared 6379.
PostgreSQL: ``CRONFLEET_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
a fresh schema per run, dropped afterwards.

Each process runs ``Scheduler(store=URL)`` as shipped. The handler's first statement
records ``time.time()`` next to ``ctx.slot``; lateness = that minus the slot. Window: the
slots in ``[W0, W0 + D)``, W0 = 2 s after the last process is ready (one instant: the next
boundary after that). "fired" = distinct (job, slot) pairs run in the window / expected;
duplicates = handler runs beyond the first of a pair (counted on the handler side).
Start-up = the slowest process's time from its first line to ``READY`` (jobs registered,
``start()`` done: store opened, job state rows ensured). Percentiles are nearest-rank.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stats import pct

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
PROCESSES = 3


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    jobs: int
    every: int  # seconds between slots of one job (epoch grid)
    window: float
    quick_window: float
    spread: bool = False  # job i fires at second i % 60 of each minute
    target: str = ""


WORKLOADS = {
    w.name: w
    for w in (
        Workload("periodic1k", "3 processes, 1,000 jobs every second", 1000, 1, 20, 5,
                 target="100% fired, 0 duplicates, p99 <= 20 ms"),
        Workload("burst10k", "3 processes, 10,000 jobs at one instant", 10_000, 30, 1, 1,
                 target="100% fired, p99 <= 300 ms"),
        Workload("minute100k", "3 processes, 100,000 jobs once a minute (spread)", 100_000,
                 60, 10, 5, spread=True, target="start-up <= 5 s"),
    )
}


# -- children ---------------------------------------------------------------------------


def child(a: argparse.Namespace) -> None:
    started = time.time()
    sys.path.insert(0, str(ROOT / "src"))
    from cronfleet import RunContext, Scheduler

    recs: list[tuple[str, float, float]] = []
    s = Scheduler(store=a.store, instance_id=f"bench{a.index}:{os.getpid()}")

    async def tick(ctx: RunContext) -> None:
        recs.append((ctx.job_id, ctx.slot.timestamp(), time.time()))

    for i in range(a.jobs):
        schedule = f"{i % 60} * * * * *" if a.spread else f"{a.every}s"
        s.job(schedule, id=f"j-{i}")(tick)

    async def go() -> None:
        async with s:
            print(f"READY {time.time() - started:.3f}", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    asyncio.run(go())
    Path(a.out).write_text(json.dumps({"recs": recs, "errors": s.stats.store_errors}))


# -- the stores ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed")
        self.dir = Path(tempfile.mkdtemp(prefix="cf-bench-redis-"))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--logfile", str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.5
            ):
                return
            time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def url(self, run: str) -> str:
        return f"redis://127.0.0.1:{self.port}/0?prefix={run}:"

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_exec(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def finish(redis: PrivateRedis | None, results: list[dict[str, Any]], path: str | None) -> None:
    """End of a fleet benchmark: the private server stopped, the results written to
    ``--json`` when asked (shared by fleet_redis.py and fleet_scale.py)."""
    if redis is not None:
        redis.close()
    if path:
        Path(path).write_text(json.dumps(results, indent=2))


def stop_children(procs: list[subprocess.Popen[str]], timeout: float = 300) -> None:
    """Tell every child to stop (``STOP`` on its stdin), then wait for each (killed past
    ``timeout`` seconds: 100,000 jobs take a while to stop)."""
    for p in procs:
        with contextlib.suppress(OSError):
            assert p.stdin is not None
            p.stdin.write("STOP\n")
            p.stdin.close()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()


def run_one(w: Workload, kind: str, redis: PrivateRedis | None, pg: str, quick: bool
            ) -> dict[str, Any]:
    run = f"bench_{w.name}_{uuid.uuid4().hex[:6]}"
    store = redis.url(run) if kind == "redis" and redis else f"{pg}?schema={run}"
    window = w.quick_window if quick else w.window
    tmp = Path(tempfile.mkdtemp(prefix="cf-bench-"))
    procs: list[subprocess.Popen[str]] = []
    startup: list[float] = []
    for i in range(PROCESSES):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--index", str(i),
               "--store", store, "--jobs", str(w.jobs), "--every", str(w.every),
               "--out", str(tmp / f"{i}.json")] + (["--spread"] if w.spread else [])
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"child failed to start (exit {p.wait()})")
            startup.append(float(line.split()[1]))
        ready_at = time.time()
        if w.every >= 30 and not w.spread:
            w0 = math.ceil((ready_at + 2) / w.every) * w.every
        else:
            w0 = math.ceil(ready_at) + 2
        w1 = w0 + window
        time.sleep(max(w1 + (10 if w.every < 30 else 20) - time.time(), 0))
    finally:
        stop_children(procs)
    recs: list[tuple[str, float, float]] = []
    errors = 0
    for i in range(PROCESSES):
        f = tmp / f"{i}.json"
        if f.exists():
            data = json.loads(f.read_text())
            recs += [tuple(r) for r in data["recs"]]  # type: ignore[misc]
            errors += int(data["errors"])
    shutil.rmtree(tmp, ignore_errors=True)
    if w.spread:  # job i fires at second i % 60: count the jobs of each second exactly
        per_second = [len(range(k, w.jobs, 60)) for k in range(60)]
        expected = sum(per_second[sec % 60] for sec in range(int(w0), int(w1)))
    elif w.every >= 30:
        expected = w.jobs * len(range(int(w0), int(w1), w.every))
    else:
        expected = w.jobs * window
    inside = [r for r in recs if w0 - 1e-6 <= r[1] < w1 - 1e-6]
    pairs = {(j, round(s, 3)) for j, s, _ in inside}
    late = [t - s for _, s, t in inside]
    if kind == "postgres":
        pg_exec(pg, f'DROP SCHEMA IF EXISTS "{run}" CASCADE')
    return {
        "workload": w.name, "store": kind, "expected": int(expected), "fired": len(pairs),
        "fired_pct": 100.0 * len(pairs) / expected if expected else math.nan,
        "duplicates": len(inside) - len(pairs), "p50": pct(late, 50), "p99": pct(late, 99),
        "max": max(late) if late else math.nan, "startup": max(startup),
        "store_errors": errors,
    }  # fmt: skip


def ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:.1f} ms"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--store")
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--spread", action="store_true")
    p.add_argument("--out")
    p.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=sorted(WORKLOADS))
    p.add_argument("--stores", nargs="*", choices=("redis", "postgres"),
                   default=["redis", "postgres"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    if a.child:
        child(a)
        return
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    redis = PrivateRedis() if "redis" in a.stores else None
    results = []
    try:
        for name in a.only:
            w = WORKLOADS[name]
            print(f"\n{w.title} (target: {w.target})", flush=True)
            by_store = {}
            for kind in a.stores:
                r = run_one(w, kind, redis, pg, a.quick)
                by_store[kind] = r
                results.append(r)
                print(
                    f"  {kind:9s} fired {r['fired']}/{r['expected']} ({r['fired_pct']:.2f}%), "
                    f"duplicates {r['duplicates']}, lateness p50 {ms(r['p50'])} p99 "
                    f"{ms(r['p99'])} max {ms(r['max'])}, start-up {r['startup']:.2f} s, "
                    f"store errors {r['store_errors']}", flush=True,
                )  # fmt: skip
            if len(by_store) == 2:
                rd, pq = by_store["redis"], by_store["postgres"]
                print(f"  ratio postgres/redis: p99 {pq['p99'] / rd['p99']:.2f}x, "
                      f"start-up {pq['startup'] / rd['startup']:.2f}x")
    finally:
        finish(redis, results, a.json)


if __name__ == "__main__":
    main()
