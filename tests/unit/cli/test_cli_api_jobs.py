"""Jobs created over the API are not in the job registry (#27): the CLI reads them from
``job_defs``, lists them, and triggers one through the store on the live process that
holds it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from cronfleet import Scheduler
from cronfleet.model import Job
from cronfleet.spec import API_SOURCE
from cronfleet.store.factory import open_api_store

SPEC = {"id": "hook", "schedule": "0 3 * * *", "description": "stored over the API",
        "http": {"url": "https://hooks.example.com/x"}}


def _store_def(url: str) -> None:
    async def go() -> None:
        api = open_api_store(url)
        try:
            assert await api.create_job_def("hook", "default", SPEC, "alice") is not None
        finally:
            await api.close()

    asyncio.run(go())


def test_an_api_job_is_listed_and_triggered_on_the_process_holding_it(
    cli: Callable[..., Result], project: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    _store_def(url)
    ran: list[str] = []
    worker = Scheduler(url, instance_id="worker-1", shutdown_grace="2s")
    worker.add_job(Job.create("0 3 * * *", lambda ctx: ran.append(ctx.job_id), id="hook",
                              source=API_SOURCE))
    worker.start_in_background()
    try:
        listed = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout)}
        hook = listed["hook"]
        assert hook["source"] == "api" and hook["remote"] is True
        assert hook["declared"] is None and hook["description"] == "stored over the API"
        assert listed["tick"]["remote"] is False

        r = cli("trigger", "hook", "--by", "alice", "--json")
        assert r.exit_code == 0, r.stderr
        run = json.loads(r.stdout)
        assert run["status"] == "succeeded" and run["instance_id"] == "worker-1"
        assert ran == ["hook"]
    finally:
        worker.stop()
    r = cli("trigger", "hook", "--json")  # nobody holds it now: refused, not sent
    assert r.exit_code == 3 and "no process with timers of the fleet is live" in r.stderr
    assert ran == ["hook"]
