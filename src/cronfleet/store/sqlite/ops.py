"""SQLite's named operations: each one executes named statements of ``queries.sql`` on
the transaction's connection and maps the rows (times as integer milliseconds, booleans
as 0/1, JSON as text). No decision is taken here: the plans of
:mod:`cronfleet.store.driver` say what to do, in which order, inside one ``BEGIN
IMMEDIATE``.

Every operation is ``op(t, c, now, *args)``: ``t`` the transport (its ``known`` job ids),
``c`` the connection inside the transaction, ``now`` the transaction's time in ms.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronfleet.errors import StoreError
from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import Declared, FleetRequest, Heartbeat, Instance, SlotRun, watermark
from cronfleet.store.driver import beat_rows, live
from cronfleet.store.queries import load_queries
from cronfleet.store.rows import dt, ms, msd, registry_rows

if TYPE_CHECKING:
    from cronfleet.store.sqlite.transport import SQLiteTransport

__all__ = ["OPS", "Q", "insert_runs", "run_of", "run_row", "state_of"]

# the named queries of queries.sql; the SQL lives there, not in Python strings
Q = load_queries("cronfleet.store.sqlite")
_STATUS = {s.value: s for s in RunStatus}  # Enum lookup by value, without its call
_EMPTY_LOGS = "[]"


# -- rows -----------------------------------------------------------------------------------


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def _req(value: datetime | None) -> datetime:
    assert value is not None
    return value


def run_row(r: RunRecord) -> tuple[Any, ...]:
    """The ``RUN_INSERT_COLUMNS`` values of a record (an open run keeps its deadline)."""
    return (
        r.job_id, round(r.slot.timestamp() * 1000), r.triggered_by.value, r.status.value,
        r.reason, r.instance_id, r.fencing_token, int(r.manual), int(r.is_catchup),
        int(r.is_recovery), r.attempt, msd(r.claimed_at), msd(r.started_at),
        msd(r.finished_at), None if r.status.finished else msd(r.deadline), _json(r.result),
        r.error, json.dumps(r.logs, default=str) if r.logs else _EMPTY_LOGS, _json(r.params),
        r.forced_by,
    )  # fmt: skip


def finish_row(r: RunRecord) -> tuple[Any, ...]:
    """``(status, reason, started, finished, deadline, result, error, logs, attempt, id)``."""
    return (
        r.status.value, r.reason, msd(r.started_at), msd(r.finished_at),
        None if r.status.finished else msd(r.deadline), _json(r.result), r.error,
        json.dumps(r.logs, default=str) if r.logs else _EMPTY_LOGS, r.attempt, r.id,
    )  # fmt: skip


def run_of(row: Sequence[Any]) -> RunRecord:
    slot = dt(row[2])
    assert slot is not None
    return RunRecord(
        id=row[0], job_id=row[1], slot=slot, triggered_by=TriggeredBy(row[3]),
        status=RunStatus(row[4]), reason=row[5], instance_id=row[6], fencing_token=row[7],
        manual=bool(row[8]), is_catchup=bool(row[9]), is_recovery=bool(row[10]),
        attempt=row[11], claimed_at=dt(row[12]), started_at=dt(row[13]),
        finished_at=dt(row[14]), deadline=dt(row[15]),
        result=None if row[16] is None else json.loads(row[16]), error=row[17],
        logs=[] if row[18] is None else json.loads(row[18]),
        params=None if row[19] is None else json.loads(row[19]), forced_by=row[20],
    )  # fmt: skip


def state_of(row: Sequence[Any]) -> JobState:
    """A ``read_states`` row; ``last_slot`` by the watermark rule from its two columns
    (the newest claimed slot, the newest claim-less skip)."""
    mark = watermark(row[9], row[10])
    return JobState(
        job_id=row[0], enabled_override=None if row[1] is None else bool(row[1]),
        override_by=row[2], override_at=dt(row[3]), override_note=row[4],
        override_until=dt(row[5]), lease_holder=row[6], lease_token=row[7],
        lease_until=dt(row[8]), last_slot=None if mark is None else dt(int(mark)),
        created_at=dt(row[11]),
    )  # fmt: skip


def _instance(row: Sequence[Any], *, live: bool) -> Instance:
    return Instance(
        instance_id=row[0], host=row[1], pid=row[2], role=row[3], version=row[4],
        started_at=dt(row[5]), heartbeat_at=dt(row[6]), lost_at=dt(row[7]), lost_by=row[8],
        live=live,
    )  # fmt: skip


def _request(row: Sequence[Any]) -> FleetRequest:
    return FleetRequest(
        id=row[0], kind=row[1], job_id=row[2], target=row[3], payload=json.loads(row[4]),
        requested_by=row[5], requested_at=dt(row[6]), taken_by=row[7], taken_at=dt(row[8]),
        answered_at=dt(row[9]), run_id=row[10], error=row[11],
    )  # fmt: skip


def _lost_row(row: Sequence[Any]) -> tuple[Any, ...]:
    job_id, token, holder, slot, claimed, *rest = row
    return (job_id, token, holder, dt(slot), dt(claimed), *rest)


def insert_runs(c: sqlite3.Connection, recs: Sequence[RunRecord]) -> None:
    """Insert complete run records and give each its id.

    ``executemany`` is several times faster than one row per statement; inside our
    ``BEGIN IMMEDIATE`` transaction nobody else writes, and ``AUTOINCREMENT`` hands out
    consecutive ids, so the ids are known without ``RETURNING`` (checked afterwards).
    """
    if not recs:
        return
    base = c.execute(Q["next_run_id"]).fetchone()[0]
    c.executemany(Q["insert_run"], [run_row(r) for r in recs])
    last = c.execute(Q["last_insert_rowid"]).fetchone()[0]
    if last != base + len(recs):
        raise StoreError(f"run ids were not consecutive ({base}+{len(recs)} != {last})")
    for i, r in enumerate(recs, start=base + 1):
        r.id = i


# -- claims ---------------------------------------------------------------------------------


def claim_slots(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
                rows: list[list[Any]]) -> dict[tuple[str, int], int]:
    got = c.execute(Q["claim"], (instance, now, json.dumps(rows)))
    return {(j, s): tok for tok, j, s in got}


def draw_tokens(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
                job_ids: list[str]) -> list[int]:
    return [c.execute(Q["draw_token"], (j, instance, now)).fetchone()[0] for j in job_ids]


def reclaim(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str, job_id: str,
            old: int, slot: int) -> int | None:
    if not c.execute(Q["delete_claim"], (old,)).rowcount:
        return None
    return int(c.execute(Q["claim_one"], (job_id, slot, instance, now)).fetchone()[0])


def delete_claims(t: SQLiteTransport, c: sqlite3.Connection, now: int, tokens: list[int]) -> None:
    c.execute(Q["delete_claims"], (json.dumps(tokens),))


def withdraw_claims(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                    rows: list[tuple[str, int, int]]) -> int:
    return max(c.executemany(Q["withdraw_claim"], [(tok, j, s) for j, s, tok in rows]).rowcount,
               0)


# -- leases ---------------------------------------------------------------------------------


def take_leases(
    t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
    leases: list[tuple[str, int | None, float, int]],
) -> tuple[set[str], dict[str, str | None]]:
    """Take ``(job, token, hold, lanes)`` leases that are free or expired, one statement
    (item by item for a batch with lanes > 1). Returns what was taken
    (``ledger.lease_taken`` reads it) and the holders of the busy ones."""
    ids = [w[0] for w in leases]
    unknown = [j for j in dict.fromkeys(ids) if j not in t.known]
    if unknown:
        c.execute(Q["ensure_jobs"], (now, json.dumps(unknown)))
        t.known.update(unknown)
    _keep_lost_runs(c, now)
    if any(w[3] != 1 for w in leases):
        return _take_lanes(c, now, leases, instance)
    payload = json.dumps([[j, tok, now + ms(hold)] for j, tok, hold, _ in leases])
    acquired = {r[0] for r in c.execute(Q["take_leases"], (instance, now, payload))}
    holders: dict[str, str | None] = {}
    if len(acquired) < len(ids):
        busy = [j for j in ids if j not in acquired]
        holders = dict(c.execute(Q["lease_holders"], (json.dumps(busy),)).fetchall())
    return acquired, holders


def _take_lanes(
    c: sqlite3.Connection, now: int, leases: list[tuple[str, int | None, float, int]],
    instance: str,
) -> tuple[set[str], dict[str, str | None]]:
    """A batch with items of ``max_instances`` > 1: item by item, lane 0 (the job's state
    row) first, then the lowest free or expired lane 1..N-1."""
    _keep_lost_runs(c, now, lanes=True)
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    for j, tok, hold, n in leases:
        until = now + ms(hold)
        one = json.dumps([[j, tok, until]])
        if c.execute(Q["take_leases"], (instance, now, one)).fetchone() is not None:
            acquired.add(j if n == 1 else ledger.lane_key(tok))
            continue
        if n == 1:
            holders.update(c.execute(Q["lease_holders"], (json.dumps([j]),)).fetchall())
            continue
        c.execute(Q["ensure_lanes"], (j, n))
        if c.execute(Q["take_lane"], (instance, now, j, tok, until, n)).fetchone():
            acquired.add(ledger.lane_key(tok))
            continue
        held = sorted(r[0] for r in c.execute(Q["lane_holders"], (j, n)))
        holders[j] = ", ".join(held)
    return acquired, holders


def _keep_lost_runs(c: sqlite3.Connection, now: int, *, lanes: bool = False) -> None:
    """Before an expired lease is taken over, keep what it proves.

    A fast-path run's row is written after its handler starts; if the holder died before
    that, the claim and the unreleased lease are the only trace. Taking the lease would
    erase it, so the run is written first — open, with its deadline passed — and the
    orphan reaper marks it ``interrupted`` (and recovers it where the job asks). Cheap:
    the partial index holds only unreleased leases. ``lanes``: the same for lanes 1..N-1
    (only a batch with ``max_instances`` > 1 takes those). (PostgreSQL does this inside
    its ``take_leases`` statement.)
    """
    lost = c.execute(Q["lost_lane_runs" if lanes else "lost_runs"], (now,)).fetchall()
    if lost:
        overdue = _req(dt(now - 1))
        insert_runs(c, [
            ledger.kept_lost_run(job_id, token, holder, dt(slot), _req(dt(claimed)),
                                 overdue=overdue)
            for job_id, token, holder, slot, claimed in lost
        ])  # fmt: skip


def _rowcount(name: str) -> Callable[..., int]:
    def op(t: SQLiteTransport, c: sqlite3.Connection, now: int, rows: list[Any]) -> int:
        return int(c.execute(Q[name], (json.dumps(rows),)).rowcount)

    op.__name__ = name
    return op


def lost_runs(t: SQLiteTransport, c: sqlite3.Connection, now: int) -> list[tuple[Any, ...]]:
    return [_lost_row(r) for q in ("lost_runs", "lost_lane_runs")
            for r in c.execute(Q[q], (now,)).fetchall()]  # fmt: skip


# -- run rows -------------------------------------------------------------------------------


def insert_runs_op(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                   recs: Sequence[RunRecord]) -> None:
    insert_runs(c, recs)


def start_runs(t: SQLiteTransport, c: sqlite3.Connection, now: int,
               rows: list[tuple[int, int]]) -> None:
    c.execute(Q["start_runs"], (now, json.dumps(rows)))


def skip_busy(t: SQLiteTransport, c: sqlite3.Connection, now: int,
              rows: list[tuple[int, str]]) -> None:
    busy = json.dumps(ledger.busy_result())
    c.execute(Q["skip_busy_runs"], (ledger.ALREADY_EXECUTING, now,
                                    json.dumps([[rid, busy, line] for rid, line in rows])))


def runs_by_id(t: SQLiteTransport, c: sqlite3.Connection, now: int,
               ids: list[int]) -> dict[int, RunRecord]:
    return {r[0]: run_of(r) for r in c.execute(Q["runs_by_id"], (json.dumps(ids),))}


def finish_rows(t: SQLiteTransport, c: sqlite3.Connection, now: int, new: list[RunRecord],
                changed: list[RunRecord]) -> None:
    """New rows inserted (a token whose row exists already: that row updated), known rows
    updated, except where a row holds a final outcome already: the incoming one is kept
    as its late result (the ledger's fence)."""
    changed = list(changed)
    late: list[tuple[RunRecord, RunRecord]] = []  # (stored, incoming)
    tokens = [r.fencing_token for r in new if r.fencing_token is not None]
    if tokens:  # a token's row exists already: update it (one row per token)
        have = {row.fencing_token: row
                for row in map(run_of, c.execute(Q["runs_by_token"], (json.dumps(tokens),)))}
        if have:
            for r in new:
                got = have.get(r.fencing_token)
                if got is not None:
                    r.id = got.id
                    changed.append(r)
            new = [r for r in new if r.id is None]
    if changed:  # the fence: a row holding a final outcome is never overwritten
        ids = json.dumps([r.id for r in changed])
        done = {row.id: row for row in map(run_of, c.execute(Q["finished_runs_by_id"], (ids,)))}
        for r in changed:
            stored = done.get(r.id)
            if stored is not None and ledger.is_late(stored.status, r.status):
                late.append((stored, r))
        if late:
            fenced = {id(r) for _, r in late}
            changed = [r for r in changed if id(r) not in fenced]
    insert_runs(c, new)
    if changed:
        c.executemany(Q["finish_run"], [finish_row(r) for r in changed])
    for stored, r in late:
        kept = ledger.attach_late_result(stored, r, dt(now))
        c.execute(Q["attach_late"], (_json(kept.result), json.dumps(kept.logs), stored.id))


def record_skips(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                 rows: list[list[Any]]) -> int:
    """``[[job, slot ms, triggered_by, reason, instance, result, logs], ...]``: each skip
    takes its slot's claim first; a slot claimed already (a run, an earlier skip) gets no
    row, nor does a repeat within the batch."""
    won = {(j, s) for j, s in c.execute(
        Q["skip_claims"], (now, json.dumps([[r[0], r[1], r[4] or ""] for r in rows])))}
    kept = []
    for r in rows:
        if (r[0], r[1]) in won:
            won.discard((r[0], r[1]))
            r[5], r[6] = _json(r[5]), json.dumps(r[6])
            kept.append(r)
    if not kept:
        return 0
    return max(c.execute(Q["record_skips"], (now, json.dumps(kept))).rowcount, 0)


def reap(t: SQLiteTransport, c: sqlite3.Connection, now: int,
         parts: tuple[str, str, str]) -> list[RunRecord]:
    rows = c.execute(Q["reap"], (now, ledger.INTERRUPTED_REASON, ledger.INTERRUPTED_ERROR,
                                 *parts)).fetchall()
    return [run_of(r) for r in rows]


# -- job state ------------------------------------------------------------------------------


def ensure_jobs(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                job_ids: list[str]) -> dict[str, JobState]:
    c.execute(Q["ensure_jobs"], (now, json.dumps(job_ids)))
    t.known.update(job_ids)
    return read_states(t, c, now, job_ids)


def read_states(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                job_ids: list[str]) -> dict[str, JobState]:
    rows = c.execute(Q["read_states"], (json.dumps(job_ids),)).fetchall()
    return {r[0]: state_of(r) for r in rows}


def read_overrides(t: SQLiteTransport, c: sqlite3.Connection, now: int) -> dict[str, JobState]:
    return {r[0]: state_of(r) for r in c.execute(Q["read_overrides"]).fetchall()}


def set_override(t: SQLiteTransport, c: sqlite3.Connection, now: int, job_id: str,
                 enabled: bool | None, by: str | None, note: str | None,
                 until: datetime | None) -> JobState:
    c.execute(Q["ensure_job"], (job_id, now))
    c.execute(Q["set_override"], (None if enabled is None else int(enabled), by, now, note,
                                  None if until is None else ms(until.timestamp()), job_id))
    t.known.add(job_id)
    return read_states(t, c, now, [job_id])[job_id]


# -- instances ------------------------------------------------------------------------------


def heartbeat(t: SQLiteTransport, c: sqlite3.Connection, now: int, me: Instance,
              ttl: float) -> Heartbeat:
    """In a transaction: the usual beat, else (the row missing or declared lost) a
    registration that says so."""
    done = beat(t, c, now, me, ttl)
    if done is not None:
        return done
    got = Heartbeat(now=now / 1000.0)
    row = c.execute(Q["instance_get"], (me.instance_id,)).fetchone()
    if row is not None:
        got.lost, got.lost_at, got.lost_by = True, dt(row[0]), row[1]
    c.execute(Q["instance_register"],
              (me.instance_id, me.host, me.pid, me.role, me.version, now, me.plans))
    return _live(got, c, now, me, ttl)


def beat(t: SQLiteTransport, c: sqlite3.Connection, now: int, me: Instance,
         ttl: float) -> Heartbeat | None:
    """The usual heartbeat (the driver calls it outside a transaction): this instance's
    row beats (one statement, so a declaration of loss comes wholly before or after it),
    then the live set is read; None when the row is missing or declared lost."""
    if c.execute(Q["instance_beat"], (me.instance_id, now, me.plans)).rowcount != 1:
        return None
    return _live(Heartbeat(now=now / 1000.0), c, now, me, ttl)


def _live(got: Heartbeat, c: sqlite3.Connection, now: int, me: Instance,
          ttl: float) -> Heartbeat:
    return beat_rows(got, me.instance_id,
                     c.execute(Q["instances_live"], (now - ms(ttl),)).fetchall())


def declare_lost(t: SQLiteTransport, c: sqlite3.Connection, now: int, me: str,
                 ttl: float) -> list[Instance]:
    rows = c.execute(Q["instances_declare_lost"], (now, now - ms(ttl), me)).fetchall()
    return [_instance(r, live=False) for r in rows]


def leases_of(t: SQLiteTransport, c: sqlite3.Connection, now: int,
              instances: list[str]) -> list[tuple[Any, ...]]:
    return [_lost_row(r) for r in c.execute(Q["leases_of"], (json.dumps(instances),))]


def interrupt_lost(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                   rows: list[list[str]]) -> list[RunRecord]:
    got = c.execute(Q["interrupt_lost"], (now, ledger.INSTANCE_LOST_REASON, json.dumps(rows)))
    return [run_of(r) for r in got.fetchall()]


def instances_all(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                  ttl: float) -> list[Instance]:
    cut = now - ms(ttl)
    return [_instance(r, live=live(r[7], r[6], cut))
            for r in c.execute(Q["instances_all"]).fetchall()]  # fmt: skip


def instance_leave(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str) -> None:
    c.execute(Q["instance_leave"], (instance,))


# -- the registry and requests --------------------------------------------------------------


def registry_of(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                instance: str) -> dict[str, str]:
    return dict(c.execute(Q["registry_of"], (instance,)).fetchall())


def registry_drop(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
                  gone: Sequence[str]) -> None:
    c.execute(Q["registry_drop"], (instance, json.dumps(list(gone))))


def registry_put(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
                 put: Sequence[Declared]) -> None:
    c.execute(Q["registry_put"], (instance, now, registry_rows(put, spec_as_text=True)))


def registry_touch(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str) -> None:
    c.execute(Q["registry_touch"], (instance, now))


def registry_all(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                 ttl: float) -> list[Declared]:
    cut = now - ms(ttl)
    return [
        Declared(job_id=r[0], instance_id=r[1], team=r[2], source=r[3], digest=r[4],
                 spec=json.loads(r[5]), declared_at=dt(r[6]), seen_at=dt(r[7]),
                 live=bool(r[10]) and live(r[8], r[9], cut))
        for r in c.execute(Q["registry_all"]).fetchall()
    ]  # fmt: skip


def request_add(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                r: FleetRequest) -> FleetRequest:
    rid, at = c.execute(Q["request_add"], (r.kind, r.job_id, r.target, json.dumps(r.payload),
                                           r.requested_by, now)).fetchone()
    return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                        payload=dict(r.payload), target=r.target, id=rid, requested_at=dt(at))


def requests_open(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                  instance: str) -> list[tuple[int, str, str | None]]:
    return [(r[0], r[1], r[2]) for r in c.execute(Q["requests_open"], (instance,))]


def requests_take(t: SQLiteTransport, c: sqlite3.Connection, now: int, instance: str,
                  ids: list[int]) -> list[FleetRequest]:
    rows = c.execute(Q["requests_take"], (instance, now, json.dumps(ids))).fetchall()
    return sorted((_request(r) for r in rows), key=lambda q: q.id or 0)


def request_answer(t: SQLiteTransport, c: sqlite3.Connection, now: int, rid: int,
                   run_id: int | None, error: str | None, only_untaken: bool) -> bool:
    cur = c.execute(Q["request_answer"], (rid, now, run_id, error, int(only_untaken)))
    return cur.rowcount == 1


def request_note(t: SQLiteTransport, c: sqlite3.Connection, now: int, rid: int,
                 payload: dict[str, Any]) -> bool:
    return c.execute(Q["request_note"], (rid, json.dumps(payload))).rowcount == 1


def request_get(t: SQLiteTransport, c: sqlite3.Connection, now: int,
                rid: int) -> FleetRequest | None:
    row = c.execute(Q["request_get"], (rid,)).fetchone()
    return None if row is None else _request(row)


# -- reading the ledger ---------------------------------------------------------------------


def runs_query(t: SQLiteTransport, c: sqlite3.Connection, now: int, sql: str,
               args: list[Any]) -> list[RunRecord]:
    return [run_of(r) for r in c.execute(sql, args)]


def slot_runs_query(t: SQLiteTransport, c: sqlite3.Connection, now: int, sql: str,
                    args: list[Any]) -> list[SlotRun]:
    status = _STATUS
    new = tuple.__new__  # a NamedTuple without its Python-level __new__: 10,000 rows
    return [new(SlotRun, (r[0], r[1] / 1000, status[r[2]], r[3], bool(r[4])))
            for r in c.execute(sql, args)]  # fmt: skip


def job_slot_runs_query(t: SQLiteTransport, c: sqlite3.Connection, now: int, sql: str,
                        args: list[Any]) -> list[tuple[str, SlotRun]]:
    status = _STATUS
    new = tuple.__new__
    return [(r[0], new(SlotRun, (r[1], r[2] / 1000, status[r[3]], r[4], bool(r[5]))))
            for r in c.execute(sql, args)]  # fmt: skip


def get_run(t: SQLiteTransport, c: sqlite3.Connection, now: int, run_id: int) -> RunRecord | None:
    row = c.execute(Q["get_run"], (run_id,)).fetchone()
    return None if row is None else run_of(row)


def last_runs(t: SQLiteTransport, c: sqlite3.Connection, now: int,
              job_ids: list[str]) -> dict[str, RunRecord]:
    return {r[1]: run_of(r) for r in c.execute(Q["last_runs"], (json.dumps(job_ids),))}


def last_slot_runs(t: SQLiteTransport, c: sqlite3.Connection, now: int, job_ids: list[str],
                   since: float | None, statuses: list[str]) -> dict[str, SlotRun]:
    status = _STATUS
    new = tuple.__new__
    wanted: set[str] | None = None
    if since is None:
        rows = c.execute(Q["last_slot_runs"], (json.dumps(job_ids),))
    else:  # the few of note among every job's, kept for the jobs asked
        wanted = set(job_ids)
        rows = c.execute(Q["last_slot_runs_of_note"],
                         (math.ceil(since * 1000), json.dumps(statuses)))
    return {r[0]: new(SlotRun, (r[1], r[2] / 1000, status[r[3]], r[4], bool(r[5])))
            for r in rows if wanted is None or r[0] in wanted}  # fmt: skip


OPS: dict[str, Callable[..., Any]] = {
    "claim_slots": claim_slots,
    "draw_tokens": draw_tokens,
    "reclaim": reclaim,
    "delete_claims": delete_claims,
    "withdraw_claims": withdraw_claims,
    "take_leases": take_leases,
    "release_leases": _rowcount("release_leases"),
    "release_lanes": _rowcount("release_lanes"),
    "renew_leases": _rowcount("renew_leases"),
    "renew_lanes": _rowcount("renew_lanes"),
    "renew_deadlines": _rowcount("renew_deadlines"),
    "lost_runs": lost_runs,
    "insert_runs": insert_runs_op,
    "start_runs": start_runs,
    "skip_busy": skip_busy,
    "runs_by_id": runs_by_id,
    "finish_rows": finish_rows,
    "record_skips": record_skips,
    "reap": reap,
    "ensure_jobs": ensure_jobs,
    "read_states": read_states,
    "read_overrides": read_overrides,
    "set_override": set_override,
    "heartbeat": heartbeat,
    "beat": beat,
    "declare_lost": declare_lost,
    "leases_of": leases_of,
    "interrupt_lost": interrupt_lost,
    "instances_all": instances_all,
    "instance_leave": instance_leave,
    "registry_of": registry_of,
    "registry_drop": registry_drop,
    "registry_put": registry_put,
    "registry_touch": registry_touch,
    "registry_all": registry_all,
    "request_add": request_add,
    "requests_open": requests_open,
    "requests_take": requests_take,
    "request_answer": request_answer,
    "request_note": request_note,
    "request_get": request_get,
    "runs_query": runs_query,
    "slot_runs_query": slot_runs_query,
    "job_slot_runs_query": job_slot_runs_query,
    "get_run": get_run,
    "last_runs": last_runs,
    "last_slot_runs": last_slot_runs,
}
"""Every operation by name (the plans' vocabulary, :data:`cronfleet.store.driver.OPERATIONS`,
and the single-statement calls of :class:`~cronfleet.store.driver.StoreDriver`)."""
