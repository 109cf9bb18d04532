"""An :class:`HttpRuntime` spreads its requests over several pooled clients (httpcore
looks at every connection of a pool for each request it assigns: smaller pools keep
that short); ``max_connections`` still bounds the connections open at once, and the
split does not make requests wait for each other below it."""

from __future__ import annotations

import asyncio

import pytest

from cronfleet import HttpJob
from cronfleet.jobs.http import POOLS, HttpRuntime

from .test_http_job import ctx


class Slow:
    """An HTTP server on 127.0.0.1 that answers each request after ``delay`` seconds and
    counts the connections open at the same time."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.open = 0
        self.most = 0
        self.served = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.most = max(self.most, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                if length:
                    await reader.readexactly(length)
                await asyncio.sleep(self.delay)
                self.served += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize(("cap", "runs"), [(3, 12), (1, 5), (POOLS + 5, 40)])
async def test_max_connections_bounds_the_connections_of_all_pools(cap: int, runs: int) -> None:
    server = Slow(delay=0.05)
    await server.start()
    rt = HttpRuntime(allow_private_targets=True, max_connections=cap)
    try:
        job = HttpJob(f"http://127.0.0.1:{server.port}/hook", method="POST", runtime=rt)
        results = await asyncio.gather(*[job(ctx(f"job-{k}")) for k in range(runs)])
    finally:
        await rt.aclose()
        await server.close()
    assert all(r["ok"] and r["status"] == 200 for r in results)
    assert server.served == runs
    assert 1 <= server.most <= cap


async def test_requests_below_the_cap_do_not_wait_for_each_other() -> None:
    """100 connections shared by the pools: 20 slow requests at once are served
    together (round-robin over pools of 12-13: none is full), not in turns."""
    server = Slow(delay=0.3)
    await server.start()
    rt = HttpRuntime(allow_private_targets=True)
    try:
        job = HttpJob(f"http://127.0.0.1:{server.port}/hook", method="POST", runtime=rt)
        await asyncio.gather(*[job(ctx(f"job-{k}")) for k in range(20)])
    finally:
        await rt.aclose()
        await server.close()
    assert server.served == 20
    assert server.most == 20


async def test_the_pools_share_one_tls_context() -> None:
    """Each TLS context loads the CA bundle (tens of milliseconds and ~1 MB each), made on
    the event loop at the first HTTP run: the runtime's pools share one, made as httpx
    makes its own (certificates verified)."""
    import ssl

    runtime = HttpRuntime(max_connections=POOLS * 2)
    try:
        runtime.client()
        contexts = {id(c._transport._pool._ssl_context) for c in runtime._clients}  # type: ignore[attr-defined]
        assert len(runtime._clients) == POOLS and len(contexts) == 1
        ctx = runtime._clients[0]._transport._pool._ssl_context  # type: ignore[attr-defined]
        assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname
    finally:
        await runtime.aclose()
