"""next() throughput of cronfleet.cron against croniter and cronsim, in the same run.

Every engine gets the same schedules (spelled the way each one accepts them), the same
time zones and the same start instant, and is asked for CHAIN successive fire times
(each call starts from the previous answer). An engine that cannot express a schedule
skips it, and the ratios are computed on the schedules both engines ran.

    .venv/bin/python bench/cron_next.py            # default: 3 rounds, best round kept
    .venv/bin/python bench/cron_next.py --chain 500 --rounds 5

"cold" is cronfleet's first round in a fresh process (empty per-zone and per-month
caches), "warm" its best round; the peers have no such caches, so their best round is used.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cronfleet.cron import parse


@dataclass(frozen=True)
class Case:
    name: str
    tz: str
    ours: str
    croniter: str | None  # None: croniter cannot express it
    cronsim: str | None


# (croniter puts a seconds field last; it spells "last Friday" L5 and has no LW)
CASES = [
    Case("every 5 min", "UTC", "*/5 * * * *", "*/5 * * * *", "*/5 * * * *"),
    Case("business hours NY", "America/New_York", "*/15 9-17 * * 1-5", "*/15 9-17 * * 1-5",
         "*/15 9-17 * * 1-5"),
    Case("02:30 daily Paris (DST)", "Europe/Paris", "30 2 * * *", "30 2 * * *", "30 2 * * *"),
    Case("hourly Lord Howe (30-min DST)", "Australia/Lord_Howe", "0 * * * *", "0 * * * *",
         "0 * * * *"),
    Case("every 2 h Sao Paulo", "America/Sao_Paulo", "0 */2 * * *", "0 */2 * * *",
         "0 */2 * * *"),
    Case("last day of month", "UTC", "0 0 L * *", "0 0 L * *", "0 0 L * *"),
    Case("last Friday 18:00 London", "Europe/London", "0 18 * * 5L", "0 18 * * L5",
         "0 18 * * 5L"),
    Case("3rd Friday", "Europe/Berlin", "0 9 * * FRI#3", "0 9 * * 5#3", "0 9 * * 5#3"),
    Case("weekdays 08:00", "Asia/Tokyo", "0 8 * * MON-FRI", "0 8 * * MON-FRI",
         "0 8 * * MON-FRI"),
    Case("every 10 s (6 fields)", "UTC", "*/10 * * * * *", "* * * * * */10", "*/10 * * * * *"),
    Case("day 1 and 15 or Monday", "UTC", "0 12 1,15 * MON", None, "0 12 1,15 * MON"),
    Case("last weekday", "UTC", "0 17 LW * *", None, "0 17 LW * *"),
]

START = datetime(2024, 1, 1, 0, 0, 7)


def _ours(case: Case, chain: int) -> Callable[[], None]:
    expr = parse(case.ours, case.tz)
    start = START.replace(tzinfo=ZoneInfo(case.tz))

    def run() -> None:
        t = start
        nxt = expr.next
        for _ in range(chain):
            t = nxt(t)

    return run


def _croniter(case: Case, chain: int) -> Callable[[], None] | None:
    if case.croniter is None:
        return None
    from croniter import croniter

    start = START.replace(tzinfo=ZoneInfo(case.tz))
    text = case.croniter

    def run() -> None:
        it = croniter(text, start)
        for _ in range(chain):
            it.get_next(datetime)

    return run


def _cronsim(case: Case, chain: int) -> Callable[[], None] | None:
    if case.cronsim is None:
        return None
    from cronsim import CronSim

    start = START.replace(tzinfo=ZoneInfo(case.tz))
    text = case.cronsim

    def run() -> None:
        it = CronSim(text, start)
        for _ in range(chain):
            next(it)

    return run


def _time(fn: Callable[[], None]) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--chain", type=int, default=1000, help="next() calls per schedule per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the best one is reported")
    args = ap.parse_args()
    chain, rounds = args.chain, args.rounds

    engines = {"cronfleet": _ours, "croniter": _croniter, "cronsim": _cronsim}
    # best[engine][case] = seconds
    best: dict[str, dict[str, float]] = {name: {} for name in engines}
    cold: dict[str, float] = {}
    for r in range(rounds):
        for case in CASES:
            for name, make in engines.items():
                fn = make(case, chain)
                if fn is None:
                    continue
                dt = _time(fn)
                if name == "cronfleet" and r == 0:
                    cold[case.name] = dt
                prev = best[name].get(case.name)
                best[name][case.name] = dt if prev is None else min(prev, dt)

    def rate(engine: str, names: list[str]) -> float:
        return chain * len(names) / sum(best[engine][n] for n in names)

    w = max(len(c.name) for c in CASES)
    print(f"next() calls per second, {chain} chained calls per schedule, best of {rounds} rounds")
    print(f"python {sys.version.split()[0]}\n")
    print(f"{'schedule':<{w}}  {'cronfleet':>10}  {'croniter':>10}  {'cronsim':>10}  "
          f"{'x croniter':>10}  {'x cronsim':>9}")
    for case in CASES:
        ours = chain / best["cronfleet"][case.name]
        row = f"{case.name:<{w}}  {ours:>10,.0f}"
        for peer in ("croniter", "cronsim"):
            t = best[peer].get(case.name)
            row += f"  {chain / t:>10,.0f}" if t else f"  {'n/a':>10}"
        for peer, width in (("croniter", 10), ("cronsim", 9)):
            t = best[peer].get(case.name)
            row += f"  {t / best['cronfleet'][case.name]:>{width}.1f}" if t else f"  {'':>{width}}"
        print(row)

    all_names = [c.name for c in CASES]
    print()
    print(f"{'mix':<{w}}  {'cronfleet':>10}  {'peer':>10}  {'ratio':>6}")
    for peer in ("croniter", "cronsim"):
        names = [c.name for c in CASES if c.name in best[peer]]
        ours, theirs = rate("cronfleet", names), rate(peer, names)
        label = f"vs {peer} ({len(names)} schedules)"
        print(f"{label:<{w}}  {ours:>10,.0f}  {theirs:>10,.0f}  {ours / theirs:>5.1f}x")
    cold_rate = chain * len(all_names) / sum(cold.values())
    warm_rate = rate("cronfleet", all_names)
    print(f"\ncronfleet, all {len(all_names)} schedules: warm {warm_rate:,.0f}/s, "
          f"cold (first round, empty caches) {cold_rate:,.0f}/s")


if __name__ == "__main__":
    main()
