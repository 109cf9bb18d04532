"""Redis's named operations and row mapping: each operation is one script call
(``scripts/*.lua``) and the mapping of its answer. The scripts do each change atomically;
nothing is decided here (the store's rules are :mod:`cronfleet.store.driver`'s, the rows
:mod:`cronfleet.store.ledger`'s).

Every operation is ``await op(t, *args)``, ``t`` the :class:`RedisTransport`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronfleet.model import JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.store.base import Declared, FleetRequest, Heartbeat, Instance, watermark
from cronfleet.store.driver import beat_rows, live
from cronfleet.store.rows import dt, msd

if TYPE_CHECKING:
    from cronfleet.store.redis.transport import RedisTransport

__all__ = ["OPS", "run_fields", "run_record"]

_STATES_CHUNK = 5_000  # job state rows per script call (~50 ms of the server at most: a
# heartbeat waiting behind three processes' 20,000-row calls of ~200 ms each timed out)


def _s(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def run_fields(r: RunRecord, dedupe: str | None = None) -> dict[str, str]:
    """A record as the run hash's fields (strings; absent = None)."""
    f: dict[str, str] = {
        "j": r.job_id,
        "sl": str(round(r.slot.timestamp() * 1000)),
        "tb": r.triggered_by.value,
        "st": r.status.value,
        "ma": "1" if r.manual else "0",
        "ca": "1" if r.is_catchup else "0",
        "re": "1" if r.is_recovery else "0",
        "at": str(r.attempt),
        "lg": json.dumps(r.logs, default=str) if r.logs else "[]",
    }
    if r.id is not None:
        f["id"] = str(r.id)
    for key, value in (
        ("rs", r.reason), ("in", r.instance_id), ("e", r.error), ("fb", r.forced_by),
    ):  # fmt: skip
        if value is not None:
            f[key] = _s(value)
    if r.fencing_token is not None:
        f["tk"] = str(r.fencing_token)
    for key, when in (("cl", r.claimed_at), ("sa", r.started_at), ("fa", r.finished_at)):
        if when is not None:
            f[key] = str(msd(when))
    if not r.status.finished and r.deadline is not None:
        f["dl"] = str(msd(r.deadline))
    if r.result is not None:
        f["r"] = json.dumps(r.result, default=str)
    if r.params is not None:
        f["pa"] = json.dumps(r.params, default=str)
    if dedupe is not None:
        f["dd"] = dedupe
    return f


def _t(f: Mapping[str, str], key: str) -> datetime | None:
    v = f.get(key)
    return None if v is None else dt(int(v))


def run_record(flat: Sequence[Any]) -> RunRecord:
    """A run hash (``HGETALL``'s flat list) as a record."""
    it = iter(flat)
    f = {_d(k): _d(v) for k, v in zip(it, it, strict=True)}
    slot = dt(int(f["sl"]))
    assert slot is not None
    return RunRecord(
        id=int(f["id"]),
        job_id=f["j"],
        slot=slot,
        triggered_by=TriggeredBy(f["tb"]),
        status=RunStatus(f["st"]),
        instance_id=f.get("in"),
        fencing_token=int(f["tk"]) if "tk" in f else None,
        manual=f.get("ma") == "1",
        is_catchup=f.get("ca") == "1",
        is_recovery=f.get("re") == "1",
        attempt=int(f.get("at", "1")),
        reason=f.get("rs"),
        claimed_at=_t(f, "cl"),
        started_at=_t(f, "sa"),
        finished_at=_t(f, "fa"),
        deadline=_t(f, "dl"),
        result=json.loads(f["r"]) if "r" in f else None,
        error=f.get("e"),
        logs=list(json.loads(f["lg"])) if "lg" in f else [],
        params=json.loads(f["pa"]) if "pa" in f else None,
        forced_by=f.get("fb"),
    )


def _d(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _i(v: Any) -> int | None:
    v = _d(v)
    return None if v is None or v is False or v == "" else int(v)


def _state(row: Sequence[Any]) -> JobState:
    r = [None if v is False else _d(v) for v in row]  # JSON false / RESP nil: absent
    o = r[1]
    cmax, smax = _i(r[9]), _i(r[10])
    mark = watermark(cmax, smax)
    return JobState(
        job_id=str(r[0]),
        enabled_override=None if o is None else o == "1",
        override_by=r[2],
        override_at=dt(_i(r[3])),
        override_note=r[4],
        override_until=dt(_i(r[5])),
        lease_holder=r[6],
        lease_token=_i(r[7]),
        lease_until=dt(_i(r[8])),
        last_slot=dt(None if mark is None else int(mark)),
        created_at=dt(_i(r[11])),
    )


def _instance(instance_id: str, row: Mapping[str, Any], *, live: bool) -> Instance:
    """An instance from its JSON row (``instances.lua``)."""
    return Instance(
        instance_id=instance_id, host=str(row.get("h", "")), pid=int(row.get("p", 0)),
        role=str(row.get("r", "")), version=str(row.get("v", "")),
        started_at=dt(_i(row.get("sa"))), heartbeat_at=dt(_i(row.get("hb"))),
        lost_at=dt(_i(row.get("la"))), lost_by=row.get("lb") or None, live=live,
    )  # fmt: skip


def _live(row: Mapping[str, Any], cut: int) -> bool:
    """An instance row (``instances.lua``) is live: not declared lost, heartbeat not
    older than ``cut`` (ms)."""
    return live(row.get("la") or None, int(row.get("hb", 0)), cut)


def _request(flat: Sequence[Any]) -> FleetRequest:
    """A request hash (``registry.lua``'s flat list, its ``id`` appended)."""
    it = iter(flat)
    f = {_d(k): _d(v) for k, v in zip(it, it, strict=True)}
    return FleetRequest(
        kind=f["k"], job_id=f["j"], requested_by=f["b"], payload=dict(json.loads(f["p"])),
        target=f.get("tg"), id=int(f["id"]), requested_at=_t(f, "ra"),
        taken_by=f.get("tb"), taken_at=_t(f, "ta"), answered_at=_t(f, "aa"),
        run_id=_i(f.get("ri")), error=f.get("e"),
    )  # fmt: skip


# -- operations -----------------------------------------------------------------------------


async def _states(t: RedisTransport, mode: str, job_ids: Sequence[str]) -> dict[str, JobState]:
    out: dict[str, JobState] = {}
    ids = list(dict.fromkeys(job_ids))
    for i in range(0, max(len(ids), 1), _STATES_CHUNK):
        part = json.dumps(ids[i : i + _STATES_CHUNK])
        created: dict[str, datetime | None] = {}  # one call's new rows share a time
        for row in json.loads(await t.run("states", mode, part)):
            if len(row) == 2:  # {job, created}: nothing else stored (states.lua)
                c = row[1]
                when = created[c] if c in created else created.setdefault(c, dt(int(c)))
                out[row[0]] = JobState(job_id=row[0], created_at=when)
            else:
                st = _state(row)
                out[st.job_id] = st
    return out


async def ensure_jobs(t: RedisTransport, job_ids: list[str]) -> dict[str, JobState]:
    return await _states(t, "ensure", job_ids)


async def read_states(t: RedisTransport, job_ids: list[str]) -> dict[str, JobState]:
    return await _states(t, "read", job_ids) if job_ids else {}


async def read_overrides(t: RedisTransport) -> dict[str, JobState]:
    rows = json.loads(await t.run("states", "overrides", "[]"))
    return {st.job_id: st for st in map(_state, rows)}


async def set_override(t: RedisTransport, job_id: str, enabled: bool | None, by: str | None,
                       note: str | None, until: datetime | None) -> JobState:
    flag = "" if enabled is None else ("1" if enabled else "0")
    until_ms = msd(until)
    row = await t.run(
        "set_override", job_id, flag, by or "", note or "",
        "" if until_ms is None else str(until_ms),
    )  # fmt: skip
    return _state(row)


async def heartbeat(t: RedisTransport, me: Instance, ttl: float) -> Heartbeat:
    raw = await t.run(
        "instances", "beat", me.instance_id, me.host, me.pid, me.role, me.version,
        round(ttl * 1000), me.plans,
    )  # fmt: skip
    now, lost, lost_at, lost_by, rows = json.loads(raw)
    beat = beat_rows(Heartbeat(now=int(now) / 1000.0), me.instance_id, rows or [])
    if lost:
        beat.lost, beat.lost_at, beat.lost_by = True, dt(_i(lost_at)), lost_by or None
    return beat


async def instances_all(t: RedisTransport, ttl: float) -> list[Instance]:
    now, rows = json.loads(await t.run("instances", "list"))
    cut = int(now) - round(ttl * 1000)
    found = [_instance(i, row, live=_live(row, cut)) for i, row in (rows or ())]
    found.sort(key=lambda x: (msd(x.started_at) or 0, x.instance_id))
    return found


async def instance_leave(t: RedisTransport, instance_id: str) -> None:
    await t.run("instances", "leave", instance_id)


async def registry_all(t: RedisTransport, ttl: float) -> list[Declared]:
    now, found, insts = json.loads(await t.run("registry", "list"))
    cut = int(now) - round(ttl * 1000)
    alive = {i for i, raw in insts or () if _live(json.loads(raw), cut)}
    out = []
    for inst, seen, rows in found or ():
        seen_at = dt(_i(seen))
        for job_id, raw in rows:
            r = json.loads(raw)
            out.append(Declared(
                job_id=job_id, instance_id=inst, team=r["t"], source=r["s"], digest=r["d"],
                spec=json.loads(r["p"]), declared_at=dt(_i(r["da"])), seen_at=seen_at,
                live=inst in alive,
            ))  # fmt: skip
    out.sort(key=lambda d: (d.job_id, d.instance_id))
    return out


async def request_add(t: RedisTransport, r: FleetRequest) -> FleetRequest:
    rid, now = await t.run(
        "registry", "submit", r.kind, r.job_id, r.requested_by,
        json.dumps(r.payload, default=str), r.target or "",
    )  # fmt: skip
    return FleetRequest(kind=r.kind, job_id=r.job_id, requested_by=r.requested_by,
                        payload=dict(r.payload), target=r.target, id=int(rid),
                        requested_at=dt(int(now)))


async def requests_open(t: RedisTransport, instance_id: str
                        ) -> list[tuple[int, str, str | None]]:
    flat = [_d(v) for v in await t.run("registry", "open", instance_id)]
    return [(int(flat[k]), flat[k + 1], flat[k + 2] or None) for k in range(0, len(flat), 3)]


async def requests_take(t: RedisTransport, instance_id: str,
                        ids: list[int]) -> list[FleetRequest]:
    raw = await t.run("registry", "take", instance_id, json.dumps([str(i) for i in ids]))
    return sorted(map(_request, raw), key=lambda q: q.id or 0)


async def request_answer(t: RedisTransport, request_id: int, run_id: int | None,
                         error: str | None, only_untaken: bool) -> bool:
    done = await t.run(
        "registry", "answer", request_id, "" if run_id is None else run_id,
        error or "", "1" if only_untaken else "0",
    )  # fmt: skip
    return int(done) == 1


async def request_note(t: RedisTransport, request_id: int, payload: dict[str, Any]) -> bool:
    done = await t.run("registry", "note", request_id, json.dumps(payload, default=str))
    return int(done) == 1


async def request_get(t: RedisTransport, request_id: int) -> FleetRequest | None:
    flat = await t.run("registry", "get", request_id)
    return _request(flat) if flat else None


async def get_many(t: RedisTransport, ids: Sequence[int]) -> list[RunRecord]:
    if not ids:
        return []
    return [run_record(f) for f in await t.run("read_runs", "get", *ids)]


async def get_run(t: RedisTransport, run_id: int) -> RunRecord | None:
    found = await get_many(t, [run_id])
    return found[0] if found else None


async def last_runs(t: RedisTransport, job_ids: list[str]) -> dict[str, RunRecord]:
    rows = await t.run("read_runs", "last", *job_ids)
    return {r.job_id: r for r in map(run_record, rows)}


OPS: dict[str, Callable[..., Awaitable[Any]]] = {
    "ensure_jobs": ensure_jobs,
    "read_states": read_states,
    "read_overrides": read_overrides,
    "set_override": set_override,
    "heartbeat": heartbeat,
    "beat": heartbeat,  # one script: the usual beat and a (re-)registration alike
    "instances_all": instances_all,
    "instance_leave": instance_leave,
    "registry_all": registry_all,
    "request_add": request_add,
    "requests_open": requests_open,
    "requests_take": requests_take,
    "request_answer": request_answer,
    "request_note": request_note,
    "request_get": request_get,
    "get_run": get_run,
    "last_runs": last_runs,
}
"""The single-call operations :class:`~cronfleet.store.driver.StoreDriver` names."""
