"""``cronfleet secrets``: encrypted secrets for HTTP tasks (docs/secrets.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from typing import Any

import click

from cronfleet.cli.common import (
    _CONFIG,
    _JSON,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    T,
    _config_name,
    _console,
    _echo_json,
    _fail,
    _report_problems,
)
from cronfleet.cli.render import (
    _iso,
    _t,
)
from cronfleet.errors import CronfleetError

# -- secrets ---------------------------------------------------------------------------


_SECRETS_EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure: invalid configuration, store error, no or wrong secret key
  2  bad input: invalid name, empty value, unknown secret"""


_NAMESPACE = click.option(
    "--namespace", metavar="NAME", default="default", show_default=True,
    help="The namespace the secret belongs to.",
)


@click.group("secrets", epilog=_SECRETS_EXIT_CODES)
def secrets_group() -> None:
    """Encrypted secrets, referenced as ${secrets.NAME} by HTTP tasks.

    Values are encrypted with AES-256-GCM under the key in CRONFLEET_SECRET_KEY (base64 of
    32 bytes) or the file named by CRONFLEET_SECRET_KEY_FILE, and stored next to the runs
    in the configured store. No command ever prints a value. See docs/secrets.md.
    """


def _vault(config_path: str | None, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """Run ``fn(vault)`` on the configured store; exit 1 on a config, key or store error."""
    import asyncio

    from cronfleet.config import ConfigError, load_config
    from cronfleet.secrets import Keyring, UnknownSecret, Vault
    from cronfleet.store.factory import open_secret_store

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report_problems(exc.problems, _config_name(config_path))
        sys.exit(EXIT_FAILED)
    try:
        keyring = Keyring.from_env()
        store = open_secret_store(config.store)
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)

    async def go() -> T:
        try:
            return await fn(Vault(store, keyring))
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except UnknownSecret as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)


def _read_value(name: str) -> str:
    """The value from stdin when it is not a terminal (one trailing newline dropped), else
    from a hidden, confirmed prompt. Never from argv."""
    if sys.stdin is not None and not sys.stdin.isatty():
        value = sys.stdin.read()
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    else:
        value = click.prompt(f"Value of {name}", hide_input=True, confirmation_prompt=True,
                             default="", show_default=False)
    if not value:
        _fail(f"secret {name!r}: the value is empty (pipe it on stdin or type it at the "
              "prompt)", EXIT_BAD_INPUT)
    return value


@secrets_group.command("set", epilog=_SECRETS_EXIT_CODES)
@click.argument("name")
@click.option("--hosts", "hosts", multiple=True, metavar="HOST[,HOST...]",
              help="The hosts the value may be sent to (api.example.com, *.example.com); "
                   "repeat or separate with commas. Without it the secret keeps its hosts.")
@click.option("--no-hosts", is_flag=True,
              help="Remove its hosts: only admins' jobs and config tasks may use it.")
@_NAMESPACE
@_CONFIG
@_JSON
def secrets_set_cmd(name: str, hosts: tuple[str, ...], no_hosts: bool, namespace: str,
                    config_path: str | None, as_json: bool) -> None:
    """Create or replace secret NAME. The value is read from stdin (e.g. 'printf %s "$TOKEN"
    | cronfleet secrets set TOKEN --hosts api.example.com') or from a hidden prompt -- never
    from the command line. A request that would send it to a host outside --hosts fails
    before sending (redirects included).
    """
    from cronfleet.secrets import check_hosts, check_secret_name

    problem = check_secret_name(name)
    if problem:
        _fail(problem, EXIT_BAD_INPUT)
    if hosts and no_hosts:
        _fail("--hosts and --no-hosts exclude each other", EXIT_BAD_INPUT)
    listed = [h.strip() for entry in hosts for h in entry.split(",") if h.strip()]
    if hosts and not listed:
        _fail("--hosts: expected host names (e.g. --hosts api.example.com)", EXIT_BAD_INPUT)
    bound: tuple[str, ...] | None = None
    if listed:
        bound, problems = check_hosts(listed)
        if problems:
            _fail("--hosts: " + "; ".join(p.replace("hosts[", "entry [") for p in problems),
                  EXIT_BAD_INPUT)
    value = _read_value(name)
    created = _vault(config_path, lambda v: v.set(
        name, value, namespace, hosts=bound if (listed or no_hosts) else ...))
    if as_json:
        _echo_json({"name": name, "namespace": namespace, "created": created})
    else:
        where = f" (hosts: {', '.join(bound)})" if bound else ""
        click.echo(f"{'created' if created else 'updated'} secret {name!r} in namespace "
                   f"{namespace!r}{where}")


@secrets_group.command("list", epilog=_SECRETS_EXIT_CODES)
@_NAMESPACE
@click.option("--all", "all_namespaces", is_flag=True, help="Every namespace.")
@_CONFIG
@_JSON
def secrets_list_cmd(namespace: str, all_namespaces: bool, config_path: str | None,
                     as_json: bool) -> None:
    """Names, key ids and dates of the secrets -- never their values."""
    infos = _vault(config_path, lambda v: v.entries(None if all_namespaces else namespace))
    if as_json:
        _echo_json([i.to_dict() for i in infos])
        return
    if not infos:
        where = "any namespace" if all_namespaces else f"namespace {namespace!r}"
        click.echo(f"no secrets in {where}")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("namespace", "name", "hosts", "created", "updated", "key id"):
        table.add_column(col)
    for i in infos:
        table.add_row(_t(i.namespace), _t(i.name), _t(", ".join(i.hosts or ()) or "-"),
                      _iso(i.created_at), _iso(i.updated_at), i.key_id)
    _console().print(table)


@secrets_group.command("delete", epilog=_SECRETS_EXIT_CODES)
@click.argument("name")
@_NAMESPACE
@_CONFIG
@_JSON
def secrets_delete_cmd(name: str, namespace: str, config_path: str | None,
                       as_json: bool) -> None:
    """Delete secret NAME (exit 2 if there is none)."""
    deleted = _vault(config_path, lambda v: v.delete(name, namespace))
    if as_json:
        _echo_json({"name": name, "namespace": namespace, "deleted": deleted})
    if not deleted:
        _fail(f"no secret {name!r} in namespace {namespace!r}", EXIT_BAD_INPUT)
    if not as_json:
        click.echo(f"deleted secret {name!r} from namespace {namespace!r}")


@secrets_group.command("rotate-key", epilog=_SECRETS_EXIT_CODES)
@_CONFIG
@_JSON
def secrets_rotate_cmd(config_path: str | None, as_json: bool) -> None:
    """Re-encrypt every secret under the current key.

    Set CRONFLEET_SECRET_KEY (or _FILE) to the new key and CRONFLEET_SECRET_KEY_PREVIOUS to
    the old one(s), comma separated; afterwards the old keys are no longer needed.
    """

    async def rotate(vault: Any) -> tuple[int, str]:
        count = await vault.rotate()
        return count, vault.keyring.current.id

    count, key_id = _vault(config_path, rotate)
    if as_json:
        _echo_json({"reencrypted": count, "key_id": key_id})
    else:
        click.echo(f"re-encrypted {count} secret{'' if count == 1 else 's'} under key {key_id}")


@secrets_group.command("generate-key")
def secrets_generate_key_cmd() -> None:
    """Print a new random key (base64 of 32 bytes) for CRONFLEET_SECRET_KEY."""
    from cronfleet.secrets import generate_key

    click.echo(generate_key())


