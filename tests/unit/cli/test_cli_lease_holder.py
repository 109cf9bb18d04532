"""`cronfleet status` and `cronfleet jobs` name a lease holder only for a job with a run
under way (#24, item 7): a lease taken ahead of a slot by an early claim (or left by a
process that died, until a survivor breaks it) is not a job running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from cronfleet.store import open_store
from cronfleet.store.base import Dispatch

from .test_cli_operate import hold_lease


def claim_early(db: Path, job_id: str, holder: str) -> None:
    """Another process claims the job's next slot early: its lease, no run yet."""

    async def go() -> None:
        store = open_store(f"sqlite:///{db}")
        await store.open()
        [res] = await store.dispatch([Dispatch.early_claim(job_id, time.time() + 30,
                                                           hold=600)], holder)
        assert res.won and (res.run is None or res.run.id is None)  # no row written
        await store.close()

    asyncio.run(go())


def test_a_lease_without_a_run_names_no_holder(cli: Callable[..., Result], project: Path,
                                               tmp_path: Path) -> None:
    claim_early(tmp_path / "ops.db", "tick", "early-host:1:aa")
    hold_lease(tmp_path / "ops.db", "quiet", "busy-host:2:bb")  # a run under way
    for args in (("status", "--once"), ("jobs", "--wide")):  # the narrow table has no holder
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        assert "early-host:1:aa" not in r.stdout, args
        assert "busy-host:2:bb" in r.stdout, args
    r = cli("jobs", "--wide")
    row = next(line for line in r.stdout.splitlines() if "quiet" in line)
    assert "busy-host" in row  # in the job's own row
