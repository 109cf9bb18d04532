"""The operator commands of #14 on PostgreSQL ($CRONFLEET_STORE replaces the file's
store): runs across jobs, running now, trigger parameters and force."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import Result
from psycopg import sql

from store.pg import drop_schema, new_schema, pg_url, require_pg


@pytest.fixture
def pg_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    require_pg()
    schema = new_schema("cli")
    url = f"{pg_url()}?schema={schema}"
    monkeypatch.setenv("CRONFLEET_STORE", url)
    yield url
    drop_schema(schema)


def test_history_runs_params_and_force_on_postgres(cli: Callable[..., Result], project: Path,
                                                   pg_store: str) -> None:
    assert cli("trigger", "tick", "--param", "region=eu").exit_code == 0
    assert cli("trigger", "boom").exit_code == 1
    assert cli("trigger", "tick").exit_code == 0
    runs = json.loads(cli("history", "--json").stdout)
    assert [x["job_id"] for x in runs] == ["tick", "boom", "tick"]
    assert runs[2]["params"] == {"region": "eu"} and runs[0]["params"] is None
    failed = json.loads(cli("history", "--status", "failed", "--since", "1d", "--json").stdout)
    assert [x["job_id"] for x in failed] == ["boom"]
    assert json.loads(cli("history", "--since", "2099-01-01", "--json").stdout) == []
    assert json.loads(cli("runs", "--running", "--json").stdout) == []
    assert cli("pause", "tick", "--by", "ops").exit_code == 0
    r = cli("trigger", "tick")
    assert r.exit_code == 3 and "is paused (by ops)" in r.stderr
    r = cli("trigger", "tick", "--force", "--by", "alice", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["forced_by"] == "alice"
    assert len(json.loads(cli("history", "tick", "--json").stdout)) == 3
    base, _, schema = pg_store.partition("?schema=")
    with psycopg.connect(base) as conn:  # the runs are in PostgreSQL, not in ops.db
        [(n,)] = conn.execute(sql.SQL("SELECT count(*) FROM {}.runs").format(
            sql.Identifier(schema))).fetchall()
    assert n == 4 and not (project.parent / "ops.db").exists()
