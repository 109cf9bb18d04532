"""An in-memory store: the whole contract (early claims and withdraw included) in plain
dicts, for tests and single-process embedding. It passes the same conformance suite as
SQLite and PostgreSQL (``tests/store``).

Several :class:`MemoryStore` objects on one :class:`MemoryDatabase` behave like several
instances on one database. Every call runs to its end without awaiting in between, so on
one event loop each call is one atomic transaction (asyncio-safe); it is not thread-safe.
Times are kept to the millisecond, as the other stores keep them, and every record handed
out is a copy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronfleet.clock import Clock, SystemClock
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
    Start,
    Started,
    slot_runs_of,
    watermark,
)
from cronfleet.store.driver import ClaimRow, Retention, RunRow, live
from cronfleet.store.rows import dt, ms, msd

__all__ = ["MemoryDatabase", "MemoryStore"]

_OPEN = (RunStatus.RUNNING, RunStatus.PENDING)


@dataclass(slots=True)
class _Claim:
    token: int
    job_id: str
    slot: int | None  # ms; None for a manual run's token
    instance_id: str
    claimed_at: int


@dataclass
class MemoryDatabase:
    """The shared state: what a database file or schema holds."""

    claims: dict[tuple[str, int], _Claim] = field(default_factory=dict)
    tokens: dict[int, _Claim] = field(default_factory=dict)
    last_token: int = 0
    states: dict[str, JobState] = field(default_factory=dict)
    # lanes 1..N-1 of a job's lease (max_instances = N; lane 0 is its JobState): job -> lane
    lanes: dict[str, dict[int, JobState]] = field(default_factory=dict)
    runs: dict[int, RunRecord] = field(default_factory=dict)
    last_run_id: int = 0
    dedupe: dict[tuple[str, int, str], int] = field(default_factory=dict)  # -> run id
    fenced: dict[int, int] = field(default_factory=dict)  # fencing token -> run id
    # what the watermark rule reads, per job: claimed slots and claim-less skip slots (ms)
    claimed: dict[str, set[int]] = field(default_factory=dict)
    skipped: dict[str, dict[int, int]] = field(default_factory=dict)  # slot -> skip rows
    instances: dict[str, Instance] = field(default_factory=dict)  # the fleet, by id
    registry: dict[tuple[str, str], Declared] = field(default_factory=dict)  # (job, instance)
    requests: dict[int, FleetRequest] = field(default_factory=dict)
    last_request_id: int = 0

    # -- the tables' primitives (each store call is one atomic run of these) ---------------

    def last_slot(self, job_id: str) -> datetime | None:
        """The job's ``last_slot`` by the watermark rule (``base.watermark``)."""
        claimed = self.claimed.get(job_id)
        skipped = self.skipped.get(job_id)
        mark = watermark(
            max(claimed) if claimed else None, max(skipped) if skipped else None
        )
        return dt(None if mark is None else int(mark))

    def state(self, job_id: str) -> JobState:
        st = self.states[job_id]
        return dataclasses.replace(st, last_slot=self.last_slot(job_id))

    def ensure(self, job_ids: Sequence[str], now: int) -> list[str]:
        created = []
        for j in job_ids:
            if j not in self.states:
                self.states[j] = JobState(job_id=j, created_at=dt(now))
                created.append(j)
        return created

    def insert(self, rec: RunRecord, now: int, dedupe: str | None = None) -> None:
        db = self
        token = rec.fencing_token
        if token is not None and token in db.fenced:  # one run per token (an upsert)
            rec.id = db.fenced[token]
            self.update(rec, now)
            return
        db.last_run_id += 1
        rec.id = db.last_run_id
        stored = _copy(rec)
        for name in ("claimed_at", "started_at", "finished_at"):
            setattr(stored, name, _ms_dt(getattr(stored, name)))
        stored.slot = dt(msd(stored.slot)) or stored.slot
        stored.deadline = None if rec.status.finished else _ms_dt(rec.deadline)
        db.runs[rec.id] = stored
        if token is not None:
            db.fenced[token] = rec.id
        if dedupe is not None:
            at = msd(rec.slot) or 0
            db.dedupe[(rec.job_id, at, dedupe)] = rec.id
            counts = db.skipped.setdefault(rec.job_id, {})
            counts[at] = counts.get(at, 0) + 1

    def update(self, rec: RunRecord, now: int) -> None:
        stored = self.runs.get(rec.id or 0)
        if stored is None:
            return
        if ledger.is_late(stored.status, rec.status):  # one terminal row per slot
            kept = ledger.attach_late_result(stored, rec, dt(now))
            stored.result, stored.logs = kept.result, kept.logs
            return
        stored.status = rec.status
        stored.reason = rec.reason
        stored.started_at = _ms_dt(rec.started_at)
        stored.finished_at = _ms_dt(rec.finished_at)
        stored.deadline = None if rec.status.finished else _ms_dt(rec.deadline)
        stored.result = rec.result
        stored.error = rec.error
        stored.attempt = rec.attempt
        stored.logs = list(rec.logs)

    def release(self, job_id: str, token: int | None) -> None:
        st = self.states.get(job_id)
        if st is not None and token is not None and st.lease_token == token:
            st.lease_holder = st.lease_token = st.lease_until = None
            return
        for lane in self.lanes.get(job_id, {}).values():
            if token is not None and lane.lease_token == token:
                lane.lease_holder = lane.lease_token = lane.lease_until = None

    def leases(self, job_ids: Sequence[str] | None) -> list[JobState]:
        """Every lease row (lane 0 and the lanes) of these jobs (None: of every job)."""
        db = self
        ids = db.states.keys() if job_ids is None else [j for j in job_ids if j in db.states]
        out = []
        for j in ids:
            out.append(db.states[j])
            out.extend(db.lanes.get(j, {}).values())
        return out

    def lease_of(self, job_id: str, token: int | None) -> JobState | None:
        """The lease row (any lane) that ``token`` holds."""
        if token is None:
            return None
        for st in self.leases([job_id]):
            if st.lease_token == token:
                return st
        return None

    def has_run(self, job_id: str, token: int) -> bool:
        rid = self.fenced.get(token)
        return rid is not None and self.runs[rid].job_id == job_id

    def lost(self, now: int, job_ids: Sequence[str] | None) -> list[tuple[JobState, _Claim]]:
        """Expired leases whose holder never wrote its run (claim still there)."""
        db = self
        out = []
        for st in self.leases(job_ids):
            tok = st.lease_token
            if tok is None or st.lease_until is None or msd(st.lease_until) > now:  # type: ignore[operator]
                continue
            claim = db.tokens.get(tok)
            if claim is not None and claim.job_id == st.job_id and not self.has_run(
                st.job_id, tok
            ):
                out.append((st, claim))
        return out

    def take_leases(
        self, leases: list[tuple[str, int | None, float, int]], instance: str, now: int
    ) -> tuple[set[str], dict[str, str | None]]:
        if not leases:
            return set(), {}
        single = [j for j, _, _, n in leases if n == 1]
        if len(set(single)) != len(single):
            raise StoreError("one batch may take at most one lease per job")
        ids = [j for j, _, _, _ in leases]
        self.ensure(ids, now)
        overdue = dt(now - 1)
        assert overdue is not None
        for st, c in self.lost(now, ids):  # keep what an expired lease proves
            self.insert(
                ledger.kept_lost_run(
                    st.job_id, c.token, st.lease_holder, dt(c.slot), dt(c.claimed_at) or overdue,
                    overdue=overdue,
                ),
                now,
            )
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for j, tok, hold, n in leases:
            row: JobState | None = self.states[j]
            if n > 1 and row is not None and not _free(row, now):
                # lane 0 busy: a free or expired lane 1..n-1
                lanes = self.lanes.setdefault(j, {})
                row = None
                for lane in range(1, n):
                    cand = lanes.setdefault(lane, JobState(job_id=j))
                    if _free(cand, now):
                        row = cand
                        break
            if row is not None and _free(row, now):
                row.lease_holder, row.lease_token = instance, tok
                row.lease_until = dt(now + ms(hold))
                acquired.add(j if n == 1 else ledger.lane_key(tok))
            elif n == 1:
                holders[j] = self.states[j].lease_holder
            else:
                busy = [self.states[j], *(self.lanes[j].get(k) for k in range(1, n))]
                holders[j] = ", ".join(sorted({
                    b.lease_holder for b in busy if b is not None and b.lease_holder
                }))
        return acquired, holders

    def new_claim(self, job_id: str, slot: int | None, instance: str, now: int) -> _Claim:
        db = self
        db.last_token += 1
        claim = _Claim(db.last_token, job_id, slot, instance, now)
        db.tokens[claim.token] = claim
        if slot is not None:
            db.claims[(job_id, slot)] = claim
            db.claimed.setdefault(job_id, set()).add(slot)
        return claim

    def drop_claim(self, claim: _Claim) -> None:
        self.tokens.pop(claim.token, None)
        if claim.slot is not None:
            self.claims.pop((claim.job_id, claim.slot), None)
            self.claimed.get(claim.job_id, set()).discard(claim.slot)

    def live_ids(self, now: int, ttl: float) -> tuple[str, ...]:
        cut = now - ms(ttl)
        return tuple(sorted(
            i.instance_id for i in self.instances.values()
            if live(i.lost_at, msd(i.heartbeat_at) or 0, cut)
        ))  # fmt: skip


def _free(st: JobState, now: int) -> bool:
    """A lease row (lane) no one holds, or whose holder's time ran out."""
    return st.lease_holder is None or (msd(st.lease_until) or 0) <= now


def _copy(r: RunRecord) -> RunRecord:
    return dataclasses.replace(r, logs=list(r.logs))


def _req(value: datetime | None) -> datetime:
    assert value is not None
    return value


def _ms_dt(d: datetime | None) -> datetime | None:
    return dt(msd(d))


class MemoryStore:
    """Claims, leases, overrides and the run ledger in memory (see the module doc)."""

    lanes = True  # max_instances > 1: lanes 1..N-1 in MemoryDatabase.lanes

    def __init__(self, db: MemoryDatabase | None = None, *, clock: Clock | None = None) -> None:
        self.db = db if db is not None else MemoryDatabase()
        self.clock: Clock = clock or SystemClock()
        self.url = "memory://"
        self._open = False

    def __repr__(self) -> str:
        return f"MemoryStore(id={id(self.db):#x})"

    # -- plumbing -------------------------------------------------------------------------

    def _db(self) -> MemoryDatabase:
        if not self._open:
            raise StoreError(f"{self!r} is not open")
        return self.db

    def _now(self) -> int:
        return ms(self.clock.now())

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def now(self) -> float:
        return self.clock.now()

    # -- job state ----------------------------------------------------------------------------

    async def ensure_jobs(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        self._db()
        self.db.ensure(job_ids, self._now())
        return await self.read_states(job_ids)

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        db = self._db()
        return {j: self.db.state(j) for j in dict.fromkeys(job_ids) if j in db.states}

    async def read_overrides(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        db = self._db()
        return {
            j: self.db.state(j)
            for j in dict.fromkeys(job_ids)
            if j in db.states and db.states[j].enabled_override is not None
        }

    async def set_override(
        self,
        job_id: str,
        enabled: bool | None,
        *,
        by: str | None,
        note: str | None,
        until: datetime | None,
    ) -> JobState:
        db = self._db()
        now = self._now()
        self.db.ensure([job_id], now)
        st = db.states[job_id]
        st.enabled_override, st.override_by, st.override_note = enabled, by, note
        st.override_at = dt(now)
        st.override_until = _ms_dt(until)
        return self.db.state(job_id)

    # -- the hot path -------------------------------------------------------------------------

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        self._db()
        leased = [
            it.job_id for it in items
            if it.lease and not it.defer and not it.skip_reason and it.lanes == 1
        ]
        if len(set(leased)) != len(leased):
            raise StoreError("one batch may take at most one lease per job")
        now = self._now()
        out = [Dispatched(request=it, won=False) for it in items]
        for d, it in zip(out, items, strict=True):
            if it.kind is DispatchKind.RECOVERY:
                old = self.db.tokens.get(it.reclaim_token or 0)
                if old is not None and old.job_id == it.job_id:
                    self.db.drop_claim(old)
                    d.won, d.token = True, self.db.new_claim(
                        it.job_id, ms(it.slot), instance_id, now
                    ).token
            elif it.claim == "slot":
                if (it.job_id, ms(it.slot)) not in self.db.claims:
                    d.won = True
                    d.token = self.db.new_claim(it.job_id, ms(it.slot), instance_id, now).token
            elif it.claim == "token":
                d.won, d.token = True, self.db.new_claim(it.job_id, None, instance_id, now).token
            else:
                d.won = True
        lease_idx = [
            i
            for i, d in enumerate(out)
            if d.won and items[i].lease and not items[i].defer and not items[i].skip_reason
        ]
        acquired, holders = self.db.take_leases(
            [(items[i].job_id, out[i].token, items[i].hold, items[i].lanes) for i in lease_idx],
            instance_id, now,
        )
        for i in lease_idx:
            d = out[i]
            if items[i].kind is DispatchKind.EARLY and not ledger.lease_taken(
                items[i].job_id, d.token, items[i].lanes, acquired
            ):
                self.db.drop_claim(self.db.tokens[d.token or 0])
                d.won, d.token, d.busy = False, None, True
                d.holder = holders.get(items[i].job_id)
        now_dt = dt(now)
        assert now_dt is not None
        slots = [_req(dt(ms(it.slot))) for it in items]
        deadlines = [_req(dt(now + ms(it.hold))) for it in items]
        for rec in ledger.dispatch_runs(
            out, slots=slots, deadlines=deadlines, now=now_dt, instance=instance_id,
            acquired=acquired, holders=holders,
        ):
            self.db.insert(rec, self._now())
        return out

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        db = self._db()
        deleted = 0
        for job_id, slot, token in items:
            claim = db.claims.get((job_id, ms(slot)))
            if claim is not None and claim.token == token and not self.db.has_run(job_id, token):
                self.db.drop_claim(claim)
                deleted += 1
            self.db.release(job_id, token)
        return deleted

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        db = self._db()
        leased = [it for it in items if it.lease]
        now = self._now()
        acquired, holders = self.db.take_leases(
            [(it.job_id, it.token, it.hold, it.lanes) for it in leased], instance_id, now
        )
        out = []
        for it in items:
            st = Started(request=it, run=None)
            out.append(st)
            run = db.runs.get(it.run_id)
            if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
                st.holder = holders.get(it.job_id)
                if it.wait_if_busy:
                    continue
                if run is not None:
                    run.status = RunStatus.SKIPPED
                    run.reason = ledger.ALREADY_EXECUTING
                    run.finished_at, run.deadline = dt(now), None
                    run.result = ledger.busy_result()
                    run.logs.append(ledger.busy_log(st.holder, it.lanes))
            elif run is not None and run.status is RunStatus.PENDING:
                run.status = RunStatus.RUNNING
                run.started_at, run.deadline = dt(now), dt(now + ms(it.hold))
            st.run = None if run is None else _copy(run)
        return out

    async def finish(self, items: Sequence[Finish]) -> None:
        self._db()
        for f in items:
            if f.run.id is None:
                self.db.insert(f.run, self._now())
            else:
                self.db.update(f.run, self._now())
        for f in items:
            self.db.release(f.run.job_id, f.release_token)

    async def record_skips(self, items: Sequence[Skip]) -> int:
        db = self._db()
        now = dt(self._now())
        written = 0
        for sk in items:
            if (sk.job_id, ms(sk.slot), sk.reason) in db.dedupe:
                continue
            slot = dt(ms(sk.slot))
            assert slot is not None
            rec = RunRecord(
                id=None,
                job_id=sk.job_id,
                slot=slot,
                triggered_by=sk.triggered_by,
                status=RunStatus.SKIPPED,
                instance_id=sk.instance_id,
                reason=sk.reason,
                claimed_at=now,
                finished_at=now,
                result=sk.result if sk.result is not None else ledger.skip_result(sk.reason),
                logs=list(sk.logs),
            )
            self.db.insert(rec, self._now(), dedupe=sk.reason)
            written += 1
        return written

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        db = self._db()
        now = self._now()
        for job_id, token, hold in items:
            st = self.db.lease_of(job_id, token)
            if st is not None:
                st.lease_until = dt(now + ms(hold))
            rid = db.fenced.get(token)
            run = None if rid is None else db.runs[rid]
            if run is not None and run.job_id == job_id and run.status is RunStatus.RUNNING:
                run.deadline = dt(now + ms(hold))

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        db = self._db()
        now = self._now()
        now_dt = dt(now)
        assert now_dt is not None
        reaped = []
        for run in db.runs.values():
            if run.status not in _OPEN or run.deadline is None or msd(run.deadline) >= now:  # type: ignore[operator]
                continue
            st = self.db.lease_of(run.job_id, run.fencing_token)
            if st is not None and (msd(st.lease_until) or 0) > now:
                continue
            run.status, run.reason = RunStatus.INTERRUPTED, ledger.INTERRUPTED_REASON
            run.finished_at, run.deadline = now_dt, None
            run.error = ledger.INTERRUPTED_ERROR
            run.logs.append(ledger.interrupted_log(run.instance_id, instance_id))
            reaped.append(_copy(run))
        rebuilt = []
        for st, claim in self.db.lost(now, None):
            claimed = dt(claim.claimed_at)
            assert claimed is not None
            rec = ledger.lost_run(
                st.job_id, claim.token, st.lease_holder, dt(claim.slot), claimed,
                now=now_dt, marked_by=instance_id,
            )  # fmt: skip
            self.db.insert(rec, self._now())
            self.db.release(st.job_id, claim.token)
            rebuilt.append(rec)
        return reaped + rebuilt

    # -- instances ---------------------------------------------------------------------------

    async def heartbeat(self, me: Instance, *, ttl: float) -> Heartbeat:
        db = self._db()
        now = self._now()
        row = db.instances.get(me.instance_id)
        beat = Heartbeat(now=now / 1000.0)
        if row is None or row.lost_at is not None:
            if row is not None:
                beat.lost, beat.lost_at, beat.lost_by = True, row.lost_at, row.lost_by
            row = Instance(me.instance_id, me.host, me.pid, me.role, me.version, dt(now))
            db.instances[me.instance_id] = row
        row.heartbeat_at = dt(now)
        beat.live = self.db.live_ids(now, ttl)
        return beat

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        db = self._db()
        now = self._now()
        now_dt = dt(now)
        assert now_dt is not None
        cut = now - ms(ttl)
        out = LostInstances()
        for inst in db.instances.values():
            if (
                inst.instance_id == instance_id
                or inst.lost_at is not None
                or (msd(inst.heartbeat_at) or 0) >= cut
            ):
                continue
            inst.lost_at, inst.lost_by = now_dt, instance_id
            out.instances.append(dataclasses.replace(inst, live=False))
        lost = {i.instance_id for i in out.instances}
        if not lost:
            return out
        for run in db.runs.values():
            if run.status in _OPEN and run.instance_id in lost:
                holder = run.instance_id or ""
                run.status, run.reason = RunStatus.INTERRUPTED, ledger.INSTANCE_LOST_REASON
                run.finished_at, run.deadline = now_dt, None
                run.error = ledger.instance_lost_error(holder)
                run.logs.append(ledger.instance_lost_log(holder, ttl, instance_id))
                out.runs.append(_copy(run))
        for st in self.db.leases(None):
            if st.lease_holder not in lost or st.lease_token is None:
                continue
            tok = st.lease_token
            claim = db.tokens.get(tok)
            if claim is not None and claim.job_id == st.job_id and not self.db.has_run(
                st.job_id, tok
            ):
                claimed = dt(claim.claimed_at)
                assert claimed is not None
                rec = ledger.instance_lost_run(
                    st.job_id, tok, st.lease_holder, dt(claim.slot), claimed,
                    now=now_dt, ttl=ttl, marked_by=instance_id,
                )  # fmt: skip
                self.db.insert(rec, self._now())
                out.runs.append(_copy(rec))
            self.db.release(st.job_id, tok)
        return out

    async def list_instances(self, *, ttl: float) -> list[Instance]:
        db = self._db()
        live = set(self.db.live_ids(self._now(), ttl))
        rows = sorted(
            db.instances.values(), key=lambda i: (msd(i.started_at) or 0, i.instance_id)
        )
        return [dataclasses.replace(i, live=i.instance_id in live) for i in rows]

    async def leave(self, instance_id: str) -> None:
        self._db().instances.pop(instance_id, None)

    # -- the job registry and requests --------------------------------------------------

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        db = self._db()
        now = dt(self._now())
        mine = {j: d for (j, i), d in db.registry.items() if i == instance_id}
        if jobs is not None:
            wanted = {d.job_id: d for d in jobs}
            for job_id in mine.keys() - wanted.keys():
                del db.registry[(job_id, instance_id)]
            for job_id, d in wanted.items():
                old = mine.get(job_id)
                row = dataclasses.replace(d, instance_id=instance_id, spec=dict(d.spec),
                                          live=False, seen_at=now)
                row.declared_at = (old.declared_at if old is not None
                                   and old.digest == d.digest else now)
                db.registry[(job_id, instance_id)] = row
            return
        for d in mine.values():
            d.seen_at = now

    async def list_declared(self, *, ttl: float) -> list[Declared]:
        db = self._db()
        live = set(self.db.live_ids(self._now(), ttl))
        return [
            dataclasses.replace(d, spec=dict(d.spec), live=d.instance_id in live)
            for _, d in sorted(db.registry.items())
        ]

    async def submit_request(self, request: FleetRequest) -> FleetRequest:
        db = self._db()
        db.last_request_id += 1
        row = dataclasses.replace(request, id=db.last_request_id, payload=dict(request.payload),
                                  requested_at=dt(self._now()), taken_by=None, taken_at=None,
                                  answered_at=None, run_id=None, error=None)
        db.requests[row.id] = row  # type: ignore[index]
        return dataclasses.replace(row)

    async def take_requests(
        self, instance_id: str, job_ids: Sequence[str]
    ) -> list[FleetRequest]:
        db = self._db()
        ids = set(job_ids)
        now = dt(self._now())
        out = []
        for req in db.requests.values():  # insertion order: oldest first
            if req.taken_by is not None or req.answered_at is not None:
                continue
            if req.target == instance_id or (req.target is None and req.job_id in ids):
                req.taken_by, req.taken_at = instance_id, now
                out.append(dataclasses.replace(req, payload=dict(req.payload)))
        return out

    async def answer_request(
        self, request_id: int, *, run_id: int | None = None, error: str | None = None,
        only_untaken: bool = False,
    ) -> bool:
        req = self._db().requests.get(request_id)
        if req is None or req.answered_at is not None:
            return False
        if only_untaken and req.taken_by is not None:
            return False
        req.answered_at, req.run_id, req.error = dt(self._now()), run_id, error
        return True

    async def note_request(self, request_id: int, payload: dict[str, Any]) -> bool:
        req = self._db().requests.get(request_id)
        if req is None or req.answered_at is not None or req.taken_by is None:
            return False
        req.payload = json.loads(json.dumps(payload))
        return True

    async def get_request(self, request_id: int) -> FleetRequest | None:
        req = self._db().requests.get(request_id)
        return None if req is None else dataclasses.replace(req, payload=dict(req.payload))

    # -- reading the ledger -------------------------------------------------------------------

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        return slot_runs_of(await self.list_runs(job_id, limit=limit, before_id=before_id))

    async def last_slot_runs(self, job_ids: Sequence[str]) -> dict[str, SlotRun]:
        return {j: s for j, r in (await self.last_runs(job_ids)).items()
                for s in slot_runs_of([r])}

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        db = self._db()
        want = None if status is None else RunStatus(status)
        out = []
        for rid in sorted(db.runs, reverse=True):
            r = db.runs[rid]
            if job_id is not None and r.job_id != job_id:
                continue
            if want is not None and r.status is not want:
                continue
            if before_id is not None and rid >= before_id:
                continue
            out.append(_copy(r))
            if len(out) >= limit:
                break
        return out

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        def key(r: RunRecord) -> tuple[int, int]:
            return round(r.slot.timestamp() * 1000), int(r.id or 0)

        bound = None if after is None else (after.slot_ms, after.id)
        found = sorted(
            (r for r in self._db().runs.values()
             if where.matches(r) and (bound is None or key(r) < bound)),
            key=key, reverse=True,
        )  # fmt: skip
        return RunPage.of([_copy(r) for r in found[: limit + 1]], limit)

    async def get_run(self, run_id: int) -> RunRecord | None:
        run = self._db().runs.get(run_id)
        return None if run is None else _copy(run)

    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        db = self._db()
        wanted = set(job_ids)
        out: dict[str, RunRecord] = {}
        for rid in sorted(db.runs, reverse=True):
            r = db.runs[rid]
            if r.job_id in wanted and r.job_id not in out:
                out[r.job_id] = _copy(r)
                if len(out) == len(wanted):
                    break
        return out

    async def prune(
        self, *, claims_older_than: float, runs_older_than: float, runs_per_job: int
    ) -> tuple[int, int]:
        """Prune by :class:`~cronfleet.store.driver.Retention`, executed directly."""
        db = self._db()
        rule = Retention(claims_older_than, runs_older_than, runs_per_job)
        keep_claims = rule.kept_claims(
            ClaimRow(c.token, c.job_id, c.slot, c.claimed_at) for c in db.tokens.values())
        old = [c for c in db.tokens.values() if (c.job_id, c.token) not in keep_claims]
        for c in old:
            self.db.drop_claim(c)
        skips = set(db.dedupe.values())
        keep_runs = rule.kept_runs(
            RunRow(rid, r.job_id, r.status in _OPEN, msd(r.finished_at), rid in skips)
            for rid, r in db.runs.items()
        )
        doomed = [rid for rid in db.runs if rid not in keep_runs]
        for rid in doomed:
            r = db.runs.pop(rid)
            if r.fencing_token is not None and db.fenced.get(r.fencing_token) == rid:
                del db.fenced[r.fencing_token]
        if doomed:
            gone = set(doomed)
            for key in [k for k, rid in db.dedupe.items() if rid in gone]:
                del db.dedupe[key]
                job_id, at, _ = key
                counts = db.skipped[job_id]
                counts[at] -= 1
                if not counts[at]:
                    del counts[at]
        return len(old), len(doomed)
