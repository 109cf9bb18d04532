"""The dashboard's sign-in without a browser, against a real ``cronfleet run``: the
one-time first-start link, what a session cookie can and cannot do, redirects that stay
on the site, and the offline /docs."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from api.procs import LISTENING, spawn, stop, token, wait_for

pytestmark = pytest.mark.slow

CONFIG = """
[scheduler]
store = "sqlite:///{db}"

[api]
host = "127.0.0.1"
port = 0

[[tasks]]
id = "nightly"
cron = "0 3 * * *"
handler = "tasks:ok"
"""


def start(tmp_path: Path) -> tuple[object, Path, str]:
    (tmp_path / "tasks.py").write_text("def ok(ctx):\n    return 1\n")
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(db=tmp_path / "cf.db"))
    proc, log = spawn(tmp_path, "run", "--config", str(tmp_path / "cronfleet.toml"))
    base = wait_for(log, LISTENING, proc).group(1)
    return proc, log, base


def test_first_start_link_signs_in_once(tmp_path: Path) -> None:
    proc, log, base = start(tmp_path)
    try:
        m = wait_for(log, r"one-time sign-in link .*?: (http://\S+/signin/once/\S+)", proc)
        link = m.group(1)
        assert link.startswith(base)
        with httpx.Client(base_url=base) as c:
            r = c.get(link)
            assert r.status_code == 303 and r.headers["location"] == "/"
            cookie = r.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace(
                "samesite", "SameSite")
            assert "Secure" not in cookie  # plain HTTP on loopback
            page = c.get("/")
            assert page.status_code == 200 and "Overview" in page.text
            assert "admin" in page.text  # the new token's role
        # used: a second visit (another browser) is refused
        again = httpx.get(link)
        assert again.status_code == 410
        # the token it made is a real admin token of team default, audited
        store_url = f"sqlite:///{tmp_path / 'cf.db'}"
        admin = token(store_url, role="admin", name="check")
        entries = httpx.get(f"{base}/api/audit",
                            headers={"Authorization": f"Bearer {admin}"}).json()["items"]
        assert any(e["action"] == "token.create" and e["details"].get("via") ==
                   "one-time sign-in link" for e in entries)
    finally:
        stop(proc)  # type: ignore[arg-type]
    # a store with a token: no link on the next start
    proc, log, base = start(tmp_path)
    try:
        wait_for(log, r"API listening", proc)
        assert "one-time sign-in link" not in log.read_text()
    finally:
        stop(proc)  # type: ignore[arg-type]


def test_session_rules_and_offline_docs(tmp_path: Path) -> None:
    proc, _, base = start(tmp_path)
    try:
        url = f"sqlite:///{tmp_path / 'cf.db'}"
        editor = token(url, role="editor", name="ed")
        with httpx.Client(base_url=base) as c:
            # no session: pages lead to the form, fragments and actions answer 401
            r = c.get("/jobs?q=x")
            assert r.status_code == 303 and r.headers["location"] == "/signin?next=%2Fjobs%3Fq%3Dx"
            assert c.get("/jobs?partial=1").status_code == 401
            assert c.post("/act", data={"action": "pause"}).status_code == 401
            bad = c.post("/signin", data={"token": "cf_nope", "next": "/"})
            assert bad.status_code == 401 and "unknown or revoked token" in bad.text
            # a sign-in whose next leaves the site lands on /
            for nxt in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
                r = c.post("/signin", data={"token": editor, "next": nxt})
                assert r.status_code == 303 and r.headers["location"] == "/", nxt
            page = c.get("/jobs/nightly")
            assert page.status_code == 200
            csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
            assert csrf
            assert "default-src 'self'" in page.headers["content-security-policy"]
            # the pause needs its note; with it, it is made for every process
            r = c.post("/act", data={"csrf": csrf.group(1), "job_id": "nightly",
                                     "action": "pause", "next": "/jobs/nightly"})
            assert r.status_code == 303
            api = httpx.get(f"{base}/api/jobs/nightly",
                            headers={"Authorization": f"Bearer {editor}"}).json()
            assert api["override"] is None
            r = c.post("/act", data={"csrf": csrf.group(1), "job_id": "nightly",
                                     "action": "pause", "note": "db upgrade"})
            assert r.status_code == 303
            api = httpx.get(f"{base}/api/jobs/nightly",
                            headers={"Authorization": f"Bearer {editor}"}).json()
            assert api["override"]["note"] == "db upgrade" and api["paused"]
            # sign-out needs the CSRF token too, then the cookie is gone
            assert c.post("/signout", data={"csrf": "x"}).status_code == 403
            r = c.post("/signout", data={"csrf": csrf.group(1)})
            assert r.status_code == 303 and 'cronfleet_session=""' in r.headers["set-cookie"]
        # /docs: Swagger UI from the package, no CDN
        docs = httpx.get(f"{base}/docs")
        assert docs.status_code == 200 and "cdn" not in docs.text.lower()
        js = re.search(r'src="(/ui/static/swagger/[^"]+\.js)"', docs.text)
        assert js and httpx.get(base + js.group(1)).status_code == 200
    finally:
        stop(proc)  # type: ignore[arg-type]
