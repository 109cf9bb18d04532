"""API worker processes (``cronfleet run --api-workers N``): the REST API served by child
processes of role ``api`` on the listening socket the parent bound, so that no request
can hold the scheduler's event loop or its interpreter lock.

Each worker is ``cronfleet run --role api`` on the same configuration and store: it reads
through views.py and changes through api/control.py like any API process of a fleet (a
change reaches the scheduler through the store: overrides at once where the store
notifies, at the next catalog look otherwise; a manual trigger runs in the worker). The
parent owns them: it starts them once its scheduler runs, stops them first at shutdown
(the HTTP side stops taking requests before the scheduler stops), and a worker that
exits on its own stops the parent (a supervisor then restarts the whole service).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys

log = logging.getLogger("cronfleet.api")

__all__ = ["WORKER_FD_OPTION", "WORKER_NICE", "Workers", "lower_priority"]

WORKER_FD_OPTION = "--api-fd"  # the hidden option that hands a worker the parent's socket
# a worker's CPU priority below the scheduler's: when both want a core, the kernel gives
# it to the scheduler (bench/serve_and_fire.py), and a busy API waits instead of the jobs
WORKER_NICE = 10
WATCH_EVERY = 0.5  # seconds between two looks at the workers (one that exits stops all)


def lower_priority() -> None:
    """In a worker: run at :data:`WORKER_NICE` below the parent (where the OS allows)."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(WORKER_NICE)


class Workers:
    """``n`` child processes ``argv + [--api-fd FD]`` serving on ``sock``."""

    def __init__(self, argv: list[str], sock: socket.socket, n: int) -> None:
        self.argv = argv
        self.sock = sock
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping = False
        self.failed = False  # a worker exited while the service ran

    def start(self) -> None:
        fd = self.sock.fileno()
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "cronfleet", *self.argv, WORKER_FD_OPTION, str(fd)],
                pass_fds=(fd,)))
        log.info("API served by %d worker process(es): %s", self.n,
                 ", ".join(str(p.pid) for p in self.procs))

    async def first_exit(self) -> int | None:
        """Wait until one worker exits; returns its exit code (None: there is none).
        It looks every :data:`WATCH_EVERY` seconds rather than blocking a thread per
        worker in the loop's default executor for the service's whole life (that pool
        also resolves the HTTP jobs' host names: a few workers would have filled it)."""
        if not self.procs:
            return None
        while True:
            codes = [c for c in (p.poll() for p in self.procs) if c is not None]
            if codes:
                break
            await asyncio.sleep(WATCH_EVERY)
        code = codes[0]
        if not self._stopping:
            self.failed = True
            log.error("an API worker process exited (code %s): stopping", code)
        return code

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM each worker (it finishes the requests it holds), SIGKILL after
        ``grace`` seconds."""
        if self._stopping:
            return
        self._stopping = True
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                await asyncio.to_thread(p.wait, grace)
            except subprocess.TimeoutExpired:
                log.warning("API worker %d did not stop in %.0f s: killed", p.pid, grace)
                p.kill()
                await asyncio.to_thread(p.wait)
