"""PUT /api/admin/cron/{id}: pause, timed pause, force on, clear -- recorded in the store
for every process -- and a 503 that changes nothing when the store cannot record it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from cronfleet import FakeClock
from cronfleet.errors import StoreUnavailable
from cronfleet.store import open_store
from store.pg import TcpProxy, pg_url

from .conftest import T0_ISO, Api, MakeApi, eventually, expect


async def state_row(api: Api, job_id: str) -> Any:
    return (await api.scheduler.store.read_states([job_id]))[job_id]


async def test_pause_records_who_when_and_why(api: Api) -> None:
    body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                json={"enabled": False, "note": "db migration"}), 200)
    assert body == {
        "job_id": "alpha.report", "declared_enabled": True, "enabled": False,
        "override": {"enabled": False, "by": "alpha-editor (team alpha)", "at": T0_ISO,
                     "note": "db migration", "until": None, "expired": False},
        "lease": None,
    }
    row = await state_row(api, "alpha.report")
    assert row.enabled_override is False
    assert row.override_by == "alpha-editor (team alpha)"
    assert row.override_note == "db migration"
    assert row.override_at == datetime.fromisoformat(T0_ISO)
    assert row.override_until is None
    detail = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert detail["paused"] is True and detail["enabled"] is False
    assert detail["override"] == body["override"]


@pytest.mark.parametrize(("until", "expected"), [
    ("90m", "2026-05-28T21:56:40+00:00"),
    (3600, "2026-05-28T21:26:40+00:00"),
    ("2026-05-29T00:00:00Z", "2026-05-29T00:00:00+00:00"),
    ("2026-05-29T08:00:00+02:00", "2026-05-29T06:00:00+00:00"),
    # no offset: read in the job's time zone (UTC for this job), as the CLI and the
    # scheduler read it (one rule: spec.pause_until)
    ("2026-05-29T00:00:00", "2026-05-29T00:00:00+00:00"),
])
async def test_timed_pause_ends_by_itself(api: Api, clock: FakeClock, until: Any,
                                          expected: str) -> None:
    body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                json={"enabled": False, "until": until}), 200)
    assert body["override"]["until"] == expected
    assert body["enabled"] is False and body["override"]["expired"] is False
    row = await state_row(api, "alpha.report")
    assert row.override_until == datetime.fromisoformat(expected)
    audit = expect(await api.get("/api/audit"), 200)["items"][0]
    assert audit["action"] == "job.pause"
    assert audit["details"]["note"] is None
    assert datetime.fromisoformat(audit["details"]["until"]) == datetime.fromisoformat(expected)
    clock.set(datetime.fromisoformat(expected).timestamp() + 1)
    detail = expect(await api.get("/api/jobs/alpha.report", "alpha-viewer"), 200)
    assert detail["enabled"] is True and detail["paused"] is False
    assert detail["override"]["expired"] is True


async def test_force_on_and_clear(api: Api) -> None:
    body = expect(await api.put("/api/admin/cron/alpha.off", "alpha-editor",
                                json={"enabled": True, "note": "run it anyway"}), 200)
    assert body["declared_enabled"] is False and body["enabled"] is True
    assert body["override"]["enabled"] is True
    assert expect(await api.get("/api/jobs/alpha.off"), 200)["enabled"] is True
    body = expect(await api.put("/api/admin/cron/alpha.off", "alpha-editor",
                                json={"enabled": None}), 200)
    assert body["enabled"] is False and body["override"] is None
    row = await state_row(api, "alpha.off")
    assert row.enabled_override is None
    actions = [e["action"] for e in expect(await api.get("/api/audit"), 200)["items"]]
    assert actions == ["job.clear_override", "job.resume"]


async def test_the_pause_is_seen_by_another_process(make_api: MakeApi) -> None:
    one = await make_api(instance_id="api-1")
    two = await make_api(instance_id="api-2")
    expect(await one.put("/api/admin/cron/alpha.report", "alpha-editor",
                         json={"enabled": False}), 200)
    detail = expect(await two.get("/api/jobs/alpha.report"), 200)
    assert detail["paused"] is True
    assert detail["override"]["by"] == "alpha-editor (team alpha)"


@pytest.mark.parametrize(("body", "field"), [
    ({"enabled": False, "until": "soon"}, "until"),
    ({"enabled": False, "until": -5}, "until"),
    ({"enabled": False, "until": "2020-01-01T00:00:00Z"}, "until"),  # in the past
    ({"enabled": False, "until": "2026-05-28T00:00:00"}, "until"),  # job's zone: past
    ({"enabled": None, "until": "1h"}, "until"),
    ({"enabled": "false"}, "enabled"),
    ({"enabled": False, "notes": "typo"}, "notes"),
    ({}, "enabled"),
])
async def test_invalid_override_is_422_and_changes_nothing(api: Api, body: dict[str, Any],
                                                           field: str) -> None:
    r = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor", json=body), 422,
               "VALIDATION_ERROR")
    assert [e["field"] for e in r["details"]["errors"]] == [field]
    assert r["message"].startswith(f"{field}: ")
    assert (await state_row(api, "alpha.report")).enabled_override is None
    assert expect(await api.get("/api/audit"), 200)["items"] == []


async def test_store_failure_is_503_and_changes_nothing(api: Api,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the store did not answer")

    monkeypatch.setattr(api.scheduler.store, "set_override", down)
    body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                json={"enabled": False, "note": "x"}), 503,
                  "STORE_UNAVAILABLE")
    assert body["message"] == ("cannot record the change: the store did not answer; "
                               "nothing changed")
    monkeypatch.undo()
    assert (await state_row(api, "alpha.report")).enabled_override is None
    assert expect(await api.get("/api/audit"), 200)["items"] == []
    assert expect(await api.get("/api/jobs/alpha.report"), 200)["paused"] is False


@pytest.mark.parametrize("store_kind", ["postgres"])  # a TCP proxy in front of PostgreSQL
async def test_cut_postgres_connection_is_503_and_changes_nothing(
        make_api: MakeApi, store_url: str, clock: FakeClock) -> None:
    schema_opt = store_url.split("?", 1)[1]
    with TcpProxy(pg_url()) as proxy:
        # the run store goes through the proxy; tokens and audit do not
        api = await make_api(url=f"{proxy.url}?{schema_opt}", api_store_url=store_url)
        expect(await api.get("/api/jobs/alpha.report"), 200)
        proxy.cut()
        body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                    json={"enabled": False}), 503, "STORE_UNAVAILABLE")
        assert body["message"].startswith("cannot record the change: ")
        assert body["message"].endswith("; nothing changed")
        probe = expect(await api.get("/readyz", None), 503)
        assert probe["status"] == "not ready"
        assert probe["checks"]["store"].startswith("unreachable: ")
        proxy.restore()
        direct = open_store(store_url, clock=clock)
        await direct.open()
        try:
            row = (await direct.read_states(["alpha.report"]))["alpha.report"]
            assert row.enabled_override is None
        finally:
            await direct.close()
        assert expect(await api.get("/api/audit"), 200)["items"] == []
        # the store comes back: ready again, and the same request now works
        await eventually(lambda: ready(api), what="ready after the restore")
        body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                    json={"enabled": False}), 200)
        assert body["override"]["enabled"] is False
        await api.scheduler.stop()


async def ready(api: Api) -> bool:
    return (await api.get("/readyz", None)).status_code == 200



@pytest.mark.parametrize("store_kind", ["postgres"])  # bench/chaos's proxy before PostgreSQL
async def test_a_store_that_hangs_answers_503_within_the_deadline(
        make_api: MakeApi, store_url: str) -> None:
    """A stalled PostgreSQL (connections open, nothing answered): the PUT answers 503 with
    Retry-After within the interactive deadline (2 s), not after the pool's 10 s."""
    import time

    from bench.chaos.faults import FaultProxy
    from cronfleet.api.deps import INTERACTIVE_DEADLINE

    schema_opt = store_url.split("?", 1)[1]
    with FaultProxy(pg_url()) as proxy:
        # the run store goes through the proxy; tokens and audit do not
        api = await make_api(url=f"{proxy.url}?{schema_opt}", api_store_url=store_url)
        expect(await api.get("/api/jobs/alpha.report"), 200)
        proxy.stall()
        try:
            began = time.monotonic()
            r = await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                              json={"enabled": False, "note": "stalled"})
            took = time.monotonic() - began
            body = expect(r, 503, "STORE_UNAVAILABLE")
            assert INTERACTIVE_DEADLINE <= took < INTERACTIVE_DEADLINE + 1.5, took
            assert r.headers["Retry-After"] == "5"
            assert body["message"].startswith("cannot record the change: the store did "
                                              "not answer within 2s")
            assert expect(await api.get("/api/audit"), 200)["items"] == []
        finally:
            proxy.restore()
        # the store answers again: the same request goes through
        body = expect(await api.put("/api/admin/cron/alpha.report", "alpha-editor",
                                    json={"enabled": False, "note": "stalled"}), 200)
        assert body["override"]["enabled"] is False
        await api.scheduler.stop()
