"""A second process's catalog refresh after one API job changed, with N stored API jobs
(issue #27, "A million schedules"): the change feed (``Catalog.refresh``: the definitions
changed since the last one applied, keyset pages) against the full reload it replaces
(``Catalog.full_reload``: every definition in one read, as ``refresh`` did before), in the
same run on the same data; and the start-up load of the N jobs both ways.

    .venv/bin/python bench/catalog_refresh.py                    # 100,000 jobs
    .venv/bin/python bench/catalog_refresh.py --jobs 10000 --stores sqlite,redis

Per store (SQLite in a temp dir, PostgreSQL in a throwaway schema, Redis under a
throwaway prefix; ``--pg`` / ``--redis`` URLs): N definitions are seeded directly (one
bulk write: versions 1..N, as N creates leave them; on Redis with the change feed's
sorted set); a "writer" updates one job through the API store; a "reader" process
(another store object, its scheduler not started) measures:

- start-up: a fresh catalog's first ``refresh()`` (pages of 1,000) vs a fresh catalog's
  ``full_reload()``; both build and add all N jobs;
- one change: ``refresh()`` vs ``full_reload()`` after one update each (best of 3),
  rows = the definitions the store returned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def spec(i: int, minute: int = 0) -> dict[str, Any]:
    return {"id": f"job-{i:07d}", "schedule": f"{minute} {i % 24} * * *",
            "http": {"url": f"https://example.com/hook/{i}"}}


class Counting:
    """The API store, counting the definitions each read returned."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_defs_changed(self, after: Any, limit: int) -> Any:
        defs = await self.inner.job_defs_changed(after, limit)
        self.rows += len(defs)
        return defs

    async def job_defs(self, *, include_deleted: bool = False) -> Any:
        defs = await self.inner.job_defs(include_deleted=include_deleted)
        self.rows += len(defs)
        return defs


def rows_of(n: int) -> list[tuple[Any, ...]]:
    now = int(time.time() * 1000)
    return [(f"job-{i:07d}", "default", json.dumps(spec(i), sort_keys=True), i + 1, now, now,
             "bench", "bench", None, "admin") for i in range(n)]


COLUMNS = ("id, team, spec, version, created_at, updated_at, created_by, updated_by, "
           "deleted_at, saved_role")


async def seed(kind: str, url: str, n: int) -> None:
    """N definitions written at once (the stores' schema made by opening them first)."""
    from cronfleet.store.factory import open_store, side_tables

    store: Any = open_store(url)
    await store.open()
    try:
        await side_tables(store).api.catalog_version()  # schema / connection ready
        if kind == "sqlite":
            import sqlite3

            conn = sqlite3.connect(url.removeprefix("sqlite:///"))
            with conn:
                conn.executemany(f"INSERT INTO job_defs ({COLUMNS}) VALUES "
                                 "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows_of(n))
            conn.close()
        elif kind == "postgres":
            import psycopg
            from psycopg import sql

            base, _, schema = url.partition("?schema=")
            with psycopg.connect(base) as conn, conn.cursor() as cur:
                target = sql.SQL("COPY {}.job_defs ({}) FROM STDIN").format(
                    sql.Identifier(schema), sql.SQL(COLUMNS))
                with cur.copy(target) as copy:
                    for row in rows_of(n):
                        copy.write_row(row)
                cur.execute(sql.SQL("ANALYZE {}.job_defs").format(sql.Identifier(schema)))
        else:
            from cronfleet.store.redis.side import client_of

            c = client_of(store)
            side = f"{store.prefix}side:"
            rows = rows_of(n)
            for start in range(0, n, 5000):
                pipe = c.pipeline(transaction=False)
                for r in rows[start:start + 5000]:
                    pipe.hset(f"{side}defs", r[0], json.dumps({
                        "id": r[0], "team": r[1], "spec": json.loads(r[2]), "version": r[3],
                        "created_at": r[4], "updated_at": r[5], "created_by": r[6],
                        "updated_by": r[7], "deleted_at": None, "saved_role": r[9]},
                        sort_keys=True))
                    pipe.zadd(f"{side}defs:changes", {r[0]: r[3]})
                await pipe.execute()
            await c.set(f"{side}defs:version", n)
            await c.set(f"{side}defs:changes:built", "1")
    finally:
        await store.close()


async def reader(url: str, page: int = 1000) -> tuple[Any, Any, Counting]:
    from cronfleet import Scheduler
    from cronfleet.catalog import Catalog
    from cronfleet.store.factory import open_store, side_tables

    store: Any = open_store(url)
    await store.open()
    counted = Counting(side_tables(store).api)
    return store, Catalog(Scheduler(store), counted, page=page), counted  # type: ignore[arg-type]


async def timed(fn: Any) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def measure(kind: str, url: str, n: int) -> dict[str, Any]:
    from cronfleet.store.factory import open_store, side_tables

    t = time.perf_counter()
    await seed(kind, url, n)
    out: dict[str, Any] = {"store": kind, "jobs": n, "seed_s": time.perf_counter() - t}

    from cronfleet.catalog import build_job

    build_job(spec(0), team="default")  # warm-up: the job kinds' modules imported
    # start-up: the first refresh (pages) vs the full reload, each on a fresh process
    store1, new, c_new = await reader(url)
    out["startup_feed_s"] = await timed(new.refresh)
    out["startup_feed_rows"] = c_new.rows
    store2, old, c_old = await reader(url)
    out["startup_full_s"] = await timed(old.full_reload)
    out["startup_full_rows"] = c_old.rows
    await old.refresh()  # its feed's cursor catches up (the measurements below use both)
    assert len(new.scheduler.jobs) == len(old.scheduler.jobs) == n

    writer: Any = open_store(url)
    await writer.open()
    api = side_tables(writer).api
    feed_s, full_s = [], []
    feed_rows = full_rows = 0
    for k in range(3):
        job = (k * 7919) % n
        await api.update_job_def(f"job-{job:07d}", "default", spec(job, 30 + k), "bench")
        c_new.rows = 0
        feed_s.append(await timed(new.refresh))
        feed_rows = c_new.rows
        job = (k * 104729 + 1) % n
        await api.update_job_def(f"job-{job:07d}", "default", spec(job, 40 + k), "bench")
        c_old.rows = 0
        full_s.append(await timed(old.full_reload))
        full_rows = c_old.rows
        await new.refresh()  # (not timed) the feed's reader catches up with that change
        assert str(old.scheduler.jobs[f"job-{job:07d}"].schedule).startswith(f"{40 + k} ")
    out.update(change_feed_s=min(feed_s), change_feed_rows=feed_rows,
               change_full_s=min(full_s), change_full_rows=full_rows)
    for s in (store1, store2, writer):
        await s.close()
    return out


async def cleanup(kind: str, url: str) -> None:
    if kind == "postgres":
        import psycopg
        from psycopg import sql

        base, _, schema = url.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))
    elif kind == "redis":
        import redis.asyncio as aioredis

        base, _, prefix = url.partition("?prefix=")
        c = aioredis.Redis.from_url(base)
        keys = [k async for k in c.scan_iter(match=f"{prefix}*", count=1000)]
        for start in range(0, len(keys), 1000):
            await c.delete(*keys[start:start + 1000])
        await c.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--stores", default="sqlite,postgres,redis")
    ap.add_argument("--pg", default=PG)
    ap.add_argument("--redis", default=REDIS)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    print(f"{a.jobs:,} stored API jobs; {os.cpu_count()} CPUs, load averages "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (start)", flush=True)
    results = []
    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.stores.split(","):
            url = {"sqlite": f"sqlite:///{tmp}/catalog.db",
                   "postgres": f"{a.pg}?schema=bench_catalog_{tag}",
                   "redis": f"{a.redis}?prefix=bench-catalog-{tag}:"}[kind]
            try:
                r = asyncio.run(measure(kind, url, a.jobs))
            finally:
                asyncio.run(cleanup(kind, url))
            results.append(r)
            print(f"\n{kind}: seeded in {r['seed_s']:.1f} s", flush=True)
            print(f"  start-up, {a.jobs:,} jobs: feed (pages of 1,000) "
                  f"{r['startup_feed_s']:.2f} s ({r['startup_feed_rows']:,} rows), full "
                  f"reload {r['startup_full_s']:.2f} s ({r['startup_full_rows']:,} rows)")
            ratio = r["change_full_s"] / max(r["change_feed_s"], 1e-9)
            print(f"  one job changed: feed {r['change_feed_s'] * 1000:.2f} ms "
                  f"({r['change_feed_rows']} rows), full reload "
                  f"{r['change_full_s'] * 1000:.1f} ms ({r['change_full_rows']:,} rows): "
                  f"{ratio:,.0f}x", flush=True)
    print(f"\nload averages {' '.join(f'{x:.2f}' for x in os.getloadavg())} (end)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
