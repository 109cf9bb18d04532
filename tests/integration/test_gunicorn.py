"""gunicorn with 3 sync workers, each starting the same scheduler in the background
(post_worker_init): every slot runs once, counted in the ledger and by the handlers."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("gunicorn")
pytestmark = pytest.mark.slow

APP = '''
import os
from pathlib import Path

from cronfleet import Scheduler

HERE = Path(__file__).parent
scheduler = Scheduler(f"sqlite:///{HERE / 'gun.db'}", shutdown_grace="5s")


@scheduler.job("1s", id="beat")
def beat(ctx):
    # handler-side evidence: one line per run, appended atomically
    line = f"{ctx.slot.isoformat()} {os.getpid()}\\n".encode()
    fd = os.open(HERE / "beats.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{scheduler.instance_id} running={scheduler.running}".encode()]
'''

CONF = '''
workers = 3
worker_class = "sync"
graceful_timeout = 20


def post_worker_init(worker):
    # each worker process starts its own scheduler (threads do not survive a fork:
    # start it here, or at import without --preload)
    from gunapp import scheduler
    scheduler.start_in_background()
    with open("started.txt", "a") as f:
        f.write(f"{scheduler.instance_id}\\n")


def worker_exit(server, worker):
    from gunapp import scheduler
    scheduler.stop()
'''


def _ledger(db: Path) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(db)
    try:
        return [(str(s), str(st), str(i)) for s, st, i in con.execute(
            "SELECT slot, status, instance_id FROM runs WHERE job_id = 'beat' ORDER BY slot")]
    finally:
        con.close()


def test_three_gunicorn_workers_each_slot_once(tmp_path: Path) -> None:
    (tmp_path / "gunapp.py").write_text(textwrap.dedent(APP))
    (tmp_path / "gunicorn.conf.py").write_text(textwrap.dedent(CONF))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-b", "127.0.0.1:0",
         "gunapp:app"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        started = tmp_path / "started.txt"
        while time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            if started.exists() and len(started.read_text().split()) == 3:
                break
            time.sleep(0.1)
        instances = started.read_text().split()
        assert len(set(instances)) == 3, instances
        time.sleep(8)  # every worker's timer competes for these slots
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out.decode()

    beats = (tmp_path / "beats.txt").read_text().split("\n")
    slots = [line.split()[0] for line in beats if line]
    assert len(slots) >= 6
    assert len(slots) == len(set(slots)), "a slot ran twice"
    # every second between the first and the last run: no slot lost
    first, last = datetime.fromisoformat(min(slots)), datetime.fromisoformat(max(slots))
    expected = {(first + timedelta(seconds=i)).isoformat()
                for i in range(int((last - first).total_seconds()) + 1)}
    assert set(slots) == expected
    rows = _ledger(tmp_path / "gun.db")
    succeeded = [r for r in rows if r[1] == "succeeded"]
    assert len(succeeded) == len(slots)  # the ledger agrees with the handlers
    assert {r[2] for r in succeeded} <= set(instances)
    assert all(r[1] == "succeeded" for r in rows), rows  # nothing interrupted or lost
