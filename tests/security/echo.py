"""A target that answers with a secret in every form a server might echo it: raw,
JSON-escaped (\\uXXXX either case, \\/), HTML-escaped, percent-encoded (either case, + for
space), base64 -- and the request exactly as it arrived (line, headers, body)."""

from __future__ import annotations

import base64
import html
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus


def forms(value: str) -> list[str]:
    """Every encoding of ``value`` the suite searches for (and the target echoes)."""
    escaped = json.dumps(value)[1:-1]
    out = [
        value,
        escaped,
        json.dumps(value, ensure_ascii=False)[1:-1],
        escaped.replace("/", "\\/"),
        re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), escaped),
        html.escape(value),
        quote(value, safe=""),
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(value, safe="")),
        quote_plus(value, safe=""),
        quote(value),
        base64.b64encode(value.encode()).decode(),
        base64.urlsafe_b64encode(value.encode()).decode().rstrip("="),
    ]
    return list(dict.fromkeys(out))


class EchoServer:
    """``/v/<index>/...``: answers with every form of ``values[index]`` and the request."""

    def __init__(self, values: list[str]) -> None:
        self.values = values
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests += 1
                match = re.match(r"^/v/(\d+)/", self.path)
                value = server.values[int(match.group(1))] if match else ""
                parts = [*forms(value), self.requestline, repr(dict(self.headers.items())),
                         body.decode("utf-8", "replace")]
                data = "\n".join(parts).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Echo", quote(value, safe=""))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Target:
    """Records every request (path, headers, body); ``/redirect?to=URL`` answers 302 to
    URL, anything else 200 ``ok``."""

    def __init__(self, body: bytes = b"ok") -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.body = body
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                target.seen.append((self.path, dict(self.headers.items()), body))
                if self.path.startswith("/redirect?to="):
                    from urllib.parse import unquote

                    self.send_response(302)
                    self.send_header("Location", unquote(self.path.split("=", 1)[1]))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(target.body)))
                self.end_headers()
                self.wfile.write(target.body)

            do_GET = do_POST = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
