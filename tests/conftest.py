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


@pytest.fixture(scope="session")
def redis_session() -> Iterator[RedisServer]:
    """One private ``redis-server`` for the session (started on first use; never the
    shared 6379); each test takes a fresh key prefix (``redis_server.new_prefix``)."""
    require_redis()
    server = RedisServer().start()
    yield server
    server.cleanup()
