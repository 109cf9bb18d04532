"""The store driver: the orchestration of every ledger transaction and every store rule,
written once, over per-backend transports that only execute named operations.

Three layers (Procrastinate's manager over its connector; one module per data store):

* **Plans** (this module): a transaction's steps -- claims, then leases, then the ledger's
  decision (:mod:`cronfleet.store.ledger`), then the inserts -- as a generator that yields
  ``(operation name, arguments)`` and receives each operation's result. A plan never
  touches a database, so the same plan runs on SQLite's thread (synchronously, inside one
  ``BEGIN IMMEDIATE``) and on PostgreSQL's connection (awaited, inside one ``BEGIN``):
  :func:`drive` and :func:`drive_async` step it. A transaction's round trips are exactly
  the operations the plan yields: nothing is split to be shared.
* **The driver** (:class:`StoreDriver`): the Store contract once -- each method holds
  the operation's decisions and rules (what a batch claims and leases, one lease per job,
  registry chunking, liveness by ttl, retention by :class:`Retention`) and calls its
  transport: ``run_plan`` (one transaction) or ``call`` (one named operation).
* **Transports**: ``sqlite/transport.py`` + ``sqlite/ops.py``, ``postgres/transport.py``
  + ``postgres/ops.py``, ``memory.MemoryTransport``: a connection (or the dicts), one
  transaction per plan, and the named operations (:data:`OPERATIONS` for the plans), each
  one named SQL statement (or a few, for the dialect's own mechanics) plus its row mapping.

Redis keeps each ledger transaction in one Lua script (its atomicity: the driver does not
split it): ``RedisStore`` overrides those methods with its script calls, and shares the
driver's single-call operations (``redis/ops.py``), its rules (:func:`live`,
:data:`REGISTRY_CHUNK`, :class:`Retention` via ``prune.lua``) and the ledger's decisions.
THE watermark rule is :func:`cronfleet.store.base.watermark`, applied by every store's
row mapper.
"""

from __future__ import annotations

from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Container,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

from cronfleet.errors import StoreError
from cronfleet.model import JobState, RunRecord, RunStatus
from cronfleet.store import ledger
from cronfleet.store.base import (
    Declared,
    Dispatch,
    Dispatched,
    DispatchKind,
    Finish,
    FleetRequest,
    Heartbeat,
    Instance,
    LostInstances,
    RunCursor,
    RunFilter,
    RunPage,
    Skip,
    SlotRun,
    SlotRunPage,
    Start,
    Started,
)
from cronfleet.store.queries import find_runs_query, history_query

__all__ = [
    "OPERATIONS",
    "REGISTRY_CHUNK",
    "ClaimRow",
    "Op",
    "Plan",
    "Retention",
    "RunRow",
    "dispatch_plan",
    "drive",
    "drive_async",
    "finish_plan",
    "live",
    "lost_plan",
    "reap_plan",
    "registry_changes",
    "release_plan",
    "renew_plan",
    "start_plan",
]

T = TypeVar("T")
Op = tuple[str, tuple[Any, ...]]
Plan = Generator[Op, Any, T]
"""A transaction's steps: yields ``(operation, args)``, receives the result, returns the
transaction's result."""

OPERATIONS = {
    # name:           (arguments) -> result; ``now`` is the transaction's, added by the transport
    "claim_slots": "(instance, [[job, slot ms], ...]) -> {(job, slot ms): token} of the won",
    "draw_tokens": "(instance, [job, ...]) -> [token, ...] in that order (manual runs)",
    "reclaim": "(instance, job, old token, slot ms) -> new token, or None (lost the race)",
    "take_leases": "(instance, [(job, token, hold, lanes), ...]) -> (acquired, holders)",
    "delete_claims": "([token, ...]) -> None (early claims whose lease was busy)",
    "insert_runs": "([RunRecord, ...]) -> None; gives each record its id",
    "start_runs": "([(run id, deadline ms), ...]) -> None (pending runs become running)",
    "skip_busy": "([(run id, log line), ...]) -> None (skipped / already_executing)",
    "runs_by_id": "([run id, ...]) -> {run id: RunRecord}",
    "finish_rows": "(new records, changed records) -> None (the late-result fence included)",
    "release_leases": "([[job, token], ...]) -> rows matched on lane 0",
    "release_lanes": "([[job, token], ...]) -> None (lanes 1..N-1)",
    "renew_leases": "([[job, token, until ms], ...]) -> rows matched on lane 0",
    "renew_lanes": "([[job, token, until ms], ...]) -> None",
    "renew_deadlines": "([[job, token, until ms], ...]) -> None",
    "reap": "((before, anon, after) log parts) -> [RunRecord marked interrupted]",
    "lost_runs": "() -> [(job, token, holder, slot, claimed_at)]: leased, expired, no row",
    "declare_lost": "(survivor, ttl) -> [Instance] declared lost now",
    "leases_of": "([instance, ...]) -> [(job, token, holder, slot, claimed_at, has_run)]",
    "interrupt_lost": "([[instance, error, log], ...]) -> [RunRecord marked interrupted]",
    "withdraw_claims": "([(job, slot ms, token), ...]) -> claims deleted (none with a run row)",
}
"""The operations a SQL transport executes for the plans (the transport's whole hot-path
vocabulary)."""

REGISTRY_CHUNK = 2_000
"""Registry rows per write -- one transaction (SQL stores) or one script call (Redis) each:
100,000 rows in one went past the call limit on a loaded machine (SQLite, PostgreSQL) or
held the server for a second (Redis). Readers may see a part of a large set for a moment,
as with any later change."""


# -- stepping a plan ------------------------------------------------------------------------


def drive(plan: Plan[T], execute: Callable[[str, tuple[Any, ...]], Any]) -> T:
    """Run ``plan`` to its end, each operation through ``execute`` (synchronously)."""
    result: Any = None
    while True:
        try:
            name, args = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        result = execute(name, args)


async def drive_async(
    plan: Plan[T], execute: Callable[[str, tuple[Any, ...]], Awaitable[Any]]
) -> T:
    """:func:`drive`, each operation awaited."""
    result: Any = None
    while True:
        try:
            name, args = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        result = await execute(name, args)


# -- the plans ------------------------------------------------------------------------------


def _utc(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, UTC)


def _ms(ts: float) -> int:
    return round(ts * 1000)


def check_one_lease_per_job(leases: Iterable[tuple[str, Any, Any, int]]) -> None:
    """A batch takes at most one lane-0 lease per job (items with lanes > 1 are exempt)."""
    single = [w[0] for w in leases if w[3] == 1]
    if len(set(single)) != len(single):
        raise StoreError("one batch may take at most one lease per job")


def release_plan(pairs: Sequence[Sequence[Any]]) -> Plan[None]:
    """Release ``[job, token]`` leases, fenced by token: lane 0 in one statement, and the
    lanes 1..N-1 only when that matched fewer rows than asked (N = 1 costs one statement)."""
    if pairs:
        rows = [[p[0], p[1]] for p in pairs]
        if (yield "release_leases", (rows,)) < len(rows):
            yield "release_lanes", (rows,)


def dispatch_plan(
    items: Sequence[Dispatch], instance: str, now: datetime
) -> Plan[list[Dispatched]]:
    """THE dispatch transaction (see :class:`~cronfleet.store.base.DispatchKind`):
    1. the claims (one statement for the batch's slots, tokens for manual runs, a
    re-claim per recovery), 2. the leases of the runs that start now (one statement),
    an early claim kept only with its lease, 3. the run rows as the ledger decides."""
    out = [Dispatched(request=it, won=False) for it in items]
    slot_ms = [_ms(it.slot) for it in items]
    recovery = DispatchKind.RECOVERY
    # 1. claims
    slot_idx = [i for i, it in enumerate(items) if it.claim == "slot" and it.kind is not recovery]
    if slot_idx:
        won = yield "claim_slots", (instance, [[items[i].job_id, slot_ms[i]] for i in slot_idx])
        for i in slot_idx:
            tok = won.get((items[i].job_id, slot_ms[i]))
            if tok is not None:
                out[i].won, out[i].token = True, tok
    token_idx = [i for i, it in enumerate(items) if it.claim == "token"]
    if token_idx:  # manual runs: a fencing token without a slot
        tokens = yield "draw_tokens", (instance, [items[i].job_id for i in token_idx])
        for i, tok in zip(token_idx, tokens, strict=True):
            out[i].won, out[i].token = True, tok
    for i, it in enumerate(items):
        if it.kind is recovery:  # crash recovery: rare, one row at a time
            tok = yield "reclaim", (instance, it.job_id, it.reclaim_token, slot_ms[i])
            if tok is not None:
                out[i].won, out[i].token = True, tok
        elif it.claim == "none":
            out[i].won = True
    # 2. the leases of the runs that start now (the watermark is derived from the claims:
    #    nothing to write for it)
    lease_idx = [
        i for i, d in enumerate(out)
        if d.won and items[i].lease and not items[i].defer and not items[i].skip_reason
    ]  # fmt: skip
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    if lease_idx:
        leases = [(items[i].job_id, out[i].token, items[i].hold, items[i].lanes)
                  for i in lease_idx]  # fmt: skip
        check_one_lease_per_job(leases)
        acquired, holders = yield "take_leases", (instance, leases)
    # an early claim is kept only with its lease: where the lease is busy, the claim goes
    # again (no other transaction ever saw it) and the slot is decided at its time
    gone = [
        i for i in lease_idx
        if items[i].kind is DispatchKind.EARLY
        and not ledger.lease_taken(items[i].job_id, out[i].token, items[i].lanes, acquired)
    ]  # fmt: skip
    if gone:
        yield "delete_claims", ([out[i].token for i in gone],)
        for i in gone:
            d = out[i]
            d.won, d.token, d.busy = False, None, True
            d.holder = holders.get(d.request.job_id)
    # 3. the run row of each won slot, as the ledger decides; fast-path runs (record=False)
    #    are written by the scheduler's group commit after their handler has started
    slot_dt: dict[int, datetime] = {}
    until: dict[float, datetime] = {}
    slots = []
    for at in slot_ms:  # one datetime per instant
        slot = slot_dt.get(at)
        if slot is None:
            slot = slot_dt[at] = _utc(at)
        slots.append(slot)
    deadlines = []
    for it in items:
        deadline = until.get(it.hold)
        if deadline is None:
            deadline = until[it.hold] = now + timedelta(seconds=it.hold)
        deadlines.append(deadline)
    to_insert = ledger.dispatch_runs(
        out, slots=slots, deadlines=deadlines, now=now, instance=instance,
        acquired=acquired, holders=holders,
    )  # fmt: skip
    if to_insert:
        yield "insert_runs", (to_insert,)
    return out


def start_plan(items: Sequence[Start], instance: str, now: datetime) -> Plan[list[Started]]:
    """Take the leases of pending runs; each becomes running, or skipped (the lease busy),
    or stays pending (``wait_if_busy``); the touched rows are read back."""
    out = [Started(request=it, run=None) for it in items]
    leases = [(it.job_id, it.token, it.hold, it.lanes) for it in items if it.lease]
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    if leases:
        check_one_lease_per_job(leases)
        acquired, holders = yield "take_leases", (instance, leases)
    now_ms = _ms(now.timestamp())
    run_now: list[tuple[int, int]] = []
    skip_now: list[tuple[int, str]] = []
    waiting: set[int] = set()
    for st, it in zip(out, items, strict=True):
        if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
            st.holder = holders.get(it.job_id)
            if it.wait_if_busy:
                waiting.add(it.run_id)
            else:
                skip_now.append((it.run_id, ledger.busy_log(st.holder, it.lanes)))
            continue
        run_now.append((it.run_id, now_ms + _ms(it.hold)))
    if run_now:
        yield "start_runs", (run_now,)
    if skip_now:
        yield "skip_busy", (skip_now,)
    touched = [it.run_id for it in items if it.run_id not in waiting]
    if touched:
        by_id = yield "runs_by_id", (touched,)
        for st in out:
            if st.request.run_id not in waiting:
                st.run = by_id.get(st.request.run_id)
    return out


def finish_plan(items: Sequence[Finish]) -> Plan[list[RunRecord]]:
    """Write the run rows (new ones inserted, known ones updated behind the late-result
    fence) and release the leases, one transaction. Returns the new records (their ids
    are set; a caller clears them when the transaction fails)."""
    new = [f.run for f in items if f.run.id is None]
    changed = [f.run for f in items if f.run.id is not None]
    yield "finish_rows", (new, changed)
    yield from release_plan(
        [(f.run.job_id, f.release_token) for f in items if f.release_token is not None]
    )
    return new


def renew_plan(items: Sequence[tuple[str, int, float]], now: datetime) -> Plan[None]:
    """Extend held leases (lane 0, then the lanes only when lane 0 matched fewer) and the
    deadlines of their runs."""
    now_ms = _ms(now.timestamp())
    rows = [[j, tok, now_ms + _ms(hold)] for j, tok, hold in items]
    if (yield "renew_leases", (rows,)) < len(rows):  # max_instances > 1: lanes 1..N-1
        yield "renew_lanes", (rows,)
    yield "renew_deadlines", (rows,)


def reap_plan(instance: str, now: datetime) -> Plan[list[RunRecord]]:
    """Mark ``interrupted`` the runs whose holder died (lease and deadline expired), write
    that row for a claimed and leased slot whose holder died before writing it, and free
    those leases."""
    reaped = yield "reap", (ledger.interrupted_log_parts(instance),)
    lost = yield "lost_runs", ()
    rebuilt = [
        ledger.lost_run(job_id, token, holder, slot, claimed, now=now, marked_by=instance)
        for job_id, token, holder, slot, claimed in lost
    ]
    if rebuilt:
        yield "insert_runs", (rebuilt,)
        yield from release_plan([(r.job_id, r.fencing_token) for r in rebuilt])
    return [*reaped, *rebuilt]


def lost_plan(me: str, ttl: float, now: datetime) -> Plan[LostInstances]:
    """Declare lost every other instance silent for ``ttl`` and break its leases: its open
    runs interrupted, a leased slot it never wrote gets its row, its leases released.
    The lease rows are read (and, on PostgreSQL, locked in job order) before the runs
    are written, the lock order of every lease writer."""
    out = LostInstances()
    out.instances = yield "declare_lost", (me, ttl)
    if not out.instances:
        return out
    lost = [i.instance_id for i in out.instances]
    leases = yield "leases_of", (lost,)
    rows = [[i, ledger.instance_lost_error(i), ledger.instance_lost_log(i, ttl, me)]
            for i in lost]  # fmt: skip
    out.runs = yield "interrupt_lost", (rows,)
    rebuilt = [
        ledger.instance_lost_run(job_id, token, holder, slot, claimed, now=now, ttl=ttl,
                                 marked_by=me)
        for job_id, token, holder, slot, claimed, has_run in leases
        if claimed is not None and not has_run
    ]  # fmt: skip
    if rebuilt:
        yield "insert_runs", (rebuilt,)
    out.runs.extend(rebuilt)
    yield from release_plan([(j, tok) for j, tok, *_ in leases])
    return out


# -- rules shared by every store ------------------------------------------------------------


def live(lost_at: Any, heartbeat_at: Any, cut: Any) -> bool:
    """THE liveness rule: not declared lost and a heartbeat at or after ``cut`` (now minus
    the ttl, in the store's own time unit)."""
    return lost_at is None and heartbeat_at is not None and heartbeat_at >= cut


def beat_rows(beat: Heartbeat, me: str, rows: Sequence[Sequence[Any]]) -> Heartbeat:
    """A heartbeat's reading of the instances not declared lost, ``(id, plans, live)`` rows
    in id order (``live``: beat within the ttl, :func:`live`): the live set and its
    digests, and whether another one is stale (silent past the ttl: ``break_lost`` has
    work)."""
    beat.live = tuple(r[0] for r in rows if r[2])
    beat.plans = {r[0]: r[1] or "" for r in rows if r[2]}
    beat.stale = any(not r[2] and r[0] != me for r in rows)
    return beat


def registry_changes(
    had: Mapping[str, str], jobs: Iterable[Declared]
) -> tuple[list[str], list[Declared]]:
    """What an instance's registry write changes: the job ids it no longer declares and
    the rows whose spec is new or changed (by digest)."""
    wanted = {d.job_id: d for d in jobs}
    gone = [j for j in had if j not in wanted]
    put = [d for d in wanted.values() if had.get(d.job_id) != d.digest]
    return gone, put


def chunks(rows: Sequence[T], size: int = REGISTRY_CHUNK) -> Iterable[Sequence[T]]:
    """``rows`` in chunks of ``size`` (each its own short write)."""
    for k in range(0, len(rows), size):
        yield rows[k : k + size]


class ClaimRow(NamedTuple):
    """A claim as the retention rule reads it (times in ms)."""

    token: int
    job_id: str
    slot: int | None  # None: a manual run's slot-less token
    claimed_at: int


class RunRow(NamedTuple):
    """A run row as the retention rule reads it (times in ms)."""

    id: int
    job_id: str
    open: bool  # running or pending
    finished_at: int | None
    claimless_skip: bool  # a record_skips row (the watermark reads the newest)


@dataclass(frozen=True, slots=True)
class Retention:
    """THE retention rule (``Store.prune``), in code: :meth:`kept_claims` and
    :meth:`kept_runs` decide what survives a pass. The memory store prunes by calling
    them; the SQL statements (``prune_*`` in each ``queries.sql``) and ``prune.lua``
    implement the same decision where the rows are, and the conformance test
    ``test_retention_is_the_one_rule`` checks every store against these two methods.

    * claims: deleted when ``claimed_at < claims_before``, except each job's claim of its
      newest slot (the watermark reads it); slot-less manual tokens are not kept;
    * runs: first every finished run (not running / pending) with ``finished_at <
      runs_before`` goes; then, among the job's runs left, every finished run beyond the
      newest ``runs_per_job`` (by id); each job's newest claim-less skip stays whatever
      its age or rank (the watermark reads it).

    Times are compared in integer milliseconds, as every store keeps them.
    """

    claims_before: float
    runs_before: float
    runs_per_job: int

    @property
    def claims_cut(self) -> int:
        return round(self.claims_before * 1000)

    @property
    def runs_cut(self) -> int:
        return round(self.runs_before * 1000)

    def kept_claims(self, claims: Iterable[ClaimRow]) -> set[tuple[str, int]]:
        """The ``(job, token)`` of the claims that survive (a token is unique per job)."""
        rows = list(claims)
        newest: dict[str, int] = {}
        for c in rows:
            if c.slot is not None and (c.job_id not in newest or newest[c.job_id] < c.slot):
                newest[c.job_id] = c.slot
        cut = self.claims_cut
        return {(c.job_id, c.token) for c in rows
                if c.claimed_at >= cut or (c.slot is not None and c.slot == newest[c.job_id])}

    def kept_runs(self, runs: Iterable[RunRow]) -> set[int]:
        """The ids of the runs that survive."""
        rows = sorted(runs, key=lambda r: r.id, reverse=True)
        newest_skip: dict[str, int] = {}
        for r in rows:
            if r.claimless_skip and r.job_id not in newest_skip:
                newest_skip[r.job_id] = r.id
        protected = {r.id for r in rows if r.open or newest_skip.get(r.job_id) == r.id}
        cut = self.runs_cut
        left = [r for r in rows if r.id in protected
                or r.finished_at is None or r.finished_at >= cut]  # fmt: skip
        rank: dict[str, int] = {}
        kept = set()
        for r in left:  # newest first
            rank[r.job_id] = n = rank.get(r.job_id, 0) + 1
            if r.id in protected or n <= self.runs_per_job:
                kept.add(r.id)
        return kept


class SqlTransport(Protocol):
    """What :class:`StoreDriver` needs of a SQL backend: plans and single operations, each
    in one transaction, and the dialect's run-query shape."""

    @property
    def known(self) -> set[str] | None:
        """Job ids whose state row is known to exist (a lease needs no ``ensure`` first);
        None for a backend that ensures the rows inside its own operations (memory,
        Redis: a set of every job id would be ~100 bytes a job held for nothing)."""

    placeholder: str
    """The driver's parameter mark (``?`` for sqlite3, ``%s`` for psycopg)."""

    def query_time(self, at: datetime) -> Any:
        """A datetime as the dialect compares it with a ``slot`` column."""
        ...

    def any_job(self) -> tuple[str, Callable[[list[str]], Any]]:
        """The dialect's "job_id among a list" clause and its parameter."""
        ...

    def query(self, name: str) -> str:
        """The text of a named query."""
        ...

    async def run_plan(
        self, plan: Callable[[datetime], Plan[T]], *,
        ambiguous: Callable[[T], None] | None = None,
    ) -> T:
        """Run the plan ``plan(now)`` in one transaction (``now``: the transaction's
        time), executing each operation it yields; retried as a whole where the backend
        retries (a fresh plan per attempt)."""
        ...

    async def call(self, name: str, *args: Any, tx: bool = True) -> Any:
        """One named operation in a transaction of its own (``tx=False``: a plain read)."""
        ...

    async def prune(self, rule: Retention) -> tuple[int, int]:
        """Delete what ``rule`` does not keep; ``(claims, runs)`` deleted."""
        ...


class StoreDriver:
    """The Store contract, once, for every SQL store: each method holds the operation's
    decisions and rules and calls its transport (one plan = one transaction, or one named
    operation). A backend subclass sets :attr:`transport` and adds only what it alone
    has (its plumbing, its lifecycle, its announcements).
    """

    transport: SqlTransport

    def _remember(self, kind: str, result: Any) -> None:
        """A transaction whose ``COMMIT`` went unanswered (``kind``: dispatch, start):
        what the backend does about it (PostgreSQL: give back what it can once back)."""

    # -- job state ----------------------------------------------------------------------

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        ids = list(job_ids)
        states: dict[str, JobState] = await self.transport.call("ensure_jobs", ids)
        if self.transport.known is not None:
            self.transport.known.update(ids)
        return states

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        return await self.transport.call("read_states", list(job_ids), tx=False)  # type: ignore[no-any-return]

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        """Only the rows with an override (a partial index): the batch's ids never travel."""
        found: dict[str, JobState] = await self.transport.call("read_overrides", tx=False)
        if not found:
            return found
        wanted = set(job_ids)
        return {k: v for k, v in found.items() if k in wanted}

    async def set_override(
        self, job_id: str, enabled: bool | None, *, by: str | None, note: str | None,
        until: datetime | None,
    ) -> JobState:
        return await self.transport.call("set_override", job_id, enabled, by, note, until)  # type: ignore[no-any-return]

    # -- the hot path -------------------------------------------------------------------

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        if not items:
            return []
        reqs = list(items)
        leased = [it.job_id for it in reqs if it.lease and not it.defer and not it.skip_reason]
        check_one_lease_per_job(
            (it.job_id, None, None, it.lanes) for it in reqs
            if it.lease and not it.defer and not it.skip_reason
        )  # fmt: skip
        out = await self.transport.run_plan(
            lambda now: dispatch_plan(reqs, instance_id, now),
            ambiguous=lambda got: self._remember("dispatch", got),
        )
        if self.transport.known is not None:
            self.transport.known.update(leased)  # their state rows exist now
        return out

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        """Give back early claims not started (see ``EarlyClaimStore``): claims deleted
        (fenced by token), leases released, watermarks as if they were never made."""
        if not items:
            return 0
        rows = [(job_id, _ms(slot), token) for job_id, slot, token in items]
        return await self.transport.run_plan(lambda now: withdraw_plan(rows))

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        if not items:
            return []
        reqs = list(items)
        return await self.transport.run_plan(
            lambda now: start_plan(reqs, instance_id, now),
            ambiguous=lambda out: self._remember("start", out),
        )

    async def finish(self, items: Sequence[Finish]) -> None:
        if not items:
            return
        reqs = list(items)
        new = [f.run for f in reqs if f.run.id is None]
        try:
            await self.transport.run_plan(lambda now: finish_plan(reqs))
        except BaseException:
            for r in new:  # rolled back (or unknown): a retry must insert them again
                r.id = None
            raise

    async def record_skips(self, items: Sequence[Skip]) -> int:
        if not items:
            return 0
        return await self.transport.call("record_skips", skip_rows(items))  # type: ignore[no-any-return]

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        if not items:
            return
        reqs = sorted(items)
        await self.transport.run_plan(lambda now: renew_plan(reqs, now))

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        return await self.transport.run_plan(lambda now: reap_plan(instance_id, now))

    # -- instances ----------------------------------------------------------------------

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        # the usual beat outside a transaction (PostgreSQL: one round trip instead of
        # five); a missing or lost row is (re-)registered in a transaction of its own
        beat: Heartbeat | None = await self.transport.call("beat", me, ttl, tx=False)
        if beat is None:
            beat = await self.transport.call("heartbeat", me, ttl)
        return beat

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        return await self.transport.run_plan(lambda now: lost_plan(instance_id, ttl, now))

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        return await self.transport.call("instances_all", ttl)  # type: ignore[no-any-return]

    async def leave(self, instance_id: str) -> None:
        await self.transport.call("instance_leave", instance_id)

    # -- the job registry and requests --------------------------------------------------

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        """The changed rows go in chunks of :data:`REGISTRY_CHUNK`, one short transaction
        each (the loop gets a turn between two: building 100,000 rows in one go held it)."""
        if jobs is not None:
            had = await self.transport.call("registry_of", instance_id)
            gone, put = registry_changes(had, jobs)
            for dropped in chunks(gone):
                await self.transport.call("registry_drop", instance_id, dropped)
            for written in chunks(put):
                await self.transport.call("registry_put", instance_id, written)
        await self.transport.call("registry_touch", instance_id)

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        return await self.transport.call("registry_all", ttl)  # type: ignore[no-any-return]

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        return await self.transport.call("request_add", request)  # type: ignore[no-any-return]

    async def take_requests(self, instance_id: str, job_ids: Container[str]
                            ) -> list[FleetRequest]:
        # a read of the open requests (few: usually none), then a take of those meant
        # here; the take checks again that each is still untaken (another caller may
        # have taken it in between)
        open_ = await self.transport.call("requests_open", instance_id, tx=False)
        ids = [rid for rid, job_id, target in open_
               if target == instance_id or (target is None and job_id in job_ids)]
        if not ids:
            return []
        return await self.transport.call("requests_take", instance_id, ids)  # type: ignore[no-any-return]

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        return await self.transport.call(  # type: ignore[no-any-return]
            "request_answer", request_id, run_id, error, only_untaken)

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        return await self.transport.call("request_note", request_id, payload)  # type: ignore[no-any-return]

    async def get_request(self, request_id: int) -> FleetRequest | None:
        return await self.transport.call("request_get", request_id, tx=False)  # type: ignore[no-any-return]

    # -- reading the ledger -------------------------------------------------------------

    async def list_runs(
        self, job_id: str | None = None, *, limit: int = 50, status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        t = self.transport
        sql, args = history_query(
            t.query("runs").rstrip(), job_id=job_id,
            status=None if status is None else RunStatus(status).value,
            before_id=before_id, limit=limit, placeholder=t.placeholder,
        )  # fmt: skip
        return await t.call("runs_query", sql, args, tx=False)  # type: ignore[no-any-return]

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        t = self.transport
        sql, args = history_query(t.query("slot_runs").rstrip(), job_id=job_id, status=None,
                                  before_id=before_id, limit=limit, placeholder=t.placeholder)
        return await t.call("slot_runs_query", sql, args, tx=False)  # type: ignore[no-any-return]

    async def _find(self, select: str, op: str, where: RunFilter, limit: int,
                    after: RunCursor | None) -> Any:
        """``limit + 1`` rows of ``select`` filtered by ``where`` after ``after`` (the one
        across-jobs query, ``queries.find_runs_query``), read by the operation ``op``."""
        t = self.transport
        sql, args = find_runs_query(
            t.query(select).rstrip(), where, after=after, limit=limit,
            placeholder=t.placeholder, time=t.query_time, any_job=t.any_job(),
        )  # fmt: skip
        return await t.call(op, sql, args, tx=False)

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        return RunPage.of(await self._find("runs", "runs_query", where, limit, after), limit)

    async def find_slot_runs(self, where: RunFilter, *, limit: int,
                             after: RunCursor | None = None) -> SlotRunPage:
        rows = await self._find("job_slot_runs", "job_slot_runs_query", where, limit, after)
        return SlotRunPage.of(rows, limit)

    async def get_run(self, run_id: int) -> RunRecord | None:
        return await self.transport.call("get_run", run_id, tx=False)  # type: ignore[no-any-return]

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        """The newest run of each job, one statement."""
        if not job_ids:
            return {}
        ids = list(dict.fromkeys(job_ids))
        return await self.transport.call("last_runs", ids, tx=False)  # type: ignore[no-any-return]

    async def last_slot_runs(self, job_ids: Sequence[str], *, since: float | None = None,
                             statuses: Collection[RunStatus] = ()) -> dict[str, SlotRun]:
        if not job_ids:
            return {}
        # a job asked twice is one key of the answer: no need to remove repeats first
        return await self.transport.call(  # type: ignore[no-any-return]
            "last_slot_runs", list(job_ids), since, [str(s) for s in statuses], tx=False)

    async def prune(
        self, *, claims_older_than: float, runs_older_than: float, runs_per_job: int
    ) -> tuple[int, int]:
        """Delete old claims and runs by :class:`Retention`; ``(claims, runs)`` deleted."""
        return await self.transport.prune(
            Retention(claims_older_than, runs_older_than, runs_per_job))


def skip_rows(items: Iterable[Skip]) -> list[list[Any]]:
    """``[[job, slot ms, triggered_by, reason, instance, result, logs], ...]``: a skip's
    result defaults to the ledger's :func:`~cronfleet.store.ledger.skip_result`."""
    return [
        [s.job_id, _ms(s.slot), s.triggered_by.value, s.reason, s.instance_id,
         s.result if s.result is not None else ledger.skip_result(s.reason), s.logs]
        for s in items
    ]  # fmt: skip


def withdraw_plan(rows: Sequence[tuple[str, int, int]]) -> Plan[int]:
    """Delete each ``(job, slot ms, token)`` early claim (never one whose slot has a run
    row) and release the leases those tokens hold."""
    deleted = yield "withdraw_claims", (list(rows),)
    yield from release_plan([(j, tok) for j, _, tok in rows])
    return int(deleted)
