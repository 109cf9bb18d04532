"""``POST /api/jobs:batch``: up to 1,000 jobs at once, all or none, judged as ``POST
/api/jobs`` judges one (spec, ids, team, role, secrets), every problem of every bad item
named as ``jobs[index].field``; on SQLite, PostgreSQL and Redis (the memory store's
``create_job_defs`` is in the store contract, tests/store/test_side_tables.py)."""

from __future__ import annotations

from typing import Any

from .conftest import Api, MakeApi, expect, http_spec

HOOK = "http://127.0.0.1:9/hook"  # never called: these jobs run daily on a fake clock


def spec(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "17 * * * *", "http": http_spec(HOOK), **fields}


async def ids(api: Api) -> set[str]:
    page = expect(await api.get("/api/jobs?limit=200", "alpha-viewer"), 200)
    return {j["id"] for j in page["items"] if j["source"] == "api"}


async def test_a_batch_creates_every_job_and_audits_it(api: Api) -> None:
    jobs = [spec(f"b{i}", schedule=f"{i} * * * *") for i in range(5)]
    body = expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": jobs}), 201)
    assert body["dry_run"] is False and body["count"] == 5
    assert [j["id"] for j in body["jobs"]] == [f"b{i}" for i in range(5)]
    versions = [j["version"] for j in body["jobs"]]
    assert versions == list(range(versions[0], versions[0] + 5))
    assert await ids(api) == {f"b{i}" for i in range(5)}
    one = expect(await api.get("/api/jobs/b3", "alpha-viewer"), 200)
    assert one["team"] == "alpha" and one["editable"] is True
    assert one["created_by"] == "alpha-editor (team alpha)"
    assert one["spec"]["schedule"] == "3 * * * *"
    assert api.scheduler.jobs["b4"].team == "alpha"  # applied to the scheduler
    audit = expect(await api.get("/api/audit", "alpha-admin"), 200)["items"]
    assert audit[0]["action"] == "job.create_batch"
    assert audit[0]["details"]["ids"] == [f"b{i}" for i in range(5)]


async def test_one_bad_item_creates_none_and_every_problem_is_named(api: Api) -> None:
    jobs = [spec("good0"),
            spec("bad1", schedule="61 * * * *"),
            spec("good2"),
            {"id": "bad3", "schedule": "0 * * * *", "http": {"url": HOOK},
             "retry": {"attempts": -1}, "timeout": "soon"},
            "not a job",
            {"schedule": "0 * * * *", "http": {"url": HOOK}}]
    body = expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": jobs}),
                  422, "VALIDATION_ERROR")
    fields = [(e["index"], e["field"]) for e in body["details"]["errors"]]
    assert (1, "jobs[1].schedule") in fields
    assert (3, "jobs[3].retry.attempts") in fields and (3, "jobs[3].timeout") in fields
    assert (4, "jobs[4]") in fields and (5, "jobs[5].id") in fields
    assert {i for i, _ in fields} == {1, 3, 4, 5}
    assert body["message"].startswith("jobs[1].schedule: ")
    assert "no job was created" in body["message"]
    assert await ids(api) == set()
    # the same batch without its bad items goes through
    expect(await api.post("/api/jobs:batch", "alpha-editor",
                          json={"jobs": [jobs[0], jobs[2]]}), 201)
    assert await ids(api) == {"good0", "good2"}


async def test_repeated_and_taken_ids_are_named(api: Api) -> None:
    await api.create_job("taken", HOOK)
    jobs = [spec("new0"), spec("taken"), spec("new0"), spec("alpha.report"),
            spec("beta.report")]
    body = expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": jobs}),
                  422, "VALIDATION_ERROR")
    errors = {(e["field"], e["message"]) for e in body["details"]["errors"]}
    assert errors == {
        ("jobs[1].id", "job id 'taken' is already taken"),
        ("jobs[2].id", "job id 'new0' is already in this batch (item 0)"),
        ("jobs[3].id", "job id 'alpha.report' is already taken"),  # declared in code
        ("jobs[4].id", "job id 'beta.report' is already taken"),  # another team's
    }
    assert await ids(api) == {"taken"}


async def test_an_id_taken_by_another_process_meanwhile_is_named(make_api: MakeApi) -> None:
    one = await make_api(instance_id="api-1")
    two = await make_api(instance_id="api-2")
    await two.create_job("elsewhere", HOOK)  # ``one`` has not refreshed its catalog yet
    body = expect(await one.post("/api/jobs:batch", "alpha-editor",
                                 json={"jobs": [spec("fresh"), spec("elsewhere")]}), 422)
    assert [e["field"] for e in body["details"]["errors"]] == ["jobs[1].id"]
    assert "fresh" not in one.scheduler.jobs
    assert (await one.api_store.job_def("fresh")) is None


async def test_1001_jobs_answer_413_naming_the_limit(api: Api) -> None:
    jobs = [{"id": f"j{i}"} for i in range(1001)]
    body = expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": jobs}),
                  413, "TOO_LARGE")
    assert body["details"] == {"field": "jobs", "limit": 1000, "count": 1001}
    assert "at most 1000" in body["message"]
    jobs = [spec(f"j{i:04d}", schedule=f"{i % 60} {i // 60 % 24} * * *")
            for i in range(1000)]
    body = expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": jobs}), 201)
    assert body["count"] == 1000


async def test_dry_run_checks_everything_and_stores_nothing(api: Api) -> None:
    jobs = [spec("d0"), spec("d1")]
    body = expect(await api.post("/api/jobs:batch?dry_run=true", "alpha-editor",
                                 json={"jobs": jobs}), 200)
    assert body["dry_run"] is True and [j["id"] for j in body["jobs"]] == ["d0", "d1"]
    assert await ids(api) == set() and "d0" not in api.scheduler.jobs
    await api.create_job("d1", HOOK)
    body = expect(await api.post("/api/jobs:batch?dry_run=true", "alpha-editor",
                                 json={"jobs": jobs}), 422)
    assert [e["field"] for e in body["details"]["errors"]] == ["jobs[1].id"]
    audit = expect(await api.get("/api/audit", "alpha-admin"), 200)["items"]
    assert all(e["action"] != "job.create_batch" for e in audit)


async def test_roles_and_teams_as_for_one_job(api: Api, secret_key: str) -> None:
    jobs = [spec("r0")]
    expect(await api.post("/api/jobs:batch", "alpha-viewer", json={"jobs": jobs}), 403)
    expect(await api.post("/api/jobs:batch", None, json={"jobs": jobs}), 401)
    body = expect(await api.post("/api/jobs:batch", "beta-editor", json={"jobs": jobs}), 201)
    assert body["count"] == 1
    assert await ids(api) == set()  # beta's job: alpha does not see it
    assert api.scheduler.jobs["r0"].team == "beta"
    # an editor's job may only use a secret bound to its hosts; an admin's may
    vault = api.runtime.vault
    assert vault is not None
    await vault.set("TOKEN", "v", "alpha")  # no hosts
    secret = spec("s1", http={"url": HOOK, "headers": {"X": "${secrets.TOKEN}"}})
    body = expect(await api.post("/api/jobs:batch", "alpha-editor",
                                 json={"jobs": [spec("s0"), secret]}), 422)
    assert body["details"]["errors"] == [{
        "field": "jobs[1].http", "index": 1,
        "message": "${secrets.TOKEN} has no hosts: only admins' jobs and config tasks may "
                   "use it (an admin sets its hosts)"}]
    expect(await api.post("/api/jobs:batch", "alpha-admin",
                          json={"jobs": [spec("s0"), secret]}), 201)
    assert await ids(api) == {"s0", "s1"}


async def test_a_body_that_is_not_a_batch(api: Api) -> None:
    expect(await api.post("/api/jobs:batch", "alpha-editor", json=[spec("x")]), 422,
           "VALIDATION_ERROR")
    expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": []}), 201)


async def test_other_processes_follow_a_batch(make_api: MakeApi) -> None:
    one = await make_api(instance_id="api-1")
    two = await make_api(instance_id="api-2")
    expect(await one.post("/api/jobs:batch", "alpha-editor",
                          json={"jobs": [spec("f0"), spec("f1")]}), 201)
    await two.catalog.refresh()
    assert {"f0", "f1"} <= set(two.scheduler.jobs)
    # the writer, up to date after its own batch, still sees the next change elsewhere
    await two.create_job("f2", HOOK)
    await one.catalog.refresh()
    assert "f2" in one.scheduler.jobs and one.scheduler.jobs["f1"].team == "alpha"
