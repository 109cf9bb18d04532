"""What is particular to the Redis store (the contract itself is in test_conformance.py):
URLs, the schema version key, scripts reloaded after a restart, one round trip per chunk,
keys under the prefix and hash-tagged per job, pub/sub wake-ups, the server going away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from cronfleet.clock import FakeClock
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.model import RunStatus
from cronfleet.store import RedisStore, open_store
from cronfleet.store.base import Declared, Dispatch, Finish, Skip
from cronfleet.store.redis import SCHEMA_VERSION
from cronfleet.store.url import parse_store_url

from .conftest import T0
from .redis_server import RedisServer, new_prefix


@pytest.fixture
def url(redis_session: RedisServer) -> str:
    return f"{redis_session.url}?prefix={new_prefix()}"


@pytest.fixture
async def raw(redis_session: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_session.url, socket_timeout=None)
    yield client
    await client.aclose()


@pytest.fixture
async def store(url: str) -> AsyncIterator[RedisStore]:
    s = RedisStore(url, clock=FakeClock(T0))
    await s.open()
    yield s
    await s.close()


def test_urls() -> None:
    p = parse_store_url("redis://:pw@cache.internal:6380/2?prefix=cf:&ssl_cert_reqs=none")
    assert p.dialect == "redis" and p.prefix == "cf:"
    assert p.conninfo == "redis://:pw@cache.internal:6380/2?ssl_cert_reqs=none"
    assert parse_store_url("rediss://h/0").prefix == "cronfleet:"
    with pytest.raises(StoreError, match="prefix is empty"):
        parse_store_url("redis://h/0?prefix=")
    with pytest.raises(StoreError, match="expected redis://host:6379/0"):
        parse_store_url("redis://")
    s = open_store("redis://127.0.0.1:1/0?prefix=x:")
    assert isinstance(s, RedisStore) and s.prefix == "x:"
    assert "pw" not in repr(RedisStore("redis://:pw@h:1/0"))


async def test_schema_version_written_once_and_newer_refused(
    url: str, raw: aioredis.Redis
) -> None:
    prefix = parse_store_url(url).prefix
    s = RedisStore(url)
    await s.open()
    await s.close()
    assert int(await raw.get(prefix + "schema")) == SCHEMA_VERSION
    await raw.set(prefix + "schema", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        await RedisStore(url).open()
    await raw.set(prefix + "schema", SCHEMA_VERSION)
    await RedisStore(url).open()


async def test_scripts_are_loaded_again_after_script_flush(
    store: RedisStore, raw: aioredis.Redis
) -> None:
    await store.ensure_jobs(["a"])
    await raw.script_flush()  # what a restarted server looks like to a running store
    [won] = await store.dispatch([Dispatch.scheduled("a", T0, lease=True)], "one")
    assert won.won and won.token == 1


async def test_a_burst_is_one_script_call_per_chunk(
    store: RedisStore, raw: aioredis.Redis
) -> None:
    jobs = [f"j{i}" for i in range(5000)]
    await store.ensure_jobs(jobs)
    await store.dispatch([Dispatch.scheduled("warm", T0, lease=True)], "warm")  # scripts loaded

    async def calls() -> int:
        stats = await raw.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = await calls()
    out = await store.dispatch(
        [Dispatch.scheduled(j, T0 + 60, lease=True) for j in jobs], "one"
    )
    assert all(d.won and d.started for d in out)
    assert await calls() - before == 1  # claims and leases; the hot path writes no row


async def test_the_registry_is_written_in_chunks_and_replaced_as_a_whole(
    store: RedisStore, raw: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One script call per REGISTRY_CHUNK rows (100,000 rows in one script held the server
    for a second); a later set replaces the whole earlier one across chunks."""
    import cronfleet.store.redis.store as redis_store

    monkeypatch.setattr(redis_store, "REGISTRY_CHUNK", 2)
    spec = {"kind": "handler", "schedule": "* * * * *"}

    def rows(*ids: str) -> list[Declared]:
        return [Declared(j, "", team="t", source="code", digest="d", spec=spec) for j in ids]

    await store.publish_jobs("one", rows("warm"))  # the scripts loaded

    async def calls() -> int:
        stats = await raw.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = await calls()
    await store.publish_jobs("one", rows("a", "b", "c", "d", "e"))
    # ids, 3 chunks of puts, 1 drop (warm), the touch
    assert await calls() - before == 6
    await store.publish_jobs("one", rows("b", "f", "g"))
    got = await store.list_declared(ttl=60)
    assert [d.job_id for d in got] == ["b", "f", "g"]
    assert got[0].spec == spec


async def test_dispatch_writes_its_rows_in_the_claims_script(
    url: str, store: RedisStore, raw: aioredis.Redis
) -> None:
    """Claims without a lease (ALLOW, missed, jitter) and busy leases get their rows in
    the same script as the claim: a process that dies right after that one call leaves
    no claim the ledger does not account for (a silent gap)."""
    await store.ensure_jobs(["allow", "missed", "jitter", "busy", "hot"])
    [held] = await store.dispatch([Dispatch.scheduled("busy", T0, lease=True)], "other")
    assert held.won
    await store.dispatch([Dispatch.scheduled("warm", T0, lease=True)], "warm")  # loaded
    stats = await raw.info("commandstats")
    before = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    items = [
        Dispatch.scheduled("allow", T0 + 60, lease=False),
        Dispatch.missed("missed", T0 + 60, reason="missed"),
        Dispatch.scheduled("jitter", T0 + 60, lease=True, hold=90, defer=True),
        Dispatch.scheduled("busy", T0 + 60, lease=True),
        Dispatch.scheduled("hot", T0 + 60, lease=True),
    ]
    out = await store.dispatch(items, "dies")
    stats = await raw.info("commandstats")
    assert int(stats["cmdstat_evalsha"]["calls"]) - before == 1  # one call, nothing after
    assert all(d.won for d in out)
    # what another process reads now (the dispatching one is gone)
    other = RedisStore(url, clock=FakeClock(T0 + 60))
    await other.open()
    try:
        rows = {r.job_id: r for r in await other.list_runs(limit=50)}
        got = {j: (r.status.value, r.reason) for j, r in rows.items() if j != "warm"}
        assert got == {
            "allow": ("running", None),
            "missed": ("skipped", "missed"),
            "jitter": ("pending", None),
            "busy": ("skipped", "already_executing"),
        }  # "hot": its claim sits under its lease (the reaper writes it: below)
        for d in out:
            if d.request.job_id != "hot":
                assert d.run is not None and d.run.id == rows[d.request.job_id].id
                stored = rows[d.request.job_id]
                assert stored.fencing_token == d.token and stored.instance_id == "dies"
                assert stored.logs == d.run.logs and stored.deadline == d.run.deadline
                assert stored.claimed_at == d.run.claimed_at
        assert rows["busy"].logs[-1].endswith("(lease held by other)")
        assert rows["jitter"].deadline is not None
        assert rows["jitter"].deadline.timestamp() == T0 + 90  # the store's now + hold
        # the hot path's claim: its lease expires, the reaper writes its row
        other.clock.advance(4000)  # type: ignore[attr-defined]
        reaped = {r.job_id: r for r in await other.reap_orphans("survivor")}
        assert "hot" in reaped and reaped["hot"].status.value == "interrupted"
    finally:
        await other.close()


async def test_keys_live_under_the_prefix_and_a_job_s_keys_share_its_hash_tag(
    store: RedisStore, raw: aioredis.Redis
) -> None:
    await store.ensure_jobs(["billing.nightly"])
    await store.dispatch([Dispatch.scheduled("billing.nightly", T0, lease=True)], "one")
    keys = [k.decode() async for k in raw.scan_iter(match="*")]
    mine = [k for k in keys if k.startswith(store.prefix)]
    job_keys = [k for k in mine if "billing.nightly" in k]
    assert job_keys and all(k.startswith(store.prefix + "{billing.nightly}:") for k in job_keys)
    assert {k for k in mine if "{" not in k} <= {
        store.prefix + n for n in ("schema", "jobs", "leased")
    }


async def test_lanes_keys_exist_only_for_max_instances_above_one(
    store: RedisStore, raw: aioredis.Redis
) -> None:
    """Lanes 1..N-1 live in ``{job}:l`` and the ``lanes`` index, written only when a job
    with N > 1 finds lane 0 busy; N = 1 (busy or not) never writes them, and a lane
    released, reaped or broken leaves no key behind."""
    await store.ensure_jobs(["one", "many"])
    for i in range(2):  # N = 1: the second slot finds the lease busy (skipped)
        await store.dispatch([Dispatch.scheduled("one", T0 + i, lease=True, hold=60)], "a")

    async def lane_keys() -> set[str]:
        keys = {k.decode() async for k in raw.scan_iter(match=store.prefix + "*")}
        return {k for k in keys if k.endswith(":l") or k == store.prefix + "lanes"}

    assert await lane_keys() == set()

    def many(slot: float) -> Dispatch:
        d = Dispatch.scheduled("many", slot, lease=True, hold=60)
        d.lanes = 3
        return d

    before = int((await raw.info("commandstats"))["cmdstat_evalsha"]["calls"])
    got = await store.dispatch([many(T0 + i) for i in range(3)], "a")  # one script call
    assert int((await raw.info("commandstats"))["cmdstat_evalsha"]["calls"]) - before == 1
    assert [d.started for d in got] == [True, True, True]
    assert await lane_keys() == {store.prefix + "{many}:l", store.prefix + "lanes"}
    assert await raw.hlen(store.prefix + "{many}:l") == 2  # lanes 1 and 2; lane 0: state
    # the index is scored by the earliest lane expiry (the reaper reads the expired ones)
    assert await raw.zscore(store.prefix + "lanes", "many") == (T0 + 60) * 1000
    for d in got:
        assert d.run is not None
        d.run.status = RunStatus.SUCCEEDED
    await store.finish([Finish(d.run, release_token=d.token) for d in got if d.run])
    assert await lane_keys() == set()  # released: nothing left


async def test_an_override_wakes_every_subscribed_process(url: str) -> None:
    one, two = RedisStore(url), RedisStore(url)
    await one.open()
    await two.open()
    try:
        woke = asyncio.Event()
        await two.subscribe(woke.set)
        await asyncio.sleep(0.2)  # the listener subscribes
        await one.set_override("a", False, by="ops", note=None, until=None)
        async with asyncio.timeout(5):
            await woke.wait()
        assert (await two.read_overrides(["a"]))["a"].enabled_override is False
    finally:
        await one.close()
        await two.close()


@pytest.fixture
def private() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True).start()
    yield server
    server.cleanup()


async def test_server_down_is_store_unavailable_and_a_restart_with_aof_keeps_claims(
    private: RedisServer,
) -> None:
    s = RedisStore(f"{private.url}?prefix=p:")
    await s.open()
    try:
        [first] = await s.dispatch([Dispatch.scheduled("a", T0, lease=False)], "one")
        assert first.won
        private.kill()
        with pytest.raises(StoreUnavailable, match="unavailable"):
            await s.dispatch([Dispatch.scheduled("a", T0 + 1, lease=False)], "one")
        private.start()
        # acknowledged with appendfsync always: the claim survived the SIGKILL
        [again] = await s.dispatch([Dispatch.scheduled("a", T0, lease=False)], "two")
        assert not again.won
        [later] = await s.dispatch([Dispatch.scheduled("a", T0 + 2, lease=False)], "two")
        assert later.won and later.token is not None and later.token > (first.token or 0)
    finally:
        await s.close()


async def test_claims_of_a_dispatch_whose_answer_was_lost_are_given_back(
    redis_session: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ran a dispatch script and the connection died before its answer (chaos
    ``cut60``: 19 jobs claimed at the cut had neither a run nor a row, and their leases
    held them for the rest of the run). The scheduler took the batch as failed and claims
    the slots again once the server is back: that claim must find them free, before the
    give-back's own task runs as well as after it; a claim written with its row stays."""
    from redis import exceptions as rexc

    import cronfleet.store.redis.transport as transport
    from bench.chaos.faults import FaultProxy

    prefix = new_prefix()
    with FaultProxy(redis_session.url) as proxy:
        s = RedisStore(f"{proxy.url}?prefix={prefix}", clock=FakeClock(T0))
        other = RedisStore(f"{redis_session.url}?prefix={prefix}", clock=FakeClock(T0))
        await s.open()
        await other.open()
        try:
            async def lost_answer(store: RedisStore, batch: list[Dispatch]) -> None:
                client = store.transport.client()
                real = client.evalsha
                armed = [True]

                async def answer_lost(sha: str, numkeys: int, *argv: Any) -> Any:
                    res = await real(sha, numkeys, *argv)  # type: ignore[misc]
                    if armed[0]:
                        armed[0] = False
                        proxy.cut()
                        raise rexc.ConnectionError("Connection reset by peer (test)")
                    return res

                monkeypatch.setattr(client, "evalsha", answer_lost)
                with pytest.raises(StoreUnavailable):
                    await store.dispatch(batch, "one")
                monkeypatch.setattr(client, "evalsha", real)

            # 1. the next dispatch gives back first (the give-back's task is held back)
            monkeypatch.setattr(transport.random, "uniform", lambda a, b: 30.0)
            await lost_answer(s, [
                Dispatch.scheduled("hot", T0, lease=True),
                Dispatch.early_claim("early", T0, hold=60),
                Dispatch.missed("m", T0, reason="missed", logs=["missed"]),
            ])
            # run for real: while the server is cut, its claims and leases are there
            states = await other.read_states(["hot", "early"])
            held = {j: st.lease_holder for j, st in states.items()}
            assert held == {"hot": "one", "early": "one"}
            [lost] = await other.dispatch([Dispatch.scheduled("hot", T0, lease=True)], "two")
            assert not lost.won  # nobody else can claim the slot: only its maker can undo it
            proxy.restore()
            again = [Dispatch.scheduled("hot", T0, lease=True),
                     Dispatch.scheduled("early", T0, lease=True),
                     Dispatch.missed("m", T0, reason="missed", logs=["again"])]
            got: list[Any] = []
            for _ in range(3):  # (the pool's connections died with the cut: a call or two)
                try:
                    got = await s.dispatch(again, "one")
                    break
                except StoreUnavailable:
                    continue
            assert [(d.won, d.started) for d in got] == [(True, True), (True, True), (False, False)]
            [missed] = await other.list_runs("m")
            assert (missed.status, missed.logs) == (RunStatus.SKIPPED, ["missed"])

            # 2. nothing dispatched after the cut: the give-back's task frees the job
            monkeypatch.setattr(transport.random, "uniform", lambda a, b: 0.05)
            idle = RedisStore(f"{proxy.url}?prefix={prefix}", clock=FakeClock(T0))
            await idle.open()
            await lost_answer(idle, [Dispatch.scheduled("idle", T0 + 1, lease=True)])
            assert (await other.read_states(["idle"]))["idle"].lease_holder == "one"
            await asyncio.sleep(0.3)
            assert (await other.read_states(["idle"]))["idle"].lease_holder == "one"  # still cut
            proxy.restore()
            for _ in range(100):
                if (await other.read_states(["idle"]))["idle"].lease_holder is None:
                    break
                await asyncio.sleep(0.05)
            assert (await other.read_states(["idle"]))["idle"].lease_holder is None
            [free] = await other.dispatch([Dispatch.scheduled("idle", T0 + 1, lease=True)], "two")
            assert free.won and free.started
            await idle.close()
        finally:
            await s.close()
            await other.close()


async def test_confirm_outage_asks_a_fresh_connection(redis_session: RedisServer) -> None:
    """PREFER_GLOBAL fails open only on a confirmed outage: while the server answers a
    fresh connection there is none; cut (connections reset, new ones refused) or stalled
    (nothing answers) there is one, within the deadline."""
    import cronfleet.store.redis.transport as redis_store
    from bench.chaos.faults import FaultProxy

    proxy = FaultProxy(redis_session.url)
    with proxy:
        s = RedisStore(f"{proxy.url}?prefix={new_prefix()}", clock=FakeClock(T0))
        await s.open()
        try:
            assert not await s.confirm_outage()
            proxy.cut()
            assert await s.confirm_outage()
            proxy.restore()
            assert not await s.confirm_outage()
            proxy.stall()
            redis_store.CONFIRM_TIMEOUT, saved = 0.5, redis_store.CONFIRM_TIMEOUT
            try:
                assert await s.confirm_outage()
            finally:
                redis_store.CONFIRM_TIMEOUT = saved
            proxy.restore()
        finally:
            await s.close()
    assert not await RedisStore(redis_session.url).confirm_outage()  # not open: no claim


async def test_retention_prunes_a_large_ledger_in_bounded_calls(
    store: RedisStore, raw: aioredis.Redis
) -> None:
    """prune.lua examines at most ``prune_chunk`` jobs, claims and runs per call and hands
    back a cursor: a large ledger takes several short calls, not one long script."""
    jobs = [f"j{i}" for i in range(30)]
    await store.ensure_jobs(jobs)
    for k in range(20):  # 600 claims, one per (job, slot)
        await store.dispatch([Dispatch.scheduled(j, T0 + k, lease=False) for j in jobs], "one")
    await store.record_skips([Skip(j, T0 + 100 + k, "paused") for j in jobs for k in range(40)])
    before_runs = sum([len(await store.list_runs(j, limit=1000)) for j in jobs])
    assert before_runs >= 1200
    store.transport.prune_chunk = 50
    replies: list[list[Any]] = []
    commands: list[int] = []
    run = store.transport.run

    async def calls() -> int:
        stats = await raw.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    async def counted(name: str, *args: Any) -> Any:
        if name != "prune":
            return await run(name, *args)
        start = await calls()
        reply = await run(name, *args)
        commands.append(await calls() - start - 1)  # less the EVALSHA itself
        replies.append(reply)
        return reply

    store.transport.run = counted  # type: ignore[method-assign]
    claims, runs = await store.prune(
        claims_older_than=T0 + 3000, runs_older_than=T0 + 3000, runs_per_job=5
    )
    store.transport.run = run  # type: ignore[method-assign]
    examined = [int(r[2]) for r in replies]
    # every claim (600 runs' and 1,200 skips') and run, 50 at a time
    assert len(replies) > (1800 + before_runs) // 50
    assert max(examined) <= 50
    # each examined item costs a bounded number of commands (a deleted run ~12)
    assert max(commands) <= 50 * 16
    assert claims == 30 * 59  # every job keeps the claim of its newest slot (a skip's)
    for j in jobs:  # the newest skip (the watermark reads it) and the runs still open
        left = await store.list_runs(j, limit=1000)
        assert [r.slot.timestamp() for r in left] == [T0 + 139] + [
            T0 + k for k in range(19, -1, -1)
        ]
        assert {r.status for r in left[1:]} <= {RunStatus.RUNNING, RunStatus.PENDING}
    assert runs == before_runs - 30 * 21
