"""Behind a TLS proxy (#24, item 8), against a real ``cronfleet run``: ``[api]
forwarded_allow_ips`` names the peers whose ``X-Forwarded-Proto`` / ``-For`` are believed.
From such a peer, a request forwarded as https gets a ``Secure`` session cookie and the
dashboard's Origin check compares with ``https://host``; from any other peer the same
headers change nothing (scheme http: no ``Secure``, an https Origin refused). The peers are
two loopback addresses of this host (127.0.0.2 trusted, 127.0.0.3 not)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.procs import LISTENING, spawn, stop, token, wait_for
from cronfleet.dashboard.auth import COOKIE, csrf_for

pytestmark = pytest.mark.slow

CONFIG = """
[scheduler]
store = "sqlite:///{db}"

[api]
host = "127.0.0.1"
port = 0
forwarded_allow_ips = ["127.0.0.2/32"]

[[tasks]]
id = "nightly"
cron = "0 3 * * *"
handler = "tasks:ok"
"""


def client(base: str, peer: str) -> httpx.Client:
    """A client whose connections come from ``peer`` (a loopback address)."""
    return httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=peer))


def test_forwarded_headers_count_only_from_a_trusted_peer(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("def ok(ctx):\n    return 1\n")
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(db=tmp_path / "cf.db"))
    proc, log = spawn(tmp_path, "run", "--config", str(tmp_path / "cronfleet.toml"))
    try:
        base = wait_for(log, LISTENING, proc).group(1)
        editor = token(f"sqlite:///{tmp_path / 'cf.db'}", role="editor", name="ed")
        own_https = "https://" + base.removeprefix("http://")
        forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9",
                     "Origin": own_https}
        session = {"Cookie": f"{COOKIE}={editor}"}
        prefs = {"csrf": csrf_for(editor), "utc": "1", "next": "/"}

        with client(base, "127.0.0.2") as proxy:  # trusted: the request was https
            r = proxy.post("/signin", data={"token": editor, "next": "/"}, headers=forwarded)
            assert r.status_code == 303, r.text
            cookie = r.headers["set-cookie"]
            assert cookie.startswith(f"{COOKIE}=") and "; Secure" in cookie
            r = proxy.post("/prefs", data=prefs, headers={**forwarded, **session})
            assert r.status_code == 303, r.text  # Origin https://host is our own
            assert "; Secure" in r.headers["set-cookie"]
            plain_origin = {**forwarded, "Origin": base}  # http://host: not ours here
            r = proxy.post("/prefs", data=prefs, headers={**plain_origin, **session})
            assert r.status_code == 403

        with client(base, "127.0.0.3") as other:  # untrusted: the headers are ignored
            r = other.post("/signin", data={"token": editor, "next": "/"}, headers=forwarded)
            assert r.status_code == 403 and "another site" in r.text
            r = other.post("/signin", data={"token": editor, "next": "/"},
                           headers={k: v for k, v in forwarded.items() if k != "Origin"})
            assert r.status_code == 303
            assert "Secure" not in r.headers["set-cookie"]  # the scheme seen is http
            r = other.post("/prefs", data=prefs, headers={**forwarded, **session})
            assert r.status_code == 403
            r = other.post("/prefs", data=prefs, headers={"Origin": base, **session})
            assert r.status_code == 303 and "Secure" not in r.headers["set-cookie"]
    finally:
        stop(proc)


def test_a_bad_forwarded_allow_ips_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("def ok(ctx):\n    return 1\n")
    bad = CONFIG.replace('["127.0.0.2/32"]', '["proxy.internal"]')
    (tmp_path / "cronfleet.toml").write_text(bad.format(db=tmp_path / "cf.db"))
    proc, log = spawn(tmp_path, "run", "--config", str(tmp_path / "cronfleet.toml"))
    assert proc.wait(timeout=60) == 1
    text = log.read_text()
    assert "forwarded_allow_ips" in text and "'proxy.internal' is not an IP address" in text
