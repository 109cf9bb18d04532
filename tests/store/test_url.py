"""The one store URL parser (store/url.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronfleet.errors import StoreError
from cronfleet.store.url import parse_store_url, redact_url, resolve_sqlite_url


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///cronfleet.db", "cronfleet.db"),
        ("sqlite:////var/lib/cf.db", "/var/lib/cf.db"),
        ("sqlite:///:memory:", ":memory:"),
    ],
)
def test_sqlite_urls(url: str, path: str) -> None:
    parsed = parse_store_url(url)
    assert (parsed.dialect, parsed.path) == ("sqlite", path)
    assert parsed.in_memory is (path == ":memory:")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://cf.db", "invalid SQLite URL"),
        ("sqlite:///", "no file path"),
        ("sqlite:///cf.db?mode=ro", "query options are not supported"),
        ("mysql://db/x", "unknown store URL"),
        ("cronfleet.db", "unknown store URL"),
        ("postgresql:/db", "invalid PostgreSQL URL"),
    ],
)
def test_bad_urls_are_named(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        parse_store_url(url)


def test_postgres_options_are_ours_and_the_rest_goes_to_libpq() -> None:
    parsed = parse_store_url(
        "postgres://u:pw@db:5433/app?schema=jobs&sslmode=require&pool_max=4&time_source=clock"
    )
    assert parsed.dialect == "postgres"
    assert parsed.schema == "jobs"
    assert parsed.options == {"schema": "jobs", "pool_max": "4", "time_source": "clock"}
    assert parsed.conninfo == "postgres://u:pw@db:5433/app?sslmode=require"
    assert parse_store_url("postgresql://db/app").schema == "cronfleet"


def test_relative_sqlite_paths_follow_the_config_file(tmp_path: Path) -> None:
    assert resolve_sqlite_url("sqlite:///cf.db", tmp_path) == f"sqlite:///{tmp_path}/cf.db"
    for url in ("sqlite:////abs/cf.db", "sqlite:///:memory:", "postgresql://db/x"):
        assert resolve_sqlite_url(url, tmp_path) == url


def test_no_file_yet(tmp_path: Path) -> None:
    assert parse_store_url(f"sqlite:///{tmp_path / 'none.db'}").no_file_yet
    (tmp_path / "there.db").touch()
    assert not parse_store_url(f"sqlite:///{tmp_path / 'there.db'}").no_file_yet
    assert not parse_store_url("postgresql://db/x").no_file_yet


def test_redact() -> None:
    assert redact_url("postgresql://u:secret@db:5433/app") == "postgresql://u:***@db:5433/app"
    assert redact_url("postgresql://u@db/app") == "postgresql://u@db/app"
