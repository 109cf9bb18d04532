"""SQLite retention in small transactions: how long a large pass takes, and how long
another store call waits meanwhile (the store has one thread).

    .venv/bin/python bench/sqlite_prune.py [--runs N]     (default 1,000,000)

The database is written in a temporary directory, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import tempfile
import time

from cronfleet.store.sqlite.store import SQLiteStore

OLD = 1_000_000_000_000  # 2001-09-09 in ms: every run is past the 30-day retention
INSERT = (
    "INSERT INTO runs (job_id, slot, triggered_by, status, claimed_at, finished_at, manual, "
    "is_catchup, is_recovery, attempt) VALUES (?, ?, 'schedule', 'succeeded', ?, ?, 0, 0, 0, 1)"
)


async def main(n: int) -> None:
    folder = tempfile.mkdtemp(prefix="cronfleet-prune-")
    try:
        await prune_in(os.path.join(folder, "prune.db"), n)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def prune_in(path: str, n: int) -> None:
    store = SQLiteStore(path)
    await store.open()
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.executemany(INSERT, ((f"j{i % 50}", OLD + i, OLD + i, OLD + i) for i in range(n)))
    store = SQLiteStore(path)
    await store.open()
    longest = 0.0
    done = False

    async def other_calls() -> None:
        nonlocal longest
        while not done:
            t = time.perf_counter()
            await store.read_states(["j1"])
            longest = max(longest, time.perf_counter() - t)
            await asyncio.sleep(0.01)

    probe = asyncio.ensure_future(other_calls())
    t = time.perf_counter()
    _, runs = await store.prune(claims_older_than=time.time() - 7 * 86400,
                                runs_older_than=time.time() - 30 * 86400, runs_per_job=1000)
    took = time.perf_counter() - t
    done = True
    await probe
    await store.close()
    print(f"pruned {runs:,} of {n:,} runs in {took:.1f} s; "
          f"longest wait of another call meanwhile: {longest * 1000:.0f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="old runs to prune")
    asyncio.run(main(ap.parse_args().runs))
