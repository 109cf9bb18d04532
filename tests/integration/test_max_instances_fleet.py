"""``max_instances`` = 2 across 3 real processes, on SQLite, PostgreSQL and Redis (a private
``redis-server`` with AOF, never the shared 6379): a job every
second whose handler sleeps 2.5 s. Counted on the handler side (start and end times written
by each handler): never more than 2 runs at once, 2 running most of the time (2/3 is the
most this load allows: run, run, skip), each slot run at most once; the ledger agrees
(every slot of the window run or skipped, exactly once)."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from store.pg import drop_schema, new_schema, pg_url, require_pg
from store.redis_server import RedisServer, new_prefix

from .test_postgres_fleet import finish, spawn, store_url, wait_ready
from .test_redis_fleet import current_holder, ledger

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
        # (which process runs a slot is its job's owner's, or the claim race's while the
        # processes start and divide the jobs)
        assert all("DONE" in o for o in outputs)
    finally:
        if schema is not None:
            drop_schema(schema)
        if server is not None:
            server.cleanup()


def test_redis_kill_9_of_a_lane_holder_its_lane_is_broken_and_two_run_again(
    tmp_path: Path,
) -> None:
    """max_instances = 2 on Redis, 3 processes, a 2.5 s handler every second: the process
    holding lane 0 is killed (SIGKILL). Its lanes are broken by a survivor once its heartbeat
    is older than the ttl (its runs recorded interrupted / instance_lost, naming it); from
    then on two runs hold the lanes again; never more than 2 at once, no slot run twice."""
    server = RedisServer(appendonly=True).start()
    try:
        url = f"{server.url}?prefix={new_prefix()}"
        path = tmp_path / "spans.txt"
        until = math.ceil(time.time()) + 32
        args = ("--jobs", "1", "--every", "1s", "--sleep", "2.5", "--max-instances", "2",
                "--prefix", "lane", "--spans", str(path))
        procs = [spawn(url, f"p{i}", until, *args) for i in range(3)]
        try:
            wait_ready(procs)
            time.sleep(4)
            holder, _ = current_holder(url, ["lane-0000"])
            pid = int(holder.split(":")[1])
            victim = next(p for p in procs if p.pid == pid)
            os.kill(pid, signal.SIGKILL)
            killed_at = time.time()
            victim.wait(10)
        except BaseException:
            for p in procs:
                p.kill()
            raise
        outputs = finish([p for p in procs if p is not victim], 120)
        runs = spans(path)
        rows = ledger(url)
        name = holder.split(":")[0]
        lo, hi = math.ceil(killed_at) + 8, until - 4  # lanes broken (ttl 2 s), none stopping
        share = two_share(runs, lo, hi)
        lost = [r for r in rows if r[2] == "interrupted"]
        print(f"killed {name}; {len(runs)} runs, peak {most_concurrent(runs)}, two running "
              f"{share:.0%} of [{lo}, {hi}], interrupted {[(r[1], r[3], r[4]) for r in lost]}")
        assert most_concurrent(runs) <= 2, sorted(runs)
        assert max(Counter(slot for slot, *_ in runs).values()) == 1
        assert lost and all(r[3] == "instance_lost" and r[4] == name for r in lost), lost
        assert share >= 0.6, share  # both lanes in use again (2/3 at best, see two_share)
        slots = Counter(r[1] for r in rows if r[2] != "interrupted")
        assert max(slots.values()) == 1, [k for k, n in slots.items() if n > 1]
        assert all("DONE" in o for o in outputs)
    finally:
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
