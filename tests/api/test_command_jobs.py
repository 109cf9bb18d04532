"""Command jobs over the API: refused unless the server turns them on, editor role, every
problem at once, a stored command job really runs; a process with them off ignores one."""

from __future__ import annotations

from cronfleet.api.app import ApiSettings

from .conftest import MakeApi, eventually, expect

ON = ApiSettings(allow_command_jobs=True)


def spec(**extra: object) -> dict[str, object]:
    return {"id": "sh.echo", "schedule": "@daily",
            "command": ["sh", "-c", "echo job=$CRONFLEET_JOB greeting=$GREETING"],
            "env": {"GREETING": "hi"}, **extra}


async def test_command_jobs_are_off_by_default(make_api: MakeApi) -> None:
    api = await make_api()
    body = expect(await api.post("/api/jobs", "alpha-editor", json=spec()), 403,
                  "COMMAND_JOBS_DISABLED")
    assert "allow_command_jobs = true" in body["message"]
    assert body["details"]["setting"] == "[api] allow_command_jobs"
    expect(await api.get("/api/jobs/sh.echo"), 404, "JOB_NOT_FOUND")
    assert await api.api_store.job_def("sh.echo") is None


async def test_a_stored_command_job_runs(make_api: MakeApi) -> None:
    api = await make_api(settings=ON, real_clock=True)
    expect(await api.post("/api/jobs", "alpha-viewer", json=spec()), 403)
    job = expect(await api.post("/api/jobs", "alpha-editor", json=spec(timeout="1m")), 201)
    assert job["description"] == "sh -c 'echo job=$CRONFLEET_JOB greeting=$GREETING'"
    assert job["spec"]["command"] == ["sh", "-c", "echo job=$CRONFLEET_JOB greeting=$GREETING"]
    run = await api.trigger_done("sh.echo")
    assert run["status"] == "succeeded", run
    assert "[stdout] job=sh.echo greeting=hi" in run["logs"]
    assert run["result"]["exit_code"] == 0
    assert run["result"]["argv"] == ["sh", "-c", "echo job=$CRONFLEET_JOB greeting=$GREETING"]
    # a patch changes the live command
    expect(await api.patch("/api/jobs/sh.echo", "alpha-editor",
                           json={"command": ["sh", "-c", "exit 7"]}), 200)
    run = await api.trigger_done("sh.echo")
    assert run["status"] == "failed" and run["result"]["exit_code"] == 7
    assert run["error"] == "CommandFailed: sh: exit code 7 (success codes: 0)"


async def test_every_problem_of_a_command_job_at_once(make_api: MakeApi) -> None:
    api = await make_api(settings=ON)
    body = expect(await api.post("/api/jobs", "alpha-editor", json=spec(
        command="echo hi", env={"CRONFLEET_X": "1"}, success_codes=[], max_output=5)), 422,
        "VALIDATION_ERROR")
    fields = [e["field"] for e in body["details"]["errors"]]
    assert fields == ["command", "env.CRONFLEET_X", "success_codes", "max_output"]
    body = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "both", "schedule": "@daily", "command": ["true"],
        "http": {"url": "https://example.com"}}), 422, "VALIDATION_ERROR")
    assert "either a command or an http request" in body["message"]


async def test_a_process_with_command_jobs_off_ignores_a_stored_one(make_api: MakeApi
                                                                    ) -> None:
    on = await make_api(settings=ON)
    expect(await on.post("/api/jobs", "alpha-editor", json=spec()), 201)
    off = await make_api(instance_id="api-2", jobs=False)
    await off.catalog.refresh()
    await eventually(lambda: off.catalog._cursor[0] >= 1, what="the catalog read")
    assert "sh.echo" not in off.scheduler.jobs
    assert "sh.echo" in on.scheduler.jobs


async def test_only_an_admins_command_job_may_use_secrets(make_api: MakeApi) -> None:
    # a command can send a value anywhere: no host binding can hold for it
    api = await make_api(settings=ON)
    body = expect(await api.post("/api/jobs", "alpha-editor", json=spec(
        env={"TOKEN": "${secrets.API_TOKEN}"})), 422, "VALIDATION_ERROR")
    assert body["details"]["errors"][0]["field"] == "env.TOKEN"
    assert "only an admin's command job may use secrets" in body["message"]
    expect(await api.post("/api/jobs", "alpha-admin", json=spec(
        env={"TOKEN": "${secrets.API_TOKEN}"})), 201)
