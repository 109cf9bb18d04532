"""PostgreSQL's named operations: each one executes named statements of ``queries.sql``
on the transaction's cursor and maps the rows (``timestamptz`` read as datetimes; batches
travel as JSON with integer milliseconds, converted by ``to_timestamp`` in SQL). No
decision is taken here: the plans of :mod:`cronfleet.store.driver` say what to do, in
which order, inside one ``BEGIN``.

Every operation is ``await op(t, cur, now, *args)``: ``t`` the transport (its ``known``
job ids, its announcements), ``cur`` the transaction's cursor, ``now`` the transaction's
time (the database's ``now()`` or the test clock).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from cronfleet.errors import StoreError
from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import Declared, FleetRequest, Heartbeat, Instance, SlotRun, watermark
from cronfleet.store.driver import beat_rows, live
from cronfleet.store.rows import dumps, ms, msd, registry_rows

if TYPE_CHECKING:
    from cronfleet.store.postgres.transport import Cursor, PostgresTransport

__all__ = ["OPS", "finish_row", "run_of", "run_rows", "session_name", "state_of"]

log = logging.getLogger("cronfleet.store.postgres")

_STATUS = {s.value: s for s in RunStatus}  # Enum lookup by value, without its call
_dumps = dumps


# -- rows -----------------------------------------------------------------------------------


def run_rows(recs: Sequence[RunRecord]) -> str:
    """The JSON rows of the run insert (``RUN_INSERT_COLUMNS`` order)."""
    return dumps([
        [r.job_id, msd(r.slot), r.triggered_by.value, r.status.value, r.reason, r.instance_id,
         r.fencing_token, r.manual, r.is_catchup, r.is_recovery, r.attempt, msd(r.claimed_at),
         msd(r.started_at), msd(r.finished_at), None if r.status.finished else msd(r.deadline),
         r.result, r.error, r.logs or [], r.params, r.forced_by]
        for r in recs
    ])  # fmt: skip


def finish_row(r: RunRecord) -> list[Any]:
    """``[id, status, reason, started, finished, deadline, result, error, logs, attempt]``."""
    return [
        r.id, r.status.value, r.reason, msd(r.started_at), msd(r.finished_at),
        None if r.status.finished else msd(r.deadline), r.result, r.error, r.logs or [],
        r.attempt,
    ]  # fmt: skip


def run_of(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        id=row[0], job_id=row[1], slot=row[2], triggered_by=TriggeredBy(row[3]),
        status=RunStatus(row[4]), reason=row[5], instance_id=row[6], fencing_token=row[7],
        manual=row[8], is_catchup=row[9], is_recovery=row[10], attempt=row[11],
        claimed_at=row[12], started_at=row[13], finished_at=row[14], deadline=row[15],
        result=row[16], error=row[17], logs=[] if row[18] is None else list(row[18]),
        params=row[19], forced_by=row[20],
    )  # fmt: skip


def state_of(row: Sequence[Any]) -> JobState:
    """A state row; ``last_slot`` by the watermark rule from its two columns (the newest
    claimed slot, the newest claim-less skip)."""
    claimed, skipped = row[9], row[10]
    mark = watermark(None if claimed is None else claimed.timestamp(),
                     None if skipped is None else skipped.timestamp())
    last = None
    if mark is not None:
        last = claimed if claimed is not None and claimed.timestamp() == mark else skipped
    return JobState(
        job_id=row[0], enabled_override=row[1], override_by=row[2], override_at=row[3],
        override_note=row[4], override_until=row[5], lease_holder=row[6], lease_token=row[7],
        lease_until=row[8], last_slot=last, created_at=row[11],
    )  # fmt: skip


def _instance(row: Sequence[Any], *, live: bool) -> Instance:
    return Instance(
        instance_id=row[0], host=row[1], pid=row[2], role=row[3], version=row[4],
        started_at=row[5], heartbeat_at=row[6], lost_at=row[7], lost_by=row[8], live=live,
    )  # fmt: skip


def _request(row: Sequence[Any]) -> FleetRequest:
    return FleetRequest(
        id=row[0], kind=row[1], job_id=row[2], target=row[3], payload=dict(row[4] or {}),
        requested_by=row[5], requested_at=row[6], taken_by=row[7], taken_at=row[8],
        answered_at=row[9], run_id=row[10], error=row[11],
    )  # fmt: skip


def _run_id(r: RunRecord) -> int:
    return r.id or 0


async def insert_runs(t: PostgresTransport, cur: Cursor, now: datetime,
                      recs: Sequence[RunRecord]) -> None:
    """Insert complete run rows and give each its id (at most 2 statements).

    Rows with a fencing token are upserted on it and matched back by token. For the
    others, identity values are drawn in the ``ORDER BY`` order of the ``SELECT``, so
    sorting the returned ids gives each row its own (another transaction may take ids in
    between, never reorder ours)."""
    if not recs:
        return
    ids: list[int] = [0] * len(recs)
    fenced = [i for i, r in enumerate(recs) if r.fencing_token is not None]
    plain = [i for i, r in enumerate(recs) if r.fencing_token is None]
    if fenced:
        await cur.execute(cur.q["upsert_runs"], {"rows": run_rows([recs[i] for i in fenced])})
        by_token = {tok: rid for rid, tok in await cur.fetchall()}
        missing = [recs[i] for i in fenced if recs[i].fencing_token not in by_token]
        if missing:  # fenced: the token's row holds a final outcome already
            by_token.update(await _attach_late(cur, missing, "tokens"))
        for i in fenced:
            ids[i] = by_token[recs[i].fencing_token]
    if plain:
        await cur.execute(cur.q["insert_runs"], {"rows": run_rows([recs[i] for i in plain])})
        got = sorted(r[0] for r in await cur.fetchall())
        if len(got) != len(plain):
            raise StoreError(f"inserted {len(got)} run rows for {len(plain)} records")
        for i, rid in zip(plain, got, strict=True):
            ids[i] = rid
    for rec, rid in zip(recs, ids, strict=True):
        rec.id = rid


async def _attach_late(
    cur: Cursor, late: Sequence[RunRecord], by: Literal["tokens", "ids"]
) -> dict[int, int]:
    """Keep each of ``late`` as the late result of the row that already holds its slot's
    final outcome (found by token or by id); ``{token: row id}``."""
    if by == "tokens":
        await cur.execute(cur.q["runs_by_token"],
                          {"tokens": _dumps([r.fencing_token for r in late])})
        stored = {row.fencing_token: row for row in map(run_of, await cur.fetchall())}
        pairs = [(stored.get(r.fencing_token), r) for r in late]
    else:
        await cur.execute(cur.q["runs_by_id"], {"ids": _dumps([r.id for r in late])})
        stored_id = {row.id: row for row in map(run_of, await cur.fetchall())}
        pairs = [(stored_id.get(r.id), r) for r in late]
    out: dict[int, int] = {}
    for row, rec in pairs:
        if row is None or row.id is None:
            raise StoreError(f"run row of job {rec.job_id} vanished while writing it")
        kept = ledger.attach_late_result(row, rec)
        await cur.execute(
            cur.q["attach_late"],
            {"result": _dumps(kept.result), "logs": _dumps(kept.logs), "id": row.id},
        )
        if row.fencing_token is not None:
            out[row.fencing_token] = row.id
    return out


# -- claims ---------------------------------------------------------------------------------


async def claim_slots(t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
                      rows: list[list[Any]]) -> dict[tuple[str, int], int]:
    await cur.execute(cur.q["claim"], {"inst": instance, "now": now, "rows": _dumps(rows)})
    return {(j, s): tok for tok, j, s in await cur.fetchall()}


async def draw_tokens(t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
                      job_ids: list[str]) -> list[int]:
    await cur.execute(cur.q["draw_tokens"], {"inst": instance, "now": now,
                                              "ids": _dumps(job_ids)})
    return sorted(r[0] for r in await cur.fetchall())


async def reclaim(t: PostgresTransport, cur: Cursor, now: datetime, instance: str, job_id: str,
                  old: int, slot: int) -> int | None:
    await cur.execute(cur.q["delete_claim"], (job_id, old))
    if not cur.rowcount:
        return None
    await cur.execute(cur.q["claim_one"], (job_id, slot, instance, now))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def delete_claims(t: PostgresTransport, cur: Cursor, now: datetime,
                        tokens: list[int]) -> None:
    await cur.execute(cur.q["delete_claims"], {"ids": _dumps(tokens)})


async def withdraw_claims(t: PostgresTransport, cur: Cursor, now: datetime,
                          rows: list[tuple[str, int, int]]) -> int:
    await cur.execute(cur.q["withdraw_claims"], {"rows": _dumps([list(r) for r in rows])})
    return len(await cur.fetchall())


# -- leases ---------------------------------------------------------------------------------


async def take_leases(
    t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
    leases: list[tuple[str, int | None, float, int]],
) -> tuple[set[str], dict[str, str | None]]:
    """One statement per batch: take ``(job, token, hold, lanes)`` leases that are free or
    expired (keeping a dead holder's unwritten run first, inside the statement). Returns
    what was taken and the holders of the busy ones. A batch with items of
    ``max_instances`` > 1 goes item by item (:func:`_take_lanes`)."""
    ids = [w[0] for w in leases]
    unknown = [j for j in dict.fromkeys(ids) if j not in t.known]
    if unknown:
        await cur.execute(cur.q["ensure_jobs"], {"now": now, "ids": _dumps(unknown)})
    if any(w[3] != 1 for w in leases):
        return await _take_lanes(cur, now, leases, instance)
    now_ms = msd(now) or 0
    rows = [[j, tok, now_ms + ms(hold)] for j, tok, hold, _ in leases]
    await cur.execute(cur.q["take_leases"], {"inst": instance, "now": now, "rows": _dumps(rows)})
    wanted = {j: tok for j, tok, _, _ in leases}
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    for job_id, token, holder in await cur.fetchall():
        if job_id in wanted:
            if token == wanted[job_id]:
                acquired.add(job_id)
            else:
                holders[job_id] = holder
    return acquired, holders


async def _take_lanes(
    cur: Cursor, now: datetime, leases: list[tuple[str, int | None, float, int]], instance: str,
) -> tuple[set[str], dict[str, str | None]]:
    """Item by item in job_id order (the lock order of every lease writer): lane 0 (the
    job's state row, locked by take_leases), then the lowest free or expired lane 1..N-1
    (``take_lane``) while that lock is held."""
    now_ms = msd(now) or 0
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    for j, tok, hold, n in sorted(leases, key=lambda w: w[0]):
        until = now_ms + ms(hold)
        await cur.execute(cur.q["take_leases"],
                          {"inst": instance, "now": now, "rows": _dumps([[j, tok, until]])})
        row = await cur.fetchone()
        if row is not None and row[1] == tok:
            acquired.add(j if n == 1 else ledger.lane_key(tok))
            continue
        if n > 1:
            args = {"job": j, "n": n, "now": now, "inst": instance, "tok": tok, "until": until}
            await cur.execute(cur.q["take_lane"], args)
            if await cur.fetchone() is not None:
                acquired.add(ledger.lane_key(tok))
                continue
            await cur.execute(cur.q["lane_holders"], {"job": j, "n": n})
            holders[j] = ", ".join(sorted(r[0] for r in await cur.fetchall()))
        else:
            holders[j] = None if row is None else row[2]
    return acquired, holders


def _rowcount(name: str) -> Callable[..., Awaitable[int]]:
    async def op(t: PostgresTransport, cur: Cursor, now: datetime, rows: list[Any]) -> int:
        await cur.execute(cur.q[name], {"rows": _dumps(rows)})
        return cur.rowcount

    op.__name__ = name
    return op


async def lost_runs(t: PostgresTransport, cur: Cursor, now: datetime) -> list[tuple[Any, ...]]:
    await cur.execute(cur.q["lost_runs"], {"now": now})
    lost = await cur.fetchall()
    await cur.execute(cur.q["lost_lane_runs"], {"now": now})
    return lost + await cur.fetchall()


# -- run rows -------------------------------------------------------------------------------


async def start_runs(t: PostgresTransport, cur: Cursor, now: datetime,
                     rows: list[tuple[int, int]]) -> None:
    await cur.execute(cur.q["start_runs"], {"now": now, "rows": _dumps(rows)})


async def skip_busy(t: PostgresTransport, cur: Cursor, now: datetime,
                    rows: list[tuple[int, str]]) -> None:
    await cur.execute(cur.q["skip_busy_runs"], {
        "reason": ledger.ALREADY_EXECUTING, "now": now,
        "result": _dumps(ledger.busy_result()), "rows": _dumps(rows),
    })  # fmt: skip


async def runs_by_id(t: PostgresTransport, cur: Cursor, now: datetime,
                     ids: list[int]) -> dict[int, RunRecord]:
    await cur.execute(cur.q["runs_by_id"], {"ids": _dumps(ids)})
    return {r[0]: run_of(r) for r in await cur.fetchall()}


async def finish_rows(t: PostgresTransport, cur: Cursor, now: datetime, new: list[RunRecord],
                      changed: list[RunRecord]) -> None:
    """New rows inserted (upserted on their token), known rows updated in id order (the
    lock order) except those holding a final outcome: the incoming one is kept as its
    late result (the ledger's fence)."""
    await insert_runs(t, cur, now, new)
    if changed:
        updates = _dumps([finish_row(r) for r in sorted(changed, key=_run_id)])
        await cur.execute(cur.q["finish_runs"], {"rows": updates})
        done = {r[0] for r in await cur.fetchall()}
        late = [r for r in changed if r.id not in done]
        if late:  # fenced: those rows hold a final outcome already
            await _attach_late(cur, late, "ids")


async def record_skips(t: PostgresTransport, cur: Cursor, now: datetime,
                       rows: list[list[Any]]) -> int:
    await cur.execute(cur.q["record_skips"], {"now": now, "rows": _dumps(rows)})
    return max(cur.rowcount, 0)


async def reap(t: PostgresTransport, cur: Cursor, now: datetime,
               parts: tuple[str, str, str]) -> list[RunRecord]:
    before, anon, after = parts
    await cur.execute(cur.q["reap"], {
        "now": now, "reason": ledger.INTERRUPTED_REASON, "error": ledger.INTERRUPTED_ERROR,
        "before": before, "anon": anon, "after": after,
    })  # fmt: skip
    return [run_of(r) for r in await cur.fetchall()]


# -- job state ------------------------------------------------------------------------------


async def ensure_jobs(t: PostgresTransport, cur: Cursor, now: datetime,
                      job_ids: list[str]) -> dict[str, JobState]:
    await cur.execute(cur.q["ensure_jobs"], {"now": now, "ids": _dumps(job_ids)})
    created = [r[0] for r in await cur.fetchall()]
    if created:
        await t.announce(cur, "jobs", created)
    return await read_states(t, cur, now, job_ids)


async def read_states(t: PostgresTransport, cur: Cursor, now: datetime,
                      job_ids: list[str]) -> dict[str, JobState]:
    await cur.execute(cur.q["read_states"], {"ids": _dumps(job_ids)})
    return {r[0]: state_of(r) for r in await cur.fetchall()}


async def read_overrides(t: PostgresTransport, cur: Cursor, now: datetime) -> dict[str, JobState]:
    await cur.execute(cur.q["read_overrides"])
    return {r[0]: state_of(r) for r in await cur.fetchall()}


async def set_override(t: PostgresTransport, cur: Cursor, now: datetime, job_id: str,
                       enabled: bool | None, by: str | None, note: str | None,
                       until: datetime | None) -> JobState:
    await cur.execute(cur.q["ensure_job"], (job_id, now))
    await cur.execute(cur.q["set_override"], (enabled, by, now, note, until, job_id))
    row = await cur.fetchone()
    assert row is not None
    await t.announce(cur, "override", [job_id])
    return state_of(row)


# -- instances ------------------------------------------------------------------------------


async def heartbeat(t: PostgresTransport, cur: Cursor, now: datetime, me: Instance,
                    ttl: float) -> Heartbeat:
    beat = Heartbeat(now=now.timestamp())
    await cur.execute(cur.q["instance_get"], {"id": me.instance_id})
    row = await cur.fetchone()
    if row is None or row[0] is not None:
        if row is not None:
            beat.lost, beat.lost_at, beat.lost_by = True, row[0], row[1]
        await cur.execute(cur.q["instance_register"], {
            "id": me.instance_id, "host": me.host, "pid": me.pid, "role": me.role,
            "version": me.version, "now": now, "plans": me.plans,
        })  # fmt: skip
    else:
        await cur.execute(cur.q["instance_beat"],
                          {"id": me.instance_id, "now": now, "plans": me.plans})
    await cur.execute(cur.q["instances_live"], {"cut": now - timedelta(seconds=ttl)})
    return beat_rows(beat, me.instance_id, await cur.fetchall())


async def beat(t: PostgresTransport, cur: Cursor, now: datetime, me: Instance,
               ttl: float) -> Heartbeat | None:
    """The usual heartbeat in one round trip (called outside a transaction); None when
    this instance's row is missing or declared lost (``heartbeat`` registers it)."""
    await cur.execute(cur.q["instance_beat_alone"], {
        "id": me.instance_id, "plans": me.plans, "ttl": ttl,
        "now": None if t.time_source == "database" else now,
    })  # fmt: skip
    rows = await cur.fetchall()
    if not rows[0][3]:
        return None
    at = rows[0][4]
    mine = [(me.instance_id, me.plans, True) if r[0] == me.instance_id else r
            for r in rows if r[0] is not None]
    return beat_rows(Heartbeat(now=at.timestamp()), me.instance_id, mine)


async def declare_lost(t: PostgresTransport, cur: Cursor, now: datetime, me: str,
                       ttl: float) -> list[Instance]:
    """Declare lost the instances whose last heartbeat is older than ``ttl``. Their
    server sessions are ended *before* their rows are updated: a process frozen inside
    its heartbeat's transaction holds its own row, and the update waited on it until the
    server's idle timeout (10 s; the fault suite's ``sigstop`` and ``idle_tx`` each met
    it). A heartbeat that commits between the read and the update keeps its instance
    live (the update checks again); it only had its connections reset."""
    args = {"now": now, "cut": now - timedelta(seconds=ttl), "me": me}
    await cur.execute(cur.q["instances_stale"], args)
    stale = [r[0] for r in await cur.fetchall()]
    if not stale:
        return []
    await end_sessions(cur, [session_name(i) for i in stale])
    await cur.execute(cur.q["instances_declare_lost"], args)
    return [_instance(r, live=False) for r in await cur.fetchall()]


def session_name(instance_id: str) -> str:
    """The ``application_name`` of an instance's connections: readable in
    ``pg_stat_activity`` and unique whatever the id's length (the server keeps 63 bytes:
    the id's first 36 characters, then a hash of all of it)."""
    digest = hashlib.blake2b(instance_id.encode(), digest_size=8).hexdigest()
    return f"cronfleet {instance_id[:36]} {digest}"


async def end_sessions(cur: Cursor, names: list[str]) -> None:
    """End the server sessions of instances about to be declared lost (their connections carry
    :func:`session_name`): a process frozen inside a transaction would otherwise hold its
    claims and row locks -- the very leases this transaction goes on to break -- until
    ``idle_in_transaction_session_timeout``. Best effort: a role that may not signal
    those backends (not the same role, no ``pg_signal_backend``) leaves them to that
    timeout, as before (logged once per call)."""
    await cur.execute(b"SAVEPOINT end_sessions")
    try:
        await cur.execute(cur.q["end_sessions"], {"names": _dumps(names)})
        ended = await cur.fetchall()
    except psycopg.Error as exc:
        await cur.execute(b"ROLLBACK TO SAVEPOINT end_sessions")
        log.warning("cannot end the sessions of the instances declared lost (%s); their "
                    "open transactions end at the server's idle timeout", exc)
        return
    await cur.execute(b"RELEASE SAVEPOINT end_sessions")
    if ended:
        log.info("ended %d server session(s) of the instance(s) declared lost", len(ended))


async def leases_of(t: PostgresTransport, cur: Cursor, now: datetime,
                    instances: list[str]) -> list[tuple[Any, ...]]:
    """Locks the job_state rows first, in job_id order (as every writer does)."""
    await cur.execute(cur.q["leases_of"], {"ids": _dumps(instances)})
    leases = await cur.fetchall()
    await cur.execute(cur.q["lanes_of"], {"ids": _dumps(instances)})
    return leases + await cur.fetchall()


async def interrupt_lost(t: PostgresTransport, cur: Cursor, now: datetime,
                         rows: list[list[str]]) -> list[RunRecord]:
    await cur.execute(cur.q["interrupt_lost"],
                      {"now": now, "reason": ledger.INSTANCE_LOST_REASON, "rows": _dumps(rows)})
    return [run_of(r) for r in await cur.fetchall()]


async def instances_all(t: PostgresTransport, cur: Cursor, now: datetime,
                        ttl: float) -> list[Instance]:
    cut = now - timedelta(seconds=ttl)
    await cur.execute(cur.q["instances_all"])
    return [_instance(r, live=live(r[7], r[6], cut)) for r in await cur.fetchall()]


async def instance_leave(t: PostgresTransport, cur: Cursor, now: datetime,
                         instance: str) -> None:
    await cur.execute(cur.q["instance_leave"], {"id": instance})


# -- the registry and requests --------------------------------------------------------------


async def registry_of(t: PostgresTransport, cur: Cursor, now: datetime,
                      instance: str) -> dict[str, str]:
    await cur.execute(cur.q["registry_of"], {"id": instance})
    return {r[0]: r[1] for r in await cur.fetchall()}


async def registry_drop(t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
                        gone: Sequence[str]) -> None:
    await cur.execute(cur.q["registry_drop"],
                      {"id": instance, "gone": _dumps(list(gone)), "now": now})


async def registry_put(t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
                       put: Sequence[Declared]) -> None:
    await cur.execute(cur.q["registry_put"],
                      {"id": instance, "rows": registry_rows(put), "now": now})


async def registry_touch(t: PostgresTransport, cur: Cursor, now: datetime,
                         instance: str) -> None:
    await cur.execute(cur.q["registry_touch"], {"id": instance, "now": now})


async def registry_all(t: PostgresTransport, cur: Cursor, now: datetime,
                       ttl: float) -> list[Declared]:
    cut = now - timedelta(seconds=ttl)
    await cur.execute(cur.q["registry_all"])
    return [
        Declared(job_id=r[0], instance_id=r[1], team=r[2], source=r[3], digest=r[4],
                 spec=dict(r[5]), declared_at=r[6], seen_at=r[7],
                 live=bool(r[10]) and live(r[8], r[9], cut))
        for r in await cur.fetchall()
    ]  # fmt: skip


async def request_add(t: PostgresTransport, cur: Cursor, now: datetime,
                      r: FleetRequest) -> FleetRequest:
    await cur.execute(cur.q["request_add"], {
        "kind": r.kind, "job": r.job_id, "target": r.target, "payload": _dumps(r.payload),
        "by": r.requested_by, "now": now,
    })  # fmt: skip
    row = await cur.fetchone()
    assert row is not None
    await t.announce(cur, "request", [r.job_id])
    return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                        payload=dict(r.payload), target=r.target, id=row[0],
                        requested_at=row[1])


async def requests_open(t: PostgresTransport, cur: Cursor, now: datetime,
                        instance: str) -> list[tuple[int, str, str | None]]:
    await cur.execute(cur.q["requests_open"], {"id": instance})
    return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


async def requests_take(t: PostgresTransport, cur: Cursor, now: datetime, instance: str,
                        ids: list[int]) -> list[FleetRequest]:
    await cur.execute(cur.q["requests_take"], {"id": instance, "now": now, "ids": ids})
    return sorted((_request(r) for r in await cur.fetchall()), key=lambda q: q.id or 0)


async def request_answer(t: PostgresTransport, cur: Cursor, now: datetime, rid: int,
                         run_id: int | None, error: str | None, only_untaken: bool) -> bool:
    await cur.execute(cur.q["request_answer"], {
        "rid": rid, "now": now, "run": run_id, "error": error, "untaken": only_untaken,
    })  # fmt: skip
    return cur.rowcount == 1


async def request_note(t: PostgresTransport, cur: Cursor, now: datetime, rid: int,
                       payload: dict[str, Any]) -> bool:
    await cur.execute(cur.q["request_note"], {"rid": rid, "payload": _dumps(payload)})
    return cur.rowcount == 1


async def request_get(t: PostgresTransport, cur: Cursor, now: datetime,
                      rid: int) -> FleetRequest | None:
    await cur.execute(cur.q["request_get"], {"rid": rid})
    row = await cur.fetchone()
    return None if row is None else _request(row)


# -- reading the ledger ---------------------------------------------------------------------


async def runs_query(t: PostgresTransport, cur: Cursor, now: datetime, sql: str,
                     args: list[Any]) -> list[RunRecord]:
    await cur.execute(sql, args)
    return [run_of(r) for r in await cur.fetchall()]


async def slot_runs_query(t: PostgresTransport, cur: Cursor, now: datetime, sql: str,
                          args: list[Any]) -> list[SlotRun]:
    await cur.execute(sql, args)
    status = _STATUS
    new = tuple.__new__  # a NamedTuple without its Python-level __new__: 10,000 rows
    return [new(SlotRun, (r[0], r[1], status[r[2]], r[3], bool(r[4])))
            for r in await cur.fetchall()]  # fmt: skip


async def job_slot_runs_query(t: PostgresTransport, cur: Cursor, now: datetime, sql: str,
                              args: list[Any]) -> list[tuple[str, SlotRun]]:
    await cur.execute(sql, args)
    status = _STATUS
    new = tuple.__new__
    return [(r[0], new(SlotRun, (r[1], r[2], status[r[3]], r[4], bool(r[5]))))
            for r in await cur.fetchall()]  # fmt: skip


async def get_run(t: PostgresTransport, cur: Cursor, now: datetime,
                  run_id: int) -> RunRecord | None:
    await cur.execute(cur.q["get_run"], (run_id,))
    row = await cur.fetchone()
    return None if row is None else run_of(row)


async def last_runs(t: PostgresTransport, cur: Cursor, now: datetime,
                    job_ids: list[str]) -> dict[str, RunRecord]:
    await cur.execute(cur.q["last_runs"], {"ids": _dumps(job_ids)})
    return {r[1]: run_of(r) for r in await cur.fetchall()}


async def last_slot_runs(t: PostgresTransport, cur: Cursor, now: datetime,
                         job_ids: list[str], since: float | None,
                         statuses: list[str]) -> dict[str, SlotRun]:
    await cur.execute(cur.q["last_slot_runs"], {"ids": _dumps(job_ids), "since": since,
                                                "statuses": statuses})
    status = _STATUS
    new = tuple.__new__
    return {r[0]: new(SlotRun, (r[1], r[2], status[r[3]], r[4], bool(r[5])))
            for r in await cur.fetchall()}  # fmt: skip


# -- retention in bounded pieces (PostgresTransport.prune drives them, each its own call) --


async def prune_claim_blocks(t: PostgresTransport, cur: Cursor, now: datetime) -> int:
    await cur.execute(cur.q["prune_claim_blocks"])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def prune_newest_claims(t: PostgresTransport, cur: Cursor, now: datetime, after: str,
                              limit: int) -> list[tuple[str, str | None]]:
    await cur.execute(cur.q["prune_newest_claims"], {"after": after, "limit": limit})
    return [(r[0], r[1]) for r in await cur.fetchall()]


async def prune_claims_in(t: PostgresTransport, cur: Cursor, now: datetime, lo: int, hi: int,
                          before: float, keep: list[str]) -> int:
    await cur.execute(cur.q["prune_claims_in"], {
        "lo": f"({lo},0)", "hi": f"({hi},0)", "cut": datetime.fromtimestamp(before, UTC),
        "keep": keep})
    return max(cur.rowcount, 0)


async def prune_kept_skips(t: PostgresTransport, cur: Cursor, now: datetime) -> dict[str, int]:
    await cur.execute(cur.q["prune_kept_skips"])
    return dict(await cur.fetchall())


async def prune_run_bound(t: PostgresTransport, cur: Cursor, now: datetime, after: int,
                          batch: int) -> int | None:
    await cur.execute(cur.q["prune_run_bound"], (after, batch - 1))
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def prune_old_runs_in(t: PostgresTransport, cur: Cursor, now: datetime, lo: int, hi: int,
                            before: float, keep: list[int]) -> int:
    await cur.execute(cur.q["prune_old_runs_in"], {
        "lo": lo, "hi": hi, "cut": datetime.fromtimestamp(before, UTC), "keep": keep})
    return max(cur.rowcount, 0)


async def prune_run_jobs(t: PostgresTransport, cur: Cursor, now: datetime, after: str,
                         limit: int) -> list[str]:
    await cur.execute(cur.q["prune_run_jobs"], {"after": after, "limit": limit})
    return [r[0] for r in await cur.fetchall()]


async def prune_cuts_of(t: PostgresTransport, cur: Cursor, now: datetime, jobs: list[str],
                        per_job: int) -> dict[str, int]:
    await cur.execute(cur.q["prune_cuts_of"], {"jobs": jobs, "n": per_job})
    return {j: cut for j, cut in await cur.fetchall() if cut is not None}


async def prune_runs_beyond(t: PostgresTransport, cur: Cursor, now: datetime,
                            cuts: dict[str, int], keep: dict[str, int], batch: int) -> int:
    jobs = list(cuts)
    await cur.execute(cur.q["prune_runs_beyond"], {
        "jobs": jobs, "cuts": list(cuts.values()), "keep": [keep.get(j) for j in jobs],
        "batch": batch})
    return max(cur.rowcount, 0)


OPS: dict[str, Callable[..., Awaitable[Any]]] = {
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
    "insert_runs": insert_runs,
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
    "prune_claim_blocks": prune_claim_blocks,
    "prune_newest_claims": prune_newest_claims,
    "prune_claims_in": prune_claims_in,
    "prune_kept_skips": prune_kept_skips,
    "prune_run_bound": prune_run_bound,
    "prune_old_runs_in": prune_old_runs_in,
    "prune_run_jobs": prune_run_jobs,
    "prune_cuts_of": prune_cuts_of,
    "prune_runs_beyond": prune_runs_beyond,
}
"""Every operation by name (the plans' vocabulary, :data:`cronfleet.store.driver.OPERATIONS`,
and the single-statement calls of :class:`~cronfleet.store.driver.StoreDriver`)."""
