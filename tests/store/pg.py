"""Reaching the test PostgreSQL: ``CRONFLEET_TEST_PG``, fresh schemas, CI fails rather
than skips when the server is missing."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pg_url() -> str:
    return os.environ.get("CRONFLEET_TEST_PG", DEFAULT_URL)


@functools.cache
def _unreachable() -> str | None:
    try:
        with psycopg.connect(pg_url(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_url()} is unreachable ({exc}); set CRONFLEET_TEST_PG"
    return None


def require_pg() -> None:
    """Skip (laptop) or fail (``CI=true``) when the test database cannot be reached."""
    reason = _unreachable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def new_schema(prefix: str = "t") -> str:
    return f"cf_{prefix}_{uuid.uuid4().hex[:12]}"


def drop_schema(schema: str) -> None:
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class TcpProxy:
    """A small TCP proxy in front of PostgreSQL, run on its own thread, that tests can cut
    (every connection dropped, new ones closed at once) and restore."""

    def __init__(self, target: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        self.target = target
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 5432
        self.cut_now = False
        self.stall_now = False
        self._flowing: asyncio.Event | None = None
        self.listen_port = 0
        self._writers: set[Any] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        """The target URL with host and port replaced by the proxy's."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.target)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.listen_port}"))

    def __enter__(self) -> TcpProxy:
        self._thread = threading.Thread(target=self._run, name="pg-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._flowing = asyncio.Event()
        self._flowing.set()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.listen_port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stop.wait()
            self._drop()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_now:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    assert self._flowing is not None
                    await self._flowing.wait()  # stalled: hold the bytes, keep the connection
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))

    def _drop(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def cut(self) -> None:
        """Drop every connection; refuse new ones until :meth:`restore`."""
        self.cut_now = True
        assert self._loop is not None
        done = threading.Event()

        def go() -> None:
            self._drop()
            done.set()

        self._loop.call_soon_threadsafe(go)
        done.wait(5)

    def stall(self) -> None:
        """Stop forwarding bytes in both directions while keeping every connection open
        (new ones are accepted too): a hung server or pooler, no reset."""
        self.stall_now = True
        self._set_flowing(False)

    def _set_flowing(self, on: bool) -> None:
        assert self._loop is not None and self._flowing is not None
        flowing = self._flowing
        self._loop.call_soon_threadsafe(flowing.set if on else flowing.clear)

    def restore(self) -> None:
        self.cut_now = False
        if self.stall_now:
            self.stall_now = False
            self._set_flowing(True)
