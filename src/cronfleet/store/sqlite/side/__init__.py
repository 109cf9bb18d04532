"""The side tables on SQLite, on the run store's own connection and thread.

The SQLite store runs every call on its one thread, one at a time (its connection lock):
side-table statements go through the same thread, so the file keeps one writer per
process and a side write never waits on this process's own store for the file lock.
:func:`on_store_thread` is the one place that reaches into the store. Named statements:
``queries.sql`` next to this module (the same names as PostgreSQL's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cronfleet.store.queries import read_queries
from cronfleet.store.side import StoreHandle
from cronfleet.store.sql_side import Rows, Step

if TYPE_CHECKING:
    import sqlite3

    from cronfleet.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteSide", "on_store_thread"]

T = TypeVar("T")


async def on_store_thread(store: SQLiteStore, fn: Callable[[sqlite3.Connection], T], *,
                          tx: bool = False) -> T:
    """``fn(connection)`` on the store's thread, alone on its connection, with the store's
    deadline and error translation (the one accessor of the store's connection); ``tx``:
    in one transaction (``SQLiteTransport.tx``: committed when ``fn`` returns, rolled
    back when it raises)."""
    transport = store.transport

    def go() -> T:
        if not tx:
            return fn(transport.connection())
        with transport.tx() as c:
            return fn(c)

    return await transport.call_fn(go)


class _Undo(Exception):
    """Raised in a transaction to roll it back (``write_each``'s ``keep`` said no), with
    the rows its statements answered."""

    def __init__(self, rows: list[Rows]) -> None:
        super().__init__("rolled back")
        self.rows = rows


class SQLiteSide:
    """:class:`~cronfleet.store.sql_side.SideSQL` on a :class:`SQLiteStore`."""

    estimates = False

    def __init__(self, handle: StoreHandle[SQLiteStore]) -> None:
        self._handle = handle
        self._q = read_queries("cronfleet.store.sqlite.side")

    def __repr__(self) -> str:
        return f"SQLiteSide({self._handle.store.path!r})"

    def time(self, at: datetime) -> Any:
        return int(at.timestamp() * 1000)

    async def _go(self, fn: Callable[[sqlite3.Connection], T], *, tx: bool = False) -> T:
        return await on_store_thread(await self._handle.get(), fn, tx=tx)

    async def query(self, name: str, params: tuple[Any, ...] = ()) -> Rows:
        text = self._q[name]
        return await self._go(lambda c: c.execute(text, params).fetchall())

    async def write(self, name: str, params: tuple[Any, ...] = (), *, catalog: bool = False
                    ) -> Rows:
        # SQLite runs one writer at a time: a single statement is already serialised
        return await self.query(name, params)

    async def write_each(self, name: str, params: Sequence[tuple[Any, ...]], *,
                         catalog: bool = False,
                         keep: Callable[[list[Rows]], bool] = lambda rows: True
                         ) -> list[Rows]:
        text = self._q[name]

        def go(c: sqlite3.Connection) -> list[Rows]:
            out = [c.execute(text, p).fetchall() for p in params]
            if not keep(out):
                raise _Undo(out)
            return out

        try:
            return await self._go(go, tx=True)  # BEGIN IMMEDIATE: one writer at a time
        except _Undo as undone:
            return undone.rows

    async def atomic(self, first: Sequence[Step], read: Step,
                     then: Callable[[Rows], Sequence[Step]]) -> Rows:
        q = self._q

        def go(c: sqlite3.Connection) -> Rows:
            for name, params in first:
                c.execute(q[name], params)
            rows = c.execute(q[read[0]], read[1]).fetchall()
            for name, params in then(rows):
                c.execute(q[name], params)
            return rows

        # BEGIN IMMEDIATE: one writer at a time, so what is read stays true
        return await self._go(go, tx=True)

    async def announce(self, kind: str) -> None:
        return None  # other processes notice the change when they next look

    async def close(self) -> None:
        await self._handle.close()
