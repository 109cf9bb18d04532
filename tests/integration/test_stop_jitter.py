"""A real scheduler process stopped (SIGTERM / SIGINT) at random moments while its claimed
slots wait out their jitter, and started again, several times (#24): every claimed slot
ends with exactly one final row, none stays ``pending`` or ``running``, and the handler
side agrees with the ledger (a run recorded by a handler has its ``succeeded`` row, a
``succeeded`` row has its handler run, nothing ran twice)."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"succeeded", "failed", "timed_out", "skipped", "interrupted", "cancelled"}


def start(db: Path, record: Path, log: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos.worker", "--store", f"sqlite:///{db}",
         "--record", str(record), "--jobs", "2", "--every", "1s", "--sleep", "0.2",
         "--jitter", "0.9,1.5", "--log-level", "INFO"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(log, "a"), text=True,  # noqa: SIM115
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("READY"):
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"worker not ready: {log.read_text()[-3000:]}")


def test_stops_during_the_jitter_leave_one_final_row_per_claimed_slot(tmp_path: Path) -> None:
    db, record, log = tmp_path / "cronfleet.db", tmp_path / "runs", tmp_path / "worker.log"
    rng = random.Random()
    for i in range(7):
        proc = start(db, record, log)
        time.sleep(rng.uniform(0.5, 3.0))  # a random moment: some slot waits out its jitter
        proc.send_signal(signal.SIGTERM if i % 2 == 0 else signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 0, log.read_text()[-3000:]
    con = sqlite3.connect(db)
    claims = con.execute("SELECT job_id, slot FROM claims WHERE slot IS NOT NULL").fetchall()
    rows = con.execute("SELECT job_id, slot, status, reason FROM runs").fetchall()
    con.close()
    by_slot: dict[tuple[str, int], list[tuple[str, str | None]]] = {}
    for job, slot, status, reason in rows:
        by_slot.setdefault((job, slot), []).append((status, reason))
    handled = Counter(
        (parts[0], int(parts[1]))
        for parts in (line.split() for line in record.read_text().splitlines())
    )
    assert claims, "nothing was claimed"
    open_rows = [(k, v) for k, v in by_slot.items() if any(s not in TERMINAL for s, _ in v)]
    assert open_rows == [], f"slots left open: {open_rows[:10]}"
    not_one = [(k, by_slot.get(k)) for k in claims
               if sum(s in TERMINAL for s, _ in by_slot.get(k, [])) != 1]
    assert not_one == [], f"claimed slots without exactly one final row: {not_one[:10]}"
    assert max(handled.values()) == 1, [k for k, n in handled.items() if n > 1]
    succeeded = {k for k, v in by_slot.items() if ("succeeded", None) in v}
    assert set(handled) == succeeded
    interrupted = sum(1 for v in by_slot.values() if v[0][0] == "interrupted")
    print(f"{len(claims)} claimed slots, {len(handled)} handler runs, {interrupted} interrupted")
