"""Values accepted before and meaningless (#24, item 7), each now a clear answer naming
the field: a reversed cron range in minutes or days of the month (the field and column,
as every cron error), an ``auto_pause_after`` past its maximum (1,000); an HTTP method in
lower case is the method, stored and shown upper-case."""

from __future__ import annotations

from .conftest import Api, expect

HOOK = "http://127.0.0.1:9/hook"  # never called: daily jobs on a fake clock


async def test_a_reversed_range_is_refused_naming_field_and_column(api: Api) -> None:
    got = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.rev", "schedule": "5-1 * * * *", "http": {"url": HOOK}}), 422)
    [err] = got["details"]["errors"]
    assert err["field"] == "schedule"
    assert "minute: range '5-1' is reversed" in err["message"]
    assert "column 1" in err["message"]
    got = expect(await api.post("/api/jobs", "alpha-editor", json={
        "id": "alpha.rev", "schedule": "0 0 25-5 * *", "http": {"url": HOOK}}), 422)
    assert "day-of-month: range '25-5' is reversed" in got["message"]
    # the wraps that mean something stay: the night, the weekend
    await api.create_job("alpha.night", HOOK, schedule="0 22-2 * * FRI-MON")


async def test_auto_pause_after_has_a_maximum(api: Api) -> None:
    for n in (10**30, 1001):
        got = expect(await api.post("/api/jobs", "alpha-editor", json={
            "id": "alpha.big", "schedule": "@daily", "auto_pause_after": n,
            "http": {"url": HOOK}}), 422)
        [err] = got["details"]["errors"]
        assert err["field"] == "auto_pause_after"
        assert "from 1 to 1000" in err["message"]
    body = await api.create_job("alpha.big", HOOK, auto_pause_after=1000)
    assert body["spec"]["auto_pause_after"] == 1000


async def test_a_lower_case_method_is_stored_upper_case(api: Api) -> None:
    body = await api.create_job("alpha.m", HOOK, http={"url": HOOK, "method": "post"})
    assert body["spec"]["http"]["method"] == "POST"
    assert api.scheduler.jobs["alpha.m"].description == f"POST {HOOK}"
    again = expect(await api.get("/api/jobs/alpha.m", "alpha-viewer"), 200)
    assert again["spec"]["http"]["method"] == "POST"
    patched = expect(await api.patch("/api/jobs/alpha.m", "alpha-editor",
                                     json={"http": {"method": "delete"}}), 200)
    assert patched["spec"]["http"]["method"] == "DELETE"
