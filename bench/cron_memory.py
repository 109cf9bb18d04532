"""Memory and build time per schedule: cronfleet.cron against croniter and cronsim.

    .venv/bin/python bench/cron_memory.py            # 5,000 per family, 100,000 API jobs
    .venv/bin/python bench/cron_memory.py --n 20000 --catalog-jobs 0
    .venv/bin/python bench/cron_memory.py --peer-src /tmp/before/src   # before/after

Every figure comes from a fresh child process (so one family's tables do not serve the
next): it generates the texts, then builds one schedule per text and asks it for one
``next()`` (what a scheduler does when it plans a job), keeping every object alive, and
reports per schedule:

- ``B/expr``: the growth of the memory tracemalloc sees (a second child, tracing on), and
  ``RSS/expr``: the growth of the resident set (the first child, tracing off), divided
  by the number of schedules;
- ``µs/expr``: the time to build one and answer its first ``next()`` (tracing off);
- ``after walk``: the same memory after a ``next()`` from the 1st of each month of 2025
  (per-schedule caches, if any, fill as months are visited).

Families: ``cron mix`` (distinct expressions of the shapes users write: daily, weekdays,
weekly, monthly, ``L``, ``nW``, ``x#n``, hour ranges, steps, quarterly, 6 fields, in four
zones), ``monthly`` (``m h D * *``, all distinct), ``hourly m:s`` (``s m * * * *``: the
hourly "spread minute and second" set, 3,600 distinct texts), ``intervals``
(``@every Ns``), ``sentences`` (English and French, ``from_text``; the 24 x 60 times of
four forms), ``compositions`` (``parse_composed`` of ``a | b | except MM-DD``, all
distinct), and ``catalog`` (API jobs:
``catalog.build_job`` with the ``HttpRuntime`` a service passes + ``Scheduler.add_job`` into
a ``Scheduler(store=MemoryStore())``, per job: the schedule, the HTTP handler, the job's
fields; the schedules of the cron mix, all distinct).

Peers, in the same run, on the same expressions (each spelled the way it accepts them;
one it refuses is left out and the count says so): ``croniter`` (an iterator from the
start instant, one ``get_next``), ``cronsim`` (a ``CronSim``, one ``next``), when
installed. ``--peer-src DIR`` runs cronfleet from another checkout's ``src`` (e.g. the code
before a change: ``git worktree add /tmp/before main``) as one more engine, ``before``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo")
START = datetime(2025, 1, 1, 0, 0, 7, tzinfo=UTC)
FAMILIES = ("cron mix", "monthly", "hourly m:s", "intervals", "sentences", "compositions")
CRON_FAMILIES = ("cron mix", "monthly", "hourly m:s")


# -- the texts -----------------------------------------------------------------------------

_SHAPES: tuple[Callable[[int, int, int], str], ...] = (
    lambda m, h, j: f"{m} {h} * * *",
    lambda m, h, j: f"{m} {h} * * 1-5",
    lambda m, h, j: f"{m} {h} * * {j % 7}",
    lambda m, h, j: f"{m} {h} {1 + j % 28} * *",
    lambda m, h, j: f"{m} {h} L * *",
    lambda m, h, j: f"{m} {h} {1 + j % 28}W * *",
    lambda m, h, j: f"{m} {h} * * {j % 7}#{1 + j % 4}",
    lambda m, h, j: f"{m} {h % 12}-{h % 12 + 8} * * 1-5",
    lambda m, h, j: f"{m % 15}/15 {h % 12}-{h % 12 + 10} * * *",
    lambda m, h, j: f"{m} {h} 1 */3 *",
    lambda m, h, j: f"{j % 60} {m} {h} * * *",
)


def cron_mix(n: int) -> list[tuple[str, str]]:
    """``n`` distinct (expression, zone) pairs, the shapes taken in turn."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    i = 0
    while len(out) < n:
        k = len(_SHAPES)
        j = i // k
        text = _SHAPES[i % k](j % 60, (j // 60) % 24, j // 7 + j)
        i += 1
        if text not in seen:
            seen.add(text)
            out.append((text, ZONES[len(out) % len(ZONES)]))
    return out


def texts(family: str, n: int) -> list[tuple[str, str]]:
    if family == "cron mix":
        return cron_mix(n)
    if family == "monthly":
        return [(f"{i % 60} {(i // 60) % 24} {1 + (i // 1440) % 28} * *", "UTC")
                for i in range(n)]
    if family == "hourly m:s":
        return [(f"{i % 60} {(i // 60) % 60} * * * *", "UTC") for i in range(n)]
    if family == "intervals":
        return [(f"@every {i + 1}s", "UTC") for i in range(n)]
    if family == "sentences":
        forms = (lambda h, m: f"every day at {h:02d}:{m:02d}",
                 lambda h, m: f"every weekday at {h:02d}:{m:02d}",
                 lambda h, m: f"tous les jours à {h}h{m:02d}",
                 lambda h, m: f"le {1 + (h + m) % 28} de chaque mois à {h}h{m:02d}")
        return [(forms[i % 4]((i // 4 // 60) % 24, (i // 4) % 60), ZONES[i % 4])
                for i in range(n)]
    if family == "compositions":
        return [(f"{i % 60} {(i // 60) % 24} * * 1-5 | {i % 60} {(i // 60 + 3) % 24} * * 6 "
                 f"| except {1 + (i // 1440) % 12:02d}-{10 + (i // 17280) % 18}", ZONES[i % 4])
                for i in range(n)]
    raise SystemExit(f"unknown family {family!r}")


# -- the engines (in the child) -------------------------------------------------------------

def _croniter_text(text: str) -> str:
    parts = text.split()
    if len(parts) == 6:  # croniter puts the seconds last
        parts = parts[1:] + parts[:1]
    return " ".join(parts)


def builder(engine: str, family: str) -> Callable[[str, str], Any]:
    """``(text, zone) -> object`` after one ``next()``; raises for a text it refuses."""
    if engine in ("cronfleet", "before"):
        from cronfleet.cron import from_text, parse, parse_composed

        if family == "sentences":
            def build(text: str, zone: str) -> Any:
                s = from_text(text, zone)
                s.schedule.next(START)
                return s
        elif family == "compositions":
            def build(text: str, zone: str) -> Any:
                c = parse_composed(text, zone)
                c.next(START)
                return c
        else:
            def build(text: str, zone: str) -> Any:
                e = parse(text, zone)
                e.next(START)
                return e
        return build
    if engine == "croniter":
        from croniter import croniter

        def build(text: str, zone: str) -> Any:
            it = croniter(_croniter_text(text), START.astimezone(ZoneInfo(zone)))
            it.get_next(datetime)
            return it
        return build
    if engine == "cronsim":
        from cronsim import CronSim

        def build(text: str, zone: str) -> Any:
            it = CronSim(text, START.astimezone(ZoneInfo(zone)))
            next(it)
            return it
        return build
    raise SystemExit(f"unknown engine {engine!r}")


def walk(engine: str, objs: list[Any]) -> None:
    """A ``next()`` from the 1st of each month of 2025 (cronfleet only: peers keep no
    per-month state; croniter and cronsim are iterators from one start)."""
    if engine not in ("cronfleet", "before"):
        return
    for month in range(1, 13):
        t = datetime(2025, month, 1, 0, 0, 7, tzinfo=UTC)
        for o in objs:
            sched = getattr(o, "schedule", o)  # a Sentence holds its schedule
            sched.next(t)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory(trace: bool) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] if trace else _rss()


def child(engine: str, family: str, n: int, trace: bool) -> dict[str, Any]:
    if family == "catalog":
        return catalog_child(n, trace)
    items = texts(family, n)
    build = builder(engine, family)
    for text, zone in items[:50]:  # warm up: imports, zones, the first tables
        try:
            build(text, zone)
        except Exception:
            continue
    if engine in ("cronfleet", "before"):
        from cronfleet.cron import parse

        for z in ZONES:  # the zones' day caches are shared by all: fill them first
            e = parse("0 0 * * *", z)
            for month in range(1, 13):
                e.next(datetime(2025, month, 1, 0, 0, 7, tzinfo=UTC))
    if trace:
        tracemalloc.start()
    m0 = _memory(trace)
    gc.disable()
    t0 = time.perf_counter()
    objs: list[Any] = []
    for text, zone in items:
        try:
            objs.append(build(text, zone))
        except Exception:  # a text the engine refuses: left out, and counted
            continue
    dt = time.perf_counter() - t0
    gc.enable()
    m1 = _memory(trace)
    walk(engine, objs)
    m2 = _memory(trace)
    k = max(len(objs), 1)
    return {"n": len(objs), "of": len(items), "us": dt / k * 1e6,
            "built": (m1 - m0) / k, "walked": (m2 - m0) / k}


def catalog_child(n: int, trace: bool) -> dict[str, Any]:
    from cronfleet.catalog import build_job
    from cronfleet.jobs.http import HttpRuntime
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.store import MemoryStore

    items = cron_mix(n)
    sched = Scheduler(store=MemoryStore())
    runtime = HttpRuntime(store=sched.store)  # as the service's catalog passes it
    for i, (text, zone) in enumerate(items[:20]):  # warm up
        build_job({"id": f"warm-{i}", "schedule": text, "timezone": zone,
                   "http": {"url": "https://example.com/hook"}}, runtime=runtime)
    if trace:
        tracemalloc.start()
    m0 = _memory(trace)
    gc.disable()
    t0 = time.perf_counter()
    for i, (text, zone) in enumerate(items):
        job = build_job({"id": f"job-{i:07d}", "schedule": text, "timezone": zone,
                         "http": {"url": f"https://example.com/hook/{i}", "method": "post"},
                         "description": f"customer job {i}"}, runtime=runtime)
        job.schedule.next(START)
        sched.add_job(job)
    dt = time.perf_counter() - t0
    gc.enable()
    m1 = _memory(trace)
    return {"n": n, "of": n, "us": dt / n * 1e6, "built": (m1 - m0) / n,
            "walked": float("nan")}


# -- the parent ------------------------------------------------------------------------------

def run_child(engine: str, family: str, n: int, trace: bool, src: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--child", engine, family, str(n)]
    if trace:
        cmd.append("--trace")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{engine} / {family} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="schedules per family")
    ap.add_argument("--catalog-jobs", type=int, default=100000, help="API jobs (0: skip)")
    ap.add_argument("--peer-catalog-jobs", type=int, default=20000,
                    help="API jobs for the --peer-src checkout")
    ap.add_argument("--peer-src", type=Path, help="another checkout's src: engine 'before'")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        engine, family, n = args.child
        print(json.dumps(child(engine, family, int(n), args.trace)))
        return

    ours = ROOT / "src"
    engines: list[tuple[str, Path]] = [("cronfleet", ours)]
    if args.peer_src is not None:
        engines.append(("before", args.peer_src.resolve()))
    peers = [p for p in ("croniter", "cronsim") if _installed(p)]
    print(f"memory and build time per schedule, {args.n:,} schedules per family, "
          f"python {sys.version.split()[0]}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("B = tracemalloc bytes, RSS = resident set growth; per schedule, after one "
          "next() and after a next() in each month of 2025\n")
    head = (f"{'family':<13} {'engine':<10} {'n':>7} {'B/expr':>9} {'RSS/expr':>9} "
            f"{'µs/expr':>8} {'B walked':>9} {'RSS walked':>10}")
    print(head)
    print("-" * len(head))
    families = [f for f in args.families.split(",") if f]
    for family in families:
        rows: dict[str, dict[str, Any]] = {}
        names = list(engines) + ([(p, ours) for p in peers] if family in CRON_FAMILIES
                                 else [])
        for engine, src in names:
            traced = run_child(engine, family, args.n, True, src)
            plain = run_child(engine, family, args.n, False, src)
            rows[engine] = {"traced": traced, "plain": plain}
            count = f"{plain['n']:,}" + ("" if plain["n"] == plain["of"] else "*")
            print(f"{family:<13} {engine:<10} {count:>7} {traced['built']:>9,.0f} "
                  f"{plain['built']:>9,.0f} {plain['us']:>8,.1f} "
                  f"{_walk(engine, traced['walked']):>9} "
                  f"{_walk(engine, plain['walked']):>10}", flush=True)
        _ratios(family, rows)
    if args.catalog_jobs:
        rows = {}
        for engine, src in engines:
            n = args.catalog_jobs if engine == "cronfleet" else args.peer_catalog_jobs
            traced = run_child(engine, "catalog", n, True, src)
            plain = run_child(engine, "catalog", n, False, src)
            rows[engine] = {"traced": traced, "plain": plain}
            print(f"{'catalog job':<13} {engine:<10} {n:>7,} {traced['built']:>9,.0f} "
                  f"{plain['built']:>9,.0f} {plain['us']:>8,.1f}", flush=True)
        _ratios("catalog job", rows)
    print("\n* the engine refused some of the texts: figures are over the ones it accepted")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _walk(engine: str, value: float) -> str:
    return f"{value:,.0f}" if engine in ("cronfleet", "before") else "-"


def _ratios(family: str, rows: dict[str, dict[str, Any]]) -> None:
    ours = rows["cronfleet"]
    out: list[str] = []
    times: list[str] = []
    for engine, row in rows.items():
        if engine == "cronfleet":
            continue
        b = row["traced"]["built"] / max(ours["traced"]["built"], 1)
        t = row["plain"]["us"] / max(ours["plain"]["us"], 1e-9)
        out.append(f"{engine} {b:,.1f}x")
        times.append(f"{engine} {t:,.1f}x")
    if out:
        print(f"{'':<13} bytes: {', '.join(out)} cronfleet's; time: {', '.join(times)}")


if __name__ == "__main__":
    main()
