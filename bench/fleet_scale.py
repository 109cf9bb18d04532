"""What a fleet costs as it grows: the same jobs run by 1, 2 and 4 processes, per store.

    .venv/bin/python bench/fleet_scale.py                        # every store, 1/2/4 processes
    .venv/bin/python bench/fleet_scale.py --stores postgres --procs 1 4 --seconds 10
    .venv/bin/python bench/fleet_scale.py --json out.json
    .venv/bin/python bench/fleet_scale.py --stores postgres --procs 1 4 --src /tmp/before/src
    .venv/bin/python bench/fleet_scale.py --saturate --procs 1 3 --seconds 60   # ceiling
    .venv/bin/python bench/fleet_scale.py --overload 7500 --stores sqlite postgres --seconds 60

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

``--overload CEILING`` (one process, SQLite and PostgreSQL): 2x ``CEILING`` every-second
jobs for ``--seconds``, then 3 of every 4 jobs are removed (the load drops to half the
ceiling) and 10 s more are watched. Measured: slots fired in the overload window and
their lateness p99 (#26: <= 1 s), the slots shed (``skipped / overloaded`` rows, and the
process's ``cronfleet_skips{reason="overloaded"}`` counter; summary records: one row for
many slots of a job, written when more skips wait than the writer keeps one by one),
**silent gaps** (a due slot with no final row in the ledger once the process stopped,
nor a summary of its job spanning it: the check reads the ``runs`` table directly; the
removed jobs are checked up to 2 s before their removal -- a job removed while its slot
is due has no slot any more), slots with two rows, and how long after the drop the
process is **back on time** (from then on every slot of every job left fired, p99 of
each second <= 100 ms; #26: <= 2 s). ``--no-drop``: the process is stopped at the end of
the window while still overloaded, and every slot due before its stop returned is
checked.
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

from fleet_redis import DEFAULT_PG, PrivateRedis, finish, pg_exec, stop_children  # noqa: E402
from stats import pct  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SRC_ENV = "CRONFLEET_BENCH_SRC"


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
    # the code measured: this checkout's, or the peer's given with --src (the children
    # inherit it through the environment; PYTHONPATH alone would lose to this insert)
    sys.path.insert(0, os.environ.get(SRC_ENV, str(ROOT / "src")))
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

    stop_at: list[float] = []

    async def go() -> None:
        async with s:
            print("READY", flush=True)
            while True:
                line = await asyncio.get_running_loop().run_in_executor(None,
                                                                        sys.stdin.readline)
                if line.strip() != "DROP":
                    stop_at.append(time.time())
                    break
                for i in range(a.jobs):  # --overload: the load drops to a quarter
                    if i % DROP_KEEP:
                        s.remove_job(f"j-{i}")

    asyncio.run(go())
    Path(a.out).write_text(json.dumps(
        {"recs": recs, "calls": [[sec, name, n] for (sec, name), n in calls.items()],
         "skips": s.stats.skips, "stop_at": stop_at[0] if stop_at else None}))


# -- the parent ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def sleep_until(t: float) -> None:
    time.sleep(max(t - time.time(), 0))


def redis_keys(store: str) -> tuple[Any, str]:
    """A client of the store URL's server and the URL's key prefix."""
    import redis as redis_py

    base, _, query = store.partition("?")
    prefix = dict(kv.split("=", 1) for kv in query.split("&") if kv).get("prefix", "cronfleet:")
    return redis_py.Redis.from_url(base, decode_responses=True), prefix


def redis_server_time(url: str) -> tuple[float, float]:
    """The Redis server's script time and its own CPU so far, in seconds (``INFO``: the
    ``EVALSHA`` calls' time, user + system CPU): every store call of the scheduler is a
    script, so their difference over a window is the server's work for its slots."""
    client, _ = redis_keys(url)
    try:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
        cpu = client.info("cpu")
        return (float(stats.get("usec", 0)) / 1e6,
                float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
    finally:
        client.close()


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
        server0 = redis_server_time(store) if kind == "redis" else None
        sleep_until(w1)
        cpu1 = sum(cpu_seconds(p.pid) for p in procs)
        server1 = redis_server_time(store) if kind == "redis" else None
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
        # Redis: the server's script time and CPU per fired slot, in µs
        "server_script_us_per_slot": (1e6 * (server1[0] - server0[0]) / fired
                                      if server0 and server1 and fired else None),
        "server_cpu_us_per_slot": (1e6 * (server1[1] - server0[1]) / fired
                                   if server0 and server1 and fired else None),
    }  # fmt: skip


def print_server(r: dict[str, Any]) -> None:
    if r.get("server_script_us_per_slot") is not None:
        print(f"    Redis server per fired slot: scripts {r['server_script_us_per_slot']:.1f} µs, "
              f"CPU {r['server_cpu_us_per_slot']:.1f} µs", flush=True)


DROP_KEEP = 4  # --overload: one job of every DROP_KEEP is kept when the load drops
TAIL = 10  # --overload: seconds watched after the drop
SUMMARY_REACH = 600  # --overload: summaries from this long before the window may span it
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
                    print_server(r)
                    if not r["held"]:
                        break
                    ceiling = jobs
                print(f"  {kind:8s} {n} proc  ceiling: {ceiling or 'below ' + str(steps[0])} "
                      "slots/s", flush=True)
    finally:
        finish(redis, results, a.json)


def ledger_rows(kind: str, store: str, schema: str, t0: float, t1: float
                ) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``(job, slot ms) -> (rows, rows not final, rows overloaded)`` of the scheduled
    slots in ``[t0, t1)``, read from the ``runs`` table itself (Redis: the run hashes
    of the store's slot index, the same rows the store's own reads list)."""
    if kind == "redis":
        return redis_ledger_rows(store, t0, t1)
    if kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(store.removeprefix("sqlite:///"))
        got = con.execute(
            "SELECT job_id, slot, count(*), sum(status IN ('running', 'pending')), "
            "sum(coalesce(reason, '') = 'overloaded') FROM runs WHERE manual = 0 AND "
            "slot >= ? AND slot < ? GROUP BY job_id, slot",
            (int(t0 * 1000), int(t1 * 1000))).fetchall()
        con.close()
    else:
        import psycopg

        with psycopg.connect(store.split("?")[0], autocommit=True) as conn:
            got = conn.execute(  # type: ignore[call-overload]
                f'SELECT job_id, (extract(epoch FROM slot) * 1000)::bigint, count(*), '
                f"count(*) FILTER (WHERE status IN ('running', 'pending')), "
                f"count(*) FILTER (WHERE reason = 'overloaded') FROM \"{schema}\".runs "
                f"WHERE NOT manual AND slot >= to_timestamp(%s) AND slot < to_timestamp(%s) "
                f"GROUP BY 1, 2", (t0, t1)).fetchall()
    return {(j, int(ms)): (int(n), int(open_ or 0), int(shed or 0))
            for j, ms, n, open_, shed in got}


def redis_runs(store: str, t0: float, t1: float | None, *fields: str) -> list[list[Any]]:
    """These fields of each run hash whose slot is in ``[t0, t1)`` (``None``: no end), by
    the store's slot index (``<prefix>slot``, scored by slot; store/redis/ops.py
    ``run_fields`` names the fields), 10,000 hashes a round trip."""
    client, prefix = redis_keys(store)
    out: list[list[Any]] = []
    try:
        end = "+inf" if t1 is None else f"({int(t1 * 1000)}"
        ids = client.zrangebyscore(f"{prefix}slot", int(t0 * 1000), end)
        for i in range(0, len(ids), 10_000):
            pipe = client.pipeline(transaction=False)
            for padded in ids[i:i + 10_000]:
                pipe.hmget(f"{prefix}r:{int(padded)}", *fields)
            out += pipe.execute()
    finally:
        client.close()
    return out


def redis_ledger_rows(store: str, t0: float, t1: float
                      ) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``ledger_rows`` on Redis: each run hash's job, slot, status, manual flag and
    reason."""
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for j, sl, st, ma, rs in redis_runs(store, t0, t1, "j", "sl", "st", "ma", "rs"):
        if j is None or ma == "1":
            continue
        n, still_open, shed = out.get((j, int(sl)), (0, 0, 0))
        out[(j, int(sl))] = (n + 1, still_open + (st in ("running", "pending")),
                             shed + (rs == "overloaded"))
    return out


def summaries_of(kind: str, store: str, schema: str, t0: float
                 ) -> dict[str, list[tuple[float, float, int]]]:
    """The summary records (one row for many slots: a ``result`` with ``count``,
    ``first``, ``last``; the writer's when more skips wait than it keeps one by one) of
    the scheduled slots from ``t0`` on, by job: ``(first s, last s, count)``. A due slot
    without a row of its own that one of its job's summaries spans is accounted for."""
    from datetime import datetime

    def ts(iso: str) -> float:
        return datetime.fromisoformat(iso).timestamp()

    got: list[tuple[str, str]] = []
    if kind == "redis":
        got = [(j, r) for j, ma, r in redis_runs(store, t0, None, "j", "ma", "r")
               if j is not None and ma != "1" and r and '"count"' in r]
    elif kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(store.removeprefix("sqlite:///"))
        got = con.execute("SELECT job_id, result FROM runs WHERE manual = 0 AND slot >= ? "
                          "AND json_extract(result, '$.count') IS NOT NULL",
                          (int(t0 * 1000),)).fetchall()
        con.close()
    else:
        import psycopg

        with psycopg.connect(store.split("?")[0], autocommit=True) as conn:
            got = [(j, json.dumps(r)) for j, r in conn.execute(  # type: ignore[call-overload]
                f'SELECT job_id, result FROM "{schema}".runs WHERE NOT manual AND '
                f"slot >= to_timestamp(%s) AND result ? 'count'", (t0,)).fetchall()]
    out: dict[str, list[tuple[float, float, int]]] = {}
    for j, raw in got:
        r = json.loads(raw)
        out.setdefault(j, []).append((ts(r["first"]), ts(r["last"]), int(r["count"] or 0)))
    return out


def claimed_of(kind: str, store: str, schema: str, pairs: list[tuple[str, int]]
               ) -> set[tuple[str, int]]:
    """Which of these ``(job, slot s)`` have a claim row (a silent gap with a claim was
    decided and its row lost; one without was never decided)."""
    if not pairs:
        return set()
    if kind == "redis":  # a job's claims: the hash <prefix>{job}:c, slot ms -> token
        client, prefix = redis_keys(store)
        try:
            pipe = client.pipeline(transaction=False)
            for j, sec in pairs:
                pipe.hexists(f"{prefix}{{{j}}}:c", str(sec * 1000))
            return {pair for pair, has in zip(pairs, pipe.execute(), strict=True) if has}
        finally:
            client.close()
    if kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(store.removeprefix("sqlite:///"))
        got = con.execute(
            "SELECT job_id, slot FROM claims WHERE slot IS NOT NULL AND slot >= ? AND slot <= ?",
            (min(s for _, s in pairs) * 1000, max(s for _, s in pairs) * 1000)).fetchall()
        con.close()
    else:
        import psycopg

        with psycopg.connect(store.split("?")[0], autocommit=True) as conn:
            got = conn.execute(  # type: ignore[call-overload]
                f'SELECT job_id, (extract(epoch FROM slot) * 1000)::bigint FROM "{schema}".claims '
                f"WHERE slot >= to_timestamp(%s) AND slot <= to_timestamp(%s)",
                (min(s for _, s in pairs), max(s for _, s in pairs))).fetchall()
    have = {(j, int(ms)) for j, ms in got}
    return {(j, s) for j, s in pairs if (j, s * 1000) in have}


def run_overload(kind: str, ceiling: int, seconds: int, pg: str, *, drop: bool = True,
                 redis: PrivateRedis | None = None) -> dict[str, Any]:
    """One process, 2 x ``ceiling`` every-second jobs for ``seconds``, then the drop
    (``drop=False``: stopped at the end of the window, still overloaded)."""
    jobs = 2 * ceiling
    run = f"overload_{kind}_{uuid.uuid4().hex[:6]}"
    tmp = Path(tempfile.mkdtemp(prefix="cf-overload-"))
    if kind == "redis":
        assert redis is not None
        store = redis.url(run)
    else:
        store = f"sqlite:///{tmp / 'fleet.db'}" if kind == "sqlite" else f"{pg}?schema={run}"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--store", store,
           "--jobs", str(jobs), "--out", str(tmp / "0.json")]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if not proc.stdout.readline().startswith("READY"):
            raise RuntimeError(f"the child failed to start (exit {proc.wait()})")
        w0 = math.ceil(time.time()) + 2
        w1 = w0 + seconds
        drop_at = w1 - 0.5
        end = w1 + TAIL if drop else w1
        load0 = os.getloadavg()[0]
        if drop:
            sleep_until(drop_at)
            proc.stdin.write("DROP\n")
            proc.stdin.flush()
        sleep_until(end)
        load1 = os.getloadavg()[0]
    finally:
        stop_children([proc], 300)

    data = json.loads((tmp / "0.json").read_text())
    stopped = data["stop_at"]  # every slot due when the stop was asked must have its row
    if not drop:
        end = math.floor(stopped) + 1
    rows = ledger_rows(kind, store, run, w0, end)
    kept = [f"j-{i}" for i in range(jobs) if i % DROP_KEEP == 0 or not drop]
    due = [(f"j-{i}", sec) for i in range(jobs) for sec in range(w0, w1 - 2)]
    due += [(j, sec) for j in kept for sec in range(w1 - 2, end) if sec <= stopped]
    summaries = summaries_of(kind, store, run, w0 - SUMMARY_REACH)
    missing = [(j, sec) for j, sec in due if (j, sec * 1000) not in rows
               and not any(a <= sec <= b for a, b, _ in summaries.get(j, ()))]
    summarised = sum(n for spans in summaries.values() for _, _, n in spans)
    gap_claimed = claimed_of(kind, store, run, missing)  # read before the store goes
    shutil.rmtree(tmp, ignore_errors=True)
    if kind == "postgres":
        pg_exec(pg, f'DROP SCHEMA IF EXISTS "{run}" CASCADE')
    gaps = len(missing)
    # where the gaps are: how many per second, relative to the window's end (w1) and to
    # the stop (seconds after the stop was asked are not checked)
    gaps_by_sec = Counter(sec for _, sec in missing)
    gap_seconds = [[sec - w1, n, round(stopped - sec, 3)] for sec, n in sorted(gaps_by_sec.items())]
    ran = {(j, round(sl)) for j, sl, _ in data["recs"]}
    gap_detail = {
        "claimed": len(gap_claimed), "ran": sum(1 for p in missing if p in ran),
        "interval_jobs": sum(1 for j, _ in missing if int(j[2:]) % 2 == 0),
        "sample": [j for j, _ in missing[:8]],
    } if missing else {}
    doubled = sum(1 for j, sec in due if rows.get((j, sec * 1000), (1,))[0] > 1)
    unfinished = sum(1 for j, sec in due if rows.get((j, sec * 1000), (0, 0))[1])
    shed_rows = sum(v[2] for v in rows.values())
    recs = [(j, s, t) for j, s, t in data["recs"] if w0 - 1e-6 <= s < end]
    during = [t - s for _, s, t in recs if s < w1 - 1e-6]
    pairs = {(j, round(s)) for j, s, _ in recs}
    late_by_sec: dict[int, list[float]] = {}
    for _, s, t in recs:
        if s >= w1 - 1e-6:
            late_by_sec.setdefault(round(s), []).append(t - s)
    on_time_from = None
    for sec in range(end - 1, w1 - 1, -1):  # the first second of the on-time tail
        lat = late_by_sec.get(sec, [])
        if len(lat) < len(kept) or pct(lat, 99) > CEILING_P99:
            break
        on_time_from = sec
    return {
        "store": kind, "jobs": jobs, "ceiling": ceiling, "seconds": seconds,
        "expected": jobs * seconds, "fired": len({p for p in pairs if p[1] < w1}),
        "duplicates": len(recs) - len(pairs), "p50": pct(during, 50), "p99": pct(during, 99),
        "shed_rows": shed_rows, "shed_counter": data["skips"].get("overloaded", 0),
        "summary_rows": sum(len(v) for v in summaries.values()), "summarised": summarised,
        "skips": data["skips"], "due_checked": len(due), "silent_gaps": gaps,
        "gap_seconds": gap_seconds,  # [second - w1, gaps, stop - second]
        "gap_detail": gap_detail,  # with a claim, run by a handler, of interval jobs, ids
        "two_rows": doubled, "not_final": unfinished,
        "back_on_time_s": None if on_time_from is None or not drop else on_time_from - drop_at,
        "dropped": drop,
        "tail": [[sec - w1, len(late_by_sec.get(sec, [])),
                  round(pct(late_by_sec.get(sec, []), 99) * 1000, 1)]
                 for sec in range(w1, end)],  # after the drop: second, fired, p99 ms
        "load": [round(load0, 2), round(load1, 2)],
    }  # fmt: skip


def overload(a: argparse.Namespace) -> None:
    """``--overload CEILING``: see the module's docstring."""
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    results: list[dict[str, Any]] = []
    then = ("stopped while overloaded" if a.no_drop else
            f"then {DROP_KEEP - 1} of {DROP_KEEP} jobs removed and {TAIL} s watched")
    print(f"overload: 2 x {a.overload} every-second jobs for {a.seconds} s, one process, {then}",
          flush=True)
    redis = PrivateRedis() if "redis" in a.stores else None
    try:
        for kind in a.stores:
            r = run_overload(kind, a.overload, a.seconds, pg, drop=not a.no_drop, redis=redis)
            results.append(r)
            if r["dropped"]:
                print(f"    after the drop (second, fired of {r['jobs'] // DROP_KEEP}, p99 ms): "
                      f"{r['tail']}", flush=True)
            print(f"    skips by reason: {r['skips']}", flush=True)
            if r["gap_seconds"]:
                print(f"    silent gaps by second (second - window end, gaps, stop - second): "
                      f"{r['gap_seconds']}; {r['gap_detail']}", flush=True)
            back = r["back_on_time_s"]
            back_text = ("(stopped)" if not r["dropped"] else "never" if back is None
                         else f"{back:.1f} s")
            print(f"  {kind:8s} {r['jobs']} jobs/s: fired {r['fired']}/{r['expected']}, "
                  f"p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms, shed "
                  f"{r['shed_rows']} rows (counter {r['shed_counter']}), summaries "
                  f"{r['summary_rows']} of {r['summarised']} slots, silent gaps "
                  f"{r['silent_gaps']} of {r['due_checked']} due, two rows {r['two_rows']}, "
                  f"not final {r['not_final']}, dup {r['duplicates']}, back on time "
                  f"{back_text} after the drop; "
                  f"load {r['load']}", flush=True)  # fmt: skip
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
    p.add_argument("--src", help="measure another checkout's src directory (a peer "
                   "revision: git worktree add /tmp/before REV; --src /tmp/before/src)")
    p.add_argument("--saturate", type=int, nargs="*", metavar="JOBS",
                   help="the throughput ceiling: for each store and process count, the "
                        "highest of these job counts (every second) held with p99 lateness "
                        f"<= {CEILING_P99 * 1000:.0f} ms, 100 %% fired and 0 duplicates "
                        "(default: 2500 5000 7500 10000 12500 15000)")
    p.add_argument("--overload", type=int, metavar="CEILING",
                   help="2 x CEILING every-second jobs on one process for --seconds, then "
                        "the load drops: silent gaps, shed slots, lateness, recovery")
    p.add_argument("--no-drop", action="store_true",
                   help="with --overload: stop the process at the end of the window, still "
                        "overloaded (every slot due before the stop must have its row)")
    a = p.parse_args()
    if a.child:
        child(a)
        return
    if a.overload is not None:
        overload(a)
        return
    if a.src:
        os.environ[SRC_ENV] = str(Path(a.src).resolve())
    print(f"code: {os.environ.get(SRC_ENV, ROOT / 'src')}", flush=True)
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
                print_server(r)
    finally:
        finish(redis, results, a.json)


if __name__ == "__main__":
    main()
