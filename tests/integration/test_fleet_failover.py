"""Failover with real processes, one scenario per test, run on each fleet store that shares
it (PostgreSQL and Redis): the holder of the current instant's leases is killed (``kill
-9``) or stopped (``SIGSTOP``), and the survivors take its jobs over.

The store-specific readers (the ledger, the current lease holder) stay in
``test_postgres_fleet.py`` and ``test_redis_fleet.py`` with the tests that are the store's
own; SQLite's kill -9 scenario differs (one long job, its lease broken) and stays in
``test_sqlite_fleet.py``.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cronfleet.store import open_store
from cronfleet.store.base import Instance, InstanceStore

from . import test_postgres_fleet as pgf
from . import test_redis_fleet as rdf

WORKER = Path(__file__).with_name("fleet_worker.py")
pytestmark = pytest.mark.slow

Row = tuple[str, int, str, str | None, str | None, int | None, list[str]]


@dataclass
class Fleet:
    """One store for a fleet of ``fleet_worker.py`` processes and its readers."""

    url: str
    tmp: Path
    ledger: Callable[[], list[Row]]
    holder: Callable[[list[str]], tuple[str, set[str]]]

    def counts_file(self, name: str) -> Path:
        return self.tmp / f"{name}.ran.txt"

    def spawn(self, name: str, until: float, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), "--store", self.url, "--name", name,
             "--until", str(until), "--count", str(self.counts_file(name)), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def handler_counts(self) -> Counter[tuple[str, int]]:
        """How many times each (job, slot) ran, as the handlers counted (``--count``)."""
        return rdf.handler_counts(sorted(self.tmp.glob("*.ran.txt")))


@pytest.fixture(params=["postgres", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    if request.param == "postgres":
        pgf.require_pg()
        schema = pgf.new_schema("fleet")
        try:
            yield Fleet(pgf.store_url(schema), tmp_path, lambda: pgf.ledger(schema),
                        lambda jobs: pgf.current_holder(schema))
        finally:
            pgf.drop_schema(schema)
    else:
        server = rdf.RedisServer(appendonly=True).start()
        try:
            url = f"{server.url}?prefix={rdf.new_prefix()}"
            yield Fleet(url, tmp_path, lambda: rdf.ledger(url),
                        lambda jobs: rdf.current_holder(url, jobs))
        finally:
            server.cleanup()


def test_kill_9_of_the_lease_holder_its_jobs_fire_on_survivors_within_5s(
    fleet: Fleet,
) -> None:
    """Default settings (instance_ttl 2 s, heartbeats every 0.4 s from a thread; on Redis
    heartbeats are judged by the server's TIME), jobs without a timeout (their leases
    last an hour): the process holding the current instant's leases is killed; its jobs
    fire again on the survivors within 5 s (about 2.4 s: the ttl, an interval, the next
    second), its runs are recorded interrupted (instance_lost), and no slot runs twice
    (counted by the handlers)."""
    n_jobs = 60
    jobs = [f"job-{j:04d}" for j in range(n_jobs)]
    until = math.ceil(time.time()) + 30
    args = ("--jobs", str(n_jobs), "--sleep", "0.4")
    procs = [fleet.spawn(f"k{i}", until, *args) for i in range(3)]
    try:
        pgf.wait_ready(procs, timeout=40)
        time.sleep(3)  # the fleet knows itself: work is spread
        holder, held = fleet.holder(jobs)
        pid = int(holder.split(":")[1])
        victim = next(p for p in procs if p.pid == pid)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        victim.wait(10)
        survivors = [p for p in procs if p is not victim]
    except BaseException:
        for p in procs:
            p.kill()
        raise
    pgf.finish(survivors, 120)
    assert held, "the victim held no lease when it was killed"
    victim_name = holder.split(":")[0]
    rows = fleet.ledger()
    hi = until - 3
    # every job of the lost instance fired again on a survivor within 5 s of the kill
    gaps = {}
    for job in held:
        after = sorted(
            r[1] for r in rows
            if r[0] == job and r[2] == "succeeded" and r[4] != victim_name and r[1] > killed_at
        )  # fmt: skip
        assert after, f"{job} never ran again"
        gaps[job] = after[0] - killed_at
    worst = max(gaps.values())
    print(f"held {len(held)} leases; worst job's gap after the kill: {worst:.1f}s")
    assert worst <= 5, sorted(gaps.items(), key=lambda kv: -kv[1])[:5]
    interrupted = [r for r in rows if r[2] == "interrupted"]
    assert interrupted and all(r[3] == "instance_lost" and r[4] == victim_name
                               for r in interrupted), interrupted
    # from 5 s after the kill on, every slot of every job ran once, on the survivors
    lo = math.ceil(killed_at) + 5
    expected = {(j, s) for j in jobs for s in range(lo, hi + 1)}
    ran_ = fleet.handler_counts()
    missing = expected - set(ran_)
    assert not missing, sorted(missing)[:10]
    assert max(ran_.values()) == 1, [k for k, n in ran_.items() if n > 1][:10]
    slots = Counter((r[0], r[1]) for r in rows if r[2] != "interrupted")
    assert max(slots.values()) == 1, [k for k, n in slots.items() if n > 1][:10]


class Instances:
    """The ``instances`` rows by process name (``--name``), read on one store connection
    kept for the test."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        store = open_store(url)
        assert isinstance(store, InstanceStore)
        self.store = store
        self.loop.run_until_complete(store.open())

    def read(self) -> dict[str, Instance]:
        rows = self.loop.run_until_complete(self.store.list_instances(ttl=2.0))
        return {i.instance_id.split(":")[0]: i for i in rows}

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


def test_a_blocked_loop_is_not_lost_a_stopped_process_is_within_the_ttl(fleet: Fleet) -> None:
    """instance_ttl 2 s. A process whose event loop is held 1.5 s out of every 2 s (a
    handler calling ``time.sleep`` on it) keeps beating from its thread: the other
    process never declares it lost. Stopped (SIGSTOP), it is declared lost within about
    the ttl and an interval (2.4 s)."""
    until = math.ceil(time.time()) + 30
    args = ("--jobs", "20", "--sleep", "0.1", "--log-level", "WARNING")
    blocked = fleet.spawn("blocked", until, *args, "--block-loop", "1.5")
    other = fleet.spawn("other", until, *args)
    procs = [blocked, other]
    seen = Instances(fleet.url)
    try:
        pgf.wait_ready(procs, timeout=40)
        time.sleep(12)  # six holds of 1.5 s, three ttls between each beat of the loop's
        rows = seen.read()
        assert rows["blocked"].live and rows["blocked"].lost_at is None, rows
        os.kill(blocked.pid, signal.SIGSTOP)
        stopped_at = time.time()
        while (found := seen.read()["blocked"]).lost_at is None and time.time() < stopped_at + 10:
            time.sleep(0.05)
        lost_after = time.time() - stopped_at
        os.kill(blocked.pid, signal.SIGCONT)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finally:
        seen.close()
    outputs = pgf.finish(procs, 60)
    print(f"a stopped process was declared lost {lost_after:.2f} s after SIGSTOP")
    assert found.lost_at is not None and found.lost_by is not None
    assert found.lost_by.startswith("other:")
    assert lost_after < 2.0 + 0.4 + 1.0, lost_after  # the ttl, an interval; 1 s of slack
    blocked_out, other_out = outputs
    # declared lost once: when stopped, never while its loop was held
    assert other_out.count(" is lost: ") == 1, other_out[-3000:]
    assert blocked_out.count("was declared lost by") == 1, blocked_out[-3000:]


def test_sigstop_for_three_ttls_then_sigcont_no_duplicate_and_it_rejoins(
    fleet: Fleet,
) -> None:
    """instance_ttl 2 s: the process holding the current leases is stopped for 12 s. The
    survivors declare it lost and run its jobs; woken, it learns it was lost, does not
    run its stale claims, its late results are kept on the interrupted rows, and it
    re-joins (runs jobs again, without a restart). No slot runs twice, counted by the
    handlers."""
    n_jobs = 60
    jobs = [f"job-{j:04d}" for j in range(n_jobs)]
    until = math.ceil(time.time()) + 40
    args = ("--jobs", str(n_jobs), "--sleep", "0.4", "--instance-ttl", "2s",
            "--log-level", "WARNING")  # fmt: skip
    procs = [fleet.spawn(f"s{i}", until, *args) for i in range(3)]
    try:
        pgf.wait_ready(procs, timeout=40)
        time.sleep(3)
        holder, _ = fleet.holder(jobs)
        pid = int(holder.split(":")[1])
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()
        time.sleep(12)  # 6 ttls: the survivors judge only once their own beats are steady
        os.kill(pid, signal.SIGCONT)
        woke_at = time.time()
    except BaseException:
        for p in procs:
            p.kill()
        raise
    outputs = pgf.finish(procs, 90)
    name = holder.split(":")[0]
    victim_out = next(o for o in outputs if f"DONE {name}:" in o)
    assert "was declared lost by" in victim_out, "\n=====\n".join(o[-3000:] for o in outputs)
    ran_ = fleet.handler_counts()
    dups = [k for k, n in ran_.items() if n > 1]
    assert not dups, dups[:10]
    rows = fleet.ledger()
    slots = Counter((r[0], r[1]) for r in rows)
    twice = {k for k, n in slots.items() if n > 1}
    first = min(twice) if twice else None
    assert not twice, "\n".join(repr(r) for r in rows if (r[0], r[1]) == first)
    lost = [r for r in rows if r[2] == "interrupted"]
    assert {r[3] for r in lost} == {"instance_lost"} and name in {r[4] for r in lost}, lost
    # a survivor whose own beats fell behind the 2 s ttl on a loaded machine may have been
    # declared lost too: then it says so, as the stopped one does
    for other in {r[4] for r in lost} - {name}:
        out = next(o for o in outputs if f"DONE {other}:" in o)
        assert "was declared lost by" in out, (other, out[-3000:])
    # the survivors ran the stopped process's jobs while it was away
    # (every job ran there; a slot may meet its own previous run, late on a loaded
    # machine: skipped `already_executing`, recorded)
    during = [r for r in rows if stopped_at + 8 < r[1] < woke_at - 0.5]
    states = Counter(r[2:5] for r in during)
    assert during and all(r[4] != name for r in during), states
    assert {(r[2], r[3]) for r in during} <= {("succeeded", None),
                                              ("skipped", "already_executing")}, states
    assert {r[0] for r in during if r[2] == "succeeded"} == set(jobs), states
    # it re-joined: it runs jobs again after it woke, without a restart
    later = [r for r in rows if woke_at + 5 < r[1] < until - 3 and r[4] == name]
    assert later and all(r[2] == "succeeded" for r in later)
