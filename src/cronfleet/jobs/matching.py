"""``body_regex`` without freezing a process: Python's ``re`` in a worker process, with a
time limit.

A backtracking pattern such as ``(a+)+$`` takes exponential time on a body of ``a``\\ s, and
``re`` holds the GIL while it matches: run in the event loop -- or in a thread of this
process -- it stops every other job. So the match runs in a separate process (started once,
with ``spawn``, and kept), the event loop waits in a thread for the answer, and a match
that takes longer than the limit (default 1 s) has its worker killed: that run fails with
:class:`RegexTimeout`, a new worker is started for the next match, and the process goes on.

A linear-time engine (RE2 through ``google-re2``) was the other option: no worker and no
time limit, but it refuses back-references and look-arounds that valid ``body_regex``
values of earlier releases may use, and it matches with slightly different rules. The worker
keeps Python's semantics exactly; the body is matched on its first 1 MiB only
(``MAX_BODY`` of the HTTP job), which bounds the cost of every linear pattern.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Matcher", "RegexTimeout"]

_START_TIMEOUT = 60.0  # a worker's start on a loaded machine; not part of the match limit


class RegexTimeout(Exception):
    """A match took longer than its time limit (the worker was stopped)."""


def _serve(conn: Connection) -> None:  # pragma: no cover - runs in the worker process
    import re

    compiled: dict[str, re.Pattern[str]] = {}
    conn.send(("ready", None))
    while True:
        try:
            pattern, text = conn.recv()
        except (EOFError, OSError):
            return
        try:
            rx = compiled.get(pattern)
            if rx is None:
                if len(compiled) > 256:
                    compiled.clear()
                rx = compiled[pattern] = re.compile(pattern)
            conn.send(("ok", rx.search(text) is not None))
        except Exception as exc:  # a bad pattern: report it, keep serving
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Matcher:
    """``await search(pattern, text)``: ``re.search`` in a worker process, at most
    ``timeout`` seconds per match. One match at a time per matcher."""

    def __init__(self, timeout: float = 1.0) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None

    def __repr__(self) -> str:
        return f"Matcher(timeout={self.timeout:g})"

    async def search(self, pattern: str, text: str) -> bool:
        """Whether ``pattern`` matches somewhere in ``text``. Raises :class:`RegexTimeout`
        past the limit and ``ValueError`` for a pattern ``re`` refuses."""
        return await asyncio.to_thread(self._search, pattern, text)

    def _search(self, pattern: str, text: str) -> bool:
        with self._lock:
            conn = self._worker()
            conn.send((pattern, text))
            if not conn.poll(self.timeout):
                self._stop()
                raise RegexTimeout(f"matching took longer than {self.timeout:g}s (the pattern "
                                   "backtracks too much on this body)")
            try:
                kind, value = conn.recv()
            except (EOFError, OSError):
                self._stop()
                raise RegexTimeout("the matching worker stopped") from None
        if kind == "error":
            raise ValueError(value)
        return bool(value)

    def _worker(self) -> Connection:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            return self._conn
        self._stop()
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(theirs,), name="cronfleet-regex",
                           daemon=True)
        proc.start()
        theirs.close()
        if not ours.poll(_START_TIMEOUT):
            proc.kill()
            raise RegexTimeout("the matching worker did not start")
        ours.recv()  # "ready"
        self._proc, self._conn = proc, ours
        return ours

    def _stop(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._stop()
