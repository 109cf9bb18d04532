"""Suite-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from phases import TIMING, TIMING_DIRS, group_of, longest_first
from properties import SCALE, examples
from store.redis_server import RedisServer, require_redis

# In CI the property tests run the same examples every time (a submission must not fail on
# a seed nobody can reproduce); on a laptop they explore new examples on every run, and a
# failure prints the seed and the failing example to reproduce it.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
# make check: fewer examples per property (tests/properties.py)
if SCALE < 1:
    settings.register_profile("quick", settings.default, max_examples=examples(100))
    settings.load_profile("quick")

STORES = ("memory", "sqlite", "postgres", "redis")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stores", default=",".join(STORES),
        help="the stores the tests run against, e.g. --stores memory (make check): a test "
             "that names a store (a parameter such as store_kind, or, in tests/store, the "
             "store its module is named after) is kept when that store is listed. "
             "Default: all.")


def _store_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    params = list(callspec.params.values()) if callspec is not None else []
    for value in params:  # store_kind, or another parameter naming a store (a dialect)
        if isinstance(value, str) and value in STORES:
            return value
    if not item.nodeid.startswith("tests/store/"):
        return None
    module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return next((kind for kind in STORES if module.startswith(f"test_{kind}")), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(TIMING):
            item.add_marker(pytest.mark.timing)
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("timing") and not item.nodeid.startswith(TIMING_DIRS):
            # make test's second phase collects only TIMING_DIRS: it would never run
            raise pytest.UsageError(f"{item.nodeid} is marked timing outside {TIMING_DIRS}")
    items.sort(key=lambda it: longest_first(it.nodeid))  # stable: the rest keeps its order
    stores = {s.strip() for s in config.getoption("stores").split(",")}
    if stores >= set(STORES):
        return
    dropped = [it for it in items if _store_of(it) not in (None, *stores)]
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

        def _reschedule(self, node: Any) -> None:
            """xdist gives a worker more work once it has 2 tests left; with few tests
            (phase 2: long real-process ones) only once it has 1 (the one it runs: it needs
            the next to end it), so that a 40 s test never waits behind another on a busy
            worker while others are idle."""
            few = self.collection is not None and len(self.collection) < 500
            if (few and self.workqueue and not node.shutting_down
                    and self._pending_of(self.assigned_work[node]) > 1):
                return
            super()._reschedule(node)

    return GroupScheduling(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def redis_session() -> Iterator[RedisServer]:
    """One private ``redis-server`` for the session (started on first use; never the
    shared 6379); each test takes a fresh key prefix (``redis_server.new_prefix``)."""
    require_redis()
    server = RedisServer().start()
    yield server
    server.cleanup()
