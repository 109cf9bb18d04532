"""``cronfleet tokens``: bearer tokens for the REST API (docs/api.md)."""

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
    _who,
)
from cronfleet.cli.render import (
    _iso,
)
from cronfleet.errors import CronfleetError
from cronfleet.model import check_team

# -- tokens ---------------------------------------------------------------------------

_TOKENS_EXIT_CODES = """\b
Exit codes:
  0  success
  1  failure: invalid configuration, store error
  2  bad input: invalid team or name, no such token"""


@click.group("tokens", epilog=_TOKENS_EXIT_CODES)
def tokens_group() -> None:
    """Bearer tokens for the REST API.

    A token belongs to one team and has one role: viewer (read), editor (also change jobs,
    pause, trigger) or admin (also secrets and the audit log). Only a SHA-256 digest is
    stored: the token is printed once, at creation. See docs/api.md.
    """


def _api_store(config_path: str | None, fn: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
    """Run ``fn(api_store)`` on the configured store; exit 1 on a config or store error."""
    import asyncio

    from cronfleet.config import ConfigError, load_config
    from cronfleet.store.factory import open_api_store

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report_problems(exc.problems, _config_name(config_path))
        sys.exit(EXIT_FAILED)

    async def go() -> T:
        store = open_api_store(config.store)
        try:
            return await fn(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except CronfleetError as exc:
        _fail(str(exc), EXIT_FAILED)


@tokens_group.command("create", epilog=_TOKENS_EXIT_CODES)
@click.option("--team", required=True, help="The team whose jobs, runs and secrets it sees.")
@click.option("--role", type=click.Choice(["viewer", "editor", "admin"]), required=True,
              help="viewer: read; editor: also change; admin: also secrets and audit.")
@click.option("--name", default=None, help="A label (default: <team>-<role>); shown in the "
                                           "audit log.")
@_CONFIG
@_JSON
def tokens_create(team: str, role: str, name: str | None, config_path: str | None,
                  as_json: bool) -> None:
    """Create a token and print it once."""
    problem = check_team(team)
    if problem:
        _fail(problem, EXIT_BAD_INPUT)
    name = name or f"{team}-{role}"
    if not name.strip() or len(name) > 100:
        _fail(f"--name {name!r}: expected 1-100 characters", EXIT_BAD_INPUT)
    plaintext, info = _api_store(
        config_path, lambda s: s.create_token(name=name, team=team, role=role,
                                              created_by=_who()))
    if as_json:
        _echo_json({"token": plaintext, **info.to_dict()})
        return
    click.echo(plaintext)
    click.echo(f"token {info.id} ({info.name}): team {info.team}, role {info.role}. It is "
               "shown only now: store it in your secret manager.", err=True)


@tokens_group.command("list", epilog=_TOKENS_EXIT_CODES)
@click.option("--team", default=None, help="Only this team's tokens.")
@click.option("--all", "show_all", is_flag=True, help="Include revoked tokens.")
@_CONFIG
@_JSON
def tokens_list(team: str | None, show_all: bool, config_path: str | None,
                as_json: bool) -> None:
    """List tokens (never their values)."""
    tokens = _api_store(config_path, lambda s: s.list_tokens(team))
    if not show_all:
        tokens = [t for t in tokens if t.revoked_at is None]
    if as_json:
        _echo_json([t.to_dict() for t in tokens])
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("ID", "NAME", "TEAM", "ROLE", "CREATED", "LAST USED", "REVOKED"):
        table.add_column(col)
    for t in tokens:
        table.add_row(t.id, t.name, t.team, t.role, _iso(t.created_at), _iso(t.last_used_at),
                      _iso(t.revoked_at))
    if not tokens:
        click.echo("no tokens" + (f" for team {team}" if team else ""), err=True)
        return
    _console().print(table)


@tokens_group.command("revoke", epilog=_TOKENS_EXIT_CODES)
@click.argument("token", metavar="ID_OR_NAME")
@_CONFIG
@_JSON
def tokens_revoke(token: str, config_path: str | None, as_json: bool) -> None:
    """Revoke a token by id, or every live token with this name. Takes effect on the next
    request."""
    revoked = _api_store(config_path, lambda s: s.revoke_token(token))
    if not revoked:
        _fail(f"no live token with id or name {token!r} (see 'cronfleet tokens list')",
              EXIT_BAD_INPUT)
    if as_json:
        _echo_json([t.to_dict() for t in revoked])
        return
    for t in revoked:
        click.echo(f"revoked token {t.id} ({t.name}, team {t.team})")
