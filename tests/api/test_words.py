"""Schedules written as sentences over the API: preview and stored jobs."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from cronfleet.catalog import build_job
from cronfleet.clock import FakeClock

from .conftest import Api, expect

HOOK = "http://127.0.0.1:9/hook"  # never called: nothing is due on the fake clock


async def test_preview_of_a_sentence(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "du lundi au vendredi à 8h30", "timezone": "Europe/Paris",
        "after": "2026-05-29T12:00:00+02:00", "count": 2}), 200)
    assert body == {
        "valid": True, "expr": "30 8 * * 1-5", "sentence": "du lundi au vendredi à 8h30",
        "timezone": "Europe/Paris", "description": "At 08:30, Monday through Friday",
        "next": ["2026-06-01T08:30:00+02:00", "2026-06-02T08:30:00+02:00"],
        "excluded": [], "done": False, "dst": [],
    }


async def test_preview_of_a_bad_sentence_names_the_word(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer",
                                 json={"expr": "every tusday at 9am"}), 422, "INVALID_CRON")
    [error] = body["details"]["errors"]
    assert error["cron_field"] == "sentence" and error["column"] == 7
    assert "did you mean 'Tuesday'?" in body["message"]


async def test_a_stored_job_keeps_its_sentence(api: Api) -> None:
    body = await api.create_job("alpha.words", HOOK, who="alpha-editor",
                                schedule="every weekday at 9am", timezone="Europe/Paris")
    assert body["schedule"] == "0 9 * * 1-5"
    assert body["schedule_text"] == "every weekday at 9am"
    assert body["spec"]["schedule"] == "every weekday at 9am"  # stored as written
    job = api.scheduler.jobs["alpha.words"]
    assert job.schedule.expr == "0 9 * * 1-5" and job.schedule_text == "every weekday at 9am"


async def test_preview_of_a_one_off_in_words_is_read_at_after(api: Api) -> None:
    body = expect(await api.post("/api/cron/preview", "alpha-viewer", json={
        "expr": "demain à 17h", "timezone": "Europe/Paris",
        "after": "2026-12-01T16:30:00+01:00", "count": 3}), 200)
    assert body["expr"] == "at 2026-12-02T17:00:00+01:00"
    assert body["sentence"] == "demain à 17h"
    assert body["next"] == ["2026-12-02T17:00:00+01:00"]


async def test_a_stored_one_off_in_words_is_stored_as_its_instant(api: Api) -> None:
    """Read at creation on the scheduler's clock (T0 = 2026-05-28T22:26:40 in Paris), and
    stored as the instant: reading the definition again later never moves it."""
    body = await api.create_job("alpha.once", HOOK, who="alpha-editor",
                                schedule="tomorrow at 5pm", timezone="Europe/Paris")
    assert body["schedule"] == "at 2026-05-29T17:00:00+02:00"
    assert "schedule" not in body["spec"]
    assert body["spec"]["at"] == "2026-05-29T17:00:00+02:00"
    clock = api.scheduler.clock
    assert isinstance(clock, FakeClock)
    clock.advance(3 * 86400)  # days later: the stored definition is read again
    d = await api.catalog.api_store.job_def("alpha.once")
    assert d is not None
    job = build_job(d.spec, team=d.team)  # what every scheduler start does with it
    assert job.schedule.expr == "at 2026-05-29T17:00:00+02:00"
    changed = expect(await api.patch("/api/jobs/alpha.once", "alpha-editor",
                                     json={"schedule": "in 2 hours"}), 200)
    now = clock.now()
    assert changed["spec"]["at"] == datetime.fromtimestamp(now + 7200, ZoneInfo(
        "Europe/Paris")).replace(microsecond=0).isoformat()
