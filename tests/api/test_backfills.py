"""Backfill over the API (#14): POST /api/jobs/{id}/backfill runs a past range on the
process that declares the job, GET /api/backfills/{id} shows its progress, POST
/api/backfills/{id}/cancel stops it; team-scoped; bad ranges refused."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from cronfleet import FakeClock, Scheduler

from .conftest import MakeApi, expect

START = datetime(2026, 1, 1, tzinfo=UTC)


async def wait_state(api: Any, backfill_id: int, states: set[str],
                     clock: FakeClock | None = None) -> dict[str, Any]:
    """Poll until the backfill is in one of ``states``; ``clock``: advance it 0.1 s a poll
    (the backfill's rate limit waits on the scheduler's clock). Not more: the API judges
    the taker live by its heartbeat on that clock (1.5 s ttl), and a clock that jumps a
    second every 20 ms outran a loaded runner's heartbeat (CI: "its taker lib-1 is not
    live; answered failed")."""
    for _ in range(3000):
        if clock is not None:
            clock.advance(0.1)
        got = expect(await api.get(f"/api/backfills/{backfill_id}", "alpha-viewer"), 200)
        if got["state"] in states:
            return got
        await asyncio.sleep(0.02)
    raise AssertionError(f"backfill {backfill_id} never reached {states}: {got}")


async def test_backfill_over_the_api(
    make_api: MakeApi, store_url: str, clock: FakeClock, store_kind: str
) -> None:
    api = await make_api(jobs=False)
    lib = Scheduler(store=store_url, clock=clock, instance_id="lib-1", shutdown_grace="2s")
    slots: list[datetime] = []

    @lib.job("0 * * * *", id="alpha.lib", team="alpha")
    async def work(ctx: Any) -> None:
        slots.append(ctx.slot)

    await lib.start()
    try:
        body = {"from": START.isoformat(), "to": (START + timedelta(hours=3)).isoformat(),
                "rate": 10}
        expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-viewer", json=body), 403)
        expect(await api.post("/api/jobs/alpha.lib/backfill", "beta-editor", json=body), 404,
               "JOB_NOT_FOUND")
        bad = {**body, "to": (START - timedelta(hours=1)).isoformat()}
        refused = expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-editor",
                                        json=bad), 422, "BAD_RANGE")
        assert refused["details"]["errors"][0]["field"] == "to"  # the field that is wrong
        huge = {**body, "from": (START - timedelta(days=20 * 366)).isoformat()}  # hourly
        refused = expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-editor",
                                        json=huge), 422, "BAD_RANGE")
        assert refused["details"]["errors"][0]["field"] == "from"
        assert "more than 100000 slots" in refused["message"]
        naive = {**body, "from": "2026-01-01T00:00:00"}
        expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-editor", json=naive),
               422)
        assert slots == []

        accepted = expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-editor",
                                         json=body), 202)
        assert accepted["instance_id"] == "lib-1" and accepted["job_id"] == "alpha.lib"
        done = await wait_state(api, accepted["id"], {"finished", "failed", "cancelled"},
                                clock)
        assert done["state"] == "finished" and done["error"] is None
        p = done["progress"]
        assert (p["total"], p["done"], p["ran"]) == (4, 4, 4)
        assert slots == [START + timedelta(hours=h) for h in range(4)]
        expect(await api.get(f"/api/backfills/{accepted['id']}", "beta-viewer"), 404,
               "BACKFILL_NOT_FOUND")
        expect(await api.get("/api/backfills/999999", "alpha-viewer"), 404,
               "BACKFILL_NOT_FOUND")

        # one slot a second on lib's FakeClock: it waits after its first slot
        slow = {**body, "to": (START + timedelta(days=2)).isoformat(), "rate": 1}
        accepted = expect(await api.post("/api/jobs/alpha.lib/backfill", "alpha-editor",
                                         json=slow), 202)
        for _ in range(600):
            got = expect(await api.get(f"/api/backfills/{accepted['id']}", "alpha-viewer"),
                         200)
            if (got["progress"] or {}).get("done") == 1:
                break
            await asyncio.sleep(0.02)
        assert got["state"] == "running" and got["progress"]["total"] == 49
        expect(await api.post(f"/api/backfills/{accepted['id']}/cancel", "alpha-viewer"),
               403)
        expect(await api.post(f"/api/backfills/{accepted['id']}/cancel", "alpha-editor"),
               200)
        done = await wait_state(api, accepted["id"], {"finished", "failed", "cancelled"})
        assert done["state"] == "cancelled" and done["progress"]["done"] == 1
        assert len(slots) == 5
        expect(await api.post(f"/api/backfills/{accepted['id']}/cancel", "alpha-editor"),
               409, "BACKFILL_ENDED")
    finally:
        await lib.stop()
