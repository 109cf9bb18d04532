"""The read model of a job and its runs: what the CLI and the REST API show.

One place composes the public store reads (``read_states``, ``last_runs``, ``list_runs``)
with each job's schedule: next fire times, effective override, live lease, last run, run
statistics, and the signature of a job that runs longer than its period. Both faces render
these views; nothing here writes. Next fire times are computed here only
(:func:`fire_times`), and a schedule with no future fire (``NoFireTimeError``) gives an
empty list -- "never" -- in every view.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Container,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronfleet.cron.duration import format_duration

if TYPE_CHECKING:
    from cronfleet.cron import AnySchedule
    from cronfleet.model import Job, JobState, RunRecord, RunStatus
    from cronfleet.store.base import RunCursor, RunFilter, Store
    from cronfleet.store.side import ApiStore, JobDef

__all__ = [
    "RECENT_RUNS",
    "SCAN_MAX",
    "WIDE_READS",
    "JobView",
    "fire_times",
    "job_view",
    "job_views",
    "jobs_by_key",
    "kept_runs",
    "last_runs",
    "lease_holders",
    "next_fires",
    "opened",
    "overrun_warning",
    "period_of",
    "run_stats",
    "running_now",
    "state_dict",
    "state_view",
]

# how many recent runs the too-long check looks at, and how many overlap skips in them
# make a pattern rather than a one-off
RECENT_RUNS = 20
SKIPS_FOR_WARNING = 2


@contextlib.asynccontextmanager
async def opened(store: Store) -> AsyncIterator[Store]:
    """The store, opened for the block and closed after it."""
    await store.open()
    try:
        yield store
    finally:
        await store.close()


# -- fire times ---------------------------------------------------------------------------


def fire_times(schedule: AnySchedule, after: datetime, n: int) -> list[datetime]:
    """Up to ``n`` fire times of ``schedule`` after ``after``: fewer (maybe none) when the
    schedule has no further fire (``CronExpr.next_n``, the runtime's rule too)."""
    return schedule.next_n(after, n)


def clock_change(t: datetime) -> timedelta | None:
    """How the clocks move on ``t``'s local day in its zone (``+1h`` forward in spring,
    ``-1h`` back in autumn), or None on a day without a change: the mark a fire time on a
    daylight-saving day carries in previews."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0, fold=0)
    start = day.utcoffset()
    end = (day + timedelta(hours=23, minutes=59, seconds=59)).utcoffset()
    if start is None or end is None or start == end:
        return None
    return end - start


def dst_marks(times: Sequence[datetime]) -> list[dict[str, str]]:
    """The fire times among ``times`` that fall on a day the clocks change, with the
    change (``"+1:00:00"``, ``"-1:00:00"``)."""
    out = []
    for t in times:
        shift = clock_change(t)
        if shift is not None:
            sign = "+" if shift > timedelta(0) else "-"
            out.append({"time": t.isoformat(), "shift": f"{sign}{abs(shift)}"})
    return out


def next_fires(job: Job, after: datetime, n: int) -> list[datetime]:
    """Up to ``n`` fire times of ``job`` after ``after`` (see :func:`fire_times`)."""
    return fire_times(job.schedule, after, n)


def period_of(job: Job, now: datetime) -> float | None:
    """Seconds between slots: the interval, or the shortest gap among the next few fires
    of a cron schedule."""
    if job.period:
        return job.period
    times = next_fires(job, now, 5)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    return min(gaps) if gaps else None


# -- state rows ---------------------------------------------------------------------------


def _iso(d: datetime | None) -> str | None:
    return None if d is None else d.isoformat()


def state_dict(state: JobState | None, now: datetime) -> dict[str, Any]:
    """The override and lease of a job state row, JSON-ready."""
    if state is None:
        return {"override": None, "lease": None}
    override = None
    if state.enabled_override is not None:
        expired = state.override_until is not None and state.override_until <= now
        override = {
            "enabled": state.enabled_override,
            "by": state.override_by,
            "at": _iso(state.override_at),
            "note": state.override_note,
            "until": _iso(state.override_until),
            "expired": expired,
        }
    lease = None
    if state.lease_live(now):
        lease = {"holder": state.lease_holder, "until": _iso(state.lease_until),
                 "token": state.lease_token}
    return {"override": override, "lease": lease}


def state_view(job: Job, state: JobState, now: datetime) -> dict[str, Any]:
    """A job's state after a pause / resume / clear: what the CLI's ``--json`` and the
    API's ``PUT /api/admin/cron/{id}`` answer."""
    return {"job_id": job.id, "declared_enabled": job.enabled,
            "enabled": state.effective_enabled(job.enabled, now), **state_dict(state, now)}


def _describe(job: Job) -> str:
    try:
        return job.schedule.describe()
    except Exception:  # a description never breaks a view
        return job.schedule.expr


def _last_run(run: RunRecord | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "id": run.id,
        "status": run.status.value,
        "reason": run.reason,
        "slot": run.slot.isoformat(),
        "finished_at": _iso(run.finished_at),
        "error": run.error,
    }


def _override_active(state: JobState | None, now: datetime) -> bool:
    return (
        state is not None
        and state.enabled_override is not None
        and (state.override_until is None or state.override_until > now)
    )


def _paused(state: JobState | None, now: datetime) -> bool:
    return _override_active(state, now) and state is not None and \
        state.enabled_override is False


# -- one job ------------------------------------------------------------------------------


@dataclass
class JobView:
    """One job as an operator sees it: its declaration, its state row (override, lease),
    its newest run and its next fire time (``None``: it never fires again)."""

    job: Job
    state: JobState | None
    last: RunRecord | None
    next_fire: datetime | None

    def enabled(self, now: datetime) -> bool:
        if self.state is None:
            return self.job.enabled
        return self.state.effective_enabled(self.job.enabled, now)

    def lease_holder(self, now: datetime) -> str | None:
        if self.state is not None and self.state.lease_live(now):
            return self.state.lease_holder
        return None

    def override_active(self, now: datetime) -> bool:
        return _override_active(self.state, now)

    def done(self, now: datetime) -> bool:
        """A one-off past its instant, or a schedule past its ``end``: nothing will ever
        fire again by construction (shown "done" rather than "never")."""
        done = getattr(self.job.schedule, "done", None)
        return self.next_fire is None and done is not None and bool(done(now))

    def paused(self, now: datetime) -> bool:
        """Paused by an override that has not expired (a declared ``enabled = false`` is
        not a pause)."""
        return _paused(self.state, now)

    def next_run(self, now: datetime) -> datetime | None:
        """The next slot that will run: the next fire time while the job is enabled; for a
        pause with an ``until``, the first fire time at or after it (a slot at ``until``
        runs: the pause has ended); ``None`` while paused or disabled for good."""
        if self.enabled(now):
            return self.next_fire
        s = self.state
        if s is not None and self.paused(now) and s.override_until is not None \
                and self.job.enabled:
            fires = next_fires(self.job, s.override_until - timedelta(microseconds=1), 1)
            return fires[0] if fires else None
        return None

    def to_dict(self, now: datetime) -> dict[str, Any]:
        job = self.job
        return {
            "id": job.id,
            "source": job.source,
            "schedule": job.schedule.expr,
            "schedule_text": job.schedule_text,
            "timezone": str(job.schedule.tz),
            "description": job.description,
            "when": _describe(job),
            "config": dict(job.config),
            "declared_enabled": job.enabled,
            "enabled": self.enabled(now),
            "paused": self.paused(now),
            "next_run": _iso(self.next_run(now)),
            "next_fire": _iso(self.next_fire),
            "last_run": _last_run(self.last),
            **state_dict(self.state, now),
        }


def job_view(job: Job, state: JobState | None, last: RunRecord | None,
             now: datetime) -> JobView:
    """The view of ``job`` at ``now``, from its state row and newest run."""
    fires = next_fires(job, now, 1)
    return JobView(job, state, last, fires[0] if fires else None)


async def last_runs(store: Store, job_ids: Sequence[str]) -> Mapping[str, RunRecord]:
    """The newest run of each job that has one, in one store call."""
    if not job_ids:
        return {}
    return await store.last_runs(list(job_ids))


async def job_views(store: Store, jobs: Sequence[Job], now: datetime,
                    states: Mapping[str, JobState] | None = None) -> list[JobView]:
    """Every job's view: one read of the state rows (unless given), one of the last runs."""
    ids = [j.id for j in jobs]
    if states is None:
        states = await store.read_states(ids) if ids else {}
    last = await last_runs(store, ids)
    return [job_view(job, states.get(job.id), last.get(job.id), now) for job in jobs]


SCAN_MAX = 2000
"""Jobs one filtered page (``text``, ``paused``, ``status``) looks at, at most: past it the
page ends with what matched and a cursor to go on from (:func:`jobs_by_key`)."""
CHUNK = 200  # candidates a filtered page takes at a time (one state read each)


@dataclass
class _Candidate:
    id: str
    description: str
    job: Job | None  # declared (or built)
    stored: JobDef | None  # a definition, built when it is shown


async def jobs_by_key(
    store: Store,
    declared: Sequence[Job],
    api_store: ApiStore | None,
    build: Callable[[JobDef], Job | None],
    now: datetime,
    *,
    team: str,
    limit: int,
    after: str = "",
    prefix: str = "",
    text: str | None = None,
    paused: bool | None = None,
    statuses: Collection[RunStatus] | None = None,
    where: Callable[[Job], bool] | None = None,
    scan: int = SCAN_MAX,
) -> tuple[list[JobView], str | None]:
    """One keyset page of ``team``'s jobs in id order, after the id ``after``: the
    ``declared`` jobs (code and config, in memory) merged with the stored definitions of
    ``api_store``, read in ``(team, id)`` pages (``ApiStore.job_defs_page``) and built
    (``build``) only when shown; a declared job wins an id a definition also has. Filters:
    ``prefix`` (ids starting with it: the index's range), ``text`` (in the id or
    description, any case), ``paused``, ``statuses`` of the last run (the state rows and
    last runs of the candidates, :data:`CHUNK` at a time), ``where(job)`` (a stored job
    is then built to be judged). A filtered page looks at no more
    than ``scan`` jobs: it may end with fewer than ``limit`` and a cursor. Answers the
    views and the cursor of the next page (None: no more)."""
    decl = sorted((j for j in declared if j.team == team and j.id > after
                   and j.id.startswith(prefix)), key=lambda j: j.id)
    taken = {j.id for j in declared}
    needle = text.lower() if text else None
    status = frozenset(statuses) if statuses else None
    filtered = needle is not None or paused is not None or status is not None \
        or where is not None
    chunk = max(limit + 1, CHUNK) if filtered else limit + 1
    di = 0
    buf: list[JobDef] = []
    more_stored = api_store is not None
    stored_after = after
    last_seen = after
    scanned = 0
    matched: list[_Candidate] = []
    views_of: dict[str, tuple[JobState | None, RunRecord | None]] = {}
    while True:
        cands: list[_Candidate] = []
        exhausted = False
        while len(cands) < chunk and not (filtered and scanned >= scan):
            if not buf and more_stored and api_store is not None:
                buf = await api_store.job_defs_page(team, after=stored_after, prefix=prefix,
                                                    limit=chunk)
                buf.reverse()  # popped from the end
                more_stored = len(buf) == chunk
                if buf:
                    stored_after = buf[0].id
            d = decl[di] if di < len(decl) else None
            sd = buf[-1] if buf else None
            if d is None and sd is None:
                exhausted = True
                break
            scanned += 1
            c: _Candidate
            if sd is None or (d is not None and d.id <= sd.id):
                di += 1
                if sd is not None and sd.id == d.id:  # type: ignore[union-attr]
                    buf.pop()
                assert d is not None
                c = _Candidate(d.id, d.description, d, None)
            else:
                buf.pop()
                if sd.id in taken:
                    last_seen = sd.id
                    continue
                c = _Candidate(sd.id, str(sd.spec.get("description") or ""), None, sd)
            last_seen = c.id
            if needle is not None and needle not in c.id.lower() \
                    and needle not in c.description.lower():
                continue
            if where is not None:
                if c.job is None and c.stored is not None:
                    c.job = build(c.stored)
                if c.job is None or not where(c.job):
                    continue
            cands.append(c)
        if cands and (paused is not None or status is not None):
            ids = [c.id for c in cands]
            states = await store.read_states(ids)
            lasts = await last_runs(store, ids) if status is not None else {}
            keep = []
            for c in cands:
                st, last = states.get(c.id), lasts.get(c.id)
                if paused is not None and _paused(st, now) != paused:
                    continue
                if status is not None and (last is None or last.status not in status):
                    continue
                views_of[c.id] = (st, last)
                keep.append(c)
            cands = keep
        for c in cands:
            if c.job is None and c.stored is not None:
                c.job = build(c.stored)
            if c.job is not None:
                matched.append(c)
            if len(matched) > limit:
                break
        if len(matched) > limit:
            matched = matched[:limit]
            nxt: str | None = matched[-1].id
            break
        if exhausted:
            nxt = None
            break
        if filtered and scanned >= scan:
            nxt = last_seen  # looked at enough: go on from there
            break
    jobs = [c.job for c in matched if c.job is not None]
    if views_of:
        views = [job_view(j, *views_of[j.id], now) for j in jobs]
        missing = [v for v in views if v.last is None]
        if missing and status is None:  # paused only: the last runs of the page
            got = await last_runs(store, [v.job.id for v in missing])
            for v in missing:
                v.last = got.get(v.job.id)
    else:
        views = await job_views(store, jobs, now)
    return views, nxt


# -- runs ---------------------------------------------------------------------------------
# (cronfleet.model is imported where it is used: `cronfleet next` needs fire_times only
# and starts faster without it)


async def running_now(store: Store, job_ids: frozenset[str] | None = None,
                      limit: int = 200) -> list[dict[str, Any]]:
    """What runs right now, and where: each running run (newest first) with its job,
    instance, start and lease expiry (the job's lease while this run's token holds it;
    ``None`` for a node-local run, which takes no lease). Two store calls: one page of
    ``find_runs`` and one ``read_states`` of the jobs on it."""
    from cronfleet.model import RunStatus
    from cronfleet.store.base import RunFilter

    page = await store.find_runs(RunFilter(status=RunStatus.RUNNING, job_ids=job_ids),
                                 limit=limit)
    ids = sorted({r.job_id for r in page.runs})
    states = await store.read_states(ids) if ids else {}
    out = []
    for r in page.runs:
        st = states.get(r.job_id)
        held = st is not None and r.fencing_token is not None and \
            st.lease_token == r.fencing_token
        out.append({
            "run_id": r.id, "job_id": r.job_id, "instance_id": r.instance_id,
            "slot": _iso(r.slot), "started_at": _iso(r.started_at),
            "lease_until": _iso(st.lease_until) if held and st is not None else None,
            "deadline": _iso(r.deadline), "attempt": r.attempt,
            "triggered_by": r.triggered_by.value,
        })
    return out


WIDE_READS = 20
"""Store reads one page of :func:`kept_runs` may take."""


async def kept_runs(store: Store, where: RunFilter,
                    keep: Callable[[Sequence[str]], Awaitable[Container[str]]], *,
                    limit: int, after: RunCursor | None
                    ) -> tuple[list[RunRecord], RunCursor | None]:
    """Up to ``limit`` runs matching ``where``, newest first by ``(slot, id)``, of the jobs
    ``keep`` keeps (given the job ids of one page of the store's runs, those to keep): how
    the runs of a set of jobs too large to name in the statement are paged (``where``
    names no job; the API's and the dashboard's runs of a large team).

    Reads pages of ``2 * limit`` runs until one more than a page is kept or
    :data:`WIDE_READS` reads. The cursor of the next page: after the page's last run when
    a kept run follows it; where the reads stopped when the page could not be filled
    within them (the page then holds fewer than ``limit`` runs); None at the end, as
    ``Store.find_runs`` says."""
    from cronfleet.store.base import RunCursor

    runs: list[RunRecord] = []
    for _ in range(WIDE_READS):
        page = await store.find_runs(where, limit=limit * 2, after=after)
        kept = await keep([r.job_id for r in page.runs])
        for r in page.runs:
            if r.job_id in kept:
                runs.append(r)
                if len(runs) > limit:  # one more than a page: there is a next page
                    return runs[:limit], RunCursor.after(runs[limit - 1])
        if page.next_cursor is None:
            return runs, None
        after = page.next_cursor
    return runs, after


def lease_holders(running: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Job id -> the instance whose running run holds the job's lease, from
    :func:`running_now` rows: the "lease holder" operators are shown. A lease with no run
    under it (taken ahead of a slot by an early claim, or left by a process that died, until
    a survivor breaks it) is not a job running, and is not shown as one."""
    return {r["job_id"]: r["instance_id"] for r in running
            if r.get("lease_until") is not None and r.get("instance_id")}


def run_stats(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Counts by status, success rate, durations and lateness of ``runs``."""
    from cronfleet.model import RunStatus

    # a cancelled run is an operator's decision: not counted for or against success
    ended_statuses = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT,
                      RunStatus.INTERRUPTED)
    by_status: dict[str, int] = {}
    for r in runs:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    ended = [r for r in runs if r.status in ended_statuses]
    ok = sum(1 for r in ended if r.status is RunStatus.SUCCEEDED)
    durations = [d for r in ended if (d := r.duration) is not None]
    lateness = [v for r in runs if (v := r.lateness) is not None]
    return {
        "runs": len(runs), "by_status": by_status,
        "success_rate": round(ok / len(ended), 4) if ended else None,
        "avg_duration": round(sum(durations) / len(durations), 6) if durations else None,
        "max_duration": max(durations) if durations else None,
        "avg_lateness": round(sum(lateness) / len(lateness), 6) if lateness else None,
    }


def overrun_warning(job: Job, runs: Sequence[RunRecord], now: datetime) -> str | None:
    """A warning when recent runs last longer than the job's period.

    The signature is a series of ``already_executing`` skips (a slot came due while the
    previous run still held the lease), or a run that took longer than the period.
    """
    from cronfleet.model import RunStatus, SkipReason

    period = period_of(job, now)
    if not period:
        return None
    skips = sum(  # a manual trigger refused while a run holds the lease says nothing
        1 for r in runs
        if r.status is RunStatus.SKIPPED and r.reason == SkipReason.ALREADY_EXECUTING.value
        and not r.manual
    )
    durations = [d for r in runs if (d := r.duration) is not None]
    longest = max(durations, default=0.0)
    if skips < SKIPS_FOR_WARNING and longest <= period:
        return None
    facts = []
    if skips:
        facts.append(f"{skips} of its last {len(runs)} runs were slots skipped because the "
                     "previous run still held the lease (already_executing)")
    if longest:
        facts.append(f"runs took up to {_secs(longest)}")
    return (
        f"job {job.id!r} runs longer than its period of {_secs(period)}: "
        + "; ".join(facts)
        + ". Lengthen the period, speed the job up, or set overlap = \"queue_one\" if "
        "every slot must run."
    )


def _secs(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds != int(seconds) else f"{int(seconds)}s"
    return format_duration(timedelta(seconds=round(seconds)))
