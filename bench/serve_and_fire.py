"""Serving and firing together (#27 item 6): does reading the API make jobs late?

    .venv/bin/python bench/serve_and_fire.py                         # 300 jobs, 60 s
    .venv/bin/python bench/serve_and_fire.py --seconds 20 --idle-seconds 15
    .venv/bin/python bench/serve_and_fire.py --store postgres        # PostgreSQL
    .venv/bin/python bench/serve_and_fire.py --peer-src /tmp/before/src   # before/after

One real ``cronfleet run`` process (a ``cronfleet.toml`` in a temp dir, role ``all``, the
API on a free port) with ``--jobs`` (300) tasks every second (``* * * * * *``). Their
handler (``async def``, on the scheduler's loop, as a plain task is) records
``time.time()`` next to ``ctx.slot`` on the handler side; lateness is the difference.

Phases, after a 5 s warm-up: **idle** (``--idle-seconds``, no client), then **loaded**
(``--seconds``): ``--clients`` (16) threads of one client process, each with its own
keep-alive connection, loop over ``GET /api/jobs?limit=100``, ``GET /api/runs?limit=100``
and ``GET /api/jobs/<job>/runs?limit=100`` (an admin token) as fast as they are answered.
Measured: firing lateness p50 / p99 of the slots of each phase (nearest rank), the ratio
loaded / idle (#27: p99 <= 2x), API requests/s over the loaded phase and latency p50 /
p99, the size of each page, and the CPU of the ``cronfleet run`` process (and its API
workers) per request: all of it, and less what the process spent at the idle phase's
rate (the API's own share); then ``--serial`` (200) requests of each page in a row by
one client: the CPU per request of each page.

``--peer-src``: the same workload on another checkout's ``src`` (e.g. the code before the
change), in the same run, after this one. The box's load averages are printed with the
figures: on a shared machine they say how much the other users took.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from stats import pct

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PG = os.environ.get("CRONFLEET_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
TICK = os.sysconf("SC_CLK_TCK")
WARM = 5.0
PATHS = ["/api/jobs?limit=100", "/api/runs?limit=100", "/api/jobs/job-0007/runs?limit=100"]

TASKS_PY = '''
import atexit, os, time
_out = open(os.environ["SAF_OUT"], "a", buffering=1 << 20)
atexit.register(_out.close)

async def tick(ctx):
    _out.write(f"{ctx.slot.timestamp()} {time.time()}\\n")
'''


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` and its living descendants (the API worker processes)."""
    total = cpu_seconds(pid)
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    for kid in kids:
        with contextlib.suppress(OSError):
            total += tree_cpu_seconds(int(kid))
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the clients (a child process, so that their CPU is not the server's) -----------------


def clients(a: argparse.Namespace) -> None:
    import http.client

    paths = PATHS
    until = time.time() + a.seconds
    lat: list[list[float]] = [[] for _ in paths]
    sizes = [0] * len(paths)
    errors: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
        headers = {"Authorization": f"Bearer {a.token}"}
        mine: list[list[float]] = [[] for _ in paths]
        k = i
        while time.time() < until:
            which = k % len(paths)
            k += 1
            t0 = time.perf_counter()
            try:
                conn.request("GET", paths[which], headers=headers)
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                errors.append(repr(exc))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
                continue
            mine[which].append(time.perf_counter() - t0)
            if resp.status != 200:
                errors.append(f"{paths[which]}: {resp.status} {body[:200]!r}")
            sizes[which] = len(body)
        with lock:
            for which, xs in enumerate(mine):
                lat[which] += xs

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    print(json.dumps({"paths": paths, "lat": lat, "sizes": sizes, "elapsed": elapsed,
                      "errors": errors[:20], "n_errors": len(errors)}))


def serial_cpu(pid: int, port: int, token: str, n: int, idle_rate: float
               ) -> dict[str, float]:
    """One client, ``n`` requests of each page in a row: the service's CPU per request
    (the process and its workers, less the idle rate), page by page."""
    import http.client

    out = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    for path in PATHS:
        cpu0, t0 = tree_cpu_seconds(pid), time.time()
        for _ in range(n):
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
        cpu = tree_cpu_seconds(pid) - cpu0 - idle_rate * (time.time() - t0)
        out[path] = 1000 * cpu / n
    conn.close()
    return out


# -- one run of the service ---------------------------------------------------------------


def run_service(src: Path, a: argparse.Namespace, label: str) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cf-saf-"))
    schema = f"saf_{uuid.uuid4().hex[:8]}"
    store = (f"{a.pg}?schema={schema}" if a.store == "postgres"
             else f"sqlite:///{tmp / 'cronfleet.db'}")
    port = free_port()
    (tmp / "tasks.py").write_text(TASKS_PY)
    toml = [f'[scheduler]\nstore = "{store}"\ntimezone = "UTC"\nprovider = "cron"\n',
            f'[api]\nhost = "127.0.0.1"\nport = {port}\n']
    for i in range(a.jobs):
        toml.append(f'[[tasks]]\nid = "job-{i:04d}"\ncron = "* * * * * *"\n'
                    'handler = "tasks:tick"\n')
    cfg = tmp / "cronfleet.toml"
    cfg.write_text("\n".join(toml))
    out = tmp / "fired.txt"
    env = {**os.environ, "SAF_OUT": str(out), "PYTHONPATH": str(src)}
    boot = (f"import sys; sys.path.insert(0, {str(src)!r}); import runpy; "
            "runpy.run_module('cronfleet', run_name='__main__')")
    cli = [sys.executable, "-c", boot]
    token = json.loads(subprocess.run(
        [*cli, "tokens", "create", "--team", "default", "--role", "admin", "--name", "bench",
         "-c", str(cfg), "--json"], env=env, check=True, capture_output=True,
        text=True).stdout)["token"]
    log = open(tmp / "service.log", "w")  # noqa: SIM115
    extra = ["--api-workers", str(a.api_workers)] if a.api_workers is not None else []
    proc = subprocess.Popen([*cli, "run", "-c", str(cfg), "--log-level", "warning", *extra],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"{label}: the service did not start: "
                                       f"{(tmp / 'service.log').read_text()[-2000:]}") from None
                time.sleep(0.2)
        i0 = math.ceil(time.time() + WARM)
        i1 = i0 + a.idle_seconds
        time.sleep(max(i0 - time.time(), 0))
        idle_cpu0, idle_t0 = tree_cpu_seconds(proc.pid), time.time()
        time.sleep(max(i1 - time.time(), 0))
        cpu0 = tree_cpu_seconds(proc.pid)
        idle_rate = (cpu0 - idle_cpu0) / (time.time() - idle_t0)  # the scheduler's own
        l0 = time.time()
        res = subprocess.run(
            [sys.executable, __file__, "--clients-child", "--port", str(port), "--token", token,
             "--seconds", str(a.seconds), "--clients", str(a.clients)],
            check=True, capture_output=True, text=True)
        l1 = time.time()
        cpu1 = tree_cpu_seconds(proc.pid)
        load = loadavg()
        api = json.loads(res.stdout)
        serial = serial_cpu(proc.pid, port, token, a.serial, idle_rate)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    recs = [tuple(map(float, line.split())) for line in out.read_text().splitlines() if line]
    idle = [t - s for s, t in recs if i0 <= s < i1]
    # slots of whole seconds inside the clients' window
    loaded = [t - s for s, t in recs if math.ceil(l0) <= s < math.floor(l1)]
    n_req = sum(len(x) for x in api["lat"])
    all_lat = [x for xs in api["lat"] for x in xs]
    service_log = (tmp / "service.log").read_text()
    shutil.rmtree(tmp, ignore_errors=True)
    if a.store == "postgres":
        subprocess.run(["psql", a.pg, "-qc", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'],
                       capture_output=True, check=False)
    idle_expected = a.jobs * a.idle_seconds
    loaded_expected = a.jobs * (math.floor(l1) - math.ceil(l0))
    return {
        "label": label, "src": str(src), "store": a.store, "jobs": a.jobs,
        "idle": {"fired": len(idle), "expected": idle_expected,
                 "p50_ms": 1000 * pct(idle, 50), "p99_ms": 1000 * pct(idle, 99)},
        "loaded": {"fired": len(loaded), "expected": loaded_expected,
                   "p50_ms": 1000 * pct(loaded, 50), "p99_ms": 1000 * pct(loaded, 99)},
        "api": {"requests": n_req, "rps": n_req / api["elapsed"],
                "p50_ms": 1000 * pct(all_lat, 50), "p99_ms": 1000 * pct(all_lat, 99),
                "errors": api["n_errors"], "error_samples": api["errors"][:3],
                "pages": {p: {"kb": round(sz / 1024, 1), "n": len(xs),
                              "p50_ms": round(1000 * pct(xs, 50), 1)}
                          for p, sz, xs in zip(api["paths"], api["sizes"], api["lat"],
                                               strict=True)},
                "server_cpu_ms_per_request": 1000 * (cpu1 - cpu0) / n_req if n_req else
                math.nan,
                # less the CPU the process spent while idle (firing), at the idle rate
                "api_cpu_ms_per_request": 1000 * (cpu1 - cpu0 - idle_rate * (l1 - l0)) / n_req
                if n_req else math.nan},
        "idle_cpu_cores": idle_rate,
        "serial_cpu_ms": serial,
        "load": load,
        "service_errors": [ln for ln in service_log.splitlines() if "ERROR" in ln][:5],
    }


def show(r: dict[str, Any]) -> None:
    i, lo, api = r["idle"], r["loaded"], r["api"]
    ratio = lo["p99_ms"] / i["p99_ms"] if i["p99_ms"] else math.nan
    print(f"\n== {r['label']} ({r['src']}), {r['store']}, {r['jobs']} jobs every second")
    print(f"  firing idle    p50 {i['p50_ms']:7.1f} ms  p99 {i['p99_ms']:7.1f} ms  "
          f"({i['fired']}/{i['expected']} slots)")
    print(f"  firing loaded  p50 {lo['p50_ms']:7.1f} ms  p99 {lo['p99_ms']:7.1f} ms  "
          f"({lo['fired']}/{lo['expected']} slots)   loaded/idle p99 {ratio:.2f}x")
    print(f"  API {api['rps']:.0f} requests/s, p50 {api['p50_ms']:.1f} ms, p99 "
          f"{api['p99_ms']:.1f} ms, {api['errors']} errors; service CPU "
          f"{api['server_cpu_ms_per_request']:.2f} ms/request, of which the API "
          f"{api['api_cpu_ms_per_request']:.2f} ms (idle firing: {r['idle_cpu_cores']:.2f} "
          "cores)")
    for p, v in api["pages"].items():
        print(f"    {p:40s} {v['kb']:6.1f} KB  {v['n']:6d} requests  p50 {v['p50_ms']} ms"
              f"  CPU {r['serial_cpu_ms'][p]:.2f} ms/request (one client, in a row)")
    if api["error_samples"]:
        print("    errors:", api["error_samples"])
    if r["service_errors"]:
        print("    service log:", r["service_errors"])
    print(f"  load average at the end of the loaded phase: {r['load']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=60, help="loaded phase (clients on)")
    ap.add_argument("--idle-seconds", type=int, default=20, help="idle phase (no client)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--serial", type=int, default=200,
                    help="requests of each page in a row by one client, after the loaded "
                         "phase: the CPU per request page by page")
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL (--store postgres)")
    ap.add_argument("--api-workers", type=int, default=None,
                    help="cronfleet run --api-workers N for this checkout (default: not "
                         "passed, the command's default)")
    ap.add_argument("--peer-src", default=None, help="another checkout's src (the peer)")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    ap.add_argument("--clients-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--token", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.clients_child:
        clients(a)
        return 0
    print(f"load average before: {loadavg()}  (a shared 2-core box: others' work counts)")
    results = [run_service(ROOT / "src", a, "this")]
    show(results[0])
    if a.peer_src:
        peer_args = argparse.Namespace(**{**vars(a), "api_workers": None})
        results.append(run_service(Path(a.peer_src).resolve(), peer_args, "peer"))
        show(results[1])
        this, peer = results
        p99 = this["loaded"]["p99_ms"] / peer["loaded"]["p99_ms"]
        rps = this["api"]["rps"] / peer["api"]["rps"]
        cpu = (this["api"]["api_cpu_ms_per_request"]
               / peer["api"]["api_cpu_ms_per_request"])
        print(f"\nthis/peer: loaded firing p99 {p99:.2f}x, API requests/s {rps:.2f}x, "
              f"server CPU per request {cpu:.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
