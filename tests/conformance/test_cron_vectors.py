"""Acceptance suite: other engines' published answers, replayed against cronfleet.cron.

The vectors (tests/conformance/vectors/, copied with their README from the shared
conformance set) come from the test suites of six engines. Our rules are Debian/cronie's,
as implemented by cronsim; where another engine follows a different rule, the vector is
listed below with the rule that differs, and the test asserts that we really do answer
differently -- so the list cannot go stale and nothing is excluded silently.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cronfleet.cron import CronSyntaxError, parse


def _vectors_dir() -> Path:
    here = Path(__file__).resolve()
    candidates = [here.parent / "vectors"]  # the in-repo copy: the suite never needs shared/
    candidates.append(here.parents[2] / ".." / "shared" / "conformance" / "cron")
    env = os.environ.get("CRONFLEET_CONFORMANCE_DIR")
    if env:
        candidates.append(Path(env))
    for c in candidates:
        if (c / "vectors.json").is_file():
            return c
    looked = ", ".join(str(c) for c in candidates)
    if os.environ.get("CI"):
        raise RuntimeError(f"cron conformance vectors not found (looked in {looked})")
    pytest.skip(
        f"cron conformance vectors not found (looked in {looked}); "
        "set CRONFLEET_CONFORMANCE_DIR",
        allow_module_level=True,
    )
    raise AssertionError  # unreachable


DIR = _vectors_dir()
VECTORS: list[dict[str, Any]] = json.loads((DIR / "vectors.json").read_text())
PARTIAL: list[dict[str, Any]] = json.loads((DIR / "vectors_partial.json").read_text())

ENGINES = {
    "cuu508/cronsim": "cronsim",
    "pallets-eco/croniter": "croniter",
    "dragonmantank/cron-expression": "php",
    "robfig/cron": "robfig",
    "Hexagon/croner": "croner",
    "zslayton/cron": "rust-cron",
}


def engine(vec: dict[str, Any]) -> str:
    return ENGINES[vec["source"].split()[0]]


# -- rules that differ from ours -----------------------------------------------------------------

CRONITER_OR = (
    "croniter: day-of-month and day-of-week combine with OR whenever both are restricted, "
    "'*/2' included; ours (Vixie/cronie): a day field starting with '*' makes it AND"
)
CRONITER_TWICE = (
    "croniter: a fixed-time job fires twice in a repeated fall-back hour; "
    "ours: once, at the first occurrence"
)
CRONITER_STAR_LIST = (
    "croniter: '*' inside a day-of-week list with '#' is ignored ('*,sat#3' = third Saturday); "
    "ours: '*' in the list means every day"
)
CRONITER_RANGE_HASH = "croniter-only syntax: a range with '#' ('MON-FRI#1'); we reject it"
CRONITER_LX = "croniter-only spelling 'L5' for the last Friday; we accept '5L'"
CRONITER_WN = "croniter-only spelling 'W15'; we accept '15W'"
ROBFIG_OR = (
    "robfig: OR unless a day field is exactly '*' or '?' ('*/10' counts as restricted); "
    "ours: a day field starting with '*' makes it AND"
)
CRONER_GAP = (
    "croner: a 6-field job in a spring-forward gap is shifted by the gap's length; "
    "ours: 6-field jobs run in elapsed time, a skipped time does not fire (cronie/cronsim)"
)
CRONER_ONCE = (
    "croner: a 6-field job fires once in a repeated hour; "
    "ours: 6-field jobs run in elapsed time and fire in both passes"
)
CRONER_SKIP_REPEAT = (
    "croner: even '* * * * *' skips the repeated fall-back hour; "
    "ours: wildcard jobs fire in both passes"
)
PHP_OR = "PHP: OR even when day-of-month starts with '*' ('*/15'); ours: AND"
PHP_WIDE_STEP = (
    "PHP: a step wider than its range wraps around ('0-59/65' = {0, 5}, month '*/123' "
    "matches later months); ours: only the first value ({0}, January)"
)
PHP_GAP_SHIFT = (
    "PHP: a fixed-time job in a spring-forward gap is shifted by the gap's length "
    "(02:30 -> 03:30); ours: it fires at the first instant after the gap (03:00)"
)

DIFFERENT: dict[str, str] = {
    "v0047": CRONITER_OR,
    "v0057": CRONITER_TWICE,
    "v0070": CRONITER_STAR_LIST,
    **{f"v{n:04d}": CRONITER_RANGE_HASH for n in range(102, 112)},
    **{v: CRONITER_LX for v in ("v0124", "v0125", "v0126", "v0128", "v0129", "v0130",
                                "v0132", "v0133", "v0134", "v0135")},
    "v0151": CRONITER_WN,
    "v0212": ROBFIG_OR,
    "v0228": ROBFIG_OR,
    "v0268": CRONER_GAP,
    "v0271": CRONER_GAP,
    "v0276": CRONER_GAP,
    "v0270": CRONER_ONCE,
    "v0273": CRONER_ONCE,
    "v0275": CRONER_SKIP_REPEAT,
    "v0323": PHP_OR,
    "v0336": PHP_WIDE_STEP,
    "v0347": PHP_WIDE_STEP,
    "v0348": PHP_WIDE_STEP,
    "v0373": PHP_GAP_SHIFT,
    "v0374": PHP_GAP_SHIFT,
    "v0376": PHP_GAP_SHIFT,
}

# per engine: (vectors passed, vectors listed as different)
EXPECTED_COUNTS = {
    "cronsim": (46, 0),
    "croniter": (127, 24),
    "php": (111, 7),
    "robfig": (64, 2),
    "croner": (8, 6),
    "rust-cron": (2, 0),
}

CRONITER_WRAP_STEP = (
    "croniter: a step over a wrap-around range restarts at the wrap ('Thu-Tue/2' = Thu, Sat, "
    "Sun, Tue); ours: one cadence across the wrap (Thu, Sat, Mon)"
)
CRONITER_EQUAL_ENDS = (
    "croniter: a range with equal ends ('Sun-Sun', '7-7', '0-0') is the whole week; "
    "ours: that single day"
)
YEAR_FIELD = "croniter 7-field syntax with a year field: not supported, rejected"
DAY_AND_OPTION = "croniter option day_or=False (always AND): not supported; ours: Vixie OR"

PARTIAL_DIFFERENT: dict[str, str] = {
    "p0025": CRONITER_RANGE_HASH,
    "p0037": CRONITER_WRAP_STEP,
    "p0091": CRONITER_WRAP_STEP,
    "p0092": CRONITER_WRAP_STEP,
    "p0093": CRONITER_WRAP_STEP,
    "p0097": CRONITER_EQUAL_ENDS,
    "p0098": CRONITER_EQUAL_ENDS,
    "p0099": CRONITER_EQUAL_ENDS,
    "p0122": DAY_AND_OPTION,
    **{f"p{n:04d}": YEAR_FIELD for n in range(127, 140)},
    "p0147": YEAR_FIELD,
}
PARTIAL_EXPECTED_COUNTS = (125, 23)  # (passed, listed as different)


# -- running a vector ----------------------------------------------------------------------------


def run_full(vec: dict[str, Any]) -> list[str] | str:
    """Our answer: the ISO strings, or 'syntax error: ...' / 'accepted' for unsatisfiable."""
    try:
        expr = parse(vec["expr"], vec["tz"])
    except CronSyntaxError as exc:
        return f"syntax error: {exc}"
    if not vec["expected"]:
        return "accepted"
    t = datetime.fromisoformat(vec["start"])
    out = []
    step = expr.prev if vec.get("direction") == "prev" else expr.next
    for _ in vec["expected"]:
        t = step(t)
        out.append(t.isoformat())
    return out


def expected_full(vec: dict[str, Any]) -> list[str] | str:
    if not vec["expected"]:
        return "syntax error"  # unsatisfiable: we reject it at parse time
    return [datetime.fromisoformat(s).isoformat() for s in vec["expected"]]


def agrees(vec: dict[str, Any]) -> bool:
    got, want = run_full(vec), expected_full(vec)
    if want == "syntax error":
        return isinstance(got, str) and got.startswith("syntax error")
    return got == want


_FIELDS = ("year", "month", "day", "hour", "minute", "second")


def partial_mismatches(vec: dict[str, Any]) -> list[str]:
    try:
        expr = parse(vec["expr"], vec["tz"])
    except CronSyntaxError as exc:
        return [f"syntax error: {exc}"]
    t = datetime.fromisoformat(vec["start"])
    step = expr.prev if vec.get("direction") == "prev" else expr.next
    bad = []
    for i, item in enumerate(vec["expected"]):
        t = step(t)
        want = datetime.fromisoformat(item["value_from_croniter"])
        asserted = item["asserted"]
        if asserted == "none":
            continue
        names = list(_FIELDS) if asserted == "full" else asserted
        for name in names:
            if name == "isoweekday":
                g, w = t.isoweekday(), want.isoweekday()
            else:
                g, w = getattr(t, name), getattr(want, name)
            if g != w:
                bad.append(f"#{i} {name}: got {g} ({t.isoformat()}), want {w}")
        if asserted == "full" and t.utcoffset() != want.utcoffset():
            bad.append(f"#{i} offset: got {t.isoformat()}, want {want.isoformat()}")
    return bad


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("vec", VECTORS, ids=[v["id"] for v in VECTORS])
def test_vector(vec: dict[str, Any]) -> None:
    if vec["id"] in DIFFERENT:
        assert not agrees(vec), (
            f"{vec['id']} is listed as following a different rule ({DIFFERENT[vec['id']]}) "
            "but we now agree with it: remove it from DIFFERENT"
        )
        return
    assert agrees(vec), (
        f"{vec['id']} {engine(vec)} {vec['expr']!r} tz={vec['tz']} start={vec['start']} "
        f"{vec.get('direction', 'next')}: got {run_full(vec)}, want {expected_full(vec)}"
    )


@pytest.mark.parametrize("vec", PARTIAL, ids=[v["id"] for v in PARTIAL])
def test_partial_vector(vec: dict[str, Any]) -> None:
    bad = partial_mismatches(vec)
    if vec["id"] in PARTIAL_DIFFERENT:
        assert bad, f"{vec['id']} listed as different ({PARTIAL_DIFFERENT[vec['id']]}) but agrees"
        return
    assert not bad, f"{vec['id']} {vec['expr']!r}: " + "; ".join(bad)


def test_different_lists_name_existing_vectors() -> None:
    ids = {v["id"] for v in VECTORS}
    assert set(DIFFERENT) <= ids
    assert set(PARTIAL_DIFFERENT) <= {v["id"] for v in PARTIAL}
    # cronsim implements the rules we chose: none of its vectors may be listed
    by_id = {v["id"]: v for v in VECTORS}
    assert not [i for i in DIFFERENT if engine(by_id[i]) == "cronsim"]


def test_counts_per_engine() -> None:
    """The counts reported in docs/cron.md."""
    counts: Counter[tuple[str, str]] = Counter()
    for vec in VECTORS:
        counts[(engine(vec), "different" if vec["id"] in DIFFERENT else "passed")] += 1
    got = {e: (counts[(e, "passed")], counts[(e, "different")]) for e in EXPECTED_COUNTS}
    assert got == EXPECTED_COUNTS
    assert sum(p + d for p, d in got.values()) == len(VECTORS) == 397
    partial_diff = sum(1 for v in PARTIAL if v["id"] in PARTIAL_DIFFERENT)
    assert (len(PARTIAL) - partial_diff, partial_diff) == PARTIAL_EXPECTED_COUNTS
