"""A scheduler that is ``kill -9``'d leaves no command running: its warden sees the pipe
close and ends every process group it was told about (SIGTERM, SIGKILL after the grace)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_command_job import alive

WORKER = Path(__file__).with_name("orphan_worker.py")


def _pids(path: Path, n: int, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            found = [int(p) for p in path.read_text().split()]
            if len(found) >= n:
                return found
        time.sleep(0.05)
    raise AssertionError(f"the command did not start: {path}")


def _scenario(tmp_path: Path, ignores_term: bool) -> tuple[list[int], float]:
    """One scheduler killed while its command runs: the command's processes still alive
    once the grace and 8 s more have passed, and how long the rest took to go."""
    pids = tmp_path / "pids"
    trap = "trap '' TERM; " if ignores_term else ""
    # the shell, a background child and a grandchild in a nested shell
    script = (f"{trap}sleep 300 & echo $! >> {pids}; "
              f"sh -c 'sleep 300 & echo $! >> {pids}; wait' & "
              f"echo $$ >> {pids}; wait")
    grace = 2.0
    proc = subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / "cf.db"), script,
                             str(grace)], stdout=subprocess.PIPE, text=True)
    try:
        found = _pids(pids, 3)
        assert all(alive(p) for p in found)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
        while any(alive(p) for p in found) and time.monotonic() - killed < grace + 8:
            time.sleep(0.05)
        return [p for p in found if alive(p)], time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in (_pids(pids, 0, 1) if pids.exists() else []):
            if alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("ignores_term", [False, True])
def test_kill_9_of_the_scheduler_leaves_no_orphan(tmp_path: Path, ignores_term: bool) -> None:
    left, gone_after = _scenario(tmp_path, ignores_term)
    assert not left, "a command outlived its scheduler"
    if ignores_term:  # SIGTERM ignored: SIGKILL once the grace has passed
        assert gone_after >= 2.0 - 0.5


def test_a_command_not_yet_announced_is_found_by_its_mark() -> None:
    """The scheduler killed between a command's fork and its announcement (on a loaded host
    the command may have run for a while by then): the warden still ends it, found by the
    mark in its environment; a process without the mark is left alone."""
    from cronfleet.jobs.command import Warden

    warden = Warden()
    assert warden.start()
    marked = subprocess.Popen(["sleep", "300"], env={**os.environ, **warden.mark(1.0)},
                              start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        warden.close()  # the pipe closes as if the scheduler died; nothing was announced
        deadline = time.monotonic() + 10
        while marked.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marked.poll() is not None, "an unannounced command outlived its scheduler"
        time.sleep(0.3)
        assert other.poll() is None
    finally:
        for p in (marked, other):
            if p.poll() is None:
                p.kill()
            p.wait()
