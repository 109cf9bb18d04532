"""How `make test` runs the suite in parallel (pytest-xdist; docs/development.md): which
tests are `timing` and which run together in a group. Read by tests/conftest.py.

Two phases:

1. everything not marked `timing`, on several workers;
2. `timing`: real-process tests that assert lateness, failover within a bound or
   exactly-once at a throughput in real time. They run after phase 1, beside each other
   only: the light ones (a few jobs a second, mostly waiting) on several workers, the heavy
   ones (hundreds of jobs a second on 3-4 processes) in the `heavy` group, one at a time.
   This phase collects only ``TIMING_DIRS`` (the Makefile's ``TIMING_DIRS``, the same list:
   tests/unit/ecosystem/test_make_phases.py).

Tests of one group run on one worker, one after the other: the heavy ones, a module whose
costly fixture is module-scoped (the chaos scenarios; a Chromium per browser module). The
groups are given by node id prefix here: a new test in a listed place is classified
without a mark of its own.
"""

from __future__ import annotations

#: where the `timing` tests live (make test's second phase collects only these)
TIMING_DIRS = ("tests/integration/", "tests/chaos/", "tests/security/")

TIMING = (
    "tests/integration/test_postgres_fleet.py",
    "tests/integration/test_redis_fleet.py",
    "tests/integration/test_sqlite_fleet.py",
    "tests/integration/test_fleet_failover.py",
    "tests/integration/test_max_instances_fleet.py",
    "tests/integration/test_outages.py",
    "tests/integration/test_gunicorn.py",
    "tests/integration/test_stop_jitter.py",
    "tests/chaos/",
    # a 1 s job's ticks keep their second while a match runs (gaps < 1.8 s)
    "tests/security/test_redos.py::test_a_1s_job_keeps_firing",
)
# node id prefix -> group
GROUPS = (
    ("tests/integration/test_postgres_fleet.py::test_three_processes_200_", "heavy"),
    ("tests/integration/test_sqlite_fleet.py::test_four_processes_200_jobs", "heavy"),
    ("tests/integration/test_redis_fleet.py::test_three_processes_100_jobs", "heavy"),
    ("tests/integration/test_gunicorn.py", "heavy"),
    # the two kill9 scenarios feed three tests each through a module-scoped fixture; the
    # other scenarios run on any worker
    ("tests/chaos/test_chaos_short.py::test_kill9_", "chaos"),
    ("tests/browser/test_dashboard.py", "browser-a"),
    ("tests/browser/test_dashboard_b.py", "browser-b"),
    ("tests/browser/test_dashboard_c.py", "browser-c"),
    ("tests/browser/test_dashboard_d.py", "browser-d"),
)


# node id prefix of phase 2's longest tests (about 35 s or more on the 2-core box), handed
# out first so that none starts last; the rest keeps its collection order. (Phase 1's
# longest, schemathesis and the browsers, are CPU-bound: started first beside the browser
# groups they took longer, and phase 1 with them.)
LONGEST = (
    "tests/integration/test_outages.py::test_default_settings_keep_exactly_once_",
    "tests/integration/test_fleet_failover.py::test_sigstop_",
    "tests/integration/test_postgres_fleet.py::test_clocks_skewed_",
    "tests/integration/test_sqlite_fleet.py::test_kill_9_holder_",
    "tests/integration/test_outages.py::test_sqlite_write_lock_held_10s_",
    "tests/integration/test_max_instances_fleet.py::",
    "tests/integration/test_redis_fleet.py::test_redis_killed_and_restarted_",
    "tests/integration/test_redis_fleet.py::test_kill_9_a_worker_",
    "tests/integration/test_postgres_fleet.py::test_connection_cut_and_restored_",
)


def longest_first(nodeid: str) -> int:
    """Sort key: 0 for a test of :data:`LONGEST` (outside any group), else 1."""
    return 0 if nodeid.startswith(LONGEST) and group_of(nodeid) is None else 1


def group_of(nodeid: str) -> str | None:
    """The group of a test (None: it may run on any worker)."""
    head, _, mark = nodeid.rpartition("@")
    if head and "]" not in mark and "/" not in mark:  # an `xdist_group` mark, as xdist
        return mark  # spells it (not an @ inside a parameter's id)
    return next((group for prefix, group in GROUPS if nodeid.startswith(prefix)), None)


assert all(p.startswith(TIMING_DIRS) for p in TIMING), "a TIMING entry outside TIMING_DIRS"

