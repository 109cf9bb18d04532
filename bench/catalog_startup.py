"""One ``cronfleet run`` starting with N API jobs in a Redis store: the time until its
probe's ``/readyz`` answers 200 (its share read and planned), its CPU until then and its
peak RSS -- this checkout against another one (``--src``, the peer), alternated on the
same store.

    .venv/bin/python bench/catalog_startup.py --jobs 250000 --src /tmp/before/src

A private ``redis-server`` holds the definitions as ``bench/million.py`` writes them
(HTTP jobs, one a second of the hour each, ~70 slots a second at 250,000). A first run
(this checkout, not counted) creates the jobs' state rows, then each revision starts
``--runs`` times, alternating: every counted start reads the same store. With
``--gc``, each process also reports its cyclic GC's passes by generation and their
time until ready (a ``gc.callbacks`` hook in the child).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fleet_redis import PrivateRedis, free_port  # noqa: E402
from million import Sink, load_redis, ready  # noqa: E402

# run in the child before cronfleet's CLI when --gc: passes and seconds by generation,
# written to the file named by CRONFLEET_BENCH_GC each time the probe asks (SIGUSR1)
GC_HOOK = """
import gc, json, os, runpy, signal, sys, time
n, t, t0 = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]
def cb(phase, info):
    if phase == "start":
        t0[0] = time.perf_counter()
    else:
        g = info["generation"]; n[g] += 1; t[g] += time.perf_counter() - t0[0]
gc.callbacks.append(cb)
def dump(*_):
    with open(os.environ["CRONFLEET_BENCH_GC"], "w") as f:
        f.write(json.dumps({"passes": n, "seconds": [round(x, 3) for x in t]}))
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["cronfleet", *sys.argv[1:]]
runpy.run_module("cronfleet", run_name="__main__")
"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) // 1024


def start_once(config: Path, src: str, tmp: Path, name: str, gc_hook: bool) -> dict[str, Any]:
    probe = free_port()
    run = ["run", "--config", str(config), "--port", str(free_port()),
           "--metrics-port", str(probe)]
    env = dict(os.environ, PYTHONPATH=src)
    stats = tmp / f"{name}.gc"
    if gc_hook:
        env["CRONFLEET_BENCH_GC"] = str(stats)
        cmd = [sys.executable, "-c", GC_HOOK, *run]
    else:
        cmd = [sys.executable, "-m", "cronfleet", *run]
    with open(tmp / f"{name}.log", "wb") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.perf_counter()
        while not ready(probe):
            if p.poll() is not None:
                raise SystemExit(f"{name} exited ({p.returncode}); see {tmp}/{name}.log")
            time.sleep(0.1)
        out: dict[str, Any] = {"ready_s": round(time.perf_counter() - t0, 2),
                               "cpu_s": cpu_s(p.pid), "rss_peak_mb": peak_mb(p.pid),
                               "load": round(os.getloadavg()[0], 1)}
        if gc_hook:
            p.send_signal(signal.SIGUSR1)
            for _ in range(50):
                if stats.exists() and stats.stat().st_size:
                    break
                time.sleep(0.1)
            out["gc"] = json.loads(stats.read_text())
        return out
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=250_000)
    ap.add_argument("--src", help="the peer: another checkout's src directory")
    ap.add_argument("--runs", type=int, default=2, help="counted starts per revision")
    ap.add_argument("--gc", action="store_true", help="count the cyclic GC's passes")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    here = str(HERE.parent / "src")
    revisions = [("this", here)] + ([("peer", a.src)] if a.src else [])
    sink = Sink()
    sink.start()
    redis = PrivateRedis()
    tmp = Path(tempfile.mkdtemp(prefix="cf-catalog-startup-"))
    results: dict[str, Any] = {"jobs": a.jobs, "runs": {name: [] for name, _ in revisions}}
    try:
        store = redis.url(f"cs_{uuid.uuid4().hex[:6]}")
        t0 = time.perf_counter()
        load_redis(store, a.jobs, sink.port)
        print(f"{a.jobs:,} API jobs written in {time.perf_counter() - t0:.0f} s", flush=True)
        config = tmp / "cronfleet.toml"
        config.write_text(f'[scheduler]\nstore = "{store}"\n\n[api]\n'
                          'private_targets = ["127.0.0.1"]\n')
        start_once(config, here, tmp, "warm", False)  # the state rows exist from here on
        for k in range(a.runs):
            for name, src in revisions if k % 2 == 0 else revisions[::-1]:
                r = start_once(config, src, tmp, f"{name}-{k}", a.gc)
                results["runs"][name].append(r)
                print(f"  {name}: ready {r['ready_s']:.1f} s, CPU until ready "
                      f"{r['cpu_s']:.1f} s, RSS peak {r['rss_peak_mb']} MB, load {r['load']}"
                      + (f", GC passes {r['gc']['passes']} taking {r['gc']['seconds']} s"
                         if "gc" in r else ""), flush=True)
    finally:
        redis.close()
    if a.src:
        def best(name: str, key: str) -> float:
            return float(min(r[key] for r in results["runs"][name]))
        for key in ("ready_s", "cpu_s"):
            print(f"best {key}: this {best('this', key):.1f}, peer {best('peer', key):.1f} "
                  f"({best('peer', key) / best('this', key):.2f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
