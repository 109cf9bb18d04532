"""What the dashboard's pages show, computed from the scheduler's registry and the store:
the jobs page (search, filters, sorting and paging over every job of a team), the slot
cells of a job (its timeline and the 30-slot strip of the jobs page), duration
percentiles, the next fires with their marks, the runs listing and the overview counts.

Nothing here writes; nothing here renders HTML. The job list is filtered in memory (the
registry is in memory anyway) and the store is read only for the rows of the page shown,
except for the filters that need every job's state (paused: the rows with an override,
one partial-index read; last outcome: the newest runs, one statement).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from cronfleet.jobs.http import HttpJob
from cronfleet.model import Job, JobState, RunRecord, RunStatus, SkipReason
from cronfleet.spec import ID_CHARS
from cronfleet.store.base import (
    Instance,
    InstanceStore,
    RunCursor,
    RunFilter,
    SlotRun,
    SlotRunPage,
    SlotRunStore,
    Store,
    newest_of_note,
    slot_runs_of,
)
from cronfleet.views import dst_marks, fire_times, job_view, kept_runs

__all__ = [
    "CELL_CODES",
    "CELL_STATES",
    "FAILED_STATUSES",
    "SORTS",
    "STRIP",
    "WINDOWS",
    "Cell",
    "JobRow",
    "JobsQuery",
    "SlotCache",
    "Timeline",
    "activity",
    "duration_percentiles",
    "find_runs",
    "fleet",
    "job_kind",
    "job_status",
    "jobs_page",
    "last_slot_runs",
    "next_fire_marks",
    "overview",
    "slot_cells",
    "timeline",
]

STRIP = 30  # slots in a job row's strip
WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
MAX_CELLS = 10_000  # slots shown in one timeline (the newest ones when there are more)
FAILED_STATUSES = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED)
SORTS = ("id", "-id", "last", "next")
PAGE_SIZES = (25, 50, 100)


def job_kind(job: Job) -> str:
    """``http`` for an HTTP job, ``command`` for a command job, ``handler`` for a Python
    handler."""
    from cronfleet.jobs.command import CommandJob

    if isinstance(job.handler, HttpJob):
        return "http"
    return "command" if isinstance(job.handler, CommandJob) else "handler"


def is_cut_mark(line: object) -> bool:
    """The line a command job's output log puts where it dropped output."""
    from cronfleet.jobs.command import CUT_MARK

    return isinstance(line, str) and line.startswith(CUT_MARK)


# -- slot cells -----------------------------------------------------------------------


# What a slot cell (timeline, strip, heat map) can show, with what it means: the one
# list the templates, the stylesheet and the legend follow. Every run status and every
# skip reason lands on one of them (``cell_state``; a test checks it covers them all).
CELL_STATES: dict[str, str] = {
    "succeeded": "ran and succeeded",
    "failed": "failed or timed out",
    "interrupted": "interrupted (its process was lost)",
    "cancelled": "cancelled by an operator or replaced",
    "missed": "missed (past its catch-up window)",
    "paused": "skipped: the job was paused or disabled",
    "skipped": "skipped for another reason (lease held, store away, superseded)",
    "running": "running",
    "pending": "claimed, waiting to start",
    "none": "no run recorded for this slot",
}
# each state's 2-letter code: the class of a timeline's or a heat map's cell (10,000 of
# them on a page: 16 bytes a cell, ``<i class=fa></i>``)
CELL_CODES: dict[str, str] = {st: st[:2] for st in CELL_STATES}
# worst first: a heat map cell holding several slots shows the worst of them
SEVERITY = ("failed", "interrupted", "missed", "cancelled", "running", "pending", "skipped",
            "paused", "succeeded", "none")
_VALUE = {st: st.value for st in RunStatus}  # Enum.value is a slow descriptor
_STATE = {**_VALUE, RunStatus.TIMED_OUT: "failed"}
_SKIP_STATE = {SkipReason.PAUSED.value: "paused", SkipReason.DISABLED.value: "paused",
               SkipReason.MISSED.value: "missed"}


@dataclass(frozen=True, slots=True)
class Cell:
    """One slot as the ledger tells it: ``state`` is the colour, a key of
    :data:`CELL_STATES` (``none``: no row for the slot)."""

    slot: datetime
    state: str
    run: RunRecord | SlotRun | None  # a timeline's cell holds the narrow row
    at: float = 0.0  # the slot in epoch seconds

    @property
    def label(self) -> str:
        run = self.run
        if run is None:
            return "no run recorded for this slot"
        text = _VALUE[run.status]
        if run.reason:
            text += f" ({run.reason})"
        if isinstance(run, RunRecord):
            if run.started_at is not None and run.finished_at is not None:
                text += f" in {(run.finished_at - run.started_at).total_seconds():.3g}s"
            if run.error:
                text += f": {run.error[:120]}"
        return text


def cell_state(run: RunRecord | SlotRun | None) -> str:
    if run is None:
        return "none"
    if run.status is RunStatus.SKIPPED:
        return _SKIP_STATE.get(run.reason or "", "skipped")
    return _STATE[run.status]


def slot_cells(slots: Sequence[datetime], runs: Iterable[RunRecord],
               stamps: Sequence[float] | None = None) -> list[Cell]:
    """A cell per slot, from the scheduled (not manual) run of that slot; a slot with
    several rows (a recovery after an interruption) shows the newest one. ``stamps``:
    the slots' epoch seconds when known (matching is by them: hashing an aware datetime
    asks its zone for the offset every time, ~3x slower)."""
    by_slot: dict[float, RunRecord] = {}
    get = by_slot.get
    for r in runs:
        if r.manual:
            continue
        key = r.slot.timestamp()
        old = get(key)
        if old is None or (r.id or 0) > (old.id or 0):
            by_slot[key] = r
    if stamps is None:
        stamps = [s.timestamp() for s in slots]
    state = cell_state
    return [Cell(s, state(run := get(at)), run, at) for s, at in zip(slots, stamps,
                                                                       strict=True)]


def last_slots(job: Job, now: datetime, n: int) -> list[datetime]:
    """The ``n`` newest slots of ``job`` at or before ``now``, oldest first."""
    out: list[datetime] = []
    t = now + timedelta(microseconds=1)
    for _ in range(n):
        try:
            t = job.schedule.prev(t)
        except Exception:  # no earlier fire (a one-off, a start bound)
            break
        out.append(t)
    out.reverse()
    return out


_OPEN = frozenset(st for st in RunStatus if not st.finished)


@dataclass
class _Known:
    """What the run cache holds for one job: its runs as :class:`SlotRun` rows (the
    store's narrow read: no times, result, logs or params)."""

    runs: dict[int, SlotRun] = field(default_factory=dict)  # by id
    by_slot: dict[float, SlotRun] = field(default_factory=dict)  # a slot's newest
    # scheduled row, by the slot's epoch seconds
    open: set[int] = field(default_factory=set)  # ids of runs not finished
    bottom: bool = False  # the store has no run older than the oldest held

    def add(self, r: SlotRun) -> None:
        rid = r.id
        self.runs[rid] = r
        if r.status in _OPEN:
            self.open.add(rid)
        elif self.open:
            self.open.discard(rid)
        if not r.manual:
            at = r.at
            old = self.by_slot.get(at)
            if old is None or old.id <= rid:
                self.by_slot[at] = r

    def trim(self, cutoff: float) -> None:
        """Forget the runs whose slot is before ``cutoff`` (epoch seconds)."""
        gone = [i for i, r in self.runs.items() if r.at < cutoff]
        if not gone:
            return
        for i in gone:
            r = self.runs.pop(i)
            self.open.discard(i)
            if self.by_slot.get(r.at) is r:
                del self.by_slot[r.at]
        self.bottom = False


class RunCache:
    """The runs of the jobs whose timelines were looked at lately, so that a timeline's
    refresh every 2 s reads only the runs that are new or were still going.

    A finished run never changes, so it is read once; each read pages newest-first until
    it reaches runs it knows finished, and below the oldest run it knew unfinished. Runs
    the retention deleted stay until their slot leaves every window (they were real).
    Each job's runs are also kept by slot (its newest scheduled row), updated as runs
    arrive, so a refresh matches 10,000 slots without going over 10,000 runs again.
    Per process, for at most ``size`` jobs (least recently used leaves)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.jobs: dict[str, _Known] = {}

    async def by_slot(self, store: Store, job_id: str, oldest: datetime
                      ) -> dict[float, SlotRun]:
        """The job's runs from ``oldest`` on (at least), by slot epoch seconds: a slot's
        newest scheduled (not manual) row. The mapping may hold older slots too."""
        known = self.jobs.pop(job_id, None) or _Known()
        low = oldest.timestamp()
        read = _slot_reader(store)
        floor = min(known.open) if known.open else None
        before: int | None = None
        size = 100 if known.runs else PAGE  # a refresh usually finds a few new runs
        while True:
            page = await read(job_id, limit=size, before_id=before)
            stop = False
            for r in page:
                old = known.runs.get(r.id)
                known.add(r)
                if old is not None and old.status.finished and (floor is None or r.id < floor):
                    stop = True
            last = page[-1] if page else None
            if stop or len(page) < size or last is None:
                if not stop and len(page) < size:
                    known.bottom = True  # read down to the job's first run
                break
            if last.at < low:  # past the window: older runs are read when asked
                break
            before = last.id
            size = PAGE
        # reach back to the window's start if the cache did not yet
        lowest = min(known.runs, default=None)
        while not known.bottom and lowest is not None and known.runs[lowest].at >= low:
            page = await read(job_id, limit=PAGE, before_id=lowest)
            for r in page:
                known.add(r)
            if len(page) < PAGE:
                known.bottom = True  # nothing older: later runs come from the top
                break
            lowest = min(known.runs)
        longest = max(WINDOWS.values()).total_seconds()
        if lowest is not None and known.runs[lowest].at < low - longest:
            known.trim(low - longest)
        self.jobs[job_id] = known
        while len(self.jobs) > self.size:
            del self.jobs[next(iter(self.jobs))]
        return known.by_slot

    async def runs(self, store: Store, job_id: str, oldest: datetime) -> list[SlotRun]:
        """The job's runs whose slot is at or after ``oldest``."""
        await self.by_slot(store, job_id, oldest)
        low = oldest.timestamp()
        return [r for r in self.jobs[job_id].runs.values() if r.at >= low]


def _slot_reader(store: Store) -> Callable[..., Awaitable[list[SlotRun]]]:
    """The store's narrow read, or its history narrowed here (a store of another
    author, without :class:`SlotRunStore`)."""
    if isinstance(store, SlotRunStore):
        return store.slot_runs

    async def whole_rows(job_id: str, *, limit: int, before_id: int | None = None
                         ) -> list[SlotRun]:
        return slot_runs_of(await store.list_runs(job_id, limit=limit, before_id=before_id))

    return whole_rows


async def last_slot_runs(store: Store, ids: Sequence[str], *, since: float | None = None,
                         statuses: Collection[RunStatus] = ()) -> dict[str, SlotRun]:
    """Each job's newest run as a :class:`SlotRun` (the store's narrow read, or its
    ``last_runs`` narrowed here for a store of another author); with ``since``, only
    those at or after it or of one of ``statuses`` (:meth:`SlotRunStore.last_slot_runs`)."""
    if not ids:
        return {}
    if isinstance(store, SlotRunStore):
        return await store.last_slot_runs(ids, since=since, statuses=statuses)
    rows = {j: s for j, r in (await store.last_runs(ids)).items() for s in slot_runs_of([r])}
    return newest_of_note(rows, since, statuses)


PAGE = 2000
RUNS = RunCache()


class SlotCache:
    """The slots of the jobs whose timelines were looked at lately: a refresh computes
    only the slots due since the last one (a 7-day window of a job firing every minute
    is 10,000 fire times; recomputing them took ~20 ms a view).

    Keyed by job id, schedule text and zone (an edited schedule starts afresh); slots
    older than the longest window are dropped. ``slots(job, start, end)`` is exactly
    ``list(job.schedule.between(start, end))``."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        # key -> (lo, hi, slots, their epoch seconds): every fire time t with
        # lo < t <= hi, in order
        self.jobs: dict[tuple[str, str, str],
                        tuple[datetime, datetime, list[datetime], list[float]]] = {}

    def slots(self, job: Job, start: datetime, end: datetime
              ) -> tuple[list[datetime], list[float]]:
        """The fire times ``start < t <= end`` and their epoch seconds."""
        key = (job.id, job.schedule.expr, str(job.schedule.tz))
        got = self.jobs.pop(key, None)
        if got is None or got[0] > start or got[1] > end:
            lo, hi = start, end
            known = list(job.schedule.between(start, end))
            stamps = [t.timestamp() for t in known]
        else:
            lo, hi, known, stamps = got
            if end > hi:
                more = list(job.schedule.between(hi, end))
                known.extend(more)
                stamps.extend(t.timestamp() for t in more)
                hi = end
            floor = end - max(WINDOWS.values())
            if floor > lo:  # keep at most the longest window
                k = bisect_right(stamps, floor.timestamp())
                known, stamps = known[k:], stamps[k:]
                lo = floor
        self.jobs[key] = (lo, hi, known, stamps)
        while len(self.jobs) > self.size:
            del self.jobs[next(iter(self.jobs))]
        k = bisect_right(stamps, start.timestamp())
        return known[k:], stamps[k:]


SLOTS = SlotCache()


class Timeline(Sequence[Cell]):
    """A timeline's cells, kept as parallel lists (a state, the slot's epoch seconds,
    the run id or 0) so that a page of 10,000 slots is written without building 10,000
    objects; indexing gives a :class:`Cell`."""

    __slots__ = ("runs", "slots", "stamps", "states")

    def __init__(self, slots: list[datetime], stamps: list[float],
                 runs: Sequence[RunRecord | SlotRun | None]) -> None:
        self.slots = slots
        self.stamps = stamps
        self.runs = runs
        state = cell_state
        self.states = [state(r) for r in runs]

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return Cell(self.slots[i], self.states[i], self.runs[i], self.stamps[i])

    @property
    def run_ids(self) -> list[int]:
        return [0 if r is None or r.id is None else r.id for r in self.runs]


async def timeline(store: Store, job: Job, now: datetime, window: str,
                   since: datetime | None = None, cache: RunCache | None = RUNS,
                   slot_cache: SlotCache | None = SLOTS) -> tuple[Timeline, bool]:
    """The slot cells of ``job`` over ``window`` (a key of WINDOWS) up to ``now``, from
    ``since`` at the earliest (the job's state row's creation: no slot was due before),
    and whether the window held more than MAX_CELLS slots (the newest are shown)."""
    start = now - WINDOWS[window]
    if since is not None and since > start:
        start = since
    cut = False
    if slot_cache is not None:
        slots, stamps = slot_cache.slots(job, start, now)
    else:
        slots = list(job.schedule.between(start, now))
        stamps = [t.timestamp() for t in slots]
    if len(slots) > MAX_CELLS:
        slots, stamps = slots[-MAX_CELLS:], stamps[-MAX_CELLS:]
        cut = True
    by_slot: Mapping[float, RunRecord | SlotRun] = {}
    if slots:
        if cache is not None:
            by_slot = await cache.by_slot(store, job.id, slots[0])
        else:
            runs: list[RunRecord] = []
            before: int | None = None
            while True:  # newest first, until the page reaches the oldest slot shown
                page = await store.list_runs(job.id, limit=PAGE, before_id=before)
                runs.extend(page)
                if len(page) < PAGE or page[-1].slot < slots[0] or page[-1].id is None:
                    break
                before = page[-1].id
            by_slot = {c.at: c.run for c in slot_cells(slots, runs, stamps)
                       if c.run is not None}
    get = by_slot.get
    return Timeline(slots, stamps, [get(at) for at in stamps]), cut


def duration_percentiles(runs: Sequence[RunRecord]) -> dict[str, float | None]:
    """p50 / p90 / p99 and max of the ended runs' durations (nearest-rank)."""
    ds = sorted(d for r in runs if (d := r.duration) is not None)
    if not ds:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}

    def rank(p: float) -> float:
        return ds[max(0, math.ceil(p / 100 * len(ds)) - 1)]

    return {"n": len(ds), "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": ds[-1]}


def daily_percentiles(runs: Sequence[RunRecord], tz: Any) -> list[dict[str, Any]]:
    """Duration percentiles per local day, newest day first."""
    days: dict[str, list[RunRecord]] = {}
    for r in runs:
        if r.duration is not None:
            days.setdefault(r.slot.astimezone(tz).date().isoformat(), []).append(r)
    return [{"day": d, **duration_percentiles(rs)} for d, rs in
            sorted(days.items(), reverse=True)]


def next_fire_marks(job: Job, now: datetime, n: int = 10) -> list[dict[str, Any]]:
    """The next ``n`` fires, each with the clock change of its day (``+1:00:00``) and
    the instants an exclusion removes before it (composed schedules)."""
    times = fire_times(job.schedule, now, n)
    shifts = {m["time"]: m["shift"] for m in dst_marks(times)}
    excluded: list[datetime] = []
    between = getattr(job.schedule, "excluded_between", None)
    if times and between is not None:
        excluded = list(between(now, times[-1]))
    out: list[tuple[datetime, dict[str, Any]]] = [
        (t, {"time": t, "dst": shifts.get(t.isoformat()), "excluded": False}) for t in times]
    out.extend((t, {"time": t, "dst": None, "excluded": True}) for t in excluded)
    out.sort(key=lambda pair: pair[0])
    return [d for _, d in out]


# -- the jobs page --------------------------------------------------------------------


@dataclass
class JobsQuery:
    """The jobs page's query: text (id, description or schedule), filters, sort, page."""

    q: str = ""
    status: str = ""  # last outcome: a RunStatus value
    paused: str = ""  # "yes" / "no"
    failing: bool = False
    kind: str = ""  # handler / http / command
    source: str = ""
    sort: str = "id"
    page: int = 1
    size: int = 50
    after: str = ""  # a large team's list: the id the page starts after (keyset)

    @classmethod
    def from_params(cls, p: Mapping[str, str]) -> JobsQuery:
        def num(key: str, default: int) -> int:
            try:
                return max(1, int(p.get(key, default)))
            except ValueError:
                return default

        size = num("size", 50)
        return cls(
            q=p.get("q", "").strip()[:200],
            status=p.get("status", "") if p.get("status", "") in {s.value for s in RunStatus}
            else "",
            paused=p.get("paused", "") if p.get("paused") in ("yes", "no") else "",
            failing=p.get("failing") in ("1", "on", "yes", "true"),
            kind=p.get("kind", "") if p.get("kind") in ("handler", "http", "command") else "",
            source=p.get("source", "")[:100],
            sort=p.get("sort", "id") if p.get("sort") in SORTS else "id",
            page=num("page", 1),
            size=size if size in PAGE_SIZES else 50,
            after=after if ID_CHARS.fullmatch(after := p.get("after", "")[:200]) else "",
        )

    def params(self, **changes: Any) -> dict[str, Any]:
        d = {"q": self.q, "status": self.status, "paused": self.paused,
             "failing": "1" if self.failing else "", "kind": self.kind,
             "source": self.source, "sort": self.sort, "page": self.page, "size": self.size,
             "after": self.after}
        d.update(changes)
        return {k: v for k, v in d.items() if v not in ("", None) and not
                (k == "page" and v == 1) and not (k == "sort" and v == "id") and not
                (k == "size" and v == 50)}


_BY_ID = attrgetter("id")
_SOURCES: dict[tuple[str, int], list[str]] = {}


@dataclass
class JobRow:
    job: Job
    state: JobState | None
    last: RunRecord | None
    next_fire: datetime | None
    paused: bool
    kind: str
    strip: list[Cell] = field(default_factory=list)
    status: str = "active"  # job_status: paused, disabled, failing, active
    next_run: datetime | None = None  # the next slot that will run (None while paused)


@dataclass
class JobsPage:
    """One page of the jobs list. Numbered pages (``pages``) for a small team; for a large
    one (``after`` set or ``keyset``) pages by id with ``next_after``, the next page's
    cursor, and ``count``, the team's total as text (``~`` marks an estimate)."""

    rows: list[JobRow]
    total: int
    pages: int
    sources: list[str]
    keyset: bool = False
    next_after: str | None = None
    count: str = ""


async def jobs_page(store: Store, jobs: Iterable[Job], team: str, query: JobsQuery,
                    now: datetime, *, next_of: Any = None) -> JobsPage:
    """One page of ``team``'s jobs matching ``query``. ``next_of(job_id)``: the job's
    queued next slot (epoch seconds) from the running scheduler, used to sort by next
    run without computing every job's schedule; None computes it."""
    mine = [j for j in jobs if j.team == team]
    key = (team, len(mine))
    sources = _SOURCES.get(key)
    if sources is None:  # the filter's choices; recomputed when the team's count moves
        sources = _SOURCES[key] = sorted({source_file(j.source) for j in mine})
        while len(_SOURCES) > 64:
            del _SOURCES[next(iter(_SOURCES))]
    if query.q:
        needle = query.q.lower()
        mine = [j for j in mine if needle in j.id.lower() or needle in j.description.lower()
                or needle in j.schedule.expr.lower()]
    if query.kind:
        mine = [j for j in mine if job_kind(j) == query.kind]
    if query.source:
        mine = [j for j in mine if j.source == query.source
                or source_file(j.source) == query.source]
    paused_ids: set[str] | None = None
    if query.paused:
        overrides = await store.read_overrides([j.id for j in mine]) if mine else {}
        paused_ids = {k for k, st in overrides.items()
                      if st.enabled_override is False and
                      (st.override_until is None or st.override_until > now)}
        want = query.paused == "yes"
        mine = [j for j in mine if (j.id in paused_ids) == want]
    lasts: Mapping[str, RunRecord] | None = None
    if query.status or query.failing or query.sort == "last":
        lasts = await store.last_runs([j.id for j in mine]) if mine else {}
        if query.status:
            mine = [j for j in mine if (r := lasts.get(j.id)) is not None
                    and r.status.value == query.status]
        if query.failing:
            mine = [j for j in mine if (r := lasts.get(j.id)) is not None
                    and r.status in FAILED_STATUSES]
    if query.sort in ("id", "-id"):
        mine.sort(key=_BY_ID, reverse=query.sort == "-id")
    elif query.sort == "last":
        got = lasts or {}

        def last_key(j: Job) -> tuple[float, str]:
            r = got.get(j.id)
            return (-(r.slot.timestamp()) if r is not None else math.inf, j.id)

        mine.sort(key=last_key)
    else:  # next
        def next_key(j: Job) -> tuple[float, str]:
            if next_of is not None:
                v = next_of(j.id)
                return (math.inf if v is None else v, j.id)
            fires = fire_times(j.schedule, now, 1)
            return (fires[0].timestamp() if fires else math.inf, j.id)

        mine.sort(key=next_key)
    total = len(mine)
    pages = max(1, math.ceil(total / query.size))
    page = mine[(min(query.page, pages) - 1) * query.size:][:query.size]
    return JobsPage(await job_rows(store, page, now, lasts), total, pages, sources,
                    count=f"{total:,}")


async def job_rows(store: Store, page: Sequence[Job], now: datetime,
                   lasts: Mapping[str, RunRecord] | None = None,
                   states: Mapping[str, JobState] | None = None) -> list[JobRow]:
    """The rows of one page of the jobs list: each job's state, last run, status and
    strip of its last slots (one read of the states and one of the last runs unless
    given, one of the recent runs per job)."""
    ids = [j.id for j in page]
    if states is None:
        states = await store.read_states(ids) if ids else {}
    if lasts is None:
        lasts = await store.last_runs(ids) if ids else {}
    rows = []
    for j in page:
        st = states.get(j.id)
        view = job_view(j, st, lasts.get(j.id), now)
        slots = last_slots(j, now, STRIP)
        if st is not None and st.created_at is not None:
            slots = [x for x in slots if x >= st.created_at]
        runs = await store.list_runs(j.id, limit=STRIP + 5) if slots else []
        rows.append(JobRow(j, st, view.last, view.next_fire, view.paused(now), job_kind(j),
                           slot_cells(slots, runs), job_status(view, now),
                           view.next_run(now)))
    return rows


# -- runs across jobs -----------------------------------------------------------------


async def find_runs(store: Store, job_ids: frozenset[str], *, job_id: str | None = None,
                    status: RunStatus | None = None, instance: str | None = None,
                    since: datetime | None = None, until: datetime | None = None,
                    cursor: str | None = None, limit: int = 50, all_ids: int = 0
                    ) -> tuple[list[RunRecord], str | None]:
    """Runs of ``job_ids`` (the team's jobs) or of ``job_id``, newest first by
    ``(slot, id)``, filtered; and the cursor text of the next page (``Store.find_runs``,
    as ``GET /api/runs``). A cursor that is not one of ours starts from the newest run.

    ``all_ids``: how many jobs the registry has. When the team has at least half of
    them, the store is read without the list of ids (100,000 ids in the statement made
    SQLite scan: 7 s a page at 10,000,000 runs) and the rows of other jobs are left out
    here (:func:`~cronfleet.views.kept_runs`)."""
    try:
        after = None if not cursor else RunCursor.decode(cursor)
    except ValueError:
        after = None
    wide = not job_id and all_ids and len(job_ids) * 2 >= all_ids
    scope: dict[str, Any] = ({"job_id": job_id} if job_id else {} if wide
                             else {"job_ids": job_ids})
    where = RunFilter(status=status, instance_id=instance, since=since, until=until,
                      **scope)
    if not wide:
        page = await store.find_runs(where, limit=limit, after=after)
        nxt = page.next_cursor
        return page.runs, None if nxt is None else nxt.encode()

    async def mine(_: Sequence[str]) -> frozenset[str]:
        return job_ids

    runs, nxt = await kept_runs(store, where, mine, limit=limit, after=after)
    return runs, None if nxt is None else nxt.encode()


# -- overview -------------------------------------------------------------------------


async def overview(store: Store, jobs: Sequence[Job], now: datetime) -> dict[str, Any]:
    """Counts for the overview: jobs, paused, failing (last run failed / timed out /
    interrupted), running now (rows with status running), the latest failures.
    ``lasts``: the newest runs that failed or whose slot is in the heat map's hour (what
    :func:`activity` orders by); a job missing there has neither."""
    ids = [j.id for j in jobs]
    overrides = await store.read_overrides(ids) if ids else {}
    paused = sum(1 for st in overrides.values() if st.enabled_override is False
                 and (st.override_until is None or st.override_until > now))
    lasts = await last_slot_runs(store, ids, since=heat_start(now),
                                 statuses=FAILED_STATUSES)
    failing = sorted(j for j, r in lasts.items() if r.status in FAILED_STATUSES)
    mine = set(ids)
    running = [r for r in await store.list_runs(None, limit=500, status=RunStatus.RUNNING)
               if r.job_id in mine]
    failures: list[RunRecord] = []
    for status in FAILED_STATUSES:
        failures.extend(r for r in await store.list_runs(None, limit=200, status=status)
                        if r.job_id in mine)
    failures.sort(key=lambda r: r.id or 0, reverse=True)
    return {"jobs": len(ids), "paused": paused, "failing": len(failing),
            "failing_ids": failing[:20], "running": running[:50], "lasts": lasts,
            "running_n": len(running), "running_all": running,
            "failures": failures[:10]}


# -- the fleet ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceRow:
    """One instance of the fleet as the overview shows it. ``heartbeat_age``: seconds
    since its last heartbeat, by the store's clock (heartbeats are written by it, so
    hosts with skewed clocks compare fairly). ``leases``: its runs in progress (a
    running run holds its job's lease). ``skew``: this host's clock minus the store's,
    in seconds, for the instance serving the page (the only clock the page can read;
    another host's is not in the store: None)."""

    instance: Instance
    heartbeat_age: float | None
    leases: int
    skew: float | None
    me: bool


async def fleet(store: Store, ttl: float, me: str, local_now: Any,
                running: Sequence[RunRecord]) -> list[InstanceRow] | None:
    """The fleet's instances, live first then lost, each with its heartbeat age, runs in
    progress and (for this process) clock skew; None when the store keeps no instances.
    ``local_now()``: this process's clock (epoch seconds); the skew is measured around one
    store clock read, taking the middle of the round trip."""
    if not isinstance(store, InstanceStore):
        return None
    rows = await store.list_instances(ttl=ttl)
    before = local_now()
    store_now = await store.now()
    after = local_now()
    skew = (before + after) / 2 - store_now
    held: dict[str, int] = {}
    for r in running:
        if r.status is RunStatus.RUNNING and r.instance_id:
            held[r.instance_id] = held.get(r.instance_id, 0) + 1
    out = [InstanceRow(i, None if i.heartbeat_at is None else
                       max(0.0, store_now - i.heartbeat_at.timestamp()),
                       held.get(i.instance_id, 0),
                       skew if i.instance_id == me else None, i.instance_id == me)
           for i in rows]
    out.sort(key=lambda x: (not x.instance.live, x.instance.instance_id))
    return out


# -- one job's status, as every page says it -------------------------------------------


def job_status(view: Any, now: datetime) -> str:
    """``paused`` (an override), ``disabled`` (declared or forced off), ``failing`` (the
    newest run failed, timed out or was interrupted), else ``active``: the jobs list,
    the job page and the overview's counts say the same thing of a job."""
    if view.paused(now):
        return "paused"
    if not view.enabled(now):
        return "disabled"
    last = view.last
    if last is not None and last.status in FAILED_STATUSES:
        return "failing"
    return "active"


def source_file(source: str) -> str:
    """A job's source without its line (``cronfleet.toml:12`` -> ``cronfleet.toml``):
    the jobs page filters by file, one choice per file, not per declaration."""
    head, sep, tail = source.rpartition(":")
    return head if sep and tail.isdigit() else source


# -- the fleet at a glance: every job x the last hour, and runs per minute --------------


HEAT_COLUMNS = 60  # one column a minute over the last hour
HEAT_PAGE = 50  # jobs per page of the heat map
CHART_RUNS = 5_000  # runs read for the overview's chart at most (the newest)
HEAT_READS = 8  # pages of 5,000 runs read for the heat map's rows at most
ACTIVITY = {"1h": (3600, 60), "24h": (86400, 900)}  # window: (span, bucket) seconds
_RANK = {st: k for k, st in enumerate(SEVERITY)}


@dataclass
class HeatRow:
    """One job's row: per column, the worst state of its slots in that minute and the
    run showing it (0: no slot recorded); ``trouble``: its runs of the hour that failed,
    timed out or were interrupted."""

    job_id: str
    states: list[str]
    runs: list[int]
    trouble: int = 0


@dataclass
class Activity:
    """What the overview shows of the recent ledger: the heat map (a page of rows,
    trouble first) and runs per bucket by state (the chart)."""

    start: float  # the heat map's first column (epoch seconds)
    rows: list[HeatRow]
    total: int  # jobs in the heat map, all pages
    page: int
    pages: int
    buckets: list[dict[str, int]]  # the chart: per bucket, state -> runs
    bucket: int  # seconds per bucket
    chart_start: float
    read: int  # runs read for the chart
    chart_from: float | None  # CHART_RUNS reached: the chart counts runs from here on


async def find_slot_runs(store: Store, where: RunFilter, *, limit: int,
                         after: RunCursor | None = None) -> SlotRunPage:
    """The store's narrow ``find_runs`` (:meth:`SlotRunStore.find_slot_runs`), or its
    ``find_runs`` narrowed here for a store of another author."""
    if isinstance(store, SlotRunStore):
        return await store.find_slot_runs(where, limit=limit, after=after)
    return SlotRunPage.narrowed(await store.find_runs(where, limit=limit, after=after))


def heat_start(now: datetime) -> float:
    """The heat map's first column (epoch seconds): the minute ``HEAT_COLUMNS - 1``
    minutes before the current one."""
    return (math.floor(now.timestamp() / 60) - HEAT_COLUMNS + 1) * 60.0


async def activity(store: Store, jobs: Sequence[Job], all_ids: int, now: datetime,
                   lasts: Mapping[str, SlotRun], *, window: str = "1h", page: int = 1,
                   size: int = HEAT_PAGE) -> Activity:
    """The heat map of ``jobs`` over the last hour, trouble first, and runs per bucket
    by state over ``window`` (a key of ACTIVITY).

    What it reads scales with what is shown, not with the fleet, and every run it reads
    is narrow (:func:`find_slot_runs`): the order comes from the hour's failed, timed-out
    and interrupted runs (by status: few, normally) and ``lasts`` (the newest runs that
    failed or fall in the hour, which the overview reads anyway: a job missing there sorts
    by id after them); the cells only for the rows of the page shown (their runs of the
    hour, one statement a 5,000); the chart from the window's newest CHART_RUNS runs.
    ``all_ids``: how
    many jobs the registry has (when ``jobs`` are all of them the reads are not narrowed
    by job, which would send every id to the store)."""
    span, bucket = ACTIVITY.get(window, ACTIVITY["1h"])
    end = now.timestamp()
    hour0 = heat_start(now)
    ids = {j.id: j for j in jobs}
    scope = None if len(ids) >= all_ids else frozenset(ids)
    since = datetime.fromtimestamp(hour0, now.tzinfo)
    trouble: dict[str, int] = {}
    for st in FAILED_STATUSES:
        pg = await find_slot_runs(store, RunFilter(status=st, job_ids=scope, since=since),
                                  limit=5000)
        for job_id, r in pg.runs:
            if job_id in ids and not r.manual:
                trouble[job_id] = trouble.get(job_id, 0) + 1

    def order(j: Job) -> tuple[int, bool, bool, str]:
        last = lasts.get(j.id)
        return (-trouble.get(j.id, 0), last is None or last.status not in FAILED_STATUSES,
                last is None or last.at < hour0, j.id)

    # the jobs of note (whose order is not (0, True, True, id): few) sort first, the
    # others (most of a large fleet) follow by id, as many as the page shown needs
    noted = {j for j, last in lasts.items()
             if last.status in FAILED_STATUSES or last.at >= hour0}
    noted = {j for j in itertools.chain(noted, trouble) if j in ids}
    ranked = sorted((ids[j] for j in noted), key=order)
    total = len(ids)
    pages = max(1, math.ceil(total / size))
    page = min(max(1, page), pages)
    if len(ranked) < page * size:
        more = heapq.nsmallest(page * size, ids)  # the smallest ids, some of them noted
        ranked += [ids[j] for j in more if j not in noted][:page * size - len(ranked)]
    shown = ranked[(page - 1) * size:page * size]
    cells = {j.id: (["none"] * HEAT_COLUMNS, [0] * HEAT_COLUMNS) for j in shown}
    state = cell_state
    rank = _RANK
    # the rows' runs of the hour: one statement a page of 5,000 (a job firing every 5 s
    # has 720 in an hour), for the page's jobs only
    if cells:
        where = RunFilter(job_ids=frozenset(cells), since=since)
        after: RunCursor | None = None
        for _ in range(HEAT_READS):
            pg = await find_slot_runs(store, where, limit=5000, after=after)
            for job_id, r in pg.runs:
                row = cells.get(job_id)
                c = int((r.at - hour0) // 60)
                if row is None or r.manual or not 0 <= c < HEAT_COLUMNS:
                    continue
                verdict = state(r)
                if rank[verdict] < rank[row[0][c]]:
                    row[0][c], row[1][c] = verdict, r.id
            after = pg.next_cursor
            if after is None:
                break
    rows = [HeatRow(j.id, *cells[j.id], trouble.get(j.id, 0)) for j in shown]
    # the chart: the window's runs, newest first, at most CHART_RUNS
    chart_start = (math.floor(end / bucket) - span // bucket + 1) * float(bucket)
    n_buckets = span // bucket
    buckets: list[dict[str, int]] = [{} for _ in range(n_buckets)]
    where = RunFilter(job_ids=scope, since=datetime.fromtimestamp(chart_start, now.tzinfo))
    after = None
    got_n = 0
    chart_from: float | None = None
    while True:
        pg = await find_slot_runs(store, where, limit=min(5000, CHART_RUNS - got_n),
                                  after=after)
        for job_id, r in pg.runs:
            if job_id not in ids:
                continue
            got_n += 1
            b = int((r.at - chart_start) // bucket)
            if 0 <= b < n_buckets:
                counts = buckets[b]
                verdict = state(r)
                counts[verdict] = counts.get(verdict, 0) + 1
        after = pg.next_cursor
        if after is None:
            break
        if got_n >= CHART_RUNS:
            chart_from = after.slot.timestamp()
            break
    if chart_from is not None:  # the oldest bucket read is partial: leave it out
        first = int((chart_from - chart_start) // bucket)
        for k in range(min(max(first + 1, 0), n_buckets)):
            buckets[k] = {}
    return Activity(hour0, rows, total, page, pages, buckets, bucket, chart_start,
                    got_n, chart_from)


def duration_points(runs: Sequence[RunRecord]) -> list[tuple[float, float, str, int]]:
    """The ended runs' ``(slot epoch seconds, duration seconds, cell state, run id)``,
    oldest first: the job page's duration chart."""
    out = [(r.slot.timestamp(), d, cell_state(r), r.id or 0) for r in runs
           if (d := r.duration) is not None]
    out.sort()
    return out
