"""Store outages: REQUIRE_GLOBAL is the default and its slots go through the missed policy
when the store is back; PREFER_GLOBAL fails open only on a confirmed outage, never for an
arbitrary exception nor after a pause; overlap holds in the process; warnings repeat with
a count (runtime/outage.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet import FakeClock, Locking, Missed, Overlap, RunContext, RunStatus, Scheduler
from cronfleet.errors import StoreUnavailable
from cronfleet.runtime.parts import RateLimitedLog

from .conftest import STORE_KINDS, T0, Recorder, advance, settle

Make = Any


class Flaky:
    """The store's ``method`` (``dispatch`` unless told) fails with ``error`` while
    ``down``."""

    def __init__(self, s: Scheduler, error: Exception | None = None,
                 method: str = "dispatch") -> None:
        self.real = getattr(s.store, method)
        self.down = True
        self.error = error or StoreUnavailable("simulated outage")
        setattr(s.store, method, self)

    async def __call__(self, *args: Any) -> Any:
        if self.down:
            raise self.error
        return await self.real(*args)


def confirm(
    s: Scheduler, answer: bool, pause: float = 0.0, clock: FakeClock | None = None
) -> list[int]:
    calls: list[int] = []

    async def confirm_outage() -> bool:
        calls.append(1)
        if pause and clock is not None:
            clock.advance(pause)  # the check itself took long (a paused process)
        return answer

    s.store.confirm_outage = confirm_outage  # type: ignore[attr-defined]
    s.outage._confirmation = (float("-inf"), False)  # the store's answer changed: ask again
    return calls


async def wait_for(cond: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


class Overlapping:
    """A handler that counts how many of its runs overlap; the first run (``hold_all``:
    every run) waits for ``release``."""

    def __init__(self, hold_all: bool) -> None:
        self.hold_all = hold_all
        self.active = 0
        self.peak = [0]
        self.started: list[float] = []
        self.release = asyncio.Event()

    async def __call__(self, ctx: RunContext) -> None:
        self.active += 1
        self.peak[0] = max(self.peak[0], self.active)
        self.started.append(ctx.slot.timestamp())
        try:
            if self.hold_all or len(self.started) == 1:
                await self.release.wait()
        finally:
            self.active -= 1


def test_require_global_is_the_default(make: Make) -> None:
    s = make()
    s.job("60s", id="j")(Recorder())
    assert s.jobs["j"].locking is Locking.REQUIRE_GLOBAL


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_run_once_runs_the_newest_outage_slot_when_the_store_is_back(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("0 * * * *", id="hourly", missed=Missed.RUN_ONCE)(rec)
    await s.start()
    running.append(s)
    flaky = Flaky(s)
    await advance(clock, 3600, s, step=600)
    assert rec.calls == []
    flaky.down = False  # back long before the next slot: the retry finds it
    await wait_for(lambda: len(rec.calls) == 1)
    assert rec.calls[0].slot.timestamp() == T0 + 3600
    assert rec.calls[0].fencing_token is not None  # under a claim
    for _ in range(500):  # its row goes through the group commit (write-behind)
        runs = await s.runs_async("hourly")
        if runs and runs[0].status is RunStatus.SUCCEEDED:
            break
        await asyncio.sleep(0.01)
    [run] = runs
    assert run.is_catchup and run.status is RunStatus.SUCCEEDED


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_every_outage_slot_accounted_for(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    once, skip = Recorder(), Recorder()
    s.job("60s", id="once", missed=Missed.RUN_ONCE, catch_up_window=3600)(once)
    s.job("60s", id="skip", missed=Missed.SKIP)(skip)
    await s.start()
    running.append(s)
    flaky = Flaky(s)
    await advance(clock, 180, s, step=60)  # slots +60, +120, +180 during the outage
    flaky.down = False
    await wait_for(lambda: len(once.calls) == 1)
    await s.stop()
    assert [c.slot.timestamp() for c in once.calls] == [T0 + 180]
    assert skip.calls == []
    for job in ("once", "skip"):
        rows = {r.slot.timestamp(): r for r in await s.runs_async(job)}
        assert set(rows) == {T0 + 60, T0 + 120, T0 + 180}, job  # no silent gap
    skipped = [r for r in await s.runs_async("skip")]
    assert {(r.status, r.reason) for r in skipped} == {(RunStatus.SKIPPED, "store_unavailable")}


async def test_prefer_global_fails_open_only_on_a_confirmed_outage(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p", locking=Locking.PREFER_GLOBAL, missed=Missed.SKIP)(rec)
    await s.start()
    running.append(s)
    Flaky(s)
    calls = confirm(s, answer=False)  # a fresh connection works: only our session died
    await advance(clock, 60, s, step=60)
    await wait_for(lambda: calls)
    await asyncio.sleep(0.05)
    assert rec.calls == []
    confirm(s, answer=True)
    clock.advance(60)  # not advance(): the run's row waits for a claim the store refuses
    await wait_for(lambda: len(rec.calls) == 1)
    assert rec.calls[0].fencing_token is None and s.stats.fail_open == 1


async def test_prefer_global_never_fails_open_on_other_errors(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p", locking=Locking.PREFER_GLOBAL)(rec)
    await s.start()
    running.append(s)
    Flaky(s, RuntimeError("database disk image is malformed"))
    calls = confirm(s, answer=True)
    await advance(clock, 120, s, step=60)
    await asyncio.sleep(0.05)
    assert rec.calls == [] and calls == []


async def test_prefer_global_never_fails_open_after_a_pause(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="p", locking=Locking.PREFER_GLOBAL, missed=Missed.SKIP)(rec)
    await s.start()
    running.append(s)
    Flaky(s)
    calls = confirm(s, answer=True, pause=30.0, clock=clock)  # woke 30 s later
    await advance(clock, 60, s, step=60)
    await wait_for(lambda: calls)
    await asyncio.sleep(0.05)
    assert rec.calls == []


async def test_skip_overlap_holds_while_the_store_is_away(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Overlapping(hold_all=True)
    s.job("4s", id="slow", locking=Locking.PREFER_GLOBAL, overlap=Overlap.SKIP)(h)
    started, peak, release = h.started, h.peak, h.release
    await s.start()
    running.append(s)
    Flaky(s)
    confirm(s, answer=True)
    for _ in range(4):
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert peak[0] == 1 and len(started) == 1
    release.set()
    await asyncio.sleep(0.05)


def test_repeated_warnings_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    warn = RateLimitedLog(logging.getLogger("t"), every=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "t"):
        for i in range(50):
            now[0] = i * 0.25  # 50 warnings in 12.5 s
            warn.warning("k", "store down (%s)", i)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[1].startswith("store down (40)") and "39 more like this" in lines[1]


async def test_start_waits_for_an_unreachable_store(make: Make, clock: FakeClock) -> None:
    s = make()
    rec = Recorder()
    s.job("60s", id="j")(rec)
    real_open, tries = s.store.open, []

    async def flaky_open() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnavailable("connection refused")
        await real_open()

    s.store.open = flaky_open  # type: ignore[method-assign]
    await s.start()
    try:
        assert len(tries) == 3 and s.running
        await advance(clock, 60, s, step=60)
        assert len(rec.calls) == 1
    finally:
        await s.stop()


async def test_start_gives_up_after_connect_timeout(make: Make) -> None:
    s = make(connect_timeout=0.3)
    tries: list[int] = []

    async def down() -> None:
        tries.append(1)
        raise StoreUnavailable("connection refused")

    s.store.open = down  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(StoreUnavailable):
        await s.start()
    assert loop.time() - started < 3 and len(tries) >= 1 and not s.running


async def test_other_store_errors_stop_the_start_at_once(make: Make) -> None:
    from cronfleet.errors import StoreError

    s = make()
    tries: list[int] = []

    async def broken() -> None:
        tries.append(1)
        raise StoreError("schema is newer than this cronfleet")

    s.store.open = broken  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="newer"):
        await s.start()
    assert tries == [1]


async def test_queue_one_waits_for_the_run_in_progress_while_the_store_is_away(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    h = Overlapping(hold_all=False)
    s.job("4s", id="q", locking=Locking.PREFER_GLOBAL, overlap=Overlap.QUEUE_ONE)(h)
    started, peak, release = h.started, h.peak, h.release
    await s.start()
    running.append(s)
    Flaky(s)
    confirm(s, answer=True)
    for _ in range(3):  # slots +4 (runs), +8 (waits), +12 (skipped: one waits already)
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert started == [T0 + 4] and peak[0] == 1
    release.set()
    await wait_for(lambda: len(started) == 2)
    assert started == [T0 + 4, T0 + 8] and peak[0] == 1
    assert s.stats.skips.get("already_executing") == 1


async def test_many_failing_chunks_ask_the_store_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make(batch_size=2)
    recs = [Recorder() for _ in range(10)]
    for i, rec in enumerate(recs):
        s.job("60s", id=f"p{i}", locking=Locking.PREFER_GLOBAL)(rec)
    await s.start()
    running.append(s)
    Flaky(s)
    calls = confirm(s, answer=True)
    clock.advance(60)  # not advance(): the runs' rows wait for claims the store refuses
    await wait_for(lambda: all(len(r.calls) == 1 for r in recs))
    assert len(calls) == 1  # five chunks failed, one fresh connection


async def test_a_backlog_left_at_stop_is_recorded(
    make: Make, clock: FakeClock, running: list
) -> None:
    s = make()
    s.job("60s", id="r")(Recorder())
    await s.start()
    flaky = Flaky(s)
    s.outage.retry_loop = _never  # type: ignore[method-assign]  # no retry before the stop
    await advance(clock, 120, s, step=60)
    assert sorted(s.outage.backlog["r"]) == [T0 + 60, T0 + 120]
    flaky.down = False
    await s.stop()
    rows = await s.runs_async("r")
    assert sorted((r.slot.timestamp(), r.reason) for r in rows) == [
        (T0 + 60, "store_unavailable"), (T0 + 120, "store_unavailable")]
    assert "simulated outage" in rows[0].logs[-1]


async def _never() -> None:
    return None


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_missed_record_the_store_did_not_take_is_claimed_again(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A catch-up's ``missed`` record (claimed) that fails during an outage is offered
    again under a claim, never written claim-less: a slot another process ran meanwhile
    keeps one row (it used to get a second, ``skipped / missed``, beside the run)."""
    from cronfleet.runtime import requests

    a, b = make(instance_id="a"), make(instance_id="b")
    rec = Recorder()
    for s in (a, b):
        s.job("1h", id="j")(rec)
        await s.start()
        running.append(s)
    slot = T0 + 3600
    flaky = Flaky(a)
    await a.loop.dispatch([requests.missed(a.jobs["j"], slot, "missed while no scheduler ran it")])
    assert a.outage.pending and not a.writer.unsaved_skips
    got = await b.loop.dispatch([requests.scheduled(b.jobs["j"], slot, clock.now())])
    assert [r.won for r in got] == [True]
    await wait_for(lambda: len(rec.calls) == 1)
    flaky.down = False
    await wait_for(lambda: not a.outage.pending)
    await a.writer.flush_once()
    await a.writer.flush_skips()
    await b.writer.flush_once()
    rows = [r for r in await a.runs_async("j") if r.slot.timestamp() == slot]
    assert [r.status for r in rows] == [RunStatus.SUCCEEDED], rows
    # and with nobody else on the slot, the retried record is written under a claim
    slot2 = slot + 3600
    flaky.down = True
    await a.loop.dispatch([requests.missed(a.jobs["j"], slot2, "missed while no scheduler ran it")])
    flaky.down = False
    await wait_for(lambda: not a.outage.pending)
    # the backlog is emptied when its retry is taken, before that dispatch has returned
    rows = []
    for _ in range(250):
        rows = [r for r in await a.runs_async("j") if r.slot.timestamp() == slot2]
        if rows:
            break
        await asyncio.sleep(0.02)
    assert [(r.status, r.reason) for r in rows] == [(RunStatus.SKIPPED, "missed")], rows
    assert rows[0].fencing_token is not None


async def test_replace_cancels_the_run_in_progress_while_the_store_is_away(
    make: Make, clock: FakeClock, running: list
) -> None:
    """REPLACE without a claim (fail open): the new slot cancels this process's run of the
    job and starts once it ended -- never two at once, never skipped ``already_executing``
    (it used to be handled like SKIP)."""
    s = make()
    h = Overlapping(hold_all=True)
    s.job("4s", id="r", locking=Locking.PREFER_GLOBAL, overlap=Overlap.REPLACE)(h)
    started, peak, release = h.started, h.peak, h.release
    await s.start()
    running.append(s)
    Flaky(s)
    confirm(s, answer=True)
    for _ in range(3):  # +4 runs; +8 replaces it; +12 replaces +8
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert started == [T0 + 4, T0 + 8, T0 + 12] and peak[0] == 1
    assert h.active == 1 and not s.stats.skips.get("already_executing")
    release.set()
    await asyncio.sleep(0.05)
    assert h.active == 0


async def test_replace_with_two_lanes_cancels_only_the_oldest_while_the_store_is_away(
    make: Make, clock: FakeClock, running: list
) -> None:
    """``max_instances=2`` and REPLACE without a claim: two slots run side by side; the
    third cancels the oldest only and starts as soon as its lane is free."""
    s = make()
    h = Overlapping(hold_all=True)
    s.job("4s", id="r", locking=Locking.PREFER_GLOBAL, overlap=Overlap.REPLACE,
          max_instances=2)(h)
    await s.start()
    running.append(s)
    Flaky(s)
    confirm(s, answer=True)
    for _ in range(3):  # +4 and +8 run together; +12 replaces +4, +8 goes on
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert h.started == [T0 + 4, T0 + 8, T0 + 12] and h.peak[0] == 2
    assert h.active == 2 and not s.stats.skips.get("already_executing")
    h.release.set()
    await asyncio.sleep(0.05)
    assert h.active == 0


async def test_replace_waiting_slot_replaced_by_a_newer_one_is_recorded(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A sync handler cannot be cancelled: the slot replacing it waits; a newer slot then
    replaces the waiting one, which is recorded ``skipped / superseded`` (not dropped)."""
    s = make()
    gate = threading.Event()
    started: list[float] = []

    def stuck(ctx: RunContext) -> None:
        started.append(ctx.slot.timestamp())
        gate.wait(5)

    s.job("4s", id="r", locking=Locking.PREFER_GLOBAL, overlap=Overlap.REPLACE)(stuck)
    await s.start()
    running.append(s)
    flaky = Flaky(s)
    confirm(s, answer=True)
    for _ in range(3):  # +4 runs (thread); +8 waits; +12 replaces the waiting +8
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert started == [T0 + 4] and s.stats.skips.get("superseded") == 1
    gate.set()
    await wait_for(lambda: len(started) == 2)
    assert started == [T0 + 4, T0 + 12]
    flaky.down = False  # the store is back: the skip is written
    rows: list[Any] = []
    for _ in range(50):
        clock.advance(0.2)
        await asyncio.sleep(0.05)
        rows = [r for r in await s.runs_async(limit=50) if r.reason == "superseded"]
        if rows:
            break
    assert [r.slot.timestamp() for r in rows] == [T0 + 8]
    assert rows[0].status is RunStatus.SKIPPED and "replaced by a newer slot" in rows[0].logs[-1]


async def test_a_damaged_store_journals_each_due_slot_once(
    make: Make, clock: FakeClock, running: list
) -> None:
    """``StoreDamaged`` is no outage: nothing runs (not even PREFER_GLOBAL), and every due
    slot goes to the store's fallback journal once, replays of the backlog included."""
    from cronfleet.errors import StoreDamaged

    s = make()
    rec = Recorder()
    s.job("4s", id="d")(rec)
    s.job("4s", id="p", locking=Locking.PREFER_GLOBAL)(rec)
    await s.start()
    running.append(s)
    Flaky(s, StoreDamaged("SQLite store x.db is damaged: database disk image is malformed"))
    confirm(s, answer=True)
    written: list[tuple[str, float, str]] = []

    def journal(entries: list[tuple[str, float, str]], instance_id: str) -> int:
        written.extend(entries)
        return len(entries)

    s.store.journal = journal  # type: ignore[attr-defined]
    for _ in range(3):
        clock.advance(4)
        await asyncio.sleep(0.1)
    assert not rec.calls and s.stats.fail_open == 0
    slots = sorted((job, slot) for job, slot, _ in written)
    assert slots == sorted((j, T0 + 4 * k) for j in ("d", "p") for k in (1, 2, 3))
    assert all("damaged" in why for *_, why in written)


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_the_first_slot_after_the_store_returns_is_not_lost_to_an_unwritten_release(
    make: Make, clock: FakeClock, running: list
) -> None:
    """A run ended while the store was away: its result, and the release of its lease,
    wait in the group commit (retried a second later). When the store is back before the
    next slot, that slot's claim used to meet the unreleased lease -- recorded
    ``already_executing``, run by nobody: the first slot after every outage lost (chaos
    ``cut5`` / ``cut60``: back on time 2.0 s instead of 1). The waiting results are now
    written before the instant is claimed."""
    s = make()
    rec = Recorder()
    s.job("10s", id="j")(rec)
    await s.start()
    running.append(s)
    finish = Flaky(s, method="finish")
    # T0 + 10 runs; its result and release cannot be written (the scheduler is not idle
    # until they are: stepped by hand, within the group commit's 1 s retry)
    clock.advance(10)
    await wait_for(lambda: s.writer.behind)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 10]
    finish.down = False  # back, before the next slot and before the group commit's retry
    clock.advance(10)
    await settle(s)
    assert [c.slot.timestamp() for c in rec.calls] == [T0 + 10, T0 + 20]
    runs = {r.slot.timestamp(): r for r in await s.runs_async("j")}
    assert runs[T0 + 10].status is RunStatus.SUCCEEDED
    assert runs[T0 + 20].status is RunStatus.SUCCEEDED
    assert not s.writer.behind


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_long_outage_leaves_no_slot_without_a_row(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage longer than the bounds kept in memory (each job's backlog, the writer's
    unsaved skips; made small here) still ends with a row for every slot: what overflows
    the backlog goes to the writer's skips, whose oldest past its bound become one summary
    record per job (count and range), where the bounded buffer dropped them silently
    (3 jobs x 300 slots left 544 without a row)."""
    from cronfleet.runtime import outage, writer

    monkeypatch.setattr(outage, "RUN_ALL_CAP", 2)  # a backlog of 102 slots per job
    monkeypatch.setattr(writer, "MAX_BUFFERED", 50)
    s = make()
    recs = {f"j{i}": Recorder() for i in range(3)}
    for jid, rec in recs.items():
        s.job("10s", id=jid, missed=Missed.RUN_ONCE)(rec)
    await s.start()
    running.append(s)
    flaky, refusing = Flaky(s), Flaky(s, method="record_skips")
    s.outage.retry_loop = _never  # type: ignore[method-assign]  # replayed below, once back
    await advance(clock, 3000, s, step=10)  # 300 slots of each job during the outage
    assert max(len(b) for b in s.outage.backlog.values()) <= 102  # memory stays bounded
    flaky.down = refusing.down = False
    await s.outage.replay()
    await wait_for(lambda: all(len(r.calls) == 1 for r in recs.values()))
    await s.stop()
    for jid, rec in recs.items():
        assert [c.slot.timestamp() for c in rec.calls] == [T0 + 3000]  # the newest, once
        rows = await s.runs_async(jid, limit=1000)
        covered: list[float] = []
        summaries = 0
        for r in rows:  # a row for each slot, or a summary row for a range of them
            if isinstance(r.result, dict) and "first" in r.result:
                summaries += 1
                n = r.result["count"]
                assert r.reason == "store_unavailable" and n > 0, jid
                assert r.result["first"] == r.slot.isoformat()
                assert any("simulated outage" in line for line in r.logs)
                covered += [r.slot.timestamp() + 10 * k for k in range(n)]
                assert r.result["last"] == datetime.fromtimestamp(covered[-1], UTC).isoformat()
            else:
                covered.append(r.slot.timestamp())
        assert sorted(covered) == [T0 + 10 * k for k in range(1, 301)], jid  # each once
        assert summaries == 1, jid  # the oldest of the 198 past the backlog, in one record


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_skips_past_the_writers_bound_are_summarised_not_dropped(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skips the store could not take are kept up to ``MAX_BUFFERED`` (4 here); the
    oldest beyond it join one summary record per job and reason (count and range), so a
    long outage ends with every slot accounted for and memory bounded. A summary that
    waits again merges its count."""
    from cronfleet.runtime import writer
    from cronfleet.store.base import Skip

    monkeypatch.setattr(writer, "MAX_BUFFERED", 4)
    s = make()
    s.job("1s", id="a")(Recorder())
    s.job("1s", id="b")(Recorder())
    await s.start()
    running.append(s)
    refusing = Flaky(s, method="record_skips")
    w = s.writer
    for k in range(1, 8):
        for job in ("a", "b"):
            w.keep_skip(Skip(job, T0 + 100 + k, "already_executing", instance_id="me",
                             logs=[f"busy {k}"]))
    assert len(w.unsaved_skips) == 4 and w.owed_skips() == 6  # 4 rows, 2 summaries
    await w.flush_skips()  # refused: everything kept, the summaries' counts too
    assert len(w.unsaved_skips) == 4 and w.owed_skips() == 6
    refusing.down = False
    await w.flush_skips()
    assert w.owed_skips() == 0
    for job in ("a", "b"):
        rows = sorted(await s.runs_async(job), key=lambda r: r.slot)
        [summary] = [r for r in rows if isinstance(r.result, dict) and "count" in r.result]
        singles = [r.slot.timestamp() for r in rows if r is not summary]
        assert summary.result["count"] == 5 and summary.slot.timestamp() == T0 + 101
        assert summary.result["last"] == datetime.fromtimestamp(T0 + 105, UTC).isoformat()
        assert singles == [T0 + 106, T0 + 107]  # 5 + 2: every slot, once
        assert summary.reason == "already_executing" and "busy 1" in summary.logs


async def _writing_in_chunks(make: Make, running: list, monkeypatch: pytest.MonkeyPatch,
                             chunk: int) -> Scheduler:
    """A started scheduler with one job whose writer hands the store ``chunk`` skips a
    call."""
    from cronfleet.runtime import writer

    monkeypatch.setattr(writer, "SKIP_CHUNK", chunk)
    s = make()
    s.job("1s", id="a")(Recorder())
    await s.start()
    running.append(s)
    return s


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_skips_are_written_in_chunks_and_a_failed_chunk_keeps_itself_and_the_rest(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An overloaded instant can shed tens of thousands of slots: the writer hands the
    store ``SKIP_CHUNK`` rows a call (one statement of 300,000 rows outlasted the store's
    call deadline). A chunk the store refuses keeps itself and the chunks after it for
    the next try, with the summary records' counts; the chunks written before it are not
    written twice, and every slot ends with one row."""
    from cronfleet.runtime import writer
    from cronfleet.store.base import Skip

    monkeypatch.setattr(writer, "MAX_BUFFERED", 9)
    s = await _writing_in_chunks(make, running, monkeypatch, 3)
    real = s.store.record_skips
    calls: list[list[float]] = []

    async def record_skips(items: Any) -> Any:
        calls.append([it.slot - T0 for it in items])
        if len(calls) == 3:
            raise StoreUnavailable("simulated outage")
        return await real(items)

    s.store.record_skips = record_skips  # type: ignore[method-assign]
    w = s.writer
    for k in range(1, 13):  # 12 skips: the 3 oldest become one summary record
        w.keep_skip(Skip("a", T0 + 100 + k, "overloaded", instance_id="me", logs=[f"shed {k}"]))
    await w.flush_skips()
    # the summary record (101..103) and 104, 105; then 106..108; the third is refused
    assert calls[:2] == [[101, 104, 105], [106, 107, 108]] and len(calls) == 3
    assert w.owed_skips() == 4  # 109..112 kept, the written ones not
    await w.flush_skips()
    assert calls[3:] == [[109, 110, 111], [112]] and w.owed_skips() == 0
    rows = sorted(await s.runs_async("a", limit=100), key=lambda r: r.slot)
    [summary] = [r for r in rows if isinstance(r.result, dict) and "count" in r.result]
    assert summary.result["count"] == 3 and summary.slot.timestamp() == T0 + 101
    singles = [r.slot.timestamp() - T0 for r in rows if r is not summary]
    assert singles == list(range(104, 113))  # every slot once: 3 summarised, 9 rows


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_skips_being_written_when_a_stop_cancels_the_writer_are_kept_not_lost(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop cancels the background tasks, among them one writing a long batch of skips
    (a removal of thousands of jobs, an overloaded instant): the chunks not written yet
    go back to the writer, and the stop's last writes record them. Before, the batch was
    gone: slots with no row and nothing said."""
    from cronfleet.store.base import Skip

    s = await _writing_in_chunks(make, running, monkeypatch, 2)
    real = s.store.record_skips
    hang = asyncio.Event()
    calls: list[int] = []

    async def record_skips(items: Any) -> Any:
        calls.append(len(items))
        if len(calls) == 2:
            await hang.wait()
        return await real(items)

    s.store.record_skips = record_skips  # type: ignore[method-assign]
    w = s.writer
    await asyncio.sleep(0.05)  # the writer's own task has written what the start woke it for
    assert not w.flush_event.is_set()
    for k in range(6):
        w.keep_skip(Skip("a", T0 + 100 + k, "missed", instance_id="me", logs=["x"]))
    task = asyncio.ensure_future(w.flush_skips())
    await wait_for(lambda: len(calls) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert w.owed_skips() == 4  # the chunk cut short and the one after it
    s.store.record_skips = real  # type: ignore[method-assign]
    await w.flush_skips()
    rows = sorted(r.slot.timestamp() - T0 for r in await s.runs_async("a", limit=100))
    assert rows == [100, 101, 102, 103, 104, 105]


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_the_writer_writes_results_between_two_chunks_of_skips(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long backlog of skips (after an outage, an overloaded instant) must not hold the
    results that end meanwhile: their lease releases let the jobs' next slots run. The
    writer's task writes the group commit between two chunks when results wait."""
    from cronfleet.store.base import Skip

    s = await _writing_in_chunks(make, running, monkeypatch, 2)
    w = s.writer
    order: list[Any] = []
    real = s.store.record_skips

    async def flush_once() -> None:
        order.append("results")
        w.finishes.clear()

    async def record_skips(items: Any) -> Any:
        order.append(len(items))
        if len(order) == 2:
            w.finishes.append(None)  # type: ignore[arg-type]  # a run ended meanwhile
        return await real(items)

    w.flush_once = flush_once  # type: ignore[method-assign]
    s.store.record_skips = record_skips  # type: ignore[method-assign]
    w.queue_skips([Skip("a", T0 + 100 + k, "overloaded", instance_id="me", logs=["x"])
                   for k in range(6)])
    await wait_for(lambda: w.owed_skips() == 0 and len(order) >= 5)
    assert order == ["results", 2, "results", 2, 2]
    assert len(await s.runs_async("a", limit=100)) == 6


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_results_dropped_past_the_writers_bound_are_said(
    make: Make, clock: FakeClock, running: list, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    """Results of ended runs the store keeps refusing wait up to ``MAX_BUFFERED`` (4
    here); the oldest beyond it are dropped with an error naming how many and the jobs,
    never silently."""
    from cronfleet.runtime import writer

    monkeypatch.setattr(writer, "MAX_BUFFERED", 4)
    s = make()
    recs = {f"r{i}": Recorder() for i in range(6)}
    for jid, rec in recs.items():
        s.job("1s", id=jid)(rec)
    await s.start()
    running.append(s)

    Flaky(s, method="finish")  # down for good
    clock.advance(1)  # (not ``advance``: it waits for the writer, which never catches up)
    await wait_for(lambda: all(len(r.calls) == 1 for r in recs.values()))
    await wait_for(lambda: any("at most 4 wait in memory" in r.getMessage()
                               for r in caplog.records))
    [line] = {r.getMessage() for r in caplog.records if "wait in memory" in r.getMessage()}
    assert "results of 6 ended runs" in line and "the 2 oldest are dropped" in line
    assert len(s.writer.finishes) == 4
