"""${secrets.NAME} in URL, headers, body and signing secret: sent, never recorded."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from cronfleet import HttpJob, Scheduler
from cronfleet.jobs.http import HttpRuntime, RetryPolicy
from cronfleet.secrets import KEY_ENV, Keyring, Vault, generate_key
from cronfleet.store.factory import open_secret_store

from .conftest import Reply, Server, Sleeps

TOKEN = "tok-9f8e7d6c5b4a-SECRET"
PATH_PART = "p@th secret/x"
SIGN = "signing-key-0123456789"


def every_row(path: Path) -> str:
    conn = sqlite3.connect(path)
    out = []
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        for row in conn.execute(f'SELECT * FROM "{table}"'):
            out.append(repr(row))
    conn.close()
    return "\n".join(out)


@pytest.mark.parametrize("outcome", ["success", "failure"])
async def test_secret_values_never_recorded(server: Server, sleeps: Sleeps, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture,
                                            capsys: pytest.CaptureFixture[str],
                                            outcome: str) -> None:
    db = tmp_path / "cf.db"
    vault = Vault(open_secret_store(f"sqlite:///{db}"), Keyring.from_env({KEY_ENV: generate_key()}))
    await vault.set("TOKEN", TOKEN)
    await vault.set("PATHPART", PATH_PART)
    await vault.set("SIGN", SIGN)
    rt = HttpRuntime(vault=vault, allow_private_targets=True, sleep=sleeps)
    # the server echoes what it received (headers and body) back into the response
    server.default = Reply(200 if outcome == "success" else 500, echo=True,
                           headers={"X-Token": TOKEN})
    from urllib.parse import quote

    job = HttpJob(
        server.url("/hook/${secrets.PATHPART}?key=${secrets.TOKEN}"),
        method="POST",
        headers={"Authorization": "Bearer ${secrets.TOKEN}"},
        body='{"token": "${secrets.TOKEN}"}',
        signing_secret="${secrets.SIGN}",
        retry=RetryPolicy(attempts=2, delay=1),
        runtime=rt,
    )
    s = Scheduler(store=f"sqlite:///{db}", timers=False)
    s.add_job(job.job("@daily", id="hook"))
    with caplog.at_level(logging.DEBUG):
        async with s:
            run = await s.trigger_async("hook", wait=True)
            stored = await s.store.get_run(run.id) if run.id is not None else None
    await rt.aclose()
    # the receiver got the real values
    seen = server.requests[0]
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.body == json.dumps({"token": TOKEN}).replace(", ", ",").encode() or \
        TOKEN.encode() in seen.body
    # a value lands whole in the part it was written in (its / and @ encoded)
    assert seen.path == f"/hook/{quote(PATH_PART, safe='')}?key={TOKEN}"
    # ... and nothing recorded holds them
    assert run.status.value == ("succeeded" if outcome == "success" else "failed")
    captured = capsys.readouterr()
    texts = [json.dumps(run.to_dict()), caplog.text, captured.out, captured.err,
             every_row(db), json.dumps(stored.to_dict() if stored else None)]
    for text in texts:
        for plain in (TOKEN, PATH_PART, quote(PATH_PART, safe=""), quote(PATH_PART),
                      quote(PATH_PART, safe="@/"), SIGN):
            assert plain not in text
    record = run.result
    attempt = record["attempts"][0]
    assert attempt["request"]["headers"]["Authorization"] == "Bearer [REDACTED]"
    assert "[REDACTED]" in attempt["request"]["url"]
    assert attempt["response"]["headers"]["x-token"] == "[REDACTED]"
    assert "[REDACTED]" in attempt["response"]["body"]


async def test_unknown_secret_sends_nothing(server: Server, sleeps: Sleeps) -> None:
    from datetime import UTC, datetime

    from cronfleet import RunContext, TriggeredBy
    from cronfleet.jobs.http import HttpJobFailed
    from cronfleet.store.memory_side import MemorySecretStore

    vault = Vault(MemorySecretStore(), Keyring.from_env({KEY_ENV: generate_key()}))
    rt = HttpRuntime(vault=vault, allow_private_targets=True, sleep=sleeps)
    job = HttpJob(server.url(), headers={"Authorization": "${secrets.NOPE}"},
                  retry=RetryPolicy(attempts=3), runtime=rt)
    ctx = RunContext(job_id="j", slot=datetime(2026, 1, 1, tzinfo=UTC),
                     triggered_by=TriggeredBy.MANUAL, instance_id="i", fencing_token=None,
                     config={})
    with pytest.raises(HttpJobFailed, match=r"unknown secret 'NOPE'.*nothing was sent"):
        await job(ctx)
    assert server.requests == [] and sleeps.calls == []
    no_vault = HttpRuntime(allow_private_targets=True)
    with pytest.raises(HttpJobFailed, match="no vault"):
        await HttpJob(server.url("/${secrets.X}"), runtime=no_vault)(ctx)
    assert server.requests == []
