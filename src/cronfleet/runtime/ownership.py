"""Ownership: which jobs this process plans (docs/concepts.md, "One owner plans each job").

The live instances that plan the same set of jobs (their heartbeats carry the same
:attr:`~cronfleet.store.base.Instance.plans`, a digest of the jobs' ids and schedules)
are **peers**.
Each claimed job belongs to one peer by rendezvous hashing (:func:`owner`); only
its owner keeps a timer for it, claims its slots and records its skips. The other peers
hold it **parked** (:meth:`Due.park`: no timer, no store call). Node-local jobs are
planned by every process (their runs take no claim). With :attr:`Ownership.shared`, the
API's jobs are placed by their bucket (:mod:`cronfleet.shares`, :func:`bucket_key`)
rather than one by one, left out of the digest (each process holds another part of
them), and :attr:`Ownership.on_peers` tells the catalog to read its new share.

Handover, each side on its own view of the live set (read at every heartbeat):

- a job that becomes this instance's is queued from the **store's** watermark (the
  newest slot anybody claimed or skipped, read afresh): the slots the previous owner
  did not decide are caught up by the job's ``missed`` policy, those it did are not
  touched again;
- a job that becomes another's is parked at once; the slots already claimed here run.

Two views may disagree for up to a heartbeat interval (one instance has seen a change,
another not yet). Then a job has two owners, or none. Two owners claim the same slot:
the store keeps one claim (exactly once holds whatever the views). No owner: nobody
claims for a moment; the owner to come starts from the watermark, so the slots due
meanwhile are run late or recorded, never left without a row.

Instances that plan another set of jobs (a rolling deploy that adds a job, two apps
sharing a store, a process of an older version: no digest) are not peers: each group
divides its own jobs, and a job declared in two groups is planned by one owner in each
(their claims meet in the store). A change of this process's own jobs changes its
digest, so it stands apart from its old peers until they have the same change.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from cronfleet.model import Job, Locking
from cronfleet.shares import ALL_BUCKETS, bucket_of
from cronfleet.spec import API_SOURCE

if TYPE_CHECKING:
    from cronfleet.clock import Clock
    from cronfleet.runtime.activity import Activity
    from cronfleet.runtime.due import Due
    from cronfleet.runtime.parts import Jobs, Life
    from cronfleet.store.base import Store

__all__ = ["GAIN_CHUNK", "UPDATE_CHUNK", "Ownership", "owner", "plan_key", "plans_digest"]

log = logging.getLogger("cronfleet")

_blake2b = hashlib.blake2b

GAIN_CHUNK = 5000  # jobs whose state one store call reads when they become this instance's
UPDATE_CHUNK = 2000  # jobs judged between two turns of the loop when the peers change
GAIN_RETRY = (0.2, 2.0)  # seconds: first and longest wait between two reads that failed


@functools.lru_cache(maxsize=1024)
def _prefix(instance_id: str) -> bytes:
    return instance_id.encode() + b"\x00"


def owner(job_id: str, live: tuple[str, ...]) -> str | None:
    """The live instance a job belongs to (rendezvous hashing): the one with the highest
    score, the 8-byte BLAKE2b of ``instance id NUL job id``. Every process computes the
    same answer from the same live set, and a change of the set moves only the jobs of
    the instance that came or went: a joining instance takes jobs only from their
    owners, a leaving one's jobs go to the others (:meth:`Ownership.update` relies on
    both)."""
    key = job_id.encode()
    best = b""
    found = None
    for inst in live:
        score = _blake2b(_prefix(inst) + key, digest_size=8).digest()
        if found is None or score > best:
            best, found = score, inst
    return found


SHARED_KEY = "\x00api jobs by bucket"  # in the digest of processes dividing the API's jobs


def bucket_key(bucket: int) -> str:
    """The key a bucket of API jobs is placed by (:func:`owner`), apart from every job id
    (ids have no NUL)."""
    return f"\x00bucket {bucket}"


def claimed(job: Job) -> bool:
    """Does the job's slot go through a claim (and so through one owner)?"""
    return job.locking is not Locking.NODE_LOCAL


def plan_key(job: Job) -> str:
    """What peers must agree on for a job: its id and its schedule (two processes that
    declare one id with two schedules each plan their own, as the registry reports)."""
    sched = job.schedule
    return f"{job.id}\x00{getattr(sched, 'expr', sched)}\x00{getattr(sched, 'tz', '')}"


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=12).digest(), "big")


def plans_digest(keys: Iterable[str]) -> str:
    """The digest of a set of :func:`plan_key` values: the XOR of their hashes, so that
    order does not matter and a job added or removed changes it in O(1)
    (:meth:`Ownership.changed`; ids are unique, so no key cancels another)."""
    acc = 0
    for key in keys:
        acc ^= key_hash(key)
    return f"{acc:024x}"


class Ownership:
    """This process's share of the jobs. Built with the store (a gained job's state), the
    clock, the instance id, the job table (read-only), the due heap (parks and queues),
    the scheduler's life (the reads run in its tasks) and ``wake`` (the loop looks at
    the heap again once gained jobs are queued)."""

    def __init__(self, *, store: Store, clock: Clock, instance_id: str, jobs: Jobs, due: Due,
                 life: Life, activity: Activity, wake: Callable[[], None],
                 shared: bool = False) -> None:
        self.store = store
        self.clock = clock
        self.me = instance_id
        self.jobs = jobs
        self.due = due
        self.life = life
        self.activity = activity
        self.wake = wake
        # the API's jobs are divided by bucket (a catalog that loads only this process's
        # share of them: catalog.py); ``on_peers`` is told each new set of peers
        self.shared = shared
        self.on_peers: Callable[[], None] | None = None
        self.peers: tuple[str, ...] = ()  # live instances planning our jobs, us included
        # the peers every job was judged for by the last update that went to its end
        # (None: one was cut short by a newer view): what the next update starts from
        self._basis: tuple[str, ...] | None = ()
        self._acc: int | None = None  # XOR of the claimed jobs' key hashes; None: to compute
        # the buckets of API jobs this instance owns, and the peers they were computed for
        self._owned: tuple[tuple[str, ...], frozenset[int]] = ((), ALL_BUCKETS)
        self._added: list[str] = []  # jobs added while running, not yet queued
        self._adding: asyncio.Task[None] | None = None  # the task queueing them

    # -- what this instance plans ----------------------------------------------------------

    def plans(self) -> str:
        """The digest this instance's heartbeat carries (:func:`plans_digest` of its
        claimed jobs, computed once, then kept by :meth:`changed`)."""
        if self._acc is None:
            self._acc = int(plans_digest(plan_key(j) for j in self.jobs.values()
                                         if self._digested(j)), 16)
            if self.shared:  # the API's jobs: the same for every process sharing them
                self._acc ^= key_hash(SHARED_KEY)
        return f"{self._acc:024x}"

    def share(self) -> None:
        """Divide the API's jobs by bucket from now on (the digest changes with it)."""
        self.shared = True
        self._acc = None
        self._basis = None  # the API's jobs are judged by another rule from now on

    def _digested(self, job: Job) -> bool:
        """Is the job part of the digest? Claimed jobs, except the API's when they are
        divided by bucket (each process holds another part of them: the store's
        definitions are what the peers agree on)."""
        return claimed(job) and not (self.shared and job.source == API_SOURCE)

    def changed(self, old: Job | None, new: Job | None) -> None:
        """The job table changed: ``old`` left it, ``new`` came in (a replace: both)."""
        if self._acc is None:
            return  # computed from the table when first asked
        for job in (old, new):
            if job is not None and self._digested(job):
                self._acc ^= key_hash(plan_key(job))

    def mine(self, job: Job) -> bool:
        """Is ``job`` this instance's to plan? Every job is, alone or with no peer known;
        an API job divided by bucket is its bucket's owner's (:meth:`owns`)."""
        peers = self.peers
        if len(peers) < 2 or not claimed(job):
            return True
        if self.shared and job.source == API_SOURCE:
            return bucket_of(job.id) in self.buckets()
        return owner(job.id, peers) == self.me

    def buckets(self) -> frozenset[int]:
        """The buckets of API jobs this instance owns (every one alone or with no peer
        known), placed once per set of peers."""
        peers = self.peers
        if self._owned[0] != peers:
            owned = ALL_BUCKETS if len(peers) < 2 else frozenset(
                b for b in ALL_BUCKETS if owner(bucket_key(b), peers) == self.me)
            self._owned = (peers, owned)
        return self._owned[1]

    @property
    def parked(self) -> int:
        return len(self.due.parked)

    # -- the live set changed ----------------------------------------------------------------

    def _peers(self, live: tuple[str, ...], plans: Mapping[str, str]) -> tuple[str, ...]:
        """The peers a heartbeat's ``live`` set and ``plans`` say (none while this
        instance is not in the live set)."""
        mine = self.plans()
        return tuple(i for i in live if plans.get(i) == mine) if self.me in live else ()

    def moves(self, live: tuple[str, ...], plans: Mapping[str, str]) -> bool:
        """Would :meth:`update` with this reading move jobs (other peers than now)?"""
        return self._peers(live, plans) != self.peers

    async def update(self, live: tuple[str, ...], plans: Mapping[str, str]) -> None:
        """After a heartbeat: the peers as ``live`` and their ``plans`` say; the jobs that
        moved away are parked, those that moved here are queued from the store's
        watermark (read in a task). The jobs are judged ``UPDATE_CHUNK`` at a time, the
        loop getting a turn between two (100,000 jobs and 4 peers: ~0.2 s of hashing); only
        the jobs that can have moved are judged (:meth:`_to_judge`)."""
        peers = self._peers(live, plans)
        if peers == self.peers:
            return
        self.peers = peers
        basis, self._basis = self._basis, None  # None until every job is judged anew
        due = self.due
        gained: list[str] = []
        parked = 0
        table = self.jobs
        jobs = self._to_judge(basis, peers)
        for k in range(0, len(jobs), UPDATE_CHUNK):
            if k:
                await asyncio.sleep(0)
                if self.peers != peers:
                    return  # a newer view took over (and judges every job again)
            for job in jobs[k : k + UPDATE_CHUNK]:
                if table.get(job.id) is not job:
                    continue  # removed or replaced meanwhile: admit() judged the new one
                if self.mine(job):
                    if job.id in due.parked:
                        due.unpark(job.id)
                        gained.append(job.id)
                elif job.id not in due.parked:
                    due.park(job.id)
                    parked += 1
        log.info(
            "fleet: %d instance(s) plan the same jobs as %s; it plans %d of %d job(s) "
            "(%d moved here, %d moved away)", max(1, len(peers)), self.me,
            len(self.jobs) - len(due.parked), len(self.jobs), len(gained), parked,
        )
        self._basis = peers
        if gained:
            self.life.spawn(self.gain(gained))
        if self.on_peers is not None:
            self.on_peers()

    def _to_judge(self, basis: tuple[str, ...] | None, peers: tuple[str, ...]) -> list[Job]:
        """The jobs whose owner may differ between ``basis`` (the peers every job was last
        judged for; ``None``: a judgement was cut short) and ``peers``. Rendezvous hashing
        (:func:`owner`) moves a job only to an instance that came or from one that went:
        when instances only joined, only this instance's jobs can move (away); when they
        only left, only the parked ones can move (here; alone, every job is ours). Anything
        else: every job."""
        table, parked = self.jobs, self.due.parked
        if basis is not None:
            if set(basis) <= set(peers):
                return [j for j in table.values() if j.id not in parked]
            if set(peers) <= set(basis):
                return [table[j] for j in parked if j in table]
        return list(table.values())

    def admit(self, job: Job) -> bool:
        """A job added while running: True when it is this instance's (the caller queues
        it), else it is parked."""
        if self.mine(job):
            self.due.unpark(job.id)
            return True
        self.due.park(job.id)
        return False

    def add(self, job: Job) -> None:
        """A job added while running: parked if it is another instance's, else queued from
        the store's watermark by :meth:`gain` together with every job added in the same
        turn of the loop (a catalog applying a page of 1,000 definitions makes one store
        call, not 1,000 concurrent ones waiting for a connection)."""
        if not self.admit(job):
            return
        self._added.append(job.id)
        if self._adding is None or self._adding.done():
            self.activity.enter()  # busy until they are queued (``wait_idle`` waits for it)
            self._adding = self.life.spawn(self._gain_added())

    async def _gain_added(self) -> None:
        try:
            while self._added:
                await asyncio.sleep(0)  # the rest of a burst of adds joins this batch
                ids, self._added = self._added, []
                await self.gain(ids)
        finally:
            self.activity.leave()

    async def gain(self, job_ids: list[str]) -> None:
        """Queue jobs that became this instance's from the store's watermark (their state
        rows, created if missing). A read that fails is tried again (the jobs stay
        unqueued meanwhile: nobody else plans them either) until it succeeds or the jobs
        moved away again."""
        wait = GAIN_RETRY[0]
        left = job_ids
        while left:
            part = [j for j in left[:GAIN_CHUNK]
                    if j in self.jobs and j not in self.due.parked and j not in self.due.next]
            rest = left[GAIN_CHUNK:]
            if not part:
                left = rest
                continue
            try:
                states = await self.store.ensure_jobs(part)
            except Exception as exc:
                log.warning("fleet: cannot read the state of %d job(s) that moved to %s "
                            "(%s); trying again in %.1f s", len(part), self.me, exc, wait)
                await self.clock.sleep_until(self.clock.now() + wait)
                wait = min(wait * 2, GAIN_RETRY[1])
                continue
            wait = GAIN_RETRY[0]
            now = self.clock.now()
            due = self.due
            for job_id in part:
                job = self.jobs.get(job_id)
                # moved away again, removed, or queued meanwhile (added anew): left alone
                if job is not None and job_id not in due.parked and job_id not in due.next:
                    due.first(job, states.get(job_id), now)
            left = rest
            self.wake()
