"""The ``cronfleet`` command line.

``main`` is a click group; each command group lives in its own module and is registered
here. Commands import what they need inside the function, so ``cronfleet next`` stays
fast to start (it loads neither the stores nor httpx nor cryptography).

Schedule tools (``cron``): ``next``, ``explain``. Running: ``run`` (``run``), ``check``
(``check``). Operating against the same store as the running processes (``operate``,
``status``): ``jobs``, ``history``, ``show-run``, ``trigger``, ``pause``, ``resume``,
``clear-override``, ``status``. Secrets (``secrets``): ``secrets set|list|delete|
rotate-key|generate-key`` (docs/secrets.md). API tokens (``tokens``): ``tokens
create|list|revoke``. Moving from cron (``crontab``): ``import-crontab``.
Shared helpers: ``common`` (exit codes, options, config, store session) and ``render``
(tables and text). See docs/cli.md.

Exit codes (shared by every command):
    0  success
    1  failure: invalid configuration or plugin, store error, a triggered run that did not
       succeed, or no answer (a schedule that never fires again)
    2  bad input: an invalid expression, time zone, option or argument; an unknown job or
       run id
    3  the job is already executing, or paused without ``--force`` (``trigger``)
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from cronfleet import __version__
from cronfleet.cli.common import _EXIT_CODES

__all__ = ["main"]

# command name -> "module:attribute" under cronfleet.cli; a command's module is imported
# when that command runs (or when --help lists them), so `cronfleet next` loads the
# schedule tools only
COMMANDS = {
    "next": "cron:next_cmd",
    "explain": "cron:explain_cmd",
    "run": "run:run_cmd",
    "check": "check:check_cmd",
    "jobs": "operate:jobs_cmd",
    "history": "operate:history_cmd",
    "runs": "operate:runs_cmd",
    "show-run": "operate:show_run_cmd",
    "trigger": "operate:trigger_cmd",
    "cancel": "operate:cancel_cmd",
    "backfill": "backfill:backfill_cmd",
    "backfill-cancel": "backfill:backfill_cancel_cmd",
    "pause": "operate:pause_cmd",
    "resume": "operate:resume_cmd",
    "clear-override": "operate:clear_override_cmd",
    "status": "status:status_cmd",
    "secrets": "secrets:secrets_group",
    "tokens": "tokens:tokens_group",
    "import-crontab": "crontab:import_crontab_cmd",
}


class _Commands(click.Group):
    """A group whose commands are imported on first use; a command that needs an extra
    which is not installed ends with one line naming the ``pip install`` to run."""

    def invoke(self, ctx: click.Context) -> Any:
        from cronfleet.extras import MissingExtra

        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            click.echo(f"cronfleet: {exc}", err=True)
            ctx.exit(1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(f"cronfleet.cli.{module}"),
                                         attr)
        return command


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=_EXIT_CODES,
)
@click.version_option(__version__, prog_name="cronfleet")
def main() -> None:
    """cronfleet: a cron scheduler that fires each slot exactly once across a fleet."""
