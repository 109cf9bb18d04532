"""Health of one process: the readiness rule (shared with the API's ``/readyz``) and the
small probe listener every process can serve (``cronfleet run --metrics-port``), whatever
its role, separate from the API: ``GET /healthz``, ``/readyz``, ``/metrics``.

The listener is a few lines of HTTP/1.1 on ``asyncio.start_server`` (no web framework):
one GET per connection, answered and closed. It is meant for probes and scrapers on a
private port, not for the public; ``/metrics`` needs the ``server`` extra
(prometheus_client) and answers 501 naming it when missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

log = logging.getLogger("cronfleet.health")

__all__ = ["ProbeServer", "readiness"]

STORE_TIMEOUT = 5.0


async def readiness(scheduler: Any, max_overdue: float, *, catalog: Any = None
                    ) -> tuple[bool, dict[str, Any]]:
    """Ready: the scheduler runs, the store answers within 5 s and is not damaged, (with
    timers) the loop is alive and at most ``max_overdue`` seconds behind its earliest due
    slot, and the ``catalog`` (the jobs created over the API), when there is one, has
    loaded them: a process still reading a large catalog plans none of its jobs yet."""
    health: dict[str, Any] = scheduler.health()
    checks: dict[str, Any] = {"scheduler": health}
    ok = bool(scheduler.running)
    if not ok:  # start-up still waits for the store (connect_timeout), or it has stopped
        checks["store"] = "not connected: the scheduler is not running (starting or stopped)"
    elif getattr(scheduler.store, "damaged", False):  # a corrupted SQLite file
        ok = False
        checks["store"] = ("damaged: stop every process and restore the database file "
                           "(docs/deployment.md, recovering a damaged SQLite file)")
    else:
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                await scheduler.store.list_runs(limit=1)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unreachable: {type(exc).__name__}: {exc}"
            ok = False
    if health["timers"]:
        if not health["loop_alive"]:
            ok = False
            checks["loop"] = "the scheduler loop is not running"
        elif health["overdue"] > max_overdue:
            ok = False
            checks["loop"] = (f"the loop is {health['overdue']:.1f}s behind its earliest due "
                              f"slot (limit {max_overdue:g}s)")
        else:
            checks["loop"] = "ok"
    if catalog is not None:
        if catalog.ready:
            checks["catalog"] = "ok"
        else:
            ok = False
            checks["catalog"] = ("loading the jobs created over the API" if not catalog.started
                                 else "reading this process's share of the jobs created over "
                                      "the API (the fleet changed while it started)")
    return ok, checks


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request",
            501: "Not Implemented", 503: "Service Unavailable"}


class ProbeServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` of ``scheduler`` on ``host:port``
    (port 0 picks a free one: read :attr:`port` after :meth:`start`)."""

    def __init__(self, scheduler: Any, host: str = "0.0.0.0", port: int = 9090, *,
                 ready_max_overdue: float = 30.0, catalog: Any = None) -> None:
        self.scheduler = scheduler
        self.catalog = catalog
        self.host = host
        self.port = port
        self.ready_max_overdue = ready_max_overdue
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            from cronfleet.errors import CronfleetError

            raise CronfleetError(
                f"the probe listener cannot listen on {self.host}:{self.port}: "
                f"{exc.strerror or exc} (choose another with --metrics-port or "
                "[scheduler] metrics_port)") from None
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("probes listening on http://%s:%s (/healthz /readyz /metrics)",
                 self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ProbeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/readyz", "/metrics"):
            return 404, "text/plain", f"no route {path}\n".encode()
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        if path == "/healthz":
            return 200, "application/json", b'{"status": "ok"}'
        if path == "/readyz":
            ok, checks = await readiness(self.scheduler, self.ready_max_overdue,
                                         catalog=self.catalog)
            body = {"status": "ready" if ok else "not ready", "checks": checks}
            return (200 if ok else 503), "application/json", json.dumps(body).encode()
        from cronfleet.extras import MissingExtra

        try:
            from cronfleet.metrics import CONTENT_TYPE_LATEST, render
        except MissingExtra as exc:
            return 501, "text/plain", f"{exc}\n".encode()
        return 200, CONTENT_TYPE_LATEST, render(self.scheduler)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    if len(header) > 8192:
                        break
            parts = line.decode("latin-1").split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                status, kind, body = 400, "text/plain", b"bad request\n"
                method = "GET"
            else:
                method = parts[0]
                status, kind, body = await self.answer(method, parts[1])
            head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                    f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n").encode()
            writer.write(head if method == "HEAD" else head + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeError):
            pass
        except Exception:
            log.exception("probe listener: request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
