"""CPU of an HTTP job's run, measured in the process that runs it: cronfleet's own
``HttpJob`` (the SSRF guard, the idempotency key, the run's record) sending ``POST`` to a
sink in another process, ``--concurrency`` runs at a time (1, 50 and 200 by default),
``--requests`` (3,000) each.

    .venv/bin/python bench/http_cpu.py
    .venv/bin/python bench/http_cpu.py --requests 10000 --concurrency 100

Three cases, each in its own child process, same workload, twice each (the better kept):

- **this build**: :data:`cronfleet.jobs.http.POOLS` pooled clients, sniffio installed;
- **one pool** (the peer): one pooled client, as before the split. httpcore's pool looks
  at each of its connections (a ``poll`` of each idle socket) for every request it
  assigns, so the cost of a request grows with the connections of its pool;
- **one pool, no sniffio** (the peer before both changes): httpcore also asks
  ``import sniffio`` on every request to tell asyncio from trio; anyio >= 4.5 no longer
  depends on sniffio, and an install without it searched ``sys.path`` at each call. The
  child makes ``import sniffio`` fail after the same search (for a name that does not
  exist), which is what an install without it does.

Printed: CPU (user + system) per run in microseconds, and each peer's ratio to this build.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC

SINK = r"""
import asyncio, sys
async def serve(r, w):
    try:
        while True:
            await r.readuntil(b"\r\n\r\n")
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await w.drain()
    except Exception:
        w.close()
async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
"""


def child(port: int, requests: int, concurrency: int, case: str) -> dict[str, float]:
    if case == "before":
        import importlib.machinery

        real = importlib.machinery.PathFinder.find_spec

        def find_spec(name: str, path: object = None, target: object = None) -> object:
            if name == "sniffio":  # the same search, for a module that is not there
                return real("sniffio_not_installed_here", path, target)  # type: ignore[arg-type]
            return real(name, path, target)  # type: ignore[arg-type]

        importlib.machinery.PathFinder.find_spec = find_spec  # type: ignore[method-assign]
        sys.modules.pop("sniffio", None)
    from datetime import datetime

    from cronfleet.jobs import http
    from cronfleet.jobs.http import HttpJob, HttpRuntime
    from cronfleet.model import RunContext, TriggeredBy

    if case != "this":
        http.POOLS = 1

    runtime = HttpRuntime(allow_private_targets=True)
    job = HttpJob(f"http://127.0.0.1:{port}/hook", method="POST", runtime=runtime)

    async def one(k: int) -> None:
        ctx = RunContext(job_id=f"job-{k}", slot=datetime.now(UTC),
                         triggered_by=TriggeredBy.SCHEDULE, instance_id="bench",
                         fencing_token=None, config={})
        await job(ctx)

    async def main() -> float:
        await asyncio.gather(*[one(k) for k in range(concurrency)])  # warm: connections
        t = time.process_time()
        for start in range(0, requests, concurrency):
            await asyncio.gather(*[one(k) for k in
                                   range(start, min(requests, start + concurrency))])
        return time.process_time() - t

    cpu = asyncio.run(main())
    return {"cpu_us": cpu / requests * 1e6, "sniffio_loaded": float("sniffio" in sys.modules)}


CASES = {"this": "this build", "one-pool": "one pool", "before": "one pool, no sniffio"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 50, 200])
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--child", choices=list(CASES))
    ap.add_argument("--port", type=int)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.port, a.requests, a.concurrency[0], a.child)))
        return
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    results: dict[str, dict[str, float]] = {}
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        for conc in a.concurrency:
            out: dict[str, float] = {}
            for case in [*CASES, *CASES]:  # interleaved, twice: the better of two
                r = subprocess.run(
                    [sys.executable, __file__, "--child", case, "--port", str(port),
                     "--requests", str(a.requests), "--concurrency", str(conc)],
                    capture_output=True, text=True, check=True)
                cpu = json.loads(r.stdout.strip().splitlines()[-1])["cpu_us"]
                out[case] = min(cpu, out.get(case, cpu))
            results[str(conc)] = out
            this = out["this"]
            print(f"{a.requests:,} runs of an HTTP job, {conc} at a time (load "
                  f"{os.getloadavg()[0]:.1f}), CPU per run in the running process:")
            for case, label in CASES.items():
                ratio = "" if case == "this" else f"  ({out[case] / this:.2f}x this build)"
                print(f"  {label:<22} {out[case]:7.0f} us{ratio}")
    finally:
        sink.terminate()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"requests": a.requests, "cpu_us": results}, f, indent=1)


if __name__ == "__main__":
    main()
