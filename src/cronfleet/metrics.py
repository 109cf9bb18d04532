"""Prometheus metrics of one scheduler process, read from its counters at scrape time.

The loop only bumps plain integers and bucket counts (see ``Scheduler.stats``); this
collector turns them into metric families when Prometheus asks, so the hot path never
touches a lock or a metric object.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from cronfleet.scheduler import Histogram, Scheduler

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
        fires = CounterMetricFamily("cronfleet_fires", "Runs started by this process.")
        fires.add_metric([], st.fired)
        yield fires
        skips = CounterMetricFamily("cronfleet_skips", "Slots skipped, by reason.",
                                    labels=["reason"])
        for reason, n in sorted(st.skips.items()):
            skips.add_metric([reason], n)
        yield skips
        lost = CounterMetricFamily("cronfleet_claim_losses",
                                   "Slots another instance claimed first.")
        lost.add_metric([], st.claims_lost)
        yield lost
        errors = CounterMetricFamily("cronfleet_store_errors",
                                     "Store calls that failed (the loop carried on).")
        errors.add_metric([], st.store_errors)
        yield errors
        outcomes = CounterMetricFamily("cronfleet_run_outcomes", "Finished runs, by status.",
                                       labels=["status"])
        for status, n in sorted(st.outcomes.items()):
            outcomes.add_metric([status], n)
        yield outcomes
        late = HistogramMetricFamily("cronfleet_lateness_seconds",
                                     "Handler start minus the slot's nominal time.")
        late.add_metric([], _buckets(st.lateness), st.lateness.total)
        yield late
        dur = HistogramMetricFamily("cronfleet_run_duration_seconds", "Handler run time.")
        dur.add_metric([], _buckets(st.durations), st.durations.total)
        yield dur
        leases = GaugeMetricFamily("cronfleet_leases_held",
                                   "Runs of this process holding their job's lease.")
        leases.add_metric([], s.leases_held())
        yield leases
        jobs = GaugeMetricFamily("cronfleet_jobs", "Jobs known to this process.")
        jobs.add_metric([], len(s.jobs))
        yield jobs
        health = s.health()
        overdue = GaugeMetricFamily("cronfleet_loop_overdue_seconds",
                                    "How far the loop is behind its earliest due slot.")
        overdue.add_metric([], health["overdue"])
        yield overdue


def render(scheduler: Scheduler) -> bytes:
    """The text exposition of ``scheduler``'s metrics (and nothing else)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler))
    return generate_latest(registry)
