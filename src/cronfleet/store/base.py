"""The Store contract: the small, batched set of operations every store implements.

Every method that the loop calls at a burst takes a whole batch and runs as one transaction,
so an instant with 20,000 due jobs costs a handful of statements, not 20,000 round trips.
Every store (SQLite, PostgreSQL, ...) passes the same conformance suite in ``tests/store``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy

__all__ = [
    "ClaimKind",
    "Dispatch",
    "Dispatched",
    "EarlyClaimStore",
    "Finish",
    "Skip",
    "Start",
    "Started",
    "Store",
]

ClaimKind = Literal["slot", "token", "none"]


@dataclass(slots=True)
class Dispatch:
    """One slot to claim (and usually start) in a batch.

    ``claim``: ``"slot"`` inserts the unique ``(job_id, slot)`` claim (lost if another
    instance has it); ``"token"`` only draws a fencing token (manual runs); ``"none"``
    neither (node-local jobs, or the store was unreachable).
    ``lease``: take the job's execution lease for ``hold`` seconds now (not for
    ``Overlap.ALLOW`` or node-local jobs). ``hold`` also sets the run row's deadline, after
    which a run without an end is judged orphaned. With ``defer`` the run row stays
    ``pending`` until :meth:`Store.start` (jitter delay).
    ``skip_reason``: claim the slot but record it as skipped (missed slots under catch-up).
    ``reclaim_token``: crash recovery — replace that claim with a new, higher token.
    ``record=False`` (the hot path for leased runs): the run row is not written here but
    by :meth:`Store.finish` once the handler has started or ended, so a burst's handlers
    start after one short transaction. A crash in between leaves a claim and an unreleased
    lease, from which :meth:`Store.reap_orphans` writes the ``interrupted`` row.
    ``early`` (with ``claim="slot"``, ``lease`` and ``record=False``): an early claim, made
    shortly before the slot's time. The claim is kept only together with the lease: if the
    lease is busy, the claim is removed again in the same transaction and the result says
    ``busy`` (nothing of it remains; the slot is handled at its time as usual).
    """

    job_id: str
    slot: float
    triggered_by: TriggeredBy
    claim: ClaimKind = "slot"
    lease: bool = False
    hold: float = 3600.0
    defer: bool = False
    wait_if_busy: bool = False
    is_catchup: bool = False
    is_recovery: bool = False
    manual: bool = False
    skip_reason: str | None = None
    result: Any = None
    logs: list[str] = field(default_factory=list)
    reclaim_token: int | None = None
    record: bool = True
    early: bool = False


@dataclass(slots=True)
class Dispatched:
    """What happened to one :class:`Dispatch`.

    ``won`` is False when another instance owns the slot: nothing was recorded.
    ``run`` is the ledger row written for it (running, pending or skipped).
    ``holder`` names the lease holder when the lease was busy.
    ``busy``: an early claim (``Dispatch.early``) that was not kept because the lease was
    busy (``won`` is False and nothing was written).
    """

    request: Dispatch
    won: bool
    token: int | None = None
    run: RunRecord | None = None
    holder: str | None = None
    busy: bool = False

    @property
    def started(self) -> bool:
        return self.run is not None and self.run.status is RunStatus.RUNNING


@dataclass(slots=True)
class Start:
    """Start a pending run (after its jitter delay, or when a queued slot's turn comes)."""

    run_id: int
    job_id: str
    token: int | None
    lease: bool
    hold: float
    wait_if_busy: bool = False


@dataclass(slots=True)
class Started:
    request: Start
    run: RunRecord | None  # None: still waiting (queued, lease busy)
    holder: str | None = None


@dataclass(slots=True)
class Finish:
    """A run's row to write: inserted when ``run.id`` is None (and given its id), else
    updated; and the lease to release (if it held one and the run has ended)."""

    run: RunRecord
    release_token: int | None = None


@dataclass(slots=True)
class Skip:
    """A slot deliberately not run without a claim (paused, disabled, store was down).

    Written at most once per ``(job_id, slot, reason)`` across every instance.
    """

    job_id: str
    slot: float
    reason: str
    triggered_by: TriggeredBy = TriggeredBy.SCHEDULE
    instance_id: str | None = None
    logs: list[str] = field(default_factory=list)
    result: Any = None


@runtime_checkable
class Store(Protocol):
    """Durable shared state: claims, job state (overrides, leases), the run ledger."""

    url: str

    async def open(self) -> None:
        """Connect and apply pending schema migrations (safe when many processes start)."""

    async def close(self) -> None: ...

    async def now(self) -> float:
        """The store's clock in epoch seconds (lease expiry is judged by it)."""

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """Create missing job state rows and return every row asked for."""

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """The current state rows (overrides, leases) of these jobs, one statement."""

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """State rows of the jobs among ``job_ids`` that have an override set (cheap: the
        loop calls it at every instant)."""

    async def set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        """Record a pause / force-on / clear for every process; raises if not recorded."""

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        """Claim, lease and record a batch of slots in one transaction."""

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        """Take leases for pending runs and mark them running (or skipped)."""

    async def finish(self, items: Sequence[Finish]) -> None:
        """Write run rows (new or updated) and release leases, one transaction."""

    async def record_skips(self, items: Sequence[Skip]) -> int:
        """Write skip records (deduplicated per job, slot and reason); returns rows written."""

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        """Extend ``(job_id, token, seconds)`` leases still held (long runs without timeout)."""

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        """Mark runs whose holder died (lease and deadline expired) ``interrupted``; write
        an ``interrupted`` row for a claimed slot whose holder died before recording it.

        Returns only the runs this call marked, so exactly one instance acts on each.
        """

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        """History, newest first."""

    async def get_run(self, run_id: int) -> RunRecord | None: ...

    async def prune(
        self,
        *,
        claims_older_than: float,
        runs_older_than: float,
        runs_per_job: int,
    ) -> tuple[int, int]:
        """Delete old claims (keeping each job's newest) and old runs; returns counts."""


@runtime_checkable
class EarlyClaimStore(Store, Protocol):
    """A store that supports early claims (``Dispatch.early``) and can withdraw them.

    Its ``dispatch`` must never report a failure for a transaction that may have committed
    an early claim: the scheduler claims such slots again at their time.
    """

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        """Undo early claims not started: delete each ``(job_id, slot, token)`` claim and
        release the job's lease if that token still holds it, one transaction, as if the
        slot had never been claimed (where catch-up starts included). Returns the number of
        claims deleted."""
