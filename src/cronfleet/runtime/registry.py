"""The job registry and the requests between processes (#14).

- **Publishing** (:class:`Registry`, a part of the scheduler built at each start): every
  process with timers writes the jobs it declares in code or config to the store's
  ``job_registry`` -- id, team, source, and a spec (kind, schedule, zone, policies,
  description, config as written) with its SHA-256 digest. Jobs created over the API
  (source ``api``) are not published: their definitions are in ``job_defs`` already, and
  a process holds only its share of them; rows of API jobs written by an earlier release
  are ignored by every reader (:func:`fleet_jobs`, :func:`remote_trigger`). It is
  written at start and after each heartbeat when the set changed (a job added, replaced
  or removed: only the changed rows), and touched (``seen_at``) every :data:`TOUCH`
  seconds otherwise. Rows are never deleted when an instance stops: a job no live
  instance declares is shown as such, its history kept. When another live instance
  declares one of our ids with another spec, this process logs which instance and which
  fields (:func:`conflicts`).
- **Requests**: another process (CLI, API) leaves a ``trigger`` request in the store
  (:func:`remote_trigger`; for an API job: once its definition is live in ``job_defs``);
  a live instance that holds the job (in its job table, whatever the registry says)
  takes it (exactly one does), runs the job as a manual trigger (params, force) and
  answers with the run id, or with the refusal's code and message. PostgreSQL announces
  a request with ``NOTIFY`` and Redis with ``PUBLISH`` (the instances take it at once);
  other stores are polled every :data:`POLL` seconds.
- **A lost taker**: a taken request names its taker; a caller waiting for it (and any
  reader of a backfill's state) answers it ``INSTANCE_LOST`` once that instance is no
  longer live (:func:`settle_lost_taker`), so nobody waits forever for a dead process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cronfleet.cron.compose import read_schedule
from cronfleet.errors import (
    AlreadyExecuting,
    CronfleetError,
    JobNotFound,
    NotDeclared,
    RemoteRefused,
    RemoteTimeout,
)
from cronfleet.model import Job, Locking, Missed, Overlap
from cronfleet.spec import API_SOURCE, Unkeyable, value_key
from cronfleet.store.base import Declared, FleetRequest, RegistryStore

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.backfill import Backfill
    from cronfleet.runtime.faces import Control
    from cronfleet.runtime.fleet import Fleet
    from cronfleet.runtime.parts import Jobs, Life, Settings
    from cronfleet.runtime.runs import Runs
    from cronfleet.runtime.stats import Stats
    from cronfleet.store.base import Store
    from cronfleet.store.side import ApiStore

__all__ = [
    "INSTANCE_LOST",
    "POLL",
    "TOUCH",
    "FleetJob",
    "Registry",
    "backfill_status",
    "conflicts",
    "declared_spec",
    "fleet_jobs",
    "job_from_spec",
    "remote_backfill",
    "remote_cancel",
    "remote_cancel_backfill",
    "remote_trigger",
    "settle_lost_taker",
]

log = logging.getLogger("cronfleet")

TOUCH = 60.0  # seconds between two touches of an unchanged registry
POLL = 1.0  # seconds between two looks for requests, on stores without notifications
PROGRESS = 0.5  # seconds between two writes of a remote backfill's progress
POLL_NOTIFIED = 5.0  # the same with notifications (the backstop of a lost NOTIFY)
SETTLE_EVERY = 1.0  # seconds between two looks at a waited-for request's taker
INSTANCE_LOST = "INSTANCE_LOST"  # the code of a request whose taker was lost
BUILD_CHUNK = 250  # jobs whose registry rows are built between two turns of the loop
# a large set (more than this many jobs): published in the background at start (the
# timers do not wait ~2 s for 100,000 rows) and its conflicts not read back and logged
LARGE = 5000

# the spec's keys compared between two declarers of one id (every key of declared_spec)
SPEC_KEYS = ("kind", "schedule", "zone", "missed", "catch_up_window", "locking", "overlap",
             "timeout", "jitter", "enabled", "recover", "retry", "notify", "auto_pause_after",
             "description", "config", "max_instances")


def _kind(job: Job) -> str:
    kind = getattr(job.handler, "kind", None)
    return kind if isinstance(kind, str) and kind else "handler"


def _plain(value: Any) -> Any:
    """``value`` as JSON would keep it (tuples become lists, unknown objects text)."""
    return json.loads(json.dumps(value, default=str))


def declared_spec(job: Job) -> dict[str, Any]:
    """What the registry keeps of ``job`` (see :data:`SPEC_KEYS`). Notification channels
    are named, never their addresses (a Slack or webhook URL is a credential)."""
    notify = job.notify
    retry = job.retry
    # max_instances only when not the default: a default spec keeps the digest it had
    # before the option existed (no conflict between two releases declaring one job)
    extra = {} if job.max_instances == 1 else {"max_instances": job.max_instances}
    return {
        "kind": _kind(job),
        "schedule": job.schedule.expr,
        "zone": str(job.schedule.tz),
        "missed": job.missed.value,
        "catch_up_window": job.catch_up_window,
        "locking": job.locking.value,
        "overlap": job.overlap.value,
        "timeout": job.timeout,
        "jitter": job.jitter,
        "enabled": job.enabled,
        "recover": job.recover,
        "retry": None if retry is None else {
            "attempts": retry.attempts, "backoff": retry.backoff, "delay": retry.delay},
        "notify": None if notify is None else {
            "on": list(notify.on), "after_failures": notify.after_failures,
            "channels": notify.channels},
        "auto_pause_after": job.auto_pause_after,
        "description": job.description,
        "config": _plain(dict(job.config)),
        **extra,
    }


def digest(spec: Mapping[str, Any]) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


SPEC_CACHE_MAX = 1024  # distinct specs whose (spec, digest) declared() keeps
_specs: dict[Hashable, tuple[dict[str, Any], str]] = {}


def _exact(number: object) -> object:
    """A float by its exact bits (``-0.0`` and ``0.0`` are equal, JSON writes them
    apart); anything else as it is."""
    return number.hex() if isinstance(number, float) else number


def _spec_key(job: Job) -> Hashable | None:
    """Every value :func:`declared_spec` reads from ``job``, as a key, or ``None`` when
    one cannot be keyed (a mutable or unhashable value). Typed: ``1``, ``1.0`` and
    ``True`` are equal in Python, JSON writes them apart. The id, team and source are
    not in the spec. (~3 us against ~30 us for the spec and its digest.)"""
    retry, notify, config = job.retry, job.notify, job.config
    values = (
        _kind(job), job.schedule.expr, str(job.schedule.tz), job.missed,
        _exact(job.catch_up_window), job.locking, job.overlap, _exact(job.timeout),
        _exact(job.jitter), job.enabled, job.recover, job.auto_pause_after,
        job.description, job.max_instances,
        *((None, None, None) if retry is None else
          (retry.attempts, retry.backoff, _exact(retry.delay))),
        *((None, None, None) if notify is None else
          (tuple(notify.on), notify.after_failures, tuple(notify.channels))),
    )
    try:
        return (values, tuple(map(type, values)),
                value_key(dict(config), depth=8) if config else None,
                None if notify is None else (tuple(map(type, notify.on)),
                                             tuple(map(type, notify.channels))))
    except Unkeyable:
        return None


def declared(job: Job) -> Declared:
    """``job``'s registry row (no instance yet). The spec and its digest are computed
    once per distinct spec (:func:`_spec_key`): 100,000 jobs declared alike share one
    spec dict (the stores copy or serialise it, never change it) and one digest."""
    key = _spec_key(job)
    try:
        got = None if key is None else _specs.get(key)
    except TypeError:  # an unhashable value (a list where a tuple belongs)
        key = got = None
    if got is None:
        spec = declared_spec(job)
        got = (spec, digest(spec))
        if key is not None:
            if len(_specs) >= SPEC_CACHE_MAX:
                _specs.clear()
            _specs[key] = got
    return Declared(job.id, "", team=job.team, source=job.source, digest=got[1],
                    spec=got[0])


class DeclaredElsewhere:
    """The handler of a job another process declares (:func:`job_from_spec`): running it
    here is an error naming where it runs; a control-only scheduler (CLI, API) holds
    such jobs to show and operate them (pause, resume, views) and triggers them
    remotely."""

    kind = "elsewhere"

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id

    def __call__(self, ctx: Any = None) -> None:
        raise CronfleetError(
            f"job {self.job_id!r} is declared by another process of the fleet and runs "
            "there: trigger it through the store (cronfleet trigger, the API)")


def job_from_spec(job_id: str, spec: Mapping[str, Any], *, team: str, source: str) -> Job:
    """A :class:`Job` from a registry spec (another process's job, as the CLI and the
    API show and operate it: views, pause, next fire times), its handler a
    :class:`DeclaredElsewhere`. Raises ``ValueError`` when the schedule cannot be read
    here (e.g. a calendar file that only exists on the declaring host)."""
    schedule, sentence = read_schedule(str(spec.get("schedule", "")), str(spec.get("zone")
                                                                        or "UTC"))
    return Job(
        id=job_id, schedule=schedule, handler=DeclaredElsewhere(job_id),
        missed=Missed(spec.get("missed", Missed.RUN_ONCE.value)),
        catch_up_window=float(spec.get("catch_up_window") or 0.0),
        locking=Locking(spec.get("locking", Locking.PREFER_GLOBAL.value)),
        overlap=Overlap(spec.get("overlap", Overlap.SKIP.value)),
        timeout=spec.get("timeout"), jitter=float(spec.get("jitter") or 0.0),
        enabled=bool(spec.get("enabled", True)), recover=bool(spec.get("recover", False)),
        config=dict(spec.get("config") or {}), description=str(spec.get("description", "")),
        source=source, team=team, auto_pause_after=spec.get("auto_pause_after"),
        max_instances=int(spec.get("max_instances") or 1), schedule_text=sentence,
    )  # fmt: skip


# -- reading the registry ------------------------------------------------------------------


@dataclass(slots=True)
class Conflict:
    """Live declarers of one id that disagree: ``fields`` differ between ``groups``
    (each group: the instances that declare one spec, by digest)."""

    fields: list[str]
    groups: list[list[str]]

    def to_dict(self) -> dict[str, Any]:
        return {"fields": self.fields, "instances": self.groups}

    def __str__(self) -> str:
        return (f"declared differently by {' / '.join(', '.join(g) for g in self.groups)} "
                f"(fields: {', '.join(self.fields)})")


def conflicts(rows: Sequence[Declared]) -> Conflict | None:
    """How the live declarers of one job disagree (all of them when none is live), or
    ``None`` when they agree."""
    live = [d for d in rows if d.live] or list(rows)
    by_digest: dict[str, list[Declared]] = {}
    for d in live:
        by_digest.setdefault(d.digest, []).append(d)
    if len(by_digest) < 2:
        return None
    specs = [g[0].spec for g in by_digest.values()]
    keys = sorted({k for s in specs for k in s} | {"team"}, key=_key_order)
    fields = [k for k in keys if k != "team" and len({json.dumps(s.get(k), sort_keys=True,
                                                                 default=str) for s in specs}) > 1]
    if len({g[0].team for g in by_digest.values()}) > 1:
        fields.append("team")
    groups = [sorted(d.instance_id for d in g) for g in by_digest.values()]
    return Conflict(fields or ["(digest)"], sorted(groups))


def _key_order(k: str) -> tuple[int, str]:
    return (SPEC_KEYS.index(k) if k in SPEC_KEYS else len(SPEC_KEYS), k)


@dataclass(slots=True)
class FleetJob:
    """One job id of the registry, across its declarers."""

    job_id: str
    rows: list[Declared] = field(default_factory=list)

    @property
    def live(self) -> list[Declared]:
        return [d for d in self.rows if d.live]

    @property
    def declared(self) -> bool:
        """Some live instance declares it."""
        return any(d.live for d in self.rows)

    @property
    def current(self) -> Declared:
        """The row shown: a live declarer's (the newest declared), else the last seen."""
        if len(self.rows) == 1:  # the common case (and 100,000 of them per API listing)
            return self.rows[0]
        pool = self.live or self.rows
        return max(pool, key=lambda d: (d.declared_at is not None, d.declared_at or 0,
                                        d.instance_id))

    @property
    def conflict(self) -> Conflict | None:
        return conflicts(self.rows)

    def declared_by(self) -> list[dict[str, Any]]:
        return [
            {"instance": d.instance_id, "live": d.live, "source": d.source,
             "declared_at": _iso(d.declared_at), "seen_at": _iso(d.seen_at),
             "digest": d.digest}
            for d in self.rows
        ]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        cur = self.current
        conflict = self.conflict
        return {
            "id": self.job_id, "team": cur.team, "source": cur.source, **cur.spec,
            "declared": self.declared, "declared_by": self.declared_by(),
            "conflict": None if conflict is None else conflict.to_dict(),
        }  # fmt: skip


_Row = TypeVar("_Row", Job, Declared)


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def published(items: Iterable[_Row]) -> list[_Row]:
    """The jobs (or registry rows) the registry holds: those declared in code or config,
    not the API's (:data:`~cronfleet.spec.API_SOURCE`; rows of API jobs written by an
    earlier release are ignored by every reader)."""
    return [i for i in items if i.source != API_SOURCE]


async def fleet_jobs(store: Store, *, ttl: float) -> dict[str, FleetJob]:
    """Every job of the registry, by id (one store call); ``{}`` on a store without one.
    API jobs are not in it (their definitions are ``job_defs``)."""
    if not isinstance(store, RegistryStore):
        return {}
    out: dict[str, FleetJob] = {}
    for d in published(await store.list_declared(ttl=ttl)):
        out.setdefault(d.job_id, FleetJob(d.job_id)).rows.append(d)
    return out


# -- sending a request ------------------------------------------------------------------------


def _registry(store: Store) -> RegistryStore:
    if not isinstance(store, RegistryStore):
        raise CronfleetError(f"the store {store!r} keeps no job registry: remote operations "
                             "need a memory, SQLite, PostgreSQL or Redis store")
    return store


async def check_taker(reg: RegistryStore, job_id: str, *, ttl: float,
                      api_store: ApiStore | None = None) -> None:
    """Raise :class:`NotDeclared` unless a live instance can take a request for
    ``job_id``: one that declares it in the registry, or, for a job created over the API
    (a live definition in ``api_store``'s ``job_defs``; API jobs are not in the
    registry), any live instance: the one that holds the job takes it."""
    rows = [d for d in published(await reg.list_declared(ttl=ttl)) if d.job_id == job_id]
    if any(d.live for d in rows):
        return
    gone = sorted({d.instance_id for d in rows})
    d = None if api_store is None or rows else await api_store.job_def(job_id)
    if d is None or d.deleted_at is not None:
        raise NotDeclared(job_id, gone)
    if not any(i.live for i in await reg.list_instances(ttl=ttl)):
        raise NotDeclared(job_id, stored=True)


async def remote_trigger(
    store: Store,
    job_id: str,
    *,
    by: str,
    ttl: float,
    params: Mapping[str, Any] | None = None,
    force: bool = False,
    timeout: float = 30.0,
    poll: float = 0.1,
    api_store: ApiStore | None = None,
) -> FleetRequest:
    """Ask a live instance that declares ``job_id`` (or, for a job created over the API,
    holds it: ``api_store`` has its definition, :func:`check_taker`) to run it now and
    wait for its answer: the answered request (``run_id``: the run started). Raises
    :class:`NotDeclared` when no live instance declares it, :class:`RemoteRefused` when
    the instance refused (paused without ``force``: ``JOB_PAUSED``; lease held:
    ``CRON_JOB_ALREADY_EXECUTING``, with the skip's run id), :class:`RemoteTimeout` when
    nobody answered within ``timeout`` seconds (an untaken request is withdrawn then,
    so it never runs late)."""
    reg = _registry(store)
    await check_taker(reg, job_id, ttl=ttl, api_store=api_store)
    payload: dict[str, Any] = {"force": bool(force)}
    if params:
        payload["params"] = dict(params)
    return await _send(reg, FleetRequest("trigger", job_id, by, payload), timeout, poll, ttl)


async def remote_cancel(
    store: Store,
    run_id: int,
    *,
    by: str,
    why: str,
    ttl: float,
    timeout: float = 30.0,
    poll: float = 0.1,
) -> FleetRequest:
    """Ask the instance executing run ``run_id`` to cancel it (``Runs.cancel``: the run
    is recorded ``cancelled`` with ``by`` and ``why``), and wait for its answer. Raises
    :class:`RemoteRefused` when the run does not exist (``RUN_NOT_FOUND``), has ended
    (``RUN_ENDED``), its holder is not live (``HOLDER_NOT_LIVE``: the survivors break its
    lease within the instance ttl) or it is not executing there (``RUN_NOT_RUNNING``);
    :class:`RemoteTimeout` as :func:`remote_trigger`."""
    reg = _registry(store)
    run = await reg.get_run(run_id)
    if run is None:
        raise RemoteRefused("RUN_NOT_FOUND", f"no run {run_id}", job_id="", instance_id=None,
                            run_id=run_id)
    if run.status.finished:
        raise RemoteRefused("RUN_ENDED", f"run {run_id} of {run.job_id!r} has already ended "
                            f"({run.status.value})", job_id=run.job_id,
                            instance_id=run.instance_id, run_id=run_id)
    holder = run.instance_id
    live = {i.instance_id for i in await reg.list_instances(ttl=ttl) if i.live}
    if holder is None or holder not in live:
        raise RemoteRefused(
            "HOLDER_NOT_LIVE", f"run {run_id} of {run.job_id!r} is held by instance "
            f"{holder or '?'}, which is not live: the survivors break its lease and record "
            f"the run interrupted within the instance ttl ({ttl:g}s)", job_id=run.job_id,
            instance_id=holder, run_id=run_id)
    req = FleetRequest("cancel", run.job_id, by, {"run_id": run_id, "why": why}, target=holder)
    return await _send(reg, req, timeout, poll, ttl)


async def _send(reg: RegistryStore, request: FleetRequest, timeout: float,
                poll: float, ttl: float) -> FleetRequest:
    """Store ``request``, wait for its answer (see :func:`remote_trigger`); a taker lost
    meanwhile answers it ``INSTANCE_LOST`` (:func:`settle_lost_taker`)."""
    job_id = request.job_id
    sent = await reg.submit_request(request)
    assert sent.id is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    settle_at = loop.time() + SETTLE_EVERY
    withdrawn = False
    while True:
        got = await reg.get_request(sent.id)
        if got is not None and not got.answered and got.taken_by is not None \
                and loop.time() >= settle_at:
            settle_at = loop.time() + SETTLE_EVERY
            got = await settle_lost_taker(reg, got, ttl=ttl)
        if got is not None and got.answered:
            break
        if loop.time() >= deadline:
            withdrawn = await reg.answer_request(
                sent.id, error=f"{RemoteTimeout.code}: no answer within {timeout:g}s",
                only_untaken=True)
            if withdrawn:
                raise RemoteTimeout(sent.id, job_id, timeout, withdrawn=True)
            got = await reg.get_request(sent.id)
            if got is not None and got.answered:
                break
            raise RemoteTimeout(sent.id, job_id, timeout, withdrawn=False)
        await asyncio.sleep(poll)
    if got.error is not None:
        code, _, message = got.error.partition(": ")
        raise RemoteRefused(code, message or got.error, job_id=job_id,
                            instance_id=got.taken_by, run_id=got.run_id)
    return got


async def remote_backfill(
    store: Store,
    job_id: str,
    start: datetime,
    end: datetime,
    *,
    by: str,
    ttl: float,
    only_missing: bool = False,
    rate: float | None = None,
    timeout: float = 30.0,
    poll: float = 0.1,
    api_store: ApiStore | None = None,
) -> FleetRequest:
    """Ask a live instance that declares ``job_id`` (an API job: that holds it, as
    :func:`remote_trigger`) to backfill ``[start, end]``
    (:meth:`Scheduler.backfill_async`) and wait until one took it: the request, whose id
    names the backfill (:func:`backfill_status`, :func:`remote_cancel_backfill`). Raises
    :class:`NotDeclared` / :class:`RemoteTimeout` as :func:`remote_trigger`."""
    reg = _registry(store)
    await check_taker(reg, job_id, ttl=ttl, api_store=api_store)
    payload: dict[str, Any] = {"from": start.isoformat(), "to": end.isoformat(),
                               "only_missing": bool(only_missing), "rate": rate}
    sent = await reg.submit_request(FleetRequest("backfill", job_id, by, payload))
    assert sent.id is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await reg.get_request(sent.id)
        if got is not None and (got.taken_by is not None or got.answered):
            break
        if loop.time() >= deadline:
            if await reg.answer_request(
                    sent.id, error=f"{RemoteTimeout.code}: not taken within {timeout:g}s",
                    only_untaken=True):
                raise RemoteTimeout(sent.id, job_id, timeout, withdrawn=True)
            continue  # taken meanwhile
        await asyncio.sleep(poll)
    if got.answered and got.error is not None:
        code, _, message = got.error.partition(": ")
        raise RemoteRefused(code, message or got.error, job_id=job_id,
                            instance_id=got.taken_by, run_id=None)
    return got


def lost_taker_error(req: FleetRequest) -> str:
    """The answer of a request whose taker was lost before answering it (``INSTANCE_LOST``;
    a backfill's says how far it got and how to finish it)."""
    who = req.taken_by or "?"
    if req.kind == "backfill":
        p = req.payload.get("progress") or {}
        return (f"{INSTANCE_LOST}: instance {who} was lost while running the backfill; "
                f"{p.get('done', 0)} of {p.get('total', '?')} slots done -- run it again "
                "with --only-missing")
    return (f"{INSTANCE_LOST}: instance {who} was lost before answering the {req.kind} "
            "request (it may or may not have acted on it)")


async def settle_lost_taker(reg: RegistryStore, req: FleetRequest, *, ttl: float
                            ) -> FleetRequest:
    """``req`` as it stands, answered failed (:func:`lost_taker_error`) first when it was
    taken, is unanswered and its taker is no longer live (heartbeat older than ``ttl`` or
    declared lost: the rule of ``Fleet``). Nobody answers it otherwise: a dead taker left
    its caller polling forever. A taker that comes back finds its request answered and
    stops (``Registry._note``). The answer is written once whoever writes first."""
    if req.answered or req.taken_by is None or req.id is None:
        return req
    live = {i.instance_id for i in await reg.list_instances(ttl=ttl) if i.live}
    if req.taken_by in live:
        return req
    if await reg.answer_request(req.id, error=lost_taker_error(req)):
        log.warning("request %d (%s of %r): its taker %s is not live; answered failed",
                    req.id, req.kind, req.job_id, req.taken_by)
    return await reg.get_request(req.id) or req


async def backfill_status(store: Store, request_id: int, *, ttl: float | None = None
                          ) -> FleetRequest:
    """A backfill request with its progress (``payload["progress"]``: total, done,
    current, ran, present, taken, busy, cancelled, finished); raises
    :class:`RemoteRefused` (``BACKFILL_NOT_FOUND``) for an unknown id. With ``ttl``, a
    backfill whose instance was lost is answered failed first
    (:func:`settle_lost_taker`)."""
    reg = _registry(store)
    got = await reg.get_request(request_id)
    if got is None or got.kind != "backfill":
        raise RemoteRefused("BACKFILL_NOT_FOUND", f"no backfill {request_id}", job_id="",
                            instance_id=None, run_id=None)
    if ttl is not None:
        got = await settle_lost_taker(reg, got, ttl=ttl)
    return got


async def remote_cancel_backfill(store: Store, request_id: int, *, by: str, ttl: float,
                                 timeout: float = 30.0, poll: float = 0.1) -> FleetRequest:
    """Ask the instance running backfill ``request_id`` to stop it (the slot in progress
    is cancelled, later slots do not run)."""
    got = await backfill_status(store, request_id, ttl=ttl)
    if got.answered:
        raise RemoteRefused("BACKFILL_ENDED", f"backfill {request_id} has already ended",
                            job_id=got.job_id, instance_id=got.taken_by, run_id=None)
    if got.taken_by is None:  # not taken yet: withdraw it
        if await _registry(store).answer_request(
                request_id, error=f"CANCELLED: cancelled by {by} before it started",
                only_untaken=True):
            return await backfill_status(store, request_id)
        got = await backfill_status(store, request_id)
    req = FleetRequest("cancel_backfill", got.job_id, by, {"request_id": request_id},
                       target=got.taken_by)
    return await _send(_registry(store), req, timeout, poll, ttl)


# -- this process's side ----------------------------------------------------------------------


class Registry:
    """This process's rows of the registry and the requests it takes (built afresh at
    each start; enabled with the fleet: a store that keeps instances, and timers)."""

    def __init__(self, *, store: Store, clock: Clock, settings: Settings, life: Life,
                 stats: Stats, activity: Activity, jobs: Jobs, fleet: Fleet, runs: Runs,
                 control: Control) -> None:
        """Built with the store, the clock, the settings, the scheduler's life, the stats,
        the activity counter, the job table (read-only), the fleet (who is live), the runs
        (a cancel asked for a run here) and ``control`` (a trigger or a backfill asked by
        another process goes through the facade, as a local one)."""
        self.clock = clock
        self.settings = settings
        self.instance_id = settings.instance_id
        self.life = life
        self.stats = stats
        self.activity = activity
        self.jobs = jobs
        self.fleet = fleet
        self.runs = runs
        self.control = control
        self.store: RegistryStore | None = (
            store if isinstance(store, RegistryStore) and settings.timers else None
        )
        self.published: dict[str, str] | None = None  # job id -> digest, as last written
        self.touched = float("-inf")  # our clock at the last write
        # the declared set may differ from ``published``: set at start and by changed()
        # (the scheduler's only ways to add, replace or remove a job); while it is clear,
        # sync() does not rebuild every job's spec and digest (~30 us a job, on the loop)
        self.dirty = True
        self.wakeup = asyncio.Event()
        self.notified = getattr(store, "subscribe", None) is not None
        self._soon = False
        self.backfills: dict[int, Backfill] = {}  # request id -> a remote backfill here
        self.said_large = False  # the LARGE line was logged
        self._writing = asyncio.Lock()  # one publish at a time (start's and a heartbeat's)

    @property
    def enabled(self) -> bool:
        return self.store is not None

    def entries(self, jobs: Iterable[Job]) -> list[Declared]:
        return [declared(j) for j in jobs]

    async def _entries_yielding(self) -> list[Declared]:
        """:meth:`entries` of every published job (:func:`published`), giving the loop a
        turn every :data:`BUILD_CHUNK` jobs (~30 us a job: 100,000 jobs in one go held the
        loop for seconds, late instants and missed heartbeats). More than :data:`LARGE`
        jobs: built only in the quiet moments between instants (``Fleet.quiet_moment``):
        the first seconds of three processes starting with 100,000 jobs each fired
        their slots up to 0.8 s late while each built its rows beside its instants."""
        jobs = published(self.jobs.values())
        out: list[Declared] = []
        quiet = len(jobs) > LARGE
        for k in range(0, len(jobs), BUILD_CHUNK):
            out.extend(self.entries(jobs[k:k + BUILD_CHUNK]))
            if k + BUILD_CHUNK < len(jobs):
                await asyncio.sleep(0)
                if quiet:
                    await self.fleet.quiet_moment()
        return out

    async def publish_at_start(self) -> None:
        """The first :meth:`sync`, before the timers start -- except for a large set
        (more than :data:`LARGE` jobs): building and writing 100,000 rows takes seconds
        that the first instants should not wait for, so it goes on in the background
        (``cronfleet jobs`` and remote triggers see this instance's jobs once written;
        its own timers never depend on the registry)."""
        if self.store is None:
            return
        if len(self.jobs) <= LARGE or len(published(self.jobs.values())) <= LARGE:
            await self.sync()
        else:
            self.life.spawn(self._sync_counted())

    async def _sync_counted(self) -> None:
        """:meth:`sync` counted as activity (a write: the scheduler is not idle meanwhile)."""
        activity = self.activity
        activity.enter()
        try:
            await self.sync()
        finally:
            activity.leave()

    async def sync(self) -> None:
        """Write the registry when the declared set changed, touch it every ``TOUCH``
        seconds otherwise (after each heartbeat); failures are logged and retried at
        the next one."""
        if self.store is None:
            return
        async with self._writing:
            await self._sync()

    async def _sync(self) -> None:
        assert self.store is not None
        now = self.clock.now()
        rows: list[Declared] = []
        digests: dict[str, str] = {}
        changed = False
        if self.dirty:
            self.dirty = False  # a change from here on (during the write) sets it again
            rows = await self._entries_yielding()
            digests = {d.job_id: d.digest for d in rows}
            changed = digests != self.published
        if not changed and now - self.touched < TOUCH:
            return
        me = self.instance_id
        try:
            await self.store.publish_jobs(me, rows if changed else None)
            self.touched = now
            if changed:
                self.published = digests
                await self._report_conflicts(digests)
        except Exception as exc:
            if changed:
                self.dirty = True  # written again at the next heartbeat
            self.stats.store_errors += 1
            log.warning("instance %s: could not publish its jobs (%s)", me, exc)

    def changed(self, jobs: Iterable[Job] | None = None) -> None:
        """``jobs`` (``None``: any) were added, replaced or removed while running: publish
        soon (once for a batch of changes), not only at the next heartbeat. Nothing to do
        when they are all API jobs (not published: a batch of 1,000 new API jobs no longer
        rebuilds and compares every job's row)."""
        if jobs is not None and not published(jobs):
            return
        self.dirty = True
        if self.store is None or self._soon:
            return
        self._soon = True
        self.life.spawn(self._sync_soon())

    async def _sync_soon(self) -> None:
        await asyncio.sleep(0)  # the rest of the batch first
        self._soon = False
        await self.sync()

    async def _report_conflicts(self, mine: Mapping[str, str]) -> None:
        assert self.store is not None
        if set(self.fleet.live) <= {self.instance_id}:
            # alone in the fleet: a conflict is between live declarers (conflicts()), so
            # there is none to find here; an instance that joins reports it from its side.
            # Skipping the read spares every row of the registry with its spec (20,000
            # jobs: ~50 MB allocated at start-up, kept by the process as RSS)
            return
        if len(mine) > LARGE:
            # reading every row of every declarer back (3 x 100,000 jobs: 300,000 specs)
            # held the loop for tens of seconds; the conflicts stay shown where they are
            # looked for: `cronfleet jobs`, GET /api/jobs, the dashboard
            if not self.said_large:
                self.said_large = True
                log.info("instance %s declares %d jobs (more than %d): conflicting "
                         "declarations are not logged at start, see `cronfleet jobs`",
                         self.instance_id, len(mine), LARGE)
            return
        found = await fleet_jobs(self.store, ttl=self.settings.instance_ttl)
        for job_id in sorted(mine):
            fj = found.get(job_id)
            c = None if fj is None else fj.conflict
            if c is not None:
                log.warning("job %r is %s: the registry shows both; align the declarations",
                            job_id, c)

    def wake(self) -> None:
        self.wakeup.set()

    async def request_loop(self) -> None:
        """Take the requests meant for this instance, act on each, wait for the next."""
        assert self.store is not None
        interval = POLL_NOTIFIED if self.notified else POLL
        while True:
            self.wakeup.clear()
            try:
                taken = await self.store.take_requests(self.instance_id, self.jobs)
            except Exception as exc:
                self.stats.store_errors += 1
                log.warning("instance %s: could not read requests (%s)", self.instance_id, exc)
                taken = []
            for req in taken:
                await self.handle(req)
            if not taken:
                try:
                    async with asyncio.timeout(interval):
                        await self.wakeup.wait()
                except TimeoutError:
                    pass

    async def _backfill(self, req: FleetRequest) -> str | None:
        """Start a remote backfill here; its progress is written to the request while it
        runs, the answer at its end. Returns the refusal, if any."""
        p = req.payload
        try:
            start = datetime.fromisoformat(str(p.get("from")))
            end = datetime.fromisoformat(str(p.get("to")))
            rate = p.get("rate")
            bf = await self.control.backfill_async(
                req.job_id, start, end, only_missing=bool(p.get("only_missing")),
                by=req.requested_by, rate=None if rate is None else float(rate), wait=False,
                since=None if req.requested_at is None else req.requested_at.timestamp())
        except JobNotFound:
            return f"{NotDeclared.code}: instance {self.instance_id} no longer " \
                   f"declares job {req.job_id!r}"
        except (ValueError, TypeError, CronfleetError) as exc:
            return f"{getattr(exc, 'code', 'BAD_REQUEST')}: {exc}"
        assert req.id is not None
        self.backfills[req.id] = bf
        log.info("request %d: %s backfills %r from %s to %s", req.id, req.requested_by,
                 req.job_id, start.isoformat(), end.isoformat())
        self.life.spawn(self._follow(req.id, dict(p), bf))
        return None

    async def _follow(self, rid: int, payload: dict[str, Any], bf: Backfill) -> None:
        """Write a remote backfill's progress every PROGRESS seconds, answer at its end."""
        assert self.store is not None and bf.task is not None
        try:
            while not bf.task.done():
                await self._note(rid, payload, bf)
                await asyncio.wait({bf.task}, timeout=PROGRESS)
            error: str | None = None
            if bf.task.cancelled() or bf.cancelled:
                error = "CANCELLED: the backfill was cancelled"
            elif bf.task.exception() is not None:
                exc = bf.task.exception()
                error = f"{getattr(exc, 'code', 'INTERNAL')}: {exc}"
            await self._note(rid, payload, bf)
            await self.store.answer_request(rid, error=error)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("backfill %d: could not write its progress (%s)", rid, exc)
        finally:
            self.backfills.pop(rid, None)

    async def _note(self, rid: int, payload: dict[str, Any], bf: Backfill) -> None:
        """Write the progress; a request answered meanwhile by another process (this
        instance was judged lost: :func:`settle_lost_taker`) stops the backfill here."""
        assert self.store is not None
        try:
            if not await self.store.note_request(rid, {**payload, "progress": bf.to_dict()}) \
                    and not bf.finished and not bf.cancelled:
                log.warning("backfill %d of %r was answered elsewhere (this instance was "
                            "judged lost): stopping it", rid, bf.job_id)
                bf.cancel()
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("backfill %d: could not write its progress (%s)", rid, exc)

    def _cancel_backfill(self, req: FleetRequest) -> str | None:
        rid = req.payload.get("request_id")
        bf = self.backfills.get(rid) if isinstance(rid, int) else None
        if bf is None:
            return (f"BACKFILL_NOT_RUNNING: backfill {rid} is not running on instance "
                    f"{self.instance_id} (it may have just ended)")
        bf.cancel()
        return None

    def _cancel(self, req: FleetRequest) -> tuple[int | None, str | None]:
        run_id = req.payload.get("run_id")
        if not isinstance(run_id, int):
            return None, "BAD_REQUEST: a cancel request names no run_id"
        why = str(req.payload.get("why") or "no reason given")
        try:
            self.runs.cancel(run_id, by=req.requested_by, why=why)
        except KeyError:
            return run_id, (f"RUN_NOT_RUNNING: run {run_id} is not executing on instance "
                            f"{self.instance_id} (it may have just ended)")
        return run_id, None

    async def handle(self, req: FleetRequest) -> None:
        """Act on one request and answer it (an answer that cannot be written is
        logged: the sender then times out, naming the request)."""
        assert self.store is not None and req.id is not None
        run_id: int | None = None
        error: str | None = None
        if req.kind == "cancel":
            run_id, error = self._cancel(req)
        elif req.kind == "backfill":
            error = await self._backfill(req)
            if error is None:
                return  # answered when it ends (_follow)
        elif req.kind == "cancel_backfill":
            error = self._cancel_backfill(req)
        elif req.kind != "trigger":
            error = f"UNKNOWN_REQUEST: request kind {req.kind!r} is not known to this instance"
        else:
            payload = req.payload
            try:
                run = await self.control.trigger_async(
                    req.job_id, by=req.requested_by, params=payload.get("params"),
                    force=bool(payload.get("force")))
                run_id = run.id
                log.info("request %d: %s triggered %r remotely (run %s)", req.id,
                         req.requested_by, req.job_id, run_id)
            except AlreadyExecuting as exc:
                run_id = exc.record.id
                error = f"{exc.code}: job {req.job_id!r} is already executing: the lease is " \
                        f"held by {exc.holder or 'another run'}"
            except JobNotFound:
                error = f"{NotDeclared.code}: instance {self.instance_id} no longer " \
                        f"declares job {req.job_id!r}"
            except CronfleetError as exc:
                error = f"{getattr(exc, 'code', type(exc).__name__)}: {exc}"
            except Exception as exc:  # a bad request must not end the loop
                log.exception("request %d failed", req.id)
                error = f"INTERNAL: {type(exc).__name__}: {exc}"
        try:
            await self.store.answer_request(req.id, run_id=run_id, error=error)
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("request %d: could not write the answer (%s)", req.id, exc)
