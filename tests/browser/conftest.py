"""Browser tests of the dashboard: Playwright drives Debian's Chromium (never a browser
download) against real ``cronfleet run`` processes on SQLite and PostgreSQL.

Chromium: ``/usr/bin/chromium`` (``CRONFLEET_CHROMIUM`` overrides it). axe-core comes from
the npm registry into ``tests/browser/node_modules`` (``make test`` installs it). Missing
either skips these tests on a laptop and fails them with ``CI=true``. Screenshots of every
page go to ``build/screenshots/<store>/``.
"""

from __future__ import annotations

import base64
import os
import shutil
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api.procs import LISTENING, spawn, stop, wait_for
from api.procs import token as _token
from store.pg import drop_schema, new_schema, pg_url, require_pg

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM = os.environ.get("CRONFLEET_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "build" / "screenshots"


def _missing(what: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(what, pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One browser per module: Playwright's sync API runs an event loop in this thread
    while it lives, so it must be gone before the other tests (asyncio.run) start."""
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        _missing(f"Chromium is not installed ({CHROMIUM}): apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists()
                                     else shutil.which("chromium"),
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.exists():
        _missing(f"axe-core is not installed: npm install --prefix {HERE}")
    return AXE.read_text()


TASKS = textwrap.dedent('''
    import time

    def ok(ctx):
        return {"rows": 3}

    def fails(ctx):
        raise RuntimeError("upstream answered 502")

    def slow(ctx):
        time.sleep(6)
        return "done"
''')

CONFIG = textwrap.dedent('''
    [scheduler]
    store = "{store}"
    timezone = "Europe/Paris"
    catch_up_window = "1m"

    [api]
    host = "127.0.0.1"
    port = 0
    private_targets = ["127.0.0.1"]  # the HTTP job of the run page's test calls back here

    [[tasks]]
    id = "export.nightly"
    cron = "2s"
    description = "export the orders"
    handler = "tasks:ok"

    [[tasks]]
    id = "sync.flaky"
    cron = "3s"
    description = "sync with the partner"
    handler = "tasks:fails"

    [[tasks]]
    id = "report.slow"
    cron = "0 3 * * *"
    description = "a long report"
    handler = "tasks:slow"

    [[tasks]]
    id = "shell.tail"
    cron = "0 5 * * *"
    description = "a command printing a line every 0.3 s for 90 s"
    command = "for i in $(seq 1 300); do echo line $i; sleep 0.3; done"
    shell = true

    [[tasks]]
    id = "shell.chatty"
    cron = "0 5 * * *"
    description = "a command printing more than it may keep"
    command = "seq 1 3000; sleep 5; echo the end"
    shell = true
    max_output = "1KiB"

    [[tasks]]
    id = "beta.secret"
    cron = "0 4 * * *"
    team = "beta"
    handler = "tasks:ok"
''')


def open_action(page: Any, name: str) -> None:
    """Open one of the job page's actions (``Pause…``, ``Run now…``, ``Backfill…``,
    ``Cancel…``): its small form is folded until then."""
    summary = page.locator("details.act > summary", has_text=name)
    if summary.locator("xpath=..").get_attribute("open") is None:
        summary.click()


def token(url: str, **kw: Any) -> str:
    """A new token (in a thread: Playwright's sync API keeps an event loop running in
    this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_token, url, **kw).result()


@dataclass
class Server:
    base: str
    store: str
    kind: str
    admin: str
    editor: str
    viewer: str
    beta: str
    dir: Path
    procs: list[Any]
    env: dict[str, str]

    def replica(self, name: str) -> str:
        """Start another ``cronfleet run`` on the same store; its base URL."""
        proc, log = spawn(self.dir, name, "--config", str(self.dir / "cronfleet.toml"),
                          "--log-level", "info", env=self.env)
        self.procs.append(proc)
        return wait_for(log, LISTENING, proc).group(1)


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    kind = str(request.param)
    schema = None
    if kind == "postgres":
        require_pg()
        schema = new_schema("dash")
        url = f"{pg_url()}?schema={schema}"
    else:
        url = f"sqlite:///{tmp_path / 'cf.db'}"
    (tmp_path / "tasks.py").write_text(TASKS)
    (tmp_path / "cronfleet.toml").write_text(CONFIG.format(store=url))
    procs: list[Any] = []
    env = {"CRONFLEET_SECRET_KEY": base64.b64encode(os.urandom(32)).decode()}
    try:
        proc, log = spawn(tmp_path, "main", "--config", str(tmp_path / "cronfleet.toml"),
                          env=env)
        procs.append(proc)
        base = wait_for(log, LISTENING, proc).group(1)
        srv = Server(base, url, kind,
                     admin=token(url, role="admin", name="ada"),
                     editor=token(url, role="editor", name="ed"),
                     viewer=token(url, role="viewer", name="vi"),
                     beta=token(url, role="admin", name="bob", team="beta"),
                     dir=tmp_path, procs=procs, env=env)
        yield srv
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        if schema is not None:
            drop_schema(schema)
