"""Suite-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from store.redis_server import RedisServer, require_redis

# In CI the property tests run the same examples every time (a submission must not fail on
# a seed nobody can reproduce); on a laptop they explore new examples on every run, and a
# failure prints the seed and the failing example to reproduce it.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# How `make test` runs the suite in parallel (pytest-xdist; docs/development.md, "Running
# the tests"). Two phases:
#
# 1. everything not marked `timing`, on several workers;
# 2. `timing`: real-process tests that assert lateness, failover within a bound or
#    exactly-once at a throughput in real time. They run after phase 1, beside each other
#    only: the light ones (a few jobs a second, mostly waiting) on a few workers, the heavy
#    ones (hundreds of jobs a second on 3-4 processes) in the `heavy` group, one at a time.
#
# Tests of one group run on one worker, one after the other: the heavy ones, a module whose
# costly fixture is module-scoped (the chaos scenarios; a Chromium per browser module),
# and the browser modules in two lanes (two Chromiums at most). The groups are given by
# path here (a new test in a listed place is classified without a mark of its own).
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
)
# node id prefix -> group
GROUPS = (
    ("tests/integration/test_postgres_fleet.py::test_three_processes_200_", "heavy"),
    ("tests/integration/test_sqlite_fleet.py::test_four_processes_200_jobs", "heavy"),
    ("tests/integration/test_redis_fleet.py::test_three_processes_100_jobs", "heavy"),
    ("tests/integration/test_gunicorn.py", "heavy"),
    ("tests/chaos/", "chaos"),
    ("tests/browser/test_dashboard.py", "browser-a"),
    ("tests/browser/test_dashboard_b.py", "browser-b"),
    ("tests/browser/test_dashboard_c.py", "browser-c"),
    ("tests/browser/test_dashboard_d.py", "browser-d"),
)


def group_of(nodeid: str) -> str | None:
    """The group of a test (None: it may run on any worker)."""
    if "@" in nodeid:  # an `xdist_group` mark, as `--dist loadgroup` spells it
        return nodeid.rsplit("@", 1)[1]
    return next((group for prefix, group in GROUPS if nodeid.startswith(prefix)), None)


STORES = ("memory", "sqlite", "postgres", "redis")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stores", default=",".join(STORES),
        help="the stores tests/store runs against, e.g. --stores memory (make check); a "
             "store test is kept when its store (a parameter such as store_kind, or the "
             "store its module is named after) is listed. Default: all.")


def _store_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    params = list(callspec.params.values()) if callspec is not None else []
    for value in params:  # store_kind, or another parameter naming a store (a dialect)
        if isinstance(value, str) and value in STORES:
            return value
    module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return next((kind for kind in STORES if module.startswith(f"test_{kind}")), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(TIMING):
            item.add_marker(pytest.mark.timing)
            item.add_marker(pytest.mark.slow)
    stores = {s.strip() for s in config.getoption("stores").split(",")}
    if stores >= set(STORES):
        return
    dropped = [it for it in items if it.nodeid.startswith("tests/store/")
               and _store_of(it) not in (None, *stores)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [it for it in items if id(it) not in gone]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadgroup` by the table above. (xdist's own loadgroup reads `xdist_group`
    marks by renaming node ids, which pytest 9.2 no longer allows: the marks are lost.)
    Each group is one unit of work, every other test a unit of its own; the biggest
    groups are handed out first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return GroupScheduling(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def redis_session() -> Iterator[RedisServer]:
    """One private ``redis-server`` for the session (started on first use; never the
    shared 6379); each test takes a fresh key prefix (``redis_server.new_prefix``)."""
    require_redis()
    server = RedisServer().start()
    yield server
    server.cleanup()
