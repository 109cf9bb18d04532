"""When each job is due next: the bucketed heap, and where each job's catch-up starts.

Jobs due at the same instant share one heap entry (a bucket of job ids): a burst of
20,000 jobs is one pop. ``next`` says which slot a job is queued for; an entry whose job
was removed, replaced or re-queued since is stale and dropped when popped.

Computing a job's following slot is kept off the instant's critical path: intervals by
arithmetic; cron expressions through :meth:`Due.after_many`, called after the handlers of
the instant are launched, which computes each distinct expression once per slot (many
jobs share one expression).

A schedule with no further fire time (``NoFireTimeError``: an expression that can never
fire again, or the end of the calendar) gives :data:`NEVER`; such a job is not queued
(no more slots), which is logged once when it happens.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from cronfleet.clock import from_ts
from cronfleet.cron import AnySchedule, NoFireTimeError
from cronfleet.model import Job, JobState, Locking

__all__ = ["CRON_GAP", "LAST_SLOT", "NEVER", "Due", "after", "min_gap", "next_slot"]

log = logging.getLogger("cronfleet")

# cron fire times are whole seconds, so the slot after ``slot`` is at least this later
CRON_GAP = 1.0
# the "slot" of a schedule that has no further fire time: never queued, never due
NEVER = math.inf
# the last instant a slot can have (9999-12-31T23:59:59Z): an interval's slot past it is
# NEVER too (a run row could not hold it)
LAST_SLOT = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def next_slot(schedule: AnySchedule, t: float) -> float:
    """The first fire time of ``schedule`` after ``t``, or :data:`NEVER` if there is none."""
    try:
        return schedule.next(from_ts(t)).timestamp()
    except NoFireTimeError:
        return NEVER


def after(job: Job, slot: float) -> float:
    """The slot after ``slot`` (intervals by arithmetic: they are anchored to the epoch),
    or :data:`NEVER`."""
    period = job.period
    if period:
        return slot + period
    return next_slot(job.schedule, slot)


def min_gap(job: Job) -> float:
    """A lower bound of (next slot - slot): ``now - slot < min_gap(job)`` proves that the
    job's next slot is still ahead, without computing it."""
    return job.period or CRON_GAP


def first_mark(job: Job, state: JobState | None, now: float) -> float:
    """A job's watermark when it is added: the newest slot it claimed or skipped, else
    when its state row was created, never after ``now``. A node-local job: ``now`` --
    its runs take no claim, so the store cannot say which slots this process missed
    (every process would replay the job's past, each with its own ``missed`` rows): it
    runs the slots of this process's lifetime, its catch-up covering the slots the
    running process let pass (a stalled loop, a sleep)."""
    if job.locking is Locking.NODE_LOCAL:
        return now
    seen = None if state is None else (state.last_slot or state.created_at)
    return now if seen is None else min(seen.timestamp(), now)


class Due:
    """The due heap, its buckets, each job's queued slot and watermark, and the jobs
    another instance plans (``parked``: never queued here, ``runtime/ownership.py``)."""

    __slots__ = ("buckets", "heap", "moved", "next", "parked", "watermark")

    def __init__(self) -> None:
        self.heap: list[float] = []
        self.buckets: dict[float, list[str]] = {}
        self.next: dict[str, float] = {}
        self.watermark: dict[str, float] = {}
        self.parked: set[str] = set()
        # a job was parked once: its stale heap entry may share a bucket with the one it
        # got when queued again (same slot), so pop_due drops a job seen twice in a slot
        self.moved = False

    def push(self, job: Job, slot: float) -> None:
        """Queue ``job`` for ``slot``; :data:`NEVER` (or any slot past the calendar's end)
        leaves it without a slot (logged). A parked job is not queued: whatever computed
        its next slot (an instant fired before the job moved to another owner) is moot."""
        if job.id in self.parked:
            return
        if slot > LAST_SLOT:
            self.exhausted(job)
            return
        self.next[job.id] = slot
        bucket = self.buckets.get(slot)
        if bucket is None:
            self.buckets[slot] = [job.id]
            heapq.heappush(self.heap, slot)
        else:
            bucket.append(job.id)

    def first(self, job: Job, state: JobState | None, now: float) -> None:
        """Queue a job just added: its next slot after its watermark — the newest slot it
        claimed or skipped, else when its state row was created — never after ``now``."""
        mark = self.watermark[job.id] = first_mark(job, state, now)
        self.push(job, next_slot(job.schedule, mark))

    def first_all(self, jobs: Iterable[Job], states: Mapping[str, JobState], now: float
                  ) -> None:
        """:meth:`first` for every job of a start-up. Jobs that share a schedule object
        and a watermark (100,000 jobs on 60 cron expressions, their state rows created by
        one store call) share one next-slot computation."""
        memo: dict[tuple[int, float], float] = {}
        for job in jobs:
            mark = self.watermark[job.id] = first_mark(job, states.get(job.id), now)
            key = (id(job.schedule), mark)
            slot = memo.get(key)
            if slot is None:
                slot = memo[key] = next_slot(job.schedule, mark)
            self.push(job, slot)

    def exhausted(self, job: Job) -> None:
        """``job``'s schedule has no further fire time: it stays registered, unqueued. A
        composed schedule that ends by construction (a one-off ``at`` past, or its ``end``
        reached) is done: said at INFO, not as a warning."""
        self.next.pop(job.id, None)
        last = getattr(job.schedule, "last", None)
        if last is not None:
            log.info("job %s: schedule %r is done (its last instant was %s); no more slots",
                     job.id, job.schedule.expr, last.isoformat())
            return
        log.warning(
            "job %s: schedule %r (%s) has no further fire time; no more slots",
            job.id,
            job.schedule.expr,
            job.schedule.tz,
        )

    def forget(self, job_id: str) -> None:
        self.next.pop(job_id, None)
        self.watermark.pop(job_id, None)

    def park(self, job_id: str) -> None:
        """Another instance plans ``job_id`` now: its queued slot is dropped (its heap
        entry, stale, goes when popped) and nothing queues it until :meth:`unpark`."""
        self.parked.add(job_id)
        self.moved = True
        self.forget(job_id)

    def unpark(self, job_id: str) -> None:
        """``job_id`` is planned here again; the caller queues it (:meth:`first`, from
        the store's watermark: the one it kept here is stale)."""
        self.parked.discard(job_id)

    def mark(self, job_id: str, slot: float) -> None:
        """``slot`` was handled: catch-up starts after it."""
        if self.watermark.get(job_id, 0.0) < slot:
            self.watermark[job_id] = slot

    def keep_only(self, slot: float, job_ids: list[str]) -> None:
        """What is left of ``slot``'s bucket once its other jobs were claimed early: the
        heap entry stays, so the loop still wakes at ``slot``."""
        self.buckets[slot] = job_ids

    def earliest(self) -> float | None:
        return self.heap[0] if self.heap else None

    def pop_due(self, now: float, jobs: Mapping[str, Job]) -> list[tuple[Job, float]]:
        """Every live (job, slot) due at or before ``now``."""
        due: list[tuple[Job, float]] = []
        heap, nexts, buckets = self.heap, self.next, self.buckets
        while heap and heap[0] <= now:
            slot = heapq.heappop(heap)
            bucket = buckets.pop(slot, ())
            if self.moved:
                bucket = list(dict.fromkeys(bucket))
            for job_id in bucket:
                job = jobs.get(job_id)
                if job is not None and nexts.get(job_id) == slot:  # else removed or stale
                    due.append((job, slot))
        return due

    def after_many(self, handled: Iterable[tuple[Job, float]], jobs: Mapping[str, Job]) -> None:
        """Queue the following slot of each ``(job, slot)`` handled on the fast path (its
        next slot was proven ahead without computing it) and move its watermark. One
        computation per distinct expression and slot; a job removed or replaced meanwhile
        is left alone (its new definition was queued by ``first``)."""
        nexts, watermark, push = self.next, self.watermark, self.push
        # by zone, then by expression text: the same text in the same zone is the same
        # schedule, and both keys hash at C speed (a string caches its hash, a zone hashes
        # by identity) where hashing a parsed expression costs microseconds per job
        cache: dict[object, dict[str, float]] = {}
        cache_slot = None
        for job, slot in handled:
            if jobs.get(job.id) is not job or nexts.get(job.id) != slot:
                continue
            period = job.period
            if period:
                nxt = slot + period
            else:
                if slot != cache_slot:
                    cache.clear()
                    cache_slot = slot
                sched = job.schedule
                by_text = cache.get(sched.tz)
                if by_text is None:
                    by_text = cache[sched.tz] = {}
                found = by_text.get(sched.expr)
                if found is None:
                    found = by_text[sched.expr] = next_slot(sched, slot)
                nxt = found
            push(job, nxt)
            if watermark.get(job.id, 0.0) < slot:
                watermark[job.id] = slot
