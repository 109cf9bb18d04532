"""/api/jobs and /api/runs: listing with filters and cursors, creating, reading, changing and
deleting stored jobs, triggering, and every refusal with its code."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from cronfleet.cron import CronExpr, NoFireTimeError
from cronfleet.store.base import RegistryStore
from cronfleet.store.factory import open_api_store

from .conftest import T0_ISO, Api, MakeApi, expect, http_spec

HOOK = "http://127.0.0.1:9/hook"  # never called: these jobs run daily on a fake clock


def ids(page: dict[str, Any]) -> list[str]:
    return [item["id"] for item in page["items"]]


async def test_list_is_the_teams_jobs_in_id_order(api: Api) -> None:
    page = expect(await api.get("/api/jobs", "alpha-viewer"), 200)
    assert ids(page) == ["alpha.off", "alpha.report", "alpha.slow"]
    assert page["next_cursor"] is None
    report = page["items"][1]
    # what the job registry says: this process declares it, live, no conflict (a store
    # without a registry -- Redis until #18 part B -- says nothing)
    registry = {k: report.pop(k) for k in ("kind", "declared", "conflict", "remote",
                                           "declared_by")}
    if isinstance(api.scheduler.store, RegistryStore):
        [declarer] = registry.pop("declared_by")
        assert declarer["instance"] == "api-1" and declarer["live"] is True
        assert declarer["declared_at"] == T0_ISO and len(declarer["digest"]) == 64
        assert registry == {"kind": "handler", "declared": True, "conflict": None,
                            "remote": False}
    else:
        assert registry == {"kind": None, "declared": None, "conflict": None,
                            "remote": False, "declared_by": []}
    assert report == {
        "id": "alpha.report", "team": "alpha", "source": "code", "editable": False,
        "schedule": "@daily", "schedule_text": None, "timezone": "UTC",
        "description": "Nightly sales report", "when": "At 00:00 every day",
        "config": {}, "declared_enabled": True, "enabled": True, "paused": False,
        "next_run": "2026-05-29T00:00:00+00:00", "next_fire": "2026-05-29T00:00:00+00:00",
        "last_run": None, "override": None, "lease": None,
    }
    assert page["items"][0]["declared_enabled"] is False
    assert page["items"][0]["enabled"] is False
    # declared disabled: no next run, though its schedule has a next fire time
    assert page["items"][0]["next_run"] is None
    assert page["items"][0]["next_fire"] == "2026-05-29T00:00:00+00:00"
    assert ids(expect(await api.get("/api/jobs", "beta-viewer"), 200)) == ["beta.report"]


async def test_list_filters_paused_status_and_text(api: Api) -> None:
    expect(await api.put("/api/admin/cron/alpha.slow", "alpha-editor",
                         json={"enabled": False}), 200)
    run = await api.trigger_done("alpha.report")
    assert run["status"] == "succeeded"

    async def listed(query: str) -> list[str]:
        return ids(expect(await api.get(f"/api/jobs?{query}", "alpha-viewer"), 200))

    assert await listed("paused=true") == ["alpha.slow"]
    assert await listed("paused=false") == ["alpha.off", "alpha.report"]
    assert await listed("status=succeeded") == ["alpha.report"]
    assert await listed("status=failed") == []
    assert await listed("text=SALES") == ["alpha.report"]  # the description, any case
    assert await listed("text=slo") == ["alpha.slow"]  # the id
    assert await listed("text=report&paused=true") == []
    page = expect(await api.get("/api/jobs?status=succeeded", "alpha-viewer"), 200)
    assert page["items"][0]["last_run"] == {
        "id": run["id"], "status": "succeeded", "reason": None, "slot": T0_ISO,
        "finished_at": T0_ISO, "error": None}
    body = expect(await api.get("/api/jobs?status=nope", "alpha-viewer"), 422,
                  "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["query.status"]
    body = expect(await api.get("/api/jobs?limit=0", "alpha-viewer"), 422, "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["query.limit"]


async def test_cursor_pagination_walks_every_page_once(api: Api) -> None:
    for n in range(4):
        await api.create_job(f"alpha.hook{n}", HOOK)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = expect(await api.get(f"/api/jobs?{query}", "alpha-viewer"), 200)
        pages += 1
        assert len(page["items"]) <= 2
        seen += ids(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor == seen[-1]
    assert pages == 4  # 7 jobs: 2 + 2 + 2 + 1
    assert seen == ["alpha.hook0", "alpha.hook1", "alpha.hook2", "alpha.hook3", "alpha.off",
                    "alpha.report", "alpha.slow"]
    # a filtered page ends where the filter's matches end
    page = expect(await api.get("/api/jobs?text=hook&limit=4", "alpha-viewer"), 200)
    assert len(page["items"]) == 4 and page["next_cursor"] is None


async def test_create_get_and_list_a_stored_job(api: Api) -> None:
    body = await api.create_job(
        "alpha.hook", HOOK, who="alpha-editor", schedule="*/15 9-17 * * MON-FRI",
        timezone="Europe/Paris", description="ping the hook", timeout="30s",
        retry={"attempts": 3, "delay": "2s"})
    assert body["id"] == "alpha.hook"
    assert body["team"] == "alpha" and body["source"] == "api" and body["editable"] is True
    assert body["schedule"] == "*/15 9-17 * * MON-FRI"
    assert body["timezone"] == "Europe/Paris"
    assert body["version"] == 1
    assert body["created_by"] == body["updated_by"] == "alpha-editor (team alpha)"
    assert body["spec"] == {
        "id": "alpha.hook", "schedule": "*/15 9-17 * * MON-FRI", "timezone": "Europe/Paris",
        "description": "ping the hook", "timeout": "30s",
        "retry": {"attempts": 3, "backoff": "exponential", "delay": "2s"},
        "http": {"url": HOOK, "method": "GET", "headers": {},
                 "follow_redirects": True},
    }
    assert len(body["next_fire_times"]) == 10
    assert body["next_run"] == body["next_fire_times"][0] == "2026-05-29T09:00:00+02:00"
    assert body["recent_runs"] == [] and body["stats"]["runs"] == 0
    job = api.scheduler.jobs["alpha.hook"]
    assert job.team == "alpha" and job.source == "api" and job.schedule.expr == body["schedule"]

    again = expect(await api.get("/api/jobs/alpha.hook", "alpha-viewer"), 200)
    # the registry publishes the new job in the background: who declares it may be known
    # by the second read and not yet by the first
    for answer in (again, body):
        for key in ("declared", "declared_by"):
            answer.pop(key, None)
    assert again == body
    assert "alpha.hook" in ids(expect(await api.get("/api/jobs", "alpha-viewer"), 200))


async def test_get_a_declared_job_in_detail(api: Api) -> None:
    run = await api.trigger_done("alpha.report")
    body = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert body["editable"] is False and body["spec"] is None and body["version"] is None
    assert body["next_fire_times"][:2] == ["2026-05-29T00:00:00+00:00",
                                           "2026-05-30T00:00:00+00:00"]
    assert [r["id"] for r in body["recent_runs"]] == [run["id"]]
    assert body["stats"] == {"runs": 1, "by_status": {"succeeded": 1}, "success_rate": 1.0,
                             "avg_duration": 0.0, "max_duration": 0.0, "avg_lateness": None}
    assert body["last_run"]["id"] == run["id"]


async def test_trigger_runs_the_job_and_the_run_is_visible(api: Api) -> None:
    accepted = expect(await api.post("/api/jobs/alpha.report/trigger", "alpha-editor"), 202)
    assert set(accepted) == {"run_id", "job_id", "status", "instance_id", "fencing_token"}
    assert accepted["job_id"] == "alpha.report"
    assert accepted["instance_id"] == "api-1"
    assert isinstance(accepted["run_id"], int)
    run = await api.run_done(accepted["run_id"])
    assert run["status"] == "succeeded" and run["result"] == {"ok": True}
    assert run["triggered_by"] == "api" and run["manual"] is True
    assert run["logs"][0] == "Manual run requested by alpha-editor (team alpha)"
    runs = expect(await api.get("/api/jobs/alpha.report/runs", "alpha-viewer"), 200)
    assert runs["items"] == [run] and runs["next_cursor"] is None


async def test_run_history_pages_and_filters(api: Api) -> None:
    done = [await api.trigger_done("alpha.report") for _ in range(3)]
    newest_first = [r["id"] for r in reversed(done)]
    first = expect(await api.get("/api/jobs/alpha.report/runs?limit=2", "alpha-viewer"), 200)
    assert [r["id"] for r in first["items"]] == newest_first[:2]
    assert first["next_cursor"] == str(newest_first[1])
    rest = expect(await api.get(
        f"/api/jobs/alpha.report/runs?limit=2&cursor={first['next_cursor']}", "alpha-viewer"),
        200)
    assert [r["id"] for r in rest["items"]] == newest_first[2:]
    assert rest["next_cursor"] is None
    ok = expect(await api.get("/api/jobs/alpha.report/runs?status=succeeded", "alpha-viewer"),
                200)
    assert len(ok["items"]) == 3
    failed = expect(await api.get("/api/jobs/alpha.report/runs?status=failed", "alpha-viewer"),
                    200)
    assert failed == {"items": [], "next_cursor": None}


async def test_trigger_while_a_run_holds_the_lease_is_409(api: Api) -> None:
    accepted = expect(await api.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 202)
    assert accepted["status"] == "running"
    body = expect(await api.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 409,
                  "CRON_JOB_ALREADY_EXECUTING")
    assert body["message"] == "job 'alpha.slow' is already executing (lease held by api-1)"
    assert body["details"]["holder"] == "api-1"
    log = body["details"]["log"]
    assert log["job_id"] == "alpha.slow" and log["status"] == "skipped"
    assert log["reason"] == "already_executing" and log["manual"] is True
    assert log["result"] == {"skipped": True, "reason": "already_executing"}
    assert "api-1" in log["logs"][-1] and log["logs"][-1].startswith("Skipped")
    # the skip record is in the history too
    stored = expect(await api.get(f"/api/runs/{log['id']}", "alpha-viewer"), 200)
    assert stored == log
    api.gate.set()
    assert (await api.run_done(accepted["run_id"]))["result"] == "released"
    assert (await api.trigger_done("alpha.slow"))["status"] == "succeeded"  # free again


async def test_trigger_refused_names_the_other_instance_holding_the_lease(
        make_api: MakeApi) -> None:
    one = await make_api(instance_id="api-1")
    two = await make_api(instance_id="api-2")
    accepted = expect(await one.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 202)
    body = expect(await two.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 409,
                  "CRON_JOB_ALREADY_EXECUTING")
    assert body["details"]["holder"] == "api-1"
    assert body["details"]["log"]["instance_id"] == "api-2"
    assert "lease held by api-1" in body["details"]["log"]["logs"][-1]
    audit = expect(await two.get("/api/audit"), 200)["items"][0]
    assert audit["action"] == "job.trigger"
    assert audit["details"] == {"refused": "already_executing", "holder": "api-1"}
    one.gate.set()
    assert (await one.run_done(accepted["run_id"]))["status"] == "succeeded"


async def test_unknown_job_and_run_are_404(api: Api) -> None:
    for method, path in [("GET", "/api/jobs/nope"), ("GET", "/api/jobs/nope/runs"),
                         ("POST", "/api/jobs/nope/trigger"), ("DELETE", "/api/jobs/nope")]:
        body = expect(await api.call(method, path), 404, "JOB_NOT_FOUND")
        assert body["details"] == {"job_id": "nope"}
    body = expect(await api.patch("/api/jobs/nope", json={"description": "x"}), 404,
                  "JOB_NOT_FOUND")
    body = expect(await api.put("/api/admin/cron/nope", json={"enabled": False}), 404,
                  "JOB_NOT_FOUND")
    body = expect(await api.get("/api/runs/999999"), 404, "RUN_NOT_FOUND")
    assert body["details"] == {"run_id": 999999}
    expect(await api.get("/api/runs/0"), 422, "VALIDATION_ERROR")
    expect(await api.get("/api/nothing-here"), 404, "NOT_FOUND")


async def test_declared_jobs_are_read_only(api: Api) -> None:
    for who in ("alpha-editor", "alpha-admin"):
        body = expect(await api.patch("/api/jobs/alpha.report", who,
                                      json={"schedule": "1h"}), 409, "JOB_READ_ONLY")
        assert body["details"] == {"job_id": "alpha.report", "source": "code"}
        body = expect(await api.delete("/api/jobs/alpha.report", who), 409, "JOB_READ_ONLY")
    assert api.scheduler.jobs["alpha.report"].schedule.expr == "@daily"


async def test_creating_an_existing_id_is_409(api: Api) -> None:
    spec = {"id": "alpha.report", "schedule": "1h", "http": http_spec(HOOK)}
    body = expect(await api.post("/api/jobs", "alpha-editor", json=spec), 409, "JOB_EXISTS")
    assert body["details"] == {"job_id": "alpha.report"}
    await api.create_job("alpha.hook", HOOK)
    spec["id"] = "alpha.hook"
    expect(await api.post("/api/jobs", "alpha-editor", json=spec), 409, "JOB_EXISTS")
    assert api.scheduler.jobs["alpha.hook"].schedule.expr == "@daily"  # unchanged
    assert (await api.api_store.job_def("alpha.hook")).version == 1  # type: ignore[union-attr]


async def test_patch_merges_http_and_resets_null_fields(api: Api) -> None:
    await api.create_job("alpha.hook", HOOK, description="first", timeout="10s")
    body = expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor", json={
        "schedule": "30m", "description": None, "http": {"method": "POST", "body": "{}"}}),
        200)
    assert body["version"] == 2
    assert body["schedule"] == "30m"
    assert body["description"] == f"POST {HOOK}"  # the default description again
    assert body["spec"]["http"] == {"url": HOOK, "method": "POST", "body": "{}",
                                    "headers": {}, "follow_redirects": True}
    assert body["spec"]["timeout"] == "10s"
    assert "description" not in body["spec"]
    assert body["updated_by"] == "alpha-editor (team alpha)"
    live = api.scheduler.jobs["alpha.hook"]
    assert live.schedule.expr == "30m" and live.description == f"POST {HOOK}"
    assert body["next_run"] == "2026-05-28T20:30:00+00:00"


async def test_invalid_patch_is_422_and_changes_nothing(api: Api) -> None:
    await api.create_job("alpha.hook", HOOK)
    body = expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor",
                                  json={"schedule": "*/5 * * * * * *"}), 422,
                  "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["schedule"]
    body = expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor",
                                  json={"http": {"url": "file:///etc/passwd"}}), 422,
                  "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["http.url"]
    body = expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor",
                                  json={"id": "renamed"}), 422, "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["id"]
    detail = expect(await api.get("/api/jobs/alpha.hook"), 200)
    assert detail["version"] == 1 and detail["schedule"] == "@daily"


async def test_delete_removes_the_job_and_keeps_its_runs_for_the_team(api: Api) -> None:
    await api.create_job("alpha.hook", HOOK, who="alpha-editor")
    run = await api.trigger_done("alpha.hook")  # nobody listens on port 9: it fails
    assert run["status"] == "failed"
    expect(await api.delete("/api/jobs/alpha.hook", "alpha-editor"), 204)
    assert "alpha.hook" not in api.scheduler.jobs
    expect(await api.get("/api/jobs/alpha.hook"), 404, "JOB_NOT_FOUND")
    expect(await api.delete("/api/jobs/alpha.hook", "alpha-editor"), 404, "JOB_NOT_FOUND")
    assert "alpha.hook" not in ids(expect(await api.get("/api/jobs"), 200))
    # the run stays readable by its team (the tombstone keeps the team), by nobody else
    assert expect(await api.get(f"/api/runs/{run['id']}", "alpha-viewer"), 200) == run
    expect(await api.get(f"/api/runs/{run['id']}", "beta-admin"), 404, "RUN_NOT_FOUND")
    # the id can be used again
    again = await api.create_job("alpha.hook", HOOK, schedule="2h")
    assert again["version"] > 1 and api.scheduler.jobs["alpha.hook"].schedule.expr == "2h"


async def test_invalid_specs_name_each_field(api: Api) -> None:
    async def problems(spec: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = expect(await api.post("/api/jobs", "alpha-editor", json=spec),
                                      422, "VALIDATION_ERROR")
        return body

    base = {"id": "alpha.bad", "http": http_spec(HOOK)}
    body = await problems({**base, "schedule": "0 25 * * *"})
    assert body["details"]["errors"] == [{"field": "schedule", "column": 3,
                                          "message": "hour: '25' is out of range 0-23 "
                                                     "(column 3)"}]
    assert body["message"] == "schedule: hour: '25' is out of range 0-23 (column 3)"

    body = await problems({**base, "schedule": "1h", "colour": "red",
                           "http": {**http_spec(HOOK), "verb": "GET"}})
    assert sorted(e["field"] for e in body["details"]["errors"]) == ["colour", "http.verb"]

    body = await problems({**base, "schedule": "1h", "http": {"url": "ftp://example.com/x"}})
    assert [e["field"] for e in body["details"]["errors"]] == ["http.url"]
    assert "http" in body["details"]["errors"][0]["message"]

    body = await problems({**base, "schedule": "1h", "timeout": "5 parsecs"})
    assert [e["field"] for e in body["details"]["errors"]] == ["timeout"]

    body = await problems({**base, "schedule": "1h", "http": {**http_spec(HOOK),
                                                              "timeout": "soon"}})
    assert [e["field"] for e in body["details"]["errors"]] == ["http.timeout"]

    body = await problems({**base, "schedule": "1h", "retry": {"attempts": 0}})
    assert [e["field"] for e in body["details"]["errors"]] == ["retry.attempts"]

    body = await problems({"id": "alpha.bad", "schedule": "1h"})  # no request at all
    assert [e["field"] for e in body["details"]["errors"]] == ["http"]

    body = await problems({**base, "id": "-leading-dash", "schedule": "1h"})
    assert [e["field"] for e in body["details"]["errors"]] == ["id"]

    body = await problems({**base, "schedule": "1h", "enabled": "yes"})  # strict: no coercion
    assert [e["field"] for e in body["details"]["errors"]] == ["enabled"]

    body = await problems({**base, "schedule": "1h", "max_instances": 2, "overlap": "allow"})
    assert [e["field"] for e in body["details"]["errors"]] == ["max_instances"]
    assert "overlap = 'allow'" in body["details"]["errors"][0]["message"]

    assert "alpha.bad" not in api.scheduler.jobs
    assert await api.api_store.job_def("alpha.bad") is None
    r = await api.post("/api/jobs", "alpha-editor", content=b"{not json",
                       headers={"Content-Type": "application/json"})
    expect(r, 400, "BAD_REQUEST")  # docs/api.md: a body that is not JSON
    r = await api.post("/api/jobs", "alpha-editor", content=b"id=alpha.bad",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    expect(r, 400, "BAD_REQUEST")


async def test_every_change_is_audited_with_token_and_team(api: Api) -> None:
    await api.create_job("alpha.hook", HOOK, who="alpha-editor")
    expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor", json={"schedule": "2h"}),
           200)
    run = await api.trigger_done("alpha.report", who="alpha-editor")
    expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                         json={"enabled": False, "note": "n"}), 200)
    expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                         json={"enabled": True}), 200)
    expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                         json={"enabled": None}), 200)
    expect(await api.delete("/api/jobs/alpha.hook", "alpha-editor"), 204)
    entries = expect(await api.get("/api/audit", "alpha-admin"), 200)["items"]
    assert [(e["action"], e["target"]) for e in reversed(entries)] == [
        ("job.create", "alpha.hook"), ("job.update", "alpha.hook"),
        ("job.trigger", "alpha.report"), ("job.pause", "alpha.report"),
        ("job.resume", "alpha.report"), ("job.clear_override", "alpha.report"),
        ("job.delete", "alpha.hook")]
    assert {(e["actor"], e["team"]) for e in entries} == {("alpha-editor", "alpha")}
    by_action = {e["action"]: e["details"] for e in entries}
    assert by_action["job.update"] == {"changes": {"schedule": "2h"}}
    assert by_action["job.trigger"] == {"run_id": run["id"]}
    assert by_action["job.pause"] == {"note": "n", "until": None}
    assert by_action["job.create"]["spec"]["id"] == "alpha.hook"
    ids_desc = [e["id"] for e in entries]
    assert ids_desc == sorted(ids_desc, reverse=True)
    # pages of the audit log
    first = expect(await api.get("/api/audit?limit=3", "alpha-admin"), 200)
    assert [e["id"] for e in first["items"]] == ids_desc[:3]
    second = expect(await api.get(f"/api/audit?limit=10&cursor={first['next_cursor']}",
                                  "alpha-admin"), 200)
    assert [e["id"] for e in second["items"]] == ids_desc[3:]
    assert second["next_cursor"] is None
    assert expect(await api.get("/api/audit", "beta-admin"), 200)["items"] == []


async def test_a_definition_written_meanwhile_is_409_conflict(api: Api,
                                                               store_url: str) -> None:
    await api.create_job("alpha.hook", HOOK)
    other = open_api_store(store_url)  # another process rewrites the definition underneath
    try:
        d = await other.job_def("alpha.hook")
        assert d is not None
        real = api.api_store.job_def

        async def stale(job_id: str) -> Any:
            got = await real(job_id)
            await other.update_job_def(job_id, "alpha", {**d.spec, "schedule": "3h"}, "other")
            return got

        api.api_store.job_def = stale  # type: ignore[method-assign]
        body = expect(await api.patch("/api/jobs/alpha.hook", json={"schedule": "4h"}), 409,
                      "CONFLICT")
        assert body["details"] == {"job_id": "alpha.hook"}
        api.api_store.job_def = real  # type: ignore[method-assign]
    finally:
        await other.close()
    stored = await api.api_store.job_def("alpha.hook")
    assert stored is not None and stored.spec["schedule"] == "3h"
    await api.catalog.refresh()
    assert api.scheduler.jobs["alpha.hook"].schedule.expr == "3h"


async def test_a_schedule_with_no_future_fire_shows_no_next_run(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule with no further fire time (``next`` raises NoFireTimeError, as it does at
    the end of the calendar): every view says "never" (null), none fails."""

    def ended(self: CronExpr, after: datetime) -> datetime:
        raise NoFireTimeError(f"{self.expr!r}: no fire time after {after.isoformat()}")

    monkeypatch.setattr(CronExpr, "next", ended)  # the fake clock stands still: no slot due
    listed = expect(await api.get("/api/jobs", "alpha-viewer"), 200)["items"]
    assert {j["id"]: j["next_run"] for j in listed} == {
        "alpha.off": None, "alpha.report": None, "alpha.slow": None}
    detail = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert detail["next_run"] is None and detail["next_fire_times"] == []
    preview = expect(await api.post("/api/cron/preview", "alpha-viewer",
                                    json={"expr": "@daily"}), 200)
    assert preview["next"] == [] and preview["valid"] is True


async def test_every_problem_of_a_body_is_named_at_once(api: Api) -> None:
    # tried as a new user would: the 422 used to name only retry.attempts
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.bad", "schedule": "0 6 * * MON-FRY", "timezone": "Mars/Olympus",
        "retry": {"attempts": 20}, "http": {"url": "ftp://example.com/x"}}),
        422, "VALIDATION_ERROR")
    errors = {e["field"]: e for e in body["details"]["errors"]}
    assert set(errors) == {"schedule", "timezone", "retry.attempts", "http.url"}
    assert errors["schedule"]["column"] == 13 and "FRY" in errors["schedule"]["message"]
    assert "Mars/Olympus" in errors["timezone"]["message"]
    assert body["message"].endswith("(and 3 more)")
    # types, unknown keys and missing fields are in the same report
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "schedule": "1h", "enabled": "yes", "colour": "red",
        "retry": {"backoff": "fibonacci"}, "http": {"url": HOOK, "verb": "GET"}}),
        422, "VALIDATION_ERROR")
    assert sorted(e["field"] for e in body["details"]["errors"]) == [
        "colour", "enabled", "http.verb", "id", "retry.backoff"]


async def test_a_body_takes_what_a_config_task_takes(api: Api) -> None:
    body = await api.create_job(
        "alpha.hook", HOOK, recover=True, auto_pause_after=3, allow_private_targets=False,
        notify={"on": ["failure"], "webhook": "https://hooks.example.com/x"},
        http={"url": HOOK})
    assert body["spec"]["recover"] is True and body["spec"]["allow_private_targets"] is False
    job = api.scheduler.jobs["alpha.hook"]
    assert job.recover is True and job.auto_pause_after == 3
    assert job.notify is not None and job.notify.webhook == "https://hooks.example.com/x"
    # an API job never opts out of the SSRF guard: the operator's list applies
    assert job.handler.private_targets == api.runtime.api_private_targets  # type: ignore[union-attr]
    assert job.handler.notify == job.notify  # type: ignore[union-attr]
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.two", "schedule": "1h", "team": "beta", "allow_private_targets": True,
        "http": {"url": HOOK, "allow_private_targets": True}}), 422, "VALIDATION_ERROR")
    assert sorted(e["field"] for e in body["details"]["errors"]) == [
        "allow_private_targets", "http.allow_private_targets", "team"]
    assert all("[api] private_targets" in e["message"] for e in body["details"]["errors"]
               if "allow_private_targets" in e["field"])


# -- composed schedules ------------------------------------------------------------------


async def test_a_stored_job_with_several_schedules_a_bound_and_exclusions(api: Api) -> None:
    body = await api.create_job(
        "alpha.office", HOOK, schedule=["0 9 * * 1-5", "0 12 * * 6"],
        timezone="Europe/Paris", end="2026-12-31", **{"except": ["05-29", "0 12 * * 6"]})
    # T0 is Thursday 2026-05-28 20:26 UTC; Friday 29th is excluded, Saturday noon too
    live = api.scheduler.jobs["alpha.office"]
    assert live.schedule.expr == ("0 12 * * 6 | 0 9 * * 1-5 | end 2026-12-31T23:59:59+01:00"
                                  " | except 0 12 * * 6 | except 05-29")
    assert body["next_run"] == "2026-06-01T09:00:00+02:00"
    assert body["spec"]["except"] == ["05-29", "0 12 * * 6"]
    listed = expect(await api.get("/api/jobs/alpha.office"), 200)
    assert listed["schedule"] == live.schedule.expr
    assert listed["when"].startswith("At 12:00, only on Saturday; and At 09:00")


async def test_a_stored_one_off_shows_its_instant_then_never(api: Api) -> None:
    body = await api.create_job("alpha.once", HOOK, schedule=None,
                                at="2026-05-29T06:00:00+02:00")
    assert body["next_run"] == "2026-05-29T04:00:00+00:00"
    past = await api.create_job("alpha.past", HOOK, schedule=None,
                                at="2026-05-01T06:00:00+00:00")
    assert past["next_run"] is None  # done: "never"


async def test_every_problem_of_a_composed_schedule_at_once(api: Api) -> None:
    spec = {"id": "alpha.bad", "http": http_spec(HOOK), "timezone": "Europe/Paris",
            "schedule": ["0 9 * * 1-5", "0 25 * * *", 7], "at": "soon",
            "start": "2026-13-01", "except": ["12-25", "02-30", "calendar:/etc/passwd",
                                              "0 0 32 * *"]}
    body = expect(await api.post("/api/jobs", "alpha-editor", json=spec), 422,
                  "VALIDATION_ERROR")
    fields = [(e["field"], e.get("column")) for e in body["details"]["errors"]]
    assert fields == [("at", None), ("schedule[1]", 3), ("schedule[2]", None), ("at", None),
                      ("start", None), ("except[1]", 1), ("except[2]", None),
                      ("except[3]", 5)]
    messages = {e["field"]: e["message"] for e in body["details"]["errors"]}
    assert "calendar files are not accepted here" in messages["except[2]"]
    assert "passwd" not in str(body).replace("calendar:/etc/passwd", "")
    assert "alpha.bad" not in api.scheduler.jobs


async def test_preview_of_a_composed_schedule_marks_excluded_instants(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": ["0 9 * * 1-5", "0 12 * * 6"], "timezone": "Europe/Paris", "count": 3,
        "after": "2026-12-23T00:00:00+01:00", "except": ["12-25"]}), 200)
    assert body == {
        "valid": True, "timezone": "Europe/Paris", "sentence": None,
        "expr": "0 12 * * 6 | 0 9 * * 1-5 | except 12-25",
        "description": "At 12:00, only on Saturday; and At 09:00, Monday through Friday; "
                       "except 12-25",
        "next": ["2026-12-23T09:00:00+01:00", "2026-12-24T09:00:00+01:00",
                 "2026-12-26T12:00:00+01:00"],
        "excluded": ["2026-12-25T09:00:00+01:00"], "done": False, "dst": []}
    text = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "0 9 * * 1-5 | 0 12 * * 6 | except 12-25", "timezone": "Europe/Paris",
        "count": 3, "after": "2026-12-23T00:00:00+01:00"}), 200)
    assert text == body
    once = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "at": "2026-12-24T18:00:00+01:00", "after": "2027-01-01T00:00:00Z"}), 200)
    assert once["next"] == [] and once["done"] is True
    bad = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": ["0 9 * * *", "0 61 * * *"]}), 422, "INVALID_CRON")
    assert bad["details"]["errors"][0]["field"] == "expr[1]"
    expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "0 9 * * *", "except": ["calendar:/etc/passwd"]}), 422, "INVALID_CRON")
    bad = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "0 9 * * *", "start": "tomorrow"}), 422, "INVALID_CRON")
    assert bad["details"]["errors"][0]["field"] == "start"


async def test_a_private_target_is_refused_when_saved_unless_the_operator_allows_it(
        make_api: MakeApi) -> None:
    """A job that would fail on every run (`refusing 127.0.0.1: ... loopback`) is a 422
    naming http.url and the rule, at create and at update; the operator's [api]
    private_targets admits it."""
    from cronfleet.jobs.http import TargetPolicy

    api = await make_api()
    api.runtime.api_private_targets = TargetPolicy.parse([])  # nothing admitted
    for url, why in (("http://127.0.0.1:8080/hook", "127.0.0.1 is a loopback address"),
                     ("http://10.1.2.3/x", "10.1.2.3 is a private address"),
                     ("http://[::ffff:169.254.169.254]/", "is a cloud metadata address"),
                     ("http://localhost/x", "localhost is a loopback name")):
        body = expect(await api.post("/api/jobs", "alpha-editor", json={
            "id": "alpha.private", "schedule": "@daily", "http": {"url": url}}),
            422, "VALIDATION_ERROR")
        [error] = body["details"]["errors"]
        assert error["field"] == "http.url", error
        assert why in error["message"] and "[api] private_targets" in error["message"]
    assert "alpha.private" not in api.scheduler.jobs
    # a public name is not resolved when saved; it is checked at every request
    await api.create_job("alpha.public", "https://example.com/hook")
    body = expect(await api.patch("/api/jobs/alpha.public", "alpha-editor", json={
        "http": {"url": "http://127.0.0.1:9/hook"}}), 422, "VALIDATION_ERROR")
    assert [e["field"] for e in body["details"]["errors"]] == ["http.url"]
    assert api.scheduler.jobs["alpha.public"].handler.url == (  # type: ignore[union-attr]
        "https://example.com/hook")
    # the operator's list admits the target
    api.runtime.api_private_targets = TargetPolicy.parse(["127.0.0.0/8", "localhost"])
    await api.create_job("alpha.local", "http://127.0.0.1:8080/hook")
    await api.create_job("alpha.named", "http://localhost/x")
    expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.ten", "schedule": "@daily", "http": {"url": "http://10.1.2.3/x"}}),
        422, "VALIDATION_ERROR")
