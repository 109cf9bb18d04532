"""The named queries: one loader, the column lists in the SQL files agree with rows.py."""

from __future__ import annotations

import re

import pytest

from cronfleet.store.queries import load_queries, migrations, read_queries
from cronfleet.store.rows import RUN_COLUMNS, RUN_INSERT_COLUMNS

PACKAGES = ["cronfleet.store.sqlite", "cronfleet.store.postgres"]
RUN_READS = ["runs", "runs_by_id", "get_run", "last_runs", "reap"]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("package", PACKAGES)
def test_queries_load_without_comments(package: str) -> None:
    queries = read_queries(package)
    assert len(queries) > 25
    for name, text in queries.items():
        assert "--" not in text, name  # comments are dropped (a % in one would reach psycopg)
        assert not text.rstrip().endswith(";"), name


@pytest.mark.parametrize("package", PACKAGES)
def test_run_columns_in_the_sql_are_those_of_rows_py(package: str) -> None:
    queries = read_queries(package)
    for name in RUN_READS:
        assert _flat(RUN_COLUMNS) in _flat(queries[name]), name
    for name in [n for n in queries if "insert_run" in n or n == "upsert_runs"]:
        assert f"({_flat(RUN_INSERT_COLUMNS)})" in _flat(queries[name]), name


def test_the_schema_is_put_in_once() -> None:
    queries = load_queries("cronfleet.store.postgres", '"my schema"')
    assert all("__S__" not in q for q in queries.values())
    assert '"my schema".claims' in queries["claim"]
    assert "__S__.claims" in read_queries("cronfleet.store.postgres")["claim"]


@pytest.mark.parametrize("package", PACKAGES)
def test_migrations_are_numbered_from_one(package: str) -> None:
    # numbers are handed out to changes ahead of time: unique and increasing, gaps allowed
    found = migrations(package)
    versions = [v for v, _, _ in found]
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert found[1][1] == "0002_side_tables.sql"
