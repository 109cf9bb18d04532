"""A million schedules (#27): N jobs created over the API (in ``job_defs``), each an HTTP
job firing once an hour at its own minute and second (job ``i`` at minute ``i // 60 % 60``,
second ``i % 60``: N / 3,600 slots every second), run by P ``cronfleet run`` processes on
one PostgreSQL or Redis store.

    .venv/bin/python bench/million.py                                  # 1,000,000, 4 processes
    .venv/bin/python bench/million.py --jobs 100000 --procs 2 --minutes 2 --store redis
    .venv/bin/python bench/million.py --jobs 100000 --kill             # kill -9 one midway

The definitions are written straight into a fresh schema (PostgreSQL: ``COPY``) or prefix
(Redis: the store's ``create_job_defs``, 1,000 per call), each spec as the API stores it.
Every request lands on a sink in this process (a small asyncio HTTP server on 127.0.0.1, allowed
by ``[api] private_targets``), which counts runs on the handler's side: job (from the
path), slot (``X-Cronfleet-Slot``), time received. Printed for each process: the time
until ``/readyz`` answers 200 and the largest RSS; for the fleet: slots due in the window,
fired, duplicates, lateness p50 / p99 (received - slot), and with ``--kill`` the latest
arrival of a slot due in the 10 s after the kill. Each figure is printed next to #27's
target; the box's limits (memory, database size) are printed instead of shrinking the
target.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet_redis import DEFAULT_PG, PrivateRedis, free_port, pg_exec  # noqa: E402
from stats import pct  # noqa: E402

TARGETS = {"ready_s": 20.0, "rss_mb": 400.0, "p99_ms": 200.0, "failover_s": 2.0}


# -- the sink: runs counted where they land ------------------------------------------------


class Sink:
    """``POST /hook/<job>`` answered 200 at once; ``(job, slot text, time)`` kept."""

    def __init__(self) -> None:
        self.port = free_port()
        self.hits: list[tuple[str, str, float]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=4096))
        with contextlib.suppress(RuntimeError):
            self.loop.run_until_complete(server.serve_forever())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                now = time.time()
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length, slot = 0, ""
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    low = name.lower()
                    if low == "content-length":
                        length = int(value)
                    elif low == "x-cronfleet-slot":
                        slot = value.strip()
                if length:
                    await reader.readexactly(length)
                self.hits.append((path.rsplit("/", 1)[-1], slot, now))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


# -- the definitions ------------------------------------------------------------------------


def specs(n: int, sink: int) -> Any:
    """``(id, stored spec text)`` of each job, as ``Catalog.create`` stores them."""
    sys.path.insert(0, str(HERE.parent / "src"))
    from cronfleet.catalog import build_job
    from cronfleet.spec import canonical_spec

    for i in range(n):
        job_id = f"m{i:07d}"
        spec = canonical_spec({
            "id": job_id,
            "schedule": f"{i % 60} {i // 60 % 60} * * * *",
            "http": {"url": f"http://127.0.0.1:{sink}/hook/{job_id}", "method": "POST"}})
        if i < 3:  # a valid API spec (the rest are alike): raises naming what is wrong
            build_job(spec, team="default")
        yield job_id, json.dumps(spec, sort_keys=True)


def load_postgres(url: str, schema: str, n: int, sink: int) -> None:
    import psycopg

    from cronfleet.shares import bucket_of
    from cronfleet.store import PostgresStore

    async def migrate() -> None:
        st = PostgresStore(url, schema=schema)
        await st.open()
        await st.close()

    asyncio.run(migrate())
    now = int(time.time() * 1000)
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor().copy(
            f'COPY "{schema}".job_defs (id, team, spec, version, created_at, updated_at, '
            "created_by, updated_by, bucket) FROM STDIN"
        ) as copy:
            for v, (job_id, spec) in enumerate(specs(n, sink), 1):
                copy.write_row((job_id, "default", spec, v, now, now, "bench", "bench",
                                bucket_of(job_id)))
        conn.execute(f'ANALYZE "{schema}".job_defs')  # type: ignore[arg-type]


def load_redis(url: str, n: int, sink: int) -> None:
    from cronfleet.store import open_store
    from cronfleet.store.factory import open_api_store

    async def go() -> None:
        st: Any = open_store(url)
        await st.open()
        api: Any = open_api_store(st)
        batch: list[tuple[str, dict[str, Any]]] = []
        for job_id, spec in specs(n, sink):
            batch.append((job_id, json.loads(spec)))
            if len(batch) == 1000:  # one transaction per 1,000, as POST /api/jobs:batch
                await api.create_job_defs(batch, "default", "bench")
                batch.clear()
        if batch:
            await api.create_job_defs(batch, "default", "bench")
        await st.close()

    asyncio.run(go())


# -- the fleet --------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return bool(r.status == 200)
    except Exception:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--store", choices=["postgres", "redis"], default="postgres")
    ap.add_argument("--kill", action="store_true", help="kill -9 one process midway")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    sink = Sink()
    sink.start()
    tmp = Path(tempfile.mkdtemp(prefix="cf-million-"))
    run = f"million_{uuid.uuid4().hex[:6]}"
    redis = None
    pg = os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG)
    t0 = time.perf_counter()
    if a.store == "postgres":
        store = f"{pg}?schema={run}"
        load_postgres(pg, run, a.jobs, sink.port)
    else:
        redis = PrivateRedis()
        store = redis.url(run)
        load_redis(store, a.jobs, sink.port)
    loaded = time.perf_counter() - t0
    print(f"{a.jobs:,} API jobs written in {loaded:.0f} s ({a.store}); {a.procs} processes; "
          f"load {os.getloadavg()}", flush=True)
    (tmp / "cronfleet.toml").write_text(
        f'[scheduler]\nstore = "{store}"\n\n[api]\nprivate_targets = ["127.0.0.1"]\n')
    procs: list[tuple[subprocess.Popen[bytes], int, float]] = []
    results: dict[str, Any] = {"jobs": a.jobs, "procs": a.procs, "store": a.store,
                               "load_s": loaded, "processes": []}
    try:
        for i in range(a.procs):
            metrics = free_port()
            log = open(tmp / f"p{i}.log", "wb")  # noqa: SIM115
            cmd = [sys.executable, "-m", "cronfleet", "run", "--config",
                   str(tmp / "cronfleet.toml"), "--port", str(free_port()),
                   "--metrics-port", str(metrics)]
            procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp),
                          metrics, time.time()))
        ready_at: dict[int, float] = {}
        peak: Counter[int] = Counter()
        deadline = time.time() + 600
        while len(ready_at) < len(procs) and time.time() < deadline:
            for k, (p, port, started) in enumerate(procs):
                if p.poll() is not None:
                    raise SystemExit(f"process {k} exited ({p.returncode}); see {tmp}/p{k}.log")
                peak[k] = max(peak[k], int(rss_mb(p.pid)))
                if k not in ready_at and ready(port):
                    ready_at[k] = time.time() - started
            time.sleep(0.2)
        w0 = float(int(time.time()) + 2)
        w1 = w0 + a.minutes * 60
        killed_at = None
        while time.time() < w1:
            if a.kill and killed_at is None and time.time() >= (w0 + w1) / 2:
                os.kill(procs[-1][0].pid, signal.SIGKILL)
                killed_at = time.time()
            for k, (p, _, _) in enumerate(procs):
                if p.poll() is None:
                    peak[k] = max(peak[k], int(rss_mb(p.pid)))
            time.sleep(1)
        time.sleep(5)  # the window's last requests land
        for k in range(len(procs)):
            r = {"ready_s": ready_at.get(k), "rss_peak_mb": peak[k]}
            results["processes"].append(r)
            print(f"  process {k}: ready {r['ready_s'] or float('nan'):.1f} s "
                  f"(target <= {TARGETS['ready_s']:.0f}), RSS peak {r['rss_peak_mb']} MB "
                  f"(target <= {TARGETS['rss_mb']:.0f})")
    finally:
        for p, _, _ in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p, _, _ in procs:
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
        if "w1" in locals():  # the window ran: what the ledger says of each unfired slot
            fired_keys = {(j, int(datetime.fromisoformat(t).timestamp()))
                          for j, t, _ in list(sink.hits)}
            unfired = {(f"m{i:07d}", int(s)) for i in range(a.jobs)
                       for s in _slots(i, w0, w1)} - fired_keys
            jobs = sorted({j for j, _ in unfired})
            results["unfired_in_ledger"] = dict(ledger_of(runs_in_store(store, jobs), unfired))
        if redis is not None:
            redis.close()
        elif a.store == "postgres":
            with contextlib.suppress(Exception):
                pg_exec(pg, f'DROP SCHEMA IF EXISTS "{run}" CASCADE')
    due = [(f"m{i:07d}", s) for i in range(a.jobs)
           for s in _slots(i, w0, w1)]
    want = {(j, int(s)) for j, s in due}
    got: Counter[tuple[str, int]] = Counter()
    late: list[float] = []
    after_kill: list[float] = []
    by_due: list[tuple[float, float]] = []  # (slot - kill, lateness) of the 10 s after
    for job, slot, at in list(sink.hits):
        s = int(datetime.fromisoformat(slot).timestamp())
        if (job, s) in want:
            got[(job, s)] += 1
            if got[(job, s)] == 1:
                late.append(at - s)
                if killed_at is not None and killed_at <= s < killed_at + 10:
                    after_kill.append(at - s)
                    by_due.append((s - killed_at, at - s))
    fired = len(got)
    dups = sum(n - 1 for n in got.values())
    fleet: dict[str, Any] = {"due": len(want), "fired": fired, "duplicates": dups,
             "p50_ms": pct(late, 50) * 1000, "p99_ms": pct(late, 99) * 1000,
             "after_kill_worst_s": max(after_kill) if after_kill else None,
             "after_kill_p50_s": pct(after_kill, 50) if after_kill else None,
             "after_kill_over_2s": sum(1 for x in after_kill if x > 2),
             "after_kill_slots": len(after_kill),
             # per second after the kill: the worst lateness of the slots due in it
             "after_kill_by_second": {k: max((x for d, x in by_due if int(d) == k),
                                             default=None) for k in range(10)}}
    results["fleet"] = fleet
    print(f"  fleet: {fired:,} of {len(want):,} due slots fired "
          f"({100 * fired / max(len(want), 1):.2f} %), {dups} duplicates, lateness p50 "
          f"{fleet['p50_ms']:.0f} ms, p99 {fleet['p99_ms']:.0f} ms (target <= "
          f"{TARGETS['p99_ms']:.0f})")
    if killed_at is not None:
        print(f"  after kill -9 of process {a.procs - 1}: latest slot of the next 10 s "
              f"{fleet['after_kill_worst_s'] or float('nan'):.2f} s late (target <= "
              f"{TARGETS['failover_s']:.0f}); p50 {fleet['after_kill_p50_s'] or 0:.2f} s, "
              f"{fleet['after_kill_over_2s']} of {fleet['after_kill_slots']} over 2 s; worst "
              "by second after the kill: " + ", ".join(
                  "-" if v is None else f"{v:.1f}"
                  for v in fleet["after_kill_by_second"].values()))
    if "unfired_in_ledger" in results:
        rows = results["unfired_in_ledger"]
        print(f"  the ledger on the {len(want) - fired:,} due slots the sink never saw: " + (
            ", ".join(f"{k} {v:,}" for k, v in sorted(rows.items())) or "none"))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


Row = tuple[str, int, str, "str | None"]  # job, slot (epoch s), status, reason


def runs_in_store(url: str, jobs: list[str]) -> list[Row]:
    """The ledger rows of ``jobs``, read through the store's own API (any store), by
    pages of 1,000 runs across those jobs."""
    from cronfleet.store import open_store
    from cronfleet.store.base import RunFilter

    async def go() -> list[Row]:
        st: Any = open_store(url)
        await st.open()
        try:
            out: list[Row] = []
            where, after = RunFilter(job_ids=frozenset(jobs)), None
            while jobs:
                page = await st.find_runs(where, limit=1000, after=after)
                out += [(r.job_id, int(r.slot.timestamp()), r.status.value, r.reason)
                        for r in page.runs]
                if page.next_cursor is None:
                    break
                after = page.next_cursor
            return out
        finally:
            await st.close()

    return asyncio.run(go())


def ledger_of(rows: list[Row], unfired: set[tuple[str, int]]) -> Counter[str]:
    """What the ledger holds for each ``(job, slot)`` the sink never saw: its row's status
    (and reason), ``summary`` when only an earlier slot's skip of the job can cover it (a
    summary record: one row for a job's range of skipped slots), else ``no row`` (a
    silent gap)."""
    out: Counter[str] = Counter()
    by_job: dict[str, list[tuple[int, str, str | None]]] = {}
    for job, slot, status, reason in rows:
        by_job.setdefault(job, []).append((slot, status, reason))
    for job, slot in unfired:
        mine = by_job.get(job, [])
        exact = [f"{st}/{r}" if r else st for t, st, r in mine if t == slot]
        if exact:
            out[exact[0]] += 1
        elif any(t < slot and st in ("skipped", "missed") for t, st, _ in mine):
            out["summary"] += 1
        else:
            out["no row"] += 1
    return out


def _slots(i: int, w0: float, w1: float) -> list[float]:
    """Job ``i``'s slots in ``[w0, w1)``: second ``i % 60`` of minute ``i // 60 % 60``."""
    offset = (i // 60 % 60) * 60 + i % 60
    first = w0 - (w0 % 3600) + offset
    if first < w0:
        first += 3600
    out = []
    while first < w1:
        out.append(first)
        first += 3600
    return out


if __name__ == "__main__":
    main()
