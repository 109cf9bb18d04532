"""Backfill: every slot of a past range, in order, once, recorded ``triggered_by=backfill``
(memory and SQLite stores, FakeClock)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.model import RunStatus, TriggeredBy

from .conftest import T0, settle

STORES = ["memory", "sqlite"]  # Redis: no run filter across jobs yet (#18 B)
START = datetime.fromtimestamp(T0, UTC) - timedelta(hours=10)


def hours(*n: int) -> list[datetime]:
    return [START + timedelta(hours=h) for h in n]


class Slots:
    """A handler recording the slot of each call; fails for the slots in ``fail``."""

    def __init__(self, fail: set[datetime] | None = None, delay: float = 0.0) -> None:
        self.slots: list[datetime] = []
        self.fail = fail or set()
        self.delay = delay

    async def __call__(self, ctx: Any) -> str:
        self.slots.append(ctx.slot)
        if self.delay:
            await asyncio.sleep(self.delay)
        if ctx.slot in self.fail:
            raise RuntimeError("boom")
        return "ok"


async def ledger(s: Scheduler, job_id: str) -> list[Any]:
    runs = await s.runs_async(job_id, limit=1000)
    return sorted((r for r in runs if r.triggered_by is TriggeredBy.BACKFILL),
                  key=lambda r: r.slot)


@pytest.mark.parametrize("store_kind", STORES)
async def test_backfill_runs_every_slot_in_order(make: Any) -> None:
    s = make()
    h = Slots()
    s.job("0 * * * *", id="hourly")(h)
    bf = await s.backfill_async("hourly", START, START + timedelta(hours=4), rate=None)
    assert h.slots == hours(0, 1, 2, 3, 4)  # both ends included, in order
    assert (bf.total, bf.done, len(bf.ran), bf.finished, bf.current) == (5, 5, 5, True, None)
    runs = await ledger(s, "hourly")
    assert [r.slot for r in runs] == hours(0, 1, 2, 3, 4)
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}
    assert [r.id for r in runs] == sorted(bf.ran)
    assert all(r.logs[0].startswith("Backfill of slot") for r in runs)


@pytest.mark.parametrize("store_kind", STORES)
async def test_only_missing_runs_slots_without_a_success(make: Any, clock: FakeClock) -> None:
    s = make()
    h = Slots(fail=set(hours(1)))
    s.job("0 * * * *", id="hourly")(h)
    await s.backfill_async("hourly", START, START + timedelta(hours=2), rate=None)
    assert h.slots == hours(0, 1, 2)
    h.fail.clear()
    clock.advance(60)  # a later request (a run started at the instant asked is that one's)
    bf = await s.backfill_async("hourly", START, START + timedelta(hours=3),
                                only_missing=True, rate=None)
    # 0 and 2 succeeded: only the failed slot 1 and the never-run slot 3 run again
    assert h.slots == hours(0, 1, 2, 1, 3)
    assert (bf.total, bf.present, len(bf.ran)) == (4, 2, 2)
    # without only_missing, a slot that already succeeded is run again (its claim replaced)
    clock.advance(60)
    again = await s.backfill_async("hourly", START, START, rate=None)
    assert len(again.ran) == 1 and h.slots[-1] == START
    by_slot = Counter(r.slot for r in await ledger(s, "hourly"))
    assert by_slot == {hours(0)[0]: 2, hours(1)[0]: 2, hours(2)[0]: 1, hours(3)[0]: 1}


@pytest.mark.parametrize("store_kind", STORES)
async def test_two_backfills_at_once_run_each_slot_once(make: Any, clock: FakeClock) -> None:
    """Two instances declaring the job backfill the same range at the same time: every
    slot runs exactly once between them, scheduled runs already claimed included. The
    clock stands still while they run: each one's runs start at the instant the other
    was asked (the tie a slow start of one of them met: it ran the other's slot again)."""
    a, b = make(instance_id="a"), make(instance_id="b")
    ha, hb = Slots(delay=0.01), Slots(delay=0.01)
    a.job("0 * * * *", id="hourly")(ha)
    b.job("0 * * * *", id="hourly")(hb)
    # slot 2 ran before (its claim exists): the backfills compete for its replacement
    await a.backfill_async("hourly", hours(2)[0], hours(2)[0], rate=None)
    ha.slots.clear()
    clock.advance(60)
    end = START + timedelta(hours=7)
    ra, rb = await asyncio.gather(
        a.backfill_async("hourly", START, end, rate=None),
        b.backfill_async("hourly", START, end, rate=None),
    )
    counts = Counter(ha.slots + hb.slots)
    assert counts == {t: 1 for t in hours(*range(8))}, counts
    assert len(ra.ran) + len(rb.ran) == 8
    assert ra.taken + rb.taken == 8
    by_slot = Counter(r.slot for r in await ledger(a, "hourly"))
    assert by_slot == {t: (2 if t == hours(2)[0] else 1) for t in hours(*range(8))}


@pytest.mark.parametrize("store_kind", STORES)
async def test_a_run_started_in_the_millisecond_a_backfill_was_asked_is_not_run_again(
    make: Any, clock: FakeClock
) -> None:
    """The other backfill's run of a slot, started within the millisecond this one was
    asked (the store keeps whole milliseconds), is that backfill's: not run again; a run
    started before that millisecond is."""
    a, b = make(instance_id="a"), make(instance_id="b")
    ha, hb = Slots(), Slots()
    a.job("0 * * * *", id="hourly")(ha)
    b.job("0 * * * *", id="hourly")(hb)
    asked = clock.now() + 0.0004  # the same millisecond as a's run, a little after it
    await a.backfill_async("hourly", START, START, rate=None)
    late = await b.backfill_async("hourly", START, START, rate=None, since=asked)
    assert (hb.slots, late.taken, late.ran) == ([], 1, [])
    after = await b.backfill_async("hourly", START, START, rate=None, since=asked + 0.001)
    assert hb.slots == [START] and len(after.ran) == 1


async def test_backfill_is_cancellable_and_shows_progress(
    make: Any, clock: FakeClock, running: list
) -> None:
    s = make()
    gate = asyncio.Event()
    seen: list[datetime] = []

    async def handler(ctx: Any) -> None:
        seen.append(ctx.slot)
        await gate.wait()

    s.job("0 * * * *", id="hourly")(handler)
    await s.start()
    running.append(s)
    bf = await s.backfill_async("hourly", START, START + timedelta(hours=9), wait=False,
                                rate=None)
    for _ in range(200):
        await asyncio.sleep(0.005)
        if seen:
            break
    assert seen == hours(0)
    assert (bf.total, bf.done, bf.current) == (10, 0, START)
    bf.cancel()
    await asyncio.gather(bf.task, return_exceptions=True)  # type: ignore[arg-type]
    await settle(s)
    assert bf.cancelled and bf.finished and bf.done == 0
    [run] = await ledger(s, "hourly")
    assert run.status is RunStatus.CANCELLED and run.slot == START
    assert seen == hours(0)  # nothing after the cancelled slot


async def test_backfill_rate_is_bounded_on_the_clock(
    make: Any, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Slots()
    s.job("0 * * * *", id="hourly")(h)
    await s.start()
    running.append(s)
    bf = await s.backfill_async("hourly", START, START + timedelta(hours=3), wait=False,
                                rate=0.5)  # one slot every 2 s
    await settle(s)
    assert h.slots == hours(0)
    clock.advance(1.0)
    await settle(s)
    assert h.slots == hours(0)  # 1 s later: still waiting
    clock.advance(1.0)
    await settle(s)
    assert h.slots == hours(0, 1)
    for _ in range(2):
        clock.advance(2.0)
        await settle(s)
    assert h.slots == hours(0, 1, 2, 3)
    await asyncio.gather(bf.task)  # type: ignore[arg-type]
    assert bf.done == bf.total == 4


def test_sync_backfill_and_bad_ranges(make: Any) -> None:
    s = make()
    h = Slots()
    s.job("0 * * * *", id="hourly")(h)
    bf = s.backfill("hourly", START, START + timedelta(hours=1), rate=None)
    assert bf.done == 2 and h.slots == hours(0, 1)
    with pytest.raises(ValueError, match="is before from"):
        s.backfill("hourly", START, START - timedelta(hours=1))
    with pytest.raises(ValueError, match="timezone-aware"):
        s.backfill("hourly", START.replace(tzinfo=None), START)
    with pytest.raises(ValueError, match="more than 100000 slots"):
        s.backfill("hourly", START - timedelta(days=5000), START)
    with pytest.raises(ValueError, match="rate"):
        s.backfill("hourly", START, START, rate=0)
    assert h.slots == hours(0, 1)


@pytest.mark.parametrize("store_kind", STORES)
async def test_remote_backfill_progress_and_cancel(make: Any) -> None:
    """A control-only process asks the declaring instance for a backfill, reads its
    progress from the store, and cancels another one midway."""
    from cronfleet.errors import NotDeclared, RemoteRefused
    from cronfleet.runtime.registry import (
        backfill_status,
        remote_backfill,
        remote_cancel_backfill,
    )

    a = make(instance_id="a")
    h = Slots()
    a.job("0 * * * *", id="hourly")(h)
    ops = make(instance_id="ops", timers=False)
    async with a, ops:
        req = await remote_backfill(ops.store, "hourly", START, START + timedelta(hours=3),
                                    by="alice", ttl=15.0, timeout=20)
        assert req.taken_by == "a" and req.id is not None
        for _ in range(400):
            got = await backfill_status(ops.store, req.id)
            if got.answered:
                break
            await asyncio.sleep(0.02)
        assert got.answered and got.error is None, got
        progress = got.payload["progress"]
        assert (progress["total"], progress["done"], progress["ran"]) == (4, 4, 4)
        assert progress["finished"] and not progress["cancelled"]
        assert h.slots == hours(0, 1, 2, 3)
        stored = [r for r in await ops.store.list_runs("hourly", limit=100)
                  if r.triggered_by is TriggeredBy.BACKFILL]
        assert sorted(r.slot for r in stored) == hours(0, 1, 2, 3)
        assert {r.instance_id for r in stored} == {"a"}

        # a slow backfill (one slot a second on a's FakeClock: it waits after slot 0)
        slow = await remote_backfill(ops.store, "hourly", START + timedelta(hours=4),
                                     START + timedelta(hours=9), by="bob", ttl=15.0,
                                     rate=1.0, timeout=20)
        assert slow.id is not None
        for _ in range(400):
            got = await backfill_status(ops.store, slow.id)
            if got.payload.get("progress", {}).get("done") == 1:
                break
            await asyncio.sleep(0.02)
        assert got.payload["progress"]["total"] == 6
        await remote_cancel_backfill(ops.store, slow.id, by="bob", ttl=15.0, timeout=20)
        for _ in range(400):
            got = await backfill_status(ops.store, slow.id)
            if got.answered:
                break
            await asyncio.sleep(0.02)
        assert got.error is not None and got.error.startswith("CANCELLED")
        assert got.payload["progress"]["cancelled"] and got.payload["progress"]["done"] == 1
        assert h.slots == hours(0, 1, 2, 3, 4)
        with pytest.raises(RemoteRefused, match="already ended"):
            await remote_cancel_backfill(ops.store, slow.id, by="bob", ttl=15.0)
        with pytest.raises(RemoteRefused) as bad:
            await backfill_status(ops.store, 999_999)
        assert bad.value.code == "BACKFILL_NOT_FOUND"
        with pytest.raises(NotDeclared):
            await remote_backfill(ops.store, "nope", START, START, by="x", ttl=15.0)
