"""One conformance suite for every store: each test runs against every store factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cronfleet.clock import FakeClock
from cronfleet.store import SQLiteStore, Store

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z, a fixed "now" for the fake clock

StoreFactory = Callable[[], Store]


@pytest.fixture(params=["sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def make_store(store_kind: str, tmp_path: Path, clock: FakeClock) -> StoreFactory:
    """Returns a factory: each call is a new store object (a new "instance") on one database."""
    if store_kind == "sqlite":
        path = tmp_path / "cronfleet.db"
        return lambda: SQLiteStore(path, clock=clock)
    raise AssertionError(store_kind)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[Store]:
    s = make_store()
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def other(make_store: StoreFactory, store: Store) -> AsyncIterator[Store]:
    """A second instance's view of the same database."""
    s = make_store()
    await s.open()
    yield s
    await s.close()
