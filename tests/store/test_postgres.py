"""What only the PostgreSQL store has: database time, skew, URL options, migrations under
ten concurrent processes, LISTEN/NOTIFY, connection loss, statement counts per batch."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cronfleet.clock import FakeClock, SystemClock
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.model import TriggeredBy
from cronfleet.store import PostgresStore, open_store
from cronfleet.store.base import Dispatch
from cronfleet.store.postgres import split_url
from cronfleet.store.queries import migrations

from .pg import TcpProxy, drop_schema, new_schema, pg_url, require_pg

S = TriggeredBy.SCHEDULE


@pytest.fixture
def schema() -> Iterator[str]:
    require_pg()
    name = new_schema("pg")
    yield name
    drop_schema(name)


@pytest.fixture
async def pg(schema: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_url(), schema=schema)
    await s.open()
    yield s
    await s.close()


def item(job: str, slot: float, **kw: Any) -> Dispatch:
    return Dispatch(job_id=job, slot=slot, triggered_by=S, **kw)


def db_now() -> float:
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])


def test_url_options_are_ours_and_the_rest_goes_to_libpq() -> None:
    conninfo, opts = split_url("postgresql://u:secret@db:5433/app?schema=jobs&sslmode=require")
    assert opts == {"schema": "jobs"}
    assert conninfo == "postgresql://u:secret@db:5433/app?sslmode=require"
    store = open_store("postgres://u:secret@db/app?schema=jobs&pool_max=3")
    assert isinstance(store, PostgresStore)
    assert store.schema == "jobs" and store.pool_max == 3
    assert "secret" not in store.url and "secret" not in repr(store)
    assert store.time_source == "database"  # no clock: the database judges time
    assert PostgresStore("postgresql:///x", clock=SystemClock(offset=3)).time_source == "database"
    assert PostgresStore("postgresql:///x", clock=FakeClock(0)).time_source == "clock"
    with pytest.raises(StoreError, match="time_source"):
        PostgresStore("postgresql:///x?time_source=sundial")


def test_a_url_without_a_host_keeps_its_slashes_and_a_broken_one_is_an_error() -> None:
    """``postgresql:///db`` (libpq's local socket) reached libpq as ``postgresql:/db``, a
    broken key=value string, and the start retried it as an outage for ever."""
    conninfo, opts = split_url("postgresql:///app?schema=jobs&host=/run/pg")
    assert opts == {"schema": "jobs"}
    assert conninfo == "postgresql:///app?host=%2Frun%2Fpg"
    assert PostgresStore("postgresql:///app?schema=jobs").conninfo == "postgresql:///app"
    with pytest.raises(StoreError, match=r"invalid PostgreSQL URL .*db/app.*invalid URI query"):
        PostgresStore("postgresql://db/app?colour=blue")  # libpq knows no such parameter


SOCKET = Path("/var/run/postgresql/.s.PGSQL.5432")
HAS_SOCKET = SOCKET.exists()


async def test_the_local_socket_url_opens(schema: str) -> None:
    if not HAS_SOCKET:  # the machine's PostgreSQL listens there (CI: fail, not skip)
        missing = f"no PostgreSQL socket at {SOCKET}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    with psycopg.connect(pg_url()) as conn:
        info = conn.info
        db, user = info.dbname, info.user
    store = open_store(f"postgresql:///{db}?user={user}&schema={schema}")
    await store.open()
    try:
        assert set(await store.ensure_jobs(["a"])) == {"a"}
    finally:
        await store.close()


async def test_schema_from_the_url(schema: str) -> None:
    store = open_store(f"{pg_url()}?schema={schema}")
    await store.open()
    try:
        await store.ensure_jobs(["a"])
    finally:
        await store.close()
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute(
            sql.SQL("SELECT job_id FROM {}.job_state").format(sql.Identifier(schema))
        ).fetchone()
    assert row == ("a",)


async def test_lease_expiry_and_claim_times_use_the_database_clock(schema: str) -> None:
    """A host 5 s ahead must not take the lease a host 5 s behind holds for 3 s."""
    behind = PostgresStore(pg_url(), schema=schema, clock=SystemClock(offset=-5))
    ahead = PostgresStore(pg_url(), schema=schema, clock=SystemClock(offset=5))
    await behind.open()
    await ahead.open()
    try:
        assert behind.clock_skew == pytest.approx(-5, abs=0.5)
        assert ahead.clock_skew == pytest.approx(5, abs=0.5)
        await behind.ensure_jobs(["a"])
        slot = float(int(time.time()))
        [held] = await behind.dispatch([item("a", slot, lease=True, hold=3)], "behind")
        assert held.started and held.run is not None
        assert held.run.claimed_at is not None
        assert abs(held.run.claimed_at.timestamp() - db_now()) < 1.0
        # by its own clock the lease ended 2 s ago; by the database's it is live
        [stolen] = await ahead.dispatch([item("a", slot + 1, lease=True, hold=3)], "ahead")
        assert stolen.won and not stolen.started and stolen.holder == "behind"
        assert await ahead.reap_orphans("ahead") == []
        assert abs(await ahead.now() - db_now()) < 1.0
    finally:
        await behind.close()
        await ahead.close()


async def test_skew_over_a_second_is_logged(schema: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "cronfleet.store.postgres")
    store = PostgresStore(pg_url(), schema=schema, clock=SystemClock(offset=2.5))
    await store.open()
    try:
        assert store.clock_skew == pytest.approx(2.5, abs=0.5)
        assert any("clock is +2." in r.getMessage() for r in caplog.records)
        store.host_clock = SystemClock()
        assert abs(await store.measure_skew()) < 0.5
        assert any("back within 1 s" in r.getMessage() for r in caplog.records)
    finally:
        await store.close()


_OPEN_ONE = """
import asyncio, sys, time
from cronfleet.store import PostgresStore
async def main():
    store = PostgresStore(sys.argv[1], schema=sys.argv[2])
    while time.time() < float(sys.argv[3]):
        await asyncio.sleep(0.001)
    await store.open()
    await store.ensure_jobs(["shared"])
    await store.close()
asyncio.run(main())
"""


def test_ten_processes_migrate_one_schema_at_once(schema: str) -> None:
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_ONE, pg_url(), schema, str(start)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, errors
    with psycopg.connect(pg_url()) as conn:
        rows = conn.execute(
            sql.SQL("SELECT version, name FROM {}.schema_migrations").format(sql.Identifier(schema))
        ).fetchall()
        jobs = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.job_state").format(sql.Identifier(schema))
        ).fetchone()
    known = migrations("cronfleet.store.postgres")
    assert sorted(rows) == [(v, n) for v, n, _ in known]  # each applied once
    assert jobs == (1,)


async def test_a_newer_schema_is_refused(pg: PostgresStore, schema: str) -> None:
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (999, 'x')").format(
                sql.Identifier(schema)
            )
        )
    newer = PostgresStore(pg_url(), schema=schema)
    with pytest.raises(StoreError, match="newer than this cronfleet understands"):
        await newer.open()


async def test_overrides_and_new_jobs_are_announced(schema: str) -> None:
    me = PostgresStore(pg_url(), schema=schema)
    them = PostgresStore(pg_url(), schema=schema)
    await me.open()
    await them.open()
    woke = asyncio.Event()
    try:
        await me.subscribe(woke.set)
        await asyncio.sleep(0.3)  # the listener connects
        woke.clear()
        await them.set_override("a", False, by="ops", note=None, until=None)
        await asyncio.wait_for(woke.wait(), 5)
        woke.clear()
        await them.ensure_jobs(["brand-new"])
        await asyncio.wait_for(woke.wait(), 5)
        # the listening connection dies: it comes back by itself and hears again
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'cronfleet' AND query LIKE 'LISTEN%%'"
            ).fetchall()
        assert killed
        await asyncio.sleep(1.0)
        woke.clear()
        await them.set_override("a", None, by="ops", note=None, until=None)
        await asyncio.wait_for(woke.wait(), 10)
    finally:
        await me.close()
        await them.close()


async def test_close_ends_a_listener_whose_cancellation_its_connect_lost(
        schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Python 3.11 with psycopg 3.1, a cancellation that arrives as the listener's
    connection completes is lost (``wait_for``, CPython gh-86296): the listener went on to
    ``LISTEN`` and waited for notifications, and ``close()`` waited for it for ever (the
    tests on the lowest versions hung there). The connect here loses it the same way."""
    import cronfleet.store.postgres.store as pg_mod

    real = pg_mod.AsyncConnection.connect
    connecting = asyncio.Event()

    async def loses_the_cancel(*args: Any, **kwargs: Any) -> Any:
        attempt = asyncio.ensure_future(real(*args, **kwargs))
        connecting.set()
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            return await attempt  # as wait_for did: the result, and no cancellation

    monkeypatch.setattr(pg_mod.AsyncConnection, "connect", loses_the_cancel)
    me = PostgresStore(pg_url(), schema=schema)
    await me.open()
    await me.subscribe(lambda: None)
    await asyncio.wait_for(connecting.wait(), 5)
    await asyncio.wait_for(me.close(), 10)
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        listening = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{me.channel}"',)).fetchone()
    assert listening == (0,)


async def test_a_usual_heartbeat_is_one_statement_outside_a_transaction(
        pg: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering takes a transaction; every later beat is one round trip, on the
    database's clock; a row declared lost goes back to the transaction that says so."""
    from cronfleet.store.base import Instance

    sent: list[bytes] = []
    real = psycopg.AsyncCursor.execute

    async def counted(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(query if isinstance(query, bytes) else str(query).encode())
        return await real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
    one = Instance("one", host="h", pid=1, role="all", version="1")
    first = await pg.heartbeat(one, ttl=5.0)
    assert any(q.startswith(b"BEGIN") for q in sent) and first.live == ("one",)
    sent.clear()
    before = time.time()
    beat = await pg.heartbeat(one, ttl=5.0)
    assert len(sent) == 1 and not sent[0].startswith(b"BEGIN")
    assert beat.live == ("one",) and not beat.lost and abs(beat.now - before) < 5
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.instances SET lost_at = now(), lost_by = 'two'").format(
            sql.Identifier(pg.schema)))
    sent.clear()
    beat = await pg.heartbeat(one, ttl=5.0)
    assert beat.lost and beat.lost_by == "two" and beat.live == ("one",)
    assert len(sent) > 1 and any(q.startswith(b"BEGIN") for q in sent)


async def test_connection_loss_raises_store_unavailable_fast_and_recovers(schema: str) -> None:
    with TcpProxy(pg_url()) as proxy:
        store = PostgresStore(proxy.url, schema=schema, max_backoff=0.5)
        await store.open()
        try:
            await store.ensure_jobs(["a"])
            proxy.cut()
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await store.dispatch([item("a", 1000.0, lease=True)], "one")
            assert time.monotonic() - t0 < 3
            assert not store.available
            t0 = time.monotonic()
            for _ in range(50):  # while down every call fails at once: no pile-up
                with pytest.raises(StoreUnavailable):
                    await store.read_overrides(["a"])
            assert time.monotonic() - t0 < 0.5
            proxy.restore()
            for _ in range(200):  # the background probe reconnects within its backoff
                if store.available:
                    break
                await asyncio.sleep(0.05)
            assert store.available
            [res] = await store.dispatch([item("a", 1001.0, lease=True)], "one")
            assert res.started
        finally:
            await store.close()


async def test_a_failure_while_the_probe_finishes_starts_no_endless_outage(
    pg: PostgresStore,
) -> None:
    """A call failing just after the probe found the database back (while the probe still
    released leases of unacknowledged commits) marked the store down with the probe still
    running, so no new probe started and the finishing one returned: every call then
    failed fast for ever (chaos ``flaky``: one process ran nothing for the rest of the run,
    622 silent gaps). The probe now goes on."""
    await pg.ensure_jobs(["a"])
    release = pg.transport.release_ambiguous
    again = [True]

    async def failing_meanwhile() -> None:
        if again[0]:
            again[0] = False
            pg.transport.mark_down(ConnectionError("failed again while the probe finished"))
        await release()

    pg.transport.release_ambiguous = failing_meanwhile  # type: ignore[method-assign]
    pg.transport.mark_down(ConnectionError("simulated loss"))
    assert not pg.available
    for _ in range(200):
        if pg.available and not again[0]:
            break
        await asyncio.sleep(0.05)
    assert not again[0] and pg.available
    [res] = await pg.dispatch([item("a", 1000.0, lease=True)], "one")
    assert res.started


async def test_open_gives_up_with_store_unavailable(schema: str) -> None:
    with TcpProxy(pg_url()) as proxy:
        proxy.cut()
        store = PostgresStore(proxy.url, schema=schema, open_timeout=1.0, connect_timeout=1.0)
        with pytest.raises(StoreUnavailable):
            await store.open()


async def test_open_waits_for_a_database_that_comes_back(schema: str) -> None:
    """A process started while PostgreSQL is unreachable connects once it is back (each
    attempt on a fresh pool: a pool whose first open failed cannot be opened again)."""
    with TcpProxy(pg_url()) as proxy:
        proxy.cut()
        store = PostgresStore(proxy.url, schema=schema, open_timeout=30.0,
                              connect_timeout=1.0)
        loop = asyncio.get_running_loop()
        loop.call_later(3.0, proxy.restore)
        began = time.monotonic()
        await store.open()
        try:
            assert 2.5 < time.monotonic() - began < 20
            states = await store.ensure_jobs(["back"])
            assert set(states) == {"back"}
        finally:
            await store.close()


async def test_a_burst_is_a_few_statements_not_one_per_job(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [f"j{i:05d}" for i in range(5000)]
    await pg.ensure_jobs(jobs)
    calls: list[str] = []
    real = psycopg.AsyncCursor.execute

    async def counting(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        calls.append(str(query)[:40])
        return await real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    slot = 1_780_000_000.0
    t0 = time.perf_counter()
    out = await pg.dispatch([item(j, slot, lease=True, hold=60, record=False) for j in jobs], "a")
    took = time.perf_counter() - t0
    assert all(d.started for d in out)
    # BEGIN+now(), claims, leases+watermarks, COMMIT
    assert len(calls) == 4, calls
    calls.clear()
    again = await pg.dispatch([item(j, slot) for j in jobs], "b")
    assert not any(d.won for d in again) and len(calls) <= 4
    print(f"5,000-slot dispatch: {took * 1000:.0f} ms")


async def test_a_retried_group_commit_does_not_write_a_run_twice(pg: PostgresStore) -> None:
    """The connection died during COMMIT and the scheduler writes the batch again."""
    from cronfleet.model import RunStatus
    from cronfleet.store.base import Finish

    await pg.ensure_jobs(["a"])
    [res] = await pg.dispatch([item("a", 1000.0, lease=True, record=False)], "one")
    assert res.run is not None
    res.run.status = RunStatus.SUCCEEDED
    first = res.run
    again = dataclasses.replace(first)  # the same run, a second time
    await pg.finish([Finish(first, release_token=res.token)])
    await pg.finish([Finish(again, release_token=res.token)])
    assert first.id == again.id
    assert [r.status for r in await pg.list_runs("a")] == [RunStatus.SUCCEEDED]


async def test_leases_of_an_unacknowledged_commit_are_released(pg: PostgresStore) -> None:
    await pg.ensure_jobs(["a", "b"])
    out = await pg.dispatch(
        [item("a", 1000.0, lease=True, record=False), item("b", 1000.0, lease=True)], "one"
    )
    # as if COMMIT had gone unanswered: the scheduler ran neither slot under its claim
    pg.transport.remember_leases([(d.request.job_id, d.token) for d in out])
    await pg.transport.release_ambiguous()
    states = await pg.read_states(["a", "b"])
    assert states["a"].lease_holder is None  # no run row: released
    assert states["b"].lease_holder == "one"  # its run row exists: someone runs it


async def test_leases_whose_release_failed_are_released_at_the_next_return(
    pg: PostgresStore,
) -> None:
    """The release of an unacknowledged commit's leases failed too (the connection died
    again): the leases are kept and released once the store is back, not dropped (chaos
    ``flaky``: 16 jobs skipped ``already_executing`` for the rest of the run, their
    leases held by a batch nobody ran)."""
    await pg.ensure_jobs(["a"])
    [d] = await pg.dispatch([item("a", 1000.0, lease=True, record=False)], "one")
    pg.transport.remember_leases([(d.request.job_id, d.token)])
    run = pg.transport.run
    failed = [False]

    async def fails_once(fn: Any, **kw: Any) -> Any:
        if not failed[0]:
            failed[0] = True
            raise StoreUnavailable("the connection died again")
        return await run(fn, **kw)

    pg.transport.run = fails_once  # type: ignore[method-assign]
    await pg.transport.release_ambiguous()
    assert failed[0]
    assert (await pg.read_states(["a"]))["a"].lease_holder == "one"  # not yet
    await pg.transport.release_ambiguous()  # the next return of the store
    assert (await pg.read_states(["a"]))["a"].lease_holder is None


async def test_lanes_of_an_unacknowledged_commit_are_released(pg: PostgresStore) -> None:
    await pg.ensure_jobs(["a"])
    reqs = [item("a", 1000.0 + i, lease=True, record=False) for i in range(2)]
    for r in reqs:
        r.lanes = 2
    out = await pg.dispatch(reqs, "one")
    assert all(d.started for d in out)  # lane 0 and lane 1
    pg.transport.remember_leases([(d.request.job_id, d.token) for d in out])
    await pg.transport.release_ambiguous()
    again = [item("a", 2000.0 + i, lease=True, record=False) for i in range(3)]
    for r in again:
        r.lanes = 2
    got = await pg.dispatch(again, "two")
    assert [d.started for d in got] == [True, True, False]  # both lanes were released


async def test_early_claims_of_an_unanswered_commit_are_given_back_before_reuse(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies after COMMIT reached the server: the early claim is committed but
    the scheduler was told the batch failed, and will claim the slot again at its time. The
    store gives the claim back (and its lease) before it reports itself available, so that
    claim finds the slot free."""
    with TcpProxy(pg_url()) as proxy:
        store = PostgresStore(proxy.url, schema=schema, max_backoff=0.3)
        other = PostgresStore(pg_url(), schema=schema)
        await store.open()
        await other.open()
        try:
            await store.ensure_jobs(["a", "b"])
            [old] = await store.dispatch([item("b", 900.0)], "one")  # b's watermark: 900
            real = psycopg.AsyncCursor.execute
            armed = [True]

            async def commit_then_cut(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
                result = await real(self, query, *args, **kw)
                if query == b"COMMIT" and armed[0]:
                    armed[0] = False
                    proxy.cut()
                    raise psycopg.OperationalError("server closed the connection (test)")
                return result

            monkeypatch.setattr(psycopg.AsyncCursor, "execute", commit_then_cut)
            early = [item(j, 1000.0, lease=True, hold=60, record=False, early=True)
                     for j in ("a", "b")]
            with pytest.raises(StoreUnavailable):
                await store.dispatch(early, "one")
            monkeypatch.setattr(psycopg.AsyncCursor, "execute", real)
            # committed for real: the claims and leases are there while the store is down
            states = await other.read_states(["a", "b"])
            assert {j: s.lease_holder for j, s in states.items()} == {"a": "one", "b": "one"}
            assert not store.available
            proxy.restore()
            for _ in range(200):
                if store.available:
                    break
                await asyncio.sleep(0.05)
            assert store.available
            states = await other.read_states(["a", "b"])
            assert all(s.lease_holder is None for s in states.values())
            assert states["b"].last_slot is not None
            assert states["b"].last_slot.timestamp() == 900.0  # as if never claimed
            # the claim at the slot's time finds the slot free
            got = await store.dispatch([item(j, 1000.0, lease=True) for j in ("a", "b")], "one")
            assert all(r.won and r.started for r in got)
            assert all((r.token or 0) > (old.token or 0) for r in got)
        finally:
            await store.close()
            await other.close()


async def test_slot_claims_of_an_unanswered_commit_are_given_back(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for claims at the slot's time (the fast path writes no row in the claim's
    transaction): the scheduler took the batch as failed and claims the slot again when
    the store is back, which must find it free -- else the slot neither runs nor gets a
    row. A claim whose row was written with it (a missed record) stays."""
    from cronfleet.store.base import Dispatch

    with TcpProxy(pg_url()) as proxy:
        store = PostgresStore(proxy.url, schema=schema, max_backoff=0.3)
        other = PostgresStore(pg_url(), schema=schema)
        await store.open()
        await other.open()
        try:
            await store.ensure_jobs(["a", "m"])
            real = psycopg.AsyncCursor.execute
            armed = [True]

            async def commit_then_cut(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
                result = await real(self, query, *args, **kw)
                if query == b"COMMIT" and armed[0]:
                    armed[0] = False
                    proxy.cut()
                    raise psycopg.OperationalError("server closed the connection (test)")
                return result

            monkeypatch.setattr(psycopg.AsyncCursor, "execute", commit_then_cut)
            batch = [item("a", 1000.0, lease=True, record=False),
                     Dispatch.missed("m", 1000.0, reason="missed", logs=["missed"])]
            with pytest.raises(StoreUnavailable):
                await store.dispatch(batch, "one")
            monkeypatch.setattr(psycopg.AsyncCursor, "execute", real)
            proxy.restore()
            for _ in range(200):
                if store.available:
                    break
                await asyncio.sleep(0.05)
            assert store.available
            states = await other.read_states(["a"])
            assert states["a"].lease_holder is None
            got = await store.dispatch([item("a", 1000.0, lease=True, record=False)], "one")
            assert [r.won for r in got] == [True]  # the slot was free again
            [missed] = await other.list_runs("m")
            assert missed.status.value == "skipped"  # its claim and row stayed
            again = await store.dispatch(
                [Dispatch.missed("m", 1000.0, reason="missed", logs=["missed"])], "one")
            assert [r.won for r in again] == [False]
        finally:
            await store.close()
            await other.close()


async def test_a_stalled_database_is_unavailable_within_the_deadline(schema: str) -> None:
    """A server or pooler that keeps its connections open but stops answering is an
    outage after ``call_timeout``, not an endless wait; the store comes back after."""
    with TcpProxy(pg_url()) as proxy:
        store = PostgresStore(proxy.url, schema=schema, max_backoff=0.5, call_timeout=2.0)
        await store.open()
        try:
            await store.ensure_jobs(["a"])
            proxy.stall()
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailable, match="no answer within 2 s"):
                await store.dispatch([item("a", 1000.0, lease=True)], "one")
            # 2 s of waiting; the margin is for a loaded machine (its own lag is not counted)
            assert time.monotonic() - t0 < 10
            assert not store.available
            assert await store.confirm_outage()  # a fresh connection does not answer either
            proxy.restore()
            for _ in range(400):
                if store.available:
                    break
                await asyncio.sleep(0.05)
            assert store.available
            assert not await store.confirm_outage()
            # the stalled claim never committed: the slot is still free
            [res] = await store.dispatch([item("a", 1000.0, lease=True)], "one")
            assert res.won
        finally:
            await store.close()


async def test_open_cancelled_while_connecting_leaves_no_pool_task(schema: str) -> None:
    """A start-up waiting for the database is cancelled (SIGTERM) while a connection
    attempt is in flight: the pool is closed with it. psycopg_pool's workers swallow a
    cancellation during an attempt, so a pool left open kept ``asyncio.run`` from ever
    ending (``cronfleet run`` ignored SIGTERM while it waited)."""
    with TcpProxy(pg_url()) as proxy:
        proxy.stall()  # connections accepted, never answered: attempts stay in flight
        store = PostgresStore(proxy.url, schema=schema, connect_timeout=3.0)
        opening = asyncio.ensure_future(store.open())
        await asyncio.sleep(1.0)
        assert not opening.done()
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        mine = [t for t in asyncio.all_tasks() if t.get_name().startswith(f"cronfleet-{schema}")]
        # the attempt in flight ends within connect_timeout; then its worker stops
        _, pending = await asyncio.wait(mine, timeout=10) if mine else (set(), set())
        stuck = [t.get_name() for t in pending]
        for _ in range(200):  # a failure must not hang the test's loop too: cancel them
            if all(t.done() for t in pending):  # until one lands outside an attempt
                break
            for t in pending:
                t.cancel()
            await asyncio.sleep(0.05)
        assert not stuck, stuck


async def test_an_instance_frozen_inside_its_heartbeat_is_declared_lost_at_once(
    schema: str,
) -> None:
    """A process frozen (SIGSTOP) inside its heartbeat's transaction holds its own
    instance row. Declaring it lost updates that row: the survivor waited on the lock
    until the frozen session's idle timeout (the fault suite: ``idle_tx`` back after
    10.0 s, ``sigstop`` after 4.5 s, the length of the stop). The survivor now ends the
    stale instance's sessions before it takes the row."""
    from cronfleet.store.base import Instance
    from cronfleet.store.postgres.ops import session_name

    clock = FakeClock(1_800_000_000.0)
    survivor = PostgresStore(pg_url(), schema=schema, clock=clock)
    survivor.name_sessions("survivor-1")
    await survivor.open()
    raw: psycopg.AsyncConnection[Any] | None = None
    try:
        for who in ("frozen-1", "survivor-1"):
            await survivor.heartbeat(Instance(who, host="h", pid=1, role="all", version="1"),
                                     ttl=2)
        clock.advance(3)
        # the frozen process's heartbeat, begun and never committed
        raw = await psycopg.AsyncConnection.connect(
            pg_url(), application_name=session_name("frozen-1"))
        await raw.execute(sql.SQL("SELECT 1 FROM {}.instances WHERE instance_id = 'frozen-1' "
                                  "FOR UPDATE").format(sql.Identifier(schema)))
        await survivor.heartbeat(Instance("survivor-1", host="h", pid=2, role="all",
                                          version="1"), ttl=2)
        began = time.monotonic()
        # the raw session has no idle timeout: without its session ended, this waits until
        # the bound (the store's call deadline, 10 s), and fails
        lost = await asyncio.wait_for(survivor.break_lost("survivor-1", ttl=2), 20)
        assert [i.instance_id for i in lost.instances] == ["frozen-1"]
        assert time.monotonic() - began < 5
        with pytest.raises(psycopg.OperationalError):
            await raw.execute("SELECT 1")
    finally:
        if raw is not None:
            await raw.close()
        await survivor.close()


async def test_the_deadline_is_in_the_url_and_on_the_server(schema: str) -> None:
    store = PostgresStore(f"{pg_url()}?call_timeout=3", schema=schema)
    assert store.call_timeout == 3.0
    await store.open()
    try:
        async with store.pool.connection() as conn:
            row = await (await conn.execute("SHOW statement_timeout")).fetchone()
            idle = await (
                await conn.execute("SHOW idle_in_transaction_session_timeout")
            ).fetchone()
        assert row is not None and row[0] == "3s"
        # at least 5 s: a transaction left idle by a frozen process ends then, releasing
        # the rows the survivors need to take its jobs over
        assert idle is not None and idle[0] == "5s"
    finally:
        await store.close()
    store = PostgresStore(f"{pg_url()}?call_timeout=12", schema=schema)
    await store.open()
    try:
        async with store.pool.connection() as conn:
            idle = await (
                await conn.execute("SHOW idle_in_transaction_session_timeout")
            ).fetchone()
        assert idle is not None and idle[0] == "12s"
    finally:
        await store.close()
    assert PostgresStore(f"{pg_url()}?call_timeout=0", schema=schema).call_timeout is None


async def test_declaring_an_instance_lost_ends_its_sessions_and_their_locks(schema: str) -> None:
    """A process frozen inside a transaction (SIGSTOP, a VM pause) holds that
    transaction's claims and row locks; the survivor that declares it lost ends its
    sessions (they carry the instance in ``application_name``), so the takeover does not
    wait for the server's idle timeout (10 s by default)."""
    from cronfleet.store.base import Instance
    from cronfleet.store.postgres.ops import session_name

    clock = FakeClock(1_800_000_000.0)
    frozen = PostgresStore(pg_url(), schema=schema, clock=clock)
    frozen.name_sessions("frozen-1")
    survivor = PostgresStore(pg_url(), schema=schema, clock=clock)
    survivor.name_sessions("survivor-1")
    await frozen.open()
    await survivor.open()
    raw: psycopg.AsyncConnection[Any] | None = None
    try:
        async with frozen.transport.pool.connection() as conn:
            got = await (await conn.execute("SHOW application_name")).fetchone()
            assert got == (session_name("frozen-1"),)
        await frozen.ensure_jobs(["a"])
        for who, store in (("frozen-1", frozen), ("survivor-1", survivor)):
            await store.heartbeat(Instance(who, host="h", pid=1, role="all", version="1"), ttl=2)
        slot = clock.now() + 10
        # the frozen process's open transaction: the slot's claim, the job's row locked
        raw = await psycopg.AsyncConnection.connect(
            pg_url(), application_name=session_name("frozen-1"))
        await raw.execute(
            sql.SQL("INSERT INTO {}.claims (job_id, slot, instance_id, claimed_at) "
                    "VALUES ('a', to_timestamp(%s), 'frozen-1', now())").format(
                sql.Identifier(schema)), (slot,))
        await raw.execute(sql.SQL("SELECT 1 FROM {}.job_state WHERE job_id = 'a' FOR UPDATE")
                          .format(sql.Identifier(schema)))
        clock.advance(3)
        await survivor.heartbeat(Instance("survivor-1", host="h", pid=2, role="all",
                                          version="1"), ttl=2)
        # without the sessions ended, both calls wait on the frozen transaction's locks
        # for ever (the raw session has no idle timeout): the bound only ends the test
        lost = await asyncio.wait_for(survivor.break_lost("survivor-1", ttl=2), 20)
        assert [i.instance_id for i in lost.instances] == ["frozen-1"]
        [res] = await asyncio.wait_for(
            survivor.dispatch([item("a", slot, lease=True, hold=30)], "survivor-1"), 20)
        assert res.won and res.started
        with pytest.raises(psycopg.OperationalError):
            await raw.execute("SELECT 1")
    finally:
        if raw is not None:
            await raw.close()
        await frozen.close()
        await survivor.close()


async def test_retention_prunes_in_bounded_pieces_with_the_one_rule(pg: PostgresStore) -> None:
    """Retention walks the jobs a page at a time and deletes at most a batch of rows per
    transaction: a large ledger takes many short pieces, not one long transaction, and
    prunes exactly what the rule says (the old rows, then those beyond the cap)."""
    from cronfleet.store.base import Skip

    t0 = 1_780_000_000.0
    jobs = [f"j{i:02d}" for i in range(12)]
    await pg.ensure_jobs(jobs)
    for k in range(4):  # old: 4 missed runs (each with its claim) and 3 claim-less skips
        await pg.dispatch([Dispatch.missed(j, t0 + k, reason="missed") for j in jobs], "one")
    await pg.record_skips([Skip(j, t0 + 100 + k, "paused") for j in jobs for k in range(3)])
    await asyncio.sleep(0.05)
    cut = db_now()
    await asyncio.sleep(0.05)
    for k in range(8):  # recent: 8 missed runs, then a claim-less skip (the newest)
        await pg.dispatch([Dispatch.missed(j, t0 + 200 + k, reason="missed") for j in jobs],
                          "one")
    # the last job's newest claim-less skip is an old one: it stays, whatever its age
    await pg.record_skips([Skip(j, t0 + 300, "paused") for j in jobs[:-1]])
    t = pg.transport
    t.prune_batch, t.prune_blocks, t.prune_jobs = 3, 1, 5
    pieces: list[tuple[str, Any]] = []
    real = t._prune

    async def counted(name: str, *args: Any, tx: bool = True) -> Any:
        out = await real(name, *args, tx=tx)
        pieces.append((name, out))
        return out

    t._prune = counted  # type: ignore[method-assign]
    claims, runs = await pg.prune(claims_older_than=cut, runs_older_than=cut, runs_per_job=5)
    # every old claim goes (each job's newest slot is a recent one); per job the 7 old runs
    # go, then 4 of the 9 recent ones are beyond the cap of 5; the last job keeps its old
    # skip (6 old runs go) and 5 of its 8 recent runs
    assert (claims, runs) == (12 * 7, 11 * 11 + 9)
    for j in jobs[:-1]:
        left = await pg.list_runs(j, limit=100)
        assert [r.slot.timestamp() for r in left] == [t0 + 300] + [t0 + 200 + k
                                                                   for k in (7, 6, 5, 4)]
    left = await pg.list_runs(jobs[-1], limit=100)
    assert [r.slot.timestamp() for r in left] == [t0 + 200 + k for k in (7, 6, 5, 4, 3)] + [
        t0 + 102]

    def out(name: str) -> list[Any]:
        return [o for n, o in pieces if n == name]

    # claims: one piece per table block (12 * 16 claims take more than one)
    [blocks] = out("prune_claim_blocks")
    assert blocks >= 2 and len(out("prune_claims_in")) == blocks
    # old runs: a walk of the ids, 3 at a time (12 * 16 - 1 runs, 83 of them old, one kept)
    assert len(out("prune_old_runs_in")) >= (12 * 16 - 1) // 3
    assert max(out("prune_old_runs_in")) == 3 and sum(out("prune_old_runs_in")) == 12 * 7 - 1
    # the cap: three pages of at most five jobs each, at most 3 rows per delete
    assert [len(p) for p in out("prune_run_jobs")] == [5, 5, 2, 0]
    assert max(out("prune_runs_beyond")) == 3 and sum(out("prune_runs_beyond")) == 11 * 4 + 3
    # a second pass finds nothing more to delete
    t._prune = real  # type: ignore[method-assign]
    assert await pg.prune(claims_older_than=cut, runs_older_than=cut, runs_per_job=5) == (0, 0)


async def test_a_server_older_than_the_floor_is_refused_at_open(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention needs PostgreSQL 14 (TID range scans): an older server is named at open,
    before any migration touches the schema."""
    from cronfleet.store.postgres import store as pg_store

    monkeypatch.setattr(pg_store, "MIN_SERVER", 990000)
    s = PostgresStore(pg_url(), schema=schema)
    with pytest.raises(StoreError, match=r"PostgreSQL 1\d at .*: 99 or newer needed"):
        await s.open()
    with psycopg.connect(pg_url()) as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s",
                           (schema,)).fetchone()
    assert row == (0,)
