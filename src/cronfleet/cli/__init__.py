"""The ``cronfleet`` command line.

``main`` is a click group; each command group lives in its own module and is registered
here. Commands import what they need inside the function, so ``cronfleet next`` stays
fast to start (it loads neither the stores nor httpx nor cryptography).

Schedule tools (``cron``): ``next``, ``explain``. Running: ``run`` (``run``), ``check``
(``check``). Operating against the same store as the running processes (``operate``,
``status``): ``jobs``, ``history``, ``show-run``, ``trigger``, ``pause``, ``resume``,
``clear-override``, ``status``. Secrets (``secrets``): ``secrets set|list|delete|
rotate-key|generate-key`` (docs/secrets.md). API tokens (``tokens``): ``tokens
create|list|revoke``. Shared helpers: ``common`` (exit codes, options, config, store
session) and ``render`` (tables and text). See docs/cli.md.

Exit codes (shared by every command):
    0  success
    1  failure: invalid configuration or plugin, store error, a triggered run that did not
       succeed, or no answer (a schedule that never fires again)
    2  bad input: an invalid expression, time zone, option or argument; an unknown job or
       run id
    3  the job is already executing (``trigger``)
"""

from __future__ import annotations

import click

from cronfleet import __version__
from cronfleet.cli import check, cron, operate, run, secrets, status, tokens
from cronfleet.cli.common import _EXIT_CODES

__all__ = ["main"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=_EXIT_CODES,
)
@click.version_option(__version__, prog_name="cronfleet")
def main() -> None:
    """cronfleet: a cron scheduler that fires each slot exactly once across a fleet."""


for _command in (
    cron.next_cmd, cron.explain_cmd,
    run.run_cmd, check.check_cmd,
    operate.jobs_cmd, operate.history_cmd, operate.show_run_cmd, operate.trigger_cmd,
    operate.pause_cmd, operate.resume_cmd, operate.clear_override_cmd,
    status.status_cmd,
    secrets.secrets_group, tokens.tokens_group,
):
    main.add_command(_command)
