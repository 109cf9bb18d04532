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
            job, slot, _ = line.split()
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
        args = ("--jobs", str(JOBS), "--locking", "default", "--count-file", str(count_file),
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
