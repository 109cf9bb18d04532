"""A database made by the previous release (commit c879552: schema v1, side tables created
by their own connections) upgrades in place: every row survives, the side tables are now
migration v2, and the new code reads and writes them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from cronfleet.model import RunStatus
from cronfleet.store import open_store
from cronfleet.store.factory import open_api_store, open_health_store, open_secret_store
from cronfleet.store.queries import migrations

from .pg import drop_schema, new_schema, pg_url, require_pg

FIXTURES = Path(__file__).parent / "fixtures"
T0 = 1_780_000_000.0
AT = datetime.fromtimestamp(T0, UTC)


def _known(dialect: str) -> list[int]:
    return [v for v, _, _ in migrations(f"cronfleet.store.{dialect}")]


@pytest.fixture(params=["sqlite", "postgres"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database as the previous release left it."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        conn = sqlite3.connect(path)
        conn.executescript((FIXTURES / "c879552_sqlite.sql").read_text())
        conn.close()
        yield f"sqlite:///{path}"
        return
    require_pg()
    schema = new_schema("upgrade")
    dump = (FIXTURES / "c879552_postgres.sql").read_text()
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        quoted = sql.Identifier(schema).as_string(conn)  # psycopg < 3.2 needs the conn
        conn.execute(dump.replace("__SCHEMA__", quoted).encode())
    yield f"{pg_url()}?schema={schema}"
    drop_schema(schema)


def _versions(url: str) -> list[int]:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        finally:
            conn.close()
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base) as conn:
        rows = conn.execute(
            sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY 1").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return [r[0] for r in rows]


async def test_store_open_upgrades_in_place_and_keeps_every_row(old_url: str) -> None:
    dialect = "sqlite" if old_url.startswith("sqlite") else "postgres"
    assert _versions(old_url) == [1]
    store = open_store(old_url)
    await store.open()
    try:
        assert _versions(old_url) == _known(dialect)
        runs = await store.list_runs("old-job")
        assert [r.status for r in runs] == [RunStatus.SKIPPED, RunStatus.SUCCEEDED]
        assert runs[1].instance_id == "old-host" and runs[1].fencing_token is not None
        state = (await store.read_states(["old-job"]))["old-job"]
        assert state.enabled_override is False and state.override_note == "kept"
        assert state.last_slot == AT  # the watermark rule reads the old rows
        assert (await store.last_runs(["old-job"]))["old-job"].reason == "paused"
    finally:
        await store.close()

    secrets = open_secret_store(old_url)
    row = await secrets.get_secret("default", "API_KEY")
    assert row is not None and row.ciphertext == b"cipher" and row.created_at == AT
    await secrets.close()

    api = open_api_store(old_url)
    try:
        tokens = await api.list_tokens()
        assert [(t.id, t.role) for t in tokens] == [("t1", "admin")]
        [entry] = await api.audit_entries("default")
        assert entry.target == "stored-job"
        [job] = await api.job_defs()
        assert job.id == "stored-job" and job.spec["schedule"] == "5m"
        assert await api.catalog_version() == 1
        # and the new code writes the upgraded tables
        await api.audit(team="default", actor="new", action="update", target="stored-job")
        assert len(await api.audit_entries("default")) == 2
    finally:
        await api.close()

    health = open_health_store(old_url)
    before, after = await health.record("old-job", False, 2.0, AT)
    assert before.consecutive_failures == 1 and after.consecutive_failures == 2
    await health.close()


async def test_a_side_connection_alone_upgrades_the_old_database(old_url: str) -> None:
    """``cronfleet secrets`` may be the first to touch the database after an upgrade."""
    dialect = "sqlite" if old_url.startswith("sqlite") else "postgres"
    secrets = open_secret_store(old_url)
    try:
        assert [r.name for r in await secrets.list_secrets(None)] == ["API_KEY"]
    finally:
        await secrets.close()
    assert _versions(old_url) == _known(dialect)
    store = open_store(old_url)
    await store.open()  # nothing left to apply
    await store.close()
    assert _versions(old_url) == _known(dialect)


async def test_a_fresh_side_connection_creates_the_whole_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    health = open_health_store(url)
    _, after = await health.record("a", True, 0.5, AT)
    assert after.successes == 1 and (await health.get("a")).successes == 1
    await health.close()
    assert _versions(url) == _known("sqlite")


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
async def test_a_lower_migration_landing_after_a_higher_one_is_applied(
        dialect: str, tmp_path: Path) -> None:
    # numbers are handed out ahead: a database may have 5 applied before 2 arrives
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / 'gap.db'}"
    else:
        require_pg()
        url = f"{pg_url()}?schema={new_schema('gap')}"
    try:
        store = open_store(url)
        await store.open()
        await store.close()
        missing = _known(dialect)[1]  # 0002 (its statements are IF NOT EXISTS)
        forget = f"DELETE FROM schema_migrations WHERE version = {missing}"
        if dialect == "sqlite":
            conn = sqlite3.connect(url.removeprefix("sqlite:///"))
            with conn:
                conn.execute(forget)
            conn.close()
        else:
            base, _, schema = url.partition("?schema=")
            with psycopg.connect(base, autocommit=True) as pg:
                pg.execute(sql.SQL(forget.replace("schema_migrations", "{}.schema_migrations"))
                           .format(sql.Identifier(schema)))
        assert missing not in _versions(url) and max(_versions(url)) > missing
        store = open_store(url)
        await store.open()
        await store.close()
        assert sorted(_versions(url)) == _known(dialect)
    finally:
        if dialect == "postgres":
            drop_schema(url.partition("?schema=")[2])


async def test_one_jobs_runs_are_read_by_job_and_slot_after_the_upgrade(old_url: str) -> None:
    """Migration 10 indexes runs by (job_id, slot, id) in a database made before it: the
    runs page of one job (``find_runs`` with a job filter, newest first by slot) reads that
    index instead of walking every job's slots."""
    from cronfleet.store.base import RunFilter
    from cronfleet.store.queries import find_runs_query, read_queries

    store = open_store(old_url)
    await store.open()
    try:
        page = await store.find_runs(RunFilter(job_id="old-job"), limit=1)
        assert [r.status for r in page.runs] == [RunStatus.SKIPPED]
    finally:
        await store.close()
    if old_url.startswith("sqlite:///"):
        conn = sqlite3.connect(old_url.removeprefix("sqlite:///"))
        try:
            # with a status too (a job's failed runs): not a walk of runs_status_slot
            for where in (RunFilter(job_id="old-job"),
                          RunFilter(job_id="old-job", status=RunStatus.FAILED)):
                query, args = find_runs_query(
                    read_queries("cronfleet.store.sqlite")["runs"].rstrip(), where,
                    after=None, limit=50, placeholder="?",
                    time=lambda d: round(d.timestamp() * 1000), any_job=("", str))
                plan = " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {query}",
                                                            args))
                assert "runs_job_slot" in plan and "TEMP B-TREE" not in plan, plan
        finally:
            conn.close()
        return
    base, _, schema = old_url.partition("?schema=")
    with psycopg.connect(base) as conn:
        found = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s "
                             "AND indexname = 'runs_job_slot'", (schema,)).fetchall()
    assert found and "(job_id, slot, id)" in found[0][0]


async def test_the_catalog_feed_reads_an_older_database_through_its_index(
        old_url: str) -> None:
    """Migration 13 indexes job definitions by (version, id) in a database made before
    it: the change feed (keyset pages) finds the old definition, through that index."""
    api = open_api_store(old_url)
    try:
        [d] = await api.job_defs_changed((0, ""), 10)
        assert (d.id, d.version) == ("stored-job", 1)
        assert await api.job_defs_changed((1, "stored-job"), 10) == []
    finally:
        await api.close()
    from cronfleet.store.queries import read_queries

    if old_url.startswith("sqlite:///"):
        conn = sqlite3.connect(old_url.removeprefix("sqlite:///"))
        try:
            query = read_queries("cronfleet.store.sqlite.side")["defs_changed"]
            plan = " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {query}",
                                                        (0, "", 10)))
            assert "job_defs_change" in plan and "TEMP B-TREE" not in plan, plan
            names = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE tbl_name = 'job_defs'")}
        finally:
            conn.close()
    else:
        base, _, schema = old_url.partition("?schema=")
        with psycopg.connect(base) as conn:
            names = {r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s "
                "AND tablename = 'job_defs'", (schema,)).fetchall()}
    assert "job_defs_change" in names and "job_defs_version" not in names
