"""HTTP-job rough edges: a body-rule failure names the rule; the attempts are stored once
(the result, not a log line too); notifications say ok per channel; `cronfleet check`
warns about a private target that will be refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronfleet import HttpJob
from cronfleet.config import check_config
from cronfleet.jobs.http import HttpJobFailed, HttpRuntime

from .conftest import Reply, Server
from .test_http_job import ctx


async def test_a_body_rule_failure_names_the_rule(server: Server, runtime: HttpRuntime) -> None:
    server.default = Reply(200, "degraded")
    job = HttpJob(server.url(), body_contains="healthy", runtime=runtime)
    c = ctx()
    with pytest.raises(HttpJobFailed) as info:
        await job(c)
    assert str(info.value) == (f"GET {server.url()} failed after 1 attempt: HTTP 200 "
                               "(the body does not contain 'healthy')")
    assert c.logs[0].endswith(": the body does not contain 'healthy'")
    assert not any(line.startswith("attempts: ") for line in c.logs)
    assert info.value.result["attempts"][0]["failure"] == "the body does not contain 'healthy'"


async def test_accept_status_failure_names_the_accepted_statuses(server: Server,
                                                                 runtime: HttpRuntime) -> None:
    server.default = Reply(200, "ok")
    job = HttpJob(server.url(), accept_status=(201,), runtime=runtime)
    with pytest.raises(HttpJobFailed, match=r"HTTP 200 \(status 200 is not one of \[201\]\)"):
        await job(ctx())


@pytest.mark.parametrize(("url", "task_extra", "scheduler", "warned"), [
    ("http://127.0.0.1:9000/hook", "", "", "127.0.0.1 is a loopback address"),
    ("http://localhost/hook", "", "", "localhost is a loopback name"),
    ("http://10.1.2.3/hook", "", "", "10.1.2.3 is a private address"),
    ("http://169.254.169.254/", "", "", "169.254.169.254 is a cloud metadata address"),
    ("http://127.0.0.1/hook", "allow_private_targets = true", "", None),
    ("http://127.0.0.1/hook", "", "allow_private_targets = true", None),
    ("https://example.com/hook", "", "", None),
    ("${secrets.URL}", "", "", None),
])
def test_check_warns_about_refused_private_targets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, task_extra: str,
        scheduler: str, warned: str | None, ) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("CRONFLEET_CONFIG", "CRONFLEET_STORE", "CRONFLEET_ALLOW_PRIVATE_TARGETS"):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "cronfleet.toml"
    path.write_text(f"""[scheduler]
entry_points = false
{scheduler}

[[tasks]]
id = "hook"
cron = "5m"
{task_extra}
http = {{ url = "{url}" }}
""")
    report = check_config(path)
    assert report.valid, report.problems
    texts = [str(w) for w in report.warnings]
    if warned is None:
        assert not [t for t in texts if "SSRF" in t], texts
    else:
        (text,) = [t for t in texts if "SSRF" in t]
        assert warned in text and "task 'hook': http: url:" in text
        assert "allow_private_targets = true" in text
        assert ":9:" in text  # the line of the http key


def test_http_module_documents_python_private_targets() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "http-jobs.md").read_text()
    assert "HttpJob(\"http://10.0.0.5/hook\", allow_private_targets=True)" in docs


