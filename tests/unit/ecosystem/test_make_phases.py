"""`make test`'s two phases run every test once: the second collects only TIMING_DIRS, so
the Makefile's list and tests/phases.py's must agree, and every timing test lies there."""

from __future__ import annotations

import re
from pathlib import Path

from phases import GROUPS, TIMING, TIMING_DIRS, group_of

ROOT = Path(__file__).resolve().parents[3]


def test_the_makefile_and_phases_name_the_same_timing_dirs() -> None:
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^TIMING_DIRS := (.+)$", text, re.M)
    assert m, "TIMING_DIRS is gone from the Makefile"
    assert {f"{d}/" for d in m.group(1).split()} == set(TIMING_DIRS)
    assert all(p.startswith(TIMING_DIRS) for p in TIMING)


def test_every_listed_place_exists() -> None:
    for prefix in [*TIMING, *(p for p, _ in GROUPS)]:
        path = prefix.split("::", 1)[0].rstrip("/")
        assert (ROOT / path).exists(), prefix


def test_groups_by_prefix_and_by_xdist_mark() -> None:
    assert group_of("tests/chaos/test_chaos_short.py::test_kill9_no_silent_gap[sqlite]") \
        == "chaos"
    assert group_of("tests/chaos/test_chaos_short.py::test_start_down_every_process_waits") \
        is None  # a scenario of its own: any worker
    assert group_of("tests/browser/test_dashboard_d.py::test_x") == "browser-d"
    assert group_of("tests/unit/test_clock.py::test_x") is None
    assert group_of("tests/unit/x.py::test_y[p]@lane") == "lane"
    assert group_of("tests/unit/x.py::test_y[a@b.example]") is None
