"""Fault tools shared by the chaos suite and the tests: a TCP proxy with faults, a private
PostgreSQL cluster, a SQLite write lock held by another process (and who holds it), a
corrupted SQLite file.

Nothing here touches the machine's shared PostgreSQL server: the cluster is created with
``initdb`` in a temporary directory on a free port, and is the only server restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy", "PgCluster", "TcpProxy", "backup_sqlite", "corrupt_sqlite", "free_port",
           "hold_write_lock", "restore_sqlite"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class FaultProxy:
    """A TCP proxy on its own thread in front of a server (PostgreSQL), with faults the
    caller switches on and off:

    - :meth:`cut`: every connection dropped (reset), new ones closed at once;
    - :meth:`stall`: nothing is forwarded any more, connections stay open (a hung server
      or pooler); new connections are accepted and hang too;
    - :meth:`set_latency`: each chunk a client sends waits that long before it is
      forwarded (one store call is one or a few chunks);
    - :meth:`set_fail_rate`: that share of new connections is closed at once, and each
      chunk a client sends kills its connection with that probability;
    - :meth:`cut_at_reply`: the server's next answer is not forwarded: every connection is
      dropped then, as by :meth:`cut` (the server ran the call, its client never learns
      the outcome);
    - :meth:`restore`: everything back to normal (stalled data flows again).
    """

    def __init__(self, target: str, *, seed: int | None = None) -> None:
        parts = urlsplit(target)
        self.target = target
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 5432
        self.cut_now = False
        self.latency = 0.0
        self.fail_rate = 0.0
        self.listen_port = 0
        self.counts = {"connections": 0, "refused": 0, "failed_calls": 0, "chunks": 0,
                       "replies_dropped": 0}
        self._cut_reply: threading.Event | None = None
        self._cut_match: bytes | None = None
        self._rng = random.Random(seed)
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._flowing: asyncio.Event | None = None

    @property
    def url(self) -> str:
        """The target URL with host and port replaced by the proxy's."""
        parts = urlsplit(self.target)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.listen_port}"))

    def __enter__(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
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
        assert self._flowing is not None
        self.counts["connections"] += 1
        if self.cut_now or (self.fail_rate and self._rng.random() < self.fail_rate):
            self.counts["refused"] += 1
            writer.transport.abort()
            return
        self._writers.add(writer)
        await self._flowing.wait()  # a stalled server accepts, then says nothing
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        flowing = self._flowing
        marked = [False]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(65536):
                    await flowing.wait()
                    if up:
                        self.counts["chunks"] += 1
                        if self._cut_match is not None and self._cut_match in data:
                            marked[0] = True  # the answer to this one is to be lost
                        if self.fail_rate and self._rng.random() < self.fail_rate:
                            self.counts["failed_calls"] += 1
                            break
                        if self.latency:
                            await asyncio.sleep(self.latency)
                            await flowing.wait()
                    elif self._cut_reply is not None and (
                        self._cut_match is None or marked[0]
                    ):  # the answer is lost, and the rest
                        hit, self._cut_reply = self._cut_reply, None
                        self.cut_now = True
                        self.counts["replies_dropped"] += 1
                        self._drop()
                        hit.set()
                        break
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.transport.abort()
                src_writer = writer if up else up_writer
                src_writer.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        self._writers.difference_update((writer, up_writer))

    def _drop(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def _call(self, fn: Any) -> None:
        """Run ``fn`` on the proxy's loop and wait for it."""
        assert self._loop is not None
        done = threading.Event()

        def go() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(go)
        done.wait(5)

    def cut(self) -> None:
        """Drop every connection; refuse new ones until :meth:`restore`."""
        self.cut_now = True
        self._call(self._drop)

    def cut_at_reply(self, match: bytes | None = None) -> threading.Event:
        """At the server's next answer (on any connection; with ``match``, on a connection
        that sent a request holding those bytes since), drop it and every connection, and
        refuse new ones until :meth:`restore`. Returns an event set when it happened."""
        hit = threading.Event()
        self._cut_match = match
        self._cut_reply = hit
        return hit

    def stall(self) -> None:
        """Stop forwarding anything, keeping every connection open, until :meth:`restore`."""
        assert self._flowing is not None
        self._call(self._flowing.clear)

    def set_latency(self, seconds: float) -> None:
        self.latency = seconds

    def set_fail_rate(self, rate: float) -> None:
        self.fail_rate = rate

    def restore(self) -> None:
        """End every fault: accept, forward, no latency, no failures."""
        self.cut_now = False
        self._cut_reply = self._cut_match = None
        self.latency = 0.0
        self.fail_rate = 0.0
        if self._flowing is not None:
            self._call(self._flowing.set)


TcpProxy = FaultProxy  # the name the store tests use


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found (looked in /usr/lib/postgresql/*/bin and PATH)")
    return path


class PgCluster:
    """A private PostgreSQL cluster: ``initdb`` into a temporary directory, its own port,
    trust authentication, started, stopped and restarted at will (fsync off: it is thrown
    away). Run as the ``postgres`` user when this process is root (initdb refuses root)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cronfleet-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str, timeout: float = 120) -> None:
        done = subprocess.run(
            [*self._as, *cmd], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    def init(self) -> PgCluster:
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
                "shared_buffers = 64MB\n"
            )
        return self

    def start(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast`` (disconnect clients, clean shutdown) or ``immediate`` (a crash)."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast", down: float = 0.0) -> None:
        self.stop(mode)
        time.sleep(down)
        self.start()

    def __enter__(self) -> PgCluster:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


_LOCKER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("LOCKED", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
print("RELEASED", flush=True)
"""


def hold_write_lock(db: str | Path, seconds: float) -> subprocess.Popen[str]:
    """Another process takes SQLite's write lock (``BEGIN IMMEDIATE``) on ``db`` and holds
    it ``seconds``; returns once the lock is held (wait on the process for its end)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(db), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("LOCKED"):
        proc.kill()
        raise RuntimeError(f"could not take the write lock of {db}: {line!r}")
    return proc


def backup_sqlite(db: str | Path, dest: str | Path) -> None:
    """An online backup of a database in use (SQLite's backup API, what
    ``sqlite3 DB ".backup DEST"`` does): a consistent copy whatever the writers do."""
    src = sqlite3.connect(db, timeout=30)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()


def restore_sqlite(backup: str | Path, db: str | Path) -> None:
    """The operator's restore, every process stopped: the backup copied over the damaged
    file, whose ``-wal`` and ``-shm`` files are removed (they belong to the damaged one)."""
    path = Path(db)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    shutil.copyfile(backup, path)


def corrupt_sqlite(db: str | Path, pages: int = 8, seed: int | None = None) -> list[int]:
    """Overwrite ``pages`` pages of the file's second half with random bytes, under
    whoever has it open (the header page is left alone, so the file still opens and the
    damage shows on the first read of a damaged page), after a passive WAL checkpoint.
    Returns the page numbers hit."""
    rng = random.Random(seed)
    path = Path(db)
    # in WAL mode the newest pages live in the -wal file: move them into the database
    # first (a passive checkpoint, as SQLite does by itself), so there is data to damage
    con = sqlite3.connect(path, timeout=30)
    try:
        con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        con.close()
    with open(path, "r+b") as f:
        header = f.read(100)
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        n = path.stat().st_size // page_size
        if n < 4:
            raise RuntimeError(f"{db} has {n} pages: too small to corrupt meaningfully")
        first = max(2, n // 2)
        hit = sorted(rng.sample(range(first, n + 1), min(pages, n - first + 1)))
        for page in hit:
            f.seek((page - 1) * page_size)
            f.write(rng.randbytes(page_size))
        f.flush()
        os.fsync(f.fileno())
    return hit


WAL_WRITE_LOCK = 120  # the byte of the -shm file a WAL-mode writer locks (SQLite's wal.c)


def holds_write_lock(db: Path, pid: int) -> bool:
    """Does process ``pid`` hold the SQLite write lock of ``db`` (WAL mode): an exclusive
    POSIX lock on byte 120 of ``db-shm``, as ``/proc/locks`` lists it?"""
    try:
        inode = os.stat(f"{db}-shm").st_ino
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        f = line.split()
        if "->" in f:  # a waiter, not a holder
            continue
        if (len(f) >= 8 and f[1] == "POSIX" and f[3] == "WRITE" and f[4] == str(pid)
                and f[5].rsplit(":", 1)[-1] == str(inode) and f[6] == str(WAL_WRITE_LOCK)):
            return True
    return False
