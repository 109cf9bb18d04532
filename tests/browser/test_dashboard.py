"""The dashboard in a real browser against real ``cronfleet run`` processes: sign-in,
every page (screenshot + axe-core: no serious or critical violation), every action, live
updates, a pause made in one replica's dashboard seen by another process, a viewer and a
second team, CSRF refusal and a 409 trigger."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from browser.conftest import SHOTS, Server, open_action

pytestmark = pytest.mark.slow


def signed_in(chromium: Any, base: str, tok: str) -> Any:
    ctx = chromium.new_context(base_url=base, bypass_csp=True,  # axe is injected inline
                               viewport={"width": 1360, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    page.goto("/")
    assert "/signin" in page.url
    page.get_by_label("API token").fill(tok)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))
    return page


AXE_RUN = ("async rules => (await axe.run(document, {resultTypes: ['violations'],"
           " ...(rules ? {runOnly: {type: 'rule', values: rules}} : {})}))"
           ".violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
           " nodes: v.nodes.slice(0, 3).map(n => n.target)}))")


def axe_violations(page: Any, axe: str, rules: list[str] | None = None) -> list[Any]:
    """axe-core's violations on the page (of ``rules`` only, when given). A live region
    may swap its content while axe walks the page (a slow run on a loaded box): what a
    first run finds, or an error it meets, is checked by a second run a moment later,
    and only the rules that fail both times are returned."""
    page.add_script_tag(content=axe)
    try:
        first: list[Any] | None = page.evaluate(AXE_RUN, rules)
    except Exception:  # the page changed under axe: the second run decides
        first = None
    if first == []:
        return []
    page.wait_for_timeout(500)
    second: list[Any] = page.evaluate(AXE_RUN, rules)
    if first is None:
        return second
    failed = {v["id"] for v in first}
    return [v for v in second if v["id"] in failed]


def check_axe(page: Any, axe: str, what: str) -> None:
    bad = [v for v in axe_violations(page, axe) if v["impact"] in ("serious", "critical")]
    assert not bad, f"{what}: {bad}"


def shoot(page: Any, srv: Server, name: str) -> None:
    out = SHOTS / srv.kind
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"{name}.png"), full_page=False)


def until(fn: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.2)


def test_every_page_and_action(server: Server, chromium: Any, axe_source: str) -> None:
    page = signed_in(chromium, server.base, server.admin)
    # a few slots run and fail first, so the timeline and the overview have something
    page.wait_for_timeout(100)
    assert until(lambda: httpx.get(f"{server.base}/api/jobs/sync.flaky/runs",
                                   headers={"Authorization": f"Bearer {server.admin}"}
                                   ).json()["items"], 30)
    pages = {"overview": "/", "jobs": "/jobs", "job": "/jobs/export.nightly",
             "job-7d": "/jobs/sync.flaky?window=7d", "runs": "/runs?status=failed",
             "audit": "/audit", "secrets": "/secrets", "tokens": "/tokens"}
    for name, path in pages.items():
        resp = page.goto(path)
        assert resp.status == 200, (path, resp.status)
        page.wait_for_load_state("networkidle") if name != "job" else None
        assert page.locator("h1").count() == 1
        shoot(page, server, name)
        check_axe(page, axe_source, path)
    # the run page, reached by clicking a cell of the slot timeline
    page.goto("/jobs/sync.flaky")
    cell = page.locator("#timeline i.fa").first  # failed
    cell.wait_for()
    cell.hover()  # the details are fetched on hover, shown in the title and the status line
    page.locator("#tl-status", has_text="upstream answered 502").wait_for()
    assert "upstream answered 502" in (cell.get_attribute("title") or "")
    cell.click()
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    assert page.get_by_text("upstream answered 502").first.is_visible()
    shoot(page, server, "run")
    check_axe(page, axe_source, "run")

    # overview counts the failing job; jobs page filters and searches on the server
    page.goto("/jobs?failing=1")
    assert page.locator("table.jobs tbody tr").count() == 1
    assert page.get_by_role("link", name="sync.flaky").is_visible()
    page.goto("/jobs?q=orders")
    assert page.get_by_role("link", name="export.nightly").is_visible()
    assert page.locator("table.jobs tbody tr").count() == 1
    # another team's job does not exist here
    assert page.goto("/jobs/beta.secret").status == 404

    # pause needs a note; with it, the badge shows who and the note
    page.goto("/jobs/export.nightly")
    open_action(page, "Pause…")
    page.get_by_label("Note (required)").fill("migrating the warehouse")
    page.get_by_label("Until (optional)").fill("2h")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(re.compile(r"/jobs/export\.nightly"))
    assert page.locator(".flash").inner_text().startswith("paused export.nightly")
    status = page.locator("#job-status")
    assert "paused" in status.inner_text() and "migrating the warehouse" in status.inner_text()
    shoot(page, server, "job-paused")
    # resume: the pause ends, nothing is left forced on (no override to clear)
    page.get_by_role("button", name="Resume").click()
    assert "resumed export.nightly" in page.locator(".flash").inner_text()
    assert page.locator("#job-status").inner_text().strip() == "active"
    assert page.get_by_role("button", name="Clear override").count() == 0

    # trigger: a second trigger while the first holds the lease is a 409 naming the holder
    page.goto("/jobs/report.slow")
    open_action(page, "Run now…")
    page.get_by_role("button", name="Run now").click()
    assert "triggered report.slow" in page.locator(".flash").inner_text()
    open_action(page, "Run now…")
    page.get_by_role("button", name="Run now").click()
    flash = page.locator(".flash").inner_text()
    assert "already running" in flash and "lease is held by" in flash and "409" in flash

    # bulk pause with a required note, from the jobs page
    page.goto("/jobs")
    page.get_by_label("select export.nightly").check()
    page.get_by_label("select sync.flaky").check()
    page.locator("#bulk-action").select_option("pause")
    page.locator("#bulk-note").fill("maintenance window")
    page.get_by_role("button", name="Apply to selected").click()
    assert "paused export.nightly, sync.flaky" in page.locator(".flash").inner_text()
    page.goto("/jobs?paused=yes")
    assert page.locator("table.jobs tbody tr").count() == 2
    assert page.get_by_text("maintenance window").first.is_visible()

    # secrets: set, rotate; names and hosts only, never a value
    page.goto("/secrets")
    page.get_by_label("Name").fill("PARTNER_KEY")
    page.get_by_label("Value").fill("s3cr3t-value")
    page.get_by_label("Hosts it may be sent to (optional)").fill("api.partner.example")
    page.get_by_role("button", name="Save").click()
    assert page.locator(".flash").inner_text() == "secret PARTNER_KEY created"
    assert page.get_by_role("cell", name="api.partner.example").is_visible()
    page.get_by_label("Name").fill("PARTNER_KEY")
    page.get_by_label("Value").fill("n3w-value")
    page.get_by_role("button", name="Save").click()
    assert page.locator(".flash").inner_text() == "secret PARTNER_KEY rotated"
    assert page.get_by_role("cell", name="api.partner.example").is_visible()  # kept
    assert "s3cr3t-value" not in page.content() and "n3w-value" not in page.content()

    # tokens: create one (shown once), revoke it
    page.goto("/tokens")
    page.get_by_label("Name").fill("ci-bot")
    page.get_by_role("button", name="Create").click()
    new = page.locator("#new-token").inner_text()
    assert new.startswith("cf_")
    page.get_by_role("button", name=re.compile(r"revoke ci-bot")).click()
    assert "revoked" in page.locator(".flash").inner_text()
    assert httpx.get(f"{server.base}/api/jobs",
                     headers={"Authorization": f"Bearer {new}"}).status_code == 401

    # the audit page lists what the dashboard did
    page.goto("/audit")
    text = page.locator("main").inner_text()
    for action in ("job.pause", "job.resume", "job.trigger",
                   "token.create", "token.revoke"):
        assert action in text

    # UTC switch
    page.goto("/jobs/export.nightly")
    zone = page.locator("#tl-h").locator("..")
    assert "times in Europe/Paris" in zone.inner_text()
    assert "Slot (Europe/Paris)" in page.locator("main").inner_text()
    page.get_by_role("button", name="Times: job zone").click()
    assert "times in UTC" in zone.inner_text()
    assert "Slot (UTC)" in page.locator("main").inner_text()
    page.get_by_role("button", name="Times: UTC").click()
    assert "times in Europe/Paris" in zone.inner_text()

    # keyboard: the skip link is the first stop
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"

    # the pictures for the docs, now that a few dozen slots have run
    page.goto("/jobs/sync.flaky")
    shoot(page, server, "job-later")
    page.goto("/jobs")
    shoot(page, server, "jobs-later")
    page.goto("/")
    shoot(page, server, "overview-later")

    # sign out: the pages need a session again
    page.goto("/jobs/export.nightly")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/signin"))
    assert "/signin" in page.goto("/jobs").url
    shoot(page, server, "signin")
    check_axe(page, axe_source, "signin")
    page.context.close()


def test_live_update_and_replica(server: Server, chromium: Any) -> None:
    """A pause made in a second replica's dashboard appears in the first's without a
    reload, within the 2 s refresh (plus the margin of a loaded machine)."""
    other = server.replica("replica")
    first = signed_in(chromium, server.base, server.editor)
    first.goto("/jobs/export.nightly")
    assert "active" in first.locator("#job-status").inner_text()
    second = signed_in(chromium, other, server.editor)
    second.goto("/jobs/export.nightly")
    open_action(second, "Pause…")
    second.get_by_label("Note (required)").fill("paused from the replica")
    second.get_by_role("button", name="Pause").click()
    assert "paused export.nightly" in second.locator(".flash").inner_text()
    # no reload in the first browser: the live region picks it up
    first.locator("#job-status", has_text="paused from the replica").wait_for(timeout=8000)
    # and the process that did not take the pause skips the slots: paused cells appear
    assert until(lambda: httpx.get(
        f"{server.base}/api/jobs/export.nightly/runs?status=skipped",
        headers={"Authorization": f"Bearer {server.editor}"}).json()["items"], 20)
    first.context.close()
    second.context.close()


def test_viewer_and_second_team(server: Server, chromium: Any) -> None:
    viewer = signed_in(chromium, server.base, server.viewer)
    viewer.goto("/jobs/export.nightly")
    assert viewer.get_by_role("button", name="Pause").count() == 0
    assert viewer.get_by_role("button", name="Run now").count() == 0
    viewer.goto("/jobs")
    assert viewer.locator("#bulk").count() == 0
    assert viewer.get_by_role("link", name="Tokens").count() == 0
    assert viewer.goto("/tokens").status == 403
    # the server refuses a viewer's action even with a valid CSRF token
    csrf = viewer.evaluate("document.querySelector('input[name=csrf]').value")
    resp = viewer.request.post("/act", form={"csrf": csrf, "job_id": "export.nightly",
                                             "action": "pause", "note": "x"})
    assert resp.status == 403
    viewer.context.close()

    beta = signed_in(chromium, server.base, server.beta)
    beta.goto("/jobs")
    assert beta.get_by_role("link", name="beta.secret").is_visible()
    assert beta.get_by_role("link", name="export.nightly").count() == 0
    assert beta.goto("/jobs/export.nightly").status == 404
    assert beta.goto("/jobs/export.nightly?partial=1").status == 404
    beta.goto("/jobs")
    csrf = beta.evaluate("document.querySelector('input[name=csrf]').value")
    resp = beta.request.post("/act", form={"csrf": csrf, "job_id": "export.nightly",
                                           "action": "pause", "note": "x"})
    assert resp.status == 404
    beta.context.close()


def test_csrf_and_cookie(server: Server, chromium: Any) -> None:
    page = signed_in(chromium, server.base, server.editor)
    cookie = next(c for c in page.context.cookies() if c["name"] == "cronfleet_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    # a change without the CSRF token, or with another session's, is refused
    for csrf in ("", "0" * 64):
        resp = page.request.post("/act", form={"csrf": csrf, "job_id": "export.nightly",
                                               "action": "pause", "note": "forged"})
        assert resp.status == 403
    # a cross-site origin is refused even with the right token
    csrf = page.evaluate("document.querySelector('input[name=csrf]').value")
    resp = page.request.post("/act", form={"csrf": csrf, "job_id": "export.nightly",
                                           "action": "pause", "note": "forged"},
                             headers={"Origin": "http://evil.example"})
    assert resp.status == 403
    api = httpx.get(f"{server.base}/api/jobs/export.nightly",
                    headers={"Authorization": f"Bearer {server.editor}"}).json()
    assert api["override"] is None  # nothing was paused
    page.context.close()


def test_edit_form_preview_and_field_errors(server: Server, chromium: Any) -> None:
    created = httpx.post(f"{server.base}/api/jobs",
                         headers={"Authorization": f"Bearer {server.editor}"},
                         json={"id": "api.ping", "schedule": "0 5 * * *",
                               "description": "ping the partner",
                               "http": {"url": "https://partner.example/ping"}})
    assert created.status_code == 201, created.text
    page = signed_in(chromium, server.base, server.editor)
    page.goto("/jobs/api.ping")
    page.get_by_role("link", name="Edit").click()
    page.wait_for_url(re.compile(r"/edit\?job=api\.ping"))
    schedule = page.get_by_label("Schedule")
    # the live preview: a sentence becomes its canonical expression and next fires
    schedule.fill("every weekday at 9am")
    page.locator("#preview code", has_text="0 9 * * 1-5").wait_for()
    assert page.locator("#preview li").count() == 5
    # a wrong schedule: the preview says so, and saving marks the field, nothing saved
    schedule.fill("0 25 * * *")
    page.locator("#preview .field-error").wait_for()
    page.get_by_role("button", name="Save").click()
    err = page.locator("#err-schedule")
    assert err.is_visible() and "hour" in err.inner_text().lower()
    assert page.get_by_label("Schedule").get_attribute("aria-invalid") == "true"
    api = httpx.get(f"{server.base}/api/jobs/api.ping",
                    headers={"Authorization": f"Bearer {server.editor}"}).json()
    assert api["schedule"] == "0 5 * * *"
    # a right one is saved and applied
    page.get_by_label("Schedule").fill("every weekday at 9am")
    page.get_by_label("Description").fill("ping the partner on weekdays")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(re.compile(r"/jobs/api\.ping$"))
    assert "saved api.ping" in page.locator(".flash").inner_text()
    api = httpx.get(f"{server.base}/api/jobs/api.ping",
                    headers={"Authorization": f"Bearer {server.editor}"}).json()
    assert api["schedule"] == "0 9 * * 1-5" and api["description"] == (
        "ping the partner on weekdays")
    shoot(page, server, "job-api")
    # the kind filter tells HTTP jobs from handlers
    page.goto("/jobs?kind=http")
    assert page.locator("table.jobs tbody tr").count() == 1
    assert page.get_by_role("link", name="api.ping").is_visible()
    page.context.close()
