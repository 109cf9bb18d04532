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
- a system crontab (``/etc/crontab``, ``/etc/cron.d/*``: read as one by path, or with
  ``--system``): the user field after the schedule is read and reported (a cronfleet
  process runs every command as its own user). Without either, an entry whose first
  command word is a user of this machine is refused with that hint, never imported with
  the user glued to its command (``--user-crontab`` says the file is a user's).
- fields are separated by any run of blanks (spaces or tabs).
- ids say what the command does: its last simple command that is not a guard (``test
  -x ... ||``, ``command -v ... &&``, ``cd / &&``), with the argument of a program
  whose first argument is the action (``run-parts-cron-daily``, ``certbot-renew``).

Refused, each with its reason: ``@reboot`` (not a schedule), a schedule cronfleet cannot
read, a line that is neither an entry nor a setting.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversion", "Skipped", "convert", "is_user", "system_path", "to_toml"]

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


_GUARDS = frozenset({"test", "[", "[[", "command", "cd", "true", "false", ":", "sleep",
                     "which", "type", "exit", "echo", "printf", "logger", "!"})
"""Commands that check, move or report around the real one (``test -x ... ||``,
``command -v x > /dev/null &&``, ``cd / &&``): never what names a task."""
_KEYWORDS = frozenset({"for", "while", "until", "if", "case", "select", "function", "done",
                       "fi", "esac", "{", "}", "(", ")", "in"})
_LEADING = frozenset({"do", "then", "else", "elif", "time", "!"})
_WRAPPERS = {"nice": 0, "ionice": 0, "env": 0, "sudo": 0, "exec": 0, "nohup": 0,
             "chronic": 0, "timeout": 1, "flock": 1, "setsid": 0, "stdbuf": 0}
"""Programs that run the next one (the number: positional arguments of their own)."""
_SUBCOMMANDS = frozenset({"run-parts", "certbot", "systemctl", "docker", "podman", "git",
                          "kubectl", "make", "npm", "apt-get", "apt", "borg", "restic"})
"""Programs whose first argument says what is done (``certbot renew``, ``run-parts
/etc/cron.daily``): the id keeps it."""
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")", "|&"})


def _simple_commands(command: str) -> list[list[str]]:
    """The command line cut at ``&&``, ``||``, ``;``, ``&`` into simple commands (words
    without redirections; of a pipeline, its first command)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = command.split()
    out: list[list[str]] = []
    current: list[str] = []
    in_pipe = False
    redirect = False
    for tok in tokens:
        if tok in _OPERATORS:
            if current and not in_pipe:
                out.append(current)
            current = []
            in_pipe = tok in ("|", "|&")
            continue
        if redirect:  # the target of > / <
            redirect = False
            continue
        if tok and set(tok) <= set("<>&"):
            redirect = not tok.endswith("&")
            continue
        if re.fullmatch(r"[0-9]*[<>]&?[0-9-]*", tok):  # 2>&1, 2>
            continue
        if not in_pipe:
            current.append(tok)
    if current and not in_pipe:
        out.append(current)
    return out


def _what(words: list[str]) -> list[str]:
    """A simple command's program and the argument that says what it does ([] for a
    guard or a shell keyword)."""
    words = [w for w in words if w not in ("{", "}")]
    while words and words[0] in _LEADING:
        words = words[1:]
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # VAR=value before the program
    while words:
        name = words[0].rsplit("/", 1)[-1]
        own = _WRAPPERS.get(name)
        if own is None or len(words) == 1:
            break
        rest = words[1:]
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            rest = rest[2:] if rest[0] in ("-u", "-n", "-c", "-s") and name in (
                "sudo", "nice", "ionice") else rest[1:]
        words = rest[own:]
    if not words or words[0] in _KEYWORDS or words[0].rsplit("/", 1)[-1] in _GUARDS:
        return []
    program = words[0].rsplit("/", 1)[-1]
    if program in _SUBCOMMANDS:
        arg = next((w for w in words[1:] if not w.startswith("-")
                    and not w.replace(".", "").isdigit()), None)
        if arg:
            return [program, arg.rstrip("/").rsplit("/", 1)[-1].replace(".", "-")]
    return [program]


def _task_id(command: str, taken: set[str]) -> str:
    """What the command does: its last simple command that is not a guard (``test -x
    /usr/sbin/anacron || run-parts /etc/cron.daily`` -> ``run-parts-cron-daily``),
    ``-2``, ``-3`` ... when taken."""
    simples = _simple_commands(command)
    words: list[str] = []
    for simple in simples:
        words = _what(simple) or words
    if not words and simples and simples[0]:  # only a guard: "echo ... >> log"
        words = [simples[0][0].rsplit("/", 1)[-1]]
    name = "-".join(words) or "job"
    base = re.sub(r"[^A-Za-z0-9._:@+-]+", "-", name).strip("-.:@+_")
    base = (base or "job")[:60]
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    taken.add(candidate)
    return candidate


def is_user(name: str) -> bool:
    """Whether ``name`` is a user of this machine (the password database)."""
    import pwd

    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):
        return False
    return True


SYSTEM_PATHS = ("/etc/crontab", "/etc/cron.d/")


def system_path(path: str | None) -> bool:
    """Whether ``path`` is where system crontabs live (``/etc/crontab``,
    ``/etc/cron.d/*``): their sixth field is the user."""
    if not path or path == "-":
        return False
    import os.path

    real = os.path.abspath(path)
    return real == SYSTEM_PATHS[0] or real.startswith(SYSTEM_PATHS[1])


def _glued(user: str) -> str:
    return (f"'{user}' is a user of this machine: this looks like a system crontab "
            "(/etc/crontab, /etc/cron.d/*), whose sixth field is the user, not the "
            "command; import it with --system (or with --user-crontab if the command "
            f"really starts with '{user}')")


def _first_words(text: str) -> list[str]:
    """The word after the schedule of each entry (the user, in a system crontab)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or (_ASSIGN.match(line) and line[0] != "@"):
            continue
        parts = line.split(None, 2) if line.startswith("@") else line.split(None, 6)
        at = 1 if line.startswith("@") else 5
        if len(parts) > at and parts[0] != "@reboot":
            out.append(parts[at])
    return out


def convert(text: str, *, smtp_host: str = "localhost", system: bool | None = False,
            users: Callable[[str], bool] = is_user) -> Conversion:
    """Read a crontab's ``text``; every entry becomes a task or a :class:`Skipped`.

    Fields are separated by any run of blanks (spaces or tabs, as Debian ships
    ``/etc/crontab``). ``system``: ``True`` reads the user field after the schedule;
    ``False`` reads none; ``None`` (not said): when the first command word of every entry
    is a user of this machine (``users``), the file is a system crontab read without
    ``--system`` and every entry is refused with that hint rather than imported with the
    user glued to its command; when only some are, a note names their lines."""
    from cronfleet.cron import CronSyntaxError, parse

    out = Conversion()
    env: dict[str, str] = {}
    tz: str | None = None
    mailto: list[str] | None = None
    shell: str | None = None
    taken: set[str] = set()
    seen_users: set[str] = set()
    firsts = _first_words(text)
    looks_system = system is None and bool(firsts) and all(users(w) for w in firsts)
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
            parts = line.split(None, 5)  # any run of blanks: spaces or tabs
            if len(parts) < 6:
                out.skipped.append(Skipped(number, raw, "neither an entry (five time fields "
                                                        "and a command) nor a NAME=value "
                                                        "setting"))
                continue
            schedule, command = " ".join(parts[:5]), parts[5]
        first, *after = command.split(None, 1) or [""]
        if system and first:
            if not after:
                out.skipped.append(Skipped(number, raw, f"no command after the user "
                                                        f"{first!r}"))
                continue
            seen_users.add(first)
            command = after[0].strip()
        elif system is None and first and users(first):
            if looks_system:
                out.skipped.append(Skipped(number, raw, _glued(first)))
                continue
            out.notes.append(f"line {number}: '{first}' is also a user of this machine: if "
                             "the file is a system crontab, import it with --system")
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
    if seen_users:
        out.notes.append(f"the user column ({', '.join(sorted(seen_users))}) is not kept: "
                         "every command runs as the user of the cronfleet process")
        strangers = sorted(u for u in seen_users if not users(u))
        if strangers:
            out.notes.append(f"not a user of this machine: {', '.join(strangers)} (check the "
                             "file is a system crontab)")
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
