"""Every page of the dashboard at a desktop size (1440 x 900) and a phone's (390 x 844), in
the light and the dark theme (the system setting), in one browser against a real
``cronfleet run``: no horizontal scroll of the page body (wide tables scroll in their
own box), axe-core finds no violation at all (any impact; in the dark theme, of the
rules that read colours: the markup is the same), the slot timeline holding
every run status renders each in its own colour, and a server defect (5xx) is a
dashboard page. Screenshots of every page, both sizes: ``build/screenshots/layout/``, or
``docs/images/`` with ``CRONFLEET_SCREENSHOTS=docs`` (``make screenshots``)."""

from __future__ import annotations

import base64
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.procs import LISTENING, spawn, stop, wait_for
from browser.conftest import CONFIG, ROOT, SHOTS, TASKS, Server, token
from browser.test_dashboard import axe_violations, until
from cronfleet.dashboard.read import CELL_CODES, CELL_STATES

pytestmark = pytest.mark.slow

VIEWPORTS = {"phone": {"width": 390, "height": 844},
             "desktop": {"width": 1440, "height": 900}}
THEMES = ("light", "dark")
LEDGER = '''
    [[tasks]]
    id = "ledger.all"
    cron = "17 * * * *"
    description = "a job whose ledger holds every status"
    handler = "tasks:ok"
'''
# (status, reason) of the newest hourly slots of ledger.all, newest last
EVERY = [("succeeded", None), ("failed", None), ("timed_out", None), ("interrupted", None),
         ("cancelled", None), ("skipped", "paused"), ("skipped", "disabled"),
         ("skipped", "missed"), ("skipped", "already_executing"),
         ("skipped", "store_unavailable"), ("pending", None), ("running", None)]


def _insert(db: Path, rows: list[tuple[Any, ...]]) -> list[int]:
    cols = ("job_id, slot, triggered_by, status, reason, instance_id, fencing_token, "
            "claimed_at, started_at, finished_at, error")
    conn = sqlite3.connect(db, timeout=30)
    ids = []
    for row in rows:
        cur = conn.execute(f"INSERT OR IGNORE INTO runs ({cols}) VALUES "
                           "(?,?,?,?,?,?,?,?,?,?,?)", row)
        ids.append(int(cur.lastrowid or 0))
    conn.commit()
    conn.close()
    return ids


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("layout")
    url = f"sqlite:///{tmp / 'cf.db'}"
    (tmp / "tasks.py").write_text(TASKS)
    (tmp / "cronfleet.toml").write_text(CONFIG.format(store=url) + LEDGER)
    env = {"CRONFLEET_SECRET_KEY": base64.b64encode(os.urandom(32)).decode()}
    proc, log = spawn(tmp, "main", "--config", str(tmp / "cronfleet.toml"), env=env)
    try:
        base = wait_for(log, LISTENING, proc).group(1)
        s = Server(base, url, "layout", admin=token(url, role="admin", name="ada"),
                   editor="", viewer="", beta="", dir=tmp, procs=[proc], env=env)
        yield s
    finally:
        if proc.poll() is None:
            stop(proc)


def _ledger(srv: Server) -> dict[str, int]:
    """Every status in ledger.all's newest hourly slots; the run ids by status."""
    db = srv.dir / "cf.db"
    now = time.time()
    last = (now - 17 * 60) // 3600 * 3600 + 17 * 60  # the newest hh:17 in the past
    rows = []
    for k, (status, reason) in enumerate(EVERY):
        slot = int((last - 3600 * (len(EVERY) - 1 - k)) * 1000)
        done = None if status in ("running", "pending") else slot + 400 + 150 * k
        rows.append(("ledger.all", slot, "schedule", status, reason, "w-1", k + 1, slot,
                     slot + 20, done, "upstream answered 502" if status == "failed"
                     else None))
    ids = _insert(db, rows)
    conn = sqlite3.connect(db, timeout=30)
    conn.execute("UPDATE job_state SET created_at = ? WHERE job_id = 'ledger.all'",
                 (int((now - 2 * 86400) * 1000),))
    conn.commit()
    conn.close()
    return {f"{st}:{reason or ''}": rid for (st, reason), rid in zip(EVERY, ids,
                                                                     strict=True)}


def _out(name: str) -> Path:
    if os.environ.get("CRONFLEET_SCREENSHOTS") == "docs":
        out = ROOT / "docs" / "images"
    else:
        out = SHOTS / "layout"
    out.mkdir(parents=True, exist_ok=True)
    return out / f"dashboard-{name}.png"


def _no_page_scroll(page: Any, what: str) -> None:
    wide = page.evaluate("""() => {
      const d = document.documentElement, cw = d.clientWidth;
      if (d.scrollWidth <= cw) return null;
      // the innermost elements reaching past the window, outside any scrolling box
      const out = [];
      for (const el of document.querySelectorAll('body *')) {
        if (el.getBoundingClientRect().right <= cw + 1) continue;
        let p = el.parentElement, inside = false;
        while (p) { if (getComputedStyle(p).overflowX !== 'visible') { inside = true; break; }
                    p = p.parentElement; }
        if (inside) continue;
        const kids = Array.from(el.children).some(
          c => c.getBoundingClientRect().right > cw + 1);
        if (!kids) out.push(el.tagName + '.' + el.className + '#' + el.id + ' ' +
                            Math.round(el.getBoundingClientRect().right));
      }
      return [d.scrollWidth, cw, out.slice(0, 5)];
    }""")
    assert wide is None, f"{what}: the page scrolls sideways: {wide}"


# the axe rules that read colours: all a theme changes (its pages' markup is the same)
COLOUR_RULES = ["color-contrast", "link-in-text-block"]


def _axe(page: Any, axe: str, what: str, rules: list[str] | None = None) -> None:
    """axe-core's violations on the page, of every rule or of ``rules`` only."""
    got = axe_violations(page, axe, rules)
    assert not got, f"{what}: {got}"


def _sign_in(ctx: Any, base: str, tok: str) -> Any:
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{base}/signin")
    page.get_by_label("API token").fill(tok)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))
    return page


def test_every_page_both_sizes_both_themes(srv: Server, chromium: Any, axe_source: str
                                           ) -> None:
    auth = {"Authorization": f"Bearer {srv.admin}"}
    ids = _ledger(srv)
    created = httpx.post(f"{srv.base}/api/jobs", headers=auth, json={
        "id": "api.ping", "schedule": "0 5 * * *", "description": "ping the partner",
        "http": {"url": "https://partner.example/ping", "method": "POST"}})
    assert created.status_code == 201, created.text
    httpx.put(f"{srv.base}/api/secrets/PARTNER_KEY", headers=auth,
              json={"value": "v", "hosts": ["partner.example"]})
    httpx.post(f"{srv.base}/api/jobs/report.slow/pause", headers=auth,
               json={"note": "a pause with a note long enough to wrap on a phone screen"})
    assert until(lambda: httpx.get(f"{srv.base}/api/jobs/sync.flaky/runs",
                                   headers=auth).json()["items"], 30)
    pages = {"overview": "/", "jobs": "/jobs", "job": "/jobs/ledger.all",
             "job-7d": "/jobs/sync.flaky?window=7d", "job-paused": "/jobs/report.slow",
             "job-http": "/jobs/api.ping", "runs": "/runs",
             "run": f"/runs/{ids['failed:']}",
             "cancel": f"/runs/{ids['running:']}/cancel", "edit": "/edit?job=api.ping",
             "audit": "/audit", "secrets": "/secrets", "tokens": "/tokens",
             "not-found": "/jobs/no.such.job"}
    for size, viewport in VIEWPORTS.items():
        for theme in THEMES:
            ctx = chromium.new_context(viewport=viewport, color_scheme=theme,
                                       bypass_csp=True)  # axe is injected inline
            page = _sign_in(ctx, srv.base, srv.admin)
            for name, path in pages.items():
                what = f"{name} {size} {theme}"
                resp = page.goto(f"{srv.base}{path}")
                assert resp.status == (404 if name == "not-found" else 200), what
                assert page.locator("h1").count() == 1, what
                _no_page_scroll(page, what)
                _axe(page, axe_source, what, None if theme == "light" else COLOUR_RULES)
                if theme == "light" or name in ("overview", "job"):
                    page.screenshot(path=str(_out(f"{name}-{size}"
                                                  f"{'-dark' if theme == 'dark' else ''}")))
            if size == "phone":  # the job page's first screen is what the job is doing
                page.goto(f"{srv.base}/jobs/ledger.all")
                top = page.locator("#timeline").bounding_box()
                assert top is not None and top["y"] < viewport["height"], top
                assert page.locator("#actions").bounding_box()["y"] > top["y"]
            if theme == "light":  # /docs leads back
                page.goto(f"{srv.base}/docs")
                page.get_by_role("link", name="← cronfleet dashboard").click()
                page.wait_for_url(re.compile(r"/$"))
            ctx.close()
            # signed out: the sign-in page
            ctx = chromium.new_context(viewport=viewport, color_scheme=theme,
                                       bypass_csp=True)
            page = ctx.new_page()
            page.goto(f"{srv.base}/signin")
            _no_page_scroll(page, f"signin {size} {theme}")
            _axe(page, axe_source, f"signin {size} {theme}",
                 None if theme == "light" else COLOUR_RULES)
            if theme == "light":
                page.screenshot(path=str(_out(f"signin-{size}")))
            ctx.close()


def test_timeline_with_every_status_and_a_5xx_page(srv: Server, chromium: Any,
                                                   axe_source: str) -> None:
    ids = _ledger(srv)
    ctx = chromium.new_context(viewport=VIEWPORTS["desktop"], bypass_csp=True)
    page = _sign_in(ctx, srv.base, srv.admin)
    page.goto(f"{srv.base}/jobs/ledger.all")
    classes = set(page.eval_on_selector_all("#timeline > i", "els => els.map(e => e.className)"))
    assert classes == {CELL_CODES[st] for st in CELL_STATES}, classes
    colours = page.evaluate("""states => Object.fromEntries(states.map(s => {
        const el = document.querySelector('#timeline > i.' + s);
        const st = getComputedStyle(el);
        return [s, st.backgroundImage !== 'none' ? st.backgroundImage : st.backgroundColor];
      }))""", sorted(CELL_CODES[st] for st in CELL_STATES if st != "none"))
    assert len(set(colours.values())) == len(colours), colours  # one colour each
    # hover a cancelled cell: its slot, to the second, and what the ledger says
    cell = page.locator("#timeline > i.ca")  # cancelled
    cell.hover()
    page.locator("#tl-status", has_text="cancelled").wait_for()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:17:00 ", page.locator("#tl-status").inner_text())
    # the overview's heat map links the minute to its run
    page.goto(f"{srv.base}/")
    assert page.locator("#heatmap ol.heat li").count() >= 1
    # a defect in the server: a row the code cannot read (an unknown status), an hour ago
    # at hh:43 (inside the retention: an older row may be pruned before the page is read)
    slot = int(((time.time() - 3600) // 3600 * 3600 + 43 * 60) * 1000)
    bad = _insert(srv.dir / "cf.db", [("ledger.all", slot, "schedule", "bogus", None, "w",
                                       1, slot, slot, slot + 1, None)])[0]
    assert bad, "the defective row was not inserted"
    for size, viewport in VIEWPORTS.items():
        page.set_viewport_size(viewport)
        resp = page.goto(f"{srv.base}/runs/{bad}")
        assert resp.status == 500
        assert resp.headers["content-type"].startswith("text/html")
        assert page.locator("h1").inner_text() == "500"
        assert "failed to build this page" in page.locator("main").inner_text()
        assert page.get_by_role("navigation", name="Main").is_visible()
        _no_page_scroll(page, f"500 {size}")
        _axe(page, axe_source, f"500 {size}")
        page.screenshot(path=str(_out(f"error-{size}")))
    assert ids
    ctx.close()
