"""The dashboard's read model on the memory store: slot cells, percentiles, the jobs
page's query (filters, sorting, paging), next fires with DST marks, the run cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronfleet import FakeClock, Job
from cronfleet.dashboard import read
from cronfleet.model import RunRecord, RunStatus, TriggeredBy
from cronfleet.store.base import Finish
from cronfleet.store.memory import MemoryStore

T = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)


def run(job: str, slot: datetime, status: RunStatus, *, reason: str | None = None,
        secs: float | None = 1.0, manual: bool = False, rid: int | None = None,
        error: str | None = None) -> RunRecord:
    return RunRecord(rid, job, slot, TriggeredBy.SCHEDULE, status, reason=reason,
                     manual=manual, started_at=slot if secs is not None else None,
                     finished_at=slot + timedelta(seconds=secs) if secs is not None else None,
                     error=error)


def noop(ctx: Any) -> None:
    return None


def test_cells_say_what_the_ledger_says() -> None:
    slots = [T + timedelta(minutes=i) for i in range(7)]
    runs = [
        run("j", slots[0], RunStatus.SUCCEEDED, rid=1),
        run("j", slots[1], RunStatus.TIMED_OUT, rid=2, error="took too long"),
        run("j", slots[2], RunStatus.SKIPPED, reason="paused", rid=3, secs=None),
        run("j", slots[3], RunStatus.SKIPPED, reason="missed", rid=4, secs=None),
        run("j", slots[4], RunStatus.SKIPPED, reason="already_executing", rid=5, secs=None),
        run("j", slots[5], RunStatus.INTERRUPTED, rid=6),
        run("j", slots[5], RunStatus.SUCCEEDED, rid=9),  # the recovery: newest row wins
        run("j", slots[6], RunStatus.SUCCEEDED, rid=7, manual=True),  # not the slot's run
    ]
    cells = read.slot_cells(slots, runs)
    assert [c.state for c in cells] == ["succeeded", "failed", "paused", "missed", "skipped",
                                        "succeeded", "none"]
    assert cells[1].label == "timed_out in 1s: took too long"
    assert cells[4].label == "skipped (already_executing)"
    assert cells[5].run is not None and cells[5].run.id == 9
    assert cells[6].label == "no run recorded for this slot"


def test_percentiles_nearest_rank() -> None:
    runs = [run("j", T, RunStatus.SUCCEEDED, secs=float(i)) for i in range(1, 101)]
    runs.append(run("j", T, RunStatus.SKIPPED, secs=None))
    p = read.duration_percentiles(runs)
    assert (p["n"], p["p50"], p["p90"], p["p99"], p["max"]) == (100, 50.0, 90.0, 99.0, 100.0)
    assert read.duration_percentiles([])["p50"] is None


def test_query_from_params_refuses_nonsense() -> None:
    q = read.JobsQuery.from_params({"status": "exploded", "paused": "maybe", "sort": "drop",
                                    "page": "-3", "size": "7", "kind": "shell"})
    assert (q.status, q.paused, q.sort, q.page, q.size, q.kind) == ("", "", "id", 1, 50, "")
    q = read.JobsQuery.from_params({"q": " nightly ", "failing": "1", "page": "2"})
    assert q.q == "nightly" and q.failing and q.params() == {"q": "nightly", "failing": "1",
                                                             "page": 2}


def test_next_fires_mark_the_day_the_clocks_change() -> None:
    job = Job.create("30 2 * * *", noop, id="export", timezone="Europe/Paris")
    fires = read.next_fire_marks(job, datetime(2026, 3, 27, tzinfo=UTC), 3)
    marked = [(f["time"].date().isoformat(), f["dst"]) for f in fires if f["dst"]]
    # 02:30 does not exist on 2026-03-29 in Paris: the fire that day carries the mark
    assert marked and marked[0][0] == "2026-03-29" and marked[0][1] == "+1:00:00"


@pytest.fixture
async def store() -> Any:
    s = MemoryStore(clock=FakeClock((T - timedelta(days=2)).timestamp()))  # jobs made then
    await s.open()
    yield s
    await s.close()


async def test_jobs_page_filters_sorts_and_pages(store: MemoryStore) -> None:
    jobs = [Job.create("0 * * * *", noop, id=f"job-{i:03d}",
                       description="nightly export" if i % 2 else "sync",
                       team="alpha" if i < 120 else "beta") for i in range(130)]
    await store.ensure_jobs([j.id for j in jobs])
    await store.set_override("job-003", False, by="ops", note="disk full", until=None)
    await store.finish([Finish(run("job-005", T - timedelta(hours=1), RunStatus.FAILED,
                                   error="boom"))])
    await store.finish([Finish(run("job-006", T - timedelta(hours=1), RunStatus.SUCCEEDED))])
    page = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(), T)
    assert page.total == 120 and page.pages == 3 and len(page.rows) == 50
    assert page.rows[0].job.id == "job-000"
    last = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(page=3), T)
    assert [r.job.id for r in last.rows][-1] == "job-119" and len(last.rows) == 20
    rev = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(sort="-id", size=25), T)
    assert rev.rows[0].job.id == "job-119" and len(rev.rows) == 25
    paused = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(paused="yes"), T)
    assert [r.job.id for r in paused.rows] == ["job-003"] and paused.rows[0].paused
    failing = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(failing=True), T)
    assert [r.job.id for r in failing.rows] == ["job-005"]
    ok = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(status="succeeded"), T)
    assert [r.job.id for r in ok.rows] == ["job-006"]
    text = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(q="NIGHTLY"), T)
    assert text.total == 60
    latest = await read.jobs_page(store, jobs, "alpha", read.JobsQuery(sort="last"), T)
    assert {r.job.id for r in latest.rows[:2]} == {"job-005", "job-006"}
    beta = await read.jobs_page(store, jobs, "beta", read.JobsQuery(), T)
    assert beta.total == 10 and all(r.job.team == "beta" for r in beta.rows)
    # the strip: the last 30 slots of job-005 up to now (12:00 included); 11:00 failed
    row = failing.rows[0]
    assert len(row.strip) == 30 and row.strip[-1].slot == T
    assert row.strip[-2].state == "failed"
    assert {c.state for c in row.strip if c.slot != T - timedelta(hours=1)} == {"none"}


async def test_timeline_refresh_sees_a_run_finish(store: MemoryStore) -> None:
    job = Job.create("* * * * *", noop, id="minutely")
    await store.ensure_jobs([job.id])
    now = T
    slots = [now - timedelta(minutes=k) for k in range(2500)]
    await store.finish([Finish(run("minutely", s, RunStatus.SUCCEEDED)) for s in slots[1:]])
    going = run("minutely", slots[0], RunStatus.RUNNING, secs=None)
    await store.finish([Finish(going)])
    cache = read.RunCache()
    cells, cut = await read.timeline(store, job, now, "7d", since=now - timedelta(days=1),
                                     cache=cache)
    assert not cut and len(cells) == 1440
    assert cells[-1].state == "running" and cells[0].state == "succeeded"
    going.status, going.finished_at = RunStatus.FAILED, now + timedelta(seconds=3)
    await store.finish([Finish(going)])
    cells, _ = await read.timeline(store, job, now, "7d", since=now - timedelta(days=1),
                                   cache=cache)
    assert cells[-1].state == "failed"
    # the uncached read agrees
    plain, _ = await read.timeline(store, job, now, "7d", since=now - timedelta(days=1),
                                   cache=None)
    assert [c.state for c in plain] == [c.state for c in cells]
    week, cut = await read.timeline(store, job, now, "30d", cache=None)
    assert cut and len(week) == read.MAX_CELLS


async def test_runs_across_the_teams_jobs_paged(store: MemoryStore) -> None:
    await store.ensure_jobs(["a1", "a2", "b1"])
    rows = [run(j, T - timedelta(minutes=k), RunStatus.FAILED if k % 3 == 0
                else RunStatus.SUCCEEDED) for k in range(30) for j in ("a1", "a2", "b1")]
    await store.finish([Finish(r) for r in rows])
    mine = frozenset({"a1", "a2"})
    seen: list[RunRecord] = []
    cursor: str | None = None
    while True:
        page, cursor = await read.find_runs(store, mine, cursor=cursor, limit=25)
        seen.extend(page)
        if cursor is None:
            break
    assert len(seen) == 60 and {r.job_id for r in seen} == {"a1", "a2"}
    assert [r.slot for r in seen] == sorted((r.slot for r in seen), reverse=True)
    failed, _ = await read.find_runs(store, mine, status=RunStatus.FAILED,
                                     since=T - timedelta(minutes=10), limit=100)
    assert len(failed) == 8 and all(r.status is RunStatus.FAILED for r in failed)
    one, _ = await read.find_runs(store, mine, job_id="a2", limit=100)
    assert {r.job_id for r in one} == {"a2"} and len(one) == 30
    # a cursor that is not ours starts over rather than failing the page
    again, _ = await read.find_runs(store, mine, cursor="not-a-cursor", limit=5)
    assert again == seen[:5]
    # a team with most of the registry: read without the id list, the same pages
    for limit in (1, 7, 25, 60):
        wide: list[RunRecord] = []
        cursor = None
        while True:
            page, cursor = await read.find_runs(store, mine, cursor=cursor, limit=limit,
                                                all_ids=3)
            assert len(page) <= limit
            wide.extend(page)
            if cursor is None:
                break
        assert [r.id for r in wide] == [r.id for r in seen], limit  # no b1, none twice


def test_slot_cache_gives_what_between_gives_across_refreshes() -> None:
    """The cached slots equal a fresh ``between`` at every refresh: extended as time
    moves (over the night the clocks change), trimmed past the longest window, started
    afresh when the schedule changes or an earlier start is asked."""
    cache = read.SlotCache()
    job = Job.create("*/7 * * * *", noop, id="seven", timezone="Europe/Paris")
    end = datetime(2026, 3, 28, 20, 0, tzinfo=UTC)  # the clocks change at 01:00 UTC
    for step in range(0, 40 * 24 * 60, 337):  # 40 days in steps of 337 minutes
        t = end + timedelta(minutes=step)
        for window in ("24h", "7d"):
            start = t - read.WINDOWS[window]
            slots, stamps = cache.slots(job, start, t)
            want = list(job.schedule.between(start, t))
            assert slots == want, (t, window)
            assert stamps == [s.timestamp() for s in want]
    _, _, known, _ = cache.jobs[("seven", job.schedule.expr, "Europe/Paris")]
    assert len(known) <= 30 * 24 * 9 + 1  # trimmed to the longest window (9 an hour)
    # an edited schedule is another key; an earlier start recomputes
    other = Job.create("*/5 * * * *", noop, id="seven", timezone="Europe/Paris")
    t = end + timedelta(days=3)
    assert cache.slots(other, t - timedelta(hours=1), t)[0] == list(
        other.schedule.between(t - timedelta(hours=1), t))
    early = t - timedelta(days=20)
    assert cache.slots(job, early, t)[0] == list(job.schedule.between(early, t))


async def test_run_cache_reads_only_new_or_open_runs(store: MemoryStore) -> None:
    job = Job.create("* * * * *", noop, id="m")
    await store.ensure_jobs([job.id])
    slots = [T - timedelta(minutes=k) for k in range(3000)]
    await store.finish([Finish(run("m", s, RunStatus.SUCCEEDED)) for s in slots[2:]])
    going = run("m", slots[1], RunStatus.RUNNING, secs=None)
    await store.finish([Finish(going)])
    calls: list[tuple[Any, Any]] = []
    real = store.list_runs

    async def counted(job_id: Any, **kw: Any) -> Any:
        calls.append((kw.get("limit"), kw.get("before_id")))
        return await real(job_id, **kw)

    store.list_runs = counted  # type: ignore[method-assign]
    cache = read.RunCache()
    cells, _ = await read.timeline(store, job, T, "24h", cache=cache)
    assert [c.state for c in cells[-3:]] == ["succeeded", "running", "none"]
    first = len(calls)
    calls.clear()
    # a refresh: one small read from the top, no reach-back (nothing older than the window
    # is needed, and the oldest run is known)
    cells, _ = await read.timeline(store, job, T, "24h", cache=cache)
    assert calls == [(100, None)], calls
    # the running run finishes and the next slot gets a failure: both show
    going.status, going.finished_at = RunStatus.SUCCEEDED, T
    await store.finish([Finish(going), Finish(run("m", slots[0], RunStatus.FAILED))])
    cells, _ = await read.timeline(store, job, T, "24h", cache=cache)
    assert [c.state for c in cells[-3:]] == ["succeeded", "succeeded", "failed"]
    # the cache agrees with an uncached read, slot for slot, over 7 days
    cached, _ = await read.timeline(store, job, T, "7d", cache=cache)
    plain, _ = await read.timeline(store, job, T, "7d", cache=None, slot_cache=None)
    assert cached.states == plain.states and cached.run_ids == plain.run_ids
    assert first >= 2 and cached.states.count("succeeded") == 2999


async def test_fleet_rows(store: MemoryStore) -> None:
    from cronfleet.store.base import Instance

    clock = store.clock
    assert isinstance(clock, FakeClock)
    a = Instance("a-1", "host-a", 11, "all", "1.2.3")
    b = Instance("b-1", "host-b", 22, "worker", "1.2.3")
    await store.heartbeat(a, ttl=15)
    await store.heartbeat(b, ttl=15)
    clock.advance(10)
    await store.heartbeat(a, ttl=15)
    clock.advance(8)  # b: 18 s without a heartbeat, past the ttl
    running = [RunRecord(1, "j", T, TriggeredBy.SCHEDULE, RunStatus.RUNNING, instance_id="a-1"),
               RunRecord(2, "k", T, TriggeredBy.SCHEDULE, RunStatus.RUNNING, instance_id="a-1"),
               RunRecord(3, "l", T, TriggeredBy.SCHEDULE, RunStatus.RUNNING, instance_id="b-1")]
    rows = await read.fleet(store, 15, "a-1", lambda: clock.now() + 2.5, running)
    assert rows is not None
    by = {r.instance.instance_id: r for r in rows}
    assert [r.instance.instance_id for r in rows] == ["a-1", "b-1"]  # live first
    assert by["a-1"].instance.live and not by["b-1"].instance.live
    assert by["a-1"].heartbeat_age == pytest.approx(8) and by["b-1"].heartbeat_age == (
        pytest.approx(18))
    assert (by["a-1"].leases, by["b-1"].leases) == (2, 1)
    assert by["a-1"].skew == pytest.approx(2.5) and by["b-1"].skew is None
    assert by["a-1"].me and not by["b-1"].me


async def test_run_cache_first_read_stops_at_the_window(store: MemoryStore) -> None:
    """A job with a long history: the first view reads back to the window's start, not
    the whole ledger; a longer window reads further back when asked."""
    job = Job.create("* * * * *", noop, id="long")
    await store.ensure_jobs([job.id])
    slots = [T - timedelta(minutes=k) for k in range(20_000)]  # ~14 days
    # written as time went: older slots have lower ids
    await store.finish([Finish(run("long", s, RunStatus.SUCCEEDED)) for s in reversed(slots)])
    read_rows: list[int] = []
    real = store.list_runs

    async def counted(job_id: Any, **kw: Any) -> Any:
        page = await real(job_id, **kw)
        read_rows.append(len(page))
        return page

    store.list_runs = counted  # type: ignore[method-assign]
    cache = read.RunCache()
    day, _ = await read.timeline(store, job, T, "24h", cache=cache)
    assert day.states.count("succeeded") == 1440
    assert sum(read_rows) <= 1440 + read.PAGE  # not the 20,000 rows
    read_rows.clear()
    week, _ = await read.timeline(store, job, T, "7d", cache=cache)
    assert week.states.count("succeeded") == read.MAX_CELLS
    assert sum(read_rows) <= read.MAX_CELLS - 1440 + 2 * read.PAGE + 100


async def test_run_cache_reads_a_store_without_the_narrow_read(store: MemoryStore) -> None:
    """A store of another author (no ``slot_runs``) is read through its history: the same
    cells as the narrow read."""
    from cronfleet.store.base import SlotRunStore

    class HistoryOnly:
        def __init__(self, inner: MemoryStore) -> None:
            self.list_runs = inner.list_runs

    job = Job.create("* * * * *", noop, id="h")
    await store.ensure_jobs([job.id])
    slots = [T - timedelta(minutes=k) for k in range(3000)]
    await store.finish([Finish(run("h", s, RunStatus.FAILED if k % 7 == 0
                                   else RunStatus.SUCCEEDED)) for k, s in enumerate(slots)])
    plain = HistoryOnly(store)
    assert not isinstance(plain, SlotRunStore) and isinstance(store, SlotRunStore)
    old, _ = await read.timeline(plain, job, T, "7d", cache=read.RunCache())  # type: ignore[arg-type]
    new, _ = await read.timeline(store, job, T, "7d", cache=read.RunCache())
    assert old.states == new.states and old.run_ids == new.run_ids
    assert old.states.count("failed") == 429 and old.states.count("succeeded") == 2571


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_overview_reads_newest_runs_narrowly_with_the_same_figures(
        kind: str, tmp_path: Any) -> None:
    """The overview reads the newest runs of note narrowly (``last_slot_runs`` with
    ``since``: failed, or in the heat map's hour): its counts, failing jobs and heat map
    order are those every job's whole newest row (``last_runs``) gives."""
    from cronfleet.store.base import SlotRunStore, slot_runs_of
    from cronfleet.store.sqlite import SQLiteStore

    clock = FakeClock((T - timedelta(days=2)).timestamp())
    store: Any = MemoryStore(clock=clock) if kind == "memory" else SQLiteStore(
        tmp_path / "o.db", clock=clock)
    await store.open()
    jobs = [Job.create("* * * * *", noop, id=f"j{i}") for i in range(9)]
    await store.ensure_jobs([j.id for j in jobs])
    m = timedelta(minutes=1)
    history = {
        "j0": [(T - 5 * m, RunStatus.SUCCEEDED), (T - 2 * m, RunStatus.FAILED)],
        "j1": [(T - 5 * m, RunStatus.FAILED), (T - 2 * m, RunStatus.SUCCEEDED)],
        "j2": [(T - 130 * m, RunStatus.TIMED_OUT)],  # failing, outside the hour
        # a backfilled older slot written last: the newest run is the highest id
        "j3": [(T - 3 * m, RunStatus.SUCCEEDED), (T - 40 * m, RunStatus.INTERRUPTED)],
        "j4": [(T - 4 * m, RunStatus.FAILED), (T - 1 * m, RunStatus.SKIPPED)],
        "j6": [(T - 180 * m, RunStatus.SUCCEEDED)],
        "j7": [(T - 7 * m, RunStatus.CANCELLED)],
        "j8": [(T - 9 * m, RunStatus.SUCCEEDED), (T - 8 * m, RunStatus.FAILED)],
    }  # j5: no run
    for job_id, runs in history.items():
        for slot, status in runs:
            await store.finish([Finish(run(job_id, slot, status,
                                           reason="paused" if status is RunStatus.SKIPPED
                                           else None))])

    class WholeRows:  # the store as the overview read it before: whole rows
        def __init__(self, inner: Any) -> None:
            self.read_overrides = inner.read_overrides
            self.last_runs = inner.last_runs
            self.list_runs = inner.list_runs
            self.find_runs = inner.find_runs

    old_store = WholeRows(store)
    assert isinstance(store, SlotRunStore) and not isinstance(old_store, SlotRunStore)
    try:
        new = await read.overview(store, jobs, T)
        old = await read.overview(old_store, jobs, T)  # type: ignore[arg-type]
        whole = await store.last_runs([j.id for j in jobs])
        assert new["lasts"] == old["lasts"]
        # only the newest runs of note: failed, or in the heat map's hour
        hour = read.heat_start(T)
        assert {j: (r.id, r.at, r.status) for j, r in new["lasts"].items()} == {
            j: (r.id, r.slot.timestamp(), r.status) for j, r in whole.items()
            if r.slot.timestamp() >= hour or r.status in read.FAILED_STATUSES}
        assert set(whole) - set(new["lasts"]) == {"j6"}
        every = {j: s for j, r in whole.items() for s in slot_runs_of([r])}
        figures = ("jobs", "paused", "failing", "failing_ids", "running_n", "failures")
        assert [new[k] for k in figures] == [old[k] for k in figures]
        assert new["failing_ids"] == ["j0", "j2", "j3", "j8"]
        for window in read.ACTIVITY:
            a_new = await read.activity(store, jobs, len(jobs), T, new["lasts"],
                                        window=window)
            a_old = await read.activity(old_store, jobs, len(jobs), T,  # type: ignore[arg-type]
                                        old["lasts"], window=window)
            assert a_new == a_old
            # the heat map's order is the one every job's newest run gives
            assert a_new == await read.activity(store, jobs, len(jobs), T, every,
                                                window=window)
        rows = [r.job_id for r in a_new.rows]
        # trouble of the hour first, then failing now, then ran within the hour, then by id
        assert rows == ["j0", "j3", "j8", "j1", "j4", "j2", "j7", "j5", "j6"]
        # in pages of 2 rows (the jobs of note sorted, the rest by id as far as needed)
        paged: list[str] = []
        for p in range(1, 6):
            a = await read.activity(store, jobs[::-1], len(jobs), T, new["lasts"], page=p,
                                    size=2)
            assert (a.page, a.pages, a.total) == (p, 5, 9)
            paged += [r.job_id for r in a.rows]
        assert paged == rows
    finally:
        await store.close()
