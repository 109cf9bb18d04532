"""Sharing by content: one immutable object for every equal piece of a parsed schedule.

A million schedules are mostly the same few pieces: the minute sets ``{0}`` .. ``{59}``,
the hours, the day rules ``* * *`` and ``* * 1-5``, the fields as written. An
:class:`Interner` maps a piece's content (a hashable key) to the one object built for it,
so that every expression holding an equal piece holds the same object: the memory of a
schedule is then its own few references, not its tables (docs/cron.md, "Memory").

Thread safety: the values are immutable and built before they are published; the map is
only read (``dict.get``) and added to (``dict.setdefault``, which returns the first value
published for a key when two threads build the same piece at once) or emptied, all single
atomic operations on a ``dict``. Nothing shared is ever changed in place.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Interner"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Interner(Generic[K, V]):
    """``key -> value`` built once per key and shared, holding at most ``limit`` keys.

    When the map is full it starts afresh (objects already handed out keep their value;
    only the sharing with later ones is lost), so hostile input cannot grow it without
    bound, and a steady working set is shared again at once.
    """

    __slots__ = ("_limit", "_map", "name")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self._limit = limit
        self._map: dict[K, V] = {}

    def get(self, key: K, build: Callable[[], V]) -> V:
        value = self._map.get(key)
        if value is None:
            value = build()
            if len(self._map) >= self._limit:
                self._map.clear()
            value = self._map.setdefault(key, value)
        return value

    def __len__(self) -> int:
        return len(self._map)

    def clear(self) -> None:
        self._map.clear()
