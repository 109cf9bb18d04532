"""The PostgreSQL secret store (CRONFLEET_TEST_PG; skipped when unreachable, failed with
CI=true)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from cronfleet.secrets import KEY_ENV, PREVIOUS_KEYS_ENV, Keyring, Vault, generate_key
from cronfleet.store.factory import open_secret_store
from store.pg import pg_url, require_pg

URL = pg_url()


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    require_pg()  # skipped on a laptop without PostgreSQL, failed with CI=true
    name = f"cf_secrets_{uuid.uuid4().hex[:10]}"
    yield name
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(name)))


async def test_postgres_vault_round_trip_and_rotation(schema: str) -> None:
    sep = "&" if "?" in URL else "?"
    store = open_secret_store(f"{URL}{sep}schema={schema}")
    assert repr(store) == f"SqlSecretStore(PostgresSide(schema={schema!r}))"
    old, new = generate_key(), generate_key()
    vault = Vault(store, Keyring.from_env({KEY_ENV: old}))
    assert await vault.set("TOKEN", "pg-secret-value") is True
    assert await vault.set("TOKEN", "pg-secret-value-2") is False
    await vault.set("X", "x", namespace="team")
    assert await vault.get("TOKEN") == "pg-secret-value-2"
    assert [(i.namespace, i.name) for i in await vault.entries(None)] == [
        ("default", "TOKEN"), ("team", "X")]
    rotated = Vault(store, Keyring.from_env({KEY_ENV: new, PREVIOUS_KEYS_ENV: old}))
    assert await rotated.rotate() == 2
    assert await Vault(store, Keyring.from_env({KEY_ENV: new})).get("X", "team") == "x"
    assert await vault.delete("X", "team") is True
    await store.close()
    async with await psycopg.AsyncConnection.connect(URL) as conn:
        cur = await conn.execute(sql.SQL("SELECT * FROM {}.secrets").format(
            sql.Identifier(schema)))
        rows = await cur.fetchall()
    assert len(rows) == 1 and "pg-secret-value" not in repr(rows)
