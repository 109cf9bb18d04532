"""POST /api/jobs/{id}/backfill (and the dashboard's form) covers the past only (#24,
item 3): a ``to`` later than the server's now is a 422 naming ``to`` and nothing runs;
``"from": 0`` (a number, against the schema) is a 422 naming ``from``, never 1970."""

from __future__ import annotations

import asyncio
import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from cronfleet import FakeClock, Scheduler
from cronfleet.dashboard.auth import COOKIE, csrf_for

from .conftest import MakeApi, expect


async def test_a_future_to_and_a_number_are_refused_naming_the_field(
    make_api: MakeApi, store_url: str, clock: FakeClock
) -> None:
    api = await make_api(jobs=False)
    lib = Scheduler(store=store_url, clock=clock, instance_id="lib-1", shutdown_grace="2s")
    slots: list[datetime] = []

    @lib.job("* * * * *", id="alpha.fut", team="alpha")
    async def fut(ctx: Any) -> None:
        slots.append(ctx.slot)

    await lib.start()
    try:
        now = datetime.fromtimestamp(clock.now(), UTC)
        ahead = {"from": (now - timedelta(seconds=20)).isoformat(),
                 "to": (now + timedelta(seconds=60)).isoformat()}
        got = expect(await api.post("/api/jobs/alpha.fut/backfill", "alpha-editor",
                                    json=ahead), 422, "BAD_RANGE")
        assert [e["field"] for e in got["details"]["errors"]] == ["to"]
        assert "later than now" in got["message"]
        years = {"from": now.isoformat(), "to": (now + timedelta(days=99_999)).isoformat()}
        expect(await api.post("/api/jobs/alpha.fut/backfill", "alpha-editor", json=years),
               422, "BAD_RANGE")
        for zero in (0, "0", 1.5):
            got = expect(await api.post("/api/jobs/alpha.fut/backfill", "alpha-editor",
                                        json={"from": zero, "to": now.isoformat()}), 422,
                         "VALIDATION_ERROR")
            assert [e["field"] for e in got["details"]["errors"]] == ["from"]
            assert "ISO 8601" in got["message"]
        await asyncio.sleep(0.3)  # a request wrongly sent would be taken by now
        assert slots == []
        runs = await lib.runs_async("alpha.fut", limit=10)
        assert runs == []
        # the dashboard's form: the same rule, the error at the To field
        tok = api.tokens["alpha-editor"]
        form = await api.client.post("/backfills", headers={
            "Cookie": f"{COOKIE}={tok}"}, data={
            "csrf": csrf_for(tok), "job_id": "alpha.fut", "from": "1m",
            "to": (now + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%S")})
        assert form.status_code == 422, form.text
        err = re.search(r'id="bf-to-err">([^<]*)<', form.text)
        assert err and "later than now" in html.unescape(err.group(1))
        assert 'id="bf-from-err"' not in form.text
        # a past range up to now is fine
        past = {"from": (now - timedelta(minutes=2)).isoformat(), "to": now.isoformat()}
        expect(await api.post("/api/jobs/alpha.fut/backfill", "alpha-editor", json=past), 202)
    finally:
        await lib.stop()
