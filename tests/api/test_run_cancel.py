"""``POST /api/runs/{id}/cancel`` (the rule in api/control.py, shared with the dashboard):
an editor cancels a run in progress; a viewer is refused, another team gets 404, an ended
run is a 409 naming why, and both the cancel and the refusal are audited."""

from __future__ import annotations

from .conftest import Api, eventually, expect


async def test_cancel_a_run_in_progress(api: Api) -> None:
    accepted = expect(await api.post("/api/jobs/alpha.slow/trigger", "alpha-editor"), 202)
    run_id = accepted["run_id"]
    assert expect(await api.get(f"/api/runs/{run_id}"), 200)["status"] == "running"
    expect(await api.post(f"/api/runs/{run_id}/cancel", "alpha-viewer"), 403)
    expect(await api.post(f"/api/runs/{run_id}/cancel", "beta-editor"), 404)
    expect(await api.post("/api/runs/987654/cancel", "alpha-editor"), 404)
    assert expect(await api.get(f"/api/runs/{run_id}"), 200)["status"] == "running"

    done = expect(await api.post(f"/api/runs/{run_id}/cancel", "alpha-editor",
                                 json={"why": "wrong day"}), 202)
    assert done["run_id"] == run_id and done["job_id"] == "alpha.slow"
    run = await api.run_done(run_id)
    assert run["status"] == "cancelled" and "wrong day" in (run["error"] or "")

    again = expect(await api.post(f"/api/runs/{run_id}/cancel", "alpha-editor"), 409,
                   "RUN_ENDED")
    assert "has already ended (cancelled)" in again["message"]
    audit = await eventually(
        lambda: _cancels(api), what="two run.cancel entries in the audit log")
    assert [e["details"].get("refused") for e in audit] == ["RUN_ENDED", None]


async def _cancels(api: Api) -> list[dict[str, object]]:
    items = expect(await api.get("/api/audit", "alpha-admin"), 200)["items"]
    found = [e for e in items if e["action"] == "run.cancel"]
    return found if len(found) == 2 else []
