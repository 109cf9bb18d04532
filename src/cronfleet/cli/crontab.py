"""``cronfleet import-crontab FILE``: a crontab as ``[[tasks]]`` command jobs."""

from __future__ import annotations

import sys

import click

from cronfleet.cli.common import _EXIT_CODES, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


@click.command("import-crontab", epilog=_EXIT_CODES)
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the tasks to this file (default: standard output).")
@click.option("--smtp-host", default="localhost", show_default=True,
              help="SMTP server of the e-mail notifications MAILTO becomes.")
@click.option("--system/--user-crontab", default=None,
              help="A system crontab (/etc/crontab, /etc/cron.d/*: the default for those "
                   "paths), whose user field follows the schedule; or a user's crontab "
                   "(no user field). Without either, an entry whose first word is a user of "
                   "this machine is refused with a hint.")
def import_crontab_cmd(file: str, output: str | None, smtp_host: str,
                       system: bool | None) -> None:
    """Turn a crontab into [[tasks]] command jobs (append them to cronfleet.toml).

    Each entry becomes a task running its command with /bin/sh -c; CRON_TZ becomes the
    timezone, MAILTO an e-mail notification on failure, other NAME=value lines the env
    of the entries after them. What cannot be mapped (@reboot, unreadable lines) is
    printed on standard error with the reason, and the exit code is 1.
    """
    from cronfleet.config.crontab import convert, system_path

    try:
        if file == "-":
            text = sys.stdin.read()
        else:
            with open(file, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        click.echo(f"error: cannot read {file}: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if system is None and system_path(file):
        system = True
        click.echo(f"note: {file} is a system crontab: the field after the schedule is the "
                   "user", err=True)
    result = convert(text, smtp_host=smtp_host, system=system)
    toml = result.toml()
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(toml)
    else:
        click.echo(toml, nl=False)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    for skipped in result.skipped:
        click.echo(f"not imported: {skipped}", err=True)
    click.echo(f"{len(result.tasks)} task{'s' if len(result.tasks) != 1 else ''} imported"
               f"{f', {len(result.skipped)} line(s) not imported' if result.skipped else ''}"
               f"{f' into {output}' if output else ''}", err=True)
    sys.exit(EXIT_FAILED if result.skipped else EXIT_OK)
