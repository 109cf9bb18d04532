"""Command jobs with real subprocesses: exit codes, signals, timeouts that reach a tree of
children, output caps, the run's identity in the environment, output visible while the
command runs, retries, and secrets that never reach a stored row."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from cronfleet import RetryPolicy, Scheduler
from cronfleet.jobs.command import CommandJob, CommandJobInvalid, CommandRuntime
from cronfleet.model import RunRecord, RunStatus
from cronfleet.secrets import KEY_ENV, Keyring, Vault, generate_key
from cronfleet.store.factory import open_secret_store


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def all_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The processes of ``pids`` still running after ``timeout`` (other processes' state:
    polled)."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return [p for p in pids if alive(p)]


async def run_one(tmp_path: Path, job: CommandJob, **options: object) -> RunRecord:
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(job.job("@daily", id="cmd", **options))  # type: ignore[arg-type]
    async with s:
        run = await s.trigger_async("cmd", wait=True)
        assert run.id is not None
        stored = await s.store.get_run(run.id)
    assert stored is not None
    return stored


async def test_exit_codes_and_success_codes(tmp_path: Path) -> None:
    ok = await run_one(tmp_path, CommandJob(["sh", "-c", "echo hello; echo oops >&2"]))
    assert ok.status is RunStatus.SUCCEEDED
    assert ok.result["exit_code"] == 0 and ok.result["signal"] is None
    assert ok.result["argv"] == ["sh", "-c", "echo hello; echo oops >&2"]
    assert "[stdout] hello" in ok.logs and "[stderr] oops" in ok.logs
    assert ok.result["stdout_bytes"] == 6 and ok.result["stderr_bytes"] == 5
    assert ok.result["duration"] > 0

    failed = await run_one(tmp_path, CommandJob(["sh", "-c", "exit 3"]))
    assert failed.status is RunStatus.FAILED
    assert failed.error == "CommandFailed: sh: exit code 3 (success codes: 0)"
    assert failed.result["exit_code"] == 3 and failed.result["ok"] is False
    assert not any("Traceback" in line for line in failed.logs)

    accepted = await run_one(tmp_path, CommandJob(["sh", "-c", "exit 3"], success_codes=(0, 3)))
    assert accepted.status is RunStatus.SUCCEEDED and accepted.result["exit_code"] == 3


async def test_a_signal_is_recorded(tmp_path: Path) -> None:
    run = await run_one(tmp_path, CommandJob("kill -USR1 $$", shell=True))
    assert run.status is RunStatus.FAILED
    assert run.result["signal"] == "SIGUSR1" and run.result["exit_code"] is None
    assert run.error == "CommandFailed: /bin/sh: killed by SIGUSR1"


async def test_timeout_terminates_the_whole_tree(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = (f"sleep 60 & echo $! >> {pids}; "
              f"sh -c 'sleep 60 & echo $! >> {pids}; wait' & echo $! >> {pids}; "
              f"echo $$ >> {pids}; wait")
    run = await run_one(tmp_path, CommandJob(script, shell=True, timeout=1.0, kill_grace=5))
    assert run.status is RunStatus.TIMED_OUT
    assert run.reason == "timeout"
    assert run.result["timed_out"] is True and run.result["signal"] == "SIGTERM"
    assert run.error.startswith("timed out after 1s: SIGTERM sent to the process group")
    found = [int(p) for p in pids.read_text().split()]
    assert len(found) == 4
    assert not await all_gone(found)


async def test_sigkill_after_the_grace_when_sigterm_is_ignored(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"trap '' TERM; sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    started = time.monotonic()
    run = await run_one(tmp_path, CommandJob(script, shell=True, timeout=0.5, kill_grace=1))
    took = time.monotonic() - started
    assert run.status is RunStatus.TIMED_OUT
    assert run.result["signal"] == "SIGKILL"
    assert "SIGKILL after 1s" in (run.error or "")
    assert any("SIGKILL to process group" in line for line in run.logs)
    assert took >= 1.5
    found = [int(p) for p in pids.read_text().split()]
    assert not await all_gone(found)


async def test_50_mib_of_output_keeps_the_first_and_last_halves(tmp_path: Path) -> None:
    lines = 50 * 1024 * 1024 // 100  # lines of exactly 100 bytes
    code = ("import sys\nw = sys.stdout.write\n"
            f"for i in range({lines}):\n    w(f'line {{i:08d}} ' + 'x' * 85 + '\\n')\n")
    run = await run_one(tmp_path, CommandJob([sys.executable, "-c", code]))
    assert run.status is RunStatus.SUCCEEDED
    assert run.result["stdout_bytes"] == 50 * 1024 * 1024
    output = [line for line in run.logs if line.startswith("[stdout]")]
    kept = sum(len(line) - len("[stdout] ") + 1 for line in output)
    assert kept <= 1024 * 1024
    assert kept > 1024 * 1024 - 400  # both halves are full (whole lines)
    assert output[0] == f"[stdout] line {0:08d} " + "x" * 85
    assert output[-1] == f"[stdout] line {lines - 1:08d} " + "x" * 85
    marks = [line for line in run.logs if line.startswith("[output cut:")]
    assert len(marks) == 1
    cut = run.result["output_cut"]
    assert cut["bytes"] == 50 * 1024 * 1024 - kept
    assert cut["lines"] == lines - len(output)
    assert f"{cut['lines']} lines, {cut['bytes']} bytes not kept" in marks[0]
    # the mark sits between the halves
    at = run.logs.index(marks[0])
    assert run.logs[at - 1].startswith("[stdout] line") and run.logs[at + 1].startswith(
        "[stdout] line")
    row = sqlite3.connect(tmp_path / "cf.db").execute(
        "SELECT length(logs) FROM runs WHERE id = ?", (run.id,)).fetchone()
    assert row[0] < 1.2 * 1024 * 1024


async def test_the_environment_carries_the_runs_identity(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv(KEY_ENV, generate_key())  # the vault's key: never given to commands
    monkeypatch.setenv("CRONFLEET_STORE", "sqlite:///x.db")
    monkeypatch.setenv("INHERITED", "yes")
    workdir = tmp_path / "work"
    workdir.mkdir()
    job = CommandJob(["sh", "-c", "env; echo cwd=$(pwd)"], env={"GREETING": "hi there"},
                     cwd=str(workdir))
    run = await run_one(tmp_path, job)
    assert run.status is RunStatus.SUCCEEDED, run.logs
    env = dict(line.removeprefix("[stdout] ").split("=", 1) for line in run.logs
               if line.startswith("[stdout] ") and "=" in line)
    assert env["CRONFLEET_JOB"] == "cmd"
    assert env["CRONFLEET_RUN_ID"] == str(run.id)
    assert env["CRONFLEET_FENCING_TOKEN"] == str(run.fencing_token)
    # a manual run's slot to the millisecond, as the store keeps it (no microseconds)
    assert env["CRONFLEET_SLOT"].startswith(run.slot.strftime("%Y-%m-%dT%H:%M:%S"))
    assert re.fullmatch(r"[-\dT:]{19}(\.\d{3})?Z", env["CRONFLEET_SLOT"])
    assert env["CRONFLEET_TRIGGERED_BY"] == "manual"
    assert env["CRONFLEET_IS_CATCHUP"] == "0"
    assert env["CRONFLEET_ATTEMPT"] == "1"
    assert env["GREETING"] == "hi there" and env["INHERITED"] == "yes"
    assert KEY_ENV not in env and "CRONFLEET_STORE" not in env
    assert env["cwd"] == str(workdir)


async def test_output_is_visible_while_the_command_runs(tmp_path: Path) -> None:
    go = tmp_path / "go"
    job = CommandJob(["sh", "-c", f"echo first; while [ ! -e {go} ]; do sleep 0.05; done; "
                                  "echo second"])
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    s.add_job(job.job("@daily", id="cmd"))
    async with s:
        task = asyncio.ensure_future(s.trigger_async("cmd", wait=True))
        deadline = time.monotonic() + 15
        seen = None
        while time.monotonic() < deadline:
            runs = await s.store.list_runs("cmd", limit=1)
            if runs and "[stdout] first" in runs[0].logs:
                seen = runs[0]
                break
            await asyncio.sleep(0.1)
        assert seen is not None, "the first line was not stored while the command ran"
        assert seen.status is RunStatus.RUNNING
        assert "[stdout] second" not in seen.logs
        go.touch()
        run = await task
    assert run.status is RunStatus.SUCCEEDED
    assert run.logs.index("[stdout] first") < run.logs.index("[stdout] second")


async def test_retry_runs_the_command_again(tmp_path: Path) -> None:
    count = tmp_path / "count"
    script = f"echo x >> {count}; [ $(wc -l < {count}) -ge 2 ]"
    run = await run_one(tmp_path, CommandJob(script, shell=True),
                        retry=RetryPolicy(attempts=3, backoff="fixed", delay=0.1))
    assert run.status is RunStatus.SUCCEEDED
    assert run.attempt == 2
    assert count.read_text().count("x") == 2
    assert any(line.startswith("attempt 1/3 failed") for line in run.logs)


async def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    run = await run_one(tmp_path, CommandJob(["/nonexistent/program", "x"]))
    assert run.status is RunStatus.FAILED
    assert run.error == ("CommandFailed: cannot start '/nonexistent/program': "
                         "No such file or directory")
    run = await run_one(tmp_path, CommandJob(["true"], cwd=str(tmp_path / "missing")))
    assert run.status is RunStatus.FAILED
    assert f"(cwd {tmp_path / 'missing'})" in (run.error or "")


def test_invalid_fields_are_all_reported() -> None:
    with pytest.raises(CommandJobInvalid) as info:
        CommandJob("echo hi", env={"1BAD": "x", "CRONFLEET_JOB": "y"}, success_codes=(300,),
                   max_output=10, kill_grace="soon")  # type: ignore[arg-type]
    keys = [k for k, _ in info.value.problems]
    assert keys == ["command", "env.1BAD", "env.CRONFLEET_JOB", "kill_grace", "success_codes",
                    "max_output"]
    with pytest.raises(CommandJobInvalid, match="shell = true takes the command as one text"):
        CommandJob(["echo", "hi"], shell=True)
    with pytest.raises(CommandJobInvalid, match=r"\$\{secrets.1x\}"):
        CommandJob(["echo", "${secrets.1x}"])


def _every_row(path: Path) -> str:
    conn = sqlite3.connect(path)
    out = []
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        out += [repr(row) for row in conn.execute(f'SELECT * FROM "{table}"')]
    conn.close()
    return "\n".join(out)


TOKEN = "tok-5ecr3t-9f8e7d6c5b4a"


@pytest.mark.parametrize("outcome", ["success", "failure", "timeout"])
async def test_secrets_reach_the_command_and_no_stored_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
        outcome: str) -> None:
    db = tmp_path / "cf.db"
    vault = Vault(open_secret_store(f"sqlite:///{db}"), Keyring.from_env({KEY_ENV: generate_key()}))
    await vault.set("TOKEN", TOKEN)
    proof = tmp_path / "proof"
    tail = {"success": "exit 0", "failure": "exit 4", "timeout": "sleep 30"}[outcome]
    job = CommandJob(
        ["sh", "-c", f'printf %s "$TOKEN" > {proof}; echo "token=$TOKEN arg=$1"; '
                     f'echo "$TOKEN" >&2; {tail}', "sh", "${secrets.TOKEN}"],
        env={"TOKEN": "${secrets.TOKEN}", "URL": "https://u:${secrets.TOKEN}@x"},
        timeout=1.0 if outcome == "timeout" else None, kill_grace=1,
        runtime=CommandRuntime(vault=vault))
    with caplog.at_level(logging.DEBUG):
        run = await run_one(tmp_path, job)
    await vault.store.close()
    assert proof.read_text() == TOKEN  # the command had the value
    assert run.status.value == {"success": "succeeded", "failure": "failed",
                                "timeout": "timed_out"}[outcome]
    assert "[stdout] token=[REDACTED] arg=[REDACTED]" in run.logs
    assert "[stderr] [REDACTED]" in run.logs
    assert run.result["argv"][-1] == "[REDACTED]"
    captured = capsys.readouterr()
    for text in (_every_row(db), json.dumps(run.to_dict()), caplog.text, captured.out,
                 captured.err):
        assert TOKEN not in text


async def test_an_unknown_secret_starts_nothing(tmp_path: Path) -> None:
    vault = Vault(open_secret_store(f"sqlite:///{tmp_path / 'cf.db'}"),
                  Keyring.from_env({KEY_ENV: generate_key()}))
    proof = tmp_path / "proof"
    job = CommandJob(["sh", "-c", f"touch {proof}"], env={"X": "${secrets.MISSING}"},
                     runtime=CommandRuntime(vault=vault))
    run = await run_one(tmp_path, job)
    await vault.store.close()
    assert run.status is RunStatus.FAILED
    assert "MISSING" in (run.error or "") and "nothing was started" in (run.error or "")
    assert not proof.exists()


def test_os_pidfd_is_used_here() -> None:
    # the tests above exercise the pidfd path; the polling fallback is for old kernels
    assert hasattr(os, "pidfd_open")


async def test_a_stop_reaches_the_commands_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = CommandJob(f"sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait", shell=True,
                     kill_grace=2)
    s = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False,
                  shutdown_grace="0.5s")
    s.add_job(job.job("@daily", id="cmd"))
    await s.start()
    run = await s.trigger_async("cmd", wait=False)
    deadline = time.monotonic() + 15
    while (not pids.exists() or len(pids.read_text().split()) < 2) \
            and time.monotonic() < deadline:  # noqa: ASYNC110 (another process's file)
        await asyncio.sleep(0.05)
    found = [int(p) for p in pids.read_text().split()]
    assert all(alive(p) for p in found)
    await s.stop()
    assert not await all_gone(found)
    s2 = Scheduler(store=f"sqlite:///{tmp_path / 'cf.db'}", timers=False)
    async with s2:
        stored = await s2.store.get_run(run.id) if run.id is not None else None
    assert stored is not None and stored.status is RunStatus.INTERRUPTED
    assert any("SIGTERM to process group" in line for line in stored.logs)
