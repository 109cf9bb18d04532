"""Bounded inputs: a request body over 1 MiB is a 413 before any route reads it; every job
field has a limit (422 naming the field); URLs, methods and headers are checked when the job
is created -- and a refused job leaves nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from api.conftest import Api, expect

URL = "http://127.0.0.1:9/x"


def job(**fields: Any) -> dict[str, Any]:
    http = {"url": URL, **fields.pop("http", {})}
    return {"id": "big", "schedule": "@daily", "http": http, **fields}


async def test_a_body_over_the_limit_is_413(api: Api) -> None:
    huge = job(http={"body": "x" * (2 * 1024 * 1024)})
    body = expect(await api.post("/api/jobs", "alpha-editor", json=huge), 413, "TOO_LARGE")
    assert body["message"].startswith("body: the request body is larger than 1048576 bytes")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"id": "big", "http": {"body": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}}'

    r = await api.post("/api/jobs", "alpha-editor", content=chunks(),
                       headers={"Content-Type": "application/json"})
    expect(r, 413, "TOO_LARGE")
    expect(await api.get("/api/jobs/big", "alpha-viewer"), 404)


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"http": {"headers": {f"X-H{i}": "v" for i in range(101)}}}, "http.headers",
     "at most 100 headers"),
    ({"http": {"headers": {"X-Big": "v" * 9000}}}, "http.headers.X-Big",
     "longer than 8192"),
    ({"http": {"headers": {"X-A": "a\r\nX-Evil: 1"}}}, "http.headers.X-A", "line break"),
    ({"http": {"headers": {"Bad Name": "v"}}}, "http.headers.Bad Name",
     "not a valid header name"),
    ({"http": {"method": "POST", "body": "b" * (300 * 1024)}}, "http.body",
     "longer than 262144"),
    ({"http": {"accept_status": [200] * 101}}, "http.accept_status", "at most 100"),
    ({"http": {"body_regex": "a" * 5000}}, "http.body_regex", "longer than 4096"),
    ({"config": {"blob": "c" * (100 * 1024)}}, "config", "larger than 65536"),
    ({"http": {"url": "http://"}}, "http.url", "no host"),
    ({"http": {"url": "http://example.com:99999/x"}}, "http.url", ""),
    ({"http": {"url": "https://exa mple.com/"}}, "http.url", "white space"),
    ({"http": {"method": "FETCH"}}, "http.method", "is not one of"),
    ({"jitter": "36500d"}, "jitter", "longer than the schedule's period (86400s)"),
])
async def test_each_field_has_a_limit(api: Api, fields: dict[str, Any], field: str,
                                      says: str) -> None:
    body = expect(await api.post("/api/jobs", "alpha-editor", json=job(**fields)), 422,
                  "VALIDATION_ERROR")
    errors = body["details"]["errors"]
    assert [e["field"] for e in errors] == [field], errors
    assert says in errors[0]["message"]
    expect(await api.get("/api/jobs/big", "alpha-viewer"), 404)
    audit = expect(await api.get("/api/audit", "alpha-admin"), 200)
    assert not [e for e in audit["items"] if e["target"] == "big"]


async def test_a_patch_is_bounded_too(api: Api) -> None:
    expect(await api.post("/api/jobs", "alpha-editor", json=job()), 201)
    body = expect(await api.patch("/api/jobs/big", "alpha-editor",
                                  json={"http": {"headers": {"X-A": "x\ny"}}}), 422)
    assert body["details"]["errors"][0]["field"] == "http.headers.X-A"
    got = expect(await api.get("/api/jobs/big", "alpha-viewer"), 200)
    assert got["spec"]["http"]["headers"] == {}
