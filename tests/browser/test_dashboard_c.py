"""#17 part C in a real browser, on SQLite and PostgreSQL: cancel a running run (run page
and the job page's "running now"; confirmation, CSRF, the result shown), a command's output
tailing live on the run page (and marked where it was cut), and a backfill of a range from
the job page (errors at the field, live progress, cancel). A viewer sees no control and
the server refuses; another team gets 404. Every page touched checked with axe-core."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from browser.conftest import Server, open_action
from browser.test_dashboard import check_axe, shoot, signed_in, until

pytestmark = pytest.mark.slow


def _api(server: Server, path: str, tok: str | None = None) -> Any:
    return httpx.get(f"{server.base}{path}",
                     headers={"Authorization": f"Bearer {tok or server.admin}"}).json()


def _trigger(page: Any, job_id: str) -> int:
    page.goto(f"/jobs/{job_id}")
    open_action(page, "Run now…")
    page.get_by_role("button", name="Run now").click()
    flash = page.locator(".flash").inner_text()
    m = re.search(rf"triggered {re.escape(job_id)} \(run (\d+)", flash)
    assert m, flash
    return int(m.group(1))


def _csrf(page: Any) -> str:
    return str(page.evaluate("document.querySelector('input[name=csrf]').value"))


def test_cancel_a_running_command_and_its_live_output(server: Server, chromium: Any,
                                                      axe_source: str) -> None:
    page = signed_in(chromium, server.base, server.editor)
    run_id = _trigger(page, "shell.tail")
    # the job page lists it under "running now", with a cancel control
    page.locator("#running-now", has_text=f"#{run_id}").wait_for(timeout=10_000)
    assert page.get_by_role("link", name=f"Cancel run #{run_id}").is_visible()
    check_axe(page, axe_source, "job page with a run in progress")

    # the run page: the output arrives without a reload (the marker survives)
    page.goto(f"/runs/{run_id}")
    page.evaluate("window.__noReload = 1")
    logs = page.locator("#run-logs")
    logs.filter(has_text="line 2").wait_for(timeout=10_000)
    assert "[stdout] line 1\n[stdout] line 2\n" in logs.inner_text()  # one line each
    first = logs.inner_text().count("[stdout] line")
    assert until(lambda: logs.inner_text().count("[stdout] line") >= first + 5, 10)
    assert page.evaluate("window.__noReload") == 1
    assert page.locator("#tailing").is_visible()
    shoot(page, server, "run-tailing")
    check_axe(page, axe_source, "run page tailing output")

    # cancel: a confirmation page first, then the result on the run page
    page.get_by_role("link", name="Cancel this run…").click()
    page.wait_for_url(re.compile(rf"/runs/{run_id}/cancel$"))
    check_axe(page, axe_source, "cancel confirmation")
    shoot(page, server, "run-cancel-confirm")
    page.get_by_label("Reason (recorded with the run)").fill("wrong input file")
    page.get_by_role("button", name=f"Yes, cancel run #{run_id}").click()
    page.wait_for_url(re.compile(rf"/runs/{run_id}$"))
    assert f"run #{run_id} cancelled" in page.locator(".flash").inner_text()
    page.evaluate("window.__noReload = 2")
    page.locator(".badge.st-cancelled").first.wait_for(timeout=10_000)
    # the run ended: the live region stops refreshing, the output stops growing
    assert until(lambda: page.locator("#live[data-live]").count() == 0, 10)
    assert page.locator("#tailing").count() == 0
    shown = page.locator("#run-logs").inner_text()
    page.wait_for_timeout(2500)
    assert page.locator("#run-logs").inner_text() == shown
    assert page.evaluate("window.__noReload") == 2
    run = _api(server, f"/api/runs/{run_id}")
    assert run["status"] == "cancelled" and "wrong input file" in (run["error"] or "")
    assert run["logs"][-1] != "[stdout] line 300"  # stopped before its end
    # a second cancel: not running; an unknown run: 404
    resp = page.request.post(f"/runs/{run_id}/cancel", form={"csrf": _csrf(page)})
    assert resp.ok and "is not running (it ended: cancelled)" in resp.text()
    page.goto(f"/runs/{run_id}/cancel")
    assert page.locator("#not-running").is_visible()
    assert page.request.post("/runs/987654/cancel",
                             form={"csrf": _csrf(page)}).status == 404
    # without the CSRF token nothing is cancelled
    other = _trigger(page, "shell.tail")
    assert page.request.post(f"/runs/{other}/cancel", form={"csrf": ""}).status == 403
    assert page.request.post(f"/runs/{other}/cancel", form={"csrf": _csrf(page)},
                             headers={"Origin": "http://evil.example"}).status == 403
    assert _api(server, f"/api/runs/{other}")["status"] in ("running", "pending")

    # a viewer sees no cancel control and is refused anyway
    viewer = signed_in(chromium, server.base, server.viewer)
    viewer.goto(f"/runs/{other}")
    viewer.locator("#run-logs").wait_for(timeout=10_000)
    assert viewer.locator("#cancel-run").count() == 0
    viewer.goto("/jobs/shell.tail")
    assert viewer.locator("#running-now").is_visible()
    assert viewer.get_by_role("link", name=f"Cancel run #{other}").count() == 0
    assert viewer.goto(f"/runs/{other}/cancel").status == 403
    assert viewer.request.post(f"/runs/{other}/cancel",
                               form={"csrf": _csrf(viewer)}).status == 403
    viewer.context.close()
    # another team: the run does not exist
    beta = signed_in(chromium, server.base, server.beta)
    assert beta.goto(f"/runs/{other}").status == 404
    assert beta.goto(f"/runs/{other}/cancel").status == 404
    beta.goto("/jobs")
    assert beta.request.post(f"/runs/{other}/cancel",
                             form={"csrf": _csrf(beta)}).status == 404
    beta.context.close()
    assert _api(server, f"/api/runs/{other}")["status"] in ("running", "pending")

    # cancelled from the job page's "running now"
    page.goto("/jobs/shell.tail")
    page.get_by_role("link", name=f"Cancel run #{other}").click()
    page.get_by_role("button", name=f"Yes, cancel run #{other}").click()
    assert f"run #{other} cancelled" in page.locator(".flash").inner_text()
    assert until(lambda: _api(server, f"/api/runs/{other}")["status"] == "cancelled", 10)
    audit = [e for e in _api(server, "/api/audit")["items"] if e["action"] == "run.cancel"]
    assert {e["details"]["run_id"] for e in audit} >= {run_id, other}
    page.context.close()


def test_cut_output_is_marked(server: Server, chromium: Any, axe_source: str) -> None:
    page = signed_in(chromium, server.base, server.editor)
    run_id = _trigger(page, "shell.chatty")
    page.goto(f"/runs/{run_id}")
    # 3,000 lines into 1 KiB: the cut is marked while it still runs
    page.locator("#run-logs mark.cut").wait_for(timeout=10_000)
    cut = page.locator("#run-logs mark.cut").inner_text()
    assert cut.startswith("[output cut: ") and "lines" in cut
    lines = page.locator("#run-logs").inner_text().splitlines()
    assert lines[lines.index(cut) - 1].startswith("[stdout] ")  # the first half, the mark,
    assert lines[lines.index(cut) + 1].startswith("[stdout] ")  # then the last half
    assert page.locator("#output-cut").is_visible()
    assert page.locator("#tailing").is_visible()
    shoot(page, server, "run-output-cut")
    check_axe(page, axe_source, "run page with cut output")
    # the end arrives without a reload, and the refresh stops
    page.locator("#run-logs", has_text="the end").wait_for(timeout=15_000)
    assert until(lambda: page.locator("#live[data-live]").count() == 0, 10)
    assert page.locator(".badge.st-succeeded").first.is_visible()
    page.context.close()


def test_backfill_a_range(server: Server, chromium: Any, axe_source: str) -> None:
    page = signed_in(chromium, server.base, server.editor)
    page.goto("/jobs/export.nightly")
    form = page.locator("#backfill-form")

    def submit(start: str, end: str) -> None:
        open_action(page, "Backfill…")
        form.get_by_label(re.compile(r"^From")).fill(start)
        form.get_by_label(re.compile(r"^To")).fill(end)
        form.get_by_role("button", name="Backfill").click()

    # wrong input: the error is at the field that is wrong, the values are kept
    submit("the day before", "1m")
    err = page.locator("#bf-from-err")
    assert err.is_visible() and "from:" in err.inner_text()
    assert form.get_by_label(re.compile(r"^From")).get_attribute("aria-invalid") == "true"
    assert form.get_by_label(re.compile(r"^From")).input_value() == "the day before"
    check_axe(page, axe_source, "job page with a backfill error")
    # the page answering the form (at /backfills) refreshes and links as the job page
    assert page.locator("#live").get_attribute("data-live") == "/jobs/export.nightly"
    assert page.get_by_role("link", name="7d").get_attribute("href") == (
        "/jobs/export.nightly?window=7d")
    assert page.locator("input[name=next]").first.get_attribute("value") == (
        "/jobs/export.nightly")
    submit("1m", "3m")  # reversed
    assert "is before" in page.locator("#bf-to-err").inner_text()
    assert page.locator("#bf-from-err").count() == 0
    submit("30d", "1m")  # a slot every 2 s for 30 days
    assert "more than 100000 slots" in page.locator("#bf-from-err").inner_text()
    shoot(page, server, "job-backfill-error")
    assert not [e for e in _api(server, "/api/audit")["items"]
                if e["action"] == "job.backfill"]

    # a range of ~60 slots at 10 a second: progress moves without a reload, then ends
    submit("3m", "1m")
    page.wait_for_url(re.compile(r"/backfills/\d+$"))
    bid = int(page.url.rsplit("/", 1)[1])
    assert f"backfill {bid} of export.nightly" in page.locator(".flash").inner_text()
    page.evaluate("window.__noReload = 1")
    bar = page.locator("#bf-progress")
    bar.wait_for(timeout=10_000)
    total = int(bar.get_attribute("max") or 0)
    assert 55 <= total <= 95, total
    seen = {int(bar.get_attribute("value") or 0)}
    shoot(page, server, "backfill-progress")
    check_axe(page, axe_source, "backfill page")
    assert until(lambda: seen.add(int(page.locator("#bf-progress").get_attribute("value")
                                      or 0)) or len(seen) >= 3, 20), seen
    page.locator("#bf-state", has_text="finished").wait_for(timeout=30_000)
    assert page.evaluate("window.__noReload") == 1
    assert until(lambda: page.locator("#live[data-live]").count() == 0, 10)
    assert page.locator("#cancel-backfill").count() == 0
    status = _api(server, f"/api/backfills/{bid}")
    assert status["state"] == "finished" and status["progress"]["done"] == total

    # a long one, cancelled from its page
    page.goto("/jobs/export.nightly")
    submit("40m", "1m")
    page.wait_for_url(re.compile(r"/backfills/\d+$"))
    long_id = int(page.url.rsplit("/", 1)[1])
    page.locator("#bf-state", has_text="running").wait_for(timeout=10_000)

    # a viewer: no form, no cancel button, refused anyway; another team: 404
    viewer = signed_in(chromium, server.base, server.viewer)
    viewer.goto("/jobs/export.nightly")
    assert viewer.locator("#backfill-form").count() == 0
    viewer.goto(f"/backfills/{long_id}")
    assert viewer.locator("#bf-state").is_visible()
    assert viewer.locator("#cancel-backfill").count() == 0
    csrf = _csrf(viewer)
    assert viewer.request.post(f"/backfills/{long_id}/cancel",
                               form={"csrf": csrf}).status == 403
    assert viewer.request.post("/backfills", form={"csrf": csrf, "job_id": "export.nightly",
                                                   "from": "3m", "to": "1m"}).status == 403
    viewer.context.close()
    beta = signed_in(chromium, server.base, server.beta)
    assert beta.goto(f"/backfills/{long_id}").status == 404
    assert beta.goto(f"/backfills/{long_id}?partial=1").status == 404
    beta.goto("/jobs")
    csrf = _csrf(beta)
    assert beta.request.post(f"/backfills/{long_id}/cancel",
                             form={"csrf": csrf}).status == 404
    assert beta.request.post("/backfills", form={"csrf": csrf, "job_id": "export.nightly",
                                                 "from": "3m", "to": "1m"}).status == 404
    assert beta.request.post("/backfills", form={"csrf": csrf, "job_id": "no.such",
                                                 "from": "3m", "to": "1m"}).status == 404
    beta.context.close()
    assert _api(server, f"/api/backfills/{long_id}")["state"] == "running"

    page.get_by_role("button", name="Cancel the backfill").click()
    assert f"backfill {long_id} cancelled" in page.locator(".flash").inner_text()
    page.locator("#bf-state", has_text="cancelled").wait_for(timeout=15_000)
    status = _api(server, f"/api/backfills/{long_id}")
    assert status["state"] == "cancelled"
    assert status["progress"]["done"] < status["progress"]["total"]
    actions = [e["action"] for e in _api(server, "/api/audit")["items"]]
    assert actions.count("job.backfill") == 2 and "job.backfill.cancel" in actions
    page.context.close()
