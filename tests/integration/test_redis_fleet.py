"""Exactly once with real processes on one Redis: evidence from the ledger (read through
``RedisStore``) and from the handlers themselves (``--count``).

Each test starts its own ``redis-server`` on a free port in a temp dir (never the shared
6379); without the binary these skip on a laptop and fail under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronfleet.store.redis import RedisStore
from store.redis_server import RedisServer, new_prefix

from .stalls import StallWatch, excused
from .strike import EARLY_ENOUGH, wait_for_early_in_a_second

WORKER = Path(__file__).with_name("fleet_worker.py")
pytestmark = pytest.mark.slow

Row = tuple[str, int, str, str | None, str | None, int | None, list[str]]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer(appendonly=True).start()
    yield s
    s.cleanup()


def spawn(url: str, name: str, until: float, count: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--store", url, "--name", name, "--until", str(until),
         "--count", str(count), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def wait_ready(procs: list[subprocess.Popen[str]], timeout: float = 40) -> float:
    deadline = time.time() + timeout
    for p in procs:
        assert p.stdout is not None
        while True:
            line = p.stdout.readline()
            if line.startswith("READY"):
                break
            if not line and p.poll() is not None:
                raise AssertionError(f"worker exited early with {p.returncode}")
            if time.time() > deadline:
                raise AssertionError("workers did not start in time")
    return time.time()


def finish(procs: list[subprocess.Popen[str]], timeout: float) -> list[str]:
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outputs)
    return outputs


def ledger(url: str) -> list[Row]:
    """``(job, slot epoch s, status, reason, instance name, token, logs)`` of every run."""

    async def read() -> list[Row]:
        store = RedisStore(url)
        await store.open()
        try:
            out: list[Row] = []
            before = None
            while True:
                page = await store.list_runs(limit=5000, before_id=before)
                if not page:
                    break
                for r in page:
                    inst = r.instance_id.split(":")[0] if r.instance_id else None
                    out.append((r.job_id, round(r.slot.timestamp()), r.status.value, r.reason,
                                inst, r.fencing_token, r.logs))  # fmt: skip
                before = page[-1].id
            return out
        finally:
            await store.close()

    return asyncio.run(read())


def live_lease_holder(url: str, jobs: list[str]) -> str | None:
    """The holder of a lease with more than 25 s to live (a run in progress), if any."""

    async def read() -> str | None:
        store = RedisStore(url)
        await store.open()
        try:
            now = await store.now()
            for st in (await store.read_states(jobs)).values():
                if st.lease_until is not None and st.lease_until.timestamp() > now + 25:
                    return st.lease_holder
            return None
        finally:
            await store.close()

    return asyncio.run(read())


def handler_counts(files: list[Path]) -> Counter[tuple[str, int]]:
    c: Counter[tuple[str, int]] = Counter()
    for f in files:
        if f.exists():
            for line in f.read_text().splitlines():
                job, slot = line.split()[:2]
                c[(job, int(slot))] += 1
    return c


def test_three_processes_100_jobs_every_second_exactly_once(
    server: RedisServer, tmp_path: Path
) -> None:
    n_jobs, seconds = 100, 20
    until = math.ceil(time.time()) + seconds + 8
    url = f"{server.url}?prefix={new_prefix()}"
    counts = [tmp_path / f"p{i}.txt" for i in range(3)]
    with StallWatch() as watch:
        procs = [spawn(url, f"p{i}", until, counts[i], "--jobs", str(n_jobs)) for i in range(3)]
        try:
            ready = wait_ready(procs)
        finally:
            outputs = finish(procs, seconds + 60)
    lo, hi = math.ceil(ready) + 2, until - 2
    assert hi - lo >= seconds - 8
    rows = ledger(url)
    ran = Counter((j, s) for j, s, st, *_ in rows if st == "succeeded")
    handled = handler_counts(counts)
    expected = {(f"job-{j:04d}", s) for j in range(n_jobs) for s in range(lo, hi + 1)}
    in_window = [r for r in rows if lo <= r[1] <= hi]
    # a machine that stood still (a paused CI VM): its slots end `skipped / missed`, by design
    stalled = excused(expected - set(ran), [r[:4] for r in in_window], watch)
    expected -= stalled
    print(
        f"window {hi - lo + 1}s, expected {len(expected)}, ran {len(ran)}, handler starts "
        f"{sum(handled[k] for k in expected)}, {len(stalled)} in stalls {watch.stalls}, "
        f"by instance {Counter(r[4] for r in in_window)}"
    )
    assert len(stalled) <= len(expected), "the machine stood still for most of the test"
    assert not {k for k, n in ran.items() if n > 1}
    assert not expected - set(ran), sorted(expected - set(ran))[:10]
    # the handlers agree: each expected slot started exactly once, across the 3 processes
    assert all(handled[k] == 1 for k in expected), [
        (k, handled[k]) for k in sorted(expected) if handled[k] != 1
    ][:10]
    assert max(handled.values()) == 1
    assert all(r[2] == "succeeded" or watch.covers(r[1]) for r in in_window), Counter(
        r[2:4] for r in in_window)
    assert {r[4] for r in in_window} == {"p0", "p1", "p2"}  # the work was shared
    assert all("DONE" in o for o in outputs)


def test_kill_9_a_worker_no_slot_runs_twice_and_none_is_lost(
    server: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL one of three processes mid-run: its leased runs are marked interrupted once
    (lease expiry judged by the server's TIME), every other slot runs exactly once."""
    until = math.ceil(time.time()) + 34  # failover takes ~2 s: 30 s of slots after it
    url = f"{server.url}?prefix={new_prefix()}"
    counts = [tmp_path / f"k{i}.txt" for i in range(3)]
    args = ("--jobs", "10", "--every", "2s", "--sleep", "1.5", "--timeout", "2s")
    procs = [spawn(url, f"k{i}", until, counts[i], *args) for i in range(3)]
    try:
        ready = wait_ready(procs)
        holder = None
        deadline = time.time() + 20
        while holder is None and time.time() < deadline:
            holder = live_lease_holder(url, [f"job-{j:04d}" for j in range(10)])
            if holder is None:
                time.sleep(0.05)
        assert holder, "no run took a lease"
        victim = next(p for p in procs if p.pid == int(holder.split(":")[1]))
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time()
        victim.wait(10)
        survivors = [p for p in procs if p is not victim]
        victim_name = holder.split(":")[0]
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finish(survivors, 120)
    rows = ledger(url)
    lo, hi = math.ceil(ready) + 2, until - 4
    slots: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        if lo <= r[1] <= hi:
            slots[(r[0], r[1])].append(r)
    expected = {(f"job-{j:04d}", s) for j in range(10) for s in range(lo, hi + 1) if s % 2 == 0}
    assert set(slots) == expected, sorted(expected ^ set(slots))[:10]  # nothing lost
    assert all(len(v) == 1 for v in slots.values()), [v for v in slots.values() if len(v) > 1]
    handled = handler_counts(counts)
    assert max(handled.values()) == 1, [k for k, n in handled.items() if n > 1][:10]
    interrupted = [r for r in rows if r[2] == "interrupted"]  # the kill may precede lo
    statuses = Counter(v[0][2:5] for v in slots.values())
    print(f"killed {victim_name} at {killed_at - lo:.1f}s into the window; {statuses}")
    assert interrupted, "the victim held no run when it was killed"
    # its short lease expired (the reaper) or the survivors declared it lost, whichever
    # came first: either way once, naming it
    assert all(r[4] == victim_name and r[3] in ("lease_expired", "instance_lost")
               for r in interrupted), interrupted
    assert all(r[1] <= killed_at + 1 for r in interrupted)
    assert len({(r[0], r[1]) for r in interrupted}) == len(interrupted)
    # once the survivors declared the victim lost (ttl 2 s) or its short leases expired,
    # its jobs ran on them
    late = [v[0] for k, v in slots.items() if k[1] > killed_at + 8]
    assert late and all(r[2] == "succeeded" and r[4] != victim_name for r in late)


def current_holder(url: str, jobs: list[str], timeout: float = 20) -> tuple[str, set[str]]:
    """The instance holding the most live leases right now (the current instant's runs)
    and the jobs whose leases it holds, read in one script call (atomic on the server).

    Read early in a second and returned only while still early in it: the jobs fire on
    whole seconds and their handlers take 0.4 s, so the caller that signals the holder
    right after this returns strikes while its runs are in flight, not just after they
    released their leases."""

    async def read() -> tuple[str, set[str]] | None:
        store = RedisStore(url)
        await store.open()
        try:
            deadline = time.time() + timeout
            while time.time() < deadline:
                await asyncio.sleep(wait_for_early_in_a_second())
                started = time.time()
                now = await store.now()
                held: dict[str, set[str]] = defaultdict(set)
                for st in (await store.read_states(jobs)).values():
                    live = st.lease_until is not None and st.lease_until.timestamp() > now
                    if st.lease_holder and live:
                        held[st.lease_holder].add(st.job_id)
                if held and time.time() - math.floor(started) < EARLY_ENOUGH:
                    holder = max(held, key=lambda h: len(held[h]))
                    return holder, held[holder]
            return None
        finally:
            await store.close()

    found = asyncio.run(read())
    if found is None:
        raise AssertionError("no run took a lease")
    return found


def test_redis_killed_and_restarted_with_aof_no_slot_runs_twice(
    server: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL the Redis server (AOF, appendfsync always) and start it again on the same
    port and directory: REQUIRE_GLOBAL jobs never run without a claim, no slot runs twice
    (handler side), and every slot has a record (its run or a store_unavailable skip)."""
    t0 = math.ceil(time.time()) + 8
    until = t0 + 26
    url = f"{server.url}?prefix={new_prefix()}"
    counts = [tmp_path / f"r{i}.txt" for i in range(3)]
    args = ("--jobs", "0", "--require-jobs", "30", "--log-level", "ERROR")
    procs = [spawn(url, f"r{i}", until, counts[i], *args) for i in range(3)]
    try:
        wait_ready(procs)
        time.sleep(max(t0 + 6.5 - time.time(), 0))
        down_at = time.time()
        server.kill()
        time.sleep(3)
        server.start()
        up_at = time.time()
    finally:
        finish(procs, 90)
    rows = ledger(url)
    handled = handler_counts(counts)
    assert max(handled.values()) == 1, [k for k, n in handled.items() if n > 1][:10]
    by_slot: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        by_slot[(r[0], r[1])].append(r)
    outage = range(math.floor(down_at), math.ceil(up_at) + 8)  # + reconnect backoff
    skipped = 0
    for job in [f"req-{i:04d}" for i in range(30)]:
        for s in range(t0, until - 1):
            got = by_slot[(job, s)]
            runs = [r for r in got if r[2] == "succeeded"]
            assert got, (f"{job} slot {s} has no record; t0 {t0}, until {until}, server down "
                         f"{down_at:.2f} to {up_at:.2f}; the job's rows: "
                         f"{sorted((r[1], r[2], r[3], r[4]) for r in rows if r[0] == job)}")
            assert all(r[5] is not None for r in runs) and len(runs) <= 1, (job, s, got)
            if s not in outage:
                assert len(got) == 1 and len(runs) == 1, (job, s, got)
            else:
                skips = [r for r in got if r[3] == "store_unavailable"]
                skipped += len(skips)
                # right after the outage a slot may meet the lease of the job's previous
                # run whose release was not written yet: recorded, with the holder named
                # (docs/reliability.md, "still recorded, not lost")
                overlap = [r for r in got if r[3] == "already_executing" and r[4]]
                assert runs or skips or overlap, (job, s, got)
                assert handled[(job, s)] == len(runs), (job, s, got, handled[(job, s)])
    assert skipped, "no slot was skipped: was the server down?"
    print(f"outage {up_at - down_at:.1f}s, store_unavailable skips {skipped}")
