"""The request body limit: an ASGI middleware that answers 413 for a body larger than
``ApiSettings.max_request_body`` (1 MiB by default, ``[api] max_request_body``) before any
route reads it -- by its ``Content-Length`` at once, or while a chunked body streams in."""

from __future__ import annotations

import json
from typing import Any

from cronfleet.api.errors import PROBLEM_JSON, body

__all__ = ["BodyLimit"]

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyLimit:
    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"),
                        None)
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size > self.limit:
                await self._refuse(send, size)
                return
        # read the body here (at most the limit), then hand it to the app
        chunks: list[bytes] = []
        total = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.limit:
                await self._refuse(send, None)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
        await self.app(scope, _replay(replay, receive), send)

    async def _refuse(self, send: Any, size: int | None) -> None:
        got = f" ({size} bytes)" if size is not None and size >= 0 else ""
        payload = json.dumps(body("TOO_LARGE", f"body: the request body is larger than "
                                               f"{self.limit} bytes{got}",
                                  {"field": "body", "limit": self.limit}, 413)).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", PROBLEM_JSON.encode()),
                                (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})


def _replay(messages: list[Message], receive: Any) -> Any:
    pending = list(messages)

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        message: Message = await receive()  # after the body: http.disconnect at the end
        return message

    return again
