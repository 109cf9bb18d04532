"""Per-job metrics on /metrics: run counts by status, last success / failure timestamps,
last outcome and consecutive failures, labelled ``job``; ``metrics_job_label=False``
(``[scheduler] metrics_job_label = false``) keeps nothing per job."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cronfleet import FakeClock, RunContext, Scheduler
from cronfleet.config import load_config
from cronfleet.metrics import render
from cronfleet.store import MemoryStore

T0 = 1_780_000_000.0


def _samples(s: Scheduler) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(render(s).decode()):
        for smp in fam.samples:
            if smp.name.startswith("cronfleet_job_"):
                out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def _scheduler(clock: FakeClock, **kw: object) -> tuple[Scheduler, list[bool]]:
    s = Scheduler(store=MemoryStore(), clock=clock, **kw)  # type: ignore[arg-type]
    plan = [True, False, False, True, False, False]  # succeed, fail, fail, succeed, fail...

    @s.job("@daily", id="flaky")
    def flaky(ctx: RunContext) -> None:
        if not plan.pop(0):
            raise RuntimeError("boom")

    @s.job("@daily", id="fine")
    def fine(ctx: RunContext) -> None:
        return None

    return s, plan


async def test_per_job_outcomes_and_streaks() -> None:
    clock = FakeClock(T0)
    s, plan = _scheduler(clock)
    ended = []
    for _ in range(6):
        clock.advance(60)
        await s.trigger_async("flaky")
        ended.append(clock.now())
    await s.trigger_async("fine")
    assert plan == []
    m = _samples(s)
    job = (("job", "flaky"),)
    assert m[("cronfleet_job_runs_total", (("job", "flaky"), ("status", "succeeded")))] == 2
    assert m[("cronfleet_job_runs_total", (("job", "flaky"), ("status", "failed")))] == 4
    assert m[("cronfleet_job_runs_total", (("job", "fine"), ("status", "succeeded")))] == 1
    assert m[("cronfleet_job_last_success_timestamp_seconds", job)] == ended[3]
    assert m[("cronfleet_job_last_failure_timestamp_seconds", job)] == ended[5]
    assert m[("cronfleet_job_consecutive_failures", job)] == 2
    assert m[("cronfleet_job_consecutive_failures", (("job", "fine"),))] == 0
    assert m[("cronfleet_job_last_outcome", (("job", "flaky"), ("status", "failed")))] == 1
    assert ("cronfleet_job_last_failure_timestamp_seconds", (("job", "fine"),)) not in m


async def test_the_switch_drops_the_job_label(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    s, _ = _scheduler(clock, metrics_job_label=False)
    await s.trigger_async("flaky")
    await s.trigger_async("fine")
    assert _samples(s) == {}
    assert b'cronfleet_run_outcomes_total{status="succeeded"} 2.0' in render(s)
    (tmp_path / "cronfleet.toml").write_text("[scheduler]\nmetrics_job_label = false\n")
    loaded = load_config(str(tmp_path / "cronfleet.toml")).load(strict=True)
    with loaded:
        assert loaded.scheduler(timers=False).stats.per_job is False
