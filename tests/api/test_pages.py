"""The list pages answered without response validation (api/encode.py) are exactly what
validating them against their schema gives: the schema's fields in its order, defaults
for absent ones, no other key, nested schemas likewise."""

from __future__ import annotations

from typing import Any

import pytest

from cronfleet.api import schemas as S
from cronfleet.api.encode import shape

from .conftest import Api, expect


def validated(model: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = model.model_validate(data).model_dump(mode="json")
    return out


async def test_each_list_page_is_its_validated_form(api: Api) -> None:
    run = await api.trigger_done("alpha.report")
    pages = {
        "/api/jobs?limit=100": S.JobPage,
        "/api/runs?limit=100": S.RunPage,
        "/api/jobs/alpha.report/runs?limit=100": S.RunPage,
    }
    for path, model in pages.items():
        page = expect(await api.get(path, "alpha-viewer"), 200)
        assert page["items"], path
        assert page == validated(model, page), path
        assert list(page["items"][0]) == list(model.model_fields["items"].annotation
                                              .__args__[0].model_fields), path
    runs = expect(await api.get("/api/runs?limit=100", "alpha-viewer"), 200)
    assert [r["id"] for r in runs["items"]] == [run["id"]]


JOB = {
    "id": "a", "team": "t", "source": "code", "editable": False, "schedule": "@daily",
    "timezone": "UTC", "description": "", "when": "At 00:00 every day", "config": {"k": 1},
    "declared_enabled": True, "enabled": True, "paused": False, "next_run": None,
    "next_fire": None, "override": None, "lease": None,
    "last_run": {"id": 3, "slot": "2026-05-28T20:26:40+00:00", "status": "succeeded",
                 "success": True, "started_at": None, "finished_at": None,
                 "duration": 0.5, "lateness": None, "error": None, "reason": None,
                 "triggered_by": "schedule", "not_in_schema": 1},
}


@pytest.mark.parametrize("change", [
    {},                                                  # as built
    {"unexpected": "dropped"},                           # a key the schema has not
    {"declared_by": [{"instance": "i", "live": True, "source": "code", "declared_at": None,
                      "seen_at": None, "digest": "d", "extra": 2}]},  # a list of models
    {"conflict": {"fields": ["schedule"], "instances": [["i"], ["j"]], "x": 0}},
])
def test_shape_is_what_validation_answers(change: dict[str, Any]) -> None:
    data = {"items": [{**JOB, **change}], "next_cursor": None}
    try:
        want = validated(S.JobPage, data)
    except Exception as exc:  # the sample must be valid for the comparison to mean much
        pytest.fail(f"the sample is not a valid page: {exc}")
    assert shape(S.JobPage, data) == want
    assert list(shape(S.JobPage, data)["items"][0]) == list(want["items"][0])
