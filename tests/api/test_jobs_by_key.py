"""``GET /api/jobs`` read by key (#27, "reading at a million"): declared jobs (in memory)
merged with the stored definitions read from ``job_defs`` in ``(team, id)`` pages, so a
process lists, shows and scopes runs of API jobs it does not hold; ``prefix``, the bounded
``text`` scan, and bad ``cursor`` / ``prefix`` input. On SQLite, PostgreSQL and Redis."""

from __future__ import annotations

from typing import Any

from cronfleet.catalog import SOURCE

from .conftest import Api, expect, http_spec

HOOK = "http://127.0.0.1:9/hook"  # fails at once when triggered (nothing listens)
DECLARED = ["alpha.off", "alpha.report", "alpha.slow"]  # conftest.declare, team alpha


def spec(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "17 3 * * *", "http": http_spec(HOOK), **fields}


async def batch(api: Api, who: str, ids: list[str]) -> None:
    expect(await api.post("/api/jobs:batch", who, json={"jobs": [spec(i) for i in ids]}),
           201)


async def walk(api: Api, query: str, who: str = "alpha-viewer", limit: int = 3
               ) -> tuple[list[str], int]:
    """Every id of every page of ``/api/jobs?{query}``, in order, and how many pages."""
    out: list[str] = []
    cursor = None
    pages = 0
    while True:
        q = f"{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        page = expect(await api.get(f"/api/jobs?{q}", who), 200)
        pages += 1
        assert len(page["items"]) <= limit
        out += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return out, pages
        assert pages < 100, out


def forget(api: Api, *ids: str) -> None:
    """This process no longer holds these stored jobs (another process's share): gone from
    its scheduler and its catalog, still in ``job_defs``."""
    for job_id in ids:
        api.scheduler.remove_job(job_id)
        api.catalog._versions.pop(job_id)
        assert job_id not in api.scheduler.jobs


async def test_pages_merge_declared_and_stored_jobs_once_each_across_teams(api: Api) -> None:
    # stored ids before, between and after the declared ones; beta's interleave them too
    mine = ["alpha.a1", "alpha.a2", "alpha.p", "alpha.r", "alpha.s0", "alpha.z1", "alpha.z2"]
    await batch(api, "alpha-editor", mine)
    await batch(api, "beta-editor", ["alpha-b.x", "alpha.q", "beta.y"][1:])
    forget(api, "alpha.p", "alpha.z2")  # held elsewhere: still listed
    every = sorted([*mine, *DECLARED])
    for limit in (1, 2, 3, 4, 50):
        ids, pages = await walk(api, "x=1", limit=limit)
        assert ids == every, limit  # id order, no duplicate, no gap
        assert pages == -(-len(every) // limit), limit  # no empty last page
    first = expect(await api.get("/api/jobs?limit=50", "alpha-viewer"), 200)["items"]
    by_id = {j["id"]: j for j in first}
    assert all(by_id[i]["editable"] and by_id[i]["source"] == SOURCE for i in mine)
    assert not any(by_id[i]["editable"] for i in DECLARED)
    assert by_id["alpha.p"]["schedule"] == "17 3 * * *"
    assert by_id["alpha.p"]["next_fire"] is not None
    beta = [j["id"] for j in expect(await api.get("/api/jobs", "beta-viewer"), 200)["items"]]
    assert beta == ["alpha.q", "beta.report", "beta.y"]


async def test_prefix_reads_the_ids_starting_with_it(api: Api) -> None:
    await batch(api, "alpha-editor", ["alpha.a1", "alpha.a2", "alpha.a20", "alpha.ab",
                                      "alpha.b1"])
    await batch(api, "beta-editor", ["alpha.a3"])
    ids, _ = await walk(api, "prefix=alpha.a", limit=2)
    assert ids == ["alpha.a1", "alpha.a2", "alpha.a20", "alpha.ab"]
    ids, _ = await walk(api, "prefix=alpha.a2", limit=1)
    assert ids == ["alpha.a2", "alpha.a20"]
    ids, _ = await walk(api, "prefix=alpha.r", limit=5)  # a declared one
    assert ids == ["alpha.report"]
    ids, _ = await walk(api, "prefix=alpha.a3", limit=5)  # beta's: not alpha's to see
    assert ids == []
    ids, _ = await walk(api, "prefix=alpha.a3", who="beta-viewer", limit=5)
    assert ids == ["alpha.a3"]


async def test_text_matches_id_or_description_of_stored_jobs(api: Api) -> None:
    expect(await api.post("/api/jobs:batch", "alpha-editor", json={"jobs": [
        spec("alpha.x1", description="Nightly EXPORT of shard 1"),
        spec("alpha.x2", description="cleanup"),
        spec("alpha.export", description="")]}), 201)
    forget(api, "alpha.x1")
    ids, _ = await walk(api, "text=export", limit=1)
    assert ids == ["alpha.export", "alpha.x1"]


async def test_a_stored_job_this_process_does_not_hold_is_listed_got_and_its_runs_seen(
        api: Api) -> None:
    await api.create_job("alpha.hook", HOOK)
    run = await api.trigger_done("alpha.hook")
    forget(api, "alpha.hook")
    listed = expect(await api.get("/api/jobs?prefix=alpha.hook", "alpha-viewer"), 200)
    assert [(j["id"], j["editable"]) for j in listed["items"]] == [("alpha.hook", True)]
    one = expect(await api.get("/api/jobs/alpha.hook", "alpha-viewer"), 200)
    assert one["spec"]["http"]["url"] == HOOK and one["editable"] is True
    assert [r["id"] for r in one["recent_runs"]] == [run["id"]]
    runs = expect(await api.get("/api/jobs/alpha.hook/runs", "alpha-viewer"), 200)
    assert [r["id"] for r in runs["items"]] == [run["id"]]
    expect(await api.get(f"/api/runs/{run['id']}", "alpha-viewer"), 200)
    across = expect(await api.get("/api/runs?limit=200", "alpha-viewer"), 200)
    assert run["id"] in [r["id"] for r in across["items"]]
    # another team sees none of it
    expect(await api.get("/api/jobs/alpha.hook", "beta-viewer"), 404, "JOB_NOT_FOUND")
    expect(await api.get("/api/jobs/alpha.hook/runs", "beta-viewer"), 404)
    expect(await api.get(f"/api/runs/{run['id']}", "beta-viewer"), 404, "RUN_NOT_FOUND")
    beta_runs = expect(await api.get("/api/runs?limit=200", "beta-viewer"), 200)
    assert run["id"] not in [r["id"] for r in beta_runs["items"]]
    # editable although not held: a change applies it here
    changed = expect(await api.patch("/api/jobs/alpha.hook", "alpha-editor",
                                     json={"description": "moved"}), 200)
    assert changed["spec"]["description"] == "moved"


async def test_a_deleted_stored_job_is_not_listed_nor_got_but_its_runs_keep_the_team(
        api: Api) -> None:
    await api.create_job("alpha.gone", HOOK)
    run = await api.trigger_done("alpha.gone")
    expect(await api.delete("/api/jobs/alpha.gone", "alpha-editor"), 204)
    ids, _ = await walk(api, "prefix=alpha.g", limit=5)
    assert ids == []
    expect(await api.get("/api/jobs/alpha.gone", "alpha-viewer"), 404, "JOB_NOT_FOUND")
    expect(await api.get(f"/api/runs/{run['id']}", "alpha-viewer"), 200)
    across = expect(await api.get("/api/runs?limit=200", "alpha-viewer"), 200)
    assert run["id"] in [r["id"] for r in across["items"]]


async def test_bad_cursor_or_prefix_is_422_naming_the_parameter(api: Api) -> None:
    for query, name in (("cursor=a%20b", "cursor"), ("prefix=%C3%A9t%C3%A9", "prefix"),
                        ("prefix=a*", "prefix"), ("cursor=x%3By", "cursor")):
        body = expect(await api.get(f"/api/jobs?{query}", "alpha-viewer"), 422,
                      "VALIDATION_ERROR")
        assert body["message"].startswith(f"{name}: "), body
        assert body["details"]["errors"][0]["field"] == name
    body = expect(await api.get("/api/jobs?prefix=" + "a" * 201, "alpha-viewer"), 422)
    assert "prefix" in str(body["details"])
    # an empty one is no filter
    ids, _ = await walk(api, "prefix=&cursor=", limit=50)
    assert ids == DECLARED
