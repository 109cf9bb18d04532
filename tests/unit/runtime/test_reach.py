"""runtime/reach.py: the one rule of waiting for an unreachable store at start-up."""

from __future__ import annotations

import time

import pytest

from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.runtime.reach import until_reachable


async def test_a_step_is_tried_again_until_the_store_answers() -> None:
    tries: list[int] = []

    async def step() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnavailable("connection refused")
        return "open"

    assert await until_reachable(step, "the secrets key check", None) == "open"
    assert len(tries) == 3


async def test_past_the_limit_the_error_names_the_step_and_the_wait() -> None:
    async def step() -> None:
        raise StoreUnavailable("connection refused")

    with pytest.raises(StoreUnavailable) as info:
        await until_reachable(step, "the secrets key check", 0.2)
    text = str(info.value)
    assert text.startswith("the secrets key check: the store is still unreachable after")
    assert "connect_timeout 0.2 s" in text and text.endswith("connection refused")


async def test_the_wait_lasts_the_whole_connect_timeout_whatever_the_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A random wait that would end past the deadline is cut at it, and the step is tried
    there once more: ``connect_timeout 3 s`` gave up after 1.3 s when a 2 s wait was drawn
    at 1.3 s."""
    monkeypatch.setattr("cronfleet.runtime.reach.random.uniform", lambda lo, hi: hi)
    tries: list[float] = []

    async def step() -> None:
        tries.append(time.monotonic())
        raise StoreUnavailable("connection refused")

    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"still unreachable after 0\.3 s"):
        await until_reachable(step, "store x", 0.3)
    assert len(tries) == 2 and tries[1] - started >= 0.3


async def test_any_other_error_stops_at_once() -> None:
    tries: list[int] = []

    async def step() -> None:
        tries.append(1)
        raise StoreError("schema version 99 is newer than this code")

    with pytest.raises(StoreError, match="newer"):
        await until_reachable(step, "store x", None)
    assert tries == [1]
