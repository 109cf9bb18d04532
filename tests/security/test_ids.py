"""Ids and history stay with their team: the id of a job declared in config or code is its
team's for good, so a job that left the config cannot be re-created by another team to read
its runs -- by listing or by run id."""

from __future__ import annotations

from typing import Any

from api.conftest import Api, expect


async def test_another_team_cannot_take_a_removed_config_jobs_id(make_api: Any) -> None:
    first: Api = await make_api(instance_id="with-config")  # declares alpha.report (alpha)
    runs = [await first.trigger_done("alpha.report") for _ in range(3)]
    assert all(r["status"] == "succeeded" for r in runs)
    # a process whose config no longer has the job: its id is free in this scheduler
    later: Api = await make_api(instance_id="without", jobs=False)
    assert "alpha.report" not in later.scheduler.jobs
    body = expect(await later.post("/api/jobs", "beta-admin", json={
        "id": "alpha.report", "schedule": "@daily",
        "http": {"url": "http://127.0.0.1:9/x"}}), 409, "JOB_EXISTS")
    assert body["details"] == {"job_id": "alpha.report"}
    for r in runs:
        expect(await later.get(f"/api/runs/{r['id']}", "beta-viewer"), 404, "RUN_NOT_FOUND")
        # its own team still reads the history of the job that left
        assert expect(await later.get(f"/api/runs/{r['id']}", "alpha-viewer"), 200)["id"] \
            == r["id"]
    expect(await later.get("/api/jobs/alpha.report/runs", "beta-viewer"), 404)
    # runs across jobs: alpha's list has them, beta's does not
    mine = expect(await later.get("/api/runs?limit=200", "alpha-viewer"), 200)["items"]
    theirs = expect(await later.get("/api/runs?limit=200", "beta-viewer"), 200)["items"]
    assert {r["id"] for r in runs} <= {r["id"] for r in mine}
    assert not {r["id"] for r in runs} & {r["id"] for r in theirs}
    # the team that owned it may bring the id back over the API
    expect(await later.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.report", "schedule": "@daily",
        "http": {"url": "http://127.0.0.1:9/x"}}), 201)


async def test_a_deleted_api_job_keeps_its_id_with_its_team(api: Api) -> None:
    expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "shared", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"}}), 201)
    run = await api.trigger_done("shared")
    expect(await api.delete("/api/jobs/shared", "alpha-editor"), 204)
    expect(await api.post("/api/jobs", "beta-editor", json={
        "id": "shared", "schedule": "@daily", "http": {"url": "http://127.0.0.1:9/x"}}), 409)
    expect(await api.get(f"/api/runs/{run['id']}", "beta-viewer"), 404)
