"""POST /api/jobs/{id}/trigger with {"params": {...}, "force": true}: the parameters reach
the handler as ctx.params and are stored with the run; a paused job answers 409 JOB_PAUSED
(nothing run, nothing recorded) unless forced, and a forced run records who forced it."""

from __future__ import annotations

from typing import Any

from .conftest import Api, expect


async def test_params_reach_the_handler_and_force_runs_a_paused_job(api: Api) -> None:
    @api.scheduler.job("@daily", id="alpha.echo", team="alpha")
    def echo(ctx: Any) -> dict[str, Any]:
        return {"params": dict(ctx.params), "manual": ctx.manual}

    params = {"region": "eu", "n": 3, "dry": True}
    accepted = expect(await api.post("/api/jobs/alpha.echo/trigger", "alpha-editor",
                                     json={"params": params}), 202)
    run = await api.run_done(accepted["run_id"])
    assert run["result"] == {"params": params, "manual": True}
    assert run["params"] == params and run["forced"] is False and run["forced_by"] is None
    # no body: no parameters (ctx.params is empty), as before
    plain = await api.trigger_done("alpha.echo")
    assert plain["result"]["params"] == {} and plain["params"] is None
    # paused: refused with who paused it, nothing run or recorded
    expect(await api.put("/api/admin/cron/alpha.echo", "alpha-editor",
                         json={"enabled": False, "note": "vendor down"}), 200)
    before = expect(await api.get("/api/jobs/alpha.echo/runs", "alpha-viewer"), 200)["items"]
    refused = expect(await api.post("/api/jobs/alpha.echo/trigger", "alpha-editor"), 409,
                     "JOB_PAUSED")
    assert "paused" in refused["message"] and "force" in refused["message"]
    assert refused["details"]["by"] == "alpha-editor (team alpha)"
    assert refused["details"]["note"] == "vendor down"
    after = expect(await api.get("/api/jobs/alpha.echo/runs", "alpha-viewer"), 200)["items"]
    assert after == before
    # forced: runs, with its parameters, and records who forced it
    accepted = expect(await api.post("/api/jobs/alpha.echo/trigger", "alpha-admin",
                                     json={"force": True, "params": {"k": "v"}}), 202)
    forced = await api.run_done(accepted["run_id"])
    assert forced["status"] == "succeeded" and forced["result"]["params"] == {"k": "v"}
    assert forced["forced"] is True and forced["forced_by"] == "alpha-admin (team alpha)"
    assert "Forced by alpha-admin (team alpha): the job is paused" in forced["logs"]
    listed = expect(await api.get("/api/runs?job=alpha.echo&limit=1", "alpha-viewer"), 200)
    assert listed["items"][0]["forced_by"] == "alpha-admin (team alpha)"
    # force on a job that is not paused is harmless: not recorded as forced
    expect(await api.put("/api/admin/cron/alpha.echo", "alpha-editor", json={"enabled": None}),
           200)
    accepted = expect(await api.post("/api/jobs/alpha.echo/trigger", "alpha-editor",
                                     json={"force": True}), 202)
    assert (await api.run_done(accepted["run_id"]))["forced"] is False


async def test_bad_trigger_bodies_are_refused(api: Api) -> None:
    for body in ({"params": [1, 2]}, {"params": "a=b"}, {"force": [1]}, {"force": 0},
                 {"force": "true"}, {"bogus": 1}):
        expect(await api.post("/api/jobs/alpha.report/trigger", "alpha-editor", json=body), 422,
               "VALIDATION_ERROR")
    runs = expect(await api.get("/api/jobs/alpha.report/runs", "alpha-viewer"), 200)
    assert runs["items"] == []
