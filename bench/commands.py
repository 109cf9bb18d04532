"""Command jobs: 1,000 `true` commands due at one instant, and their peer in the same run,
1,000 no-op async Python handlers due at one instant.

Each side runs in a fresh interpreter with the scheduler as shipped (SQLite store in a
temp dir, claims, leases, the run ledger, early claims on), its jobs a one-off ``at`` the
same instant a few seconds after start-up. Figures come from the stored runs:

- lateness of the start: for commands, the process start (``result.spawned_at``: right
  after the fork/exec returned) minus the slot; for handlers, the handler's start
  (``started_at``) minus the slot. p50 / p99 / max, nearest rank.
- throughput: runs / (last start - slot) -- how fast the burst is started -- and runs /
  (last end - slot) -- how fast it is done (every command exited, its row written).

    .venv/bin/python bench/commands.py              # 1,000 of each (~20 s)
    .venv/bin/python bench/commands.py --n 200      # a smaller burst
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from stats import pct  # noqa: E402

MARK = "@@RESULT@@ "


def child(kind: str, n: int) -> dict[str, Any]:
    from cronfleet import RunContext, Scheduler
    from cronfleet.jobs.command import CommandJob

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        s = Scheduler(store=f"sqlite:///{db}", shutdown_grace="60s")
        at = math.ceil(time.time()) + 4
        when = datetime.fromtimestamp(at, UTC).isoformat()

        async def noop(ctx: RunContext) -> None:
            return None

        for i in range(n):
            if kind == "commands":
                s.add_job(CommandJob(["true"]).job(None, id=f"cmd-{i:04d}", at=when))
            else:
                s.job(None, id=f"fn-{i:04d}", at=when)(noop)

        async def go() -> None:
            async with s:
                while time.time() < at + 1 or s.runner.active:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)

        asyncio.run(go())
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT status, started_at, finished_at, result FROM runs "
                            "WHERE status != 'skipped'").fetchall()
        conn.close()
    starts, ends, statuses = [], [], []
    for status, started, finished, result in rows:
        statuses.append(status)
        if kind == "commands":
            spawned = json.loads(result)["spawned_at"]
            starts.append(datetime.fromisoformat(spawned).timestamp() - at)
        else:
            starts.append(started / 1000 - at)
        ends.append(finished / 1000 - at)
    return {"kind": kind, "runs": len(rows), "succeeded": statuses.count("succeeded"),
            "p50": pct(starts, 50), "p99": pct(starts, 99), "max": max(starts),
            "last_end": max(ends), "started_per_s": len(starts) / max(max(starts), 1e-9),
            "done_per_s": len(ends) / max(max(ends), 1e-9)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--child", choices=("commands", "handlers"))
    args = p.parse_args()
    if args.child:
        print(MARK + json.dumps(child(args.child, args.n)), flush=True)
        return
    results = {}
    for kind in ("commands", "handlers"):
        out = subprocess.run([sys.executable, __file__, "--child", kind, "--n", str(args.n)],
                             capture_output=True, text=True, check=True).stdout
        line = next(x for x in out.splitlines() if x.startswith(MARK))
        results[kind] = json.loads(line.removeprefix(MARK))
    print(f"{args.n} runs due at one instant; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'':28} {'ran':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'started/s':>10} "
          f"{'done/s':>8}")
    for kind, title in (("commands", "`true` commands (start)"),
                        ("handlers", "async handlers (peer)")):
        r = results[kind]
        print(f"{title:28} {r['succeeded']:>4}/{r['runs']:<4} {r['p50'] * 1000:>8.1f} "
              f"{r['p99'] * 1000:>8.1f} {r['max'] * 1000:>8.1f} {r['started_per_s']:>10.0f} "
              f"{r['done_per_s']:>8.0f}")
    c, h = results["commands"], results["handlers"]
    print(f"ratio commands / handlers: p99 {c['p99'] / max(h['p99'], 1e-9):.1f}x, "
          f"done/s {c['done_per_s'] / max(h['done_per_s'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
