"""GET /api/runs (runs across jobs: filters, cursor paging, team scoping) and
GET /api/runs/running (what runs now, where, until when its lease holds), on SQLite and
PostgreSQL through the real app."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronfleet import FakeClock
from cronfleet.api import deps

from .conftest import T0, Api, eventually, expect


async def _ids(api: Api, query: str, who: str = "alpha-viewer") -> list[int]:
    body = expect(await api.get(f"/api/runs{query}", who), 200)
    return [r["id"] for r in body["items"]]


async def test_runs_across_jobs_filter_page_and_stay_in_the_team(api: Api,
                                                                  clock: FakeClock) -> None:
    early = [await api.trigger_done("alpha.report") for _ in range(2)]
    beta = []
    for _ in range(2):
        accepted = expect(await api.post("/api/jobs/beta.report/trigger", "beta-editor"), 202)
        beta.append(await api.run_done(accepted["run_id"], "beta-viewer"))
    clock.advance(3600)
    late = [await api.trigger_done("alpha.report") for _ in range(2)]
    alpha = [r["id"] for r in reversed(early + late)]  # newest first

    assert await _ids(api, "") == alpha
    assert await _ids(api, "", "beta-viewer") == [r["id"] for r in reversed(beta)]
    assert await _ids(api, "?job=alpha.report&status=succeeded") == alpha
    assert await _ids(api, "?status=failed") == []
    # since / until: a duration back from now, or an ISO time (bounds the slot)
    assert await _ids(api, "?since=30m") == alpha[:2]
    assert await _ids(api, "?until=30m") == alpha[2:]
    t1 = datetime.fromtimestamp(T0 + 1800, UTC).isoformat()
    assert await _ids(api, f"?since={t1.replace('+', '%2B')}") == alpha[:2]
    assert await _ids(api, "?since=2026-05-28T20:00:00") == alpha  # no offset: UTC
    assert await _ids(api, "?instance=api-1") == alpha
    assert await _ids(api, "?instance=elsewhere") == []
    # pages of 3, through next_cursor: every run once, in order
    first = expect(await api.get("/api/runs?limit=3", "alpha-viewer"), 200)
    assert [r["id"] for r in first["items"]] == alpha[:3] and first["next_cursor"]
    rest = expect(await api.get(f"/api/runs?limit=3&cursor={first['next_cursor']}",
                                "alpha-viewer"), 200)
    assert [r["id"] for r in rest["items"]] == alpha[3:] and rest["next_cursor"] is None
    # another team's job is a 404, as on /api/jobs/{id}/runs; bad values name their field
    expect(await api.get("/api/runs?job=beta.report", "alpha-viewer"), 404, "JOB_NOT_FOUND")
    bad = expect(await api.get("/api/runs?since=yesterday-ish", "alpha-viewer"), 422,
                 "VALIDATION_ERROR")
    assert bad["details"]["errors"][0]["field"] == "since"
    bad = expect(await api.get("/api/runs?cursor=nope", "alpha-viewer"), 422, "VALIDATION_ERROR")
    assert bad["details"]["errors"][0]["field"] == "cursor"
    expect(await api.get("/api/runs?status=exploded", "alpha-viewer"), 422, "VALIDATION_ERROR")
    expect(await api.get("/api/runs", None), 401)


async def _pages(api: Api, limit: int, who: str) -> list[tuple[list[int], bool]]:
    """Every page of ``GET /api/runs?limit=``: its run ids, and whether it has a next."""
    pages: list[tuple[list[int], bool]] = []
    cursor = ""
    while True:
        body = expect(await api.get(f"/api/runs?limit={limit}{cursor}", who), 200)
        pages.append(([r["id"] for r in body["items"]], body["next_cursor"] is not None))
        if body["next_cursor"] is None:
            return pages
        cursor = f"&cursor={body['next_cursor']}"


async def test_a_large_team_pages_its_runs_as_a_small_one(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team with more than ``SCOPE_IDS`` stored jobs has its runs read in order and its
    own kept (``deps.team_runs``): the same pages as by the list of its ids, and no empty
    page after a full last one."""
    for who in ("alpha-editor", "beta-editor"):  # one stored job each, never due here
        team = who.split("-")[0]
        await api.create_job(f"{team}.hook", "http://127.0.0.1:9/hook", who,
                             schedule="0 0 1 1 *")
    alpha: list[int] = []
    beta: list[int] = []
    for k in range(5):  # interleaved: beta's runs sit between alpha's
        alpha.append((await api.trigger_done("alpha.report"))["id"])
        if k % 2:
            accepted = expect(await api.post("/api/jobs/beta.report/trigger",
                                             "beta-editor"), 202)
            beta.append((await api.run_done(accepted["run_id"], "beta-viewer"))["id"])
    for limit in (1, 2, 3, 5, 6):
        by_ids = await _pages(api, limit, "alpha-viewer")
        monkeypatch.setattr(deps, "SCOPE_IDS", 0)  # both teams now "large"
        kept = await _pages(api, limit, "alpha-viewer")
        theirs = await _pages(api, limit, "beta-viewer")
        monkeypatch.undo()
        assert kept == by_ids, limit
        assert [i for ids, _ in kept for i in ids] == alpha[::-1], limit
        assert all(ids for ids, _ in kept), limit  # never an empty page
        assert [i for ids, _ in theirs for i in ids] == beta[::-1], limit


async def test_running_now_shows_run_job_instance_start_and_lease(api: Api) -> None:
    assert expect(await api.get("/api/runs/running", "alpha-viewer"), 200) == {"items": []}
    accepted = expect(await api.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 202)

    async def listed() -> list[dict[str, object]]:
        body = expect(await api.get("/api/runs/running", "alpha-viewer"), 200)
        return list(body["items"])

    [item] = await eventually(listed, what="the slow run listed as running")
    assert item["run_id"] == accepted["run_id"] and item["job_id"] == "alpha.slow"
    assert item["instance_id"] == "api-1" and item["started_at"] is not None
    assert item["lease_until"] is not None and item["lease_until"] > item["started_at"]
    same = expect(await api.get("/api/runs?status=running", "alpha-viewer"), 200)
    assert [r["id"] for r in same["items"]] == [accepted["run_id"]]
    assert expect(await api.get("/api/runs/running", "beta-viewer"), 200) == {"items": []}
    api.gate.set()
    await api.run_done(accepted["run_id"])
    assert expect(await api.get("/api/runs/running", "alpha-viewer"), 200) == {"items": []}
