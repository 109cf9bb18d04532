"""Schedules written as sentences over the API: preview and stored jobs."""

from __future__ import annotations

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
