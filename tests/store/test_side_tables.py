"""The side tables' contract (secrets, job health, API tokens, audit log, catalog, reserved
ids) on every store: memory, SQLite, PostgreSQL, Redis, each on the store's own
connection (``side_tables(store)``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronfleet.clock import FakeClock
from cronfleet.store import Store, factory
from cronfleet.store.factory import (
    SideTables,
    open_health_store,
    open_secret_store,
    side_tables,
)

from .conftest import T0

NOW = datetime.fromtimestamp(T0, UTC)


@pytest.fixture
def side(store: Store, clock: FakeClock) -> SideTables:
    return side_tables(store, clock=clock)


@pytest.fixture
def side2(other: Store, clock: FakeClock) -> SideTables:
    """The side tables as another process sees them (another store object)."""
    return side_tables(other, clock=clock)


# -- secrets ---------------------------------------------------------------------------------


async def test_secrets_round_trip(side: SideTables, side2: SideTables) -> None:
    s = side.secrets
    assert await s.get_secret("default", "A") is None
    assert await s.put_secret("default", "A", "k1", b"n1", b"c1", NOW) is True
    later = NOW + timedelta(seconds=5)
    assert await s.put_secret("default", "A", "k2", b"n2", b"c2", later,
                              hosts=("api.example.com",)) is False
    await s.put_secret("team", "B", "k1", b"n3", b"\x00\xff", NOW)
    await s.put_secret("default", "0", "k1", b"n4", b"c4", NOW)
    row = await side2.secrets.get_secret("default", "A")
    assert row is not None
    assert (row.key_id, row.nonce, row.ciphertext, row.hosts) == (
        "k2", b"n2", b"c2", ("api.example.com",))
    assert (row.created_at, row.updated_at) == (NOW, later)  # created_at kept on replace
    every = await side2.secrets.list_secrets(None)
    assert [(r.namespace, r.name) for r in every] == [
        ("default", "0"), ("default", "A"), ("team", "B")]
    assert [r.name for r in await s.list_secrets("team")] == ["B"]
    assert (await s.list_secrets("team"))[0].ciphertext == b"\x00\xff"
    assert await s.delete_secret("default", "A") is True
    assert await s.delete_secret("default", "A") is False
    assert await side2.secrets.get_secret("default", "A") is None


# -- job health ------------------------------------------------------------------------------


async def test_health_transitions(side: SideTables, side2: SideTables) -> None:
    h = side.health
    assert (await h.get("j")).consecutive_failures == 0
    before, after = await h.record("j", False, 1.5, NOW)
    assert (before.last_outcome, after.last_outcome, after.consecutive_failures) == (
        None, "failed", 1)
    before, after = await side2.health.record("j", False, None, NOW)
    assert (before.consecutive_failures, after.consecutive_failures) == (1, 2)
    before, after = await h.record("j", True, 0.25, NOW + timedelta(seconds=1))
    assert (before.consecutive_failures, after.consecutive_failures) == (2, 0)
    got = await side2.health.get("j")
    assert (got.successes, got.failures, got.last_outcome, got.last_duration) == (
        1, 2, "succeeded", 0.25)
    assert got.last_run_at == NOW + timedelta(seconds=1)


async def test_health_each_transition_seen_once(side: SideTables, side2: SideTables,
                                                store_kind: str) -> None:
    """Processes recording failures of one job at once: each sees its own step."""
    n = 10
    results = await asyncio.gather(*(
        (side if i % 2 else side2).health.record("j", False, None, NOW) for i in range(n)))
    assert sorted(b.consecutive_failures for b, _ in results) == list(range(n))
    assert (await side.health.get("j")).failures == n


# -- API tokens and the audit log ------------------------------------------------------------


async def test_tokens(side: SideTables, side2: SideTables) -> None:
    api = side.api
    plain, info = await api.create_token(name="ci", team="a", role="editor", created_by="me")
    assert plain.startswith(f"cf_{info.id}_")
    assert info.created_at == NOW and info.can("viewer") and not info.can("admin")
    with pytest.raises(ValueError, match="role"):
        await api.create_token(name="x", team="a", role="root")
    got = await side2.api.authenticate(plain)
    assert got is not None and (got.id, got.team, got.role) == (info.id, "a", "editor")
    assert await api.authenticate(plain + "x") is None
    listed = await api.list_tokens()
    assert [t.id for t in listed] == [info.id] and listed[0].last_used_at == NOW
    _, other = await api.create_token(name="ci", team="b", role="viewer")
    assert [t.id for t in await api.list_tokens("b")] == [other.id]
    revoked = await side2.api.revoke_token("ci")  # by name: every live token with it
    assert sorted(t.id for t in revoked) == sorted([info.id, other.id])
    assert all(t.revoked_at == NOW for t in revoked)
    assert await api.authenticate(plain) is None
    assert await api.revoke_token(info.id) == []


async def test_audit_pages(side: SideTables, side2: SideTables) -> None:
    for i in range(5):
        await side.api.audit(team="a", actor="me", action="job.update", target=f"j{i}",
                             details={"n": i, "when": NOW})
    await side.api.audit(team="b", actor="you", action="x", target="y")
    page = await side2.api.audit_entries("a", limit=3)
    assert [e.target for e in page] == ["j4", "j3", "j2"]
    assert page[0].details == {"n": 4, "when": str(NOW)} and page[0].at == NOW
    rest = await side2.api.audit_entries("a", limit=3, before_id=page[-1].id)
    assert [e.target for e in rest] == ["j1", "j0"]
    assert [e.actor for e in await side.api.audit_entries("b")] == ["you"]


# -- the catalog and reserved ids ------------------------------------------------------------


async def test_catalog(side: SideTables, side2: SideTables, clock: FakeClock) -> None:
    api, api2 = side.api, side2.api
    assert await api.catalog_version() == 0
    made = await api.create_job_def("j", "a", {"cron": "* * * * *"}, "me", role="editor")
    assert made is not None and made.version == 1 and made.saved_role == "editor"
    assert await api2.create_job_def("j", "a", {"cron": "0 * * * *"}, "you") is None  # live
    clock.advance(1)
    new = await api2.update_job_def("j", "a", {"cron": "5 * * * *"}, "you", expect_version=1)
    assert new is not None and new.version == 2 and new.spec == {"cron": "5 * * * *"}
    assert (new.created_by, new.updated_by, new.created_at) == ("me", "you", made.created_at)
    assert new.updated_at == NOW + timedelta(seconds=1)
    assert await api.update_job_def("j", "a", {}, "me", expect_version=1) is None  # stale
    assert await api.update_job_def("j", "b", {}, "me") is None  # another team's
    assert await api.delete_job_def("j", "b", "me") is False
    assert await api.delete_job_def("j", "a", "me") is True
    assert await api.delete_job_def("j", "a", "me") is False
    assert await api2.catalog_version() == 3
    assert await api.job_defs() == []
    tomb = await api2.job_def("j")
    assert tomb is not None and tomb.deleted_at is not None and tomb.team == "a"
    assert [d.id for d in await api.job_defs(include_deleted=True)] == ["j"]
    assert await api.create_job_def("j", "b", {}, "x") is None  # another team's tombstone
    revived = await api.create_job_def("j", "a", {"cron": "1 * * * *"}, "me")
    assert revived is not None and revived.deleted_at is None and revived.version == 4
    await api.create_job_def("i", "a", {}, "me")
    assert [d.id for d in await api2.job_defs()] == ["i", "j"]


async def test_reserved_ids(side: SideTables, side2: SideTables) -> None:
    api = side.api
    await api.reserve_ids([])
    await api.reserve_ids([("cfg", "a", "config"), ("code", "b", "code")])
    assert await side2.api.reserved_ids("a") == ["cfg"]
    assert await side2.api.reserved_team("code") == "b"
    assert await api.reserved_team("nope") is None
    assert await api.create_job_def("cfg", "b", {}, "x") is None  # reserved to team a
    assert await api.create_job_def("cfg", "a", {}, "x") is not None
    await side2.api.reserve_ids([("cfg", "b", "config")])  # moved in its config
    assert await api.reserved_ids("a") == [] and await api.reserved_ids("b") == ["cfg", "code"]
    many = [(f"j{i:04d}", "c", "config") for i in range(1200)]  # more than one batch
    await api.reserve_ids(many)
    assert len(await side2.api.reserved_ids("c")) == 1200


async def test_create_job_defs_all_or_nothing(side: SideTables, side2: SideTables,
                                              clock: FakeClock) -> None:
    api, api2 = side.api, side2.api
    await api.create_job_def("live", "a", {"cron": "0 * * * *"}, "me")
    await api.create_job_def("gone", "b", {}, "me")
    await api.delete_job_def("gone", "b", "me")  # another team's tombstone keeps the id
    await api.reserve_ids([("cfg", "b", "config")])
    version = await api.catalog_version()
    good = [(f"n{i}", {"cron": f"{i} * * * *"}) for i in range(3)]
    # every taken id is named, and none of the good ones is written
    assert await api.create_job_defs([*good, ("live", {}), ("gone", {}), ("cfg", {})],
                                     "a", "me") == ([], ["live", "gone", "cfg"])
    assert await api.create_job_defs([*good, ("n1", {})], "a", "me") == ([], ["n1"])
    assert await api2.catalog_version() == version
    assert [d.id for d in await api2.job_defs()] == ["live"]
    # a dry run decides the same and writes nothing
    would, taken = await api.create_job_defs(good, "a", "me", "editor", dry_run=True)
    assert taken == [] and [d.id for d in would] == ["n0", "n1", "n2"]
    assert await api2.catalog_version() == version and len(await api2.job_defs()) == 1
    clock.advance(1)
    made, taken = await api.create_job_defs(good, "a", "me", "editor")
    assert taken == []
    assert [(d.id, d.version, d.team, d.saved_role, d.spec) for d in made] == [
        (f"n{i}", version + 1 + i, "a", "editor", {"cron": f"{i} * * * *"}) for i in range(3)]
    assert made[0].created_at == NOW + timedelta(seconds=1)
    assert await api2.catalog_version() == version + 3
    assert [await api2.job_def(f"n{i}") for i in range(3)] == made
    assert await api.create_job_defs([], "a", "me") == ([], [])
    # its own tombstone is revived in a batch, as one at a time
    await api.delete_job_def("n0", "a", "me")
    again, taken = await api2.create_job_defs([("n0", {"cron": "9 * * * *"})], "a", "me")
    assert taken == [] and again[0].deleted_at is None and again[0].spec == {
        "cron": "9 * * * *"}


async def test_concurrent_catalog_writes_take_turns(side: SideTables,
                                                    side2: SideTables) -> None:
    made = await asyncio.gather(*(
        (side if i % 2 else side2).api.create_job_def(f"j{i}", "a", {}, "me")
        for i in range(8)))
    assert sorted(d.version for d in made if d is not None) == list(range(1, 9))
    assert await side.api.catalog_version() == 8


# -- sharing the store --------------------------------------------------------------------


async def test_side_tables_leave_a_shared_store_open(store: Store, clock: FakeClock) -> None:
    tables = side_tables(store, clock=clock)
    await tables.api.catalog_version()
    await tables.secrets.close()
    await tables.health.close()
    await tables.api.close()
    assert await store.read_overrides([]) == {}  # still open: its owner closes it
    assert await side_tables(store).api.catalog_version() == 0


async def test_tables_from_one_url_share_one_store(tmp_path: Path) -> None:
    """A process's side tables opened from one URL hold one store between them: opened by
    the first to be used, closed when the last closes."""
    url = f"sqlite:///{tmp_path / 'side.db'}"
    secrets, health = open_secret_store(url), open_health_store(url)
    await secrets.put_secret("default", "A", "k", b"n", b"c", NOW)
    await health.record("j", True, None, NOW)
    held = factory._OPENED[asyncio.get_running_loop()][url]
    assert held.users == 2
    await secrets.close()
    assert (await health.get("j")).successes == 1  # still open for the other
    await health.close()
    assert url not in factory._OPENED[asyncio.get_running_loop()]
    assert held.store.damaged is False and not held.store.transport.is_open  # closed
    again = open_secret_store(url)  # opened again on use
    assert (await again.get_secret("default", "A")) is not None
    await again.close()
