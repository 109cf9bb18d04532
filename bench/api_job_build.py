"""CPU of building a stored API job from its spec (``catalog.build_job``), as a process
does when it loads its share of hundreds of thousands of API jobs: N stored HTTP specs,
half the minimal one ``bench/million.py`` stores (``"S M * * * *"``, a POST to its own
URL), half a richer one (retry, headers, body, timeout, timezone, description), 3,600
distinct schedules. The schedules' cache is warmed first (every schedule once), so the
figure is the job's own cost, not its schedule's parse (``bench/cron_next.py``). Prints
the µs per ``build_job`` and per ``validate_spec`` (its validation alone), best of 3.
``--src`` measures another checkout's code the same way in a child process (the peer:
e.g. ``git worktree add /tmp/before <rev>``) and prints the ratio.

    .venv/bin/python bench/api_job_build.py --jobs 50000 [--src /tmp/before/src]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = ("minimal", "rich")


def make_spec(i: int, kind: str) -> dict[str, Any]:
    """Stored spec ``i`` of ``kind`` (as the catalog stores it: canonical_spec, JSON)."""
    from cronfleet.spec import canonical_spec

    job_id = f"m{i:07d}"
    spec: dict[str, Any] = {
        "id": job_id, "schedule": f"{i % 60} {i // 60 % 60} * * * *",
        "http": {"url": f"http://127.0.0.1:9999/hook/{job_id}", "method": "POST"}}
    if kind == "rich":
        spec.update({
            "timezone": "Europe/Paris", "description": f"report {job_id} to billing",
            "retry": {"attempts": 3, "backoff": "exponential", "delay": "5s"},
            "timeout": "2m", "overlap": "queue_one",
            "http": {"url": f"https://billing.example.com/hooks/{job_id}?team=ops",
                     "method": "post", "timeout": "10s", "body": '{"report": "daily"}',
                     "headers": {"Content-Type": "application/json",
                                 "X-Job": job_id, "Authorization": "Bearer abc123"}}})
    out: dict[str, Any] = json.loads(json.dumps(canonical_spec(spec)))
    return out


def child(n: int, repeat: int) -> dict[str, Any]:
    from cronfleet.catalog import build_job, validate_spec
    from cronfleet.jobs.http import HttpRuntime

    runtime = HttpRuntime()
    for kind in KINDS:  # every schedule (in both zones) once: the figure is the job's own
        for i in range(3600):
            build_job(make_spec(10**6 + i, kind), team="default", runtime=runtime)
    out: dict[str, Any] = {"jobs": n}
    for kind in KINDS:
        specs = [make_spec(i, kind) for i in range(n // 2)]
        for name, call in (
                ("build_job", lambda sp: build_job(sp, team="default", runtime=runtime)),
                ("validate_spec", lambda sp: validate_spec(sp, team="default"))):
            best = float("inf")
            for _ in range(repeat):
                gc.collect()
                start = time.perf_counter()
                for sp in specs:
                    call(sp)
                best = min(best, time.perf_counter() - start)
            out[f"{kind} {name}"] = best / len(specs) * 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many passes")
    ap.add_argument("--src", type=Path, help="another checkout's src: the peer")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.repeat)))
        return
    rows = [("this checkout", HERE.parent / "src")]
    if a.src:
        rows.append((f"peer {a.src}", a.src))
    results = []
    for name, src in rows:
        out = subprocess.run([sys.executable, __file__, "--child", str(a.jobs),
                              "--repeat", str(a.repeat)],
                             env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{name}: {r['jobs']:,} stored HTTP specs, µs per job (best of {a.repeat})")
        for kind in KINDS:
            print(f"  {kind:8} build_job {r[f'{kind} build_job']:6.2f}   "
                  f"validate_spec {r[f'{kind} validate_spec']:6.2f}")
    if len(results) == 2:
        mine, peer = results
        print("peer / this checkout (how many times less CPU here):")
        for kind in KINDS:
            build, valid = (peer[f"{kind} {what}"] / mine[f"{kind} {what}"]
                            for what in ("build_job", "validate_spec"))
            print(f"  {kind:8} build_job {build:.2f}×   validate_spec {valid:.2f}×")


if __name__ == "__main__":
    main()
