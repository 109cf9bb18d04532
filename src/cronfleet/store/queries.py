"""The one loader of named SQL queries and numbered migrations, for every dialect package
(``cronfleet.store.sqlite``, ``cronfleet.store.postgres``).

``queries.sql`` holds the queries, each introduced by a ``-- name: <name>`` line; the
comment lines under it describe the query and are dropped (a ``%`` in a comment would
otherwise reach psycopg's placeholder parser). A query ends at the next name. Text is used
as written: placeholders are the driver's own (``?N`` for sqlite3, ``%(key)s`` for
psycopg), and on PostgreSQL tables are written ``__S__.claims``: :func:`load_queries` puts
the store's quoted schema there once, when the store is created.

``migrations/NNNN_name.sql`` are the schema versions, applied in order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronfleet.store.base import RunCursor, RunFilter

__all__ = [
    "SCHEMA_MARK",
    "find_runs_query",
    "history_query",
    "load_queries",
    "migrations",
    "read_queries",
]

SCHEMA_MARK = "__S__"
_NAME = "-- name:"


@functools.cache
def read_queries(package: str) -> Mapping[str, str]:
    """The named queries of ``package``'s ``queries.sql`` (cached, read-only)."""
    text = resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(_NAME):
            name = stripped[len(_NAME) :].strip()
            if not name or name in found:
                raise ValueError(f"{package}/queries.sql: empty or repeated query name {name!r}")
            current = found[name] = []
        elif stripped.startswith("--") or current is None:
            continue
        else:
            current.append(line)
    out = {}
    for name, lines in found.items():
        body = "\n".join(lines).strip().removesuffix(";").strip()
        if not body:
            raise ValueError(f"{package}/queries.sql: query {name!r} is empty")
        out[name] = body + "\n"
    return MappingProxyType(out)


def load_queries(package: str, schema: str | None = None) -> dict[str, str]:
    """The named queries of ``package``, with ``schema`` (already quoted) in place of
    ``__S__`` when given."""
    queries = read_queries(package)
    if schema is None:
        return dict(queries)
    return {name: q.replace(SCHEMA_MARK, schema) for name, q in queries.items()}


def migrations(package: str) -> list[tuple[int, str, str]]:
    """``(version, file name, sql)`` of ``package``'s ``migrations/``, in order."""
    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def history_query(
    select: str,
    *,
    job_id: str | None,
    status: str | None,
    before_id: int | None,
    limit: int,
    placeholder: str,
) -> tuple[str, list[Any]]:
    """``select`` (a named query) filtered by job, status and cursor, newest first: the
    run history query both stores answer, in their own parameter style (``?`` or ``%s``)."""
    where: list[str] = []
    args: list[Any] = []
    for clause, value in (("job_id =", job_id), ("status =", status), ("id <", before_id)):
        if value is not None:
            where.append(f"{clause} {placeholder}")
            args.append(value)
    sql = select
    if where:
        sql += " WHERE " + " AND ".join(where)
    args.append(int(limit))
    return f"{sql} ORDER BY id DESC LIMIT {placeholder}", args


def find_runs_query(
    select: str,
    where: RunFilter,
    *,
    after: RunCursor | None,
    limit: int,
    placeholder: str,
    time: Callable[[datetime], Any],
    any_job: tuple[str, Callable[[list[str]], Any]],
) -> tuple[str, list[Any]]:
    """``select`` filtered by ``where`` and the cursor, newest first by ``(slot, id)``,
    ``limit + 1`` rows (the extra one says whether a next page exists): the across-jobs
    run query both stores answer; ``time`` turns a datetime into the dialect's value,
    ``any_job`` is the dialect's "job_id among a list" clause and its parameter."""
    p = placeholder
    clauses: list[str] = []
    args: list[Any] = []
    for clause, value in (
        (f"status = {p}", None if where.status is None else where.status.value),
        (f"job_id = {p}", where.job_id),
        (f"instance_id = {p}", where.instance_id),
        (any_job[0], None if where.job_ids is None else any_job[1](sorted(where.job_ids))),
        (f"slot >= {p}", None if where.since is None else time(where.since)),
        (f"slot < {p}", None if where.until is None else time(where.until)),
    ):
        if value is not None:
            clauses.append(clause)
            args.append(value)
    if after is not None:
        clauses.append(f"(slot, id) < ({p}, {p})")
        args += [time(after.slot), after.id]
    sql = select
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    args.append(int(limit) + 1)
    return f"{sql} ORDER BY slot DESC, id DESC LIMIT {p}", args
