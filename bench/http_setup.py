"""What an HTTP runtime's first run costs before it sends anything: the pooled clients
(:data:`cronfleet.jobs.http.POOLS`) are made on the event loop at the first HTTP run of a
process (and again for a new loop), and each TLS context loads the CA bundle.

    .venv/bin/python bench/http_setup.py
    .venv/bin/python bench/http_setup.py --rounds 10

Two cases, each in a fresh child process (the imports done before the clock starts), the
same ``max_connections`` (100, the default), alternated, ``--rounds`` each:

- **this build**: ``HttpRuntime.client()``, its pools sharing one TLS context;
- **one context per pool** (the peer, the code before): the same number of
  ``httpx.AsyncClient`` made as the runtime makes them, each transport with its own.

Printed: the wall time of the first ``client()`` (the event loop does nothing else
meanwhile) and the RSS it added, median over the rounds, and the peer's ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import asyncio, json, sys, time
import httpx
from cronfleet.jobs.http import POOLS, HttpRuntime

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

async def main(case):
    runtime = HttpRuntime()
    r0, t0 = rss(), time.perf_counter()
    if case == "this":
        runtime.client()
        clients = runtime._clients
    else:
        n = max(1, min(POOLS, runtime.max_connections))
        share, extra = divmod(runtime.max_connections, n)
        clients = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=share + (k < extra))), trust_env=False)
            for k in range(n)]
    t1, r1 = time.perf_counter(), rss()
    for c in clients:
        await c.aclose()
    print(json.dumps({"ms": 1000 * (t1 - t0), "mb": (r1 - r0) / 1e6, "clients": len(clients)}))

asyncio.run(main(sys.argv[1]))
"""


def run(case: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, case], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    got: dict[str, list[dict[str, float]]] = {"this": [], "peer": []}
    for _ in range(a.rounds):
        for case in got:
            got[case].append(run(case))
    med = {case: (statistics.median(r["ms"] for r in rows),
                  statistics.median(r["mb"] for r in rows), rows[0]["clients"])
           for case, rows in got.items()}
    print(f"first client() of an HTTP runtime, median of {a.rounds} fresh processes each")
    for case, label in (("this", "this build (one TLS context)"),
                        ("peer", "one TLS context per pool")):
        ms, mb, n = med[case]
        print(f"  {label:30s} {n:.0f} clients  {ms:7.1f} ms  RSS +{mb:5.1f} MB")
    print(f"  peer / this: {med['peer'][0] / med['this'][0]:.1f}x the time, "
          f"{med['peer'][1] / max(med['this'][1], 0.01):.1f}x the RSS")


if __name__ == "__main__":
    main()
