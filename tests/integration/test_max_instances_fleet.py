"""``max_instances`` = 2 across 3 real processes, on SQLite, PostgreSQL and Redis (a private
``redis-server`` with AOF, never the shared 6379): a job every
second whose handler sleeps 2.5 s. Counted on the handler side (start and end times written
by each handler): never more than 2 runs at once, 2 running most of the time (2/3 is the
most this load allows: run, run, skip), each slot run at most once; the ledger agrees
(every slot of the window run or skipped, exactly once)."""

from __future__ import annotations

import math
import sqlite3
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from store.pg import drop_schema, new_schema, pg_url, require_pg
from store.redis_server import RedisServer, new_prefix

from .test_postgres_fleet import finish, spawn, store_url, wait_ready
from .test_redis_fleet import ledger

pytestmark = pytest.mark.slow

SECONDS = 24  # the measured window


def spans(path: Path) -> list[tuple[int, str, float, float]]:
    out = []
    for line in path.read_text().splitlines():
        _job, slot, name, began, ended = line.split()
        out.append((int(slot), name, float(began), float(ended)))
    return out


def events(runs: list[tuple[int, str, float, float]]) -> list[tuple[float, int]]:
    """Handler starts (+1) and ends (-1) in time order; an end first at one instant."""
    return sorted([(b, 1) for _, _, b, _ in runs] + [(e, -1) for _, _, _, e in runs])


def most_concurrent(runs: list[tuple[int, str, float, float]]) -> int:
    """The largest number of handlers running at one instant (their own times)."""
    now = peak = 0
    for _, step in events(runs):
        now += step
        peak = max(peak, now)
    return peak


def two_share(runs: list[tuple[int, str, float, float]], lo: float, hi: float) -> float:
    """The share of [lo, hi] during which exactly 2 handlers ran. With runs of 2.5 s every
    second and 2 lanes the pattern is run, run, skip (3 s): 2 run 2/3 of the time."""
    now, last, two = 0, lo, 0.0
    for at, step in events(runs):
        at_c = min(max(at, lo), hi)
        if now == 2:
            two += at_c - last
        last = at_c
        now += step
    return two / (hi - lo)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_three_processes_max_instances_2_never_more_than_two_runs(
    kind: str, tmp_path: Path
) -> None:
    schema = None
    server = None
    if kind == "postgres":
        require_pg()
        schema = new_schema("lanes")
        url = store_url(schema)
    elif kind == "redis":
        server = RedisServer(appendonly=True).start()
        url = f"{server.url}?prefix={new_prefix()}"
    else:
        url = f"sqlite:///{tmp_path / 'lanes.db'}"
    try:
        path = tmp_path / "spans.txt"
        until = math.ceil(time.time()) + SECONDS + 10
        args = ("--jobs", "1", "--every", "1s", "--sleep", "2.5", "--max-instances", "2",
                "--prefix", "lane", "--spans", str(path))
        procs = [spawn(url, f"p{i}", until, *args) for i in range(3)]
        ready = wait_ready(procs)
        outputs = finish(procs, SECONDS + 60)
        runs = spans(path)
        lo, hi = math.ceil(ready) + 3, until - 4  # every process up, none stopping
        peak = most_concurrent(runs)
        share = two_share(runs, lo, hi)
        slots = Counter(slot for slot, *_ in runs)
        rows = ledger_rows(kind, url, tmp_path, schema)
        by_slot = Counter(slot for slot, _status in rows)
        window = range(int(lo), int(hi) + 1)
        print(f"{kind}: {len(runs)} runs, peak {peak}, two running {share:.0%} of "
              f"[{lo}, {hi}], by process {Counter(n for _, n, _, _ in runs)}, statuses "
              f"{Counter(st for _, st in rows)}")
        assert peak <= 2, sorted(runs)
        assert max(slots.values()) == 1  # each slot ran once at most
        assert share >= 0.6, share  # 2/3 at best (see two_share)
        # the ledger: every slot of the window recorded exactly once (run or skipped)
        assert all(by_slot[s] == 1 for s in window), {s: by_slot[s] for s in window}
        ran = {slot for slot, st in rows if st == "succeeded"}
        assert ran == {s for s in slots if s in ran}  # no succeeded row without its handler
        assert {s for s in slots if lo <= s <= hi} == {s for s in ran if lo <= s <= hi}
        # (which process runs a slot is the claim race's: mostly the job's owner, which
        # claims first; the others' claims follow SPREAD_DELAY later)
        assert all("DONE" in o for o in outputs)
    finally:
        if schema is not None:
            drop_schema(schema)
        if server is not None:
            server.cleanup()


def ledger_rows(kind: str, url: str, tmp: Path, schema: str | None) -> list[tuple[int, str]]:
    if kind == "redis":
        return [(slot, st) for job, slot, st, *_ in ledger(url) if job == "lane-0000"]
    if kind == "sqlite":
        con = sqlite3.connect(tmp / "lanes.db")
        got = con.execute("SELECT slot / 1000, status FROM runs WHERE job_id = 'lane-0000'")
        return [(int(s), st) for s, st in got.fetchall()]
    assert schema is not None
    with psycopg.connect(pg_url()) as conn:
        got = conn.execute(
            f'SELECT extract(epoch FROM slot)::bigint, status FROM "{schema}".runs '
            "WHERE job_id = 'lane-0000'"
        ).fetchall()
    return [(int(s), st) for s, st in got]
