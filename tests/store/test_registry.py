"""The job registry and the requests between processes (#14), on every store."""

from __future__ import annotations

import asyncio
from typing import Any

from cronfleet.clock import FakeClock
from cronfleet.store import Store
from cronfleet.store.base import Declared, FleetRequest, Instance, RegistryStore

from .conftest import T0

TTL = 15.0


def me(name: str) -> Instance:
    return Instance(name, host="h-" + name, pid=100, role="all", version="1.0")


def rstore(s: Store) -> RegistryStore:
    assert isinstance(s, RegistryStore)
    return s


def decl(job: str, schedule: str = "* * * * *", team: str = "default") -> Declared:
    spec = {"kind": "handler", "schedule": schedule, "zone": "UTC", "config": {"a": [1, "x"]}}
    return Declared(job, "", team=team, source="code", digest="d-" + schedule, spec=spec)


async def test_publish_lists_who_declares_what_and_replaces_the_set(
    store: Store, other: Store, clock: FakeClock
) -> None:
    a, b = rstore(store), rstore(other)
    await a.heartbeat(me("one"), ttl=TTL)
    await b.heartbeat(me("two"), ttl=TTL)
    await a.publish_jobs("one", [decl("tick"), decl("only-one", team="billing")])
    await b.publish_jobs("two", [decl("tick", "*/5 * * * *")])
    rows = await b.list_declared(ttl=TTL)
    assert [(d.job_id, d.instance_id) for d in rows] == [
        ("only-one", "one"), ("tick", "one"), ("tick", "two")]
    first = rows[0]
    assert first.team == "billing" and first.source == "code" and first.live
    assert first.spec == {"kind": "handler", "schedule": "* * * * *", "zone": "UTC",
                          "config": {"a": [1, "x"]}}
    assert first.declared_at is not None and first.declared_at.timestamp() == T0
    assert rows[2].digest == "d-*/5 * * * *"
    # an unchanged spec keeps declared_at; every row is touched
    clock.advance(5)
    await a.publish_jobs("one", [decl("tick")])  # only-one is no longer declared
    await a.heartbeat(me("one"), ttl=TTL)
    rows = await a.list_declared(ttl=TTL)
    assert [(d.job_id, d.instance_id) for d in rows] == [("tick", "one"), ("tick", "two")]
    assert rows[0].declared_at.timestamp() == T0  # type: ignore[union-attr]
    assert rows[0].seen_at.timestamp() == T0 + 5  # type: ignore[union-attr]
    clock.advance(5)
    await a.publish_jobs("one", None)  # the periodic touch
    rows = await a.list_declared(ttl=TTL)
    assert rows[0].seen_at.timestamp() == T0 + 10  # type: ignore[union-attr]
    assert rows[1].seen_at.timestamp() == T0  # type: ignore[union-attr]
    # "two" stops beating: its row stays, shown as not live
    clock.advance(10)
    await a.heartbeat(me("one"), ttl=TTL)
    live = {d.instance_id: d.live for d in await a.list_declared(ttl=TTL)}
    assert live == {"one": True, "two": False}
    await b.leave("two")  # a graceful stop: no instance row, the registry row is kept
    live = {d.instance_id: d.live for d in await a.list_declared(ttl=TTL)}
    assert live == {"one": True, "two": False}
    # a changed spec gets a new declared_at
    clock.advance(1)
    await a.publish_jobs("one", [decl("tick", "0 * * * *")])
    [row] = [d for d in await a.list_declared(ttl=TTL) if d.instance_id == "one"]
    assert row.digest == "d-0 * * * *" and row.spec["schedule"] == "0 * * * *"
    assert row.declared_at.timestamp() == T0 + 21  # type: ignore[union-attr]


async def test_requests_are_taken_once_by_a_declarer_or_their_target(
    store: Store, other: Store, clock: FakeClock
) -> None:
    a, b = rstore(store), rstore(other)
    sent = await a.submit_request(
        FleetRequest("trigger", "tick", "ops@host", {"params": {"n": 1}, "force": True}))
    assert sent.id is not None and sent.requested_at is not None
    aimed = await a.submit_request(FleetRequest("trigger", "other", "ops", target="two"))
    clock.advance(1)
    assert await a.take_requests("one", ["nope"]) == []
    got_a, got_b = await asyncio.gather(
        a.take_requests("one", ["tick"]), b.take_requests("two", ["tick"]))
    taken = got_a + got_b
    assert sorted(r.id or 0 for r in taken) == sorted([sent.id, aimed.id])  # type: ignore[list-item]
    [mine] = [r for r in taken if r.id == sent.id]
    assert mine.payload == {"params": {"n": 1}, "force": True}
    assert mine.taken_by in ("one", "two") and mine.taken_at.timestamp() == T0 + 1  # type: ignore[union-attr]
    assert [r.taken_by for r in taken if r.id == aimed.id] == ["two"]
    assert await a.take_requests("one", ["tick"]) == []  # never twice
    assert sent.id is not None
    # a taken request cannot be withdrawn; its answer is recorded once
    assert not await a.answer_request(sent.id, error="gave up", only_untaken=True)
    assert await b.answer_request(sent.id, run_id=42)
    assert not await b.answer_request(sent.id, run_id=43)
    got = await a.get_request(sent.id)
    assert got is not None and got.answered and got.run_id == 42 and got.error is None
    assert got.requested_by == "ops@host" and got.kind == "trigger" and got.job_id == "tick"
    # an untaken request withdrawn by its sender is never taken
    late = await a.submit_request(FleetRequest("trigger", "tick", "ops"))
    assert late.id is not None
    assert await a.answer_request(late.id, error="no answer", only_untaken=True)
    assert await b.take_requests("two", ["tick"]) == []
    withdrawn = await b.get_request(late.id)
    assert withdrawn is not None and withdrawn.error == "no answer" and withdrawn.taken_by is None
    assert await a.get_request(10_000) is None


class OnlyIn:
    """A job table asked only ``in``: ``take_requests`` must never walk (or copy and
    send) a process's jobs -- it may hold 250,000 of them."""

    def __init__(self, ids: set[str]) -> None:
        self.ids = ids
        self.asked: list[str] = []

    def __contains__(self, job_id: object) -> bool:
        self.asked.append(str(job_id))
        return job_id in self.ids

    def __iter__(self) -> Any:
        raise AssertionError("the job table was walked")

    def __len__(self) -> int:
        raise AssertionError("the job table was sized")


async def test_taking_requests_asks_the_job_table_only_about_open_requests(
    store: Store, other: Store, clock: FakeClock
) -> None:
    a, b = rstore(store), rstore(other)
    held = OnlyIn({f"job-{i}" for i in range(1000)})
    assert await a.take_requests("one", held) == [] and held.asked == []  # none open
    for_me = await a.submit_request(FleetRequest("trigger", "job-7", "ops"))
    elsewhere = await a.submit_request(FleetRequest("trigger", "gone", "ops"))
    aimed = await a.submit_request(FleetRequest("trigger", "job-8", "ops", target="two"))
    got = await a.take_requests("one", held)
    assert [r.id for r in got] == [for_me.id] and got[0].taken_by == "one"
    assert sorted(held.asked) == ["gone", "job-7"]  # never the one aimed at "two"
    # the request of a job "one" does not hold stays open for whoever holds it
    theirs = await b.take_requests("two", OnlyIn({"gone"}))
    assert [r.id for r in theirs] == [elsewhere.id, aimed.id]
    assert {r.taken_by for r in theirs} == {"two"}
    assert await a.take_requests("one", held) == []


async def test_a_request_whose_taker_is_lost_is_answered_failed_with_its_progress(
    store: Store, other: Store, clock: FakeClock
) -> None:
    """#14: a backfill taken by an instance that then dies is answered INSTANCE_LOST (how
    far it got, how to finish it) instead of staying unanswered forever; while the taker
    lives nothing is answered; the taker's later progress write is refused (it stops)."""
    from cronfleet.runtime.registry import backfill_status, settle_lost_taker

    a, b = rstore(store), rstore(other)
    await a.heartbeat(me("runner"), ttl=TTL)
    await b.heartbeat(me("caller"), ttl=TTL)
    sent = await b.submit_request(FleetRequest(
        "backfill", "tick", "ops", {"from": "2026-01-01T00:00:00+00:00"}))
    assert sent.id is not None
    [taken] = await a.take_requests("runner", ["tick"])
    assert taken.taken_by == "runner"
    assert await a.note_request(sent.id, {"progress": {"done": 7, "total": 12}})
    clock.advance(TTL - 1)
    await b.heartbeat(me("caller"), ttl=TTL)
    got = await backfill_status(b, sent.id, ttl=TTL)  # the runner is still live
    assert not got.answered and got.taken_by == "runner"
    clock.advance(2)  # the runner's heartbeat is now older than the ttl
    got = await backfill_status(b, sent.id, ttl=TTL)
    assert got.answered and got.error == (
        "INSTANCE_LOST: instance runner was lost while running the backfill; 7 of 12 "
        "slots done -- run it again with --only-missing")
    assert not await a.note_request(sent.id, {"progress": {"done": 8, "total": 12}})
    assert not await a.answer_request(sent.id, error=None)  # the first answer stays
    again = await settle_lost_taker(b, got, ttl=TTL)
    assert again.error == got.error
    # a trigger request taken by a lost instance: the same code, its own wording
    trig = await b.submit_request(FleetRequest("trigger", "tick", "ops"))
    assert trig.id is not None
    await a.heartbeat(me("runner"), ttl=TTL)
    [t] = await a.take_requests("runner", ["tick"])
    assert (await settle_lost_taker(b, t, ttl=TTL)).answered is False
    clock.advance(TTL + 1)
    done = await settle_lost_taker(b, t, ttl=TTL)
    assert done.error is not None and done.error.startswith(
        "INSTANCE_LOST: instance runner was lost before answering the trigger request")


async def test_a_set_larger_than_a_write_chunk_is_published_and_replaced_whole(
    store: Store, clock: FakeClock
) -> None:
    """5,000 jobs (more than REGISTRY_CHUNK, which writes them in several short
    transactions): every one listed; then a set that drops 4,000 of them and changes 500."""
    a = rstore(store)
    await a.heartbeat(me("one"), ttl=TTL)
    await a.publish_jobs("one", [decl(f"job-{i:05d}") for i in range(5000)])
    rows = await a.list_declared(ttl=TTL)
    assert [d.job_id for d in rows] == [f"job-{i:05d}" for i in range(5000)]
    clock.advance(5)
    await a.publish_jobs("one", [decl(f"job-{i:05d}", "*/5 * * * *" if i < 500 else "* * * * *")
                                 for i in range(1000)])
    rows = await a.list_declared(ttl=TTL)
    assert [d.job_id for d in rows] == [f"job-{i:05d}" for i in range(1000)]
    assert [d.digest for d in rows[:500]] == ["d-*/5 * * * *"] * 500
    assert {d.digest for d in rows[500:]} == {"d-* * * * *"}
    assert all(d.seen_at is not None and d.seen_at.timestamp() == T0 + 5 for d in rows)
