"""Loading many API jobs into a running service (#27): ``POST /api/jobs:batch`` (1,000
per request, one transaction each) versus the peer, ``POST /api/jobs`` one job at a time,
in the same run, on the same store kind.

    .venv/bin/python bench/batch_load.py                              # 100,000 jobs, both stores
    .venv/bin/python bench/batch_load.py --jobs 20000 --single 1000 --stores postgres
    .venv/bin/python bench/batch_load.py --role all                   # timers on too

The service runs as users run it: ``cronfleet run --role api --port 0`` (``--role all``:
timers on too) in its own process, on a fresh store (PostgreSQL: a new schema of
``CRONFLEET_BENCH_PG``, default ``postgresql://postgres@127.0.0.1:5432/test``, dropped
after; SQLite: a file in a temp dir). The client sends the batches one after the other
(no concurrency) with an editor token. Jobs: hourly HTTP jobs at spread seconds and
minutes (``"S M * * * *"``: 3,600 distinct schedules, each used by N/3,600 jobs), each
with its own URL, POST with a header and a body, a retry policy and a timeout.

The one-by-one peer loads ``--single`` jobs first (default 2,000: one by one is slow, so it
runs on fewer jobs), into the empty store -- its best case: each single create makes every
process reload the whole catalog, so it slows down as the store fills -- then the batches
load ``--jobs`` more; both rates are printed with the
ratio and the projected time for 1,000,000 jobs (the issue's target: 5 minutes through the
batch endpoint). The count in the store is checked at the end.

The service's own CPU time during the batches is printed too (``server CPU per 1,000``:
user + system seconds of the service process, from ``psutil``), with the rate one core of
it would sustain: on a shared machine the wall-clock rate moves with the load, the CPU
per job much less. ``--src DIR`` runs the service (and this client's imports) from
another checkout's ``src`` (the peer of a before/after comparison, same run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LISTENING = r"API listening on (http://127\.0\.0\.1:(\d+))"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
TARGET = 1_000_000


def job(i: int, prefix: str) -> dict[str, Any]:
    second, minute = i % 60, (i // 60) % 60
    return {"id": f"{prefix}-{i:07d}", "schedule": f"{second} {minute} * * * *",
            "description": f"hourly sync of tenant {i}",
            "http": {"url": f"https://hooks.example.com/tenants/{i}/sync", "method": "POST",
                     "headers": {"X-Tenant": str(i)}, "body": json.dumps({"tenant": i})},
            "retry": {"attempts": 3, "delay": "30s"}, "timeout": "2m"}


async def _token(url: str) -> str:
    from cronfleet.store.factory import open_api_store

    store = open_api_store(url)
    try:
        plaintext, _ = await store.create_token(name="bench", team="default", role="editor")
        return plaintext
    finally:
        await store.close()


async def _count(url: str) -> int:
    from cronfleet.store.factory import open_api_store

    store = open_api_store(url)
    try:  # page by page through the change feed: 1,000,000 definitions at once are GBs
        n, after = 0, (0, "")
        while page := await store.job_defs_changed(after, 10_000):
            n += sum(1 for d in page if d.deleted_at is None)
            after = (page[-1].version, page[-1].id)
        return n
    finally:
        await store.close()


def serve(workdir: Path, url: str, role: str, src: str | None = None
          ) -> tuple[subprocess.Popen[bytes], str, Path]:
    (workdir / "cronfleet.toml").write_text(
        f'[scheduler]\nstore = "{url}"\n\n[api]\nhost = "127.0.0.1"\n', encoding="utf-8")
    log = workdir / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    if src is not None:
        env["PYTHONPATH"] = src
    proc = subprocess.Popen([sys.executable, "-m", "cronfleet.cli", "run", "--role", role,
                             "--port", "0"], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(LISTENING, log.read_text())
        if m:
            return proc, m.group(1), log
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the service did not start:\n{log.read_text()}")


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def load(base: str, tok: str, n_batch: int, n_single: int, size: int,
         server: int) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {tok}"}
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as c:
        t = time.perf_counter()
        for i in range(n_single):
            r = c.post("/api/jobs", json=job(i, "s"))
            if r.status_code != 201:
                raise SystemExit(f"single {i}: {r.status_code} {r.text[:500]}")
        secs = time.perf_counter() - t
        out["single"] = {"jobs": n_single, "seconds": round(secs, 2),
                         "jobs_per_s": round(n_single / secs),
                         "projected_1M_s": round(TARGET / (n_single / secs))}
        print(f"  one by one: {n_single:>8,} jobs in {secs:7.1f} s = "
              f"{n_single / secs:8,.0f} jobs/s", flush=True)
        t = time.perf_counter()
        cpu = _cpu(server)
        slowest = 0.0
        for start in range(0, n_batch, size):
            items = [job(i, "b") for i in range(start, min(start + size, n_batch))]
            t1 = time.perf_counter()
            r = c.post("/api/jobs:batch", json={"jobs": items})
            slowest = max(slowest, time.perf_counter() - t1)
            if r.status_code != 201:
                raise SystemExit(f"batch at {start}: {r.status_code} {r.text[:500]}")
        secs = time.perf_counter() - t
        cpu = _cpu(server) - cpu
        out["batch"] = {"jobs": n_batch, "batch_size": size, "seconds": round(secs, 2),
                        "jobs_per_s": round(n_batch / secs), "slowest_request_s":
                        round(slowest, 3),
                        "projected_1M_s": round(TARGET / (n_batch / secs)),
                        "server_cpu_s": round(cpu, 2),
                        "server_cpu_per_1000_s": round(cpu / n_batch * 1000, 3),
                        "jobs_per_server_cpu_s": round(n_batch / cpu)}
        print(f"  batch:      {n_batch:>8,} jobs in {secs:7.1f} s = "
              f"{n_batch / secs:8,.0f} jobs/s (slowest request {slowest:.2f} s)", flush=True)
        print(f"  server CPU: {cpu:7.1f} s = {cpu / n_batch * 1000:.3f} s per 1,000 jobs "
              f"= {n_batch / cpu:,.0f} jobs per CPU second", flush=True)
    return out


def run_one(kind: str, a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cf-batch-") as tmp:
        workdir = Path(tmp)
        schema = None
        if kind == "postgres":
            schema = f"bench_batch_{uuid.uuid4().hex[:8]}"
            url = f"{a.pg}?schema={schema}"
        else:
            url = f"sqlite:///{workdir / 'bench.db'}"
        tok = asyncio.run(_token(url))
        proc, base, log = serve(workdir, url, a.role, a.src)
        print(f"{kind}: service at {base} (role {a.role}, src {a.src or 'this checkout'})",
              flush=True)
        try:
            out = load(base, tok, a.jobs, a.single, a.batch_size, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        stored = asyncio.run(_count(url))
        assert stored == a.jobs + a.single, (stored, a.jobs + a.single, log.read_text()[-2000:])
        out["stored"] = stored
        if schema is not None:
            import psycopg

            with psycopg.connect(a.pg, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]
        b, s = out["batch"], out["single"]
        out["ratio"] = round(b["jobs_per_s"] / s["jobs_per_s"], 1)
        print(f"  batch / one by one: {out['ratio']}x; projected 1,000,000: batch "
              f"{b['projected_1M_s'] / 60:.1f} min, one by one "
              f"{s['projected_1M_s'] / 3600:.1f} h (target: 5 min by batch)", flush=True)
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=100_000, help="jobs through the batch endpoint")
    p.add_argument("--single", type=int, default=2_000, help="jobs one by one (the peer)")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--stores", default="postgres,sqlite")
    p.add_argument("--role", choices=["api", "all"], default="api")
    p.add_argument("--pg", default=os.environ.get("CRONFLEET_BENCH_PG", DEFAULT_PG))
    p.add_argument("--json", dest="json_out", default=None, help="write the figures here")
    p.add_argument("--src", default=None,
                   help="run the service from this checkout's src (the peer, e.g. main's)")
    a = p.parse_args()
    if a.src is not None:
        sys.path.insert(0, a.src)  # this client's store calls (token, count) too
    print(f"load before: {os.getloadavg()}", flush=True)
    results = {kind: run_one(kind, a) for kind in a.stores.split(",")}
    load_after = os.getloadavg()
    print(f"load after: {load_after}", flush=True)
    results["load_after"] = list(load_after)  # type: ignore[assignment]
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
