"""Who may do what: 401 without a live token, 403 below the route's role, and a team that
sees nothing of another team's jobs, runs, secrets or audit entries (404 or an empty list)
and changes none of it."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api, expect, http_spec

HOOK = "http://127.0.0.1:9/hook"
NEW_JOB = {"id": "x.new", "schedule": "1h", "http": http_spec(HOOK)}

# (method, path, json body) of every /api route, on team alpha's objects
WRITES: list[tuple[str, str, Any]] = [
    ("POST", "/api/jobs", NEW_JOB),
    ("PATCH", "/api/jobs/alpha.hook", {"description": "changed"}),
    ("DELETE", "/api/jobs/alpha.hook", None),
    ("POST", "/api/jobs/alpha.report/trigger", None),
    ("PUT", "/api/admin/cron/alpha.report", {"enabled": False}),
    ("PUT", "/api/secrets/ALPHA_KEY", {"value": "changed"}),
    ("DELETE", "/api/secrets/ALPHA_KEY", None),
]
ADMIN_ONLY = [
    ("PUT", "/api/secrets/ALPHA_KEY", {"value": "changed"}),
    ("DELETE", "/api/secrets/ALPHA_KEY", None),
    ("GET", "/api/audit", None),
]
READS: list[tuple[str, str, Any]] = [
    ("GET", "/api/jobs", None),
    ("GET", "/api/jobs/alpha.report", None),
    ("GET", "/api/jobs/alpha.report/runs", None),
    ("GET", "/api/runs/1", None),
    ("POST", "/api/cron/preview", {"expr": "@daily"}),
    ("GET", "/api/secrets", None),
    ("GET", "/api/audit", None),
]


async def seed(api: Api) -> dict[str, Any]:
    """Team alpha's objects: a stored job, a run, a secret, audit entries."""
    await api.create_job("alpha.hook", HOOK)
    # a stored job is not in the job registry (its definition is in job_defs): nothing
    # is published later that would change what the snapshots see
    got = expect(await api.get("/api/jobs/alpha.hook"), 200)
    assert got["editable"] is True and got["declared"] is None
    run = await api.trigger_done("alpha.report")
    expect(await api.put("/api/secrets/ALPHA_KEY", json={"value": "alpha-only"}), 201)
    return {"run": run}


async def snapshot(api: Api) -> dict[str, Any]:
    """Everything team alpha can see, plus the rows behind it."""
    vault = api.runtime.vault
    assert vault is not None
    jobs = expect(await api.get("/api/jobs"), 200)
    details = {j["id"]: expect(await api.get(f"/api/jobs/{j['id']}"), 200)
               for j in jobs["items"]}
    states = await api.scheduler.store.read_states(list(details))
    return {
        "jobs": jobs, "details": details,
        "states": {k: (v.enabled_override, v.override_by) for k, v in states.items()},
        "secrets": expect(await api.get("/api/secrets"), 200),
        "secret_value": await vault.get("ALPHA_KEY", "alpha"),
        "audit": expect(await api.get("/api/audit"), 200),
        "defs": [(d.id, d.version, d.deleted_at) for d in await api.api_store.job_defs(
            include_deleted=True)],
        "live": sorted(api.scheduler.jobs),
    }


async def test_every_api_route_needs_a_live_token(api: Api) -> None:
    for method, path, body in READS + WRITES:
        kw = {"json": body} if body is not None else {}
        for who, message in [(None, "missing bearer token (Authorization: Bearer ...)"),
                             ("cf_nope_notatoken", "unknown or revoked token")]:
            r = await api.call(method, path, who, **kw)
            got = expect(r, 401, "UNAUTHORIZED")
            assert got["message"] == message
            assert r.headers["WWW-Authenticate"] == "Bearer"
        r = await api.call(method, path, None, headers={"Authorization": "Basic YTpi"}, **kw)
        expect(r, 401, "UNAUTHORIZED")
    assert expect(await api.get("/api/audit"), 200)["items"] == []


async def test_a_revoked_token_is_refused_at_once(api: Api) -> None:
    plaintext, info = await api.api_store.create_token(name="temp", team="alpha",
                                                       role="viewer")
    expect(await api.get("/api/jobs", plaintext), 200)
    assert [t.id for t in await api.api_store.revoke_token(info.id)] == [info.id]
    body = expect(await api.get("/api/jobs", plaintext), 401, "UNAUTHORIZED")
    assert body["message"] == "unknown or revoked token"


@pytest.mark.parametrize(("who", "routes"), [("alpha-viewer", WRITES + ADMIN_ONLY[2:]),
                                             ("alpha-editor", ADMIN_ONLY)])
async def test_roles_below_the_route_are_403_and_change_nothing(
        api: Api, secret_key: str, who: str, routes: list[tuple[str, str, Any]]) -> None:
    await seed(api)
    before = await snapshot(api)
    role = who.split("-")[1]
    for method, path, body in routes:
        kw = {"json": body} if body is not None else {}
        got = expect(await api.call(method, path, who, **kw), 403, "FORBIDDEN")
        assert got["message"].startswith(f"token '{who}' has role {role}; this needs ")
    assert await snapshot(api) == before
    # and what the role may do, it may do
    for method, path, body in READS:
        if (method, path, body) in ADMIN_ONLY:
            continue
        kw = {"json": body} if body is not None else {}
        r = await api.call(method, path, who, **kw)
        assert r.status_code == 200, (path, r.text)


async def test_another_team_sees_and_changes_nothing(api: Api, secret_key: str) -> None:
    run = (await seed(api))["run"]
    skipped = await api.trigger_done("alpha.hook")  # a run of a stored job too
    expect(await api.put("/api/admin/cron/alpha.off", json={"enabled": True}), 200)
    before = await snapshot(api)
    alpha_jobs = ["alpha.report", "alpha.hook", "alpha.slow", "alpha.off"]

    for who in ("beta-viewer", "beta-editor", "beta-admin"):
        listed = expect(await api.get("/api/jobs", who), 200)
        assert [j["id"] for j in listed["items"]] == ["beta.report"]
        assert expect(await api.get("/api/jobs?text=alpha", who), 200)["items"] == []
        assert expect(await api.get("/api/jobs?cursor=a", who), 200)["items"][0]["id"] == \
            "beta.report"
        for job_id in alpha_jobs:
            for method, path, body in [
                ("GET", f"/api/jobs/{job_id}", None),
                ("GET", f"/api/jobs/{job_id}/runs", None),
                ("PATCH", f"/api/jobs/{job_id}", {"description": "mine now"}),
                ("DELETE", f"/api/jobs/{job_id}", None),
                ("POST", f"/api/jobs/{job_id}/trigger", None),
                ("PUT", f"/api/admin/cron/{job_id}", {"enabled": False}),
            ]:
                kw = {"json": body} if body is not None else {}
                r = await api.call(method, path, who, **kw)
                if who == "beta-viewer" and method != "GET":
                    expect(r, 403, "FORBIDDEN")  # the role is checked first
                    continue
                got = expect(r, 404, "JOB_NOT_FOUND")
                assert got["details"] == {"job_id": job_id}
        for run_id in (run["id"], skipped["id"]):
            expect(await api.get(f"/api/runs/{run_id}", who), 404, "RUN_NOT_FOUND")
        assert expect(await api.get("/api/secrets", who), 200) == {"items": []}

    # secrets are per team: beta's ALPHA_KEY is beta's own, alpha's is untouched
    expect(await api.delete("/api/secrets/ALPHA_KEY", "beta-admin"), 404, "SECRET_NOT_FOUND")
    expect(await api.put("/api/secrets/ALPHA_KEY", "beta-admin", json={"value": "beta's"}),
           201)
    listed = expect(await api.get("/api/secrets", "beta-admin"), 200)
    assert [s["name"] for s in listed["items"]] == ["ALPHA_KEY"]
    expect(await api.delete("/api/secrets/ALPHA_KEY", "beta-admin"), 204)

    # ids are one namespace: beta cannot take alpha's id (and learns only that it is taken)
    expect(await api.post("/api/jobs", "beta-editor",
                          json={**NEW_JOB, "id": "alpha.hook"}), 409, "JOB_EXISTS")

    beta_audit = expect(await api.get("/api/audit", "beta-admin"), 200)["items"]
    assert {e["team"] for e in beta_audit} == {"beta"}
    assert [e["action"] for e in beta_audit] == ["secret.delete", "secret.set"]

    assert await snapshot(api) == before
    for job_id in alpha_jobs:
        assert api.scheduler.jobs[job_id].team == "alpha"


async def test_a_deleted_job_stays_invisible_to_other_teams(api: Api) -> None:
    await api.create_job("alpha.hook", HOOK)
    run = await api.trigger_done("alpha.hook")
    expect(await api.delete("/api/jobs/alpha.hook", "alpha-editor"), 204)
    expect(await api.get(f"/api/runs/{run['id']}", "beta-admin"), 404, "RUN_NOT_FOUND")
    expect(await api.get("/api/jobs/alpha.hook/runs", "beta-admin"), 404, "JOB_NOT_FOUND")
    # the id stays alpha's: beta re-creating it would inherit alpha's run history
    body = expect(await api.post("/api/jobs", "beta-editor",
                                 json={**NEW_JOB, "id": "alpha.hook"}), 409, "JOB_EXISTS")
    assert body["details"] == {"job_id": "alpha.hook"}
    assert "alpha.hook" not in api.scheduler.jobs
    expect(await api.get(f"/api/runs/{run['id']}", "beta-admin"), 404, "RUN_NOT_FOUND")
    # alpha itself may use the id again, and still reads its old run
    await api.create_job("alpha.hook", HOOK)
    assert api.scheduler.jobs["alpha.hook"].team == "alpha"
    assert expect(await api.get(f"/api/runs/{run['id']}", "alpha-viewer"), 200) == run
