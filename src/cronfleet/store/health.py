"""Per-job health shared by the fleet: last outcome, consecutive failures, counts, last
duration. One row per job in a ``job_health`` table next to the run ledger (part of each
dialect's numbered migrations, v2), on a side connection like the secrets table.

:meth:`HealthStore.record` updates a job's row atomically and returns the row before and
after, so exactly one process sees each transition (first failure, recovery ...).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from cronfleet.store.side import Rows, SideDB, SidePostgres, SideSQLite, Statement
from cronfleet.store.url import parse_store_url

__all__ = [
    "HealthStore",
    "JobHealth",
    "MemoryHealthStore",
    "PostgresHealthStore",
    "SQLiteHealthStore",
    "open_health_store",
]


@dataclass(frozen=True)
class JobHealth:
    job_id: str
    last_outcome: str | None = None  # "succeeded" / "failed"
    consecutive_failures: int = 0
    successes: int = 0
    failures: int = 0
    last_duration: float | None = None
    last_run_at: datetime | None = None

    def after(self, ok: bool, duration: float | None, now: datetime) -> JobHealth:
        return replace(
            self,
            last_outcome="succeeded" if ok else "failed",
            consecutive_failures=0 if ok else self.consecutive_failures + 1,
            successes=self.successes + (1 if ok else 0),
            failures=self.failures + (0 if ok else 1),
            last_duration=duration,
            last_run_at=now,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "last_outcome": self.last_outcome,
            "consecutive_failures": self.consecutive_failures,
            "successes": self.successes,
            "failures": self.failures,
            "last_duration": self.last_duration,
            "last_run_at": self.last_run_at.isoformat() if self.last_run_at else None,
        }


class HealthStore(Protocol):
    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        """Apply one finished run; ``(before, after)``."""
        ...

    async def get(self, job_id: str) -> JobHealth: ...

    async def close(self) -> None: ...


class MemoryHealthStore:
    def __init__(self) -> None:
        self.rows: dict[str, JobHealth] = {}

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        before = self.rows.get(job_id, JobHealth(job_id))
        after = before.after(ok, duration, now)
        self.rows[job_id] = after
        return before, after

    async def get(self, job_id: str) -> JobHealth:
        return self.rows.get(job_id, JobHealth(job_id))

    async def close(self) -> None:
        return None


_COLUMNS = ("job_id, last_outcome, consecutive_failures, successes, failures, last_duration, "
            "last_run_at")


def _from_row(row: tuple[Any, ...]) -> JobHealth:
    at = row[6]
    if isinstance(at, int | float):
        at = datetime.fromtimestamp(at / 1000, UTC)
    return JobHealth(row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], at)


class _SideHealthStore:
    """The ``job_health`` table on a side connection (:mod:`cronfleet.store.side`): the
    SQL is written once for both dialects; only the time column's type differs."""

    _db: SideDB

    def _time(self, at: datetime) -> Any:
        return at

    async def record(self, job_id: str, ok: bool, duration: float | None, now: datetime
                     ) -> tuple[JobHealth, JobHealth]:
        found: list[tuple[JobHealth, JobHealth]] = []

        def update(rows: Rows) -> list[Statement]:
            before = _from_row(rows[0]) if rows else JobHealth(job_id)
            after = before.after(ok, duration, now)
            found.append((before, after))
            return [(
                "UPDATE {p}job_health SET last_outcome = ?, consecutive_failures = ?, "
                "successes = ?, failures = ?, last_duration = ?, last_run_at = ? "
                "WHERE job_id = ?",
                (after.last_outcome, after.consecutive_failures, after.successes,
                 after.failures, after.last_duration, self._time(now), job_id),
            )]

        # one transaction, the row locked: exactly one process sees each transition
        await self._db.atomic(
            [("INSERT INTO {p}job_health (job_id) VALUES (?) ON CONFLICT DO NOTHING",
              (job_id,))],
            (f"SELECT {_COLUMNS} FROM {{p}}job_health WHERE job_id = ? FOR UPDATE", (job_id,)),
            update,
        )
        return found[-1]

    async def get(self, job_id: str) -> JobHealth:
        rows = await self._db.query(f"SELECT {_COLUMNS} FROM {{p}}job_health WHERE job_id = ?",
                                    (job_id,))
        return _from_row(rows[0]) if rows else JobHealth(job_id)

    async def close(self) -> None:
        await self._db.close()


class SQLiteHealthStore(_SideHealthStore):
    """Job health in the scheduler's SQLite file (its own connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = SideSQLite(path, "job health")

    def _time(self, at: datetime) -> Any:
        return int(at.timestamp() * 1000)


class PostgresHealthStore(_SideHealthStore):
    """Job health in the scheduler's PostgreSQL schema (its own connection)."""

    def __init__(self, url: str) -> None:
        db = SidePostgres(url, "job health")
        self.schema = db.schema
        self._db = db


def open_health_store(url: str) -> HealthStore:
    parsed = parse_store_url(url)
    if parsed.dialect == "redis":
        from cronfleet.store.redis.side import RedisHealthStore

        return RedisHealthStore(url)
    if parsed.dialect == "sqlite":
        return SQLiteHealthStore(parsed.path)
    return PostgresHealthStore(url)
