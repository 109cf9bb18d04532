"""A pathological body_regex fails its run with a clear error and never blocks the process:
a 1 s job keeps firing on time while it is matched (a real scheduler, real time)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cronfleet import Scheduler
from cronfleet.jobs.http import HttpJob, HttpJobFailed, HttpRuntime, TargetPolicy
from cronfleet.jobs.matching import Matcher, RegexTimeout

from .echo import Target
from .test_ssrf import ctx

# (a+)+$ against 28 a's and a "!": about 2^28 steps -- minutes in the event loop
EVIL = b"a" * 28 + b"!"


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target(EVIL)
    yield server
    server.close()


async def test_a_1s_job_keeps_firing_during_a_pathological_match(
        target: Target, tmp_path: Path) -> None:
    rt = HttpRuntime(regex_timeout=1.0)
    local = TargetPolicy.parse(["127.0.0.1"])
    s = Scheduler(store=f"sqlite:///{tmp_path / 'redos.db'}", instance_id="redos")
    ticks: list[float] = []

    ticking = asyncio.Event()

    @s.job("1s", id="tick")
    def tick(ctx: Any) -> None:
        ticks.append(time.monotonic())
        if len(ticks) >= 2:
            loop.call_soon_threadsafe(ticking.set)

    evil = HttpJob(target.url("/evil"), body_regex="(a+)+$", runtime=rt, timeout=10,
                   private_targets=local)
    fine = HttpJob(target.url("/fine"), body_regex=r"a{28}!$", runtime=rt, timeout=10,
                   private_targets=local)
    s.add_job(evil.job("@yearly", id="evil"))
    s.add_job(fine.job("@yearly", id="fine"))
    loop = asyncio.get_running_loop()
    try:
        async with s:
            await asyncio.wait_for(ticking.wait(), 30)
            began = time.monotonic()
            runs = [await s.trigger_async("evil", wait=True) for _ in range(3)]
            matched = await s.trigger_async("fine", wait=True)  # a new worker serves it
            ended = time.monotonic()
            await asyncio.sleep(1.2)
    finally:
        await rt.aclose()
    for run in runs:
        assert run.status.value == "failed"
        assert "body_regex: matching took longer than 1s" in (run.error or "")
    assert matched.status.value == "succeeded", matched.error
    assert ended - began >= 3.0  # three matches of a second each: the window is real
    during = [t for t in ticks if began - 1 <= t <= ended + 1]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    # every second had its tick: no gap near the length of a match, let alone minutes
    assert len(during) >= int(ended - began) + 1, gaps
    assert max(gaps) < 1.8, gaps


async def test_the_matcher_answers_and_recovers() -> None:
    m = Matcher(timeout=0.5)
    try:
        assert await m.search(r"b+c", "aabbbcd") is True
        assert await m.search(r"^x", "aabbbcd") is False
        with pytest.raises(RegexTimeout, match=r"longer than 0\.5s"):
            await m.search("(a+)+$", "a" * 30 + "!")
        assert await m.search("(a+)+$", "aaa") is True  # a new worker
        with pytest.raises(ValueError, match="error"):
            await m.search("(", "x")
    finally:
        m.close()


async def test_only_the_first_mebibyte_is_matched(target: Target) -> None:
    target.body = b"x" * (1024 * 1024) + b"NEEDLE"
    rt = HttpRuntime()
    try:
        job = HttpJob(target.url("/big"), body_regex="NEEDLE", runtime=rt,
                      private_targets=TargetPolicy.parse(["127.0.0.1"]))
        with pytest.raises(HttpJobFailed) as info:
            await job(ctx())
        attempt = info.value.result["attempts"][0]
        assert attempt["failure"] == "the body does not match 'NEEDLE'"
        assert attempt["response"]["truncated"] is True
    finally:
        await rt.aclose()
