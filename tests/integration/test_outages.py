"""Store outages with real processes and default settings (``REQUIRE_GLOBAL``): a
PostgreSQL that stops answering without resetting connections (the TCP proxy *stalls*),
and one whose connections are cut. Evidence: the ledger and a handler-side count file.

Every slot of the window must end ran exactly once (one handler call, one ``succeeded``
row with a fencing token) or with a row saying why it did not run; no slot runs twice;
no process exits.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.pg import TcpProxy, drop_schema, new_schema, pg_url, require_pg

from .test_postgres_fleet import Row, finish, ledger, spawn, store_url, wait_ready

pytestmark = pytest.mark.slow

JOBS = 10


@pytest.fixture
def schema() -> Iterator[str]:
    require_pg()
    name = new_schema("outage")
    yield name
    drop_schema(name)


def handler_calls(path: Path) -> Counter[tuple[str, int]]:
    calls: Counter[tuple[str, int]] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            job, slot, *_ = line.split()
            calls[(job, int(slot))] += 1
    return calls


def account(rows: list[Row], calls: Counter[tuple[str, int]], window: range) -> dict[str, int]:
    """Check every slot of ``window`` for every job; the figures of the run."""
    by_slot: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in rows:
        by_slot[(r[0], r[1])].append(r)
    figures = Counter[str]()
    for job in [f"job-{i:04d}" for i in range(JOBS)]:
        for s in window:
            got = by_slot[(job, s)]
            ran = [r for r in got if r[2] == "succeeded"]
            n = calls[(job, s)]
            assert n <= 1, f"{job} slot {s} ran {n} times: {got}"  # no duplicate
            assert len(ran) == n, (job, s, n, got)  # the ledger says what the handler did
            assert all(r[5] is not None for r in ran), (job, s, got)  # under a claim
            if n:
                figures["ran"] += 1
                continue
            assert got, f"{job} slot {s}: a silent gap (no run, no row)"
            assert len(got) == 1, (job, s, got)
            figures[f"skipped/{got[0][3]}"] += 1
    return dict(figures)


@pytest.mark.parametrize("fault", ["stall", "cut"])
def test_default_settings_keep_exactly_once_through_an_outage(
    schema: str, tmp_path: Path, fault: str
) -> None:
    count_file = tmp_path / "calls.txt"
    with TcpProxy(pg_url()) as proxy:
        url = store_url(schema, proxy.url)
        t0 = math.ceil(time.time()) + 8
        until = t0 + 34
        args = ("--jobs", str(JOBS), "--locking", "default", "--count", str(count_file),
                "--log-level", "ERROR")
        procs = [spawn(url, f"o{i}", until, *args) for i in range(2)]
        try:
            wait_ready(procs)
            time.sleep(max(t0 + 5.5 - time.time(), 0))
            proxy.stall() if fault == "stall" else proxy.cut()
            time.sleep(12)
            proxy.restore()
        finally:
            finish(procs, 120)  # both processes ran to the end and stopped cleanly
    figures = account(ledger(schema), handler_calls(count_file), range(t0, until - 1))
    print(f"{fault}: {figures}")
    assert figures["ran"] > JOBS * 15  # the slots before and after the outage ran
    assert sum(v for k, v in figures.items() if k.startswith("skipped/")) > 0


async def test_start_waits_for_postgres_then_runs(schema: str) -> None:
    """A process started while the database is unreachable waits (backoff, full jitter,
    no limit by default) and starts once it is back."""
    import asyncio

    from cronfleet import RunContext, Scheduler

    with TcpProxy(pg_url()) as proxy:
        proxy.cut()
        s = Scheduler(store_url(schema, proxy.url), instance_id="late-db")
        ran: list[float] = []

        @s.job("1s", id="tick")
        async def tick(ctx: RunContext) -> None:
            ran.append(ctx.slot.timestamp())

        starting = asyncio.ensure_future(s.start())
        await asyncio.sleep(3)
        assert not starting.done() and not s.running  # still waiting, not crashed
        proxy.restore()
        await asyncio.wait_for(starting, 30)
        try:
            await asyncio.sleep(3)
            assert ran, "nothing ran after the database came back"
        finally:
            await s.stop()


async def test_readyz_is_503_while_start_up_waits_for_the_store(schema: str) -> None:
    """``serve(metrics_port=…)`` answers its probes before the scheduler has the store:
    ``/readyz`` 503 ("not connected") while start-up waits, 200 once it is connected."""
    import asyncio
    import socket

    from cronfleet import Scheduler
    from cronfleet.api.serve import serve

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def readyz() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /readyz HTTP/1.1\r\n\r\n")
        await writer.drain()
        data = await reader.read()
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    with TcpProxy(pg_url()) as proxy:
        proxy.cut()
        s = Scheduler(store_url(schema, proxy.url), instance_id="probed")
        stop = asyncio.Event()
        serving = asyncio.ensure_future(serve(s, api=False, stop=stop, metrics_port=port,
                                              metrics_host="127.0.0.1"))
        try:
            answers: list[tuple[int, bytes]] = []
            for _ in range(100):  # the listener is up within a moment; the store is not
                await asyncio.sleep(0.1)
                try:
                    answers.append(await readyz())
                    break
                except OSError:
                    continue
            assert answers, "the probes did not answer while the store was awaited"
            status, body = answers[0]
            assert status == 503 and b"not connected" in body, (status, body)
            assert not s.running
            proxy.restore()
            for _ in range(300):
                await asyncio.sleep(0.1)
                status, body = await readyz()
                if status == 200:
                    break
            assert status == 200, body
        finally:
            stop.set()
            await asyncio.wait_for(serving, 60)


async def test_start_gives_up_after_connect_timeout_on_postgres(schema: str) -> None:
    from cronfleet import Scheduler
    from cronfleet.errors import StoreUnavailable

    with TcpProxy(pg_url()) as proxy:
        proxy.cut()
        s = Scheduler(store_url(schema, proxy.url), connect_timeout=2)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await s.start()
        assert time.monotonic() - started < 20


async def test_stop_is_bounded_when_postgres_stalls(schema: str) -> None:
    """``stop()`` ends within ``shutdown_grace`` plus the store's deadline and the write
    budget, with every connection to the database hanging."""
    import asyncio

    from cronfleet import RunContext, Scheduler

    with TcpProxy(pg_url()) as proxy:
        s = Scheduler(store_url(schema, proxy.url), instance_id="stopper", shutdown_grace=1)

        @s.job("1s", id="tick")
        async def tick(ctx: RunContext) -> None:
            await asyncio.sleep(0.2)

        await s.start()
        await asyncio.sleep(2.5)
        proxy.stall()
        await asyncio.sleep(0.5)
        started = time.monotonic()
        await s.stop()
        took = time.monotonic() - started
        proxy.restore()
    print(f"stop with a stalled database: {took:.1f} s")
    # grace 1 s + one call deadline (10 s) + two write budgets (5 s each), and a margin
    assert took < 30, took


def sqlite_ledger(path: Path) -> list[Row]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT job_id, slot / 1000, status, reason, instance_id, fencing_token, logs "
            "FROM runs ORDER BY id"
        ).fetchall()
    return [(j, int(s), st, r, i.split(":")[0] if i else None, t, []) for j, s, st, r, i, t, _
            in rows]


def test_sqlite_write_lock_held_10s_default_settings(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock for 10 s: nobody freezes for longer than
    the busy timeout, no slot runs twice, every slot ran once or has a row saying why."""
    import sqlite3

    db = tmp_path / "locked.db"
    count_file = tmp_path / "calls.txt"
    url = f"sqlite:///{db}"
    t0 = math.ceil(time.time()) + 6
    until = t0 + 30
    args = ("--jobs", str(JOBS), "--locking", "default", "--count", str(count_file),
            "--log-level", "ERROR")
    procs = [spawn(url, f"l{i}", until, *args) for i in range(2)]
    try:
        wait_ready(procs)
        time.sleep(max(t0 + 5.5 - time.time(), 0))
        holder = sqlite3.connect(db, timeout=30, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        time.sleep(10)
        holder.execute("ROLLBACK")
        holder.close()
    finally:
        finish(procs, 120)
    figures = account(sqlite_ledger(db), handler_calls(count_file), range(t0, until - 1))
    print(f"sqlite lock 10 s: {figures}")
    assert figures["ran"] > JOBS * 12


def test_sqlite_file_corrupted_under_running_processes(tmp_path: Path) -> None:
    """A corrupted file: no process exits, and no slot runs twice (before #12 PREFER_GLOBAL
    jobs failed open on every process for good)."""
    db = tmp_path / "broken.db"
    count_file = tmp_path / "calls.txt"
    url = f"sqlite:///{db}"
    t0 = math.ceil(time.time()) + 6
    until = t0 + 20
    procs = []
    for i in range(2):
        for locking in ("default", "prefer_global"):
            procs.append(spawn(url, f"x{i}{locking[0]}", until, "--jobs", "5", "--prefix",
                               f"{locking[:4]}", "--locking", locking, "--count",
                               str(count_file), "--log-level", "CRITICAL"))
    try:
        wait_ready(procs)
        time.sleep(max(t0 + 5 - time.time(), 0))
        with open(db, "r+b") as f:  # scribble over the pages after the header
            f.seek(4096)
            f.write(b"\xde\xad\xbe\xef" * 4096)
    finally:
        finish(procs, 120)  # every process ran to its end and stopped with exit code 0
    calls = handler_calls(count_file)
    twice = {k: n for k, n in calls.items() if n > 1}
    assert not twice, f"slots run more than once: {sorted(twice)[:10]}"
    assert calls, "nothing ran before the file broke"
