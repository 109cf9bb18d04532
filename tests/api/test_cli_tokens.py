"""`cronfleet tokens create/list/revoke` on the configured store, and what the API makes of
the tokens they manage."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cronfleet import plugins
from cronfleet.cli import main
from cronfleet.store.factory import open_api_store

from .conftest import Api, expect

Cli = Callable[..., Result]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store_url: str) -> Cli:
    """cli("tokens", "list"): in-process, on a config naming the test's store."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(plugins, "discover_entry_points", lambda group="": [])
    config = tmp_path / "cronfleet.toml"
    config.write_text(f'[scheduler]\nstore = "{store_url}"\n', encoding="utf-8")

    def go(*args: str) -> Result:
        old_click = "mix_stderr" in inspect.signature(CliRunner).parameters  # click < 8.2
        kwargs = {"mix_stderr": False} if old_click else {}
        return CliRunner(**kwargs).invoke(main, [*args, "--config", str(config)],
                                          catch_exceptions=False)

    return go


def test_create_prints_the_token_once(cli: Cli, store_url: str) -> None:
    r = cli("tokens", "create", "--team", "alpha", "--role", "editor")
    assert r.exit_code == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith("cf_") and "\n" not in token
    tid = token.split("_")[1]
    assert r.stderr == (f"token {tid} (alpha-editor): team alpha, role editor. It is shown "
                        "only now: store it in your secret manager.\n")

    async def check() -> None:
        store = open_api_store(store_url)
        try:
            info = await store.authenticate(token)
            assert info is not None
            assert (info.id, info.name, info.team, info.role) == (tid, "alpha-editor", "alpha",
                                                                  "editor")
        finally:
            await store.close()

    asyncio.run(check())


def test_create_list_revoke_as_json(cli: Cli) -> None:
    r = cli("tokens", "create", "--team", "alpha", "--role", "viewer", "--name", "grafana",
            "--json")
    assert r.exit_code == 0, r.stderr
    made = json.loads(r.stdout)
    assert set(made) == {"token", "id", "name", "team", "role", "created_at", "created_by",
                         "revoked_at", "last_used_at"}
    assert (made["name"], made["team"], made["role"]) == ("grafana", "alpha", "viewer")
    assert made["revoked_at"] is None and made["token"].startswith(f"cf_{made['id']}_")
    other = json.loads(cli("tokens", "create", "--team", "beta", "--role", "admin",
                           "--json").stdout)

    listed = json.loads(cli("tokens", "list", "--json").stdout)
    assert [t["id"] for t in listed] == [made["id"], other["id"]]  # by team
    assert all("token" not in t and "hash" not in t for t in listed)
    assert made["token"] not in cli("tokens", "list", "--json").stdout
    only = json.loads(cli("tokens", "list", "--team", "beta", "--json").stdout)
    assert [t["name"] for t in only] == ["beta-admin"]

    r = cli("tokens", "revoke", made["id"], "--json")
    assert r.exit_code == 0, r.stderr
    [revoked] = json.loads(r.stdout)
    assert revoked["id"] == made["id"] and revoked["revoked_at"] is not None
    assert [t["id"] for t in json.loads(cli("tokens", "list", "--json").stdout)] == \
        [other["id"]]
    everything = json.loads(cli("tokens", "list", "--all", "--json").stdout)
    assert [t["id"] for t in everything] == [made["id"], other["id"]]
    assert everything[0]["revoked_at"] is not None


def test_list_and_revoke_as_text(cli: Cli) -> None:
    r = cli("tokens", "list")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == "no tokens\n"
    made = json.loads(cli("tokens", "create", "--team", "alpha", "--role", "admin",
                          "--json").stdout)
    r = cli("tokens", "list")
    assert r.exit_code == 0
    header, row = r.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "TEAM", "ROLE", "CREATED", "LAST", "USED",
                              "REVOKED"]
    assert row.split()[:4] == [made["id"], "alpha-admin", "alpha", "admin"]
    assert made["token"] not in r.stdout
    r = cli("tokens", "revoke", "alpha-admin")  # by name
    assert r.exit_code == 0
    assert r.stdout == f"revoked token {made['id']} (alpha-admin, team alpha)\n"


def test_bad_input_exits_2(cli: Cli) -> None:
    r = cli("tokens", "create", "--team", "no spaces!", "--role", "viewer")
    assert r.exit_code == 2
    assert r.stderr == ("team 'no spaces!' is invalid: use 1-64 characters from letters, "
                        "digits and ._- starting with a letter or digit\n")
    assert cli("tokens", "create", "--team", "alpha", "--role", "owner").exit_code == 2
    assert cli("tokens", "create", "--role", "viewer").exit_code == 2
    r = cli("tokens", "revoke", "nope")
    assert r.exit_code == 2
    assert r.stderr == "no live token with id or name 'nope' (see 'cronfleet tokens list')\n"
    made = json.loads(cli("tokens", "create", "--team", "alpha", "--role", "admin",
                          "--json").stdout)
    assert cli("tokens", "revoke", made["id"]).exit_code == 0
    assert cli("tokens", "revoke", made["id"]).exit_code == 2  # already revoked
    assert json.loads(cli("tokens", "list", "--json").stdout) == []


async def test_a_token_revoked_by_the_cli_gets_401(cli: Cli, api: Api) -> None:
    r = await asyncio.to_thread(cli, "tokens", "create", "--team", "alpha", "--role",
                                "viewer", "--name", "ci", "--json")
    made = json.loads(r.stdout)
    assert [j["id"] for j in expect(await api.get("/api/jobs", made["token"]), 200)["items"]] \
        == ["alpha.off", "alpha.report", "alpha.slow"]
    r = await asyncio.to_thread(cli, "tokens", "revoke", "ci")
    assert r.exit_code == 0
    body = expect(await api.get("/api/jobs", made["token"]), 401, "UNAUTHORIZED")
    assert body["message"] == "unknown or revoked token"
    # the other tokens still work
    expect(await api.get("/api/jobs", "alpha-viewer"), 200)
