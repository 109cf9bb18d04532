"""What this process did since it started: plain counters and bucket arrays, read by
``/metrics`` at scrape time (the hot path bumps integers, never a lock)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["DURATION_BUCKETS", "LATENESS_BUCKETS", "Histogram", "JobStats", "Stats"]

# upper bounds (seconds) of the lateness and duration histograms kept for /metrics
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass(slots=True)
class Histogram:
    """Cumulative-ready bucket counts; observing costs one bisect (no lock: the loop's
    thread is the only writer)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1


@dataclass(slots=True)
class JobStats:
    """One job's outcomes in this process: counts by status, when it last succeeded and
    last failed (epoch seconds of the run's end), its last outcome and how many runs in a
    row failed (``failed`` or ``timed_out``; a success resets it)."""

    counts: dict[str, int] = field(default_factory=dict)
    last_success: float | None = None
    last_failure: float | None = None
    last_outcome: str | None = None
    consecutive_failures: int = 0

    def record(self, status: str, at: float) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        self.last_outcome = status
        if status == "succeeded":
            self.last_success = at
            self.consecutive_failures = 0
        elif status in ("failed", "timed_out"):
            self.last_failure = at
            self.consecutive_failures += 1


@dataclass(slots=True)
class Stats:
    """What this process did since it started (exported by ``/metrics``)."""

    fired: int = 0
    skipped: int = 0
    claims_lost: int = 0
    store_errors: int = 0
    retries: int = 0
    fail_open: int = 0  # PREFER_GLOBAL runs started without a claim (confirmed outage)
    outcomes: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # ended attempts by outcome
    skips: dict[str, int] = field(default_factory=dict)
    lateness: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS))
    durations: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))
    # per job (the ``job`` label of /metrics); off: nothing kept per job
    per_job: bool = True
    jobs: dict[str, JobStats] = field(default_factory=dict)

    def job_outcome(self, job_id: str, status: str, at: float) -> None:
        """Count one ended run of ``job_id`` (when ``per_job``)."""
        if self.per_job:
            js = self.jobs.get(job_id)
            if js is None:
                js = self.jobs[job_id] = JobStats()
            js.record(status, at)

    def skip(self, reason: str | None, n: int = 1) -> None:
        self.skipped += n
        key = reason or "other"
        self.skips[key] = self.skips.get(key, 0) + n
