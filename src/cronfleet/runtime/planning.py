"""Which slots of a job to run, skip or record when the loop reaches ``now``.

Pure functions of (schedule, watermark, now, policy): every instance computes the same
answer, and the store's unique claims settle who acts on it. Kept apart from the loop so
the catch-up rules are tested without any I/O.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from cronfleet.clock import from_ts
from cronfleet.cron import AnySchedule, NoFireTimeError
from cronfleet.model import Missed

__all__ = [
    "RECORD_CAP", "RUN_ALL_CAP", "SlotPlan", "catchup_banner", "jitter_delay", "late", "plan_slots",
]

RUN_ALL_CAP = 100
"""``Missed.RUN_ALL`` runs at most this many missed slots (the most recent ones)."""
RECORD_CAP = 100
"""Missed slots recorded one by one per job and catch-up; older ones are summarised."""


@dataclass(slots=True)
class SlotPlan:
    """``run``: ``(slot, is_catchup)`` oldest first. ``missed``: slots recorded as skipped
    with reason ``missed``. ``overflow``: ``(count or None, first, last)`` of older missed
    slots summarised in one record. ``capped``: RUN_ALL dropped slots over its cap."""

    run: list[tuple[float, bool]] = field(default_factory=list)
    missed: list[float] = field(default_factory=list)
    overflow: tuple[int | None, float, float] | None = None
    capped: int = 0


def jitter_delay(job_id: str, slot: float, jitter: float) -> float:
    """A delay in ``[0, jitter]`` that every instance derives alike from ``(job, slot)``."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{job_id}\0{round(slot * 1000)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / float(2**64 - 1) * jitter


def catchup_banner(slot: float, started: float) -> str:
    stamp = (
        from_ts(slot).strftime("%Y-%m-%dT%H:%M:%S.") + f"{from_ts(slot).microsecond // 1000:03d}Z"
    )
    return f"⏰ Catch-up run for missed slot {stamp} ({round(started - slot)}s late)"


def late(slot: float, nxt: float, now: float, late_after: float) -> bool:
    """The backlog rule for one slot whose job's next slot is ``nxt``: at ``now`` it is
    **late** when it is more than ``late_after`` old or overtaken (``nxt`` is due too);
    otherwise it can still start on time. :func:`plan_slots` applies it to a job's
    backlog, the loop to each slot it is about to start (an overloaded process)."""
    return nxt <= now or now - slot > late_after


def plan_slots(
    expr: AnySchedule,
    after: float,
    now: float,
    *,
    missed: Missed,
    window: float,
    late_after: float,
) -> SlotPlan:
    """Plan the slots in ``(after, now]``.

    Only the newest slot can still start near its time: it is on time when it is at most
    ``late_after`` seconds old and runs normally. Every other slot is **late** — older than
    ``late_after``, or overtaken by a newer slot already due (a backlog after an outage, a
    start or a stalled loop: running it now would push every later slot back) — and the
    ``missed`` policy decides inside ``window`` (SKIP records them, RUN_ONCE runs only the
    newest — and none when an on-time slot runs anyway — RUN_ALL runs them in order up to
    :data:`RUN_ALL_CAP`, then the on-time one); outside the window they are recorded.
    Only the schedule's fire times count: a composed schedule's bounds and exclusions
    (``prev`` never gives an excluded instant nor one outside ``start``/``end``) mean
    those instants are neither run nor recorded as missed.
    """
    plan = SlotPlan()
    newest_first: list[float] = []
    cursor = from_ts(now + 0.0005)
    truncated = False
    limit = RECORD_CAP + RUN_ALL_CAP + 64
    while True:
        try:
            prev = expr.prev(cursor)
        except NoFireTimeError:  # before a composed schedule's start, or its one-off
            break
        ts = prev.timestamp()
        if ts <= after:
            break
        if len(newest_first) >= limit:
            truncated = True
            break
        newest_first.append(ts)
        cursor = prev
    slots = newest_first[::-1]
    # the backlog rule: only the newest slot may be on time (docs/concepts.md)
    # (the newest slot due: its next one is ahead by construction)
    on_time = slots[-1:] if slots and not late(slots[-1], math.inf, now, late_after) else []
    older = slots[: len(slots) - len(on_time)]
    in_window = [s for s in older if window > 0 and now - s <= window]
    outside = [s for s in older if not (window > 0 and now - s <= window)]
    to_miss = list(outside)
    catch: list[float] = []
    if missed is Missed.RUN_ONCE:
        if in_window and not on_time:
            catch = [in_window[-1]]
            to_miss += in_window[:-1]
        else:
            to_miss += in_window
    elif missed is Missed.RUN_ALL:
        catch = in_window[-RUN_ALL_CAP:]
        plan.capped = len(in_window) - len(catch)
        to_miss += in_window[: plan.capped]
    else:
        to_miss += in_window
    to_miss.sort()
    if len(to_miss) > RECORD_CAP:
        older = to_miss[: len(to_miss) - RECORD_CAP]
        to_miss = to_miss[len(to_miss) - RECORD_CAP :]
        plan.overflow = (len(older), older[0], older[-1])
    if truncated:
        first = expr.next(from_ts(after)).timestamp()
        last = slots[0]
        count: int | None = None
        if expr.period is not None:
            count = max(int((last - first) / expr.period.total_seconds()), 0)
        if plan.overflow is not None:
            older_count = plan.overflow[0]
            count = None if count is None or older_count is None else count + older_count
            last = plan.overflow[2]
        plan.overflow = (count, first, last)
    plan.missed = to_miss
    plan.run = [(s, True) for s in catch] + [(s, False) for s in on_time]
    return plan
