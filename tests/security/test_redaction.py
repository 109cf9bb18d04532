"""Redaction by construction: awkward secret values x every place a secret can go x every
way a target echoes it, then a search of every log line, API answer, CLI output and stored
row (the SQLite file, a pg_dump of the PostgreSQL schema, every key and value under the
Redis prefix) for every encoding of every value:
0 hits."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from api.conftest import Api, expect
from cronfleet.cli import main
from cronfleet.secrets import Redactor, redact
from store.pg import pg_url

from .echo import EchoServer, forms

VALUES = [
    "zq0-crlf\r\nX-Evil: 1",  # CR/LF: would be a header injection
    "zq1 sp ace|{}|pipes",  # space and |{} (httpx normalises them in a URL)
    "zq2-quo\"te's-\"x\"",  # quotes
    "zq3/sl/ash\\back\\",  # slashes and backslashes
    "zq4%41%2Fpct%",  # percent signs (already-encoded looking)
    "zq5+plus&and=eq+",  # + & =
    "zq6abc/def?x=1&y=2#frag",  # a URL fragment of its own
    "zq7-nön-äscii-é-😀-ü",  # non-ASCII, a character outside the BMP
    "zq8-" + "L0ng/V+al%ue " * 200 + "end",  # very long
]
PLACES = ("header", "query", "path", "json", "form")


def spec(i: int, place: str, base: str) -> dict[str, Any]:
    ref = f"${{secrets.S{i}}}"
    http: dict[str, Any] = {"url": f"{base}/v/{i}/p", "method": "GET"}
    if place == "header":
        http["headers"] = {"X-Token": ref}
    elif place == "query":
        http["url"] = f"{base}/v/{i}/p?q={ref}&after=1"
    elif place == "path":
        http["url"] = f"{base}/v/{i}/p/{ref}/end"
    elif place == "json":
        http.update(method="POST", body=f'{{"v": "{ref}"}}',
                    headers={"Content-Type": "application/json"})
    else:
        http.update(method="POST", body=f"v={ref}&w=1",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    return {"id": f"leak-{place}-{i}", "schedule": "@daily", "http": http}


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer(VALUES)
    yield server
    server.close()


def cli(env: dict[str, str], *args: str) -> str:
    kwargs = {"mix_stderr": False} if "mix_stderr" in inspect.signature(
        CliRunner).parameters else {}
    result = CliRunner(**kwargs).invoke(main, list(args), env=env, catch_exceptions=False)
    return result.output + (result.stderr or "")


def stored_bytes(store_url: str, store_kind: str, schema: str | None) -> bytes:
    if store_kind == "sqlite":
        path = Path(store_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal"))
                        if p.exists())
    if store_kind == "redis":  # every key under the test's prefix, every value in it
        import redis

        from cronfleet.store.url import parse_store_url

        parsed = parse_store_url(store_url)
        client = redis.Redis.from_url(parsed.conninfo, socket_timeout=30)
        out = []
        for key in client.scan_iter(match=parsed.prefix + "*", count=1000):
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"hash":
                out += [x for kv in client.hgetall(key).items() for x in kv]
            elif kind == b"zset":
                out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
            elif kind == b"set":
                out += list(client.smembers(key))
            else:
                raise AssertionError(f"unexpected {kind!r} key {key!r}")
            out.append(key)
        client.close()
        assert out, "nothing stored under the prefix"
        return b"\n".join(out)
    dump = subprocess.run(["pg_dump", "--no-owner", f"--schema={schema}", pg_url()],
                          capture_output=True, check=True, timeout=120)
    return dump.stdout


async def test_no_secret_value_leaks_in_any_encoding(
        api: Api, echo: EchoServer, secret_key: str, store_url: str, store_kind: str,
        pg_schema: str | None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    base = f"http://127.0.0.1:{echo.port}"
    for i, value in enumerate(VALUES):
        await api.runtime.vault.set(f"S{i}", value, "alpha", hosts=["127.0.0.1"])  # type: ignore[union-attr]
    runs: list[dict[str, Any]] = []
    for place in PLACES:
        for i in range(len(VALUES)):
            expect(await api.post("/api/jobs", "alpha-editor", json=spec(i, place, base)), 201)
            runs.append(await api.trigger_done(f"leak-{place}-{i}"))
    # the corpus did go out: every request but the two that cannot be headers reached the
    # target (those two were refused before a request was built, saying why) ...
    failed = {r["job_id"]: r for r in runs if r["status"] != "succeeded"}
    assert set(failed) == {"leak-header-0", "leak-header-7"}, {
        k: v["error"] for k, v in failed.items()}
    assert "header 'X-Token': the value contains a line break or NUL; nothing was sent" in \
        failed["leak-header-0"]["error"]
    assert "header 'X-Token': the value is not ASCII text" in failed["leak-header-7"]["error"]
    assert echo.requests == len(PLACES) * len(VALUES) - 2
    # ... and its answers were stored (redacted)
    assert all("[REDACTED]" in json.dumps(r) for r in runs if r["status"] == "succeeded")

    texts: dict[str, str] = {"log": caplog.text}
    for r in runs:
        texts[f"run {r['id']}"] = (await api.get(f"/api/runs/{r['id']}", "alpha-viewer")).text
        texts[f"runs {r['job_id']}"] = (
            await api.get(f"/api/jobs/{r['job_id']}/runs", "alpha-viewer")).text
        texts[f"job {r['job_id']}"] = (
            await api.get(f"/api/jobs/{r['job_id']}", "alpha-viewer")).text
    texts["jobs"] = (await api.get("/api/jobs?limit=200", "alpha-viewer")).text
    texts["audit"] = (await api.get("/api/audit", "alpha-admin")).text
    env = {"CRONFLEET_STORE": store_url, "COLUMNS": "300"}
    for r in [*runs[::len(VALUES) - 1], failed["leak-header-0"]]:
        texts[f"show-run {r['id']}"] = await asyncio.to_thread(cli, env, "show-run",
                                                               str(r["id"]))
        texts[f"show-run --json {r['id']}"] = await asyncio.to_thread(
            cli, env, "show-run", str(r["id"]), "--json")
    for place in PLACES:
        for i in (0, 7):
            job = f"leak-{place}-{i}"
            texts[f"history {job}"] = await asyncio.to_thread(cli, env, "history", job)
            texts[f"history --wide {job}"] = await asyncio.to_thread(cli, env, "history",
                                                                     job, "--wide")
            texts[f"history --json {job}"] = await asyncio.to_thread(cli, env, "history", job,
                                                                     "--json")
    texts["status"] = await asyncio.to_thread(cli, env, "status", "--once")
    texts["status --json"] = await asyncio.to_thread(cli, env, "status", "--json")
    raw = stored_bytes(store_url, store_kind, pg_schema)

    hits = []
    for i, value in enumerate(VALUES):
        for form in forms(value):
            hits += [(i, form[:40], where) for where, text in texts.items() if form in text]
            if form.encode() in raw:
                hits.append((i, form[:40], "stored rows"))
    assert hits == []
    assert len(texts) > 3 * len(runs)  # every answer was looked at


@pytest.mark.parametrize("value", VALUES)
def test_the_redactor_hides_every_form(value: str) -> None:
    r = Redactor([value])
    for form in forms(value):
        out = r(f"<<{form}>>")
        assert out == "<<[REDACTED]>>", (form, out)
    # python's repr of text and bytes (library error messages quote values that way)
    assert value not in r(repr(value)) and "[REDACTED]" in r(repr(value.encode()))
    assert redact(f"a {value} b", [value]) == "a [REDACTED] b"


def test_redacting_data_walks_it_only_once_a_secret_is_known() -> None:
    """A run without secrets keeps its record as it is (no copy walked for nothing); a
    value added later is hidden everywhere inside the structure, keys included."""
    r = Redactor()
    record = {"request": {"url": "https://x/?k=tok-123", "headers": {"A": "tok-123"}},
              "attempts": [("tok-123", 1)]}
    assert r.data(record) is record
    r.add("tok-123")
    out = r.data({**record, "tok-123": "key"})
    assert "tok-123" not in json.dumps(out)
    assert out["request"]["headers"]["A"] == "[REDACTED]"
    assert out["attempts"] == [["[REDACTED]", 1]] and out["[REDACTED]"] == "key"
    assert record["request"]["headers"]["A"] == "tok-123"  # the input is not changed
