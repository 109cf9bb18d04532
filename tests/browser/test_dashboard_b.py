"""#17 part B in a real browser, on SQLite and PostgreSQL: the fleet's instances on the
overview (a second process appears, live), run now with parameters and force (refused
while paused without it; the run page shows both), an HTTP job's attempts on the run page
as stored (a secret redacted in the request and in the echoed response), and the slot
timeline by keyboard. Every page checked with axe-core."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from browser.conftest import Server, open_action
from browser.test_dashboard import check_axe, shoot, signed_in, until

pytestmark = pytest.mark.slow

SECRET = "pa55-w0rd/with+odd&chars"


class Echo(BaseHTTPRequestHandler):
    """Answers every GET with the request's headers as JSON (so a secret sent in a header
    comes back in the body: the stored response must have it redacted too)."""

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def echo() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_overview_lists_the_fleet(server: Server, chromium: Any, axe_source: str) -> None:
    page = signed_in(chromium, server.base, server.viewer)
    rows = page.locator("#fleet-instances tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1
    row = rows.first
    text = row.inner_text()
    assert "live" in text and "this page" in text and "all" in text  # role of `cronfleet run`
    assert re.search(r"[+-]\d+ ms", text), text  # this process's clock skew vs the store's
    assert re.search(r"\d+(\.\d+)? (ms|s) ago", text), text  # heartbeat age
    # a second process joins: it appears, live, without a reload (the 2 s refresh)
    server.replica("replica")
    page.locator("#fleet-instances tbody tr").nth(1).wait_for(timeout=20_000)
    live = page.locator("#fleet-instances tbody tr", has_text="live")
    assert until(lambda: live.count() == 2, 20)
    shoot(page, server, "overview-fleet")
    check_axe(page, axe_source, "overview with the fleet")
    page.context.close()


def test_run_now_with_params_and_force(server: Server, chromium: Any, axe_source: str
                                       ) -> None:
    page = signed_in(chromium, server.base, server.editor)
    page.goto("/jobs/export.nightly")
    open_action(page, "Pause…")
    page.get_by_label("Note (required)").fill("warehouse migration")
    page.get_by_role("button", name="Pause").click()
    assert "paused export.nightly" in page.locator(".flash").inner_text()
    # run now while paused, without force: refused, says who paused it and how to force
    open_action(page, "Run now…")
    page.get_by_label("Name 1").fill("region")
    page.get_by_label("Value 1").fill("eu-west")
    page.get_by_role("button", name="Run now").click()
    flash = page.locator(".flash").inner_text()
    assert "paused by ed (team default)" in flash and "warehouse migration" in flash
    assert page.locator(".flash.bad[role=alert]").count() == 1  # a refusal, shown as one
    assert "409" in flash and "Force" in flash
    # a parameter row without a name is an error naming the row; nothing runs
    open_action(page, "Run now…")
    page.get_by_label("Value 2").fill("orphan")
    page.get_by_role("button", name="Run now").click()
    assert "parameter row 2: the value 'orphan' has no name" in page.locator(
        ".flash").inner_text()
    # with two parameters (one added by the "Add a parameter" button) and force
    open_action(page, "Run now…")
    page.get_by_label("Name 1").fill("region")
    page.get_by_label("Value 1").fill("eu-west")
    page.get_by_role("button", name="Add a parameter").click()
    page.get_by_label("Name 4").fill("day")
    page.get_by_label("Value 4").fill("2026-11-30")
    page.get_by_role("checkbox", name=re.compile(r"Force")).check()
    check_axe(page, axe_source, "job page with the run-now form")
    page.get_by_role("button", name="Run now").click()
    flash = page.locator(".flash").inner_text()
    m = re.search(r"triggered export\.nightly \(run (\d+), forced\)", flash)
    assert m, flash
    page.goto(f"/runs/{m.group(1)}")
    assert "ed (team default)" in page.locator("#forced-by").inner_text()
    params = page.locator("#run-params").inner_text()
    assert "region" in params and "eu-west" in params and "2026-11-30" in params
    shoot(page, server, "run-forced")
    check_axe(page, axe_source, "run page with params")
    # the API sees the same run
    api = httpx.get(f"{server.base}/api/runs/{m.group(1)}",
                    headers={"Authorization": f"Bearer {server.editor}"}).json()
    assert api["params"] == {"region": "eu-west", "day": "2026-11-30"}
    assert api["forced_by"] == "ed (team default)"
    page.context.close()


def test_run_page_shows_http_attempts_redacted(server: Server, chromium: Any,
                                               axe_source: str, echo: str) -> None:
    auth = {"Authorization": f"Bearer {server.admin}"}
    r = httpx.put(f"{server.base}/api/secrets/ECHO_KEY", headers=auth,
                  json={"value": SECRET, "hosts": ["127.0.0.1"]})
    assert r.status_code in (200, 201), r.text
    r = httpx.post(f"{server.base}/api/jobs", headers=auth, json={
        "id": "api.echo", "schedule": "0 5 * * *", "description": "call the echo",
        "http": {"url": f"{echo}/ping?k=${{secrets.ECHO_KEY}}",
                 "headers": {"X-Key": "${secrets.ECHO_KEY}"}}})
    assert r.status_code == 201, r.text
    page = signed_in(chromium, server.base, server.admin)
    page.goto("/jobs/api.echo")
    open_action(page, "Run now…")
    page.get_by_role("button", name="Run now").click()
    m = re.search(r"run (\d+)", page.locator(".flash").inner_text())
    assert m
    run_id = m.group(1)
    assert until(lambda: httpx.get(f"{server.base}/api/runs/{run_id}", headers=auth
                                   ).json()["status"] == "succeeded", 20)
    page.goto(f"/runs/{run_id}")
    attempts = page.locator("details.attempt")
    assert attempts.count() == 1
    summary = attempts.first.locator("summary").inner_text()
    assert "Attempt 1: GET" in summary and "200" in summary
    body = attempts.first.inner_text()
    assert "X-Key" in body and "Idempotency-Key" in body and '"path"' in body
    # redacted as stored, in every form (raw, percent-encoded in the URL, JSON-escaped in
    # the echoed body): neither the page's text nor its markup has it
    assert "pa55-w0rd" not in page.content()
    assert SECRET not in page.locator("main").inner_text()
    assert body.count("[REDACTED]") >= 3, body[:3000]  # header, URL, echoed body
    shoot(page, server, "run-http")
    check_axe(page, axe_source, "run page with HTTP attempts")
    page.context.close()


def test_timeline_by_keyboard(server: Server, chromium: Any, axe_source: str) -> None:
    auth = {"Authorization": f"Bearer {server.viewer}"}
    assert until(lambda: len(httpx.get(f"{server.base}/api/jobs/sync.flaky/runs",
                                       headers=auth).json()["items"]) >= 3, 30)
    page = signed_in(chromium, server.base, server.viewer)
    page.goto("/jobs/sync.flaky")
    tl = page.locator("#timeline")
    n = tl.locator("i").count()
    assert n >= 3
    # the timeline is one tab stop: Tab from the window tabs reaches it
    page.locator("nav[aria-label='Timeline window'] a").last.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "timeline"
    status = page.locator("#tl-status")
    assert until(lambda: f"Slot {n} of {n}" in status.inner_text(), 5)  # the newest
    page.keyboard.press("Home")
    assert until(lambda: status.inner_text().startswith(f"Slot 1 of {n},"), 5)
    page.keyboard.press("ArrowRight")
    assert until(lambda: status.inner_text().startswith(f"Slot 2 of {n},"), 5)
    assert tl.locator("i.cur").count() == 1
    # walk back from the newest to a slot with a failed run, then Enter opens it
    page.keyboard.press("End")
    for _ in range(n):
        if "fa" in (tl.locator("i.cur").get_attribute("class") or "").split():  # failed
            break
        page.keyboard.press("ArrowLeft")
    # the run's details arrive (fetched for the cell under the cursor)
    assert until(lambda: "upstream answered 502" in status.inner_text(), 15), (
        status.inner_text())
    rid = re.search(r"\(run #(\d+)\)", status.inner_text())
    assert rid
    check_axe(page, axe_source, "timeline focused")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/runs/{rid.group(1)}$"))
    page.context.close()
