"""Command jobs: run a program on a schedule, in its own process group, with a timeout,
capped output streamed into the run, secrets in its environment, and no orphans.

:class:`CommandJob` is an async handler: the scheduler claims, leases, retries (the job's
``retry``), records and alerts it like any other job. One :class:`CommandRuntime` holds
what command jobs of a process share: the secrets vault and the *warden*.

How a run goes:

1. ``${secrets.NAME}`` references in the argv and the ``env`` values are resolved from the
   vault right before the start; their values are redacted (:func:`redactor`) from every
   text the run keeps: argv, output lines, errors.
2. The run's row is written (``RunContext.save``) so ``CRONFLEET_RUN_ID`` is known; the
   environment is the scheduler's minus every ``CRONFLEET_*`` variable (the vault key never
   reaches a command), plus ``env``, plus the run's identity (``CRONFLEET_JOB``,
   ``CRONFLEET_SLOT``, ``CRONFLEET_RUN_ID``, ``CRONFLEET_FENCING_TOKEN``,
   ``CRONFLEET_TRIGGERED_BY``, ``CRONFLEET_IS_CATCHUP``, ``CRONFLEET_ATTEMPT``).
3. The program starts in a new session (its own process group, stdin ``/dev/null``),
   forked and exec'd in one of the runtime's spawn threads (a fork of a large process
   takes milliseconds: the event loop does not wait for it); its group id is registered
   with the warden. stdout and stderr are read as they arrive into
   the run's log (``[stdout] line`` / ``[stderr] line``), at most ``max_output`` bytes:
   the first half, a ``[output cut: ...]`` line, the last half. The run's row is rewritten
   every second while new output arrives.
4. Past ``timeout`` (and on cancellation or shutdown) the group gets SIGTERM, then SIGKILL
   after ``kill_grace``. When the program's main process exits, whatever it left running
   in its group is killed (the group is the job; ``setsid`` escapes it deliberately).
5. The result records the argv (redacted), exit code or signal, duration, peak RSS
   (the main process's ``VmHWM``, sampled after 20 ms, 200 ms and then every second;
   ``null`` for a command that ended sooner), output sizes and what was cut. An exit
   code outside ``success_codes`` raises :class:`CommandFailed` (the run fails, its
   ``result`` kept); a timeout raises :class:`CommandTimedOut` (``timed_out``).

The warden: one tiny Python process per runtime, started before the first command,
holding the read end of a pipe whose only write end is in the scheduler. Each command's
process group is announced to it at the start and withdrawn at the end. When the
scheduler dies -- even ``kill -9`` -- the kernel closes the pipe; the warden sees
end-of-file and sends SIGTERM to every group still announced, then SIGKILL after their
``kill_grace``, so no command outlives its scheduler by more than ``kill_grace``
(well inside the run's lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets as _secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from cronfleet.clock import Clock, SystemClock, slot_text
from cronfleet.secrets import (
    DEFAULT_NAMESPACE,
    Keyring,
    Redactor,
    SecretError,
    Vault,
    expand,
    references,
)
from cronfleet.spec import DEFAULT_KILL_GRACE, DEFAULT_MAX_OUTPUT

if TYPE_CHECKING:
    from cronfleet.cron import CronExpr
    from cronfleet.model import Job, RunContext
    from cronfleet.spec import JobSpec
    from cronfleet.store.base import Store

__all__ = [
    "DEFAULT_KILL_GRACE",
    "DEFAULT_MAX_OUTPUT",
    "CommandFailed",
    "CommandJob",
    "CommandJobInvalid",
    "CommandRuntime",
    "CommandTimedOut",
    "OutputLog",
    "default_runtime",
    "redactor",
]

SAVE_EVERY = 1.0  # seconds between rewrites of a running command's row (new output only)
RSS_SAMPLES = (0.02, 0.18)  # the first samples of a command's peak RSS, then every second
PIECE = 16 * 1024  # a line longer than this is kept in pieces
READ = 64 * 1024
BACKSTOP = 5.0  # the Job's timeout: the command's + kill_grace + this (the runtime's net)
SPAWN_THREADS = 4  # commands forked and exec'd at once, off the event loop
PIPE_GRACE = 1.0  # after the exit, how long output pipes held by escaped processes are read


class CommandJobInvalid(ValueError):
    """Invalid fields of a :class:`CommandJob`; ``problems`` lists ``(key, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{k}: {m}" for k, m in problems))
        self.problems = problems


class CommandFailed(Exception):
    """The command did not succeed (exit code outside ``success_codes``, a signal, or it
    could not start); ``result`` holds the run's record."""

    log_traceback = False  # the run's log says what happened; a traceback adds nothing

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


class CommandTimedOut(TimeoutError):
    """The command ran past its timeout and was stopped; ``result`` holds the record."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


def redactor(values: Sequence[str]) -> Callable[[str], str]:
    """The one place command jobs redact secret values (every stored text goes through
    it): today :class:`cronfleet.secrets.Redactor`."""
    return Redactor(values)


# -- the output kept in the run's log ------------------------------------------------------


CUT_MARK = "[output cut:"  # the line marking dropped output (the dashboard highlights it)


class OutputLog:
    """stdout and stderr lines in ``logs`` (from index ``len(logs)`` at creation), at most
    ``limit`` bytes: the first half as it arrives, then a rolling last half; when lines
    were dropped between them, one ``[output cut: ...]`` line marks the gap."""

    def __init__(self, logs: list[str], limit: int, redact: Callable[[str], str]) -> None:
        self.logs = logs
        self.base = len(logs)
        self.redact = redact
        self.head_budget = limit // 2
        self.tail_budget = limit - self.head_budget
        self.head_used = 0
        self.head_lines = 0
        self.tail: deque[tuple[str, int]] = deque()
        self.tail_used = 0
        self.cut_lines = 0
        self.cut_bytes = 0
        self.tailing = False
        self.pending: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        self.sizes: dict[str, int] = {"stdout": 0, "stderr": 0}
        self.dirty = False

    def feed(self, stream: str, data: bytes) -> None:
        self.sizes[stream] += len(data)
        buf = self.pending[stream] + data
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            self._line(stream, buf[start:end])
            start = end + 1
        rest = buf[start:]
        while len(rest) > PIECE:
            self._line(stream, rest[:PIECE])
            rest = rest[PIECE:]
        self.pending[stream] = rest

    def close(self) -> None:
        for stream, rest in self.pending.items():
            if rest:
                self._line(stream, rest)
            self.pending[stream] = b""
        self.sync()

    def note(self, text: str) -> None:
        """A line of cronfleet's own (a signal sent) in its place among the output: the
        log's lines from ``base`` on belong to this object while the command runs."""
        self._line("", text.encode())

    def _line(self, stream: str, raw: bytes) -> None:
        size = len(raw) + 1
        self.dirty = True
        prefix = f"[{stream}] " if stream else ""
        if not self.tailing and self.head_used + size <= self.head_budget:
            self.head_used += size
            self.head_lines += 1
            self.logs.append(prefix + self.redact(raw.decode("utf-8", "replace")))
            return
        self.tailing = True
        tail = self.tail
        tail.append((prefix + raw.decode("utf-8", "replace"), size))
        self.tail_used += size
        while self.tail_used > self.tail_budget and tail:
            _, dropped = tail.popleft()
            self.tail_used -= dropped
            self.cut_lines += 1
            self.cut_bytes += dropped

    @property
    def cut(self) -> bool:
        return self.cut_lines > 0

    def sync(self) -> None:
        """Put the kept last half (and the cut mark) into ``logs``."""
        if not self.tailing:
            return
        mark = ([f"{CUT_MARK} {self.cut_lines} lines, {self.cut_bytes} bytes not kept "
                 f"(max_output {self.head_budget + self.tail_budget} bytes: the first and "
                 f"last halves are kept)]"] if self.cut else [])
        self.logs[self.base + self.head_lines:] = mark + [self.redact(t) for t, _ in self.tail]


# -- the warden ------------------------------------------------------------------------------

# Runs as `python -I -S -c WARDEN TOKEN`: reads "+<pgid> <grace>" / "-<pgid>" lines; at
# end-of-file (the scheduler is gone) it stops every announced group and the group of every
# process that carries this runtime's mark in its environment (WARDEN_MARK=TOKEN/grace, set
# on every command: a command forked but not announced yet when the scheduler was killed --
# on a loaded host it may have run for a while by then -- is found that way): SIGTERM,
# then SIGKILL after the longest grace. Ignores SIGINT/SIGTERM/SIGHUP so a terminal's ^C
# or a stop of the scheduler's own group does not take it away before it has done its job.
WARDEN_MARK = "CRONFLEET_WARDEN"
WARDEN = r"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
groups = {}
for line in sys.stdin.buffer:
    parts = line.split()
    if not parts:
        continue
    op, pgid = parts[0][:1], int(parts[0][1:])
    if op == b"+":
        groups[pgid] = float(parts[1]) if len(parts) > 1 else 10.0
    else:
        groups.pop(pgid, None)
mark = ("%s=%s/" % (sys.argv[1], sys.argv[2])).encode()
for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
    if not pid.isdigit():
        continue
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            found = [v for v in f.read().split(b"\0") if v.startswith(mark)]
        if found:
            groups.setdefault(os.getpgid(int(pid)), float(found[0][len(mark):]))
    except (OSError, ValueError):
        pass
def send(sig):
    alive = {}
    for pgid, grace in groups.items():
        try:
            os.killpg(pgid, sig)
            alive[pgid] = grace
        except (ProcessLookupError, PermissionError):
            pass
    return alive
groups = send(signal.SIGTERM)
end = time.monotonic() + max(groups.values(), default=0.0)
while groups and time.monotonic() < end:
    time.sleep(0.1)
    groups = send(0)
send(signal.SIGKILL)
"""


class Warden:
    """The scheduler side of the warden process (see the module's docstring)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = _secrets.token_hex(8)  # this runtime's mark on its commands
        self._lock = threading.Lock()  # the spawn threads announce, the loop withdraws

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                try:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-I", "-S", "-c", WARDEN, WARDEN_MARK, self.token],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True, close_fds=True, bufsize=0,
                    )
                except OSError:
                    self.proc = None
            return self.proc

    def _send(self, line: str) -> bool:
        proc = self._ensure()
        if proc is None or proc.stdin is None:
            return False
        try:  # one write of a short line: atomic on a pipe, whichever thread sends it
            os.write(proc.stdin.fileno(), line.encode())
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def start(self) -> bool:
        """Start the warden process if it is not running; whether it runs."""
        return self._ensure() is not None

    def mark(self, grace: float) -> dict[str, str]:
        """The environment entry that tells the warden a process is one of this runtime's
        commands, and its grace."""
        return {WARDEN_MARK: f"{self.token}/{grace:g}"}

    def watch(self, pgid: int, grace: float) -> bool:
        return self._send(f"+{pgid} {grace:g}\n")

    def release(self, pgid: int) -> None:
        if self.proc is not None:
            self._send(f"-{pgid}\n")

    def close(self) -> None:
        """Stop the warden (nothing is announced any more: it exits at once)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


# -- the shared runtime -------------------------------------------------------------------


class CommandRuntime:
    """What command jobs of a process share: the vault (``store``: a store URL whose
    secrets table backs it, or pass ``vault``) and the warden."""

    def __init__(self, *, store: str | Store | None = None, vault: Vault | None = None,
                 keyring: Keyring | None = None, clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()  # the wall time a process starts at
        self._vault = vault
        self._keyring = keyring
        self.warden = Warden()
        self._spawner: ThreadPoolExecutor | None = None

    def spawner(self) -> ThreadPoolExecutor:
        """The threads that fork and exec commands (``SPAWN_THREADS``): a fork costs
        milliseconds in a large process, and the event loop must not wait for it."""
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(SPAWN_THREADS,
                                               thread_name_prefix="cronfleet-spawn")
        return self._spawner

    @property
    def vault(self) -> Vault | None:
        if self._vault is None and self.store is not None:
            from cronfleet.store.factory import open_secret_store

            self._vault = Vault(open_secret_store(self.store), self._keyring, clock=self.clock)
        return self._vault

    async def aclose(self) -> None:
        self.warden.close()
        spawner, self._spawner = self._spawner, None
        if spawner is not None:
            spawner.shutdown(wait=False)
        if self._vault is not None:
            await self._vault.store.close()


_default: CommandRuntime | None = None


def default_runtime() -> CommandRuntime:
    """The process-wide runtime of jobs built without one (no vault)."""
    global _default
    if _default is None:
        _default = CommandRuntime()
    return _default


def _inherited_env() -> dict[str, str]:
    """The scheduler's environment without any ``CRONFLEET_*`` variable (the vault's key
    among them)."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("CRONFLEET_")}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- the job -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CommandJob:
    """A program as a job handler.

    ``command``: the argv (``["pg_dump", "-Fc", "app"]``), or one text run by ``/bin/sh -c``
    with ``shell=True``. ``env``: variables added to the environment (values may use
    ``${secrets.NAME}``, as may the argv; namespace ``namespace``). ``cwd``: the working
    directory. ``timeout``: seconds before SIGTERM to the process group (SIGKILL after
    ``kill_grace``). ``success_codes``: exit codes that count as success. ``max_output``:
    bytes of stdout + stderr kept in the run (first and last halves).

    Cancelling a run (``cronfleet cancel``, ``Overlap.REPLACE``) cancels this async
    handler: the process group gets SIGTERM, then SIGKILL after ``kill_grace``.
    """

    kind: ClassVar[str] = "command"  # the job kind the registry shows
    command: tuple[str, ...] | str
    shell: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float | None = None
    kill_grace: float = DEFAULT_KILL_GRACE
    success_codes: tuple[int, ...] = (0,)
    max_output: int = DEFAULT_MAX_OUTPUT
    namespace: str = DEFAULT_NAMESPACE
    runtime: CommandRuntime | None = field(default=None, repr=False)
    # built by from_spec: the fields were validated with the rest of the job's spec, only
    # the secret references are this class's to check
    spec_checked: InitVar[bool] = False

    def __post_init__(self, spec_checked: bool) -> None:
        if isinstance(self.command, list):
            object.__setattr__(self, "command", tuple(self.command))
        if isinstance(self.success_codes, list):
            object.__setattr__(self, "success_codes", tuple(self.success_codes))
        problems = self.problems(spec_checked=spec_checked)
        if problems:
            raise CommandJobInvalid(problems)
        object.__setattr__(self, "env", dict(self.env))

    def problems(self, *, spec_checked: bool = False) -> list[tuple[str, str]]:
        """``(key, message)`` for every invalid field: the command fields are checked by
        :func:`cronfleet.spec.check_command` (the rules every face shares; skipped when
        ``spec_checked``: :meth:`from_spec`), secret references here."""
        from cronfleet import spec
        from cronfleet.secrets import check_secret_name

        out: list[tuple[str, str]] = []
        if not spec_checked:
            fields = {k: getattr(self, k) for k in spec.COMMAND_KEYS}
            _, found = spec.check_command(fields)
            out += [(p.key, p.message) for p in found]
        if self.timeout is not None and not spec_checked:
            try:
                spec.duration(self.timeout, positive=True)
            except spec.FieldError as exc:
                out.append(("timeout", exc.message))
        if not out:
            for name in references(*self._texts()):
                problem = check_secret_name(name)
                if problem:
                    out.append(("secrets", f"${{secrets.{name}}}: {problem}"))
        return out

    def _texts(self) -> list[str]:
        argv = [self.command] if isinstance(self.command, str) else list(self.command)
        return argv + [v for v in self.env.values() if isinstance(v, str)]

    @classmethod
    def from_spec(cls, job_spec: JobSpec, *, runtime: CommandRuntime | None = None,
                  namespace: str | None = None) -> CommandJob:
        """The command of a validated :class:`~cronfleet.spec.JobSpec` (its command part
        and the job's ``timeout``). ``namespace``: the secrets' (API jobs: the team's)."""
        assert job_spec.command is not None, "not a command job spec"
        return cls(**job_spec.command.kwargs(), timeout=job_spec.timeout,
                   namespace=namespace or DEFAULT_NAMESPACE, runtime=runtime,
                   spec_checked=True)

    @property
    def argv_text(self) -> str:
        return self.command if isinstance(self.command, str) else shlex.join(self.command)

    def job(self, schedule: str | CronExpr | Sequence[str | CronExpr] | None, *, id: str,
            **options: Any) -> Job:
        """A :class:`~cronfleet.Job` that runs this command (``options`` as for
        :meth:`Job.create`). The Job's own timeout is a net behind this command's
        (``timeout + kill_grace + 5 s``): the command stops itself first, with its
        record."""
        from cronfleet.model import Job

        options.setdefault("description", self.argv_text[:2000])
        if self.job_timeout is not None:
            options["timeout"] = self.job_timeout
        return Job.create(schedule, self, id=id, **options)

    @property
    def job_timeout(self) -> float | None:
        """The timeout of the Job running this command: a net behind the command's own
        (``timeout + kill_grace + 5 s``), so the command stops itself first, with its
        record, and the lease covers the kill grace."""
        return None if self.timeout is None else self.timeout + self.kill_grace + BACKSTOP

    # -- running ---------------------------------------------------------------------

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        rt = self.runtime or default_runtime()
        refs = references(*self._texts())
        values: dict[str, str] = {}
        if refs:
            vault = rt.vault
            if vault is None:
                raise CommandFailed("secrets are referenced but no vault is configured; "
                                    "nothing was started", {"started": False})
            try:
                values = await vault.resolve(refs, self.namespace)
            except SecretError as exc:
                raise CommandFailed(f"{exc}; nothing was started", {"started": False}) from None
            except Exception as exc:  # the store did not answer: a retry may do better
                raise CommandFailed(f"cannot read secrets: {type(exc).__name__}: {exc}; "
                                    "nothing was started", {"started": False}) from None
        redact = redactor(list(values.values()))
        if isinstance(self.command, str):
            argv = ["/bin/sh", "-c", expand(self.command, values)]
        else:
            argv = [expand(a, values) for a in self.command]
        shown = [redact(a) for a in argv]
        run_id = await ctx.save(wait=True)
        env = _inherited_env()
        env.update({k: expand(v, values) for k, v in self.env.items()})
        env.update({
            "CRONFLEET_JOB": ctx.job_id,
            "CRONFLEET_SLOT": slot_text(ctx.slot),
            "CRONFLEET_RUN_ID": "" if run_id is None else str(run_id),
            "CRONFLEET_FENCING_TOKEN": "" if ctx.fencing_token is None
            else str(ctx.fencing_token),
            "CRONFLEET_TRIGGERED_BY": str(ctx.triggered_by),
            "CRONFLEET_IS_CATCHUP": "1" if ctx.is_catchup else "0",
            "CRONFLEET_ATTEMPT": str(ctx.attempt),
        })
        return await _Run(self, rt, ctx, argv, shown, env, redact).run()


def _spawn(argv: list[str], cwd: str | None, env: dict[str, str], warden: Warden,
           grace: float) -> tuple[subprocess.Popen[bytes], bool]:
    """Start the program in a new session (its own process group, no terminal), stdin
    ``/dev/null``, stdout and stderr piped, and announce its group to the warden at once
    (in this spawn thread: a scheduler killed before the loop saw the start still leaves
    no orphan). A fork and an exec: it does not wait for the program. The warden runs
    before the fork, and the command carries the warden's mark in its environment: killed
    between the fork and the announcement, the scheduler still leaves no orphan."""
    warden.start()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=cwd, env={**env, **warden.mark(grace)},
                            start_new_session=True, close_fds=True)
    return proc, warden.watch(proc.pid, grace)


def _kill_spawned(warden: Warden,
                  spawning: asyncio.Future[tuple[subprocess.Popen[bytes], bool]]) -> None:
    """A command that started after its run was cancelled: killed with its group."""
    if spawning.cancelled() or spawning.exception() is not None:
        return
    proc, _ = spawning.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    with contextlib.suppress(ChildProcessError):
        proc.returncode = _reap(proc.pid)
    warden.release(proc.pid)


def _reap(pid: int) -> int:
    """The exit code (negative: the signal) of ``pid``, which has exited: its pidfd was
    readable or it was SIGKILLed, so this does not wait."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _has_exited(pid: int) -> bool:
    """Without reaping it (its process group id stays taken until we do)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class _Run:
    """One attempt of a command: start, read, wait, stop; its record."""

    def __init__(self, job: CommandJob, rt: CommandRuntime, ctx: RunContext, argv: list[str],
                 shown: list[str], env: dict[str, str], redact: Callable[[str], str]) -> None:
        self.job, self.rt, self.ctx = job, rt, ctx
        self.argv, self.shown, self.env, self.redact = argv, shown, env, redact
        ctx.log(f"$ {shlex.join(shown)}")
        self.output = OutputLog(ctx.logs, job.max_output, redact)
        self.loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = self.loop.create_future()
        self.streams_open = 0
        self.streams_done = asyncio.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping: str | None = None  # why the group was signalled
        self.peak_rss_kb: int | None = None
        self.spawned_at: float | None = None

    def record(self, **extra: Any) -> dict[str, Any]:
        out = self.output
        spawned = (datetime.fromtimestamp(self.spawned_at, UTC).isoformat()
                   if self.spawned_at is not None else None)
        return {
            "argv": self.shown, "cwd": self.job.cwd,
            "pid": self.proc.pid if self.proc is not None else None, "spawned_at": spawned,
            "stdout_bytes": out.sizes["stdout"], "stderr_bytes": out.sizes["stderr"],
            "output_cut": {"lines": out.cut_lines, "bytes": out.cut_bytes} if out.cut
            else None,
            **extra,
        }

    async def run(self) -> dict[str, Any]:
        job, ctx = self.job, self.ctx
        began = time.monotonic()
        spawning = self.loop.run_in_executor(self.rt.spawner(), _spawn, self.argv, job.cwd,
                                             self.env, self.rt.warden, job.kill_grace)
        try:
            proc, watched = await asyncio.shield(spawning)
        except asyncio.CancelledError:  # it may start after all: end it
            spawning.add_done_callback(functools.partial(_kill_spawned, self.rt.warden))
            raise
        except OSError as exc:
            where = f" (cwd {job.cwd})" if job.cwd else ""
            message = self.redact(f"cannot start {self.shown[0]!r}{where}: "
                                  f"{exc.strerror or exc}")
            raise CommandFailed(message, self.record(started=False, error=message)) from None
        self.spawned_at = self.rt.clock.now()
        self.proc = proc
        pgid = proc.pid
        if not watched:
            self.output.note("warning: the warden is not running: this command would "
                             "outlive a killed scheduler")
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            assert pipe is not None
            self._read(name, pipe.fileno())
        waiter = self._wait_exit(proc.pid)
        saver = asyncio.ensure_future(self._save_loop(proc.pid))
        try:
            try:
                if job.timeout is not None:
                    async with asyncio.timeout(job.timeout):
                        await asyncio.shield(self.exited)
                else:
                    await asyncio.shield(self.exited)
            except TimeoutError:
                self.stopping = "timeout"
                await self._stop(pgid)
            except asyncio.CancelledError:
                self.stopping = "cancelled"
                await asyncio.shield(self._stop(pgid))
                raise
            # the main process has exited (a zombie still holding the group's id): end
            # what it left in its group, then reap it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            proc.returncode = _reap(proc.pid)
        finally:
            waiter()
            if proc.returncode is None:  # cancelled before the reap
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    proc.returncode = _reap(proc.pid)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PIPE_GRACE):
                    await self.streams_done.wait()
            self._close_streams()
            self.rt.warden.release(pgid)
            saver.cancel()
            self.output.close()
        duration = round(time.monotonic() - began, 6)
        code = proc.returncode
        sig = _signal_name(-code) if code < 0 else None
        record = self.record(
            exit_code=code if code >= 0 else None, signal=sig, duration=duration,
            peak_rss_kb=self.peak_rss_kb,
            timed_out=self.stopping == "timeout",
        )
        ended = f"exit code {code}" if sig is None else f"killed by {sig}"
        ctx.log(f"{ended} after {duration:.3f}s")
        if self.stopping == "timeout":
            record["ok"] = False
            raise CommandTimedOut(
                f"timed out after {job.timeout:g}s: SIGTERM sent to the process group"
                f"{f', SIGKILL after {job.kill_grace:g}s' if sig == 'SIGKILL' else ''} "
                f"({ended})", record)
        if sig is None and code in job.success_codes:
            record["ok"] = True
            return record
        record["ok"] = False
        expected = ("" if sig is not None
                    else f" (success codes: {', '.join(map(str, job.success_codes))})")
        raise CommandFailed(self.redact(f"{self.shown[0]}: {ended}{expected}"), record)

    # -- plumbing ----------------------------------------------------------------------

    def _read(self, name: str, fd: int) -> None:
        os.set_blocking(fd, False)
        self.streams_open += 1
        feed = self.output.feed

        def readable() -> None:
            try:
                data = os.read(fd, READ)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                feed(name, data)
                return
            self.loop.remove_reader(fd)
            self.streams_open -= 1
            if not self.streams_open:
                self.streams_done.set()

        self.loop.add_reader(fd, readable)

    def _close_streams(self) -> None:
        proc = self.proc
        assert proc is not None
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(ValueError, OSError):
                    self.loop.remove_reader(pipe.fileno())
                pipe.close()

    def _wait_exit(self, pid: int) -> Callable[[], None]:
        """Resolve ``self.exited`` when ``pid`` exits (without reaping it: its process
        group id stays taken until we do); returns the clean-up."""
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return self._poll_exit(pid)

        def ready() -> None:
            self.loop.remove_reader(pidfd)
            if not self.exited.done():
                self.exited.set_result(None)

        self.loop.add_reader(pidfd, ready)

        def done() -> None:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(pidfd)
            os.close(pidfd)

        return done

    def _poll_exit(self, pid: int) -> Callable[[], None]:
        """Without pidfds (Linux before 5.3): look every 20 ms."""
        handle: asyncio.TimerHandle | None = None

        def look() -> None:
            nonlocal handle
            if _has_exited(pid):
                if not self.exited.done():
                    self.exited.set_result(None)
            else:
                handle = self.loop.call_later(0.02, look)

        look()

        def done() -> None:
            if handle is not None:
                handle.cancel()

        return done

    async def _stop(self, pgid: int) -> None:
        """SIGTERM to the group, SIGKILL after ``kill_grace`` if the main process is
        still there."""
        grace = self.job.kill_grace
        self.output.note(f"{'timeout' if self.stopping == 'timeout' else 'stopping'}: "
                         f"SIGTERM to process group {pgid}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(self.exited)
        except TimeoutError:
            self.output.note(f"still running {grace:g}s after SIGTERM: SIGKILL to process "
                             f"group {pgid}")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            await asyncio.shield(self.exited)

    def _sample_rss(self, pid: int) -> None:
        """The main process's peak resident set so far (``VmHWM``). The kernel's
        ``ru_maxrss`` is not used: for a child of a large process it counts the parent's
        resident set at the exec."""
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        kb = int(line.split()[1])
                        if self.peak_rss_kb is None or kb > self.peak_rss_kb:
                            self.peak_rss_kb = kb
                        return
        except (OSError, ValueError, IndexError):
            return

    async def _save_loop(self, pid: int) -> None:
        """Sample the peak RSS (after 20 ms, 200 ms, then every second) and rewrite the
        run's row every second while new output arrives."""
        out = self.output
        for first in RSS_SAMPLES:
            await asyncio.sleep(first)
            self._sample_rss(pid)
        while True:
            await asyncio.sleep(SAVE_EVERY)
            self._sample_rss(pid)
            if out.dirty:
                out.dirty = False
                out.sync()
                await self.ctx.save()
