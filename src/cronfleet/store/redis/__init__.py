"""The Redis store (``redis://host:6379/0?prefix=cf:``): see :mod:`.store`."""

from cronfleet.store.redis.store import SCHEMA_VERSION, RedisStore

__all__ = ["SCHEMA_VERSION", "RedisStore"]
