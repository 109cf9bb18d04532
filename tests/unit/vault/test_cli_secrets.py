"""cronfleet secrets set/list/delete/rotate-key: values in by stdin only, never out."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cronfleet import plugins
from cronfleet.cli import main
from cronfleet.config import CONFIG_ENV, SCHEDULER_ENV, STORE_ENV
from cronfleet.secrets import KEY_ENV, KEY_FILE_ENV, PREVIOUS_KEYS_ENV, generate_key

VALUE = "s3cr3t-V@lue-for-cli"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(plugins, "discover_entry_points", lambda group="": [])
    for var in (CONFIG_ENV, STORE_ENV, SCHEDULER_ENV, KEY_ENV, KEY_FILE_ENV, PREVIOUS_KEYS_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cronfleet.toml").write_text('[scheduler]\nstore = "sqlite:///cf.db"\n')
    yield


outputs: list[str] = []


def cli(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(main, list(args), input=input, env=env)
    outputs.append(result.output + (result.stderr if result.stderr_bytes else ""))
    return result


def test_set_list_delete_never_show_the_value(tmp_path: Path) -> None:
    outputs.clear()
    env = {KEY_ENV: generate_key()}
    r = cli("secrets", "set", "API_TOKEN", input=VALUE + "\n", env=env)
    assert r.exit_code == 0, r.output
    assert "created secret 'API_TOKEN' in namespace 'default'" in r.output
    r = cli("secrets", "set", "API_TOKEN", "--json", input=VALUE, env=env)
    assert json.loads(r.output) == {"name": "API_TOKEN", "namespace": "default",
                                    "created": False}
    cli("secrets", "set", "OTHER", "--namespace", "team-a", input="x", env=env)
    r = cli("secrets", "list", env=env)
    assert r.exit_code == 0 and "API_TOKEN" in r.output and "OTHER" not in r.output
    r = cli("secrets", "list", "--all", "--json", env=env)
    rows = json.loads(r.output)
    assert [(x["namespace"], x["name"]) for x in rows] == [("default", "API_TOKEN"),
                                                          ("team-a", "OTHER")]
    assert set(rows[0]) == {"namespace", "name", "key_id", "hosts", "created_at",
                            "updated_at"}
    r = cli("secrets", "delete", "API_TOKEN", env=env)
    assert r.exit_code == 0 and "deleted" in r.output
    r = cli("secrets", "delete", "API_TOKEN", env=env)
    assert r.exit_code == 2 and "no secret 'API_TOKEN'" in r.output
    for out in outputs:
        assert VALUE not in out
    assert VALUE.encode() not in (tmp_path / "cf.db").read_bytes()


def test_value_is_stored_exactly(tmp_path: Path) -> None:
    import asyncio

    from cronfleet.secrets import Keyring, Vault
    from cronfleet.store.factory import open_secret_store

    key = generate_key()
    assert cli("secrets", "set", "T", input="line1\nline2\n", env={KEY_ENV: key}).exit_code == 0

    async def read() -> str:
        store = open_secret_store(f"sqlite:///{tmp_path / 'cf.db'}")
        try:
            return await Vault(store, Keyring.from_env({KEY_ENV: key})).get("T")
        finally:
            await store.close()

    assert asyncio.run(read()) == "line1\nline2"


def test_value_is_never_taken_from_argv() -> None:
    r = cli("secrets", "set", "T", VALUE, env={KEY_ENV: generate_key()})
    assert r.exit_code == 2 and "unexpected extra argument" in r.output.lower()


def test_errors() -> None:
    r = cli("secrets", "set", "T", input=VALUE)
    assert r.exit_code == 1 and KEY_ENV in r.output and VALUE not in r.output
    r = cli("secrets", "set", "T", input="", env={KEY_ENV: generate_key()})
    assert r.exit_code == 2 and "empty" in r.output
    r = cli("secrets", "set", "bad name", input="x", env={KEY_ENV: generate_key()})
    assert r.exit_code == 2 and "invalid secret name" in r.output
    r = cli("secrets", "list", env={KEY_ENV: "short"})
    assert r.exit_code == 1 and "not base64" in r.output


def test_rotate_key(tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()
    cli("secrets", "set", "A", input="alpha", env={KEY_ENV: old})
    cli("secrets", "set", "B", input="beta", env={KEY_ENV: old})
    r = cli("secrets", "rotate-key", env={KEY_ENV: new})
    assert r.exit_code == 1 and PREVIOUS_KEYS_ENV in r.output
    r = cli("secrets", "rotate-key", "--json", env={KEY_ENV: new, PREVIOUS_KEYS_ENV: old})
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["reencrypted"] == 2
    ids = {row[0] for row in sqlite3.connect(tmp_path / "cf.db").execute(
        "SELECT key_id FROM secrets")}
    assert len(ids) == 1
    r = cli("secrets", "list", "--json", env={KEY_ENV: new})
    assert {x["key_id"] for x in json.loads(r.output)} == ids


def test_run_refuses_to_start_without_the_key(tmp_path: Path) -> None:
    cli("secrets", "set", "A", input="alpha", env={KEY_ENV: generate_key()})
    (tmp_path / "cronfleet.toml").write_text(
        '[scheduler]\nstore = "sqlite:///cf.db"\n\n[[tasks]]\nid = "ping"\ncron = "@daily"\n'
        'http = { url = "https://example.com/${secrets.A}" }\n')
    r = cli("run")
    assert r.exit_code == 1
    assert "cronfleet cannot run: secrets: 1 encrypted secret(s) exist but no secret key" in \
        r.output


def test_generate_key() -> None:
    import base64

    r = cli("secrets", "generate-key")
    assert r.exit_code == 0 and len(base64.b64decode(r.output.strip())) == 32
