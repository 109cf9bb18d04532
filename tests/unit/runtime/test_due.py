"""Due.first_all (the start-up path) queues every job exactly as Due.first does one."""

from __future__ import annotations

from datetime import UTC, datetime

from cronfleet.model import Job, JobState
from cronfleet.runtime.due import Due

T = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


async def _noop() -> None:
    return None


def test_first_all_matches_first_for_shared_and_distinct_schedules() -> None:
    jobs = [Job.create(f"{i % 3} * * * * *", _noop, id=f"c{i}") for i in range(9)]
    jobs += [Job.create("7s", _noop, id="every7"), Job.create("0 9 * * *", _noop, id="daily")]
    created = datetime.fromtimestamp(T.timestamp() - 30, UTC)
    states = {j.id: JobState(job_id=j.id, created_at=created) for j in jobs[:4]}
    states["c4"] = JobState(job_id="c4", created_at=created,
                            last_slot=datetime.fromtimestamp(T.timestamp() - 61, UTC))
    states["daily"] = JobState(job_id="daily", created_at=created)
    now = T.timestamp()
    one, all_ = Due(), Due()
    for job in jobs:
        one.first(job, states.get(job.id), now)
    all_.first_all(jobs, states, now)
    assert all_.next == one.next and all_.watermark == one.watermark
    assert all_.buckets == one.buckets and sorted(all_.heap) == sorted(one.heap)
    # jobs sharing a schedule and a watermark share the slot; another watermark does not
    assert all_.next["c0"] == all_.next["c3"] == T.timestamp() - 30 + 30
    assert all_.next["c4"] == T.timestamp() - 60 + 1
    assert all_.next["c7"] == T.timestamp() + 1  # no state row: its watermark is now
