"""The probe listener in-process: routes, methods, a bad request, readiness going 503 when
the store does not answer, a taken port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cronfleet import Scheduler
from cronfleet.errors import CronfleetError
from cronfleet.health import ProbeServer


async def _request(port: int, raw: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_routes_methods_and_readiness(tmp_path: Path) -> None:
    s = Scheduler(f"sqlite:///{tmp_path / 'p.db'}")

    @s.job("1h", id="hourly")
    def hourly(ctx: object) -> None:
        pass

    async with s, ProbeServer(s, "127.0.0.1", 0) as probes:
        port = probes.port
        assert await _request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == (
            200, b'{"status": "ok"}')
        status, body = await _request(port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert status == 200 and b'"store": "ok"' in body
        status, body = await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 200 and b"cronfleet_" in body
        assert (await _request(port, b"GET /api/jobs HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await _request(port, b"POST /healthz HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await _request(port, b"nonsense\r\n\r\n"))[0] == 400
        status, body = await _request(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert status == 200 and body == b""

        async def down(*args: object, **kwargs: object) -> None:
            raise ConnectionError("store down")

        s.store.list_runs = down  # type: ignore[method-assign]
        status, body = await _request(port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert status == 503 and b"unreachable: ConnectionError: store down" in body


async def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    s = Scheduler(f"sqlite:///{tmp_path / 'p.db'}")
    async with ProbeServer(s, "127.0.0.1", 0) as first:
        with pytest.raises(CronfleetError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await ProbeServer(s, "127.0.0.1", first.port).start()


async def test_a_damaged_sqlite_file_is_not_ready(tmp_path: Path) -> None:
    """The store answers a small read, but a call found the file corrupted: not ready, and
    the check says what to do."""
    s = Scheduler(f"sqlite:///{tmp_path / 'p.db'}")
    async with s, ProbeServer(s, "127.0.0.1", 0) as probes:
        status, _ = await _request(probes.port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert status == 200
        s.store.damaged = True  # type: ignore[attr-defined]  # as StoreDamaged sets it
        status, body = await _request(probes.port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert status == 503 and b"damaged: stop every process and restore" in body


async def test_not_ready_while_the_catalog_loads(tmp_path: Path) -> None:
    """A process still reading the jobs created over the API plans none of them: its
    probe says so (503) until the catalog's first load is done."""
    from cronfleet.catalog import Catalog
    from cronfleet.store.factory import open_api_store

    s = Scheduler(f"sqlite:///{tmp_path / 'p.db'}")
    async with s:
        api = open_api_store(s.store)
        await api.create_job_def("stored", "default", {
            "id": "stored", "schedule": "1h", "http": {"url": "https://example.com/x"}}, "me")
        catalog = Catalog(s, api)
        gate = asyncio.Event()
        refresh = catalog.refresh

        async def slow() -> None:  # the first load takes a while
            await gate.wait()
            await refresh()

        catalog.refresh = slow  # type: ignore[method-assign]
        async with ProbeServer(s, "127.0.0.1", 0, catalog=catalog) as probes:
            loading = asyncio.ensure_future(catalog.start())
            status, body = await _request(probes.port, b"GET /readyz HTTP/1.1\r\n\r\n")
            assert status == 503
            assert b'"catalog": "loading the jobs created over the API"' in body
            gate.set()
            await loading
            status, body = await _request(probes.port, b"GET /readyz HTTP/1.1\r\n\r\n")
            assert status == 200 and b'"catalog": "ok"' in body
            assert "stored" in s.jobs
            await catalog.stop()
