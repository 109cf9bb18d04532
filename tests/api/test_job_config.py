"""The job resource shows the job's config as written, and a paused job's next run is
the next slot that will run (null while paused without an end)."""

from __future__ import annotations

from .conftest import Api, expect


async def test_config_and_paused_next_run_in_the_job_resource(api: Api) -> None:
    await api.create_job("alpha.cfg", "http://127.0.0.1:9/x", config={"region": "eu", "n": 3})
    body = expect(await api.get("/api/jobs/alpha.cfg", "alpha-viewer"), 200)
    assert body["config"] == {"region": "eu", "n": 3}
    listed = expect(await api.get("/api/jobs", "alpha-viewer"), 200)["items"]
    assert {j["id"]: j["config"] for j in listed}["alpha.cfg"] == {"region": "eu", "n": 3}
    report = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert report["config"] == {} and report["paused"] is False
    assert report["next_run"] == report["next_fire"] is not None
    expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                         json={"enabled": False}), 200)
    paused = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert paused["paused"] is True and paused["next_run"] is None
    assert paused["next_fire"] == report["next_fire"]
