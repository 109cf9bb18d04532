"""views.py: the one read model of a job and its runs (CLI and API), with tiny fake
stores -- the views only read ``read_states``, ``last_runs`` / ``list_runs``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronfleet.cron import parse
from cronfleet.model import Job, JobState, RunRecord, RunStatus, TriggeredBy
from cronfleet.views import (
    fire_times,
    job_view,
    job_views,
    jobs_by_key,
    last_runs,
    next_fires,
    period_of,
    run_stats,
    state_view,
)

NOW = datetime(2026, 5, 28, 20, 0, tzinfo=UTC)


def job(job_id: str = "j", schedule: str = "0 9 * * *", **kw: Any) -> Job:
    return Job.create(schedule, None, id=job_id, **kw)


def run(job_id: str, run_id: int, status: RunStatus = RunStatus.SUCCEEDED,
        seconds: float | None = None) -> RunRecord:
    started = NOW - timedelta(minutes=run_id)
    return RunRecord(run_id, job_id, started, TriggeredBy.SCHEDULE, status,
                     started_at=started,
                     finished_at=None if seconds is None else started + timedelta(seconds=seconds))


class ListRunsStore:
    """What the views read: state rows, and (BatchedStore) every job's last run at once."""

    def __init__(self, runs: Sequence[RunRecord]) -> None:
        self.runs = list(runs)
        self.calls: list[Any] = []

    async def read_states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        self.calls.append(("read_states", list(job_ids)))
        return {}

    async def list_runs(self, job_id: str | None = None, *, limit: int = 50,
                        **kw: Any) -> list[RunRecord]:
        self.calls.append(("list_runs", job_id))
        return [r for r in self.runs if r.job_id == job_id][:limit]


class BatchedStore(ListRunsStore):
    async def last_runs(self, job_ids: Sequence[str]) -> dict[str, RunRecord]:
        self.calls.append(("last_runs", list(job_ids)))
        return {r.job_id: r for r in reversed(self.runs) if r.job_id in job_ids}


def test_fire_times_stop_where_the_schedule_ends() -> None:
    daily = parse("0 9 * * *")
    assert [t.day for t in fire_times(daily, NOW, 3)] == [29, 30, 31]
    # the calendar ends on 9999-12-31: the last two days still fire, then nothing
    assert [t.day for t in fire_times(daily, datetime(9999, 12, 29, 12, tzinfo=UTC), 3)] == [
        30, 31]
    end = datetime(9999, 12, 31, 12, tzinfo=UTC)
    assert fire_times(daily, end, 3) == []  # no further fire: "never", not an error
    assert next_fires(job(), end, 1) == []
    assert period_of(job(), end) is None


def test_period_of_cron_and_interval() -> None:
    assert period_of(job(schedule="*/5 * * * *"), NOW) == 300
    assert period_of(job(schedule="90s"), NOW) == 90


def test_last_runs_batched_in_one_call() -> None:
    store = BatchedStore([run("a", 2), run("a", 1), run("b", 3)])
    found = asyncio.run(last_runs(store, ["a", "b", "c"]))
    assert {k: v.id for k, v in found.items()} == {"a": 2, "b": 3}
    assert store.calls == [("last_runs", ["a", "b", "c"])]


def test_job_views_read_states_once_and_last_runs_once() -> None:
    store = BatchedStore([run("a", 1, RunStatus.FAILED)])
    views = asyncio.run(job_views(store, [job("a"), job("b")], NOW))
    assert [v.last.id if v.last else None for v in views] == [1, None]
    assert [c[0] for c in store.calls] == ["read_states", "last_runs"]
    d = views[0].to_dict(NOW)
    assert d["last_run"]["status"] == "failed" and d["next_run"] == "2026-05-29T09:00:00+00:00"


@pytest.mark.parametrize(("override", "until", "paused", "enabled"), [
    (None, None, False, True),
    (False, None, True, False),
    (False, NOW - timedelta(seconds=1), False, True),  # an expired pause
    (False, NOW + timedelta(hours=1), True, False),
    (True, None, False, True),
])
def test_paused_and_enabled(override: bool | None, until: datetime | None, paused: bool,
                            enabled: bool) -> None:
    state = JobState("j", enabled_override=override, override_until=until, override_by="ops")
    view = job_view(job(), state, None, NOW)
    assert view.paused(NOW) is paused
    assert view.enabled(NOW) is enabled
    assert state_view(job(), state, NOW)["enabled"] is enabled


def test_declared_disabled_is_not_paused() -> None:
    view = job_view(job(enabled=False), None, None, NOW)
    assert view.paused(NOW) is False and view.enabled(NOW) is False


def test_run_stats() -> None:
    runs = [run("a", 1, seconds=2.0), run("a", 2, RunStatus.FAILED, seconds=4.0),
            run("a", 3, RunStatus.SKIPPED)]
    stats = run_stats(runs)
    assert stats["runs"] == 3
    assert stats["by_status"] == {"succeeded": 1, "failed": 1, "skipped": 1}
    assert stats["success_rate"] == 0.5
    assert stats["avg_duration"] == 3.0 and stats["max_duration"] == 4.0
    assert run_stats([])["success_rate"] is None


def test_jobs_by_key_filters_and_pages() -> None:
    jobs = [job("c", team="t"), job("a", team="t"), job("b", team="u"),
            job("d", team="t", description="Nightly export")]
    store = BatchedStore([run("a", 1, RunStatus.FAILED), run("c", 2)])

    def find(limit: int = 50, **kw: Any) -> tuple[list[str], str | None]:
        views, nxt = asyncio.run(jobs_by_key(store, jobs, None, lambda d: None, NOW,
                                             team="t", limit=limit, **kw))
        return [v.job.id for v in views], nxt

    assert find() == (["a", "c", "d"], None)
    assert find(limit=2) == (["a", "c"], "c")
    assert find(after="a", limit=2) == (["c", "d"], None)
    assert find(prefix="c") == (["c"], None)
    assert find(text="NIGHTLY") == (["d"], None)
    assert find(statuses=[RunStatus.FAILED]) == (["a"], None)
    assert find(paused=True) == ([], None)
    assert find(where=lambda j: j.id != "c") == (["a", "d"], None)
    store.calls.clear()
    find(limit=1)
    assert store.calls[-1] == ("last_runs", ["a"])  # only what is shown


def stored(job_id: str, team: str = "t", description: str = "") -> Any:
    from cronfleet.store.side import JobDef

    return JobDef(job_id, team, {"id": job_id, "description": description}, 1, NOW, NOW,
                  None, None)


def test_jobs_by_key_merges_stored_definitions_and_bounds_a_scan() -> None:
    """Declared jobs merged with stored definitions read by key, in id order, each once
    (a declared job wins an id a definition also has), built only when shown; a filtered
    page looks at ``scan`` jobs at most and says where to go on."""
    from cronfleet.store.memory_side import MemoryApiStore, _ApiRows

    rows = _ApiRows()
    for d in (stored("b1"), stored("c", description="nightly"), stored("e"),
              stored("a0", team="u"), stored("z", description="NIGHTLY too")):
        rows.defs[d.id] = d
    api = MemoryApiStore(rows)
    declared = [job("a", team="t"), job("c", team="t"), job("d", team="t",
                                                            description="nightly")]
    built: list[str] = []

    def build(d: Any) -> Job:
        built.append(d.id)
        return job(d.id, team=d.team, description=d.spec["description"])

    store = BatchedStore([])

    def walk(limit: int, **kw: Any) -> tuple[list[str], int]:
        out: list[str] = []
        after, pages = "", 0
        while True:
            views, nxt = asyncio.run(jobs_by_key(store, declared, api, build, NOW,
                                                 team="t", limit=limit, after=after, **kw))
            out += [v.job.id for v in views]
            pages += 1
            if nxt is None:
                return out, pages
            after = nxt

    for limit in (1, 2, 3, 10):
        assert walk(limit)[0] == ["a", "b1", "c", "d", "e", "z"], limit
    declared_c = next(j for j in declared if j.id == "c")
    views, _ = asyncio.run(jobs_by_key(store, declared, api, build, NOW, team="t",
                                       limit=10, prefix="c"))
    assert [v.job for v in views] == [declared_c]  # the declared one, not the definition
    built.clear()
    asyncio.run(jobs_by_key(store, declared, api, build, NOW, team="t", limit=2))
    assert built == ["b1"]  # a, b1: only the page's stored jobs are built
    # a scan of 2 jobs a request: pages (some empty) with a cursor, every match once
    found, pages = walk(10, text="nightly", scan=2)
    assert found == ["d", "z"] and pages == 4  # a b1 | c d | e z | (the end)
    assert walk(10, text="nightly")[0] == ["d", "z"]


def test_composed_schedules_in_views() -> None:
    office = Job.create(["0 9 * * 1-5", "0 12 * * 6"], None, id="o",
                        timezone="Europe/Paris", exclude=["05-29"])
    # NOW is Thursday 2026-05-28 20:00 UTC; Friday 29th is excluded
    assert [t.isoformat() for t in next_fires(office, NOW, 2)] == [
        "2026-05-30T12:00:00+02:00", "2026-06-01T09:00:00+02:00"]
    v = job_view(office, None, None, NOW)
    d = v.to_dict(NOW)
    assert d["schedule"] == "0 12 * * 6 | 0 9 * * 1-5 | except 05-29"
    assert d["next_run"] == "2026-05-30T12:00:00+02:00" and not v.done(NOW)
    assert d["when"].endswith("; except 05-29")
    once = Job.create(None, None, id="once", at="2026-05-28T21:00:00+00:00")
    assert job_view(once, None, None, NOW).next_fire == datetime(2026, 5, 28, 21,
                                                                 tzinfo=UTC)
    later = NOW + timedelta(hours=2)
    v = job_view(once, None, None, later)
    assert v.next_fire is None and v.done(later)  # done, not merely "never"
    assert v.to_dict(later)["next_run"] is None
    assert period_of(once, NOW) is None
    assert not job_view(job(), None, None, datetime(9999, 12, 31, 12, tzinfo=UTC)).done(NOW)
