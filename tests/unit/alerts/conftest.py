"""Alerts tests run a real scheduler (SQLite file, injected clock) with tiny fakes for the
outside world: a health store in memory and a notifier that records what it would send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.store.memory_side import MemoryHealthStore

T0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


class FakeNotifier:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def deliver(self, policy: Any, note: Any, *, client: Any, secrets: dict[str, str],
                      redact: Any) -> dict[str, str | None]:
        self.sent.append(note)
        return {channel: None for channel in policy.channels}


class Services:
    """What alerts need (an ``HttpRuntime`` in production)."""

    store: str | None = None

    def __init__(self) -> None:
        self.health = MemoryHealthStore()
        self.notifier = FakeNotifier()
        self.vault = None
        self.paused: list[tuple[str, str]] = []

    def client(self) -> Any:
        return None

    async def pause(self, job_id: str, note: str) -> bool:
        self.paused.append((job_id, note))
        return True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def services() -> Services:
    return Services()


@pytest.fixture
async def scheduler(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Scheduler]:
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", clock=clock, instance_id="test-1")
    yield s
    await s.stop()
