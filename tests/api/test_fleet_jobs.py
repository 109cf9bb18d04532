"""The API operates jobs other processes declare (#14): listed from the job registry with
who declares them, team-scoped by the registry's team, paused, and triggered through the
store (params, force) on the process that declares them; refused with the reason once no
live instance declares them."""

from __future__ import annotations

from typing import Any

from cronfleet import FakeClock, Scheduler

from .conftest import MakeApi, expect


async def test_jobs_declared_by_another_process_are_listed_and_operated(
    make_api: MakeApi, store_url: str, clock: FakeClock, store_kind: str
) -> None:
    api = await make_api(jobs=False)  # this process declares nothing itself
    lib = Scheduler(store=store_url, clock=clock, instance_id="lib-1", shutdown_grace="2s")
    seen: list[dict[str, Any]] = []

    @lib.job("0 3 * * *", id="alpha.lib", team="alpha", description="in code elsewhere",
             timezone="Europe/Paris")
    async def work(ctx: Any) -> dict[str, Any]:
        seen.append(dict(ctx.params))
        return {"ok": True}

    @lib.job("@daily", id="beta.lib", team="beta")
    def other(ctx: Any) -> None:
        return None

    await lib.start()
    try:
        listed = expect(await api.get("/api/jobs", "alpha-viewer"), 200)["items"]
        assert [j["id"] for j in listed] == ["alpha.lib"]  # beta's job is not alpha's
        [job] = listed
        assert job["source"] == "code" and job["team"] == "alpha" and job["remote"] is True
        assert job["timezone"] == "Europe/Paris" and job["schedule"] == "0 3 * * *"
        assert job["declared"] is True and job["kind"] == "handler"
        assert [(d["instance"], d["live"]) for d in job["declared_by"]] == [("lib-1", True)]
        assert job["editable"] is False and job["next_run"] is not None
        expect(await api.get("/api/jobs/alpha.lib", "beta-viewer"), 404, "JOB_NOT_FOUND")
        detail = expect(await api.get("/api/jobs/alpha.lib", "alpha-viewer"), 200)
        assert detail["description"] == "in code elsewhere" and detail["conflict"] is None

        accepted = expect(await api.post("/api/jobs/alpha.lib/trigger", "alpha-editor",
                                         json={"params": {"k": "v"}}), 202)
        assert accepted["instance_id"] == "lib-1"
        run = await api.run_done(accepted["run_id"])
        assert run["status"] == "succeeded" and run["params"] == {"k": "v"}
        assert run["instance_id"] == "lib-1" and seen == [{"k": "v"}]

        expect(await api.put("/api/admin/cron/alpha.lib", "alpha-editor",
                             json={"enabled": False, "note": "vendor down"}), 200)
        refused = expect(await api.post("/api/jobs/alpha.lib/trigger", "alpha-editor"), 409,
                         "JOB_PAUSED")
        assert refused["details"]["instance"] == "lib-1" and "vendor down" in \
            refused["message"]
        accepted = expect(await api.post("/api/jobs/alpha.lib/trigger", "alpha-admin",
                                         json={"force": True}), 202)
        forced = await api.run_done(accepted["run_id"])
        assert forced["forced_by"] == "alpha-admin (team alpha)" and len(seen) == 2
        expect(await api.post("/api/jobs/beta.lib/trigger", "alpha-editor"), 404,
               "JOB_NOT_FOUND")
    finally:
        await lib.stop()
    listed = expect(await api.get("/api/jobs", "alpha-viewer"), 200)["items"]
    assert [(j["id"], j["declared"]) for j in listed] == [("alpha.lib", False)]
    refused = expect(await api.post("/api/jobs/alpha.lib/trigger", "alpha-editor",
                                    json={"force": True}), 409, "JOB_NOT_DECLARED")
    assert "declared before by lib-1" in refused["message"]
    assert len(seen) == 2
