"""SQLite's database clock is the host's: every process of a SQLite fleet shares one file
on one host, so leases, claim times and heartbeats are judged by the host's clock, and a
``SystemClock``'s offset (a process with a skewed view of time, the fault suite's
``skew``) moves only its slot times -- as PostgreSQL's transactions use the server's."""

from __future__ import annotations

import time
from pathlib import Path

from cronfleet.clock import FakeClock, SystemClock
from cronfleet.model import TriggeredBy
from cronfleet.store.base import Dispatch, Instance
from cronfleet.store.sqlite.store import SQLiteStore


def me(name: str) -> Instance:
    return Instance(name, host="h", pid=1, role="all", version="1.0")


async def test_processes_with_clocks_5s_apart_judge_heartbeats_and_leases_alike(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cronfleet.db"
    ahead = SQLiteStore(path, clock=SystemClock(offset=5))
    behind = SQLiteStore(path, clock=SystemClock(offset=-5))
    await ahead.open()
    await behind.open()
    try:
        for s in (ahead, behind):
            assert abs(await s.now() - time.time()) < 1.0
        ttl = 1.5
        await behind.heartbeat(me("behind"), ttl=ttl)
        beat = await ahead.heartbeat(me("ahead"), ttl=ttl)
        # by its own clock the other's beat is 10 s old; by the host's, fresh
        assert beat.live == ("ahead", "behind") and not beat.stale
        assert (await ahead.break_lost("ahead", ttl=ttl)).instances == []
        again = await behind.heartbeat(me("behind"), ttl=ttl)
        assert not again.lost and again.live == ("ahead", "behind")

        await behind.ensure_jobs(["a"])
        slot = float(int(time.time()))
        [held] = await behind.dispatch(
            [Dispatch(job_id="a", slot=slot, triggered_by=TriggeredBy.SCHEDULE, lease=True,
                      hold=3)], "behind")
        assert held.started
        # by the ahead process's clock the lease ended 2 s ago; by the host's it is live
        [stolen] = await ahead.dispatch(
            [Dispatch(job_id="a", slot=slot + 1, triggered_by=TriggeredBy.SCHEDULE,
                      lease=True, hold=3)], "ahead")
        assert stolen.won and not stolen.started and stolen.holder == "behind"
    finally:
        await ahead.close()
        await behind.close()


def test_any_other_clock_is_the_stores(tmp_path: Path) -> None:
    clock = FakeClock(1_000_000.0)
    assert SQLiteStore(tmp_path / "x.db", clock=clock).clock is clock
    assert isinstance(SQLiteStore(tmp_path / "y.db").clock, SystemClock)
