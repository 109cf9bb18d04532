"""``make chaos`` / ``python -m bench.chaos``: run the fault suite, one line per scenario.

    .venv/bin/python -m bench.chaos                         # everything (~35 min)
    .venv/bin/python -m bench.chaos --store sqlite --only kill9,lock
    .venv/bin/python -m bench.chaos --store redis           # a private redis-server, AOF
    .venv/bin/python -m bench.chaos --scale 0.3 --knob jobs=20   # shorter faults
    .venv/bin/python -m bench.chaos --json > chaos.json
    .venv/bin/python -m bench.chaos --only kill9,sigstop --repeat 4 --json > f.json
    .venv/bin/python -m bench.chaos --failover f.json      # p50 / p99 over every struck job
    CRONFLEET_BENCH_SRC=/tmp/peer/src .venv/bin/python -m bench.chaos --only kill9  # a peer

The worker processes run this checkout's ``src`` (``CRONFLEET_BENCH_SRC``: another
checkout's), put first on their ``PYTHONPATH``.

PostgreSQL scenarios run on a private cluster (``initdb`` in a temporary directory on a
free port, thrown away at the end); ``--pg-url`` uses another server instead (then the
restart scenario is not run). Exit status 1 when a scenario fails its targets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from bench.chaos.harness import (
    BY_NAME,
    ROOT,
    SCENARIOS,
    Backend,
    Knobs,
    Postgres,
    Redis,
    Result,
    Sqlite,
    check_targets,
    run_scenario,
    workspace,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=("postgres", "sqlite", "redis", "all"), default="all")
    p.add_argument("--only", default="", help="comma-separated scenario names")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every fault duration")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                   help="set one knob (jobs, sleep, after, cut_long, down, ...)")
    p.add_argument("--pg-url", default=None, help="use this PostgreSQL server, not a private one")
    p.add_argument("--keep", default=None, metavar="DIR", help="keep records and logs in DIR")
    p.add_argument("--render", nargs="+", metavar="JSON",
                   help="print the Markdown table of saved --json outputs (a later file's "
                   "result replaces an earlier one of the same store and scenario) and exit")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each selected scenario N times in a row (a distribution of "
                   "failover times, not one run's worst job)")
    p.add_argument("--failover", nargs="+", metavar="JSON",
                   help="print the failover distribution (p50, p99, worst over every struck "
                   "job of every run) of saved --json outputs and exit")
    a = p.parse_args(argv)

    if a.failover:
        print(failover_table(a.failover))
        return 0
    if a.render:
        print(render(a.render))
        return 0

    if a.list:
        for sc in SCENARIOS:
            print(f"{sc.name:<9} {'/'.join(sc.stores):<16} {sc.title}")
        return 0
    names = [n for n in a.only.split(",") if n] or [sc.name for sc in SCENARIOS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    knobs = Knobs().scaled(a.scale)
    for k in a.knob:
        knobs.set(k)
    stores = ("postgres", "sqlite", "redis") if a.store == "all" else (a.store,)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    header = (f"cronfleet chaos suite, commit {commit or '?'}, {time.strftime('%Y-%m-%d %H:%M')}"
              f", {platform.python_version()}, {knobs.processes} processes x {knobs.jobs} "
              f"jobs every {knobs.every}s, handlers {knobs.sleep}s, scale {a.scale}")
    out = sys.stderr if a.json else sys.stdout
    print(header, file=out, flush=True)
    results: list[Result] = []
    with workspace(a.keep) as root:
        for store in stores:
            backend: Backend = (
                Postgres(a.pg_url) if store == "postgres"
                else Redis() if store == "redis" else Sqlite()
            )  # fmt: skip
            try:
                for name in names:
                    sc = BY_NAME[name]
                    if store not in sc.stores:
                        continue
                    for k in range(max(1, a.repeat)):
                        # each repeat keeps its own records and logs (--keep)
                        where = root if a.repeat <= 1 else root / f"repeat-{k + 1}"
                        r = run_scenario(sc, backend, knobs, where)
                        results.append(r)
                        print(r.line(), file=out, flush=True)
            finally:
                backend.close()
    failed = [r for r in results if r.verdict != "PASS"]
    print(f"{len(results) - len(failed)} of {len(results)} scenarios pass", file=out)
    if a.json:
        print(json.dumps({"header": header, "knobs": knobs.__dict__,
                          "results": [r.to_dict() for r in results]}, indent=2))
    return 1 if failed else 0


def failover_table(paths: list[str]) -> str:
    """The failover distribution of saved ``--json`` outputs: for each store and scenario
    that strikes a process, over every struck job of every run (``--repeat``): the time
    until another process ran it again at p50, p99 and worst, and the most
    ``already_executing`` rows of one job."""
    times: dict[tuple[str, str], list[float]] = {}
    runs: Counter[tuple[str, str]] = Counter()
    most_blocked: dict[tuple[str, str], int] = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["results"]:
                if r.get("error") or not r.get("failover_jobs"):
                    continue
                key = (r["store"], r["scenario"])
                runs[key] += 1
                times.setdefault(key, []).extend(
                    math.inf if v == "never" else float(v) for v in r["failover_jobs"])
                most_blocked[key] = max(most_blocked.get(key, 0), r.get("blocked") or 0)

    def pct(xs: list[float], q: float) -> str:
        v = xs[min(len(xs) - 1, math.ceil(q * len(xs)) - 1)]
        return "never" if math.isinf(v) else f"{v:.2f} s"

    out = ["| store | scenario | runs | struck jobs | p50 | p99 | worst | blocked (most of one "
           "job) |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    for key in sorted(times):
        xs = sorted(times[key])
        out.append(f"| {key[0]} | {key[1]} | {runs[key]} | {len(xs)} | {pct(xs, 0.5)} | "
                   f"{pct(xs, 0.99)} | {pct(xs, 1.0)} | {most_blocked[key]} |")
    return "\n".join(out)


def rejudge(saved: dict[str, Any], knobs: Knobs) -> dict[str, Any]:
    """A saved result judged by today's targets."""
    fields = {f.name for f in dataclasses.fields(Result)}
    saved = {**saved, "failover_jobs": [
        math.inf if v == "never" else v for v in saved.get("failover_jobs", [])]}
    r = Result(**{k: v for k, v in saved.items() if k in fields})
    for k in ("failover", "recovery", "handover"):
        if getattr(r, k) == "never":
            setattr(r, k, math.inf)
    if r.error is None:
        check_targets(r, knobs)
    return r.to_dict()


def render(paths: list[str]) -> str:
    """The docs/reliability.md table of one or more saved ``--json`` outputs."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    headers = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        headers.append(data["header"])
        knobs = Knobs(**data["knobs"])
        for r in data["results"]:
            rows[(r["store"], r["scenario"])] = rejudge(r, knobs)
    order = {sc.name: i for i, sc in enumerate(SCENARIOS)}

    def secs(v: Any) -> str:
        return "–" if v is None else (v if isinstance(v, str) else f"{v:.1f} s")

    def failover(r: dict[str, Any]) -> str:
        if r.get("blocked") is None:
            return secs(r["failover"])
        return f"{secs(r['failover'])}, {r['blocked']} blocked"

    def handover(r: dict[str, Any]) -> str:
        if r.get("false_losses") is not None:
            return f"lost {r['false_losses']}"
        return secs(r.get("handover"))

    out = ["| store | scenario | expected | once | recorded (reason) | silent gaps | "
           "dup handler / ledger | two final | failover | back on time | handover / lost "
           "| verdict |",
           "|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|---|"]
    for (store, name), r in sorted(rows.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        if r.get("error"):
            out.append(f"| {store} | {name} | error: {r['error']} ||||||||||")
            continue
        rec = sum(r["recorded"].values())
        why = ", ".join(f"{k} {n:,}" for k, n in sorted(r["recorded"].items()))
        verdict = r["verdict"] + (": " + "; ".join(r["failures"]) if r["failures"] else "")
        out.append(
            f"| {store} | {name} | {r['expected']:,} | {r['once']:,} | {rec:,}"
            f"{f' ({why})' if why else ''} | {r['gaps']:,} | {r['dup_handler']:,} / "
            f"{r['dup_ledger']:,} | {r['two_final']:,} | {failover(r)} | "
            f"{secs(r['recovery'])} | {handover(r)} | {verdict} |"
        )
    return "\n".join(["Runs: " + " / ".join(headers), "", *out])


if __name__ == "__main__":
    sys.exit(main())
