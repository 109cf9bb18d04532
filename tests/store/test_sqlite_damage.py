"""A SQLite file damaged under running processes: the error says so (``StoreDamaged``,
never an outage), the due slots go to a fallback journal next to the file, and a store
opened again on a restored file records them, once (store/sqlite/store.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.chaos.faults import corrupt_sqlite
from cronfleet.clock import FakeClock
from cronfleet.errors import StoreDamaged, StoreUnavailable
from cronfleet.model import RunStatus
from cronfleet.store.base import Dispatch
from cronfleet.store.sqlite.store import JOURNAL_SUFFIX, SQLiteStore

from .conftest import T0


def torn(path: Path) -> None:
    with path.open("a") as f:
        f.write('{"job": "a", "slo')


def journals(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("cf.db.journal*"))


async def test_a_corrupted_file_is_damaged_not_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "cf.db"
    s = SQLiteStore(str(db), clock=FakeClock(T0))
    await s.open()
    try:
        await s.ensure_jobs([f"job-{i}" for i in range(200)])
        for k in range(20):  # enough rows for pages to damage
            await s.dispatch([Dispatch.scheduled(f"job-{i}", T0 + k, lease=False)
                              for i in range(200)], "one")
    finally:
        await s.close()
    corrupt_sqlite(db, pages=64, seed=3)
    other = SQLiteStore(str(db), clock=FakeClock(T0))  # a process reading the file afresh
    try:
        with pytest.raises(StoreDamaged, match="is damaged") as got:
            await other.open()
            await other.list_runs(limit=10_000)
        assert not isinstance(got.value, StoreUnavailable)  # never fails open
        assert other.damaged
    finally:
        await other.close()


async def test_the_journal_is_recorded_once_when_a_restored_store_opens(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cf.db"
    s = SQLiteStore(str(db), clock=FakeClock(T0))
    await s.open()
    [ran] = await s.dispatch([Dispatch.scheduled("a", T0 + 1, lease=False)], "one")
    assert ran.won
    await s.close()
    backup = tmp_path / "backup.db"
    shutil.copy(db, backup)
    # while the file was damaged two processes kept the same slots, one twice
    assert s.journal([("a", T0 + 2, "malformed"), ("b", T0 + 2, "malformed")], "p1") == 2
    assert s.journal([("a", T0 + 2, "malformed"), ("a", T0 + 3, "malformed")], "p2") == 2
    assert s.journal([("a", T0 + 1, "malformed")], "p2") == 1  # ran before: keeps its row
    torn(Path(str(db) + JOURNAL_SUFFIX))  # a process killed mid-write
    shutil.copy(backup, db)  # the operator restores the backup
    again = SQLiteStore(str(db), clock=FakeClock(T0 + 60))
    await again.open()
    try:
        runs = await again.list_runs(limit=100)
        rows = sorted((r.job_id, r.slot.timestamp(), r.status, r.reason) for r in runs)
        assert rows == [
            ("a", T0 + 1, RunStatus.RUNNING, None),
            ("a", T0 + 2, RunStatus.SKIPPED, "store_unavailable"),
            ("a", T0 + 3, RunStatus.SKIPPED, "store_unavailable"),
            ("b", T0 + 2, RunStatus.SKIPPED, "store_unavailable"),
        ]
        skip = next(r for r in runs if r.job_id == "b")
        assert "fallback journal" in skip.logs[-1]
        assert journals(tmp_path) == ["cf.db.journal.jsonl.imported-1780000060000"]
        # a slot claimed again by the catch-up loses: one outcome per slot
        [late] = await again.dispatch([Dispatch.scheduled("a", T0 + 3, lease=False)], "two")
        assert not late.won
    finally:
        await again.close()
    third = SQLiteStore(str(db), clock=FakeClock(T0 + 90))
    await third.open()  # nothing to import twice
    try:
        assert len(await third.list_runs(limit=100)) == 4
    finally:
        await third.close()
