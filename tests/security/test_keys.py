"""Keys: every process that can read or write secrets -- an API-only one included -- refuses
to start when its key ring cannot decrypt the store's secrets, and no process writes a secret
under a key while values exist that its key ring cannot read."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cronfleet.secrets import Keyring, SecretKey, Vault, VaultLocked, generate_key
from cronfleet.store.factory import open_secret_store

CLI = [sys.executable, "-m", "cronfleet"]


def keyring(key: str) -> Keyring:
    return Keyring(SecretKey.from_base64(key, "test"))


async def put(url: str, key: str) -> None:
    store = open_secret_store(url)
    try:
        await Vault(store, keyring(key)).set("TOKEN", "v-1", "alpha")
    finally:
        await store.close()


def start(url: str, key: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    env["CRONFLEET_STORE"] = url
    if key is not None:
        env["CRONFLEET_SECRET_KEY"] = key
    return subprocess.run([*CLI, "run", "--role", "api", "--port", "0"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_an_api_only_process_with_a_wrong_or_missing_key_does_not_start(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    right, wrong = generate_key(), generate_key()
    asyncio.run(put(url, right))
    done = start(url, wrong, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "cannot be decrypted with the configured key" in done.stderr
    done = start(url, None, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "no secret key is configured" in done.stderr


async def test_no_secret_is_written_under_a_key_the_others_do_not_hold(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    right, wrong = generate_key(), generate_key()
    await put(url, right)
    store = open_secret_store(url)
    try:
        with pytest.raises(VaultLocked, match="cannot be decrypted"):
            await Vault(store, keyring(wrong)).set("OTHER", "v-2", "alpha")
        assert [r.name for r in await store.list_secrets(None)] == ["TOKEN"]
        # the key ring that holds the old key writes (and rotation still works)
        both = Keyring(SecretKey.from_base64(wrong, "new"),
                       (SecretKey.from_base64(right, "old"),))
        assert await Vault(store, both).set("OTHER", "v-2", "alpha") is True
        assert await Vault(store, both).rotate() == 1
    finally:
        await store.close()
