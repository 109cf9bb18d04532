"""A crontab turned into ``[[tasks]]`` command jobs (``cronfleet import-crontab``).

What is mapped, line by line (cron's own rules: a setting applies to the entries after
it):

- ``m h dom mon dow command`` and ``@hourly`` ... ``@yearly`` / ``@annually`` /
  ``@midnight`` -> a task with ``cron`` and ``command`` run by ``/bin/sh -c`` (``shell =
  true``), as cron runs it; with ``SHELL=/bin/bash`` set, ``command = ["/bin/bash", "-c",
  "..."]``.
- ``%`` in a command (cron: the rest is the command's standard input, ``%`` a newline;
  ``\\%`` a literal ``%``) -> a here-document.
- ``CRON_TZ=Zone`` -> ``timezone`` of the entries after it (checked).
- ``MAILTO=a@x,b@y`` -> ``notify = { on = ["failure"], email = { host, to } }`` (cron mails
  any output; cronfleet mails failures); ``MAILTO=""`` -> no notification.
- ``NAME=value`` (``PATH``, ``HOME``, anything else) -> ``env`` of the entries after it.
- ``--system`` (``/etc/crontab``, ``/etc/cron.d``): the user column is read and reported
  (a cronfleet process runs every command as its own user).

Refused, each with its reason: ``@reboot`` (not a schedule), a schedule cronfleet cannot
read, a line that is neither an entry nor a setting.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversion", "Skipped", "convert", "to_toml"]

MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
REBOOT_REASON = ("@reboot is not a schedule: it runs once when cron starts, which has no "
                 "meaning for a fleet (nothing to claim exactly once); start it from the "
                 "host's init system instead (a systemd unit, an entrypoint script)")
_ASSIGN = re.compile(r"""^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$""")
_HEREDOC = "CRONFLEET_STDIN"


@dataclass(frozen=True)
class Skipped:
    """A line that was not turned into a task, and why."""

    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text.strip()!r}: {self.reason}"


@dataclass
class Conversion:
    """The tasks (``[[tasks]]`` tables in spec keys, ``cron`` for the schedule), what was
    not mapped, and notes on what changed meaning."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def toml(self) -> str:
        return to_toml(self.tasks, self.notes)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _stdin_split(command: str) -> tuple[str, str | None]:
    """cron's ``%``: the command, and the standard input (``None`` without one)."""
    out, i, parts = [], 0, None
    while i < len(command):
        ch = command[i]
        if ch == "\\" and i + 1 < len(command) and command[i + 1] == "%":
            out.append("%")
            i += 2
            continue
        if ch == "%":
            parts = command[i + 1:]
            break
        out.append(ch)
        i += 1
    if parts is None:
        return "".join(out), None
    stdin = re.sub(r"(?<!\\)%", "\n", parts).replace("\\%", "%")
    return "".join(out), stdin


def _task_id(command: str, taken: set[str]) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    # the first word that is not a variable assignment, cd, or a shell keyword
    skip = {"cd", "&&", "exec", "nice", "ionice", "env", "sudo", "-u", "timeout", "flock"}
    name, after_cd = "job", False
    for w in words:
        if after_cd or w == "cd":
            after_cd = w == "cd"
            continue
        if "=" not in w and w not in skip and not w.startswith("-"):
            name = w
            break
    base = re.sub(r"[^A-Za-z0-9._:@+-]", "_", name.rsplit("/", 1)[-1]).lstrip("._:@+-")
    base = (base or "job")[:60]
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    taken.add(candidate)
    return candidate


def convert(text: str, *, smtp_host: str = "localhost", system: bool = False) -> Conversion:
    """Read a crontab's ``text``; every entry becomes a task or a :class:`Skipped`."""
    from cronfleet.cron import CronSyntaxError, parse

    out = Conversion()
    env: dict[str, str] = {}
    tz: str | None = None
    mailto: list[str] | None = None
    shell: str | None = None
    taken: set[str] = set()
    users: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        assign = _ASSIGN.match(line)
        if assign and not line.startswith("@"):
            name, value = assign.group(1), _unquote(assign.group(2))
            if name == "CRON_TZ":
                try:
                    parse("@daily", value)
                except CronSyntaxError as exc:
                    out.skipped.append(Skipped(number, raw, f"CRON_TZ: {exc.reason}; the "
                                                            "entries after it keep the "
                                                            "previous zone"))
                    continue
                tz = value
            elif name == "MAILTO":
                mailto = [a.strip() for a in value.split(",") if a.strip()] or None
            elif name == "SHELL":
                shell = None if value in ("/bin/sh", "") else value
            elif name.upper().startswith("CRONFLEET_"):
                out.skipped.append(Skipped(number, raw, "CRONFLEET_* variables are set by "
                                                        "cronfleet (the run's identity)"))
            else:
                env[name] = value
            continue
        if line.startswith("@"):
            macro, *tail = line.split(None, 1)
            rest = tail[0] if tail else ""
            if macro == "@reboot":
                out.skipped.append(Skipped(number, raw, REBOOT_REASON))
                continue
            if macro not in MACROS:
                out.skipped.append(Skipped(number, raw, f"unknown macro {macro!r} (expected "
                                                        f"one of {', '.join(MACROS)} or "
                                                        "@reboot)"))
                continue
            schedule, command = macro, rest
        else:
            parts = line.split(None, 5)
            if len(parts) < 6:
                out.skipped.append(Skipped(number, raw, "neither an entry (five time fields "
                                                        "and a command) nor a NAME=value "
                                                        "setting"))
                continue
            schedule, command = " ".join(parts[:5]), parts[5]
        if system:
            user, _, command = command.strip().partition(" ")
            users.add(user)
            command = command.strip()
        if not command:
            out.skipped.append(Skipped(number, raw, "no command after the schedule"))
            continue
        try:
            parse(schedule, tz or "UTC")
        except CronSyntaxError as exc:
            out.skipped.append(Skipped(number, raw, f"schedule {schedule!r}: {exc}"))
            continue
        cmd, stdin = _stdin_split(command)
        task_id = _task_id(cmd, taken)
        if stdin is not None:
            # the input goes to the whole command line, as cron gives it to the shell
            cmd = f"{{\n{cmd.rstrip()}\n}} <<'{_HEREDOC}'\n{stdin}\n{_HEREDOC}"
        task: dict[str, Any] = {"id": task_id, "cron": schedule}
        if tz is not None:
            task["timezone"] = tz
        if shell is not None:
            task["command"] = [shell, "-c", cmd]
        else:
            task["command"] = cmd
            task["shell"] = True
        if env:
            task["env"] = dict(env)
        if mailto:
            task["notify"] = {"on": ["failure"],
                              "email": {"host": smtp_host, "to": list(mailto)}}
        task["description"] = f"{command[:200]} (crontab line {number})"
        out.tasks.append(task)
    if users:
        out.notes.append(f"the user column ({', '.join(sorted(users))}) is not kept: every "
                         "command runs as the user of the cronfleet process")
    if any("notify" in t for t in out.tasks):
        out.notes.append(f"MAILTO became e-mail on failure through {smtp_host}:25 (cron "
                         "mailed any output; the output is now in each run's log)")
    return out


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def to_toml(tasks: list[dict[str, Any]], notes: Sequence[str] = ()) -> str:
    """``[[tasks]]`` tables (the values TOML can hold: text, numbers, booleans, lists,
    inline tables)."""
    lines = ["# imported by `cronfleet import-crontab`"]
    lines += [f"# note: {n}" for n in notes]
    for task in tasks:
        lines += ["", "[[tasks]]"]
        lines += [f"{_key(k)} = {_value(v)}" for k, v in task.items()]
    return "\n".join(lines) + "\n"
