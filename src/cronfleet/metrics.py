"""Prometheus metrics of one scheduler process, read from its counters at scrape time.

The loop only bumps plain integers and bucket counts (see ``Scheduler.stats``); this
collector turns them into metric families when Prometheus asks, so the hot path never
touches a lock or a metric object.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cronfleet.extras import require

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
except ImportError:
    require("server", "/metrics")  # one line naming the pip install
    raise

if TYPE_CHECKING:
    from cronfleet.runtime.scheduler import Scheduler
    from cronfleet.runtime.stats import Histogram, Stats

__all__ = ["CONTENT_TYPE_LATEST", "SchedulerCollector", "render"]


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(h.bounds, h.counts, strict=False):
        running += count
        out.append((repr(float(bound)), running))
    out.append(("+Inf", h.n))
    return out


class SchedulerCollector:
    """Exports ``cronfleet_*`` metrics for one :class:`~cronfleet.Scheduler`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        s = self.scheduler
        st = s.stats
        counters: list[tuple[str, str, str | None, dict[str, int] | int]] = [
            ("cronfleet_fires", "Runs started by this process.", None, st.fired),
            ("cronfleet_skips", "Slots skipped, by reason.", "reason", st.skips),
            ("cronfleet_claim_losses", "Slots another instance claimed first.", None,
             st.claims_lost),
            ("cronfleet_store_errors", "Store calls that failed (the loop carried on).", None,
             st.store_errors),
            ("cronfleet_run_outcomes", "Finished runs, by status.", "status", st.outcomes),
            ("cronfleet_attempts", "Ended attempts of runs (each try of a retried handler "
             "or of an HTTP job's request), by outcome.", "outcome", st.attempts),
            ("cronfleet_fail_open_runs", "PREFER_GLOBAL runs started without a claim during "
             "a confirmed store outage.", None, st.fail_open),
        ]
        for name, doc, label, value in counters:
            counter = CounterMetricFamily(name, doc, labels=[label] if label else None)
            if isinstance(value, dict):
                for key, n in sorted(value.items()):
                    counter.add_metric([key], n)
            else:
                counter.add_metric([], value)
            yield counter
        for name, doc, h in (
            ("cronfleet_lateness_seconds", "Handler start minus the slot's nominal time.",
             st.lateness),
            ("cronfleet_run_duration_seconds", "Handler run time.", st.durations),
        ):
            hist = HistogramMetricFamily(name, doc)
            hist.add_metric([], _buckets(h), h.total)
            yield hist
        yield from _per_job(st)
        health = s.health()  # the job count without a copy of the job table
        for name, doc, gauge_value in (
            ("cronfleet_leases_held", "Runs of this process holding their job's lease.",
             float(s.leases_held())),
            ("cronfleet_jobs", "Jobs known to this process.", float(health["jobs"])),
            ("cronfleet_loop_overdue_seconds",
             "How far the loop is behind its earliest due slot.", float(health["overdue"])),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], gauge_value)
            yield gauge


def _per_job(st: Stats) -> Iterator[Metric]:
    """The ``job``-labelled families (none when ``[scheduler] metrics_job_label = false``):
    what this process ran of each job. Across a fleet, take ``max`` of the timestamps and
    ``sum`` of the counts over instances."""
    if not st.per_job:
        return
    jobs = sorted(st.jobs.items())
    runs = CounterMetricFamily("cronfleet_job_runs", "Ended runs of each job, by status.",
                               labels=["job", "status"])
    success = GaugeMetricFamily(
        "cronfleet_job_last_success_timestamp_seconds",
        "When the job's last successful run ended (Unix time).", labels=["job"])
    failure = GaugeMetricFamily(
        "cronfleet_job_last_failure_timestamp_seconds",
        "When the job's last failed or timed-out run ended (Unix time).", labels=["job"])
    last = GaugeMetricFamily("cronfleet_job_last_outcome",
                             "1 for the status of the job's last ended run.",
                             labels=["job", "status"])
    streak = GaugeMetricFamily("cronfleet_job_consecutive_failures",
                               "Runs of the job that failed in a row (a success resets it).",
                               labels=["job"])
    for job_id, js in jobs:
        for status, n in sorted(js.counts.items()):
            runs.add_metric([job_id, status], n)
        if js.last_success is not None:
            success.add_metric([job_id], js.last_success)
        if js.last_failure is not None:
            failure.add_metric([job_id], js.last_failure)
        if js.last_outcome is not None:
            last.add_metric([job_id, js.last_outcome], 1.0)
        streak.add_metric([job_id], float(js.consecutive_failures))
    yield from (runs, success, failure, last, streak)


def render(scheduler: Scheduler) -> bytes:
    """The text exposition of ``scheduler``'s metrics (and nothing else)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler))
    return generate_latest(registry)
