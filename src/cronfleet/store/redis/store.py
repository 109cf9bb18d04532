"""The Redis store: the whole Store contract (early claims and withdraw included) on one
Redis 6.2+ server, for teams whose only shared service is Redis.

* **Lua scripts, loaded once.** Every state change is one script (``scripts/*.lua``, each
  prefixed with ``common.lua``), run with ``EVALSHA`` and loaded again on ``NOSCRIPT``
  (a restarted server): a burst of 10,000 slots is one round trip for the claims and
  leases and one for the rows that must exist now. A script runs atomically, so two
  instances claiming the same ``(job, slot)`` see one winner.
* **Time from the server.** Scripts read ``TIME``; every claim time, lease expiry, run
  deadline and reaper cut-off is that value, so a skewed host cannot steal a live lease.
  A clock that is not a :class:`~cronfleet.clock.SystemClock` (the tests' ``FakeClock``)
  is passed instead, as on PostgreSQL.
* **Fencing tokens** come from a per-job counter (``INCR {job}:n``): they only grow, across
  deletes and instances. A run row that carries a token is written once per
  ``(job, token)``: a group commit retried after a lost answer updates it.
* **Row decisions** come from :mod:`cronfleet.store.ledger`; the scripts only claim, lease,
  index and apply. Where a dispatch row depends on what the script finds (lease taken or
  busy), the ledger decides it beforehand for each outcome (row templates) and the same
  script writes the one that applies: a batch is one call per chunk, with no window in
  which a claim exists without its row or lease (docs/internals.md, "Redis").
* **Instances** (``instances.lua``): heartbeats, the live set and lost instances judged by
  the server's ``TIME``; a final outcome is never overwritten (late results attached).
* **Keys** start with the URL's ``prefix`` (default ``cronfleet:``); a job's keys carry
  the hash tag ``{job}``. Batched scripts touch many jobs and a few global keys (run ids,
  indexes), so they need one server: Redis Cluster is not supported yet.
* **Lease lanes** (``max_instances`` = N > 1): lane 0 is the job's lease in its state hash
  as ever; only when it is busy does such a run take the lowest free or expired lane
  1..N-1, a field of ``{job}:l`` (indexed by expiry in ``<prefix>lanes`` for the reaper and
  lost-instance breaking). A job with N = 1 never writes either key, and its scripts run
  the commands they always ran (a release or renewal that misses lane 0 looks at the lanes).
* **Schema version** (``<prefix>schema``): written at first open, a newer one is refused.
  The lane keys are new and optional (absent for every N = 1 job), so they need no new
  version.
* **Registry and requests** (``registry.lua``, the RegistryStore contract): one hash of
  rows per declaring instance, one hash per request; a new request is announced on the
  same channel as overrides, so instances take it at once.
* **Announcements**: ``set_override``, new jobs and requests ``PUBLISH <prefix>events``;
  :meth:`RedisStore.subscribe` listens (reconnecting with backoff) and wakes the
  scheduler early. Overrides are still read at fire time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from cronfleet.clock import Clock, SystemClock
from cronfleet.errors import StoreError, StoreUnavailable
from cronfleet.model import RunRecord, RunStatus, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import (
    Declared,
    Dispatch,
    Dispatched,
    DispatchKind,
    Finish,
    LostInstances,
    RunCursor,
    RunFilter,
    RunPage,
    Skip,
    SlotRun,
    SlotRunPage,
    Start,
    Started,
    newest_of_note,
    slot_runs_of,
)
from cronfleet.store.driver import REGISTRY_CHUNK, StoreDriver
from cronfleet.store.redis.ops import _d, _i, _instance, get_many, run_fields, run_record
from cronfleet.store.redis.transport import SCHEMA_VERSION, RedisTransport
from cronfleet.store.rows import dt, ms, msd, registry_rows
from cronfleet.store.url import parse_store_url, redact_url

__all__ = ["SCHEMA_VERSION", "RedisStore"]

_CLAIM = {"slot": "s", "token": "t", "none": "n"}


def _kind(it: Dispatch) -> str:
    """The script's claim code: s slot, e early, t token, n none, r recovery."""
    if it.kind is DispatchKind.RECOVERY:
        return "r"
    if it.kind is DispatchKind.EARLY:
        return "e"
    return _CLAIM[it.claim]


_CHUNK = 5000  # requests per script call: a long script blocks every other client
_ROWS_CHUNK = 1000  # row templates per dispatch call (unleased bursts write their rows)
# placeholders in dispatch's row templates, filled by the script (dispatch.lua)
_T_NOW, _T_DEADLINE, _SLOT0 = (datetime.fromtimestamp(t / 1000, UTC) for t in (1, 2, 0))
_HOLDER = "@@cronfleet:holder@@"
# run rows per script call: a group commit of 10,000 rows in one script would hold the
# server while other processes wait to claim
_PUT_CHUNK = 500


class RedisStore(StoreDriver):
    """Claims, leases, overrides and the run ledger on Redis (see the module doc).

    The contract's single-call operations are :class:`~cronfleet.store.driver.StoreDriver`'s
    over :mod:`cronfleet.store.redis.ops`; the ledger transactions, each one Lua script
    (atomic on the server), are written here, their rows decided by the ledger.
    """

    lanes = True  # max_instances > 1: lanes 1..N-1 in {job}:l (common.lua, take_lane)
    transport: RedisTransport  # type: ignore[assignment]

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str | None = None,
        clock: Clock | None = None,
        max_connections: int = 16,
    ) -> None:
        parsed = parse_store_url(url)
        if parsed.dialect != "redis":
            raise StoreError(f"not a Redis URL: {redact_url(url)!r}")
        self.url = url
        self.prefix = prefix if prefix is not None else parsed.prefix
        self.conninfo = parsed.conninfo
        self.clock: Clock = clock or SystemClock()
        self.transport = RedisTransport(
            url=url, conninfo=self.conninfo, prefix=self.prefix, clock=self.clock,
            max_connections=max_connections,
        )  # fmt: skip
        """The connection accessor for code sharing the store's pool (the side tables):
        ``store.transport.client()`` (the open ``redis.asyncio.Redis``), with
        ``store.prefix`` for the keys."""

    def __repr__(self) -> str:
        return f"RedisStore({redact_url(self.url)!r}, prefix={self.prefix!r})"

    async def _run(self, name: str, *args: Any) -> Any:
        """One script call (:meth:`RedisTransport.run`)."""
        return await self.transport.run(name, *args)

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        await self.transport.open()

    async def close(self) -> None:
        await self.transport.close()

    async def now(self) -> float:
        return await self.transport.now()

    async def confirm_outage(self) -> bool:
        """True when a *fresh* connection (not one of the pool's) cannot PING either."""
        return await self.transport.confirm_outage()

    async def durability(self) -> tuple[list[str], list[str]]:
        """``(warnings, notes)`` about the server's persistence for exactly-once."""
        return await self.transport.durability()

    async def subscribe(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` whenever any instance changes an override, adds jobs or
        leaves a request (and after a reconnect)."""
        await self.transport.subscribe(callback)

    # -- writing rows -------------------------------------------------------------------

    async def _put(
        self,
        rows: Sequence[tuple[RunRecord, str | None]],
        releases: Sequence[tuple[str, int | None]] = (),
    ) -> list[tuple[int, int]]:
        """Write ``(record, dedupe reason)`` rows and release ``(job, token)`` leases in
        one script; sets each record's id; returns ``(id, how)`` (1 inserted, 2 updated,
        0 not written)."""
        rel = [x for j, tok in releases if tok is not None for x in (j, str(tok))]
        if not rows and not rel:
            return []
        fields = [run_fields(r, dd) for r, dd in rows]
        out: list[tuple[int, int]] = []
        for i in range(0, max(len(fields), 1), _PUT_CHUNK):
            part = json.dumps(fields[i : i + _PUT_CHUNK], separators=(",", ":"))
            last = i + _PUT_CHUNK >= len(fields)
            res = json.loads(await self._run("put_runs", part, *(rel if last else ())))
            out.extend((int(res[k]), int(res[k + 1])) for k in range(0, len(res), 2))
        late: list[tuple[RunRecord, int]] = []
        for (rec, _), (rid, how) in zip(rows, out, strict=True):
            if how:
                rec.id = rid
            if how == 3:
                late.append((rec, rid))
        if late:
            await self._attach_late(late)
        return out

    async def _attach_late(self, late: Sequence[tuple[RunRecord, int]]) -> None:
        """Rows the fence refused (their slot already holds another final outcome): each
        outcome is attached to the stored row as its late result (ledger.attach_late_result),
        only while that row still holds the status it was read with."""
        stored = {r.id: r for r in await get_many(self.transport, [rid for _, rid in late])}
        now = dt(ms(await self.now()))
        fields = []
        for rec, rid in late:
            old = stored.get(rid)
            if old is None:
                continue
            kept = ledger.attach_late_result(old, rec, now)
            fields.append({
                "id": str(rid), "j": old.job_id, "la": old.status.value,
                "r": json.dumps(kept.result, default=str),
                "lg": json.dumps(kept.logs, default=str),
            })  # fmt: skip
        if fields:
            await self._run("put_runs", json.dumps(fields, separators=(",", ":")))

    # -- the hot path -------------------------------------------------------------------------

    async def dispatch(self, items: Sequence[Dispatch], instance_id: str) -> list[Dispatched]:
        """Claims, leases and the rows that must exist now in one script per chunk: the
        rows are decided here by :func:`ledger.dispatch_run` before the call, as templates
        for each outcome the script may find (lease taken or busy), and the script writes
        the one that applies. Nothing is left for a second call, so a process that dies
        (or pauses) after the claims leaves no claim without its row or its lease."""
        self.transport.client()
        leased = [
            it.job_id
            for it in items
            if it.lease and not it.defer and not it.skip_reason and it.lanes == 1
        ]
        if len(set(leased)) != len(leased):
            raise StoreError("one batch may take at most one lease per job")
        out = [Dispatched(request=it, won=False) for it in items]
        # claims of an earlier call whose answer was lost go first: this batch may claim
        # the same slots again (the scheduler's outage backlog)
        await self.transport.give_back()
        start = 0
        while start < len(items):
            end, argv, templates = _dispatch_args(items, start, instance_id)
            try:
                raw = await self._run(
                    "dispatch", instance_id, json.dumps(argv, separators=(",", ":")),
                    json.dumps(templates, separators=(",", ":")), _HOLDER,
                )  # fmt: skip
            except StoreUnavailable:
                # the server may have run this chunk (and the earlier ones were answered):
                # the caller takes the whole batch as failed, so every claim of it is
                # given back once the server answers (their slots are claimed again)
                self.transport.remember_unanswered(
                    [(it.job_id, ms(it.slot)) for it in items[:end] if _kind(it) in ("s", "e")],
                    instance_id,
                )
                raise
            _dispatched(items[start:end], out[start:end], json.loads(raw), instance_id)
            start = end
        return out

    async def withdraw(self, items: Sequence[tuple[str, float, int]]) -> int:
        if not items:
            return 0
        argv = [x for j, slot, tok in items for x in (j, ms(slot), tok)]
        return int(await self._run("withdraw", *argv))

    async def start(self, items: Sequence[Start], instance_id: str) -> list[Started]:
        self.transport.client()
        leased = [it for it in items if it.lease]
        single = [it.job_id for it in leased if it.lanes == 1]
        if len(set(single)) != len(single):
            raise StoreError("one batch may take at most one lease per job")
        argv: list[Any] = [len(leased)]
        for it in leased:
            argv += (it.job_id, "" if it.token is None else it.token, ms(it.hold), it.lanes)
        argv += [it.run_id for it in items]
        res = await self._run("leases", instance_id, *argv)
        now = int(res[0])
        acquired: set[str] = set()
        holders: dict[str, str | None] = {}
        for k, it in enumerate(leased):
            taken, holder = res[1 + 2 * k], res[2 + 2 * k]
            if taken:
                acquired.add(it.job_id if it.lanes == 1 else ledger.lane_key(it.token))
            else:
                holders[it.job_id] = _d(holder) or None
        base = 1 + 2 * len(leased)
        runs: dict[int, RunRecord] = {}
        for flat in res[base : base + len(items)]:
            if flat:
                r = run_record(flat)
                runs[int(r.id or 0)] = r
        rows: list[tuple[RunRecord, str | None]] = []
        now_dt, out = dt(now), []
        for it in items:
            st = Started(request=it, run=None)
            out.append(st)
            run = runs.get(it.run_id)
            if it.lease and not ledger.lease_taken(it.job_id, it.token, it.lanes, acquired):
                st.holder = holders.get(it.job_id)
                if it.wait_if_busy:
                    continue
                if run is not None:
                    run.status = RunStatus.SKIPPED
                    run.reason = ledger.ALREADY_EXECUTING
                    run.finished_at, run.deadline = now_dt, None
                    run.result = ledger.busy_result()
                    run.logs.append(ledger.busy_log(st.holder, it.lanes))
                    rows.append((run, None))
            elif run is not None and run.status is RunStatus.PENDING:
                run.status = RunStatus.RUNNING
                run.started_at, run.deadline = now_dt, dt(now + ms(it.hold))
                rows.append((run, None))
            st.run = run
        await self._put(rows)
        return out

    async def finish(self, items: Sequence[Finish]) -> None:
        self.transport.client()
        await self._put(
            [(f.run, None) for f in items], [(f.run.job_id, f.release_token) for f in items]
        )

    async def record_skips(self, items: Sequence[Skip]) -> int:
        self.transport.client()
        rows: list[tuple[RunRecord, str | None]] = []
        for sk in items:
            slot = dt(ms(sk.slot))
            assert slot is not None
            rows.append((
                RunRecord(
                    id=None, job_id=sk.job_id, slot=slot, triggered_by=sk.triggered_by,
                    status=RunStatus.SKIPPED, instance_id=sk.instance_id, reason=sk.reason,
                    result=sk.result if sk.result is not None else ledger.skip_result(sk.reason),
                    logs=list(sk.logs),
                ),
                sk.reason,
            ))  # fmt: skip
        if not rows:
            return 0
        # claimed_at / finished_at are the store's time: read it in the same call's terms
        now = dt(ms(await self.now()))
        for r, _ in rows:
            r.claimed_at = r.finished_at = now
        done = await self._put(rows)
        return sum(1 for _, how in done if how == 1)

    async def renew_leases(self, items: Sequence[tuple[str, int, float]]) -> None:
        if items:
            await self._run("renew", *[x for j, t, h in items for x in (j, t, ms(h))])

    async def reap_orphans(self, instance_id: str) -> list[RunRecord]:
        before, nohold, after = ledger.interrupted_log_parts(instance_id)
        now, reaped_ids, lost = await self._run(
            "reap", instance_id, ledger.INTERRUPTED_REASON, ledger.INTERRUPTED_ERROR,
            before, nohold, after,
        )  # fmt: skip
        reaped = await get_many(self.transport, [int(i) for i in reaped_ids])
        now_dt = dt(int(now))
        assert now_dt is not None
        rebuilt: list[tuple[RunRecord, str | None]] = []
        for j, tok, holder, slot, claimed in (map(_d, x) for x in lost):
            claimed_at = dt(_i(claimed)) or now_dt
            rebuilt.append((
                ledger.lost_run(
                    j, int(tok), holder or None, dt(_i(slot)), claimed_at,
                    now=now_dt, marked_by=instance_id,
                ),
                None,
            ))  # fmt: skip
        done = await self._put(rebuilt)
        return reaped + [r for (r, _), (_, how) in zip(rebuilt, done, strict=True) if how == 1]

    async def break_lost(self, instance_id: str, *, ttl: float) -> LostInstances:
        # the ledger's lines, split where the lost instance's id goes (one script writes them)
        mark = "\x00"
        err = ledger.instance_lost_error(mark).split(mark)
        line = ledger.instance_lost_log(mark, ttl, instance_id).split(mark)
        raw = await self._run(
            "instances", "break", instance_id, round(ttl * 1000),
            ledger.INSTANCE_LOST_REASON, err[0], err[1], line[0], line[1],
        )  # fmt: skip
        _, declared, ids = json.loads(raw)
        out = LostInstances()
        if not declared:
            return out
        out.instances = [_instance(i, row, live=False) for i, row in declared]
        out.runs = await get_many(self.transport, [int(i) for i in ids or ()])
        return out

    async def publish_jobs(self, instance_id: str, jobs: Sequence[Declared] | None) -> None:
        # in chunks of REGISTRY_CHUNK rows, one script call each (~20 ms of the server,
        # which runs nothing else during a script)
        if jobs is not None:
            wanted = {d.job_id: d for d in jobs}
            had = await self._run("registry", "ids", instance_id)
            gone = [j for j in map(_d, had) if j not in wanted]
            rows = list(wanted.values())
            for k in range(0, len(rows), REGISTRY_CHUNK):
                await self._run("registry", "put", instance_id,
                                registry_rows(rows[k:k + REGISTRY_CHUNK], spec_as_text=True))
            for k in range(0, len(gone), REGISTRY_CHUNK):
                await self._run("registry", "drop", instance_id,
                                json.dumps(gone[k:k + REGISTRY_CHUNK]))
        await self._run("registry", "publish", instance_id)

    async def slot_runs(self, job_id: str, *, limit: int, before_id: int | None = None
                        ) -> list[SlotRun]:
        return slot_runs_of(await self.list_runs(job_id, limit=limit, before_id=before_id))

    async def last_slot_runs(self, job_ids: Sequence[str], *, since: float | None = None,
                             statuses: Collection[RunStatus] = ()) -> dict[str, SlotRun]:
        rows = {j: s for j, r in (await self.last_runs(job_ids)).items()
                for s in slot_runs_of([r])}
        return newest_of_note(rows, since, statuses)

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
        rows = await self._run(
            "read_runs", "list", limit, "" if status is None else RunStatus(status).value,
            job_id or "", "" if before_id is None else before_id,
        )  # fmt: skip
        return [run_record(f) for f in rows]

    async def find_runs(
        self, where: RunFilter, *, limit: int = 50, after: RunCursor | None = None
    ) -> RunPage:
        only: list[Any] = []
        if where.job_ids is not None:
            only = ["1", *sorted(where.job_ids)]
        rows = await self._run(
            "read_runs", "find", limit + 1,
            "" if after is None else after.slot_ms, "" if after is None else after.id,
            "" if where.status is None else RunStatus(where.status).value,
            where.job_id or "", where.instance_id or "",
            "" if where.since is None else msd(where.since),
            "" if where.until is None else msd(where.until),
            *only,
        )  # fmt: skip
        return RunPage.of([run_record(f) for f in rows], limit)



def _dispatch_args(
    items: Sequence[Dispatch], start: int, instance_id: str
) -> tuple[int, list[str], list[dict[str, str]]]:
    """One chunk's arguments from ``start``: ``(end, items, templates)``."""
    argv: list[str] = []
    templates: list[dict[str, str]] = []
    shared: dict[tuple[TriggeredBy, bool, int], str] = {}

    def template(it: Dispatch, taken: bool) -> str:
        rec, _, _ = ledger.dispatch_run(
            it, slot=_SLOT0, now=_T_NOW, deadline=_T_DEADLINE, token=None,
            instance=instance_id, lease_taken=taken, holder=_HOLDER,
        )  # fmt: skip
        templates.append(run_fields(rec))
        return str(len(templates))

    end = start
    while end < len(items) and end - start < _CHUNK and len(templates) < _ROWS_CHUNK:
        it = items[end]
        end += 1
        lease = it.lease and not it.defer and not it.skip_reason
        ok = busy = ""
        # the hot path (a leased run starting now) has no row here: the group commit
        # writes it; a crash before that leaves its claim under its lease (the reaper)
        if it.record or it.defer or it.skip_reason or not it.lease:
            ok = template(it, True)
        if lease and it.kind is not DispatchKind.EARLY:
            if (
                it.kind is DispatchKind.SCHEDULED and not it.logs and it.result is None
                and it.params is None and it.forced_by is None and not it.wait_if_busy
                and not it.manual and not it.is_recovery
            ):  # fmt: skip
                key = (it.triggered_by, it.is_catchup, it.lanes)
                if key not in shared:  # one template for every plain busy slot
                    plain = Dispatch.scheduled("", 0.0, lease=True, catchup=it.is_catchup)
                    plain.triggered_by, plain.lanes = it.triggered_by, it.lanes
                    shared[key] = template(plain, False)
                busy = shared[key]
            else:
                busy = template(it, False)
        # the lease field: '0' none, '1' the job's lease, 'N' its N lanes (max_instances)
        argv += (
            _kind(it), it.job_id, str(ms(it.slot)),
            ("1" if it.lanes == 1 else str(it.lanes)) if lease else "0",
            str(ms(it.hold)), "" if it.reclaim_token is None else str(it.reclaim_token),
            ok, busy,
        )  # fmt: skip
    return end, argv, templates



def _dispatched(
    chunk: Sequence[Dispatch], out: Sequence[Dispatched], res: Sequence[Any], instance: str
) -> None:
    """The script's answer into ``out``: the records it wrote (ids set) or that the
    group commit will write, decided again by the ledger with the script's values."""
    now = int(res[0])
    acquired: set[str] = set()
    holders: dict[str, str | None] = {}
    ids: list[int] = []
    for k, it in enumerate(chunk):
        won, tok, taken, holder, busy, rid = res[1 + k * 6 : 7 + k * 6]
        d = out[k]
        d.won, d.token = bool(won), _i(tok)
        ids.append(int(rid or 0))
        if busy:
            d.busy, d.holder = True, _d(holder) or None
            holders[it.job_id] = d.holder
        elif taken:
            acquired.add(it.job_id if it.lanes == 1 else ledger.lane_key(d.token))
        elif d.won and it.lease and not it.defer and not it.skip_reason:
            holders[it.job_id] = _d(holder) or None
    now_dt = dt(now)
    assert now_dt is not None
    slots = [dt(ms(it.slot)) for it in chunk]
    deadlines = [dt(now + ms(it.hold)) for it in chunk]
    ledger.dispatch_runs(
        out, slots=slots, deadlines=deadlines, now=now_dt, instance=instance,  # type: ignore[arg-type]
        acquired=acquired, holders=holders,
    )  # fmt: skip
    for d, rid in zip(out, ids, strict=True):
        if rid and d.run is not None:
            d.run.id = rid

