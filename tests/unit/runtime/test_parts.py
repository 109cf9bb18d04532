"""The runtime's parts on their own: requests, the due heap, events, process."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime
from typing import Any

import pytest

from cronfleet import Job, Locking, Overlap, RunContext, RunRecord, RunStatus, TriggeredBy
from cronfleet.runtime import requests
from cronfleet.runtime.due import Due, after
from cronfleet.runtime.events import Events, RunFinished
from cronfleet.runtime.process import raise_if_failed, run_until_signal
from cronfleet.store.base import Dispatch, DispatchKind

T = datetime(2026, 3, 2, tzinfo=UTC).timestamp()


async def _h(ctx: RunContext) -> None:
    return None


def job(schedule: str = "60s", **kw: Any) -> Job:
    return Job.create(schedule, _h, id=kw.pop("id", "j"), **kw)


# -- requests ---------------------------------------------------------------------------


def test_scheduled_leased_slot_is_the_fast_path() -> None:
    d = requests.scheduled(job(timeout=10), T, T)
    assert (d.claim, d.lease, d.record, d.defer, d.early, d.manual) == (
        "slot", True, False, False, False, False)
    assert d.hold == 40 and d.triggered_by is TriggeredBy.SCHEDULE and d.logs == []


def test_scheduled_variants() -> None:
    allow = requests.scheduled(job(overlap=Overlap.ALLOW), T, T)
    assert (allow.lease, allow.record) == (False, True)
    jittered = requests.scheduled(job(jitter=30), T, T)
    assert jittered.defer and jittered.record and jittered.lease
    catchup = requests.scheduled(job(), T, T + 100, catchup=True)
    assert catchup.is_catchup and catchup.triggered_by is TriggeredBy.CATCHUP
    assert catchup.logs and "catch-up" in catchup.logs[0].lower()
    queue = job(overlap=Overlap.QUEUE_ONE)
    assert requests.scheduled(queue, T, T).wait_if_busy
    assert not requests.scheduled(queue, T, T, queued={"j"}).wait_if_busy
    assert not requests.scheduled(queue, T, T, wait_if_busy=False).wait_if_busy
    local = job(locking=Locking.NODE_LOCAL)
    free = requests.scheduled(local, T, T, running={})
    assert free.claim == "none" and not free.lease and free.skip_reason is None
    busy = requests.scheduled(local, T, T, running={"j": 1}, instance_id="me")
    assert busy.skip_reason == "already_executing" and "lease held by me" in busy.logs[-1]
    local_queue = job(locking=Locking.NODE_LOCAL, overlap=Overlap.QUEUE_ONE)
    waits = requests.scheduled(local_queue, T, T, running={"j": 1})
    assert waits.defer and waits.skip_reason is None


def test_early_missed_manual_recovery() -> None:
    j = job(timeout=10)
    early = requests.early(j, T, T - 0.5)
    assert (early.early, early.lease, early.record, early.claim) == (True, True, False, "slot")
    assert early.hold == 40.5
    missed = requests.missed(j, T, "missed while no scheduler ran it")
    assert missed.skip_reason == "missed" and missed.is_catchup and missed.claim == "slot"
    manual = requests.manual(j, T, by="alice")
    assert (manual.claim, manual.manual, manual.lease) == ("token", True, True)
    assert manual.logs == ["Manual run requested by alice"]
    local = job(locking=Locking.NODE_LOCAL)
    busy = requests.manual(local, T, by="bob", local_busy=True, instance_id="me")
    assert busy.claim == "none" and busy.skip_reason == "already_executing"
    run = RunRecord(7, "j", datetime.fromtimestamp(T, UTC), TriggeredBy.SCHEDULE,
                    RunStatus.INTERRUPTED, instance_id="dead", fencing_token=42)
    rec = requests.recovery(j, run)
    assert (rec.reclaim_token, rec.is_recovery, rec.slot) == (42, True, T)
    assert rec.triggered_by is TriggeredBy.RECOVERY and "run 7 on dead" in rec.logs[0]


def test_every_request_has_the_kind_of_its_constructor() -> None:
    """requests.py builds each request through the store's named constructor of its kind,
    and the fields are those the keyword construction gave (the kind derived from them
    agrees)."""
    j = job(timeout=10)
    local = job(locking=Locking.NODE_LOCAL)
    run = RunRecord(7, "j", datetime.fromtimestamp(T, UTC), TriggeredBy.SCHEDULE,
                    RunStatus.INTERRUPTED, instance_id="dead", fencing_token=42)
    cases = [
        (requests.scheduled(j, T, T), DispatchKind.SCHEDULED),
        (requests.scheduled(job(jitter=30), T, T), DispatchKind.SCHEDULED),
        (requests.scheduled(j, T, T + 100, catchup=True), DispatchKind.SCHEDULED),
        (requests.scheduled(local, T, T), DispatchKind.LOCAL),
        (requests.scheduled(local, T, T, running={"j": 1}, instance_id="me"), DispatchKind.LOCAL),
        (requests.early(j, T, T - 0.5), DispatchKind.EARLY),
        (requests.missed(j, T, "late"), DispatchKind.MISSED),
        (requests.missed(local, T, "late"), DispatchKind.MISSED),
        (requests.manual(j, T, by="a"), DispatchKind.MANUAL),
        (requests.manual(local, T, by="a", local_busy=True, instance_id="me"),
         DispatchKind.MANUAL),
        (requests.recovery(j, run), DispatchKind.RECOVERY),
    ]
    for d, kind in cases:
        assert d.kind is kind
        rebuilt = Dispatch(
            d.job_id, d.slot, d.triggered_by, d.claim, d.lease, d.hold, d.defer,
            d.wait_if_busy, d.is_catchup, d.is_recovery, d.manual,
            None if kind is DispatchKind.LOCAL else d.skip_reason, d.result,
            list(d.logs), d.reclaim_token, d.record, d.early,
        )
        assert rebuilt.kind is kind  # derived from the fields (before a local busy skip)
    assert requests.missed(j, T, "missed while no scheduler ran it").logs == [
        "Skipped: slot 2026-03-02T00:00:00+00:00 missed while no scheduler ran it "
        "(policy RUN_ONCE, window 3600s)"
    ]
    busy = requests.scheduled(local, T, T, running={"j": 1}, instance_id="me")
    assert busy.result == {"skipped": True, "reason": "already_executing"}
    assert busy.logs == ["Skipped: the previous run has not finished (lease held by me)"]
    early = requests.early(j, T + 1, T + 2)  # claimed after its time: no extra hold
    assert early.hold == 40 and not early.record and early.lease
    no_token = RunRecord(8, "j", datetime.fromtimestamp(T, UTC), TriggeredBy.SCHEDULE,
                         RunStatus.INTERRUPTED)
    with pytest.raises(ValueError, match="no claim"):
        requests.recovery(j, no_token)


# -- due --------------------------------------------------------------------------------


def test_after_many_queues_next_slots_once_per_expression() -> None:
    due = Due()
    a, b = job("*/10 * * * * *", id="a"), job("*/10 * * * * *", id="b")  # equal, distinct
    c = job("5s", id="c")
    gone = job("*/10 * * * * *", id="gone")
    jobs = {"a": a, "b": b, "c": c}
    for j in (a, b, c, gone):
        due.push(j, T)
    assert [j.id for j, _ in due.pop_due(T, jobs)] == ["a", "b", "c"]
    due.after_many([(a, T), (b, T), (c, T), (gone, T)], jobs)
    assert due.next == {"a": T + 10, "b": T + 10, "c": T + 5, "gone": T}
    assert due.watermark == {"a": T, "b": T, "c": T}
    assert after(a, T) == T + 10
    assert sorted(due.heap) == [T + 5, T + 10]


def test_a_replaced_job_keeps_its_new_slot() -> None:
    due = Due()
    old, new = job("60s"), job("30s")
    due.push(old, T)
    due.pop_due(T, {"j": old})
    due.forget("j")
    due.push(new, T + 30)  # re-added meanwhile (Scheduler.replace_job)
    due.after_many([(old, T)], {"j": new})
    assert due.next == {"j": T + 30}


# -- events -----------------------------------------------------------------------------


async def test_events_sync_async_failing_and_unsubscribe() -> None:
    events = Events()
    assert not events.wants(RunFinished)
    seen: list[str] = []

    def sync(e: RunFinished) -> None:
        seen.append("sync")

    async def slow(e: RunFinished) -> None:
        await asyncio.sleep(0)
        seen.append("async")

    def broken(e: RunFinished) -> None:
        raise RuntimeError("listener bug")

    events.subscribe(broken)
    off = events.subscribe(sync)
    events.subscribe(slow)
    assert events.wants(RunFinished)
    run = RunRecord(1, "j", datetime.fromtimestamp(T, UTC), TriggeredBy.SCHEDULE,
                    RunStatus.SUCCEEDED)
    events.publish(RunFinished(job(), run, "me"))
    await events.drain(1.0)
    assert seen == ["sync", "async"]
    off()
    events.publish(RunFinished(job(), run, "me"))
    await events.drain(1.0)
    assert seen == ["sync", "async", "async"]


# -- process ----------------------------------------------------------------------------


async def test_run_until_signal() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_soon(stop.set)
    assert await run_until_signal(None, stop=stop) is None

    async def crash() -> None:
        raise ValueError("loop died")

    task = asyncio.ensure_future(crash())
    assert await run_until_signal(task, signals=False) is task
    with pytest.raises(ValueError, match="loop died"):
        raise_if_failed(task)
    raise_if_failed(None)

    asyncio.get_running_loop().call_later(0.01, os.kill, os.getpid(), signal.SIGTERM)
    assert await run_until_signal() is None  # SIGTERM handled, then handlers removed
