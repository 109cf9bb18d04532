"""Scheduler runtime: firing lateness, completeness and idle cost, cronfleet vs APScheduler.

cronfleet runs as shipped (SQLite store in a temp dir, claims, leases and the run ledger
on); APScheduler 3.x runs in memory (AsyncIOScheduler + MemoryJobStore, see
bench/_apscheduler_peer.py). Each (workload, system) pair runs in a fresh interpreter,
one after the other, and reports JSON back to this process, which prints the table.

    .venv/bin/python bench/runtime.py                   # full run (~4 minutes)
    .venv/bin/python bench/runtime.py --quick           # 5 s windows, for smoke runs
    .venv/bin/python bench/runtime.py --only jobs1k burst20k --json out.json
    .venv/bin/python bench/runtime.py --rev HEAD --wait-quiet 300   # committed src/, quiet box
    .venv/bin/python bench/runtime.py --schedule cron     # the same workloads on cron
    .venv/bin/python bench/runtime.py --schedule mixed    # ... on many distinct expressions

``--schedule`` (cronfleet only; APScheduler keeps its interval triggers): ``interval``
(default: "1s" and whole-second intervals), ``cron`` (one shared 6-field expression per
workload: ``* * * * * *`` for the periodic ones, the instant's own second / minute / hour /
day / month for a burst or an idle slot) or ``mixed`` (distinct expressions with the same
fire times: syntax variants in 24 time zones, up to 432 different ones). Every kind fires
the same slots, so the figures compare directly.

Lateness = handler start (``time.time()`` as the handler's first statement) - nominal slot.
cronfleet's handler gets the slot as ``ctx.slot``; APScheduler's handler gets the run time
its scheduler computed (interval triggers on the same epoch grid, so slots are the same
instants). Measured window: slots in [W0, W0 + D) where W0 = floor(start-up done) + 2 s
(the first slot after start-up is a warm-up and not counted) and D the duration; every
job has exactly D slots in it. "fired" = distinct (job, slot) handler invocations in the
window / (jobs x D). Percentiles are nearest-rank over the invocations that happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--cronfleet-src" in sys.argv:  # children: benchmark this source tree instead
    sys.path.insert(0, sys.argv[sys.argv.index("--cronfleet-src") + 1])

MARK = "@@RESULT@@ "


# -- workloads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    kind: str  # "periodic" | "burst" | "idle"
    jobs: int
    duration: float  # periodic: window in slots (s); idle: CPU window (s)
    quick_duration: float
    target: str
    p50_max: float | None = None  # ms
    p99_max: float | None = None  # ms
    cpu_max: float | None = None  # % of one core
    rss_max: float | None = None  # MB
    apscheduler_reported: str = "-"


WORKLOADS = [
    Workload(
        "single",
        "1 job every 1 s",
        "periodic",
        1,
        30,
        5,
        "p50<=2ms p99<=5ms",
        p50_max=2.0,
        p99_max=5.0,
        apscheduler_reported="p50 2.2 / p99 2.6 ms",
    ),
    Workload(
        "jobs1k",
        "1,000 jobs every 1 s",
        "periodic",
        1_000,
        20,
        5,
        "100% p99<=20ms",
        p99_max=20.0,
        apscheduler_reported="p99 87 ms",
    ),
    Workload(
        "jobs5k",
        "5,000 jobs every 1 s",
        "periodic",
        5_000,
        20,
        5,
        "100% p99<=100ms",
        p99_max=100.0,
        apscheduler_reported="p99 513 ms",
    ),
    Workload(
        "burst20k",
        "20,000 jobs due at one instant",
        "burst",
        20_000,
        1,
        1,
        "100% p99<=500ms",
        p99_max=500.0,
    ),
    Workload(
        "idle10k",
        "10,000 idle jobs (next slot >1 h)",
        "idle",
        10_000,
        20,
        5,
        "CPU<=1% RSS<=150MB",
        cpu_max=1.0,
        rss_max=150.0,
    ),
]
BY_NAME = {w.name: w for w in WORKLOADS}
SYSTEMS = ["cronfleet", "apscheduler"]

BURST_LEAD = 6.0  # s from process start to the burst instant (20k jobs start up in <1.5 s)
IDLE_SETTLE = 3.0  # s after start-up before the idle CPU window opens
TAIL = 10.0  # s after the window we wait for late runs of slots inside it


# -- child side --------------------------------------------------------------------------


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def pct(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return sorted_ms[max(math.ceil(q * len(sorted_ms)) - 1, 0)]


class _Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.first) < 5:
            self.first.append(f"{record.name}: {record.getMessage()}"[:300])


def pick_period(now: float, earliest: float, latest: float) -> tuple[int, float]:
    """A period P (s, >=120) whose next epoch-grid slot after ``now`` is in [earliest,
    latest]: every job on it is due at that one instant and not again for P seconds."""
    for p in range(120, 5_000_000):
        t = (math.floor(now / p) + 1) * p
        if earliest <= t <= latest:
            return p, float(t)
    raise RuntimeError("no period puts a slot in the requested range")


def pick_idle_period(now: float, quiet_until: float) -> int:
    """Whole hours (``1h`` if possible) whose next slot is after ``quiet_until``."""
    for hours in range(1, 48):
        p = hours * 3600
        if (math.floor(now / p) + 1) * p > quiet_until:
            return p
    raise RuntimeError("no idle period")


def period_text(p: int) -> str:
    return f"{p // 3600}h" if p % 3600 == 0 else f"{p}s"


SCHEDULES = ["interval", "cron", "mixed"]


def _zones() -> list[str]:
    """Every region/city zone this machine knows (~400), in a stable order: distinct
    expressions for --schedule mixed (the same instants, different offsets and rules)."""
    from zoneinfo import available_timezones

    return sorted(z for z in available_timezones()
                  if "/" in z and not z.startswith(("Etc/", "SystemV/", "US/")))


_EVERY_SECOND = [
    f"{sec} {minute} {hour} * * *"
    for sec in ("*", "*/1", "0-59")
    for minute in ("*", "*/1", "0-59")
    for hour in ("*", "0-23")
]


def job_schedules(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(expression, time zone) of each job for ``spec["schedule"]``: intervals, one cron
    expression, or a mix of distinct cron expressions, all firing the same instants."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    n, kind, schedule = spec["jobs"], spec["kind"], spec.get("schedule", "interval")
    if schedule == "interval":
        return [(period_text(spec["period"]), "UTC")] * n
    if kind == "periodic":
        if schedule == "cron":
            return [("* * * * * *", "UTC")] * n
        zones = _zones()
        variants = [(_EVERY_SECOND[i % len(_EVERY_SECOND)], z) for i, z in enumerate(zones)]
        return [variants[i % len(variants)] for i in range(n)]
    at = spec["burst_at"] if kind == "burst" else spec["first_at"]

    from cronfleet.cron import parse

    def once_a_year(zone: str) -> str:  # the instant ``at`` as wall time in ``zone``
        t = datetime.fromtimestamp(at, ZoneInfo(zone))
        return f"{t.second} {t.minute} {t.hour} {t.day} {t.month} *"

    if schedule == "cron":
        return [(once_a_year("UTC"), "UTC")] * n
    before = datetime.fromtimestamp(at - 1, ZoneInfo("UTC"))
    exprs = [
        (e, z)
        for z in _zones()
        for e in [once_a_year(z)]
        if parse(e, tz=z).next(before).timestamp() == at  # a wall time DST leaves alone
    ]
    return [exprs[i % len(exprs)] for i in range(n)]


class Recorder:
    """What the handlers saw: (job_id, slot_s, started_s) per invocation."""

    def __init__(self) -> None:
        self.rec: list[tuple[str, float, float]] = []
        self._scanned = 0
        self._in_window: set[tuple[str, int]] = set()

    def count_in(self, lo_ms: int, hi_ms: int) -> int:
        """Distinct (job, slot) seen so far in [lo, hi) (incremental; call while waiting)."""
        rec = self.rec
        for i in range(self._scanned, len(rec)):
            job_id, slot, _ = rec[i]
            ms = round(slot * 1000)
            if lo_ms <= ms < hi_ms:
                self._in_window.add((job_id, ms))
        self._scanned = len(rec)
        return len(self._in_window)


async def _cronfleet(spec: dict[str, Any], r: Recorder, db: str) -> dict[str, Any]:
    from cronfleet import RunContext, Scheduler

    s = Scheduler(store=f"sqlite:///{db}", instance_id="bench")
    rec = r.rec

    async def handler(ctx: RunContext) -> None:
        t = time.time()
        rec.append((ctx.job_id, ctx.slot.timestamp(), t))

    for i, (expr, zone) in enumerate(job_schedules(spec)):
        s.job(expr, id=f"j-{i}", timezone=zone)(handler)
    t0 = time.time()
    await s.start()
    spec["setup_s"] = time.time() - t0
    try:
        return await _drive(spec, r)
    finally:
        await s.stop()
        spec["stats"] = {
            "fired": s.stats.fired,
            "skipped": s.stats.skipped,
            "claims_lost": s.stats.claims_lost,
            "store_errors": s.stats.store_errors,
            "outcomes": dict(s.stats.outcomes),
        }


async def _apscheduler(spec: dict[str, Any], r: Recorder) -> dict[str, Any]:
    from datetime import datetime

    from _apscheduler_peer import build_scheduler

    rec = r.rec

    async def handler(job_id: str, run_time: datetime | None = None) -> None:
        t = time.time()
        assert run_time is not None
        rec.append((job_id, run_time.timestamp(), t))

    t0 = time.time()
    sched = build_scheduler(spec["jobs"], spec["period"], handler)
    sched.start()
    await asyncio.sleep(0)
    spec["setup_s"] = time.time() - t0
    try:
        return await _drive(spec, r)
    finally:
        sched.shutdown(wait=False)
        await asyncio.sleep(0.05)


async def _sleep_until(t: float) -> None:
    await asyncio.sleep(max(t - time.time(), 0.0))


async def _drive(spec: dict[str, Any], r: Recorder) -> dict[str, Any]:
    """Runs while the scheduler runs: waits for the window, measures, waits for stragglers."""
    kind, n = spec["kind"], spec["jobs"]
    out: dict[str, Any] = {}
    if kind == "idle":
        await asyncio.sleep(spec["settle"])
        c0, t0 = cpu_seconds(), time.time()
        await asyncio.sleep(spec["duration"])
        c1, t1 = cpu_seconds(), time.time()
        out["cpu_pct"] = 100.0 * (c1 - c0) / (t1 - t0)
        out["cpu_window"] = [t0, t1]
        out["invocations"] = len(r.rec)
        return out
    if kind == "burst":
        w0 = spec["burst_at"]
        w1 = w0 + 1
        out["margin_s"] = w0 - time.time()  # start-up finished this long before the instant
    else:
        w0 = math.floor(time.time()) + 2
        w1 = w0 + int(spec["duration"])
    lo, hi = round(w0 * 1000), round(w1 * 1000)
    expected = n * (w1 - w0) if kind == "periodic" else n
    await _sleep_until(w0 - 0.5)
    c0, t0 = cpu_seconds(), time.time()
    if kind == "periodic":
        await _sleep_until(w1 - 0.5)
        c1, t1 = cpu_seconds(), time.time()
        out["cpu_pct"] = 100.0 * (c1 - c0) / (t1 - t0)
    deadline = w1 + TAIL if kind == "periodic" else w0 + 30.0
    for _ in range(max(math.ceil((deadline - time.time()) / 0.05), 0)):  # poll for stragglers
        if r.count_in(lo, hi) >= expected or time.time() >= deadline:
            break
        await asyncio.sleep(0.05)
    if kind == "burst":
        out["cpu_s"] = cpu_seconds() - c0
    out["window"] = [w0, w1]
    out["expected"] = expected
    return out


def _ledger_check(db: str, window: list[float], jobs: int) -> dict[str, Any]:
    """Every (job, slot) of the window: exactly one runs row, and it is 'succeeded'."""
    lo, hi = round(window[0] * 1000), round(window[1] * 1000)
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT job_id, slot, count(*), sum(status = 'succeeded') FROM runs "
            "WHERE slot >= ? AND slot < ? GROUP BY job_id, slot",
            (lo, hi),
        ).fetchall()
        dup_any = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM runs GROUP BY job_id, slot HAVING count(*) > 1)"
        ).fetchone()[0]
        claims = conn.execute(
            "SELECT count(*) FROM claims WHERE slot >= ? AND slot < ?", (lo, hi)
        ).fetchone()[0]
        statuses = dict(
            conn.execute(
                "SELECT status, count(*) FROM runs WHERE slot >= ? AND slot < ? GROUP BY 1",
                (lo, hi),
            ).fetchall()
        )
    finally:
        conn.close()
    slots = range(lo, hi, 1000) if hi - lo > 1000 else [lo]
    want = {(f"j-{i}", s) for i in range(jobs) for s in slots}
    got = {(j, s): (c, ok) for j, s, c, ok in rows}
    exactly_one_ok = sum(1 for k in want if got.get(k) == (1, 1))
    return {
        "expected": len(want),
        "exactly_one_succeeded": exactly_one_ok,
        "missing": sum(1 for k in want if k not in got),
        "duplicates_in_window": sum(1 for c, _ in got.values() if c > 1),
        "duplicates_anywhere": dup_any,
        "unexpected_rows": sum(1 for k in got if k not in want),
        "statuses": statuses,
        "claims_in_window": claims,
        "ok": exactly_one_ok == len(want) and len(got) == len(want),
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    counting = _Counting()
    logging.getLogger().addHandler(counting)
    import psutil  # noqa: F401  (imported before the baseline so it is not counted)

    if spec["system"] == "cronfleet":
        import cronfleet

        spec["cronfleet_path"] = str(Path(cronfleet.__file__).parent)
    else:
        import _apscheduler_peer  # noqa: F401
    rss_base = rss_mb()
    now = time.time()
    if spec["kind"] == "burst":
        spec["period"], spec["burst_at"] = pick_period(
            now, now + spec["lead"], now + spec["lead"] + 3
        )
    elif spec["kind"] == "idle":
        spec["period"] = p = pick_idle_period(
            now, now + 60 + spec["settle"] + spec["duration"] + 60
        )
        spec["first_at"] = float((math.floor(now / p) + 1) * p)
    else:
        spec["period"] = 1
    r = Recorder()
    tmp = tempfile.mkdtemp(prefix="cronfleet-bench-")
    db = os.path.join(tmp, "bench.db")
    try:
        if spec["system"] == "cronfleet":
            out = asyncio.run(_cronfleet(spec, r, db))
        else:
            out = asyncio.run(_apscheduler(spec, r))
        res: dict[str, Any] = {k: spec[k] for k in spec if k not in ("kind",)}
        res.update(out)
        res["rss_mb"] = rss_mb()
        res["rss_base_mb"] = rss_base
        res["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if spec["kind"] != "idle":
            lo, hi = round(out["window"][0] * 1000), round(out["window"][1] * 1000)
            seen: dict[tuple[str, int], int] = {}
            lat: list[float] = []
            for job_id, slot, started in r.rec:
                ms = round(slot * 1000)
                if lo <= ms < hi:
                    key = (job_id, ms)
                    seen[key] = seen.get(key, 0) + 1
                    lat.append((started - slot) * 1000.0)
            lat.sort()
            res.update(
                fired=len(seen),
                fired_pct=100.0 * len(seen) / out["expected"],
                dup_invocations=sum(c - 1 for c in seen.values()),
                p50_ms=pct(lat, 0.50),
                p99_ms=pct(lat, 0.99),
                max_ms=lat[-1] if lat else None,
                min_ms=lat[0] if lat else None,
            )
            if spec["system"] == "cronfleet":
                res["ledger"] = _ledger_check(db, out["window"], spec["jobs"])
        elif spec["system"] == "cronfleet":
            conn = sqlite3.connect(db)
            res["ledger_rows"] = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            conn.close()
        res["warnings"] = counting.count
        res["first_warnings"] = counting.first
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- parent side -------------------------------------------------------------------------


def wait_quiet(limit_s: float, max_cores: float = 0.3) -> float:
    """Wait (at most ``limit_s``) until other processes use under ``max_cores`` cores;
    returns the last measured background load."""
    import psutil

    deadline = time.time() + limit_s
    while True:
        load = psutil.cpu_percent(interval=1.0) / 100.0 * (os.cpu_count() or 1)
        if load < max_cores or time.time() >= deadline:
            return load
        print(f"    (machine busy: {load:.2f} cores used by other processes; waiting)", flush=True)


def spawn(
    w: Workload, system: str, quick: bool, src: str, schedule: str = "interval"
) -> dict[str, Any]:
    spec = {
        "workload": w.name,
        "system": system,
        "schedule": schedule if system == "cronfleet" else "interval",
        "kind": w.kind,
        "jobs": w.jobs,
        "duration": w.quick_duration if quick else w.duration,
        "lead": BURST_LEAD,
        "settle": IDLE_SETTLE,
    }
    t0 = time.time()
    busy0, kids0 = _busy_cpu(), _children_cpu()
    proc = subprocess.run(
        [sys.executable, __file__, "--cronfleet-src", src, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK) :])
            res["wall_s"] = wall = time.time() - t0
            # CPU that other processes used meanwhile (cores): noise from a shared machine
            res["background_cores"] = max(
                (_busy_cpu() - busy0 - (_children_cpu() - kids0)) / wall, 0.0
            )
            return res
    return {
        "workload": w.name,
        "system": system,
        "error": f"child exited {proc.returncode}: {proc.stderr.strip()[-2000:]}",
    }


def _busy_cpu() -> float:
    import psutil

    t = psutil.cpu_times()
    return float(
        sum(t)
        - t.idle
        - getattr(t, "iowait", 0.0)
        - getattr(t, "guest", 0.0)
        - getattr(t, "guest_nice", 0.0)
    )


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def verdict(w: Workload, r: dict[str, Any]) -> tuple[bool, list[str]]:
    why: list[str] = []
    if "error" in r:
        return False, ["crashed"]
    if w.kind == "idle":
        if r["cpu_pct"] > (w.cpu_max or 0):
            why.append(f"CPU {r['cpu_pct']:.2f}% > {w.cpu_max}%")
        if r["rss_mb"] > (w.rss_max or 0):
            why.append(f"RSS {r['rss_mb']:.0f} MB > {w.rss_max} MB")
        if r["invocations"]:
            why.append("a slot fell in the idle window")
        return not why, why
    if r["fired"] != r["expected"]:
        why.append(f"fired {r['fired_pct']:.2f}%")
    if r.get("dup_invocations"):
        why.append(f"{r['dup_invocations']} duplicate runs")
    if w.p50_max is not None and (r["p50_ms"] or 0) > w.p50_max:
        why.append(f"p50 {r['p50_ms']:.1f} > {w.p50_max:g} ms")
    if w.p99_max is not None and (r["p99_ms"] or 0) > w.p99_max:
        why.append(f"p99 {r['p99_ms']:.1f} > {w.p99_max:g} ms")
    if "ledger" in r and not r["ledger"]["ok"]:
        why.append("ledger check failed")
    if w.kind == "burst" and r.get("margin_s", 0) < 1.0:
        why.append(f"start-up ended only {r.get('margin_s', 0):.1f}s before the burst (invalid)")
    return not why, why


def _f(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def print_table(results: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    hdr = (
        f"{'workload':<34} {'system':<11} {'fired':>7} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'CPU %':>6} {'RSS MB':>7} {'bg':>5}  {'APS/cf':>7}  verdict"
    )
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for w in WORKLOADS:
        rows = {r["system"]: r for r in results if r["workload"] == w.name}
        if not rows:
            continue
        cf, aps = rows.get("cronfleet"), rows.get("apscheduler")
        ratio = "-"
        if cf and aps and "error" not in cf and "error" not in aps:
            if w.kind == "idle":
                ratio = f"{aps['rss_mb'] / cf['rss_mb']:.2f}x" if cf["rss_mb"] else "-"
            elif cf.get("p99_ms") and aps.get("p99_ms"):
                ratio = f"{aps['p99_ms'] / cf['p99_ms']:.2f}x"
        for system in SYSTEMS:
            r = rows.get(system)
            if r is None:
                continue
            label = w.title if system == "cronfleet" else ""
            if "error" in r:
                lines.append(f"{label:<34} {system:<11} ERROR {r['error'][:200]}")
                continue
            ok, why = verdict(w, r)
            if system == "cronfleet":
                v = ("PASS" if ok else "FAIL") + f" ({w.target})"
                v += "" if ok else ": " + "; ".join(why)
            else:
                v = ("meets" if ok else "misses") + " cronfleet's target"
                if w.apscheduler_reported != "-":
                    v += f"; issue author measured {w.apscheduler_reported}"
            fired = "-" if w.kind == "idle" else f"{r['fired_pct']:.1f}%"
            lines.append(
                f"{label:<34} {system:<11} {fired:>7} {_f(r.get('p50_ms'), 2):>8} "
                f"{_f(r.get('p99_ms'), 2):>8} {_f(r.get('max_ms'), 1):>8} "
                f"{_f(r.get('cpu_pct'), 2):>6} {_f(r.get('rss_mb'), 0):>7} "
                f"{_f(r.get('background_cores'), 2):>5}  "
                f"{ratio if system == 'cronfleet' else '':>7}  {v}"
            )
    lines.append(
        "APS/cf: APScheduler p99 / cronfleet p99 (idle: APScheduler RSS / cronfleet RSS); "
        ">1 means cronfleet is better. bg: cores other processes used during the run."
    )
    print("\n".join(lines))
    return lines


def details(results: list[dict[str, Any]]) -> None:
    for r in results:
        if "error" in r:
            continue
        bits = [f"{r['workload']}/{r['system']}: setup {r['setup_s']:.2f}s"]
        if "period" in r and r["period"] != 1:
            bits.append(f"period {period_text(r['period'])}")
        if "margin_s" in r:
            bits.append(f"burst at +{r['margin_s']:.1f}s after start-up, CPU {r['cpu_s']:.2f}s")
        if "window" in r:
            bits.append(
                f"window {r['window'][1] - r['window'][0]:.0f} s, "
                f"{r['fired']}/{r['expected']} (job, slot) fired, "
                f"{r['dup_invocations']} duplicates"
            )
        if "invocations" in r:
            bits.append(f"{r['invocations']} invocations in the idle window")
        bits.append(f"RSS base {r['rss_base_mb']:.0f} MB")
        bits.append(f"other processes used {r.get('background_cores', 0):.2f} cores meanwhile")
        if r.get("warnings"):
            bits.append(f"{r['warnings']} warnings, e.g. {r['first_warnings'][:1]}")
        print("  " + ", ".join(bits))
        if "ledger" in r:
            lg = r["ledger"]
            print(
                f"    ledger: {lg['exactly_one_succeeded']}/{lg['expected']} slots with exactly "
                f"one 'succeeded' row, missing {lg['missing']}, "
                f"duplicates {lg['duplicates_in_window']} "
                f"(anywhere: {lg['duplicates_anywhere']}), claims {lg['claims_in_window']}, "
                f"statuses {lg['statuses']} -> {'OK' if lg['ok'] else 'FAILED'}"
            )
        if "ledger_rows" in r:
            print(f"    ledger: {r['ledger_rows']} runs rows (expected 0)")
        if "stats" in r:
            print(f"    scheduler stats: {r['stats']}")


def machine(rev: str | None) -> dict[str, Any]:
    import apscheduler

    import cronfleet

    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", rev or "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        if rev:
            where = f"{head} (committed tree, --rev {rev})"
        else:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            where = f"working tree on {head}" + (" with uncommitted src/ changes" if dirty else "")
    except OSError:
        where = "?"
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": model,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "sqlite": sqlite3.sqlite_version,
        "cronfleet": cronfleet.__version__,
        "cronfleet_rev": where,
        "cronfleet_path": str(Path(cronfleet.__file__).parent),
        "apscheduler": apscheduler.__version__ if hasattr(apscheduler, "__version__") else "?",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 s windows (smoke run)")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=list(BY_NAME),
        metavar="NAME",
        help=f"workloads to run: {', '.join(BY_NAME)}",
    )
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS)
    ap.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="interval",
        help="cronfleet's job schedules: intervals (default), one shared cron expression, "
        "or a mix of distinct cron expressions (same fire times)",
    )
    ap.add_argument("--json", metavar="PATH", help="write every figure to this file")
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a cronfleet target is missed (default: only on a crash)",
    )
    ap.add_argument(
        "--rev",
        metavar="REV",
        help="benchmark cronfleet as committed at REV (git archive to a temp dir), "
        "not the working tree",
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for other processes to go idle "
        "(shared machines)",
    )
    ap.add_argument("--cronfleet-src", default=str(ROOT / "src"), help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        res = run_child(json.loads(args.child))
        print(MARK + json.dumps(res))
        return 0

    snapshot = None
    if args.rev:
        snapshot = tempfile.mkdtemp(prefix="cronfleet-rev-")
        archive = subprocess.run(
            ["git", "archive", "--format=tar", args.rev, "src"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", snapshot], input=archive, check=True)
        args.cronfleet_src = os.path.join(snapshot, "src")
        sys.path.insert(0, args.cronfleet_src)
    try:
        return _main(args)
    finally:
        if snapshot:
            shutil.rmtree(snapshot, ignore_errors=True)


def _main(args: argparse.Namespace) -> int:
    info = machine(args.rev)
    print(f"cronfleet scheduler runtime benchmark{' (quick)' if args.quick else ''}")
    print(f"  Python {info['python']} ({info['implementation']}) on {info['platform']}")
    print(
        f"  {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"SQLite {info['sqlite']}"
    )
    print(f"  cronfleet {info['cronfleet']}: {info['cronfleet_rev']}; SQLite store in a temp dir")
    print(f"  APScheduler {info['apscheduler']}: AsyncIOScheduler + MemoryJobStore, in memory")
    print(f"  cronfleet schedules: {args.schedule}")
    print(f"  load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    chosen = [BY_NAME[n] for n in args.only] if args.only else WORKLOADS
    results = []
    for w in chosen:
        for system in args.systems:
            print(f"... {w.name} / {system}", flush=True)
            if args.wait_quiet:
                wait_quiet(args.wait_quiet)
            results.append(spawn(w, system, args.quick, args.cronfleet_src, args.schedule))
    print()
    lines = print_table(results)
    print()
    details(results)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"machine": info, "quick": args.quick, "schedule": args.schedule,
                 "results": results, "table": lines},
                indent=2,
                default=str,
            )
        )
    if any("error" in r for r in results):
        return 2
    failed = [
        w.name
        for w in chosen
        for r in results
        if r["workload"] == w.name and r["system"] == "cronfleet" and not verdict(w, r)[0]
    ]
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
