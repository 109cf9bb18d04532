"""The dashboard's pages through the real app (in-process, over ASGI) on a SQLite store
with a ledger holding every run status: what an operator hit in #29 (a cancelled run
breaking the job page, a 5xx shown as JSON, times without seconds or in three zones,
state that contradicted itself, the secrets form without a key, the source filter's
10,000 options) and what was built (the heat map, the charts)."""

from __future__ import annotations

import base64
import os
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronfleet import FakeClock, Job, Scheduler
from cronfleet.api.app import create_app
from cronfleet.dashboard import read, routes
from cronfleet.model import RunRecord, RunStatus, SkipReason, TriggeredBy
from cronfleet.store.factory import open_api_store

T0 = datetime(2026, 12, 1, 14, 12, 7, tzinfo=UTC)
STATIC = Path(routes.__file__).parent / "static"


@dataclass
class Dash:
    client: httpx.AsyncClient
    sched: Scheduler
    db: Path
    token: str

    def csrf(self) -> str:
        from cronfleet.dashboard.auth import csrf_for

        return csrf_for(self.token)

    async def post(self, path: str, data: dict[str, Any]) -> httpx.Response:
        return await self.client.post(path, data={"csrf": self.csrf(), **data},
                                      headers={"Origin": "http://t"})


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def insert(db: Path, rows: list[tuple[Any, ...]]) -> None:
    cols = ("job_id, slot, triggered_by, status, reason, instance_id, fencing_token, "
            "claimed_at, started_at, finished_at, error")
    conn = sqlite3.connect(db)
    conn.executemany(f"INSERT INTO runs ({cols}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.execute("UPDATE job_state SET created_at = ?", (ms(T0 - timedelta(days=40)),))
    conn.commit()
    conn.close()


# every status the ledger writes, and the skip reasons (each a colour of its own)
EVERY = [(st.value, None) for st in RunStatus if st is not RunStatus.SKIPPED] + [
    ("skipped", r.value) for r in SkipReason]


@pytest.fixture
async def dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Dash]:
    monkeypatch.delenv("CRONFLEET_SECRET_KEY", raising=False)
    monkeypatch.delenv("CRONFLEET_SECRET_KEY_FILE", raising=False)
    db = tmp_path / "d.db"
    url = f"sqlite:///{db}"
    sched = Scheduler(store=url, clock=FakeClock(T0), timers=False)

    def noop(ctx: Any) -> None:
        return None

    sched.add_job(Job.create("5s", noop, id="every5s", description="a 5 s job"))
    sched.add_job(Job.create("0 3 * * *", noop, id="paris", timezone="Europe/Paris"))
    sched.add_job(Job.create("0 4 * * *", noop, id="newyork", timezone="America/New_York"))
    await sched.start()
    api = open_api_store(url)
    token, _ = await api.create_token(name="ada", team="default", role="admin")
    rows = []
    base = T0.replace(second=0) - timedelta(minutes=5)
    for k, (status, reason) in enumerate(EVERY):
        slot = base + timedelta(seconds=5 * k)
        rows.append(("every5s", ms(slot), "schedule", status, reason, "w-1", k + 1,
                     ms(slot), ms(slot) + 10, ms(slot) + 10 + 200 * (k + 1)
                     if status not in ("running", "pending") else None,
                     "boom" if status == "failed" else None))
    insert(db, rows)
    app = create_app(sched, api_store=api)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    client.cookies.set("cronfleet_session", token)
    try:
        yield Dash(client, sched, db, token)
    finally:
        await client.aclose()
        await sched.stop()
        await api.close()


def test_every_status_and_reason_has_a_cell_state_and_a_colour() -> None:
    css = (STATIC / "app.css").read_text()
    seen = set()
    for st in RunStatus:
        reasons: list[str | None] = [None] + [r.value for r in SkipReason]
        for reason in reasons:
            run = RunRecord(1, "j", T0, TriggeredBy.SCHEDULE, st, reason=reason)
            state = read.cell_state(run)
            assert state in read.CELL_STATES, (st, reason)
            seen.add(state)
    seen.add(read.cell_state(None))
    assert seen == set(read.CELL_STATES)  # no state without a status showing it
    assert set(routes._CELL) == set(read.CELL_STATES) == set(read.SEVERITY)
    assert len(set(read.CELL_CODES.values())) == len(read.CELL_CODES)  # codes unique
    for state in read.CELL_STATES:
        assert f".c.{state}" in css, state  # strips and legend
        assert f".hm > i.{read.CELL_CODES[state]}" in css or state == "none", state
        if state != "none":
            assert f".timeline > i.{read.CELL_CODES[state]}" in css, state
    # two states never share a colour in a theme
    for theme in re.split(r"@media \(prefers-color-scheme: dark\)", css)[:2]:
        colours = dict(re.findall(r"--(ok|bad|skip|pause|run|pend|cancel|interrupted|missed)"
                                  r": (#[0-9a-f]{6})", theme))
        assert len(set(colours.values())) == len(colours) == 9, colours


async def test_a_cancelled_run_in_every_window_and_the_live_refresh(dash: Dash) -> None:
    for q in ("", "?window=7d", "?window=30d", "?partial=1", "?window=7d&partial=1"):
        r = await dash.client.get(f"/jobs/every5s{q}")
        assert r.status_code == 200, (q, r.text[:300])
        assert "<i class=ca></i>" in r.text
    r = await dash.client.get("/jobs/every5s")
    for state in read.CELL_STATES:  # the legend names every state with its count
        assert f'<span class="c {state}" aria-hidden="true"></span>' in r.text


async def test_a_defect_is_a_dashboard_page_not_json(dash: Dash,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*a: Any, **k: Any) -> Any:
        raise KeyError("cancelled")

    monkeypatch.setattr(read, "timeline", broken)
    for q in ("", "?partial=1"):
        r = await dash.client.get(f"/jobs/every5s{q}")
        assert r.status_code == 500
        assert r.headers["content-type"].startswith("text/html")
        assert "the dashboard failed to build this page" in r.text
        assert "reference" in r.text and "KeyError" not in r.text
    assert '<nav aria-label="Main">' in (await dash.client.get("/jobs/every5s")).text


async def test_times_have_seconds_one_zone_per_table_and_the_exact_instant(
        dash: Dash) -> None:
    r = await dash.client.get("/jobs/every5s")
    # the next run of a 5 s job, to the second, and the exact instant on hover
    nxt = re.search(r'id="next-run"><time datetime="([^"]+)" title="([^"]+)">([^<]+)<',
                    r.text)
    assert nxt is not None
    assert nxt.group(3) == "2026-12-01 14:12:10 UTC"
    assert nxt.group(2) == "2026-12-01 14:12:10.000000 UTC"
    assert "(slots counted from" not in r.text and "Every 5s" in r.text
    # the runs across jobs of three zones: one zone, named once in the header
    insert(dash.db, [("paris", ms(T0 - timedelta(hours=11, minutes=12, seconds=7)),
                      "schedule", "succeeded", None, "w", 1, 0, 0, 1, None),
                     ("newyork", ms(T0 - timedelta(hours=5)), "schedule", "succeeded",
                      None, "w", 1, 0, 0, 1, None)])
    runs = (await dash.client.get("/runs")).text
    assert "Slot (UTC)" in runs
    assert " CET" not in runs and " EST" not in runs
    # a job's page speaks its zone
    paris = (await dash.client.get("/jobs/paris")).text
    assert "Slot (Europe/Paris)" in paris and "2026-12-02 03:00:00 CET" in paris


def test_readable_times_in_messages() -> None:
    text = "paused until 2026-12-01T14:12:05.123456+00:00 (was 2026-12-01T15:00:00+01:00)"
    assert routes.readable_times(text) == ("paused until 2026-12-01 14:12:05 UTC "
                                           "(was 2026-12-01 14:00:00 UTC)")


async def test_paused_state_says_one_thing_and_resume_ends_the_pause(dash: Dash) -> None:
    r = await dash.post("/act", {"job_id": "paris", "action": "pause", "note": "migration",
                                 "next": "/jobs/paris"})
    assert r.status_code == 303
    page = (await dash.client.get("/jobs/paris")).text
    assert 'class="badge js-paused">paused</span>' in page
    assert "none while paused" in page and "Next 10 slots of the schedule" in page
    assert 'id="fires-paused"' in page
    listing = (await dash.client.get("/jobs?q=paris")).text
    assert "js-paused" in listing and "none while paused" in listing
    # run now without force: a refusal, shown as one
    r = await dash.post("/act", {"job_id": "paris", "action": "trigger",
                                 "next": "/jobs/paris"})
    page = (await dash.client.get("/jobs/paris")).text
    assert '<p class="flash bad" role="alert">paris: paused by' in page and "(409)" in page
    # resume: back to what the declaration says, no "forced on" left behind
    r = await dash.post("/act", {"job_id": "paris", "action": "resume",
                                 "next": "/jobs/paris"})
    state = (await dash.sched.store.read_states(["paris"]))["paris"]
    assert state.enabled_override is None
    page = (await dash.client.get("/jobs/paris")).text
    assert "forced on" not in page and "js-active" in page
    assert '<p class="flash" role="status">resumed paris</p>' in page


async def test_failing_job_reads_failing_on_the_list_and_its_page(dash: Dash) -> None:
    insert(dash.db, [("newyork", ms(T0 - timedelta(hours=5)), "schedule", "failed", None,
                      "w", 1, 0, 0, 1, "boom")])
    assert 'js-failing">failing' in (await dash.client.get("/jobs/newyork")).text
    assert 'js-failing">failing' in (await dash.client.get("/jobs?q=newyork")).text


async def test_configuration_as_written_names_what_runs(dash: Dash) -> None:
    from cronfleet.jobs.http import HttpJob
    from cronfleet.model import RetryPolicy

    job = Job.create("@daily", HttpJob(url="https://u:pw@api.example/x", method="POST",
                                       headers={"Authorization": "${secrets.T}"},
                                       retry=RetryPolicy(attempts=2)), id="hook")
    rows = dict(routes.config_rows(routes._declared(job)))
    assert rows["http.method"] == '"POST"'
    assert rows["http.url"] == '"https://u:***@api.example/x"'
    assert rows["http.headers"] == '["Authorization"]'
    assert "RetryPolicy(" not in str(rows)
    page = (await dash.client.get("/jobs/every5s")).text
    assert "<code>handler</code>" in page and "RetryPolicy(" not in page


async def test_secrets_without_a_key_offer_no_form(dash: Dash) -> None:
    page = (await dash.client.get("/secrets")).text
    assert 'id="vault-locked"' in page and 'action="/secrets"' not in page


async def test_secrets_refusal_keeps_the_typed_name(dash: Dash,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_SECRET_KEY", base64.b64encode(os.urandom(32)).decode())
    ctx = dash.client._transport.app.state.cronfleet  # type: ignore[attr-defined]
    ctx.vault = None
    ctx.http_runtime._vault = None
    r = await dash.post("/secrets", {"name": "API_TOKEN", "value": "", "hosts": "a.example"})
    assert r.status_code == 422
    assert 'value="API_TOKEN"' in r.text and 'value="a.example"' in r.text
    assert 'role="alert"' in r.text


async def test_overview_heat_map_and_chart(dash: Dash) -> None:
    r = await dash.client.get("/")
    assert r.status_code == 200
    heat = re.findall(r'<li><a href="/jobs/([^"]+)">', r.text.split('id="heatmap"')[1]
                      .split("</ol>")[0])
    assert heat[0] == "every5s"  # trouble first
    row = r.text.split('data-runs="')[1].split('"')[0].split(",")
    assert len(row) == read.HEAT_COLUMNS and any(row)
    assert "<i class=fa></i>" in r.text  # the minute holding a failure shows it
    assert '<svg class="chart"' in r.text and "Runs per minute" in r.text
    day = await dash.client.get("/?window=24h")
    assert "Runs per 15 minutes" in day.text


async def test_job_page_order_and_duration_chart(dash: Dash) -> None:
    page = (await dash.client.get("/jobs/every5s")).text
    order = [page.index(m) for m in ('id="job-status"', 'id="timeline"', 'id="actions"',
                                     'id="dur-h"', 'id="cfg-h"')]
    assert order == sorted(order)
    assert page.count("<details class=\"act\"") >= 3
    assert "ended runs" in page and "failed" in page


async def test_audit_details_readable_and_filtered(dash: Dash) -> None:
    await dash.post("/act", {"job_id": "paris", "action": "pause", "note": "n1",
                             "until": "2h", "next": "/"})
    await dash.post("/act", {"job_id": "paris", "action": "resume", "next": "/"})
    page = (await dash.client.get("/audit?action=job.pause")).text
    assert "<dt>note</dt><dd>n1</dd>" in page
    assert "job.resume</code>" not in page and "job.pause</code>" in page
    text = re.sub(r"<[^>]*>", " ", page)  # what is read (the datetime attribute is ISO)
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{6}[+]", text)
    assert "until</dt><dd>2026-12-01 16:12:07 UTC</dd>" in page


async def test_jobs_source_filter_one_choice_per_file(dash: Dash) -> None:
    jobs = [Job.create("@daily", lambda ctx: None, id=f"t{i}") for i in range(30)]
    for i, j in enumerate(jobs):
        object.__setattr__(j, "source", f"/etc/cf/cronfleet.toml:{i + 1}")
        dash.sched.add_job(j)
    page = (await dash.client.get("/jobs")).text
    select = page.split('id="f-source"')[1].split("</select>")[0]
    assert select.count("<option") == 3  # any, the TOML file, the Python declarations
    r = await dash.client.get("/jobs", params={"source": "/etc/cf/cronfleet.toml"})
    assert "30 jobs" in r.text
    assert 'id="select-all"' in r.text


async def test_docs_lead_back_to_the_dashboard(dash: Dash) -> None:
    r = await dash.client.get("/docs")
    assert '<a href="/">← cronfleet dashboard</a>' in r.text


async def test_runs_page_of_one_job_reads_its_runs_without_the_teams_ids(
        dash: Dash, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs page of one job asks the store for that job's runs only: the team's ids
    (every job of a 100,000-job fleet, ~200 ms a page) are read for the pages across jobs."""
    insert(dash.db, [("paris", ms(T0 - timedelta(days=k)), "schedule", "succeeded", None,
                      "w", 1, 0, 0, 1, None) for k in range(1, 4)])
    asked: list[str] = []
    real = routes.team_jobs

    async def counted(ctx: Any, tok: Any) -> frozenset[str]:
        asked.append(tok.team)
        return await real(ctx, tok)

    monkeypatch.setattr(routes, "team_jobs", counted)
    page = await dash.client.get("/runs?job=paris")
    assert page.status_code == 200 and asked == []
    assert page.text.count('href="/runs/') == 3 and "/runs/1\"" not in page.text
    assert (await dash.client.get("/runs?job=nobody")).status_code == 404
    across = await dash.client.get("/runs")
    assert across.status_code == 200 and asked == ["default"]


async def test_a_large_teams_jobs_list_pages_by_id_over_stored_jobs(
        dash: Dash, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SMALL_TEAM`` jobs the list pages by id (``after=``, a Next link) over the
    declared jobs and the stored definitions (none held by this process: built to be
    shown), says its count, and offers the id sort only; filters still apply."""
    def spec(job_id: str, i: int) -> dict[str, Any]:
        return {"id": job_id, "schedule": f"{i} 5 * * *",
                "description": "nightly" if i % 3 == 0 else "",
                "http": {"url": "https://example.com/x"}}

    api = open_api_store(f"sqlite:///{dash.db}")
    try:
        specs = [(f"api-{i:02d}", spec(f"api-{i:02d}", i)) for i in range(30)]
        made, taken = await api.create_job_defs(specs, "default", "ada", "admin")
        assert len(made) == 30 and not taken
        await api.create_job_defs([("api-00b", spec("api-00b", 0))], "other", "ada",
                                  "admin")
    finally:
        await api.close()
    monkeypatch.setattr(routes, "SMALL_TEAM", 5)
    every = sorted([*(i for i, _ in specs), "every5s", "newyork", "paris"])
    seen: list[str] = []
    path = "/jobs?size=25"
    pages: list[str] = []
    while path:
        r = await dash.client.get(path.replace("&amp;", "&"))
        assert r.status_code == 200, r.text[:500]
        pages.append(r.text)
        seen += re.findall(r'<a href="/jobs/([^"?]+)">', r.text)
        nxt = re.search(r'<a href="(/jobs\?[^"]*)" rel="next">', r.text)
        path = nxt.group(1) if nxt else ""
        assert len(pages) < 10
    assert (seen, len(pages)) == (every, 2)  # id order, no duplicate, no gap
    assert "33 jobs" in pages[0] and "by id" in pages[0]
    assert "after api-" in pages[1] and "« First" in pages[1]
    assert 'value="next"' not in pages[0]  # sorting by next run needs every job at hand
    found = await dash.client.get("/jobs?q=nightly")
    assert re.findall(r'<a href="/jobs/([^"?]+)">', found.text) == [
        f"api-{i:02d}" for i in range(0, 30, 3)]
    one = await dash.client.get("/jobs/api-04")
    assert one.status_code == 200 and "api-04" in one.text


async def test_requests_count_the_job_table_without_copying_it(
        dash: Dash, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overview, the runs page, /metrics and a job created over the API read the job
    table by count or by id, never through ``Scheduler.jobs`` (a copy of the whole table:
    a process may hold 250,000 jobs)."""
    def copied(self: Scheduler) -> None:
        raise AssertionError("a request copied the job table (Scheduler.jobs)")

    monkeypatch.setattr(Scheduler, "jobs", property(copied))
    for path in ("/", "/runs", "/metrics"):
        r = await dash.client.get(path)
        assert r.status_code == 200, (path, r.text[:500])
    assert "cronfleet_jobs 3.0" in (await dash.client.get("/metrics")).text
    created = await dash.client.post(
        "/api/jobs", headers={"Authorization": f"Bearer {dash.token}"},
        json={"id": "hook", "schedule": "0 0 1 1 *", "http": {"url": "https://hooks.example.com/x"}})
    assert created.status_code == 201, created.text
    again = await dash.client.post(
        "/api/jobs", headers={"Authorization": f"Bearer {dash.token}"},
        json={"id": "paris", "schedule": "0 0 1 1 *", "http": {"url": "https://hooks.example.com/x"}})
    assert again.status_code == 409, again.text  # a declared job's id, found by key
