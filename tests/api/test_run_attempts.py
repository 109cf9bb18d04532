"""GET /api/runs/{id}/attempts: one record per attempt of the run, numbered 1..n, scoped to
the token's team like the run itself."""

from __future__ import annotations

import dataclasses
from typing import Any

from cronfleet import Job, RunContext
from cronfleet.model import RetryPolicy

from .conftest import Api, expect


async def test_the_attempts_of_a_retried_run(api: Api) -> None:
    calls: list[int] = []

    def flaky(ctx: RunContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise RuntimeError(f"down {len(calls)}")
        return "ok"

    api.scheduler.add_job(dataclasses.replace(
        Job.create("@daily", flaky, id="alpha.flaky", team="alpha"),
        retry=RetryPolicy(attempts=3, backoff="fixed", delay=0)))
    run = await api.scheduler.trigger_async("alpha.flaky", wait=True)
    body: dict[str, Any] = expect(await api.get(f"/api/runs/{run.id}/attempts", "alpha-viewer"),
                                  200)
    assert (body["run_id"], body["job_id"], body["status"]) == (run.id, "alpha.flaky",
                                                                 "succeeded")
    assert [(a["number"], a["outcome"], a["error"]) for a in body["items"]] == [
        (1, "failed", "RuntimeError: down 1"), (2, "failed", "RuntimeError: down 2"),
        (3, "succeeded", None)]
    assert all(a["started_at"] and a["finished_at"] and a["response"] is None
               for a in body["items"])
    assert calls == [1, 2, 3]
    # another team's token sees no such run
    expect(await api.get(f"/api/runs/{run.id}/attempts", "beta-viewer"), 404)
    expect(await api.get("/api/runs/999999/attempts", "alpha-viewer"), 404)
