"""/healthz, /readyz and /metrics (public by default, behind a token when configured), and
POST /api/cron/preview."""

from __future__ import annotations

from typing import Any

import pytest

from cronfleet.api.app import ApiSettings

from .conftest import Api, MakeApi, expect


async def test_healthz_needs_nothing(api: Api) -> None:
    assert expect(await api.get("/healthz", None), 200) == {"status": "ok"}


async def test_readyz_is_ready_with_a_running_scheduler(api: Api) -> None:
    body = expect(await api.get("/readyz", None), 200)
    assert body["status"] == "ready"
    assert body["checks"]["store"] == "ok" and body["checks"]["loop"] == "ok"
    sched = body["checks"]["scheduler"]
    assert sched["instance_id"] == "api-1" and sched["running"] is True
    assert sched["loop_alive"] is True and sched["jobs"] == 4


async def test_readyz_fails_when_the_scheduler_stopped(api: Api) -> None:
    await api.scheduler.stop()
    body = expect(await api.get("/readyz", None), 503)
    assert body["status"] == "not ready"
    assert body["checks"]["scheduler"]["running"] is False
    assert body["checks"]["loop"] == "the scheduler loop is not running"
    expect(await api.get("/healthz", None), 200)  # alive, just not ready


async def test_readyz_fails_when_the_store_is_unreachable(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from cronfleet.errors import StoreUnavailable

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("connection refused")

    monkeypatch.setattr(api.scheduler.store, "list_runs", down)
    body = expect(await api.get("/readyz", None), 503)
    assert body["status"] == "not ready"
    assert body["checks"]["store"] == "unreachable: StoreUnavailable: connection refused"
    monkeypatch.undo()
    expect(await api.get("/readyz", None), 200)


async def test_readyz_fails_while_the_store_is_closed(api: Api) -> None:
    await api.scheduler.store.close()
    body = expect(await api.get("/readyz", None), 503)
    assert body["checks"]["store"].startswith("unreachable: StoreError: ")
    assert body["checks"]["store"].endswith("is not open")
    await api.scheduler.store.open()
    assert expect(await api.get("/readyz", None), 200)["status"] == "ready"


async def test_an_api_over_a_stopped_scheduler_refuses_with_503(make_api: MakeApi) -> None:
    api = await make_api()
    await api.scheduler.stop()
    body = expect(await api.get("/api/jobs"), 503, "SCHEDULER_NOT_RUNNING")
    assert body["message"] == "the scheduler is not running in this process"


async def test_metrics_are_public_by_default(api: Api) -> None:
    await api.trigger_done("alpha.report")
    r = await api.get("/metrics", None)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    lines = r.text.splitlines()
    assert "cronfleet_jobs 4.0" in lines
    assert 'cronfleet_run_outcomes_total{status="succeeded"} 1.0' in lines
    assert "cronfleet_leases_held 0.0" in lines
    assert "cronfleet_fail_open_runs_total 0.0" in lines
    assert any(line.startswith("cronfleet_loop_overdue_seconds ") for line in lines)


async def test_metrics_behind_a_token(make_api: MakeApi) -> None:
    api = await make_api(settings=ApiSettings(metrics="token"))
    body = expect(await api.get("/metrics", None), 401, "UNAUTHORIZED")
    assert body["message"].startswith("missing bearer token")
    expect(await api.get("/metrics", "cf_bogus"), 401, "UNAUTHORIZED")
    r = await api.get("/metrics", "beta-viewer")
    assert r.status_code == 200 and "cronfleet_jobs 4.0" in r.text.splitlines()
    expect(await api.get("/healthz", None), 200)
    expect(await api.get("/readyz", None), 200)


async def test_cron_preview(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "*/15 9-17 * * MON-FRI", "timezone": "Europe/Paris", "count": 3,
        "after": "2026-05-29T16:50:00+02:00"}), 200)
    assert body == {
        "valid": True, "expr": "*/15 9-17 * * MON-FRI", "sentence": None,
        "timezone": "Europe/Paris",
        "description": "Every 15 minutes, between 09:00 and 17:59, Monday through Friday",
        "next": ["2026-05-29T17:00:00+02:00", "2026-05-29T17:15:00+02:00",
                 "2026-05-29T17:30:00+02:00"],
        "excluded": [], "done": False, "dst": [],
    }
    # default: the next 10 from now
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={"expr": "@hourly"}),
                  200)
    assert len(body["next"]) == 10 and body["description"] == "Every hour"


async def test_cron_preview_marks_fire_times_on_a_clock_change_day(api: Api) -> None:
    """The 02:30 export on the nights the clocks change in Paris: the spring-forward night
    has no 02:30 (it runs at 03:00), the fall-back night has two; both days are marked."""
    spring = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "30 2 * * *", "timezone": "Europe/Paris", "count": 3,
        "after": "2026-03-28T12:00:00+01:00"}), 200)
    assert spring["next"] == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00",
                              "2026-03-31T02:30:00+02:00"]
    assert spring["dst"] == [{"time": "2026-03-29T03:00:00+02:00", "shift": "+1:00:00"}]
    autumn = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "every day at 02:30", "timezone": "Europe/Paris", "count": 2,
        "after": "2026-10-24T12:00:00+02:00"}), 200)
    assert [m["shift"] for m in autumn["dst"]] == ["-1:00:00"]
    assert autumn["dst"][0]["time"].startswith("2026-10-25T02:30:00")


@pytest.mark.parametrize(("expr", "column", "cron_field"), [
    ("*/15 9-77 * * MON-FRI", 8, "hour"),
    ("0 0 32 * *", 5, "day-of-month"),
    ("0 0 * * FUNDAY", 9, "day-of-week"),
])
async def test_invalid_cron_preview_names_the_column(api: Api, expr: str, column: int,
                                                     cron_field: str) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={"expr": expr}),
                  422, "INVALID_CRON")
    [error] = body["details"]["errors"]
    assert error["field"] == "expr"
    assert error["column"] == column
    assert error["cron_field"] == cron_field
    assert f"(column {column})" in body["message"]


async def test_cron_preview_of_an_unknown_time_zone(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer",
                                 json={"expr": "@daily", "timezone": "Mars/Olympus"}),
                  422, "INVALID_CRON")
    assert body["details"]["errors"][0]["field"] == "timezone"
    expect(await api.post("/api/cron/preview", None, json={"expr": "@daily"}), 401,
           "UNAUTHORIZED")
