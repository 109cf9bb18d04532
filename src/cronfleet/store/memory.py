"""An in-memory store: the whole contract (early claims and withdraw included) in plain
dicts, for tests and single-process embedding. It passes the same conformance suite as
SQLite and PostgreSQL (``tests/store``), and runs the same driver: the ledger transactions
are the plans of :mod:`cronfleet.store.driver`, executed here by :class:`MemoryTransport`
over the named operations below (:data:`OPS`); retention is
:class:`~cronfleet.store.driver.Retention` executed directly.

Several :class:`MemoryStore` objects on one :class:`MemoryDatabase` behave like several
instances on one database. Every call runs to its end without awaiting in between, so on
one event loop each call is one atomic transaction (asyncio-safe); it is not thread-safe.
Times are kept to the millisecond, as the other stores keep them, and every record handed
out is a copy.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from cronfleet.clock import Clock, SystemClock
from cronfleet.errors import StoreError
from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import (
    Declared,
    FleetRequest,
    Heartbeat,
    Instance,
    RunCursor,
    RunFilter,
    RunPage,
    SlotRun,
    SlotRunPage,
    newest_of_note,
    slot_runs_of,
    watermark,
)
from cronfleet.store.driver import (
    ClaimRow,
    Plan,
    Retention,
    RunRow,
    StoreDriver,
    beat_rows,
    drive,
    live,
)
from cronfleet.store.rows import dt, ms, msd

__all__ = ["OPS", "MemoryDatabase", "MemoryStore", "MemoryTransport"]

T = TypeVar("T")

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




# -- the named operations: ``op(db, now ms, *args)`` ------------------------------------------


def _claim_slots(db: MemoryDatabase, now: int, instance: str,
                 rows: list[list[Any]]) -> dict[tuple[str, int], int]:
    won: dict[tuple[str, int], int] = {}
    for j, s in rows:
        if (j, s) not in db.claims:
            won[(j, s)] = db.new_claim(j, s, instance, now).token
    return won


def _draw_tokens(db: MemoryDatabase, now: int, instance: str, job_ids: list[str]) -> list[int]:
    return [db.new_claim(j, None, instance, now).token for j in job_ids]


def _reclaim(db: MemoryDatabase, now: int, instance: str, job_id: str, old: int | None,
             slot: int) -> int | None:
    claim = db.tokens.get(old or 0)
    if claim is None or claim.job_id != job_id:
        return None
    db.drop_claim(claim)
    return db.new_claim(job_id, slot, instance, now).token


def _delete_claims(db: MemoryDatabase, now: int, tokens: list[int]) -> None:
    for tok in tokens:
        claim = db.tokens.get(tok)
        if claim is not None:
            db.drop_claim(claim)


def _withdraw_claims(db: MemoryDatabase, now: int, rows: list[tuple[str, int, int]]) -> int:
    deleted = 0
    for job_id, slot, token in rows:
        claim = db.claims.get((job_id, slot))
        if claim is not None and claim.token == token and not db.has_run(job_id, token):
            db.drop_claim(claim)
            deleted += 1
    return deleted


def _take_leases(db: MemoryDatabase, now: int, instance: str,
                 leases: list[tuple[str, int | None, float, int]]
                 ) -> tuple[set[str], dict[str, str | None]]:
    return db.take_leases(leases, instance, now)


def _free_lease(st: JobState) -> None:
    st.lease_holder = st.lease_token = st.lease_until = None


def _release_leases(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    n = 0
    for job_id, token in rows:
        st = db.states.get(job_id)
        if st is not None and token is not None and st.lease_token == token:
            _free_lease(st)
            n += 1
    return n


def _release_lanes(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    for job_id, token in rows:
        for lane in db.lanes.get(job_id, {}).values():
            if token is not None and lane.lease_token == token:
                _free_lease(lane)
    return 0


def _renew_leases(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    n = 0
    for job_id, token, until in rows:
        st = db.states.get(job_id)
        if st is not None and st.lease_token == token:
            st.lease_until = dt(until)
            n += 1
    return n


def _renew_lanes(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    for job_id, token, until in rows:
        for lane in db.lanes.get(job_id, {}).values():
            if lane.lease_token == token:
                lane.lease_until = dt(until)
    return 0


def _renew_deadlines(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    for job_id, token, until in rows:
        rid = db.fenced.get(token)
        run = None if rid is None else db.runs[rid]
        if run is not None and run.job_id == job_id and run.status is RunStatus.RUNNING:
            run.deadline = dt(until)
    return 0


def _insert_runs(db: MemoryDatabase, now: int, recs: Sequence[RunRecord]) -> None:
    for rec in recs:
        db.insert(rec, now)


def _start_runs(db: MemoryDatabase, now: int, rows: list[tuple[int, int]]) -> None:
    for rid, until in rows:
        run = db.runs.get(rid)
        if run is not None and run.status is RunStatus.PENDING:
            run.status = RunStatus.RUNNING
            run.started_at, run.deadline = dt(now), dt(until)


def _skip_busy(db: MemoryDatabase, now: int, rows: list[tuple[int, str]]) -> None:
    for rid, line in rows:
        run = db.runs.get(rid)
        if run is not None:
            run.status, run.reason = RunStatus.SKIPPED, ledger.ALREADY_EXECUTING
            run.finished_at, run.deadline = dt(now), None
            run.result = ledger.busy_result()
            run.logs.append(line)


def _runs_by_id(db: MemoryDatabase, now: int, ids: list[int]) -> dict[int, RunRecord]:
    return {rid: _copy(db.runs[rid]) for rid in ids if rid in db.runs}


def _finish_rows(db: MemoryDatabase, now: int, new: list[RunRecord],
                 changed: list[RunRecord]) -> None:
    for rec in new:
        db.insert(rec, now)  # a token's row exists already: updated (insert's upsert)
    for rec in changed:
        db.update(rec, now)  # the late-result fence


def _record_skips(db: MemoryDatabase, now: int, rows: list[list[Any]]) -> int:
    at = dt(now)
    written = 0
    for job_id, slot, triggered_by, reason, instance, result, logs in rows:
        if (job_id, slot) in db.claims:  # a run's or an earlier skip's: the slot has its row
            continue
        db.new_claim(job_id, slot, instance or "", now)
        rec = RunRecord(
            id=None, job_id=job_id, slot=_req(dt(slot)), triggered_by=TriggeredBy(triggered_by),
            status=RunStatus.SKIPPED, instance_id=instance, reason=reason, claimed_at=at,
            finished_at=at, result=result, logs=list(logs),
        )  # fmt: skip
        db.insert(rec, now, dedupe=reason)
        written += 1
    return written


def _reap(db: MemoryDatabase, now: int, parts: tuple[str, str, str]) -> list[RunRecord]:
    before, anon, after = parts
    reaped = []
    for run in db.runs.values():
        if run.status not in _OPEN or run.deadline is None or (msd(run.deadline) or 0) >= now:
            continue
        st = db.lease_of(run.job_id, run.fencing_token)
        if st is not None and (msd(st.lease_until) or 0) > now:
            continue
        run.status, run.reason = RunStatus.INTERRUPTED, ledger.INTERRUPTED_REASON
        run.finished_at, run.deadline = dt(now), None
        run.error = ledger.INTERRUPTED_ERROR
        run.logs.append(before + (run.instance_id or anon) + after)
        reaped.append(_copy(run))
    return reaped


def _lost_runs(db: MemoryDatabase, now: int) -> list[tuple[Any, ...]]:
    return [(st.job_id, c.token, st.lease_holder, dt(c.slot), dt(c.claimed_at))
            for st, c in db.lost(now, None)]  # fmt: skip


def _declare_lost(db: MemoryDatabase, now: int, me: str, ttl: float) -> list[Instance]:
    cut = now - ms(ttl)
    out = []
    for inst in db.instances.values():
        if (inst.instance_id == me or inst.lost_at is not None
                or live(inst.lost_at, msd(inst.heartbeat_at) or 0, cut)):
            continue
        inst.lost_at, inst.lost_by = dt(now), me
        out.append(dataclasses.replace(inst, live=False))
    return out


def _leases_of(db: MemoryDatabase, now: int, instances: list[str]) -> list[tuple[Any, ...]]:
    lost = set(instances)
    out = []
    for st in db.leases(None):
        tok = st.lease_token
        if st.lease_holder not in lost or tok is None:
            continue
        c = db.tokens.get(tok)
        if c is not None and c.job_id != st.job_id:
            c = None
        out.append((st.job_id, tok, st.lease_holder, None if c is None else dt(c.slot),
                    None if c is None else dt(c.claimed_at), db.has_run(st.job_id, tok)))
    return out


def _interrupt_lost(db: MemoryDatabase, now: int, rows: list[list[str]]) -> list[RunRecord]:
    lines = {inst: (error, line) for inst, error, line in rows}
    out = []
    for run in db.runs.values():
        if run.status in _OPEN and run.instance_id in lines:
            error, line = lines[run.instance_id]
            run.status, run.reason = RunStatus.INTERRUPTED, ledger.INSTANCE_LOST_REASON
            run.finished_at, run.deadline = dt(now), None
            run.error = error
            run.logs.append(line)
            out.append(_copy(run))
    return out


def _ensure_jobs(db: MemoryDatabase, now: int, job_ids: list[str]) -> dict[str, JobState]:
    db.ensure(job_ids, now)
    return _read_states(db, now, job_ids)


def _read_states(db: MemoryDatabase, now: int, job_ids: list[str]) -> dict[str, JobState]:
    return {j: db.state(j) for j in dict.fromkeys(job_ids) if j in db.states}


def _read_overrides(db: MemoryDatabase, now: int) -> dict[str, JobState]:
    return {j: db.state(j) for j, st in db.states.items() if st.enabled_override is not None}


def _set_override(db: MemoryDatabase, now: int, job_id: str, enabled: bool | None,
                  by: str | None, note: str | None, until: datetime | None) -> JobState:
    db.ensure([job_id], now)
    st = db.states[job_id]
    st.enabled_override, st.override_by, st.override_note = enabled, by, note
    st.override_at = dt(now)
    st.override_until = _ms_dt(until)
    return db.state(job_id)


def _heartbeat(db: MemoryDatabase, now: int, me: Instance, ttl: float) -> Heartbeat:
    row = db.instances.get(me.instance_id)
    beat = Heartbeat(now=now / 1000.0)
    if row is None or row.lost_at is not None:
        if row is not None:
            beat.lost, beat.lost_at, beat.lost_by = True, row.lost_at, row.lost_by
        row = Instance(me.instance_id, me.host, me.pid, me.role, me.version, dt(now))
        db.instances[me.instance_id] = row
    row.heartbeat_at = dt(now)
    row.plans = me.plans
    cut = now - ms(ttl)
    rows = [(i.instance_id, i.plans, live(i.lost_at, msd(i.heartbeat_at) or 0, cut))
            for i in sorted(db.instances.values(), key=lambda i: i.instance_id)
            if i.lost_at is None]  # fmt: skip
    return beat_rows(beat, me.instance_id, rows)


def _beat(db: MemoryDatabase, now: int, me: Instance, ttl: float) -> Heartbeat | None:
    """The usual beat: None when the row is missing or declared lost."""
    row = db.instances.get(me.instance_id)
    if row is None or row.lost_at is not None:
        return None
    return _heartbeat(db, now, me, ttl)


def _instances_all(db: MemoryDatabase, now: int, ttl: float) -> list[Instance]:
    alive = set(db.live_ids(now, ttl))
    rows = sorted(db.instances.values(), key=lambda i: (msd(i.started_at) or 0, i.instance_id))
    return [dataclasses.replace(i, live=i.instance_id in alive) for i in rows]


def _instance_leave(db: MemoryDatabase, now: int, instance: str) -> None:
    db.instances.pop(instance, None)


def _registry_of(db: MemoryDatabase, now: int, instance: str) -> dict[str, str]:
    return {j: d.digest for (j, i), d in db.registry.items() if i == instance}


def _registry_drop(db: MemoryDatabase, now: int, instance: str, gone: Sequence[str]) -> None:
    for job_id in gone:
        db.registry.pop((job_id, instance), None)


def _registry_put(db: MemoryDatabase, now: int, instance: str, put: Sequence[Declared]) -> None:
    at = dt(now)
    for d in put:
        db.registry[(d.job_id, instance)] = dataclasses.replace(
            d, instance_id=instance, spec=dict(d.spec), live=False, declared_at=at, seen_at=at)


def _registry_touch(db: MemoryDatabase, now: int, instance: str) -> None:
    at = dt(now)
    for (_, i), d in db.registry.items():
        if i == instance:
            d.seen_at = at


def _registry_all(db: MemoryDatabase, now: int, ttl: float) -> list[Declared]:
    alive = set(db.live_ids(now, ttl))
    return [dataclasses.replace(d, spec=dict(d.spec), live=d.instance_id in alive)
            for _, d in sorted(db.registry.items())]  # fmt: skip


def _request_add(db: MemoryDatabase, now: int, request: FleetRequest) -> FleetRequest:
    db.last_request_id += 1
    row = dataclasses.replace(request, id=db.last_request_id, payload=dict(request.payload),
                              requested_at=dt(now), taken_by=None, taken_at=None,
                              answered_at=None, run_id=None, error=None)
    db.requests[db.last_request_id] = row
    return dataclasses.replace(row)


def _requests_open(db: MemoryDatabase, now: int, instance: str
                   ) -> list[tuple[int, str, str | None]]:
    return [(rid, req.job_id, req.target) for rid, req in db.requests.items()
            if req.taken_by is None and req.answered_at is None
            and req.target in (None, instance)]  # insertion order: oldest first


def _requests_take(db: MemoryDatabase, now: int, instance: str,
                   ids: list[int]) -> list[FleetRequest]:
    out = []
    for rid in ids:
        req = db.requests.get(rid)
        if req is None or req.taken_by is not None or req.answered_at is not None:
            continue
        req.taken_by, req.taken_at = instance, dt(now)
        out.append(dataclasses.replace(req, payload=dict(req.payload)))
    return out


def _request_answer(db: MemoryDatabase, now: int, rid: int, run_id: int | None,
                    error: str | None, only_untaken: bool) -> bool:
    req = db.requests.get(rid)
    if req is None or req.answered_at is not None:
        return False
    if only_untaken and req.taken_by is not None:
        return False
    req.answered_at, req.run_id, req.error = dt(now), run_id, error
    return True


def _request_note(db: MemoryDatabase, now: int, rid: int, payload: dict[str, Any]) -> bool:
    req = db.requests.get(rid)
    if req is None or req.answered_at is not None or req.taken_by is None:
        return False
    req.payload = json.loads(json.dumps(payload))
    return True


def _request_get(db: MemoryDatabase, now: int, rid: int) -> FleetRequest | None:
    req = db.requests.get(rid)
    return None if req is None else dataclasses.replace(req, payload=dict(req.payload))


def _get_run(db: MemoryDatabase, now: int, run_id: int) -> RunRecord | None:
    run = db.runs.get(run_id)
    return None if run is None else _copy(run)


def _last_runs(db: MemoryDatabase, now: int, job_ids: list[str]) -> dict[str, RunRecord]:
    wanted = set(job_ids)
    out: dict[str, RunRecord] = {}
    for rid in sorted(db.runs, reverse=True):
        r = db.runs[rid]
        if r.job_id in wanted and r.job_id not in out:
            out[r.job_id] = _copy(r)
            if len(out) == len(wanted):
                break
    return out


def _last_slot_runs(db: MemoryDatabase, now: int, job_ids: list[str], since: float | None,
                    statuses: list[str]) -> dict[str, SlotRun]:
    rows = {j: s for j, r in _last_runs(db, now, job_ids).items() for s in slot_runs_of([r])}
    return newest_of_note(rows, since, {RunStatus(s) for s in statuses})


OPS: dict[str, Callable[..., Any]] = {
    "claim_slots": _claim_slots,
    "draw_tokens": _draw_tokens,
    "reclaim": _reclaim,
    "delete_claims": _delete_claims,
    "withdraw_claims": _withdraw_claims,
    "take_leases": _take_leases,
    "release_leases": _release_leases,
    "release_lanes": _release_lanes,
    "renew_leases": _renew_leases,
    "renew_lanes": _renew_lanes,
    "renew_deadlines": _renew_deadlines,
    "insert_runs": _insert_runs,
    "start_runs": _start_runs,
    "skip_busy": _skip_busy,
    "runs_by_id": _runs_by_id,
    "finish_rows": _finish_rows,
    "record_skips": _record_skips,
    "reap": _reap,
    "lost_runs": _lost_runs,
    "declare_lost": _declare_lost,
    "leases_of": _leases_of,
    "interrupt_lost": _interrupt_lost,
    "ensure_jobs": _ensure_jobs,
    "read_states": _read_states,
    "read_overrides": _read_overrides,
    "set_override": _set_override,
    "heartbeat": _heartbeat,
    "beat": _beat,
    "instances_all": _instances_all,
    "instance_leave": _instance_leave,
    "registry_of": _registry_of,
    "registry_drop": _registry_drop,
    "registry_put": _registry_put,
    "registry_touch": _registry_touch,
    "registry_all": _registry_all,
    "request_add": _request_add,
    "requests_open": _requests_open,
    "requests_take": _requests_take,
    "request_answer": _request_answer,
    "request_note": _request_note,
    "request_get": _request_get,
    "get_run": _get_run,
    "last_runs": _last_runs,
    "last_slot_runs": _last_slot_runs,
}
"""Every operation by name: the plans' vocabulary (:data:`~cronfleet.store.driver.OPERATIONS`)
and the single calls of :class:`~cronfleet.store.driver.StoreDriver`."""


class MemoryTransport:
    """Runs a plan or an operation on the :class:`MemoryDatabase` to its end without
    awaiting in between: on one event loop that is one atomic transaction."""

    placeholder = "?"  # (the run queries are the memory store's own)

    def __init__(self, db: MemoryDatabase, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self.is_open = False
        self.known: set[str] | None = None  # its plans ensure the state rows

    def tables(self) -> MemoryDatabase:
        if not self.is_open:
            raise StoreError(f"MemoryStore(id={id(self.db):#x}) is not open")
        return self.db

    async def run_plan(self, plan: Callable[[datetime], Plan[T]], *,
                       ambiguous: Callable[[T], None] | None = None) -> T:
        db = self.tables()
        now = ms(self.clock.now())
        return drive(plan(_req(dt(now))), lambda name, args: OPS[name](db, now, *args))

    async def call(self, name: str, *args: Any, tx: bool = True) -> Any:
        return OPS[name](self.tables(), ms(self.clock.now()), *args)

    async def prune(self, rule: Retention) -> tuple[int, int]:
        """:class:`~cronfleet.store.driver.Retention`, executed directly."""
        db = self.tables()
        keep_claims = rule.kept_claims(
            ClaimRow(c.token, c.job_id, c.slot, c.claimed_at) for c in db.tokens.values())
        old = [c for c in db.tokens.values() if (c.job_id, c.token) not in keep_claims]
        for c in old:
            db.drop_claim(c)
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

    @staticmethod
    def query_time(at: datetime) -> int:
        return round(at.timestamp() * 1000)

    @staticmethod
    def any_job() -> tuple[str, Callable[[list[str]], Any]]:
        raise NotImplementedError("the memory store reads its runs itself")

    @staticmethod
    def query(name: str) -> str:
        raise NotImplementedError("the memory store has no queries")


class MemoryStore(StoreDriver):
    """Claims, leases, overrides and the run ledger in memory (see the module doc)."""

    lanes = True  # max_instances > 1: lanes 1..N-1 in MemoryDatabase.lanes
    transport: MemoryTransport

    def __init__(self, db: MemoryDatabase | None = None, *, clock: Clock | None = None) -> None:
        self.db = db if db is not None else MemoryDatabase()
        self.clock: Clock = clock or SystemClock()
        self.url = "memory://"
        self.transport = MemoryTransport(self.db, self.clock)

    def __repr__(self) -> str:
        return f"MemoryStore(id={id(self.db):#x})"

    async def open(self) -> None:
        self.transport.is_open = True

    async def close(self) -> None:
        self.transport.is_open = False

    async def now(self) -> float:
        return self.clock.now()

    # -- reading the ledger (the dicts, not queries) ---------------------------------------

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        return slot_runs_of(await self.list_runs(job_id, limit=limit, before_id=before_id))

    async def find_slot_runs(self, where: RunFilter, *, limit: int,
                             after: RunCursor | None = None) -> SlotRunPage:
        return SlotRunPage.narrowed(await self.find_runs(where, limit=limit, after=after))

    async def list_runs(
        self,
        job_id: str | None = None,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        db = self.transport.tables()
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
            (r for r in self.transport.tables().runs.values()
             if where.matches(r) and (bound is None or key(r) < bound)),
            key=key, reverse=True,
        )  # fmt: skip
        return RunPage.of([_copy(r) for r in found[: limit + 1]], limit)

