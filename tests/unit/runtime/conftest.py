"""Scheduler tests run the real loop with an injected clock on the in-memory store (fast);
one real-store (SQLite) run per scenario is kept.

``make()`` builds schedulers on the store ``store_kind`` names, all of one test on one
database (a fleet). The default is ``"memory"``; a test runs on every kind of
``STORE_KINDS`` (memory, SQLite, Redis) with ``@pytest.mark.parametrize("store_kind",
STORE_KINDS)``, and a module whose tests read the SQLite file itself (``db``) overrides
``store_kind`` to ``"sqlite"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.store.memory import MemoryDatabase, MemoryStore

# 2026-03-02 00:00:00 UTC, a Monday, on a whole hour
T0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


# the store kinds the key scenarios (claims, catch-up, early claims, leases, retry,
# overrides) run on: one name for the whole list
STORE_KINDS = ["memory", "sqlite", "redis"]


@pytest.fixture
def store_kind() -> str:
    return "memory"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cronfleet.db'}"


@pytest.fixture
def make(
    store_kind: str, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest
) -> Callable[..., Scheduler]:
    """Schedulers on one database: each call is a new instance (its own store object)."""
    database = MemoryDatabase()
    url = f"sqlite:///{tmp_path / 'cronfleet.db'}"  # the same file as ``db``
    if store_kind == "redis":  # a private server, a fresh prefix per test
        from store.redis_server import new_prefix

        url = f"{request.getfixturevalue('redis_session').url}?prefix={new_prefix()}"

    schema = None
    if store_kind == "postgres":  # a fresh schema, dropped at the end of the test
        from store.pg import drop_schema, new_schema, pg_url, require_pg

        require_pg()
        schema = new_schema()
        request.addfinalizer(lambda: drop_schema(schema))
        url = pg_url()

    def factory(**kw: Any) -> Scheduler:
        kw.setdefault("instance_id", "test-1")
        kw.setdefault("orphan_interval", 5)
        if store_kind == "memory":
            return Scheduler(store=MemoryStore(database, clock=clock), clock=clock, **kw)
        if store_kind == "postgres":
            from cronfleet.store import PostgresStore

            return Scheduler(store=PostgresStore(url, schema=schema, clock=clock, pool_max=4),
                             clock=clock, **kw)
        assert store_kind in ("sqlite", "redis"), store_kind
        return Scheduler(store=url, clock=clock, **kw)

    return factory


async def settle(*schedulers: Scheduler) -> None:
    """Let every loop react to the clock and write its results."""
    for _ in range(4):
        for _ in range(10):
            await asyncio.sleep(0)
        for s in schedulers:
            if s.running:
                await s.wait_idle()


async def advance(
    clock: FakeClock, seconds: float, *schedulers: Scheduler, step: float = 1.0
) -> None:
    """Move time forward in steps, letting the schedulers act at each step."""
    remaining = seconds
    while remaining > 1e-9:
        d = min(step, remaining)
        clock.advance(d)
        remaining -= d
        await settle(*schedulers)


def hold(s: Scheduler) -> asyncio.Event:
    """Hold ``s``'s loop inside its next instant (at its first store call, reading the
    overrides) until the returned event is set: a loop busy with a long instant, a
    process descheduled. What comes due meanwhile came due while it was busy."""
    gate = asyncio.Event()
    real = s.store.read_overrides

    async def read_overrides(ids: Any) -> Any:
        await gate.wait()
        return await real(ids)

    s.store.read_overrides = read_overrides  # type: ignore[method-assign]
    return gate


class Recorder:
    """A handler that records every context it was called with."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def __call__(self, ctx: Any) -> str:
        self.calls.append(ctx)
        return "ok"


@pytest.fixture
async def running() -> AsyncIterator[list[Scheduler]]:
    """Schedulers appended here are stopped at the end of the test."""
    started: list[Scheduler] = []
    yield started
    for s in started:
        await s.stop()
