"""What every store writes the same way: skip records' wording, millisecond times, and the
packaged migration files. One place, so SQLite and PostgreSQL ledgers read alike."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any

from cronfleet.model import SkipReason

__all__ = ["busy_log", "busy_result", "dt", "history_query", "migrations", "ms", "skip_result"]


def ms(ts: float) -> int:
    """Epoch seconds to the integer milliseconds stores keep."""
    return round(ts * 1000)


def dt(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC)


def busy_log(holder: str | None) -> str:
    """The log line of a slot skipped because the previous run still holds the lease."""
    return f"Skipped: the previous run has not finished (lease held by {holder or 'unknown'})"


def skip_result(reason: str) -> dict[str, Any]:
    return {"skipped": True, "reason": reason}


def busy_result() -> dict[str, Any]:
    return skip_result(SkipReason.ALREADY_EXECUTING.value)


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of the packaged migration files of ``dialect``, in order."""
    folder = resources.files(f"cronfleet.store.{dialect}").joinpath("migrations")
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
    """``select`` filtered by job, status and cursor, newest first: the run history query
    both stores answer, in their own parameter style (``?`` or ``%s``)."""
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
