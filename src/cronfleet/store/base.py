"""The Store contract: the small, batched set of operations every store implements.

Every method that the loop calls at a burst takes a whole batch and runs as one transaction,
so an instant with 20,000 due jobs costs a handful of statements, not 20,000 round trips.
Every store (SQLite, PostgreSQL, ...) passes the same conformance suite in ``tests/store``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy

__all__ = [
    "ClaimKind",
    "Declared",
    "Dispatch",
    "DispatchKind",
    "Dispatched",
    "EarlyClaimStore",
    "Finish",
    "FleetRequest",
    "Heartbeat",
    "Instance",
    "InstanceStore",
    "LostInstances",
    "RegistryStore",
    "RunCursor",
    "RunFilter",
    "RunPage",
    "SessionFencingStore",
    "Skip",
    "SlotRun",
    "SlotRunPage",
    "SlotRunStore",
    "Start",
    "Started",
    "Store",
    "newest_of_note",
    "slot_runs_of",
    "watermark",
]

ClaimKind = Literal["slot", "token", "none"]


class DispatchKind(enum.Enum):
    """Which kind of request a :class:`Dispatch` is; stores branch on it.

    Request kind -> what :meth:`Store.dispatch` writes (one transaction per batch):

    ============  ===========================  ==================  ===========================
    kind          claim                        lease               run row written here
    ============  ===========================  ==================  ===========================
    scheduled     unique ``(job, slot)``       taken now if        ``record=False`` (hot path):
                  (lost: nothing written)      ``lease``           none, the group commit
                                                                   (:meth:`Store.finish`)
                                                                   writes it; otherwise
                                                                   ``running``; ``defer``:
                                                                   ``pending`` (lease at
                                                                   :meth:`Store.start`); lease
                                                                   busy: ``skipped`` /
                                                                   ``already_executing`` (or
                                                                   ``pending`` with
                                                                   ``wait_if_busy``)
    early         unique ``(job, slot)``, kept  taken now; busy:   none (busy: nothing at all,
                  only with the lease           claim removed      ``Dispatched.busy``)
    missed        unique ``(job, slot)``, or    none               ``skipped`` with
                  none when node-local                             ``skip_reason`` (catch-up)
    manual        a fencing token without a     taken if ``lease`` ``running``; lease busy:
                  slot, or none (node-local)                       ``skipped`` /
                                                                   ``already_executing``
    recovery      the interrupted run's claim   taken if ``lease`` ``running`` (``is_recovery``)
                  replaced by a higher token
    local         none (node-local job: this    none               ``running`` / ``pending``,
                  process decides alone)                           or ``skipped`` when the
                                                                   scheduler set a reason
    ============  ===========================  ==================  ===========================

    Claim-less skips (paused, disabled, store unavailable) are not dispatches: they go
    through :meth:`Store.record_skips`, once per ``(job, slot, reason)``.
    """

    SCHEDULED = "scheduled"
    EARLY = "early"
    MISSED = "missed"
    MANUAL = "manual"
    RECOVERY = "recovery"
    LOCAL = "local"


_SCHEDULED = DispatchKind.SCHEDULED
_EARLY = DispatchKind.EARLY
_SCHEDULE = TriggeredBy.SCHEDULE
_CATCHUP = TriggeredBy.CATCHUP


def _derive_kind(d: Dispatch) -> DispatchKind:
    """The kind the flags describe; raises ``ValueError`` on an impossible combination."""
    if d.claim not in ("slot", "token", "none"):
        raise ValueError(f"Dispatch.claim must be slot, token or none, not {d.claim!r}")
    if d.manual or d.claim == "token":  # a token without a slot: a run asked for now
        if d.claim == "slot" or d.reclaim_token is not None or d.early:
            raise ValueError("a manual Dispatch claims a token (or nothing), never a slot")
        return DispatchKind.MANUAL
    if d.reclaim_token is not None:
        if d.claim != "slot" or d.early or d.skip_reason is not None:
            raise ValueError("a recovery Dispatch (reclaim_token) re-claims its slot and runs")
        return DispatchKind.RECOVERY
    if d.early:
        if d.claim != "slot" or not d.lease or d.record or d.defer or d.skip_reason:
            raise ValueError(
                "an early Dispatch claims its slot with the lease, record=False, "
                "no defer and no skip_reason"
            )
        return DispatchKind.EARLY
    if d.skip_reason is not None:
        return DispatchKind.MISSED
    if d.claim == "none":
        return DispatchKind.LOCAL
    return DispatchKind.SCHEDULED


@dataclass(slots=True, init=False)
class Dispatch:
    """One slot to claim (and usually start) in a batch.

    Build it with the named constructors (:meth:`scheduled`, :meth:`early_claim`,
    :meth:`missed`, :meth:`manual_run`, :meth:`recovery`, :meth:`local`); the keyword
    fields still work, and ``kind`` is then derived from them (an impossible combination
    raises ``ValueError``). See :class:`DispatchKind` for the rows each kind writes.

    ``claim``: ``"slot"`` inserts the unique ``(job_id, slot)`` claim (lost if another
    instance has it); ``"token"`` only draws a fencing token (manual runs); ``"none"``
    neither (node-local jobs).
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

    ``lanes`` (the job's ``max_instances``, default 1): the lease is that many lanes. Lane
    0 is the job's one lease as ever; only when it is busy does an item with ``lanes > 1``
    take a free or expired lane ``1..lanes-1`` (so N=1 costs what it always cost). Such an
    item is exempt from "one lease per job per batch": two items take two lanes.

    ``kind`` is derived (and checked) at construction, in a hand-written ``__init__`` that
    reads the arguments rather than the attributes (a burst builds one per slot). It is
    fixed then: the scheduler may still set ``defer`` or
    ``skip_reason`` afterwards on a node-local or manual request (its own overlap check);
    the stores read those flags for the row, and ``kind`` for what to claim.
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
    kind: DispatchKind | None = None
    params: dict[str, Any] | None = None
    forced_by: str | None = None
    lanes: int = 1

    def __init__(
        self,
        job_id: str,
        slot: float,
        triggered_by: TriggeredBy,
        claim: ClaimKind = "slot",
        lease: bool = False,
        hold: float = 3600.0,
        defer: bool = False,
        wait_if_busy: bool = False,
        is_catchup: bool = False,
        is_recovery: bool = False,
        manual: bool = False,
        skip_reason: str | None = None,
        result: Any = None,
        logs: list[str] | None = None,
        reclaim_token: int | None = None,
        record: bool = True,
        early: bool = False,
        kind: DispatchKind | None = None,
        params: dict[str, Any] | None = None,
        forced_by: str | None = None,
        lanes: int = 1,
    ) -> None:
        # written out (not generated) so that the kind of the common requests is derived
        # from the arguments, not from attribute reads: a burst builds one per slot
        self.job_id = job_id
        self.slot = slot
        self.triggered_by = triggered_by
        self.claim = claim
        self.lease = lease
        self.hold = hold
        self.defer = defer
        self.wait_if_busy = wait_if_busy
        self.is_catchup = is_catchup
        self.is_recovery = is_recovery
        self.manual = manual
        self.skip_reason = skip_reason
        self.result = result
        self.logs = [] if logs is None else logs
        self.reclaim_token = reclaim_token
        self.record = record
        self.early = early
        self.params = params
        self.forced_by = forced_by
        self.lanes = lanes  # the job's max_instances (runtime/requests.py sets it)
        if (
            claim == "slot"
            and not manual
            and reclaim_token is None
            and skip_reason is None
            and (not early or (lease and not record and not defer))
        ):
            derived = _EARLY if early else _SCHEDULED
        else:
            derived = _derive_kind(self)
        if kind is None:
            self.kind = derived
        elif kind is not derived:
            raise ValueError(
                f"Dispatch kind {kind.value} does not match its fields ({derived.value})"
            )
        else:
            self.kind = kind

    # -- named constructors: one per kind ------------------------------------------------

    @classmethod
    def scheduled(
        cls,
        job_id: str,
        slot: float,
        *,
        lease: bool,
        hold: float = 3600.0,
        defer: bool = False,
        wait_if_busy: bool = False,
        catchup: bool = False,
        record: bool | None = None,
        logs: list[str] | None = None,
    ) -> Dispatch:
        """A slot of the schedule claimed at (or after, ``catchup``) its time. ``record``
        defaults to the hot path: a leased run that starts now has its row written by the
        group commit."""
        # positional (the fields' order): a burst builds one per slot
        return cls(
            job_id, slot, _CATCHUP if catchup else _SCHEDULE, "slot", lease, hold, defer,
            wait_if_busy, catchup, False, False, None, None, logs or [], None,
            (not lease or defer) if record is None else record, False, _SCHEDULED,
        )

    @classmethod
    def early_claim(
        cls, job_id: str, slot: float, *, hold: float, catchup: bool = False,
        logs: list[str] | None = None,
    ) -> Dispatch:
        """Claim a plain slot, kept only with the job's lease: shortly before its time,
        or (``catchup``) a slot of a catch-up sequence that must not meet another
        process's run of the same sequence (``Loop.run_sequence``)."""
        # positional (the fields' order): a burst's early claims build one per slot
        return cls(
            job_id, slot, _CATCHUP if catchup else _SCHEDULE, "slot", True, hold, False,
            False, catchup, False, False, None, None, logs, None, False, True, _EARLY,
        )

    @classmethod
    def missed(
        cls,
        job_id: str,
        slot: float,
        *,
        reason: str,
        local: bool = False,
        result: Any = None,
        logs: list[str] | None = None,
    ) -> Dispatch:
        """A slot claimed (nothing, when ``local``) and recorded as skipped (catch-up)."""
        return cls(
            job_id=job_id,
            slot=slot,
            triggered_by=TriggeredBy.CATCHUP,
            claim="none" if local else "slot",
            skip_reason=reason,
            is_catchup=True,
            result=result,
            logs=logs or [],
            kind=DispatchKind.MISSED,
        )

    @classmethod
    def manual_run(
        cls,
        job_id: str,
        now: float,
        *,
        lease: bool,
        hold: float = 3600.0,
        local: bool = False,
        triggered_by: TriggeredBy = TriggeredBy.MANUAL,
        logs: list[str] | None = None,
        params: dict[str, Any] | None = None,
        forced_by: str | None = None,
    ) -> Dispatch:
        """A run asked for now: a fencing token without a slot (nothing when ``local``),
        with its ``params`` and who forced it past a pause (both stored with the run)."""
        return cls(
            job_id=job_id,
            slot=now,
            triggered_by=triggered_by,
            claim="none" if local else "token",
            lease=lease and not local,
            hold=hold,
            manual=True,
            logs=logs or [],
            kind=DispatchKind.MANUAL,
            params=params,
            forced_by=forced_by,
        )

    @classmethod
    def recovery(
        cls,
        job_id: str,
        slot: float,
        *,
        token: int,
        lease: bool,
        hold: float = 3600.0,
        catchup: bool = False,
        logs: list[str] | None = None,
        wait_if_busy: bool = False,
    ) -> Dispatch:
        """Run again the slot of an interrupted run: its claim (``token``) is replaced by
        a new, higher token (only one instance wins that). ``wait_if_busy``: the lease
        busy (the job's next slot runs), the recovery stays ``pending`` until it is free."""
        return cls(
            job_id=job_id,
            slot=slot,
            triggered_by=TriggeredBy.RECOVERY,
            lease=lease,
            hold=hold,
            wait_if_busy=wait_if_busy and lease,
            is_recovery=True,
            is_catchup=catchup,
            reclaim_token=token,
            logs=logs or [],
            kind=DispatchKind.RECOVERY,
        )

    @classmethod
    def backfill(
        cls,
        job_id: str,
        slot: float,
        *,
        token: int | None,
        lease: bool,
        hold: float = 3600.0,
        logs: list[str] | None = None,
    ) -> Dispatch:
        """Run a past slot again (``triggered_by=backfill``), through the claim path of
        the scheduled and recovery kinds: a slot never claimed is claimed (unique
        ``(job, slot)``); a claimed one (``token``: its latest claim) has its claim
        replaced by a higher token, which only one caller wins. Lease busy: ``pending``
        (the caller takes the lease with :meth:`Store.start` once it is free)."""
        if token is None:
            item = cls.scheduled(job_id, slot, lease=lease, hold=hold, record=True, logs=logs,
                                 wait_if_busy=lease)
        else:
            item = cls.recovery(job_id, slot, token=token, lease=lease, hold=hold, logs=logs,
                                wait_if_busy=lease)
            item.is_recovery = False
        item.triggered_by = TriggeredBy.BACKFILL
        return item

    @classmethod
    def local(
        cls,
        job_id: str,
        slot: float,
        *,
        hold: float = 3600.0,
        defer: bool = False,
        catchup: bool = False,
        logs: list[str] | None = None,
    ) -> Dispatch:
        """A slot of a node-local job: no claim and no lease, this process decides."""
        return cls(
            job_id=job_id,
            slot=slot,
            triggered_by=TriggeredBy.CATCHUP if catchup else TriggeredBy.SCHEDULE,
            claim="none",
            hold=hold,
            defer=defer,
            is_catchup=catchup,
            logs=logs or [],
            kind=DispatchKind.LOCAL,
        )


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
    lanes: int = 1  # the job's max_instances (see Dispatch.lanes)


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
    """A slot deliberately not run (paused, disabled, overloaded, store was down, ...),
    recorded without a run: it takes the slot's claim, so a slot claimed already (a run,
    an earlier skip) gets no second row (:meth:`Store.record_skips`)."""

    job_id: str
    slot: float
    reason: str
    triggered_by: TriggeredBy = TriggeredBy.SCHEDULE
    instance_id: str | None = None
    logs: list[str] = field(default_factory=list)
    result: Any = None

    @classmethod
    def of(cls, d: Dispatch, instance_id: str, reason: str) -> Skip:
        """The skip of a planned record (``Dispatch.missed``): the same slot, reason
        (``reason`` when it has none), log and result, through :meth:`Store.record_skips`."""
        return cls(d.job_id, d.slot, d.skip_reason or reason, triggered_by=d.triggered_by,
                   instance_id=instance_id, logs=list(d.logs), result=d.result)


# -- the watermark rule and the retention rule (every store, identically) -------------------


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs :meth:`Store.find_runs` lists, across jobs: every field set must match.

    ``since`` / ``until`` bound the run's ``slot`` (a scheduled run's slot time, a manual
    run's trigger time): ``since <= slot < until``. ``job_ids`` keeps the runs of these
    jobs only (the API's team scoping: the jobs of the caller's team).
    """

    status: RunStatus | None = None
    job_id: str | None = None
    job_ids: frozenset[str] | None = None
    instance_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def matches(self, r: RunRecord) -> bool:
        """The same test as the SQL stores' ``WHERE`` (the memory store uses it)."""
        return (
            (self.status is None or r.status is RunStatus(self.status))
            and (self.job_id is None or r.job_id == self.job_id)
            and (self.job_ids is None or r.job_id in self.job_ids)
            and (self.instance_id is None or r.instance_id == self.instance_id)
            and (self.since is None or r.slot >= self.since)
            and (self.until is None or r.slot < self.until)
        )


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Where a page of :meth:`Store.find_runs` ends: the last run's ``(slot, id)``. Pages are
    newest first by ``(slot, id)``, a stable order: a run written meanwhile never moves a
    run from one page to another. Its text form (``encode``) is opaque to API clients."""

    slot_ms: int
    id: int

    @classmethod
    def after(cls, r: RunRecord) -> RunCursor:
        return cls(round(r.slot.timestamp() * 1000), int(r.id or 0))

    @property
    def slot(self) -> datetime:
        return datetime.fromtimestamp(self.slot_ms / 1000, UTC)

    def encode(self) -> str:
        return f"{self.slot_ms}.{self.id}"

    @classmethod
    def decode(cls, text: str) -> RunCursor:
        """Raises ``ValueError`` naming the cursor when ``text`` is not one of ours."""
        head, sep, tail = str(text).partition(".")
        try:
            if not sep:
                raise ValueError(text)
            return cls(int(head), int(tail))
        except ValueError:
            raise ValueError(
                f"cursor {text!r} is not a cursor this API returned (next_cursor)"
            ) from None


class SlotRun(NamedTuple):
    """The few fields of a run a slot timeline needs (:meth:`SlotRunStore.slot_runs`): a row
    of the ledger without its times, result, logs or params, so that 10,000 of them
    are read in a few milliseconds."""

    id: int
    at: float  # the slot, epoch seconds
    status: RunStatus
    reason: str | None
    manual: bool


def newest_of_note(rows: Mapping[str, SlotRun], since: float | None,
                   statuses: Collection[RunStatus]) -> dict[str, SlotRun]:
    """:meth:`SlotRunStore.last_slot_runs`' ``since`` / ``statuses`` filter, for the
    stores that read every newest run anyway (and for a store without the read)."""
    if since is None:
        return dict(rows)
    return {j: r for j, r in rows.items() if r.at >= since or r.status in statuses}


def slot_runs_of(runs: Iterable[RunRecord]) -> list[SlotRun]:
    """:class:`SlotRun` rows of full records (the stores that read whole rows anyway)."""
    return [SlotRun(r.id, r.slot.timestamp(), r.status, r.reason, r.manual)
            for r in runs if r.id is not None]


@dataclass(slots=True)
class RunPage:
    """One page of :meth:`Store.find_runs`: the runs, newest first, and the cursor of the
    next page (``None`` on the last page)."""

    runs: list[RunRecord]
    next_cursor: RunCursor | None

    @classmethod
    def of(cls, rows: list[RunRecord], limit: int) -> RunPage:
        """The page from ``limit + 1`` rows read: the extra row only says there is more."""
        more = len(rows) > limit
        runs = rows[:limit]
        return cls(runs, RunCursor.after(runs[-1]) if more and runs else None)


@dataclass(frozen=True, slots=True)
class SlotRunPage:
    """One page of :meth:`SlotRunStore.find_slot_runs`: ``(job id, SlotRun)`` pairs,
    newest first by ``(slot, id)``, and the cursor of the next page (``None``: the last)."""

    runs: list[tuple[str, SlotRun]]
    next_cursor: RunCursor | None

    @classmethod
    def of(cls, rows: list[tuple[str, SlotRun]], limit: int) -> SlotRunPage:
        """The page from ``limit + 1`` rows read: the extra row only says there is more."""
        runs = rows[:limit]
        last = runs[-1][1] if len(rows) > limit and runs else None
        return cls(runs, None if last is None else RunCursor(round(last.at * 1000), last.id))

    @classmethod
    def narrowed(cls, page: RunPage) -> SlotRunPage:
        """A :class:`RunPage` of whole rows as this page (the stores that read them anyway)."""
        return cls([(r.job_id, s) for r in page.runs for s in slot_runs_of([r])],
                   page.next_cursor)


def watermark(newest_claimed: float | None, newest_skipped: float | None) -> float | None:
    """Where a restart's catch-up starts for one job (``JobState.last_slot``).

    THE rule, for every store: the newest slot of the job that was **claimed** (a
    ``(job, slot)`` claim row; manual runs' slot-less tokens do not count) or
    **deliberately skipped without a claim** (a :meth:`Store.record_skips` row: paused,
    disabled, store unavailable), whichever is newer; ``None`` when there is neither, and
    the scheduler then starts from the state row's ``created_at``.

    It is *derived* when states are read, never written per slot (that would add a write
    per job per instant to the hot path). A withdrawn early claim is thereby as if never
    made, and :meth:`Store.prune` keeps exactly the rows this rule reads (the retention
    rule, ``cronfleet.store.driver.Retention``).
    """
    if newest_claimed is None:
        return newest_skipped
    if newest_skipped is None:
        return newest_claimed
    return max(newest_claimed, newest_skipped)


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
        """Write skip records, each taking its slot's claim: a slot already claimed (a run,
        an earlier skip of any reason or instance) gets no row, so a slot has one final
        row; returns rows written."""

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

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        """Runs across jobs matching ``where``, newest first by ``(slot, id)``, one page
        after ``after``: one statement per page whatever the number of jobs (indexes
        ``runs_status_slot`` and ``runs_slot``, migration 0005)."""

    async def get_run(self, run_id: int) -> RunRecord | None: ...

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        """The newest run (highest id) of each of these jobs that has one, one statement:
        job lists read it instead of one ``list_runs(limit=1)`` per job."""

    async def prune(
        self,
        *,
        claims_older_than: float,
        runs_older_than: float,
        runs_per_job: int,
    ) -> tuple[int, int]:
        """Delete old claims and runs by the retention rule
        (``cronfleet.store.driver.Retention``); ``(claims, runs)`` deleted."""


def has_lanes(store: object) -> bool:
    """Whether ``store`` keeps a job's lease as lanes (``max_instances`` > 1): a store
    says so with a class attribute ``lanes = True`` (memory, SQLite, PostgreSQL, Redis)."""
    return getattr(store, "lanes", False) is True


@runtime_checkable
class SlotRunStore(Store, Protocol):
    """A store with the slot timeline's narrow read (memory, SQLite, PostgreSQL and Redis
    are; a store without it is read through :meth:`Store.list_runs`)."""

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        """``list_runs(job_id, limit=limit, before_id=before_id)`` as :class:`SlotRun`
        rows (id, slot, status, reason, manual), newest first."""

    async def last_slot_runs(self, job_ids: Sequence[str], *, since: float | None = None,
                             statuses: Collection[RunStatus] = ()) -> dict[str, SlotRun]:
        """``last_runs(job_ids)`` as :class:`SlotRun` rows: each job's newest run (highest
        id), for the pages that only say whether it failed and when (the overview reads
        it for every job of the fleet). With ``since`` (epoch seconds), only the newest
        runs whose slot is at or after it or whose status is one of ``statuses``
        (:func:`newest_of_note`): the few a fleet's overview shows, not one per job."""

    async def find_slot_runs(self, where: RunFilter, *, limit: int,
                             after: RunCursor | None = None) -> SlotRunPage:
        """:meth:`Store.find_runs` as ``(job id, SlotRun)`` pairs: the same runs and
        pages, without their times, results, logs or params (the overview's heat map and
        chart read thousands)."""


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


# -- instances: who is alive (heartbeats by the store's clock) ------------------------------


@dataclass(slots=True)
class Instance:
    """One scheduler process of the fleet, as its row in ``instances`` says.

    ``heartbeat_at`` is written by the store's clock (PostgreSQL: the database's), so hosts
    with skewed clocks agree on who is alive. ``lost_at`` / ``lost_by``: set by the
    survivor that declared it lost and broke its leases. ``live`` is computed when listed:
    not declared lost and a heartbeat younger than the ``ttl`` asked for.
    """

    instance_id: str
    host: str
    pid: int
    role: str
    version: str
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lost_at: datetime | None = None
    lost_by: str | None = None
    live: bool = True
    plans: str = ""
    """A digest of the set of jobs this instance plans (``runtime/ownership.py``): the
    instances that plan the same set share its work; empty when unknown."""


@dataclass(slots=True)
class Heartbeat:
    """What :meth:`InstanceStore.heartbeat` found.

    ``lost``: the row said this instance had been declared lost (``lost_at`` / ``lost_by``
    tell when and by whom); the call re-registered it (a fresh row: ``started_at`` now,
    the survivors broke its leases). ``live``: the ids of the live
    instances, this one included, sorted. ``plans``: each live instance's
    :attr:`Instance.plans` (what ownership hashes over: the live instances that plan the
    same jobs as this one). ``stale``: another instance is silent past the ttl and not
    declared lost yet -- :meth:`InstanceStore.break_lost` has work (a caller may skip it
    otherwise).
    """

    now: float
    lost: bool = False
    lost_at: datetime | None = None
    lost_by: str | None = None
    live: tuple[str, ...] = ()
    plans: dict[str, str] = field(default_factory=dict)
    stale: bool = False


@dataclass(slots=True)
class LostInstances:
    """What :meth:`InstanceStore.break_lost` did: the instances it declared lost (each by
    exactly one survivor) and the run rows it marked or wrote ``interrupted``
    (reason ``instance_lost``), for the caller's recoveries."""

    instances: list[Instance] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)


@runtime_checkable
class SessionFencingStore(Store, Protocol):
    """A store whose server sessions can carry the instance they serve, so that the
    survivor that declares an instance lost ends its sessions too (PostgreSQL): a process
    frozen inside a transaction (SIGSTOP, a VM pause) otherwise holds that transaction's
    claims and row locks until the server's own idle timeout (10 s by default), and the
    jobs whose rows it locked wait that long for their failover."""

    def name_sessions(self, instance_id: str) -> None:
        """Tag the connections opened from now on with ``instance_id`` (before
        :meth:`Store.open`, so that every connection carries it)."""


@runtime_checkable
class InstanceStore(Store, Protocol):
    """A store that keeps the fleet's instances (memory, SQLite, PostgreSQL and Redis do).

    Leases are proof of life: a lease stays valid while its holder heartbeats, and the
    survivors break the leases of an instance whose heartbeat is older than ``ttl``
    (whatever expiry the lease row carries: that stays the backstop of a fleet without
    heartbeats).
    """

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        """Register ``me`` or refresh its heartbeat (store clock) and list the live
        instances (heartbeat younger than ``ttl``), one transaction. An instance found
        declared lost is re-registered and told so (``Heartbeat.lost``)."""

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        """Declare lost every other instance whose heartbeat is older than ``ttl`` and
        break its leases, one transaction: its open runs (running, pending) become
        ``interrupted`` with reason ``instance_lost`` naming it, a claimed and leased
        slot it never wrote a row for gets that ``interrupted`` row (early claims
        included), and its leases are released. Exactly one caller declares each."""

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        """Every registered instance, ``live`` set by ``ttl``, oldest first."""

    async def leave(self, instance_id: str) -> None:
        """Remove this instance's row (a graceful stop)."""


# -- the job registry and requests between processes (#14) -----------------------------------


@dataclass(slots=True)
class Declared:
    """One job as one instance declares it (a row of ``job_registry``).

    ``spec``: what operators see and what the conflict check compares -- ``kind``,
    ``schedule``, ``zone``, the policies, ``description`` and ``config`` (opaque, as
    written). ``digest`` is the SHA-256 of its canonical JSON (two declarers of one id
    agree when their digests do). ``declared_at``: when this instance first declared
    this spec; ``seen_at``: when it last said it still does. ``live`` is computed when
    listed: the declaring instance is live (heartbeat younger than the ttl, not lost).
    """

    job_id: str
    instance_id: str
    team: str
    source: str
    digest: str
    spec: dict[str, Any]
    declared_at: datetime | None = None
    seen_at: datetime | None = None
    live: bool = False


@dataclass(slots=True)
class FleetRequest:
    """A request one process leaves in the store for another (``requests``).

    ``kind`` ``trigger``: run ``job_id`` now on a live instance that declares it
    (``payload``: ``params``, ``force``); ``target``: the instance meant, or ``None`` for
    any live declarer. Taken by exactly one instance (``taken_by``), then answered with
    the run it started (``run_id``) or an ``error``."""

    kind: str
    job_id: str
    requested_by: str
    payload: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    id: int | None = None
    requested_at: datetime | None = None
    taken_by: str | None = None
    taken_at: datetime | None = None
    answered_at: datetime | None = None
    run_id: int | None = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.answered_at is not None


@runtime_checkable
class RegistryStore(InstanceStore, Protocol):
    """A store that keeps the fleet's job registry and its requests (memory, SQLite,
    PostgreSQL and Redis do)."""

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        """Make ``jobs`` the set ``instance_id`` declares, one transaction: rows of jobs
        it no longer declares are deleted, new or changed specs written (``declared_at``
        now), every row of the instance gets ``seen_at`` now. ``None``: only the touch."""

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        """Every registry row, ``live`` set by ``ttl`` (the declaring instance's
        heartbeat), by job id then instance id."""

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        """Store ``request`` (``requested_at`` by the store clock; announced where the
        store can: PostgreSQL ``NOTIFY``); returns it with its ``id``."""

    async def take_requests(
        self, instance_id: str, job_ids: Container[str]
    ) -> list[FleetRequest]:
        """Take every request nobody took yet that is meant for ``instance_id`` or for
        any declarer of a job in ``job_ids``, oldest first (each request is taken by
        exactly one caller). ``job_ids`` is only asked ``in``: a process passes its job
        table itself, never a copy of it (it may hold 250,000 jobs, and the requests
        open at a time are few)."""

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        """Record the answer of a request. ``only_untaken``: only if nobody took it yet
        (a caller giving up withdraws its request so that it never runs late). Returns
        whether the row was answered by this call."""

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        """Replace the payload of a taken, unanswered request (a backfill's progress, so
        that any process reads it). Returns whether the row was written."""

    async def get_request(self, request_id: int) -> FleetRequest | None: ...
