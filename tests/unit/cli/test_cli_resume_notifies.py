"""`cronfleet resume` of a job the auto-pause paused announces it on the job's channels
(a real webhook receiver); an operator's own pause resumed from the CLI is not announced."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from click.testing import Result

from cronfleet.alerts import AUTO_PAUSE_BY
from cronfleet.store import open_store


def test_resume_from_the_cli_notifies_the_auto_pauses_end(
        cli: Callable[..., Result], project: Path, tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        project.write_text(project.read_text().replace(
            'store = "sqlite:///ops.db"',
            'store = "sqlite:///ops.db"\nallow_private_targets = true').replace(
            'handler = "ops_handlers:boom"',
            'handler = "ops_handlers:boom"\nauto_pause_after = 3\n'
            f'notify = {{ webhook = "{url}" }}'))

        async def auto_pause() -> None:
            store = open_store(f"sqlite:///{tmp_path / 'ops.db'}")
            await store.open()
            try:
                await store.set_override("boom", False, by=AUTO_PAUSE_BY,
                                         note="auto-paused after 3 consecutive failures",
                                         until=None)
            finally:
                await store.close()

        asyncio.run(auto_pause())
        r = cli("resume", "boom", "--by", "alice")
        assert r.exit_code == 0, r.stderr
        assert "notified resumed via webhook: ok" in r.stderr
        [resumed] = bodies
        assert resumed["event"] == "resumed" and resumed["job_id"] == "boom"
        assert resumed["message"].startswith("job boom resumed by alice; it was auto-paused")
        # an operator's own pause and resume: nothing sent
        assert cli("pause", "boom", "--by", "bob").exit_code == 0
        r = cli("resume", "boom", "--by", "bob")
        assert r.exit_code == 0 and "notified" not in r.stderr
        assert len(bodies) == 1
    finally:
        server.shutdown()
        server.server_close()
