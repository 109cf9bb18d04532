"""The fleet, the accounting of every slot and the scenarios of the chaos suite.

A scenario starts real worker processes (``bench/chaos/worker.py``) on a real store, lets
them settle, injects its fault, lets them run on, stops them gracefully and then accounts
for every ``(job, slot)`` of the window the fleet was meant to cover:

- **ran exactly once**: the handlers recorded exactly one run of it (handler side);
- **recorded**: no handler run, and the ledger has a row saying why (``skipped`` with its
  reason, ``interrupted``, ``failed``, ``timed_out``);
- **silent gap**: no handler run and no ledger row saying why;
- **duplicates**: handler side, runs beyond the first; ledger side, run outcomes
  (succeeded / failed / timed_out) beyond the first; slots with two terminal rows are
  counted apart (``two_final``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.chaos.faults import (
    FaultProxy,
    PgCluster,
    backup_sqlite,
    corrupt_sqlite,
    hold_write_lock,
    holds_write_lock,
    restore_sqlite,
)
from cronfleet.spec import DEFAULT_INSTANCE_TTL

ROOT = Path(__file__).resolve().parents[2]
SRC_ENV = "CRONFLEET_BENCH_SRC"
# the code the workers run: this checkout's src, or a peer's (CRONFLEET_BENCH_SRC), first
# on their PYTHONPATH -- without it they imported whatever the virtualenv's editable
# install points at, another checkout's src when the suite runs from a clean clone
SRC = Path(os.environ.get(SRC_ENV) or ROOT / "src").resolve()
WORKER = "bench.chaos.worker"
OFFSET_ENV = "CRONFLEET_CHAOS_CLOCK_OFFSET"
OUTCOMES = {"succeeded", "failed", "timed_out"}
REASONED = {"skipped", "interrupted", "failed", "timed_out"}
TERMINAL = {"succeeded", "failed", "timed_out", "skipped", "interrupted"}

# -- knobs -------------------------------------------------------------------------------


@dataclass
class Knobs:
    """Every duration of the suite, in seconds (``--knob name=value``, ``--scale``)."""

    processes: int = 3
    jobs: int = 50
    every: int = 1  # seconds between the slots of a job
    sleep: float = 0.4  # handler duration
    warm: float = 8.0  # after every process is ready, before the fault
    after: float = 30.0  # after the fault ends, before the fleet is stopped
    instance_ttl: float = DEFAULT_INSTANCE_TTL  # SIGSTOP lasts 3x this (15 s before #26)
    cut_short: float = 5.0
    cut_long: float = 60.0
    cut_replies: int = 8  # cut_reply: answers dropped (each followed by a cut of cut_short)
    latency: float = 0.2
    latency_for: float = 30.0
    restart_down: float = 3.0
    skew: float = 5.0
    skew_for: float = 30.0
    flaky_rate: float = 0.2
    flaky_for: float = 60.0
    lock_for: float = 10.0
    down: float = 180.0
    idle_tx_for: float = 45.0
    hang: float = 45.0
    corrupt_for: float = 20.0  # the damaged file in use, before the operator restores it
    jitter: str = "0.9,1.5"  # stop_jitter: the jobs' jitter delays, given in turn
    stops: int = 7  # stop_jitter: processes stopped (SIGTERM / SIGINT) and started again
    writer_frozen_for: float = 45.0  # writer_frozen: SIGSTOP while holding the write lock
    next_start: float = 20.0  # writer_frozen: the fleet started again after its stop, so long
    start_down: float = 20.0  # start_down: the store unreachable while the fleet starts
    rolling_gap: float = 3.0  # rolling: after a restarted process is ready, before the next
    starve_for: float = 60.0  # starve: CPU hogs (one per core) beside the fleet, so long
    handover_target: float = 1.0  # join / leave / rolling: a slot's start after its time
    failover_target: float = 2.0  # #26: a struck process's jobs run again within 2 s
    blocked_target: int = 2  # #26: already_executing rows per struck job after the strike
    recovery_target: float = 2.0
    stop_timeout: float = 60.0

    SCALED = (
        "warm", "after", "instance_ttl", "cut_short", "cut_long", "latency_for",
        "restart_down", "skew_for", "flaky_for", "lock_for", "down", "idle_tx_for", "hang",
        "corrupt_for", "writer_frozen_for", "next_start", "start_down", "rolling_gap",
        "starve_for",
    )

    def scaled(self, factor: float) -> Knobs:
        return dataclasses.replace(
            self, **{k: getattr(self, k) * factor for k in self.SCALED}
        )

    def set(self, text: str) -> None:
        name, _, value = text.partition("=")
        if not hasattr(self, name) or name == "SCALED":
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise SystemExit(f"--knob {text!r}: no knob {name!r} (known: {known})")
        kind = type(getattr(self, name))
        try:
            setattr(self, name, kind(float(value)) if kind is int else kind(value))
        except ValueError:
            raise SystemExit(f"--knob {text!r}: {value!r} is not a {kind.__name__}") from None


# -- stores ------------------------------------------------------------------------------


@dataclass
class Target:
    """One scenario's store: the URL the workers use (maybe through a proxy), the direct
    one the harness reads with, and the directory of records and logs."""

    store: str
    url: str
    direct: str
    workdir: Path
    schema: str | None = None
    db: Path | None = None
    base: str = ""  # PostgreSQL server URL without the schema; Redis: without the prefix
    prefix: str | None = None  # Redis: the deployment's key prefix

    def via(self, proxy: FaultProxy) -> str:
        if self.prefix is not None:
            return f"{proxy.url}?prefix={self.prefix}"
        assert self.schema is not None
        return with_schema(proxy.url, self.schema)


LedgerRow = tuple[str, int, str, str | None, str | None, Any]
"""``(job, slot ms, status, reason, instance, result)`` of one run row."""


def with_schema(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


class Postgres:
    name = "postgres"

    def __init__(self, base_url: str | None = None) -> None:
        self.external = base_url
        self.cluster: PgCluster | None = None

    @property
    def base(self) -> str:
        if self.external:
            return self.external
        if self.cluster is None:
            self.cluster = PgCluster()
            self.cluster.init()
            self.cluster.start()
        return self.cluster.url

    def new(self, scenario: str, root: Path) -> Target:
        schema = f"chaos_{scenario}_{uuid.uuid4().hex[:8]}"
        workdir = root / f"{self.name}-{scenario}"
        workdir.mkdir(parents=True, exist_ok=True)
        url = with_schema(self.base, schema)
        return Target(self.name, url, url, workdir, schema=schema, base=self.base)

    def _query(self, t: Target, text: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg
        from psycopg import sql

        with psycopg.connect(t.base, connect_timeout=10, autocommit=True) as conn:
            q = sql.SQL(text).format(s=sql.Identifier(t.schema or ""))
            return conn.execute(q, args or None).fetchall()

    def ledger(self, t: Target) -> list[LedgerRow]:
        return [
            (j, int(s), st, r, i, res)
            for j, s, st, r, i, res in self._query(
                t,
                "SELECT job_id, (extract(epoch FROM slot) * 1000)::bigint, status, reason, "
                "instance_id, result FROM {s}.runs WHERE slot IS NOT NULL ORDER BY id",
            )
        ]

    def leases(self, t: Target) -> Counter[str]:
        try:
            rows = self._query(
                t,
                "SELECT lease_holder, count(*) FROM {s}.job_state WHERE lease_holder IS NOT "
                "NULL AND lease_until > now() GROUP BY lease_holder",
            )
        except Exception:
            return Counter()
        return Counter({h: int(n) for h, n in rows})

    def idle_in_transaction(self, t: Target, ports: set[int]) -> list[int]:
        """Server pids of sessions from these client ports that are idle in a transaction."""
        if not ports:
            return []
        rows = self._query(
            t,
            "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' "
            "AND client_port = ANY(%s)",
            list(ports),
        )
        return [r[0] for r in rows]

    def drop(self, t: Target) -> None:
        with contextlib.suppress(Exception):
            self._query(t, "DROP SCHEMA IF EXISTS {s} CASCADE")

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()
            self.cluster = None


class Sqlite:
    name = "sqlite"

    def new(self, scenario: str, root: Path) -> Target:
        workdir = root / f"{self.name}-{scenario}"
        workdir.mkdir(parents=True, exist_ok=True)
        db = workdir / "cronfleet.db"
        return Target(self.name, f"sqlite:///{db}", f"sqlite:///{db}", workdir, db=db)

    def _connect(self, t: Target) -> sqlite3.Connection:
        assert t.db is not None
        return sqlite3.connect(f"file:{t.db}?mode=ro", uri=True, timeout=30)

    def ledger(self, t: Target) -> list[LedgerRow]:
        with contextlib.closing(self._connect(t)) as con:
            return [
                (j, int(s), st, r, i, json.loads(res) if res else None)
                for j, s, st, r, i, res in con.execute(
                    "SELECT job_id, slot, status, reason, instance_id, result FROM runs "
                    "WHERE slot IS NOT NULL ORDER BY id"
                )
            ]

    def leases(self, t: Target) -> Counter[str]:
        try:
            with contextlib.closing(self._connect(t)) as con:
                rows = con.execute(
                    "SELECT lease_holder, count(*) FROM job_state WHERE lease_holder IS NOT "
                    "NULL AND lease_until > ? GROUP BY lease_holder",
                    (int(time.time() * 1000),),
                ).fetchall()
        except sqlite3.Error:
            return Counter()
        return Counter({h: int(n) for h, n in rows})

    def drop(self, t: Target) -> None:
        pass

    def close(self) -> None:
        pass


class Redis:
    """A private ``redis-server`` (AOF, ``appendfsync always``: the setting
    docs/deployment.md recommends) on a free port; each scenario its own key prefix.
    ``restart`` kills it (SIGKILL) and starts it again on the same port and directory."""

    name = "redis"

    def __init__(self) -> None:
        import shutil
        import socket

        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="cf-chaos-redis-"))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.proc: subprocess.Popen[bytes] | None = None
        self._start()

    @property
    def base(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _start(self) -> None:
        import socket

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.dir), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--logfile", str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(400):
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.5
            ) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def restart(self, down: float) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        time.sleep(down)
        self._start()

    def new(self, scenario: str, root: Path) -> Target:
        prefix = f"chaos_{scenario}_{uuid.uuid4().hex[:8]}:"
        workdir = root / f"{self.name}-{scenario}"
        workdir.mkdir(parents=True, exist_ok=True)
        url = f"{self.base}?prefix={prefix}"
        return Target(self.name, url, url, workdir, base=self.base, prefix=prefix)

    def _client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def ledger(self, t: Target) -> list[LedgerRow]:
        import asyncio

        from cronfleet.store.redis import RedisStore

        async def read() -> list[LedgerRow]:
            store = RedisStore(t.direct)
            await store.open()
            try:
                out: list[LedgerRow] = []
                before = None
                while page := await store.list_runs(limit=5000, before_id=before):
                    out += [
                        (r.job_id, round(r.slot.timestamp() * 1000), r.status.value, r.reason,
                         r.instance_id, r.result)
                        for r in page
                    ]  # fmt: skip
                    before = page[-1].id
                return out[::-1]  # oldest first, as the SQL backends read it
            finally:
                await store.close()

        return asyncio.run(read())

    def lease_map(self, t: Target) -> dict[str, str]:
        assert t.prefix is not None
        with contextlib.closing(self._client()) as c:
            sec, usec = c.time()
            now = sec * 1000 + usec // 1000
            jobs = sorted(x.decode() for x in c.smembers(t.prefix + "jobs"))
            pipe = c.pipeline(transaction=False)
            for j in jobs:
                pipe.hmget(f"{t.prefix}{{{j}}}:s", "h", "lu")
            out = {}
            for j, (h, lu) in zip(jobs, pipe.execute(), strict=True):
                if h is not None and lu is not None and int(lu) > now:
                    out[j] = h.decode()
            return out

    def leases(self, t: Target) -> Counter[str]:
        try:
            return Counter(self.lease_map(t).values())
        except Exception:
            return Counter()

    def drop(self, t: Target) -> None:
        with contextlib.suppress(Exception), contextlib.closing(self._client()) as c:
            for key in c.scan_iter(match=f"{t.prefix}*", count=1000):
                c.delete(key)

    def close(self) -> None:
        import shutil

        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


Backend = Postgres | Sqlite | Redis

# -- the fleet ---------------------------------------------------------------------------


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[str]
    record: Path
    log: Path
    instance: str = ""
    expect_exit: bool = False  # killed or stopped by the harness

    @property
    def pid(self) -> int:
        return self.proc.pid


class Fleet:
    """Worker processes on one store; their handler records and logs in ``workdir``."""

    def __init__(self, target: Target, knobs: Knobs, url: str | None = None) -> None:
        self.target = target
        self.knobs = knobs
        self.url = url or target.url
        self.workers: list[Worker] = []
        self.extra: list[str] = []  # the scenario's worker options (Scenario.args)

    def spawn(self, name: str, env: dict[str, str] | None = None) -> Worker:
        n = sum(1 for w in self.workers if w.name.split("#")[0] == name)
        label = f"{name}#{n}" if n else name
        record = self.target.workdir / f"{label}.runs"
        log = self.target.workdir / f"{label}.log"
        k = self.knobs
        proc = subprocess.Popen(
            [sys.executable, "-m", WORKER, "--store", self.url, "--record", str(record),
             "--jobs", str(k.jobs), "--every", f"{k.every}s", "--sleep", str(k.sleep),
             "--instance-ttl", f"{k.instance_ttl:g}s", *self.extra],
            cwd=ROOT,
            env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
                p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)},
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),  # noqa: SIM115 - the child owns it
            text=True,
        )
        w = Worker(label, proc, record, log)
        self.workers.append(w)
        return w

    def start(self, n: int, envs: list[dict[str, str]] | None = None) -> list[Worker]:
        ws = [self.spawn(f"p{i}", envs[i] if envs else None) for i in range(n)]
        self.wait_ready(ws)
        return ws

    def wait_ready(self, ws: list[Worker], timeout: float = 90) -> float:
        deadline = time.time() + timeout
        for w in ws:
            assert w.proc.stdout is not None
            while True:
                line = w.proc.stdout.readline()
                if line.startswith("READY"):
                    w.instance = line.split()[1]
                    break
                if not line and w.proc.poll() is not None:
                    raise RuntimeError(f"{w.name} exited with {w.proc.returncode}: {tail(w.log)}")
                if time.time() > deadline:
                    raise RuntimeError(f"{w.name} not ready after {timeout}s: {tail(w.log)}")
        return time.time()

    def by_instance(self, instance: str) -> Worker | None:
        return next((w for w in self.workers if w.instance == instance), None)

    def signal(self, w: Worker, sig: signal.Signals) -> None:
        if sig in (signal.SIGKILL, signal.SIGTERM):
            w.expect_exit = True
        os.kill(w.pid, sig)

    def unexpected_exits(self) -> list[str]:
        return [
            f"{w.name} (exit {w.proc.returncode})"
            for w in self.workers
            if not w.expect_exit and w.proc.poll() is not None
        ]

    def stop(self, ws: list[Worker] | None = None) -> list[str]:
        """SIGTERM (and SIGCONT, in case) every live worker, wait for them; the ones that
        did not end within ``stop_timeout`` are killed and named."""
        ws = [w for w in (ws or self.workers) if w.proc.poll() is None]
        for w in ws:
            w.expect_exit = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGCONT)
                os.kill(w.pid, signal.SIGTERM)
        hung = []
        deadline = time.time() + self.knobs.stop_timeout
        for w in ws:
            try:
                w.proc.communicate(timeout=max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                hung.append(w.name)
                w.proc.kill()
                w.proc.communicate()
        return hung

    def kill_all(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()

    def strike(self, backend: Backend) -> Worker:
        """The worst moment: 0.7 s into a second of the slot grid — after the next
        instant's slots were claimed ahead (``claim_ahead``, 0.5 s), before they start —
        the live worker holding the most live leases (those claims); failing that, the one
        that ran the most in the last second."""
        live = [w for w in self.workers if w.proc.poll() is None]
        every = self.knobs.every
        deadline = time.time() + 5 * every
        while time.time() < deadline:
            now = time.time()
            phase = every - 0.3 if every > 0.3 else 0.0
            time.sleep((phase - now % every) % every)
            leases = backend.leases(self.target)
            for holder, _ in leases.most_common():
                w = self.by_instance(holder)
                if w is not None and w in live:
                    return w
        recent = Counter(r.pid for r in read_runs(self.target.workdir) if r.t > time.time() - 1)
        return max(live, key=lambda w: recent.get(w.pid, 0))


def tail(path: Path, n: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-n:]
    return ""


# -- accounting --------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    job: str
    slot: int  # ms
    pid: int
    t: float  # when the handler started (epoch s)


def read_runs(workdir: Path) -> list[Run]:
    runs = []
    for f in sorted(workdir.glob("*.runs")):
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                runs.append(Run(parts[0], int(parts[1]), int(parts[2]), float(parts[3])))
    return runs


@dataclass
class Result:
    scenario: str
    store: str
    expected: int = 0
    once: int = 0
    recorded: dict[str, int] = field(default_factory=dict)
    gaps: int = 0
    dup_handler: int = 0
    dup_ledger: int = 0
    two_final: int = 0
    failover: float | None = None  # worst job's kill -> fires again (s); inf: never
    failover_jobs: list[float] = field(default_factory=list)  # every struck job's, sorted
    blocked: int | None = None  # most already_executing rows of one struck job after it
    recovery: float | None = None  # store back -> every job on time again (s); inf: never
    rejoined: bool | None = None
    handover: float | None = None  # join / leave / rolling: latest start of a slot (s)
    false_losses: int | None = None  # starve: instances declared lost (none died)
    exits: list[str] = field(default_factory=list)
    hung_at_stop: list[str] = field(default_factory=list)
    window: tuple[int, int] = (0, 0)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    @property
    def verdict(self) -> str:
        return "PASS" if not self.failures and self.error is None else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["verdict"] = self.verdict
        for k in ("failover", "recovery", "handover"):
            if d[k] is not None and math.isinf(d[k]):
                d[k] = "never"
        d["failover_jobs"] = [round(v, 3) if math.isfinite(v) else "never"
                              for v in self.failover_jobs]
        return d

    def line(self) -> str:
        def secs(v: float | None) -> str:
            return "-" if v is None else ("never" if math.isinf(v) else f"{v:.1f}s")

        rec = sum(self.recorded.values())
        why = ", ".join(f"{k} {n:,}" for k, n in sorted(self.recorded.items()))
        head = f"{self.store:<8} {self.scenario:<9}"
        if self.error:
            return f"{head} ERROR {self.error}"
        return (
            f"{head} expected {self.expected:>6,}  once {self.once:>6,}  "
            f"recorded {rec:>5,}{f' ({why})' if why else ''}  gaps {self.gaps:,}  "
            f"dup {self.dup_handler:,}/{self.dup_ledger:,}  two-final {self.two_final:,}  "
            f"failover {secs(self.failover)}  back {secs(self.recovery)}  "
            + (f"handover {secs(self.handover)}  " if self.handover is not None else "")
            + (f"lost {self.false_losses}  " if self.false_losses is not None else "")
            + (f"blocked {self.blocked}/job  " if self.blocked is not None else "")
            + f"{self.verdict}{' (' + '; '.join(self.failures) + ')' if self.failures else ''}"
        )


def account(
    result: Result,
    runs: list[Run],
    ledger: list[LedgerRow],
    jobs: list[str],
    lo: int,
    hi: int,
    every: int,
) -> None:
    """Fill ``result`` with the accounting of every (job, slot) in ``[lo, hi]`` seconds."""
    by_slot: dict[tuple[str, int], list[Run]] = defaultdict(list)
    for r in runs:
        by_slot[(r.job, r.slot)].append(r)
    rows: dict[tuple[str, int], list[tuple[str, str | None]]] = defaultdict(list)
    summaries: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for j, s, st, reason, _, res in ledger:
        rows[(j, s)].append((st, reason))
        if st == "skipped" and isinstance(res, dict) and res.get("first") and res.get("last"):
            # one row standing for many missed slots (store/ledger.py missed_summary)
            span = (iso_ms(res["first"]), iso_ms(res["last"]))
            summaries[j].append(span)
    recorded: Counter[str] = Counter()
    samples: dict[str, list[str]] = defaultdict(list)
    slots = [s * 1000 for s in range(lo, hi + 1) if s % every == 0]
    result.window = (lo, hi)
    for job in jobs:
        for slot in slots:
            key = (job, slot)
            n = len(by_slot.get(key, ()))
            got = rows.get(key, [])
            outcomes = [st for st, _ in got if st in OUTCOMES]
            result.dup_ledger += max(len(outcomes) - 1, 0)
            if sum(1 for st, _ in got if st in TERMINAL) > 1:
                result.two_final += 1
                if len(samples["two_final"]) < 5:
                    samples["two_final"].append(f"{job}@{slot // 1000}: {got}")
            result.expected += 1
            if n:
                result.once += n == 1
                result.dup_handler += n - 1
                if n > 1 and len(samples["dup"]) < 5:
                    samples["dup"].append(f"{job}@{slot // 1000}: {n} runs, ledger {got}")
                continue
            why = next((f"{st}/{r}" if r else st for st, r in got if st in REASONED), None)
            if why is None and any(a <= slot <= b for a, b in summaries.get(job, ())):
                why = "skipped/missed (in a summary row)"
            if why is None:
                result.gaps += 1
                if len(samples["gap"]) < 5:
                    samples["gap"].append(f"{job}@{slot // 1000}: ledger {got}")
            else:
                recorded[why] += 1
    result.recorded = dict(recorded)
    result.samples = dict(samples)


def iso_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def failover(runs: list[Run], jobs: set[str], victim_pid: int, at: float) -> list[float]:
    """Each of ``jobs``' time from ``at`` until another process ran it again (inf: never),
    sorted: the last is the worst job's."""
    first: dict[str, float] = {}
    for r in runs:
        if r.job in jobs and r.pid != victim_pid and r.t > at:
            first[r.job] = min(first.get(r.job, math.inf), r.t)
    return sorted(first.get(j, math.inf) - at for j in jobs)


def blocked(ledger: list[LedgerRow], jobs: set[str], at: float, hi: int) -> int:
    """The most ``skipped / already_executing`` rows of one of ``jobs`` for slots from
    ``at`` (the strike) to ``hi``: slots a struck process's run in flight kept from
    running on the survivors."""
    per_job: Counter[str] = Counter(
        j
        for j, slot, st, reason, _, _ in ledger
        if j in jobs and st == "skipped" and reason == "already_executing"
        and at <= slot / 1000 <= hi
    )
    return max(per_job.values(), default=0)


def recovery(runs: list[Run], jobs: list[str], back: float, hi: int, every: int) -> float:
    """Seconds from ``back`` (the store answers again) to the first slot from which every
    job's every slot up to ``hi`` started within 1 s of its time (inf: never)."""
    ontime: set[tuple[str, int]] = {(r.job, r.slot) for r in runs if r.t - r.slot / 1000 <= 1.0}
    start = math.floor(back)
    ok_from = None
    for s in range(hi, start - 1, -1):
        if s % every:
            continue
        if all((j, s * 1000) in ontime for j in jobs):
            ok_from = s
        else:
            break
    if ok_from is None:
        return math.inf
    return max(ok_from - back, 0.0)


# -- scenarios ---------------------------------------------------------------------------


@dataclass
class Ctx:
    backend: Backend
    target: Target
    knobs: Knobs
    result: Result
    events: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs(self) -> list[str]:
        return [f"job-{i:04d}" for i in range(self.knobs.jobs)]


Fault = Callable[[Ctx, Fleet], None]


def sleep_until(t: float) -> None:
    time.sleep(max(t - time.time(), 0))


def lost_jobs(ctx: Ctx, fleet: Fleet, victim: Worker, at: float) -> set[str]:
    """The jobs a struck worker held (live leases now, or runs in the last 2 s)."""
    held = {
        j
        for j, holder in lease_holders(ctx).items()
        if holder == victim.instance
    }
    recent = {r.job for r in read_runs(ctx.target.workdir) if r.pid == victim.pid and r.t > at - 2}
    return held | recent


def lease_holders(ctx: Ctx) -> dict[str, str]:
    t = ctx.target
    try:
        if isinstance(ctx.backend, Redis):
            return ctx.backend.lease_map(t)
        if isinstance(ctx.backend, Postgres):
            rows = ctx.backend._query(
                t,
                "SELECT job_id, lease_holder FROM {s}.job_state WHERE lease_holder IS NOT NULL "
                "AND lease_until > now()",
            )
        else:
            with contextlib.closing(ctx.backend._connect(t)) as con:
                rows = con.execute(
                    "SELECT job_id, lease_holder FROM job_state WHERE lease_holder IS NOT NULL "
                    "AND lease_until > ?",
                    (int(time.time() * 1000),),
                ).fetchall()
    except Exception:
        return {}
    return dict(rows)


def f_kill9(ctx: Ctx, fleet: Fleet) -> None:
    victim = fleet.strike(ctx.backend)
    at = time.time()
    fleet.signal(victim, signal.SIGKILL)
    ctx.events.update(kill=at, victim=victim, lost=lost_jobs(ctx, fleet, victim, at))


def f_sigstop(ctx: Ctx, fleet: Fleet) -> None:
    victim = fleet.strike(ctx.backend)
    at = time.time()
    fleet.signal(victim, signal.SIGSTOP)
    lost = lost_jobs(ctx, fleet, victim, at)
    time.sleep(3 * ctx.knobs.instance_ttl)
    fleet.signal(victim, signal.SIGCONT)
    ctx.events.update(kill=at, victim=victim, lost=lost, cont=time.time())


def proxied(ctx: Ctx, fleet: Fleet) -> FaultProxy:
    proxy: FaultProxy = ctx.events["proxy"]
    return proxy


def f_cut(seconds: str) -> Fault:
    def fault(ctx: Ctx, fleet: Fleet) -> None:
        proxy = proxied(ctx, fleet)
        proxy.cut()
        time.sleep(getattr(ctx.knobs, seconds))
        proxy.restore()
        ctx.events["back"] = time.time()

    return fault


def f_cut_reply(ctx: Ctx, fleet: Fleet) -> None:
    """``cut_replies`` times: the store's answer to the next claim call (the early claims
    of an instant) is dropped and every connection cut for ``cut_short`` seconds: the
    store ran that call, its process never learns the outcome."""
    proxy = proxied(ctx, fleet)
    # the answer to a claim: Redis's dispatch script carries the holder mark of its row
    # templates (PostgreSQL's statements are prepared, their text is not sent again: its
    # lost answers are `flaky`'s, and tests/store/test_postgres.py's)
    match = b"@@cronfleet:holder@@"
    rng = random.Random()
    hits = 0
    for _ in range(ctx.knobs.cut_replies):
        # just before the early claims of an instant (claim_ahead 0.5 s): those are won
        at = math.floor(time.time()) + 2 - 0.5 - rng.uniform(0.05, 0.3)
        time.sleep(max(at - time.time(), 0))
        if proxy.cut_at_reply(match).wait(5):
            hits += 1
        time.sleep(ctx.knobs.cut_short)
        proxy.restore()
        ctx.events["back"] = time.time()
        time.sleep(ctx.knobs.cut_short)
    ctx.result.notes.append(f"{hits} of {ctx.knobs.cut_replies} answers dropped")


def f_latency(ctx: Ctx, fleet: Fleet) -> None:
    proxy = proxied(ctx, fleet)
    proxy.set_latency(ctx.knobs.latency)
    time.sleep(ctx.knobs.latency_for)
    proxy.restore()
    ctx.events["back"] = time.time()


def f_flaky(ctx: Ctx, fleet: Fleet) -> None:
    proxy = proxied(ctx, fleet)
    proxy.set_fail_rate(ctx.knobs.flaky_rate)
    time.sleep(ctx.knobs.flaky_for)
    counts = dict(proxy.counts)
    proxy.restore()
    ctx.events["back"] = time.time()
    ctx.result.notes.append(f"proxy {counts}")


def f_hang(ctx: Ctx, fleet: Fleet) -> None:
    proxy = proxied(ctx, fleet)
    proxy.stall()
    time.sleep(ctx.knobs.hang)
    proxy.restore()
    ctx.events["back"] = time.time()


def f_restart(ctx: Ctx, fleet: Fleet) -> None:
    if isinstance(ctx.backend, Redis):  # SIGKILL: AOF (appendfsync always) keeps the data
        ctx.backend.restart(down=ctx.knobs.restart_down)
        ctx.events["back"] = time.time()
        return
    assert isinstance(ctx.backend, Postgres) and ctx.backend.cluster is not None
    ctx.backend.cluster.restart("fast", down=ctx.knobs.restart_down)
    ctx.events["back"] = time.time()


def f_skew(ctx: Ctx, fleet: Fleet) -> None:
    time.sleep(ctx.knobs.skew_for)


def f_lock(ctx: Ctx, fleet: Fleet) -> None:
    assert ctx.target.db is not None
    locker = hold_write_lock(ctx.target.db, ctx.knobs.lock_for)
    locker.wait(ctx.knobs.lock_for + 30)
    ctx.events["back"] = time.time()


def f_down(ctx: Ctx, fleet: Fleet) -> None:
    live = [w for w in fleet.workers if w.proc.poll() is None]
    hung = fleet.stop(live)
    if hung:
        ctx.result.hung_at_stop.extend(hung)
    time.sleep(ctx.knobs.down)
    fresh = [fleet.spawn(w.name.split("#")[0]) for w in live]
    fleet.wait_ready(fresh)
    ctx.events["back"] = time.time()


def f_idle_tx(ctx: Ctx, fleet: Fleet) -> None:
    """SIGSTOP a worker at a moment one of its sessions is idle in a transaction: watch
    ``pg_stat_activity`` closely, stop the owner of such a session (found by its client
    port), check the session is still idle in its transaction, else SIGCONT and go on."""
    import psutil
    import psycopg

    assert isinstance(ctx.backend, Postgres)
    server_port = urlsplit(ctx.target.base).port or 5432
    deadline = time.time() + 90
    seen = tries = 0
    owners: dict[int, Worker] = {}
    mapped_at = 0.0
    with psycopg.connect(ctx.target.base, autocommit=True) as conn:
        while time.time() < deadline:
            if time.time() - mapped_at > 0.5:
                owners = {}
                for w in fleet.workers:
                    if w.proc.poll() is not None:
                        continue
                    with contextlib.suppress(psutil.Error):
                        for c in psutil.Process(w.pid).net_connections(kind="tcp"):
                            if c.raddr and c.raddr.port == server_port:
                                owners[c.laddr.port] = w
                mapped_at = time.time()
            rows = conn.execute(
                "SELECT pid, client_port FROM pg_stat_activity "
                "WHERE state = 'idle in transaction' AND client_port = ANY(%s)",
                (list(owners),),
            ).fetchall()
            if not rows:
                continue
            seen += 1
            backend_pid, port = rows[0]
            w = owners[port]
            os.kill(w.pid, signal.SIGSTOP)
            tries += 1
            still = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s "
                "AND state = 'idle in transaction'",
                (backend_pid,),
            ).fetchone()
            if still:
                at = time.time()
                ctx.result.notes.append(
                    f"{w.name} stopped idle in a transaction ({tries} tries)"
                )
                lost = lost_jobs(ctx, fleet, w, at)
                time.sleep(ctx.knobs.idle_tx_for)
                os.kill(w.pid, signal.SIGCONT)
                ctx.events.update(kill=at, victim=w, lost=lost, cont=time.time())
                return
            os.kill(w.pid, signal.SIGCONT)
    raise RuntimeError(f"no worker caught idle in a transaction ({seen} seen, {tries} tries)")


def f_corrupt(ctx: Ctx, fleet: Fleet) -> None:
    """The operator's backup (SQLite's online backup), the file damaged under the running
    processes for ``corrupt_for`` (their due slots go to the fallback journal), then the
    documented recovery: stop every process, put the backup back, start them again (the
    journal is recorded on open, the catch-up handles the rest)."""
    assert ctx.target.db is not None
    db = Path(ctx.target.db)
    backup = db.with_name(db.name + ".backup")
    backup_sqlite(db, backup)
    pages = corrupt_sqlite(db, seed=7)
    ctx.result.notes.append(f"pages overwritten: {pages}")
    ctx.events["corrupted"] = time.time()
    time.sleep(ctx.knobs.corrupt_for)
    live = [w for w in fleet.workers if w.proc.poll() is None]
    hung = fleet.stop(live)
    if hung:
        ctx.result.hung_at_stop.extend(hung)
    journal = db.with_name(db.name + ".journal.jsonl")
    lines = len(journal.read_text().splitlines()) if journal.exists() else 0
    ctx.result.notes.append(f"fallback journal: {lines} lines")
    restore_sqlite(backup, db)
    fresh = [fleet.spawn(w.name.split("#")[0]) for w in live]
    fleet.wait_ready(fresh)
    ctx.events["back"] = time.time()


def f_stop_jitter(ctx: Ctx, fleet: Fleet) -> None:
    """``stops`` times: at a random moment (1-4 s apart; every job has a jitter delay, so
    claimed slots are always waiting out theirs), SIGTERM or SIGINT in turn to a random
    live worker, wait for its graceful stop, start it again."""
    k = ctx.knobs
    rng = random.Random(24)
    for i in range(k.stops):
        time.sleep(rng.uniform(1.0, 4.0))
        live = [w for w in fleet.workers if w.proc.poll() is None]
        w = rng.choice(live)
        w.expect_exit = True
        fleet.signal(w, signal.SIGTERM if i % 2 == 0 else signal.SIGINT)
        try:  # no second signal: a stopping process ends at once on one (default action)
            w.proc.communicate(timeout=k.stop_timeout)
        except subprocess.TimeoutExpired:
            ctx.result.hung_at_stop.append(w.name)
            w.proc.kill()
            w.proc.communicate()
        fleet.wait_ready([fleet.spawn(w.name.split("#")[0])])
    ctx.result.notes.append(f"{k.stops} processes stopped during jitter and restarted")


def f_writer_frozen(ctx: Ctx, fleet: Fleet) -> None:
    """SIGSTOP a worker at a moment it holds the write lock (a random worker stopped at a
    random moment, kept when ``/proc/locks`` shows it holding the WAL write lock, else
    SIGCONT and try again), ``writer_frozen_for`` seconds, then SIGCONT. Nobody else can
    write meanwhile: finished runs wait for their rows, leases expire."""
    assert ctx.target.db is not None
    db = Path(ctx.target.db)
    rng = random.Random(5)
    deadline = time.time() + 120
    tries = 0
    while time.time() < deadline:
        live = [w for w in fleet.workers if w.proc.poll() is None]
        w = rng.choice(live)
        tries += 1
        os.kill(w.pid, signal.SIGSTOP)
        time.sleep(0.01)
        if holds_write_lock(db, w.pid):
            at = time.time()
            ctx.result.notes.append(f"{w.name} frozen holding the write lock ({tries} tries)")
            time.sleep(ctx.knobs.writer_frozen_for)
            os.kill(w.pid, signal.SIGCONT)
            ctx.events.update(back=time.time(), frozen=at)
            return
        os.kill(w.pid, signal.SIGCONT)
        time.sleep(rng.uniform(0.0, 0.05))
    raise RuntimeError(f"no worker caught holding the write lock ({tries} tries)")


def stop_one(ctx: Ctx, fleet: Fleet, w: Worker) -> None:
    """SIGTERM ``w`` and wait for its graceful stop (a hang is named in the result)."""
    fleet.signal(w, signal.SIGTERM)
    try:
        w.proc.communicate(timeout=ctx.knobs.stop_timeout)
    except subprocess.TimeoutExpired:
        ctx.result.hung_at_stop.append(w.name)
        w.proc.kill()
        w.proc.communicate()


def f_join(ctx: Ctx, fleet: Fleet) -> None:
    """One more process starts under load: it takes its share of the jobs."""
    at = time.time()
    fleet.wait_ready([fleet.spawn(f"p{ctx.knobs.processes}")])
    ctx.events["handovers"] = [at]


def f_leave(ctx: Ctx, fleet: Fleet) -> None:
    """One process is stopped (SIGTERM) and not started again: the others take its share."""
    w = [w for w in fleet.workers if w.proc.poll() is None][-1]
    at = time.time()
    stop_one(ctx, fleet, w)
    ctx.events["handovers"] = [at]


def f_rolling(ctx: Ctx, fleet: Fleet) -> None:
    """Every process in turn: SIGTERM, wait for its stop, start it again, wait until it is
    ready, ``rolling_gap`` seconds (a rolling restart under load)."""
    ats = []
    for w in [w for w in fleet.workers if w.proc.poll() is None]:
        ats.append(time.time())
        stop_one(ctx, fleet, w)
        fleet.wait_ready([fleet.spawn(w.name.split("#")[0])])
        time.sleep(ctx.knobs.rolling_gap)
    ctx.events["handovers"] = ats


def f_starve(ctx: Ctx, fleet: Fleet) -> None:
    """One busy loop per core beside the fleet for ``starve_for`` seconds: every process's
    loop is starved, none may be declared lost (none died)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(ctx.knobs.starve_for)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    ctx.events["starved"] = True


def handover(runs: list[Run], jobs: list[str], ats: list[float], hi: int, every: int,
             span: float = 10.0) -> float:
    """The latest start (seconds after its time) of the slots of every job due within
    ``span`` seconds after each of ``ats`` (a process joined, left, or was restarted);
    ``inf`` when one of them did not run at all (recorded missed, or a gap)."""
    started: dict[tuple[str, int], float] = {}
    for r in runs:
        started[(r.job, r.slot)] = min(r.t, started.get((r.job, r.slot), math.inf))
    slots = {s for at in ats for s in range(math.ceil(at), math.floor(at + span) + 1)
             if s <= hi and s % every == 0}
    return max((started.get((j, s * 1000), math.inf) - s for j in jobs for s in slots),
               default=0.0)


def declared_lost(fleet: Fleet) -> int:
    """Instances declared lost, as the workers' logs say (``runtime/fleet.py``)."""
    return sum(w.log.read_text(errors="replace").count(") is lost: no heartbeat")
               for w in fleet.workers if w.log.exists())


def f_start_down(ctx: Ctx, fleet: Fleet) -> None:
    """Every process started while the store refuses connections: each must wait for it
    (not exit), then run once it answers."""
    proxy = proxied(ctx, fleet)
    proxy.cut()
    ws = [fleet.spawn(f"p{i}") for i in range(ctx.knobs.processes)]
    time.sleep(ctx.knobs.start_down)
    gone = [f"{w.name} (exit {w.proc.returncode}) while the store was unreachable"
            for w in ws if w.proc.poll() is not None]
    if gone:
        raise RuntimeError("; ".join(gone) + f": {tail(ws[0].log)}")
    proxy.restore()
    ctx.events["back"] = time.time()
    fleet.wait_ready(ws)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    fault: Fault
    stores: tuple[str, ...]
    proxy: bool = False
    private_pg: bool = False  # needs the private cluster (restarts it)
    args: Callable[[Knobs], list[str]] | None = None  # worker options (job settings)
    # rows owed at the stop may be found by the next start: the fleet is started again for
    # ``next_start`` seconds after its stop (the window still ends at the first stop)
    next_start: bool = False
    at_start: bool = False  # the fault starts the fleet itself (instead of warm + fault)


SCENARIOS = [
    Scenario("kill9", "kill -9 of 1 of 3, the one holding the current leases", f_kill9,
             ("postgres", "sqlite", "redis")),
    Scenario("sigstop", "SIGSTOP of that one for 3 x instance_ttl, then SIGCONT", f_sigstop,
             ("postgres", "sqlite", "redis")),
    Scenario("cut5", "every connection cut for 5 s", f_cut("cut_short"), ("postgres", "redis"),
             proxy=True),
    Scenario("cut60", "every connection cut for 60 s", f_cut("cut_long"), ("postgres", "redis"),
             proxy=True),
    Scenario("cut_reply", "the answer to a claim call dropped and every connection cut "
             "for 5 s, 8 times", f_cut_reply, ("redis",), proxy=True),
    Scenario("latency", "200 ms added to every store call", f_latency, ("postgres", "redis"),
             proxy=True),
    Scenario("restart", "the database server restarted", f_restart, ("postgres", "redis"),
             private_pg=True),
    Scenario("skew", "clocks skewed +5 s / -5 s / 0", f_skew, ("postgres", "sqlite", "redis")),
    Scenario("flaky", "20 % of store calls and connections failing for 60 s", f_flaky,
             ("postgres",), proxy=True),
    Scenario("lock", "another process holds the write lock 10 s", f_lock, ("sqlite",)),
    Scenario("down", "every process down 3 min, then restarted", f_down,
             ("postgres", "sqlite")),
    Scenario("idle_tx", "a process stopped 45 s while idle in a transaction", f_idle_tx,
             ("postgres",)),
    Scenario("hang", "the store stops answering 45 s, connections kept open", f_hang,
             ("postgres", "redis"), proxy=True),
    Scenario("corrupt", "the SQLite file corrupted under running processes", f_corrupt,
             ("sqlite",)),
    Scenario("stop_jitter", "processes stopped (SIGTERM / SIGINT) while slots wait out "
             "their jitter, and started again", f_stop_jitter, ("postgres", "sqlite", "redis"),
             args=lambda k: ["--jitter", k.jitter]),
    Scenario("writer_frozen", "a process SIGSTOPped while it holds the write lock, then "
             "SIGCONT", f_writer_frozen, ("sqlite",),
             args=lambda k: ["--variants", "plain,recover,run_all"], next_start=True),
    Scenario("hang_prefer", "hang with the opt-in PREFER_GLOBAL: fail open, extra runs "
             "counted", f_hang, ("postgres", "redis"), proxy=True,
             args=lambda k: ["--locking", "prefer_global"]),
    Scenario("start_down", "every process started while the store is unreachable 20 s",
             f_start_down, ("postgres", "redis"), proxy=True, at_start=True),
    Scenario("join", "a 4th process started under load", f_join,
             ("postgres", "sqlite", "redis")),
    Scenario("leave", "1 of 3 processes stopped (SIGTERM), not started again", f_leave,
             ("postgres", "sqlite", "redis")),
    Scenario("rolling", "every process stopped (SIGTERM) and started again in turn",
             f_rolling, ("postgres", "sqlite", "redis")),
    Scenario("starve", "one busy loop per core beside the fleet for 60 s", f_starve,
             ("postgres", "sqlite", "redis")),
]
FAIL_OPEN = {"hang_prefer"}
"""Scenarios of the opt-in fail-open mode: runs beyond the first on the handler side are
its documented price, counted and reported (``dup`` handler), not a failure; the ledger
still keeps one final row per slot (the other outcomes as its late results)."""
BY_NAME = {s.name: s for s in SCENARIOS}


def run_scenario(sc: Scenario, backend: Backend, knobs: Knobs, root: Path) -> Result:
    """Run one scenario from start to accounting; never raises (errors are the result)."""
    result = Result(sc.name, backend.name)
    began = time.time()
    if sc.private_pg and isinstance(backend, Postgres) and backend.external:
        result.error = "needs the private cluster (run without --pg-url)"
        return result
    target = backend.new(sc.name, root)
    ctx = Ctx(backend, target, knobs, result)
    fleet: Fleet | None = None
    with contextlib.ExitStack() as stack:
        try:
            url = target.url
            if sc.proxy:
                proxy = stack.enter_context(FaultProxy(target.base, seed=1))
                ctx.events["proxy"] = proxy
                url = target.via(proxy)
            fleet = Fleet(target, knobs, url)
            if sc.args is not None:
                fleet.extra = sc.args(knobs)
            envs = None
            if sc.name == "skew":
                offsets = [knobs.skew, -knobs.skew] + [0.0] * (knobs.processes - 2)
                envs = [{OFFSET_ENV: str(o)} for o in offsets]
            if sc.at_start:
                sc.fault(ctx, fleet)
                ready = time.time()
                lo = math.ceil(ready) + 2
            else:
                fleet.start(knobs.processes, envs)
                ready = time.time()
                lo = math.ceil(ready) + 2
                sleep_until(ready + knobs.warm)
                sc.fault(ctx, fleet)
            time.sleep(knobs.after)
            result.exits = fleet.unexpected_exits()
            stopped_at = time.time()
            result.hung_at_stop += fleet.stop()
            if sc.next_start:
                fleet.start(knobs.processes)
                time.sleep(knobs.next_start)
                result.hung_at_stop += fleet.stop()
            hi = math.floor(stopped_at) - 2
            if sc.name == "skew":  # the process ahead fires every slot 5 s early
                hi = math.floor(stopped_at - knobs.skew) - 2
            runs = read_runs(target.workdir)
            try:
                ledger = backend.ledger(target)
            except Exception as exc:  # a corrupted file may not be readable at all
                ledger = []
                result.notes.append(f"ledger unreadable: {exc}")
            account(result, runs, ledger, ctx.jobs, lo, hi, knobs.every)
            if "starved" in ctx.events:
                result.false_losses = declared_lost(fleet)
            judge(ctx, runs, ledger, hi)
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if fleet is not None:
                fleet.kill_all()
            backend.drop(target)
    result.seconds = round(time.time() - began, 1)
    return result


def judge(ctx: Ctx, runs: list[Run], ledger: list[LedgerRow], hi: int) -> None:
    """Measure the scenario's own figures and compare everything with the targets."""
    r, k, ev = ctx.result, ctx.knobs, ctx.events
    if "victim" in ev:
        victim: Worker = ev["victim"]
        r.failover_jobs = failover(runs, ev["lost"], victim.pid, ev["kill"])
        r.failover = r.failover_jobs[-1] if r.failover_jobs else 0.0
        r.blocked = blocked(ledger, ev["lost"], ev["kill"], hi)
        r.notes.append(f"struck {victim.name} holding {len(ev['lost'])} jobs")
        if "cont" in ev:
            r.rejoined = any(rn.pid == victim.pid and rn.t > ev["cont"] + 3 for rn in runs)
            if victim.proc.returncode not in (None, 0) and victim.name not in r.hung_at_stop:
                r.exits.append(f"{victim.name} (exit {victim.proc.returncode})")
    if "back" in ev:
        r.recovery = recovery(runs, ctx.jobs, ev["back"], hi, k.every)
    if "handovers" in ev:
        r.handover = handover(runs, ctx.jobs, ev["handovers"], hi, k.every)
    check_targets(r, k)


def check_targets(r: Result, k: Knobs) -> None:
    """Compare a result's figures with the targets (docs/reliability.md): sets
    ``r.failures`` afresh, so saved results can be judged again (``--render``)."""
    r.failures = []
    if r.dup_handler and r.scenario not in FAIL_OPEN:
        r.failures.append(f"{r.dup_handler} duplicate runs")
    if r.dup_ledger:
        r.failures.append(f"{r.dup_ledger} duplicate outcomes in the ledger")
    if r.gaps:
        r.failures.append(f"{r.gaps} silent gaps")
    if r.two_final:
        r.failures.append(f"{r.two_final} slots with two final rows")
    if r.exits:
        r.failures.append(f"exited: {', '.join(r.exits)}")
    if r.hung_at_stop:
        r.failures.append(f"did not stop within {k.stop_timeout:.0f}s: {', '.join(r.hung_at_stop)}")
    if r.failover is not None and r.failover > k.failover_target:
        # kill -9, SIGSTOP, stopped inside a transaction: from the others' side the same
        # lost instance, whose jobs must move to the survivors
        r.failures.append(f"failover {fmt(r.failover)} > {k.failover_target:.0f}s")
    if r.blocked is not None and r.blocked > k.blocked_target:
        r.failures.append(f"{r.blocked} already_executing slots of one struck job "
                          f"> {k.blocked_target}")
    if r.rejoined is False:
        r.failures.append("the woken process did not run anything again")
    if r.handover is not None and r.handover > k.handover_target:
        r.failures.append(f"a slot started {fmt(r.handover)} after its time during a "
                          f"handover > {k.handover_target:g}s")
    if r.false_losses:
        r.failures.append(f"{r.false_losses} instances declared lost while none died")
    if (
        r.scenario in BACK_ON_TIME
        and r.recovery is not None
        and r.recovery > k.recovery_target
    ):
        r.failures.append(f"on time again {fmt(r.recovery)} after the store came back "
                          f"> {k.recovery_target:.0f}s")


BACK_ON_TIME = ("cut60", "restart", "hang", "latency", "down")
"""The scenarios whose ``back`` figure has a target (``recovery_target``, 2 s)."""


def fmt(v: float) -> str:
    return "never" if math.isinf(v) else f"{v:.1f}s"


@contextlib.contextmanager
def workspace(keep: str | None) -> Iterator[Path]:
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="cronfleet-chaos-") as d:
        yield Path(d)
