"""Jobs created over the API really run: an HTTP job against a local server fires on its
schedule, a PATCH reschedules the live scheduler, a DELETE stops it; another process on the
same store follows every change through its catalog."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cronfleet import FakeClock, Scheduler
from cronfleet.api.app import ApiSettings, create_app
from cronfleet.jobs.http import HttpRuntime
from cronfleet.store.factory import open_api_store

from .conftest import Api, MakeApi, eventually, expect, http_spec


class Hooks:
    """A real HTTP server on 127.0.0.1 that answers 200 and remembers each path."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                hooks.paths.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = do_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    yield h
    h.close()


async def succeeded_runs(api: Api, job_id: str) -> list[dict[str, Any]]:
    page = expect(await api.get(f"/api/jobs/{job_id}/runs?status=succeeded"), 200)
    runs: list[dict[str, Any]] = page["items"]
    return runs


async def test_a_stored_http_job_runs_on_its_schedule(make_api: MakeApi,
                                                      hooks: Hooks) -> None:
    api = await make_api(real_clock=True)
    await api.create_job("alpha.ping", hooks.url("/ping"), schedule="1s")
    runs = await eventually(lambda: succeeded_runs(api, "alpha.ping"), what="a scheduled run")
    run = runs[0]
    assert run["triggered_by"] == "schedule" and run["manual"] is False
    assert run["instance_id"] == "api-1"
    assert "GET /ping" in hooks.paths
    detail = expect(await api.get("/api/jobs/alpha.ping"), 200)
    # the job's newest run: this one or a later slot's (which, on a loaded machine, may be
    # running, or skipped while this one still held the lease)
    assert detail["last_run"]["id"] >= run["id"]


async def test_patch_reschedules_and_delete_stops_the_live_job(make_api: MakeApi,
                                                               hooks: Hooks) -> None:
    api = await make_api(real_clock=True)
    await api.create_job("alpha.ping", hooks.url("/v1"), schedule="@yearly")
    assert api.scheduler.jobs["alpha.ping"].schedule.expr == "@yearly"

    body = expect(await api.patch("/api/jobs/alpha.ping", "alpha-editor", json={
        "schedule": "1s", "http": {"url": hooks.url("/v2"), "method": "POST"}}), 200)
    assert body["schedule"] == "1s" and body["version"] == 2
    assert api.scheduler.jobs["alpha.ping"].schedule.expr == "1s"
    await eventually(lambda: succeeded_runs(api, "alpha.ping"), what="a run after PATCH")
    assert "POST /v2" in hooks.paths and "GET /v1" not in hooks.paths

    expect(await api.delete("/api/jobs/alpha.ping", "alpha-editor"), 204)
    assert "alpha.ping" not in api.scheduler.jobs
    await api.scheduler.wait_idle()
    calls = len(hooks.paths)
    await asyncio.sleep(1.5)  # more than one 1 s slot: a live job would have fired
    assert len(hooks.paths) == calls


async def test_another_process_follows_create_patch_delete(make_api: MakeApi) -> None:
    one = await make_api(instance_id="p1")
    two = await make_api(instance_id="p2", settings=ApiSettings(catalog_poll=0.2))
    await two.catalog.start()  # what the first request (or `cronfleet run`) does
    await one.create_job("alpha.shared", "http://127.0.0.1:9/x", schedule="1h")
    job = await eventually(lambda: two.scheduler.jobs.get("alpha.shared"),
                           what="the job in process two")
    assert job.team == "alpha" and job.source == "api" and job.schedule.expr == "1h"

    expect(await one.patch("/api/jobs/alpha.shared", json={"schedule": "2h"}), 200)
    await eventually(lambda: two.scheduler.jobs["alpha.shared"].schedule.expr == "2h",
                     what="the new schedule in process two")
    detail = expect(await two.get("/api/jobs/alpha.shared"), 200)
    assert detail["version"] == 2 and detail["editable"] is True

    expect(await one.delete("/api/jobs/alpha.shared"), 204)
    await eventually(lambda: "alpha.shared" not in two.scheduler.jobs,
                     what="the job gone from process two")
    expect(await two.get("/api/jobs/alpha.shared"), 404, "JOB_NOT_FOUND")


async def test_a_job_created_elsewhere_is_found_on_first_ask(make_api: MakeApi) -> None:
    one = await make_api(instance_id="p1")
    two = await make_api(instance_id="p2", settings=ApiSettings(catalog_poll=3600))
    expect(await two.get("/api/jobs"), 200)  # catalog started, next look in an hour
    await one.create_job("alpha.shared", "http://127.0.0.1:9/x")
    detail = expect(await two.get("/api/jobs/alpha.shared"), 200)
    assert detail["spec"]["id"] == "alpha.shared"
    accepted = expect(await two.post("/api/jobs/alpha.shared/trigger", "alpha-editor"), 202)
    assert accepted["instance_id"] == "p2"
    # a PATCH through process two applies to its own scheduler at once
    expect(await two.patch("/api/jobs/alpha.shared", json={"schedule": "5m"}), 200)
    assert two.scheduler.jobs["alpha.shared"].schedule.expr == "5m"
    await two.run_done(accepted["run_id"])


async def test_a_process_started_later_loads_stored_jobs(make_api: MakeApi) -> None:
    one = await make_api(instance_id="p1")
    await one.create_job("alpha.kept", "http://127.0.0.1:9/x", schedule="10m")
    later = await make_api(instance_id="p2")
    await later.catalog.refresh()
    assert later.scheduler.jobs["alpha.kept"].schedule.expr == "10m"
    assert later.catalog.held_version("alpha.kept") is not None


async def test_the_apps_lifespan_starts_the_catalog(store_url: str, clock: FakeClock) -> None:
    """Served with uvicorn (manage_scheduler): stored jobs are scheduled at start, not only
    after the first API request."""
    setup = open_api_store(store_url)
    spec = {"id": "alpha.kept", "schedule": "10m",
            "http": http_spec("http://127.0.0.1:9/x")}
    assert await setup.create_job_def("alpha.kept", "alpha", spec, "tests") is not None
    await setup.close()
    s = Scheduler(store=store_url, clock=clock, instance_id="uv-1")
    runtime = HttpRuntime(store=store_url)
    app = create_app(s, settings=ApiSettings(manage_scheduler=True), http_runtime=runtime)
    try:
        async with app.router.lifespan_context(app):
            assert s.running
            assert s.jobs["alpha.kept"].schedule.expr == "10m"
        assert not s.running
    finally:
        await app.state.cronfleet.api_store.close()
        await runtime.aclose()
