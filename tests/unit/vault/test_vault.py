"""The vault: AES-256-GCM under a server key, key ids, rotation, locked starts."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import pytest

from cronfleet.secrets import (
    KEY_ENV,
    KEY_FILE_ENV,
    PREVIOUS_KEYS_ENV,
    Keyring,
    Redactor,
    SecretError,
    SecretKey,
    UnknownSecret,
    Vault,
    VaultLocked,
    expand,
    generate_key,
    references,
)
from cronfleet.store.factory import open_secret_store
from cronfleet.store.memory_side import MemorySecretStore
from cronfleet.store.sql_side import SqlSecretStore

PLAIN = "hunter2-Very-Secret-\u00e9"


def keyring(*keys: str) -> Keyring:
    return Keyring.from_env({KEY_ENV: keys[0], PREVIOUS_KEYS_ENV: ",".join(keys[1:])})


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    s = MemorySecretStore() if request.param == "memory" else open_secret_store(
        f"sqlite:///{tmp_path / 'cf.db'}")
    yield s
    await s.close()


async def test_set_get_list_delete(store) -> None:  # type: ignore[no-untyped-def]
    vault = Vault(store, keyring(generate_key()))
    assert await vault.set("API_TOKEN", PLAIN) is True
    assert await vault.set("API_TOKEN", PLAIN + "2") is False  # replaced
    await vault.set("OTHER", "x", namespace="team-a")
    assert await vault.get("API_TOKEN") == PLAIN + "2"
    infos = await vault.entries()
    assert [i.name for i in infos] == ["API_TOKEN"]
    assert infos[0].updated_at >= infos[0].created_at
    assert PLAIN not in repr(infos) and PLAIN not in str(infos[0].to_dict())
    assert [(i.namespace, i.name) for i in await vault.entries(None)] == [
        ("default", "API_TOKEN"), ("team-a", "OTHER")]
    with pytest.raises(UnknownSecret, match="'OTHER' in namespace 'default'"):
        await vault.get("OTHER")
    assert await vault.delete("API_TOKEN") is True
    assert await vault.delete("API_TOKEN") is False
    with pytest.raises(UnknownSecret):
        await vault.get("API_TOKEN")


async def test_ciphertext_only_on_disk_with_fresh_nonces(tmp_path: Path) -> None:
    path = tmp_path / "cf.db"
    store = open_secret_store(f"sqlite:///{path}")
    key = generate_key()
    vault = Vault(store, keyring(key))
    await vault.set("A", PLAIN)
    await vault.set("B", PLAIN)
    await store.close()
    raw = path.read_bytes()
    assert PLAIN.encode() not in raw
    rows = sqlite3.connect(path).execute(
        "SELECT name, key_id, nonce, ciphertext FROM secrets").fetchall()
    assert len(rows) == 2 and rows[0][2] != rows[1][2] and rows[0][3] != rows[1][3]
    assert {r[1] for r in rows} == {SecretKey.from_base64(key, "k").id}
    for row in rows:
        assert PLAIN.encode() not in b"".join(
            v if isinstance(v, bytes) else str(v).encode() for v in row)


async def test_rows_cannot_be_swapped_or_tampered() -> None:
    store = MemorySecretStore()
    vault = Vault(store, keyring(generate_key()))
    await vault.set("A", "alpha")
    await vault.set("B", "beta")
    a, b = store.rows[("default", "A")], store.rows[("default", "B")]
    store.rows[("default", "A")] = b.__class__(a.namespace, a.name, b.key_id, b.nonce,
                                               b.ciphertext, a.created_at, a.updated_at)
    with pytest.raises(SecretError, match="does not decrypt"):
        await vault.get("A")


async def test_no_key_is_a_clear_error_not_a_crash() -> None:
    store = MemorySecretStore()
    await Vault(store, keyring(generate_key())).set("A", PLAIN)
    locked = Vault(store, Keyring(None))
    with pytest.raises(VaultLocked, match=f"1 encrypted secret.*{KEY_ENV}"):
        await locked.check()
    with pytest.raises(VaultLocked, match=KEY_ENV):
        await locked.get("A")
    with pytest.raises(VaultLocked, match=KEY_ENV):
        await locked.set("B", "x")
    wrong = Vault(store, keyring(generate_key()))
    with pytest.raises(VaultLocked, match=PREVIOUS_KEYS_ENV):
        await wrong.check()
    await Vault(MemorySecretStore(), Keyring(None)).check()  # nothing stored: fine


async def test_rotation_reencrypts_everything() -> None:
    store = MemorySecretStore()
    old, new = generate_key(), generate_key()
    v1 = Vault(store, keyring(old))
    await v1.set("A", "alpha")
    await v1.set("B", "beta", namespace="team")
    v2 = Vault(store, keyring(new, old))
    assert await v2.get("A") == "alpha"  # previous keys still decrypt
    assert await v2.rotate() == 2
    assert await v2.rotate() == 0
    new_id = SecretKey.from_base64(new, "k").id
    assert {r.key_id for r in store.rows.values()} == {new_id}
    v3 = Vault(store, keyring(new))  # the old key is no longer needed
    assert await v3.get("B", namespace="team") == "beta"
    with pytest.raises(VaultLocked):  # only the retired key: nothing decrypts any more
        await Vault(store, keyring(old)).check()


def test_keys_from_env_and_file(tmp_path: Path) -> None:
    key = generate_key()
    file = tmp_path / "key"
    file.write_text(key + "\n")
    a = Keyring.from_env({KEY_ENV: key})
    b = Keyring.from_env({KEY_FILE_ENV: str(file)})
    assert a.current is not None and b.current is not None and a.current.id == b.current.id
    assert Keyring.from_env({}).current is None
    with pytest.raises(SecretError, match="32 bytes"):
        Keyring.from_env({KEY_ENV: base64.b64encode(os.urandom(16)).decode()})
    with pytest.raises(SecretError, match="not base64"):
        Keyring.from_env({KEY_ENV: "not base64!"})
    with pytest.raises(SecretError, match="cannot read"):
        Keyring.from_env({KEY_FILE_ENV: str(tmp_path / "missing")})
    assert key not in repr(a) and key not in repr(a.current)


def test_references_expand_and_redact() -> None:
    text = "Bearer ${secrets.TOKEN} and ${secrets.B} and ${secrets.TOKEN}"
    assert references(text, None, "${secrets.C}") == ["TOKEN", "B", "C"]
    assert expand(text, {"TOKEN": "t0k", "B": "bb"}) == "Bearer t0k and bb and t0k"
    r = Redactor(["p@ss word/1"])
    assert r("x=p%40ss%20word%2F1&y=p@ss word/1&z=p%40ss+word%2F1") == \
        "x=[REDACTED]&y=[REDACTED]&z=[REDACTED]"
    assert r.data({"a": ["p@ss word/1"], "p@ss word/1": 1}) == {"a": ["[REDACTED]"],
                                                              "[REDACTED]": 1}


def test_open_secret_store_by_url(tmp_path: Path) -> None:
    assert isinstance(open_secret_store(f"sqlite:///{tmp_path}/x.db"), SqlSecretStore)
    with pytest.raises(Exception, match="unknown store URL"):
        open_secret_store("mysql://x")
