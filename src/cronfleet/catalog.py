"""Jobs created over the API: their spec, its validation, and keeping every scheduler's job
list in step with the definitions stored in the database.

A spec is plain JSON (what ``POST /api/jobs`` takes and what the ``job_defs`` table
holds)::

    {"id": "invoice-run", "schedule": "0 6 * * MON-FRI", "timezone": "Europe/Paris",
     "http": {"url": "https://billing.example.com/run", "method": "POST"},
     "retry": {"attempts": 3, "delay": "10s"}, "timeout": "5m", "overlap": "skip",
     "notify": {"webhook": "https://hooks.example.com/x"}, "allow_private_targets": false}

A spec takes the keys a ``[[tasks]]`` entry takes (``schedule`` for ``cron``, ``config`` as
an object for ``config_json``; no ``team``, no ``http.namespace``: both are the token's
team) and is checked by :func:`cronfleet.spec.validate_job`, the one validator of every
face, so a spec is judged by the same rules whichever way it arrives; every problem is
reported at once as ``(field, message, column)``.

:class:`Catalog` loads the definitions when the scheduler starts and then follows changes:
at once for writes made through this process, on a PostgreSQL notification, and otherwise
by reading the store-wide catalog version every ``poll`` seconds (one tiny query).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from operator import itemgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from cronfleet import spec as _spec
from cronfleet.cancel import cancel_and_wait
from cronfleet.clock import wait_event
from cronfleet.cron.compose import parse_schedule
from cronfleet.errors import CronfleetError, JobNotFound
from cronfleet.model import DEFAULT_TEAM, Job
from cronfleet.runtime.due import next_slot
from cronfleet.runtime.process import freeze_made
from cronfleet.shares import ALL_BUCKETS, BUCKETS, bucket_of
from cronfleet.spec import FieldProblem, SpecInvalid

if TYPE_CHECKING:
    from cronfleet.jobs.command import CommandRuntime
    from cronfleet.jobs.http import HttpRuntime
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.store.side import ApiStore, ChangeKey, JobDef

__all__ = ["API_HTTP_KEYS", "API_KEYS", "BatchInvalid", "Catalog", "ChangedMeanwhile",
           "CommandJobsDisabled", "IdTaken", "SpecInvalid", "SpecProblem", "build_job",
           "job_elsewhere"]

log = logging.getLogger("cronfleet.catalog")

SOURCE = _spec.API_SOURCE
PAGE = 1000  # definitions per read of the change feed
UNLOAD_CHUNK = 2000  # jobs let go between two turns of the loop when the share shrinks
LET_GO = 30.0  # seconds a bucket that moved away stays held (parked) before it is let go
BUILT = 10_000  # jobs built on demand kept (Catalog.build), the least recently used dropped
GAIN_CHUNK = 500  # jobs built and handed to the scheduler at a time when buckets move here
GAIN_READ = 200_000  # definitions read before they are sorted and built (~1 KB each)
URGENT = 5.0  # seconds: a job that moves here due sooner is built as soon as it is read
FREEZE_EVERY = 10_000  # jobs made between two freezes of what they made (``freeze``)
# what a stored job may say: every key of a [[tasks]] entry in spec terms, except the team
# (the token's) and, in http, the secrets namespace (the team's). "allow_private_targets"
# inside "http" is read too: jobs stored before it moved next to "retry" keep working.
API_KEYS = tuple(k for k in _spec.SPEC_KEYS if k != "team")
API_HTTP_KEYS = tuple(k for k in _spec.HTTP_KEYS if k != "namespace")
SpecProblem = FieldProblem  # (field, message, column): the name this module used
NO_CONFIG: Mapping[str, Any] = MappingProxyType({})
"""The ``config`` of every HTTP job stored without one (read-only, shared)."""
MERGED_KEYS = ("http", "retry")  # an update merges these key by key; other keys replace


class IdTaken(CronfleetError):
    """A job with this id exists already (declared, stored, or deleted by another team)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job id {job_id!r} is already taken")
        self.job_id = job_id


class BatchInvalid(CronfleetError):
    """Some items of a batch of new jobs are bad, so none was stored: every problem of
    every bad item as ``(index in the batch, problem)``."""

    def __init__(self, problems: list[tuple[int, FieldProblem]]) -> None:
        first = problems[0]
        super().__init__(f"item {first[0]}: {first[1]}"
                         + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        self.problems = problems


class CommandJobsDisabled(CronfleetError):
    """A stored job runs a command, and command jobs are off here (``[api]
    allow_command_jobs``, off by default: a command job is code execution on the fleet)."""

    def __init__(self, job_id: str | None = None) -> None:
        super().__init__("command jobs are disabled on this server: a command job runs "
                         "code on every host of the fleet, so an administrator must turn "
                         "them on with allow_command_jobs = true in [api] of cronfleet.toml")
        self.job_id = job_id


class ChangedMeanwhile(CronfleetError):
    """The stored definition changed between reading and writing it: read it again."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} changed meanwhile; read it again and retry")
        self.job_id = job_id


def merge_changes(spec: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with ``changes`` applied: ``http`` and ``retry`` merge key by key, ``None``
    removes a key, any other value replaces it."""
    out = dict(spec)
    for key, value in changes.items():
        if isinstance(value, dict) and key in MERGED_KEYS:
            merged = {**(out.get(key) or {}), **value}
            out[key] = {k: v for k, v in merged.items() if v is not None}
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def pinned(spec: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The spec to store: a one-off written in words (``"schedule": "tomorrow at 5pm"``)
    is stored as the instant it was read as (``"at": "2026-12-02T17:00:00+01:00"``), so
    that reading the definition again (every scheduler start, every process) never moves
    it."""
    from cronfleet.cron import ComposedSchedule

    out = dict(spec)
    schedule = job.schedule
    if (isinstance(out.get("schedule"), str) and isinstance(schedule, ComposedSchedule)
            and schedule.at is not None and out.get("at") is None):
        del out["schedule"]
        out["at"] = schedule.at.isoformat()
    return out


MAX_ONE_OFF_JITTER = 86400.0  # a schedule without a period (a one-off `at`)
NO_OPT_OUT = ("API jobs cannot turn the SSRF guard off; the operator allows private "
              "networks and hosts for them with [api] private_targets")


def validate_spec(spec: Mapping[str, Any], *, team: str = DEFAULT_TEAM, new: bool = False,
                  now: float | None = None
                  ) -> tuple[_spec.JobSpec | None, list[FieldProblem]]:
    """Every problem of a stored job's spec (API keys), at once; the job is ``team``'s.
    ``new``: the spec is being saved (``allow_private_targets = true`` is refused; in a
    definition stored by an earlier release it is ignored). ``now``: the moment it is
    saved, which a one-off in words ('tomorrow at 5pm') is read at."""
    kwargs, problems = _spec_arguments(spec, team=team, new=new, now=now)
    return (None if kwargs is None else _spec.JobSpec(**kwargs)), problems


def _spec_arguments(spec: Mapping[str, Any], *, team: str, new: bool, now: float | None
                    ) -> tuple[dict[str, Any] | None, list[FieldProblem]]:
    """:func:`validate_spec` as the keyword arguments of its
    :class:`~cronfleet.spec.JobSpec` (:func:`cronfleet.spec.job_arguments`)."""
    result, problems = _spec.job_arguments(spec, keys=API_KEYS, http_keys=API_HTTP_KEYS,
                                           calendars=False,
                                           require_http=True, now=now, for_team=team)
    if new:
        http = spec.get("http")
        for key, value in (("allow_private_targets", spec.get("allow_private_targets")),
                           ("http.allow_private_targets",
                            http.get("allow_private_targets") if isinstance(http, Mapping)
                            else None)):
            if value is True:
                problems.append(FieldProblem(key, NO_OPT_OUT))
        if problems:
            return None, problems
    return result, problems


def build_job(spec: Mapping[str, Any], *, team: str = DEFAULT_TEAM,
              runtime: HttpRuntime | None = None, saved_role: str | None = "admin",
              new: bool = False, allow_commands: bool = False,
              command_runtime: CommandRuntime | None = None, now: float | None = None) -> Job:
    """The :class:`Job` a spec describes; raises :class:`SpecInvalid` listing every
    problem. The request's secrets are looked up in the team's namespace; it reaches
    private targets only as the operator's ``[api] private_targets`` allow (the runtime's
    ``api_private_targets``); unless an admin saved it (``saved_role``), a secret it uses
    must have hosts. A command job raises :class:`CommandJobsDisabled` unless
    ``allow_commands``, and may use secrets only when an admin saved it (a command can
    send a value anywhere: no host binding holds)."""
    from cronfleet.jobs.http import NO_API_PRIVATE_TARGETS, HttpJob, HttpJobInvalid

    team = sys.intern(team)  # the job's and its handler's: one string per team, not per job
    kwargs, problems = _spec_arguments(spec, team=team, new=new, now=now)
    if kwargs is None:
        raise SpecInvalid(problems)
    handler: Any
    if kwargs.get("command") is not None:
        result = _spec.JobSpec(**kwargs)
        if not allow_commands:
            raise CommandJobsDisabled(result.id)
        handler = _command_job(result, team, saved_role, command_runtime)
        fields = {**result.job_fields(), "timeout": handler.job_timeout}
    else:
        targets = (runtime.api_private_targets if runtime is not None
                   else NO_API_PRIVATE_TARGETS)
        # the job's fields and its request as validated: no JobSpec between (~3 us)
        fields = kwargs
        request = fields.pop("http")
        fields.pop("allow_private_targets", None)  # the operator's private_targets rule
        fields.pop("command", None)
        # one empty config for every HTTP job stored without one (its handler reads none):
        # a process holds one job per API job of its share (#27)
        if not fields.get("config"):
            fields["config"] = NO_CONFIG
        try:
            handler = HttpJob.from_request(
                request, retry=fields.get("retry"), notify=fields.get("notify"),
                auto_pause_after=fields.get("auto_pause_after"), runtime=runtime,
                namespace=team, private_targets=targets,
                secrets_need_hosts=saved_role != "admin")
        except HttpJobInvalid as exc:
            raise SpecInvalid([
                FieldProblem(key if key == "auto_pause_after" else f"http.{key}", message)
                for key, message in exc.problems]) from None
        why = targets.refuses(handler.url) if new else None
        if why is not None:  # it would fail on every run: refused when saved
            raise SpecInvalid([FieldProblem(
                "http.url", f"{why}: the SSRF guard refuses private targets for API jobs "
                            "unless the operator lists them in [api] private_targets")])
    job = Job(handler=handler, source=SOURCE, **fields)
    if new and job.jitter:
        from cronfleet.clock import SystemClock, from_ts
        from cronfleet.views import period_of

        found = period_of(job, from_ts(SystemClock().now() if now is None else now))
        period = found or MAX_ONE_OFF_JITTER
        if job.jitter > period:
            what = "" if found else ", for a one-off"
            raise SpecInvalid([FieldProblem(
                "jitter", f"{job.jitter:g}s is longer than the schedule's period "
                          f"({period:g}s{what}): a run would start after the next slot")])
    return job


def job_elsewhere(d: JobDef) -> Job:
    """The job a live stored definition describes, as a process that does not run it
    shows and operates it (the CLI: views, pause, a trigger sent through the store): its
    handler a :class:`~cronfleet.runtime.registry.DeclaredElsewhere`. API jobs are not in
    the job registry; this is what the registry's ``job_from_spec`` is for declared jobs.
    Raises :class:`SpecInvalid` for a definition that no longer validates."""
    from cronfleet.runtime.registry import DeclaredElsewhere

    result, problems = validate_spec(d.spec, team=d.team)
    if result is None:
        raise SpecInvalid(problems)
    return Job(handler=DeclaredElsewhere(d.id), source=SOURCE,
               **{**result.job_fields(), "id": d.id})


def _command_job(result: _spec.JobSpec, team: str, saved_role: str | None,
                 runtime: CommandRuntime | None) -> Any:
    """The :class:`~cronfleet.jobs.command.CommandJob` of a stored spec (its secrets in
    the team's namespace, and only in an admin's job)."""
    from cronfleet.jobs.command import CommandJob, CommandJobInvalid
    from cronfleet.secrets import references

    try:
        command = CommandJob.from_spec(result, runtime=runtime, namespace=team)
    except CommandJobInvalid as exc:
        raise SpecInvalid([FieldProblem("command" if key == "secrets" else key, message)
                           for key, message in exc.problems]) from None
    if saved_role != "admin":
        texts = [("command", t) for t in ([command.command] if isinstance(command.command, str)
                                          else command.command)]
        texts += [(f"env.{k}", v) for k, v in command.env.items()]
        problems = [FieldProblem(key, f"${{secrets.{name}}}: only an admin's command job may "
                                      "use secrets (a command can send a value anywhere)")
                    for key, text in texts for name in references(text)]
        if problems:
            raise SpecInvalid(problems)
    return command


def soonest(d: JobDef, since: float) -> float:
    """The first fire time after ``since`` of a stored definition's schedule, read without
    building the job (its expression is parsed once per distinct text): the order in which
    jobs that move here are built. A schedule it cannot read this way (a list, a one-off,
    bounds, a bad one) comes first: building it says what it is."""
    spec = d.spec
    text, tz = spec.get("schedule"), spec.get("timezone") or "UTC"
    if not isinstance(text, str) or not isinstance(tz, str) or any(
            spec.get(k) is not None for k in _spec.SCHEDULE_KEYS[1:]):  # composed
        return float("-inf")
    try:
        expr, _ = parse_schedule(text, tz, relative=False)
    except (CronfleetError, ValueError):
        return float("-inf")
    return next_slot(expr, since)


class Catalog:
    """Keeps ``scheduler``'s jobs in step with the definitions in ``api_store``.

    Only jobs it added are ever replaced or removed: a definition whose id is taken by a
    job declared in code or config is reported and ignored.

    ``shares``: the scheduler holds only its share of the definitions -- those of the
    buckets (:mod:`cronfleet.shares`) its instance owns among its peers -- read at start
    in ``(bucket, id)`` keyset pages, planned as they are read; when the peers change, the
    buckets that moved here are read and those that moved away are let go (their jobs
    leave the scheduler). Without it (or alone), every definition is held.

    ``freeze``: this process belongs to the scheduler (``cronfleet run``): the jobs made
    from many definitions leave the cyclic GC's sight as they are made
    (:meth:`_made_many`).
    """

    def __init__(self, scheduler: Scheduler, api_store: ApiStore, *,
                 runtime: HttpRuntime | None = None, poll: float = 2.0,
                 allow_commands: bool = False,
                 command_runtime: CommandRuntime | None = None, page: int = PAGE,
                 shares: bool = False, freeze: bool = False) -> None:
        self.scheduler = scheduler
        self.api_store = api_store
        self.runtime = runtime
        self.allow_commands = allow_commands
        self._command_runtime = command_runtime
        self.poll = poll
        self._versions: dict[str, int] = {}
        # the last definition applied from the feed: its version is the catalog's version
        # this process is up to date with
        self._cursor: ChangeKey = (0, "")
        self.page = page
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._loading = False  # the first load, at start
        self._built: OrderedDict[tuple[str, int], Job | None] = OrderedDict()  # build()
        self.shares = shares
        # the buckets whose definitions are held here: every one without shares, none
        # until the first reading with them
        self._buckets = frozenset() if shares else ALL_BUCKETS
        self._reshare = False  # the peers changed: the share is to be read again
        self._settled = not shares  # the whole share was read once
        self._leaving: dict[int, float] = {}  # buckets that moved away -> since when
        self.freeze = freeze
        self._made = 0  # jobs made since the last freeze
        if shares:
            scheduler.share_api_jobs()

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def ready(self) -> bool:
        """Started, and its whole share read once (the peers changed during the first
        reading: the rest is read by the watch; /readyz waits for it)."""
        return self._task is not None and self._settled

    def held_version(self, job_id: str) -> int | None:
        """The version of the definition this process holds for ``job_id``, or None."""
        return self._versions.get(job_id)


    async def start(self) -> None:
        if self._task is not None:
            return
        await self.reserve_declared()
        began = time.monotonic()
        self._changed = asyncio.Event()
        if self.shares:  # the peers may change while the share is first read
            self.scheduler.ownership.on_peers = self._peers_changed
        self._loading = True  # one line for the whole first load, not one per job
        try:
            if self.shares:
                await self._load_share()
            await self.refresh()
        finally:
            self._loading = False
        share = ("" if len(self._buckets) == BUCKETS
                 else f" (the share of {self.scheduler.instance_id}: {len(self._buckets)} "
                      f"of {BUCKETS} buckets)")
        log.info("%d job(s) loaded from the catalog in %.1f s%s", len(self._versions),
                 time.monotonic() - began, share)
        if self.shares and not self._target() <= self._buckets:
            self._peers_changed()  # they did: the watch reads the share again at once
        else:
            self._settled = True
        subscribe = getattr(self.scheduler.store, "subscribe", None)
        if subscribe is not None:
            await subscribe(self._changed.set)
        self._task = asyncio.get_running_loop().create_task(self._watch(),
                                                            name="cronfleet-catalog")

    async def reserve_declared(self) -> None:
        """Record the ids of the jobs declared in code or config with their teams
        (``job_ids``): such an id stays its team's after the job leaves the config, so no
        other team can create a job with it and read the runs left under it."""
        declared = [(j.id, j.team, j.source) for j in self.scheduler.iter_jobs()
                    if isinstance(j, Job) and j.id not in self._versions and j.source != SOURCE]
        await self.api_store.reserve_ids(declared)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])

    async def _watch(self) -> None:
        assert self._changed is not None
        while True:
            await wait_event(self._changed, self.poll)
            self._changed.clear()
            try:
                if self._reshare:
                    self._reshare = False
                    try:
                        await self.reshare()
                    except Exception:
                        # read again at the next pass: until then the buckets not read
                        # are nobody's (their owner is this instance), and /readyz waits
                        self._reshare = True
                        raise
                await self.refresh()
                await self.let_go()
            except Exception as exc:
                log.warning("cannot read the job catalog (%s); keeping the jobs as they are",
                            exc)

    async def refresh(self) -> None:
        """Apply every definition changed since the last look (cheap when none did): the
        change feed after the last one applied, in pages of :attr:`page` (at start, every
        definition, page by page). Writers take turns, so a version is visible only once
        every lower one is: nothing is skipped. A feed ending below the version read first
        means a writer that does not record its changes (a process of an older cronfleet
        during a rolling upgrade): every definition is then read again."""
        async with self._lock:
            version = await self.api_store.catalog_version()
            if version == self._cursor[0]:
                return
            if version < self._cursor[0]:  # another database, or one restored from backup
                log.warning("the job catalog's version went back (%d after %d); reading "
                            "it again", version, self._cursor[0])
                self._cursor = (0, "")
                # its versions say nothing of ours: apply each definition read again
                self._versions = dict.fromkeys(self._versions, -1)
            while True:
                defs = await self.api_store.job_defs_changed(self._cursor, self.page)
                for d in defs:
                    self._apply(d)
                self._made_many(len(defs))
                if defs:
                    self._cursor = (defs[-1].version, defs[-1].id)
                if len(defs) < self.page:
                    break
            if self._cursor[0] < version:
                log.warning("the job catalog's change feed ends at version %d, below %d "
                            "(a writer of an older cronfleet?): reading every definition",
                            self._cursor[0], version)
                await self._reload_all()
                self._cursor = (version, "")

    # -- shares ---------------------------------------------------------------------------

    def _target(self) -> frozenset[int]:
        """The buckets this process is to hold now. A process without timers (``--role
        api``, an API worker) runs no job: it holds none (the API reads the definitions
        from the store)."""
        if not self.shares:
            return ALL_BUCKETS
        if not self.scheduler.timers:
            return frozenset()
        return self.scheduler.ownership.buckets()

    def _wanted(self, job_id: str) -> bool:
        held = self._buckets
        return len(held) == BUCKETS or bucket_of(job_id) in held

    def _peers_changed(self) -> None:
        """The ownership's new peers (on the loop): the watch reads the share again."""
        self._reshare = True
        if self._changed is not None:
            self._changed.set()

    async def _load_share(self) -> None:
        """The first load with shares: the catalog's version, then the definitions of
        this process's buckets (the feed from that version catches what changed
        meanwhile)."""
        async with self._lock:
            version = await self.api_store.catalog_version()
            await self._gain(self._target())
            self._cursor = (version, "")

    async def reshare(self) -> None:
        """Hold the buckets the peers now give this process: read those that moved here;
        those that moved away are let go :data:`LET_GO` seconds later (:meth:`let_go`),
        their jobs parked meanwhile by the ownership (no slot of theirs is planned here):
        a peer missing for a moment -- a process starved of CPU past ``instance_ttl`` --
        gives its buckets back without anyone reading them twice."""
        async with self._lock:
            target = self._target()
            now = self.scheduler.clock.now()
            for b in self._buckets - target:
                self._leaving.setdefault(b, now)
            for b in [b for b in self._leaving if b in target]:
                del self._leaving[b]
            before = len(self._versions)
            # after the first reading (a peer lost or gone): soonest first; before it (the
            # peers changed during the start-up's reading), page by page, as at start
            await self._gain(target, soonest_first=self._settled)
            if target <= self._buckets:
                self._settled = True
            if len(self._versions) > before:
                log.info("%d job(s) of the catalog moved to %s", len(self._versions) - before,
                         self.scheduler.instance_id)

    async def let_go(self) -> None:
        """Let go of the jobs of the buckets that moved away :data:`LET_GO` seconds ago or
        more (they leave the scheduler: memory follows the share)."""
        now = self.scheduler.clock.now()
        old = {b for b, since in self._leaving.items() if now - since >= LET_GO}
        if not old:
            return
        async with self._lock:
            for b in old:
                self._leaving.pop(b, None)
            self._buckets -= old
            gone = [i for i in self._versions if bucket_of(i) in old]
            for k, job_id in enumerate(gone):
                if k and not k % UNLOAD_CHUNK:
                    await asyncio.sleep(0)
                self._unload(job_id)
            if gone:
                log.info("%d job(s) of the catalog moved to other instances", len(gone))

    async def _gain(self, target: frozenset[int], *, soonest_first: bool = False) -> None:
        """Read and apply the definitions of the buckets of ``target`` not held yet, in
        keyset pages; a newer share (the peers changed again) stops the reading: what was
        read stays, the watch goes on from there.

        At start, each page's jobs are planned as it is read (the first slots fire before
        the whole share is read). ``soonest_first`` (buckets that moved here from a peer
        lost or gone): a job whose next slot is due within :data:`URGENT` seconds (or was
        just missed) is built as soon as its page is read; the others are read first
        (:data:`GAIN_READ` at most at a time), then built and handed to the scheduler
        :data:`GAIN_CHUNK` at a time, those with the nearest slot first (:func:`soonest`):
        the slots a dead peer left undone wait for the page that holds them and a few
        builds, not for the read and the build of its whole share."""
        todo = sorted(target - self._buckets)
        if not todo:
            return
        after: tuple[int, str] = (-1, "")
        done = set(self._buckets)
        clock = self.scheduler.clock
        since = clock.now() - 2 * self.scheduler.instance_ttl  # the slots just missed too
        read: list[tuple[float, JobDef]] = []  # (its next slot, the definition)
        while True:
            defs, nxt = await self.api_store.job_defs_in(todo, after, self.page)
            # every bucket before the page's last one is read whole; that one is held
            # while its page is applied, whole only once a later page leaves it
            last = nxt[0] if nxt is not None else BUCKETS
            done.update(b for b in todo if b < last)
            held = frozenset(done) if nxt is None else frozenset(done) | {last}
            if soonest_first:
                by = clock.now() + URGENT
                urgent: list[tuple[float, JobDef]] = []
                for d in defs:
                    at = soonest(d, since)
                    (urgent if at <= by else read).append((at, d))
                if urgent:  # held while they are applied, then as before: a bucket
                    # is held for good only once its other definitions are applied too
                    before, self._buckets = self._buckets, held
                    try:
                        await self._apply_soonest_first(urgent)
                    finally:
                        self._buckets = before
                if len(read) >= GAIN_READ and nxt is not None:  # memory stays bounded
                    self._buckets = frozenset(done)
                    await self._apply_soonest_first(
                        [r for r in read if bucket_of(r[1].id) in done])
                    read = [r for r in read if bucket_of(r[1].id) not in done]
            else:
                self._buckets = held
                self._apply_many(defs)
                self._buckets = frozenset(done)
            if nxt is None:
                break
            after = nxt
            await asyncio.sleep(0)
            if self._target() != target:
                break  # the peers changed again: the next reshare goes on from here
        if soonest_first:  # a bucket cut by a change of peers is read again by the next
            self._buckets = frozenset(done)
            await self._apply_soonest_first([r for r in read if bucket_of(r[1].id) in done])

    async def _apply_soonest_first(self, read: list[tuple[float, JobDef]]) -> None:
        """Build and hand the definitions of ``read`` (each after its next slot) to the
        scheduler :data:`GAIN_CHUNK` at a time, the nearest slot first."""
        read.sort(key=itemgetter(0))
        for k in range(0, len(read), GAIN_CHUNK):
            if k:
                await asyncio.sleep(0)
            self._apply_many([d for _, d in read[k:k + GAIN_CHUNK]])

    def _apply_many(self, defs: Sequence[JobDef]) -> None:
        """Apply ``defs``, the new jobs among them added to the scheduler together (one
        read of their states)."""
        adding: list[Job] = []
        for d in defs:
            self._apply(d, adding=adding)
        if adding:
            self.scheduler.add_job(*adding)
        self._made_many(len(adding))

    def _made_many(self, count: int) -> None:
        """``count`` jobs were just made. With :attr:`freeze` (a process that belongs to
        the scheduler: ``cronfleet run``), every :data:`FREEZE_EVERY` of them, what they
        made leaves the cyclic GC's sight (:func:`~cronfleet.runtime.process.freeze_made`):
        its full collections stop rescanning every job held."""
        if not self.freeze:
            return
        self._made += count
        if self._made >= FREEZE_EVERY:
            self._made = 0
            freeze_made()

    def _unload(self, job_id: str) -> None:
        """Let go of a job whose bucket moved to another instance."""
        self._versions.pop(job_id, None)
        with contextlib.suppress(JobNotFound):
            self.scheduler.remove_job(job_id)

    async def full_reload(self) -> int:
        """Read and apply every definition in one read, as :meth:`refresh` did before the
        change feed (kept for ``bench/catalog_refresh.py``, the baseline). Returns how
        many were read."""
        async with self._lock:
            return await self._reload_all()

    async def _reload_all(self) -> int:
        defs = await self.api_store.job_defs(include_deleted=True)
        for d in defs:
            self._apply(d)
        return len(defs)

    def build(self, d: JobDef) -> Job | None:
        """The :class:`Job` a stored definition describes, built on demand (whether or
        not this process holds it): what the API shows of a job it does not run. None
        for a tombstone, or a definition this process cannot build (a command job while
        they are off here, a spec an older version accepted). The last :data:`BUILT`
        built are kept by ``(id, version)`` (building one takes 0.1-0.5 ms: a page of
        100 read again is not built again)."""
        if d.deleted_at is not None:
            return None
        key = (d.id, d.version)
        built = self._built
        if key in built:
            built.move_to_end(key)
            return built[key]
        job: Job | None
        try:
            job = build_job(d.spec, team=d.team, runtime=self.runtime,
                            saved_role=d.saved_role, allow_commands=self.allow_commands,
                            command_runtime=self.command_runtime)
        except (SpecInvalid, CommandJobsDisabled):
            job = None
        built[key] = job
        if len(built) > BUILT:
            built.popitem(last=False)
        return job

    def apply(self, d: JobDef, built: Job | None = None,
              adding: list[Job] | None = None) -> Job | None:
        """Apply one definition now (this process wrote it); ``built``: the job its spec
        describes, already built when it was validated (not built again); ``adding``: a
        new job goes in this list, which the caller adds to the scheduler at once."""
        return self._apply(d, built, adding)

    # -- changes (what the API and the CLI call) ---------------------------------------

    def validate(self, spec: Mapping[str, Any], team: str, role: str | None = "admin"
                 ) -> Job:
        """The job ``spec`` describes for ``team``, saved by a token of ``role`` now (the
        scheduler's clock: a one-off in words is read then); raises :class:`SpecInvalid`
        naming every problem."""
        return build_job(spec, team=team, runtime=self.runtime, saved_role=role, new=True,
                         allow_commands=self.allow_commands,
                         command_runtime=self.command_runtime,
                         now=self.scheduler.clock.now())

    @property
    def command_runtime(self) -> CommandRuntime | None:
        """The runtime of stored command jobs (the scheduler store's vault), made on first
        use; None while command jobs are off."""
        if self._command_runtime is None and self.allow_commands:
            from cronfleet.jobs.command import CommandRuntime

            self._command_runtime = CommandRuntime(store=self.scheduler.store)
        return self._command_runtime

    async def check_secrets(self, job: Job, team: str, role: str | None) -> None:
        """An editor's job may only use secrets bound to the hosts its URL names: raise
        :class:`SpecInvalid` at ``http`` for a secret without hosts, or whose hosts do not
        include the URL's (a URL whose host is itself a secret is judged at run time)."""
        from cronfleet.jobs.http import HttpJob
        from cronfleet.secrets import host_allowed, references

        handler = job.handler
        if role == "admin" or not isinstance(handler, HttpJob) or self.runtime is None:
            return
        notify = handler.notify
        if not references(handler.url, handler.body, handler.signing_secret,
                          *handler.headers.values(),
                          *(() if notify is None else (
                              notify.webhook, notify.slack,
                              None if notify.email is None else notify.email.password))):
            return  # no secret: nothing to judge (nor URLs to parse)
        # (field, where it is sent, the texts that may reference secrets)
        uses: list[tuple[str, str | None, list[str | None]]] = [
            ("http", _url_host(handler.url), [handler.url, handler.body,
                                               handler.signing_secret,
                                               *handler.headers.values()])]
        notify = handler.notify
        if notify is not None:
            uses += [("notify.webhook", _url_host(notify.webhook or ""), [notify.webhook]),
                     ("notify.slack", _url_host(notify.slack or ""), [notify.slack])]
            if notify.email is not None:
                uses.append(("notify.email", notify.email.host, [notify.email.password]))
        names = references(*(t for _, _, texts in uses for t in texts))
        vault = self.runtime.vault if names else None
        if vault is None:
            return
        bound = await vault.hosts(names, team)
        problems = []
        for field, host, texts in uses:
            for name in references(*texts):
                hosts = bound.get(name, ())
                if name not in bound:
                    problems.append(FieldProblem(field, f"${{secrets.{name}}}: no such secret "
                                                        f"in team {team!r} (an admin creates "
                                                        "it, with its hosts)"))
                elif hosts is None:
                    problems.append(FieldProblem(
                        field, f"${{secrets.{name}}} has no hosts: only admins' jobs and "
                               "config tasks may use it (an admin sets its hosts)"))
                elif host is None and field != "http":
                    problems.append(FieldProblem(
                        field, f"${{secrets.{name}}}: the destination must be a plain host "
                               "name in an editor's job"))
                elif host is not None and not host_allowed(host, hosts):
                    problems.append(FieldProblem(
                        "http.url" if field == "http" else field,
                        f"${{secrets.{name}}} may only be sent to {', '.join(hosts)}, not to "
                        f"{host}"))
        if problems:
            raise SpecInvalid(problems)

    async def create(self, job_id: str, spec: Mapping[str, Any], team: str,
                     by: str, role: str | None = "admin") -> Job | None:
        """Validate, store and apply a new job. Raises :class:`IdTaken` when the id is
        used (also by a config or code job of another team, present or past); returns
        ``None`` when it was stored but a job declared in code or config took the id
        meanwhile (in another process): the declared job wins."""
        if self._current(job_id) is not None:
            raise IdTaken(job_id)
        spec = _spec.canonical_spec(spec)
        job = self.validate(spec, team, role)
        await self.check_secrets(job, team, role)
        d = await self.api_store.create_job_def(job_id, team, pinned(spec, job), by, role)
        if d is None:
            raise IdTaken(job_id)
        return self.apply(d, job)

    async def create_many(self, items: Sequence[tuple[str, Mapping[str, Any]]], team: str,
                          by: str, role: str | None = "admin", *, dry_run: bool = False
                          ) -> list[tuple[JobDef, Job | None]]:
        """Validate every ``(id, spec)`` as :meth:`create` does, then store them all in
        one transaction and apply them: all or nothing. Raises :class:`BatchInvalid`
        naming every problem of every bad item (its spec, an id repeated in the batch or
        already taken) when any is bad; then nothing is stored. ``dry_run``: the same
        checks, including the store's, and nothing is stored or applied. Answers each
        definition stored (or that would be) with the job applied (``None``: a job
        declared in code or config took the id meanwhile, or a dry run)."""
        problems: list[tuple[int, FieldProblem]] = []
        first: dict[str, int] = {}
        specs: list[tuple[str, dict[str, Any]]] = []
        built: dict[str, Job] = {}
        for i, (job_id, raw) in enumerate(items):
            if job_id in first:
                problems.append((i, FieldProblem(
                    "id", f"job id {job_id!r} is already in this batch (item {first[job_id]})")))
                continue
            first[job_id] = i
            if self._current(job_id) is not None:
                problems.append((i, FieldProblem("id", str(IdTaken(job_id)))))
                continue
            spec = _spec.canonical_spec(raw)
            try:
                job = self.validate(spec, team, role)
                await self.check_secrets(job, team, role)
            except SpecInvalid as exc:
                problems += [(i, p) for p in exc.problems]
                spec = {}  # its id is still checked below
            except CommandJobsDisabled as exc:
                problems.append((i, FieldProblem("command", str(exc))))
                spec = {}
            else:
                spec = pinned(spec, job)
                built[job_id] = job
            specs.append((job_id, spec))
        # under the catalog's lock: the store's own announcement of this write must not
        # start a full reload (refresh) before the batch is applied and counted as seen
        async with self._lock:
            defs, taken = await self.api_store.create_job_defs(
                specs, team, by, role, dry_run=dry_run or bool(problems))
            problems += [(first[job_id], FieldProblem("id", str(IdTaken(job_id))))
                         for job_id in taken]
            if problems:
                raise BatchInvalid(sorted(problems, key=lambda p: p[0]))
            if dry_run or not defs:
                return [(d, None) for d in defs]
            adding: list[Job] = []
            made = [(d, self.apply(d, built[d.id], adding)) for d in defs]
            if adding:
                self.scheduler.add_job(*adding)
            log.info("%d jobs added from the catalog (one batch: %s ... %s)", len(adding),
                     defs[0].id, defs[-1].id)
            # the batch's versions follow each other: when this process had applied every
            # change before it, it has applied every change up to the batch's last one
            if self._cursor[0] == defs[0].version - 1:
                self._cursor = (defs[-1].version, defs[-1].id)
        return made

    async def update(self, job: Job, changes: Mapping[str, Any], team: str, by: str,
                     role: str | None = "admin") -> Job:
        """Apply ``changes`` (:func:`merge_changes`) to the stored spec, validate the
        result and store it if nobody changed it meanwhile (else :class:`ChangedMeanwhile`)."""
        d = await self.api_store.job_def(job.id)
        if d is None or d.deleted_at is not None:
            raise JobNotFound(job.id)
        spec = _spec.canonical_spec(merge_changes(d.spec, changes))
        if "schedule" in changes and "at" not in changes:
            spec.pop("at", None)  # a new schedule replaces a one-off's instant
        built = self.validate(spec, team, role)
        await self.check_secrets(built, team, role)
        spec = pinned(spec, built)
        new = await self.api_store.update_job_def(job.id, team, spec, by,
                                                  expect_version=d.version, role=role)
        if new is None:
            raise ChangedMeanwhile(job.id)
        return self.apply(new, built) or job

    async def delete(self, job_id: str, team: str, by: str) -> None:
        """Delete a stored job (a tombstone keeps its id with its team)."""
        deleted = await self.api_store.delete_job_def(job_id, team, by)
        tomb = await self.api_store.job_def(job_id)
        if not deleted:
            raise JobNotFound(job_id)
        if tomb is not None:
            self.apply(tomb)

    def _current(self, job_id: str) -> Job | None:
        """The scheduler's job with this id (without copying its whole job list, as
        ``scheduler.jobs`` does: this runs once per definition)."""
        try:
            return self.scheduler.get_job(job_id)
        except JobNotFound:
            return None

    def _apply(self, d: JobDef, built: Job | None = None,
               adding: list[Job] | None = None) -> Job | None:
        sched = self.scheduler
        existing = self._current(d.id)
        if self._versions.get(d.id, -1) >= d.version:
            return existing
        if existing is not None and d.id not in self._versions:
            if d.deleted_at is None:
                log.error("stored job %r ignored: a job declared in %s has this id",
                          d.id, existing.source)
            return None
        if not self._wanted(d.id):  # another instance's share
            if d.id in self._versions:
                self._unload(d.id)
            return built if d.deleted_at is None else None
        if d.deleted_at is not None:
            if d.id in self._versions:
                del self._versions[d.id]
                with contextlib.suppress(Exception):
                    sched.remove_job(d.id)
                log.info("job %s removed (deleted over the API)", d.id)
            return None
        try:
            job = built if built is not None else build_job(
                d.spec, team=d.team, runtime=self.runtime, saved_role=d.saved_role,
                allow_commands=self.allow_commands, command_runtime=self.command_runtime)
        except (SpecInvalid, CommandJobsDisabled) as exc:
            log.error("stored job %r ignored: %s", d.id, exc)
            return None
        if d.id in self._versions:
            sched.replace_job(job)
            log.info("job %s updated (version %d)", d.id, d.version)
        elif adding is not None:
            adding.append(job)
            log.debug("job %s added from the catalog", d.id)
        else:
            sched.add_job(job)
            (log.debug if self._loading else log.info)("job %s added from the catalog", d.id)
        self._versions[job.id] = d.version  # the job's own id string: one per job held
        return job


def _url_host(url: str) -> str | None:
    """The host a URL names, or None when it is (inside) a secret reference."""
    import httpx

    if "://" not in url:
        return None
    authority = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "${" in authority:
        return None
    try:
        return httpx.URL(url.split("?", 1)[0]).host or None
    except Exception:
        return None
