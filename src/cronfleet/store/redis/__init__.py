"""The Redis store (``redis://host:6379/0?prefix=cf:``): ``store.py``, its Lua scripts
(``scripts/``) and the side tables on Redis (``side.py``)."""

from cronfleet.extras import require

try:
    from cronfleet.store.redis.store import SCHEMA_VERSION, RedisStore
except ImportError:
    require("redis")  # one line naming the pip install
    raise

__all__ = ["SCHEMA_VERSION", "RedisStore"]
