"""A real HTTP server on 127.0.0.1 (a thread running ``http.server``) whose answers the
test scripts, and an HTTP runtime whose sleeps are recorded instead of slept."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cronfleet.jobs.http import HttpRuntime


@dataclass
class Reply:
    status: int = 200
    body: bytes | str = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    echo: bool = False  # answer with the request's headers and body


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Server:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply()
        self.requests: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, self.path, dict(self.headers.items()), body)
                server.requests.append(seen)
                reply = server.replies.pop(0) if server.replies else server.default
                data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                if reply.echo:
                    data = (repr(seen.headers) + "\n").encode() + body
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.echo:
                    self.send_header("X-Echo-Auth", seen.headers.get("Authorization", ""))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def runtime(sleeps: Sleeps) -> Any:
    rt = HttpRuntime(allow_private_targets=True, sleep=sleeps)
    yield rt
    await rt.aclose()
