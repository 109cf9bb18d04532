"""One span per run, with an in-memory exporter: attributes, attempt events, the outcome,
the handler's own spans as children, and the W3C traceparent sent by HTTP jobs."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cronfleet import HttpJob, RetryPolicy, Scheduler, tracing
from cronfleet.jobs.http import HttpRuntime


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


async def test_one_span_per_run_with_attempts_and_outcome(
        tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    s = Scheduler(f"sqlite:///{tmp_path / 't.db'}")
    calls: list[int] = []
    inner = provider.get_tracer("app")

    @s.job("0 0 1 1 *", id="flaky", retry=RetryPolicy(attempts=3, delay=0.01))
    def flaky(ctx: Any) -> str:
        calls.append(ctx.attempt)
        with inner.start_as_current_span("app work"):
            pass
        if ctx.attempt < 2:
            raise ValueError("not yet")
        return "done"

    @s.job("0 0 1 1 *", id="broken")
    async def broken(ctx: Any) -> None:
        raise RuntimeError("kaput")

    off = tracing.install(s, provider)
    try:
        async with s:
            ok = await s.trigger_async("flaky", wait=True)
            bad = await s.trigger_async("broken", wait=True)
            await s.wait_idle()
    finally:
        off()
    assert calls == [1, 2]
    spans = {sp.name: sp for sp in exporter.get_finished_spans()}
    run = spans["cronfleet.run flaky"]
    attrs = dict(run.attributes or {})
    assert attrs["cronfleet.job"] == "flaky" and attrs["cronfleet.outcome"] == "succeeded"
    assert attrs["cronfleet.run_id"] == ok.id and attrs["cronfleet.attempts"] == 2
    assert attrs["cronfleet.instance"] == s.instance_id
    assert attrs["cronfleet.slot"] == ok.slot.isoformat()
    assert [e.name for e in run.events] == ["attempt failed"]
    assert run.events[0].attributes["cronfleet.error"] == "ValueError: not yet"
    assert run.status.status_code is not StatusCode.ERROR
    # the handler's spans (a sync handler, in a worker thread) are children of the run's
    children = [sp for sp in exporter.get_finished_spans() if sp.name == "app work"]
    assert len(children) == 2
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id
               for c in children)
    failed = spans["cronfleet.run broken"]
    assert failed.status.status_code is StatusCode.ERROR
    assert "kaput" in (failed.status.description or "")
    assert dict(failed.attributes or {})["cronfleet.run_id"] == bad.id
    assert len([sp for sp in exporter.get_finished_spans()
                if sp.name.startswith("cronfleet.run")]) == 2
    # after unsubscribe: no spans, no traceparent
    exporter.clear()
    async with s:
        await s.trigger_async("broken", wait=True)
    assert exporter.get_finished_spans() == ()


class _Echo(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        _Echo.seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Echo.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


async def test_http_jobs_send_the_runs_traceparent(
        tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter,
        echo: str) -> None:
    s = Scheduler(f"sqlite:///{tmp_path / 'h.db'}")
    runtime = HttpRuntime(allow_private_targets=True)
    s.add_job(HttpJob(echo, runtime=runtime).job("0 0 1 1 *", id="ping"))
    off = tracing.install(s, provider)
    try:
        async with s:
            await s.trigger_async("ping", wait=True)
    finally:
        off()
        await runtime.aclose()
    (span,) = exporter.get_finished_spans()
    (headers,) = _Echo.seen
    version, trace_id, parent_id, flags = headers["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert int(trace_id, 16) == span.context.trace_id
    assert int(parent_id, 16) == span.context.span_id
    # no tracing installed: no traceparent
    _Echo.seen.clear()
    async with s:
        await s.trigger_async("ping", wait=True)
    assert "traceparent" not in _Echo.seen[0]


def test_install_from_env_switches(tmp_path: Path) -> None:
    s = Scheduler(f"sqlite:///{tmp_path / 'e.db'}")
    assert tracing.install_from_env(s, env={}) is None
    assert tracing.install_from_env(s, env={"OTEL_SDK_DISABLED": "true",
                                            "OTEL_TRACES_EXPORTER": "console"}) is None
    assert tracing.install_from_env(s, env={"OTEL_TRACES_EXPORTER": "none"}) is None
    assert not tracing._installed


def test_cronfleet_run_exports_spans_as_otel_variables_say(tmp_path: Path) -> None:
    """A real `cronfleet run` with OTEL_TRACES_EXPORTER=console prints one span per run."""
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "tr_handlers.py").write_text("def beat(ctx):\n    return 'ok'\n")
    (tmp_path / "cronfleet.toml").write_text(
        '[scheduler]\nstore = "sqlite:///tr.db"\nshutdown_grace = "5s"\n'
        '[[tasks]]\nid = "beat"\ncron = "1s"\nhandler = "tr_handlers:beat"\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRONFLEET_", "OTEL_"))}
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="tr-test",
               OTEL_BSP_SCHEDULE_DELAY="100")
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with out_path.open("w") as out_f, err_path.open("w") as err_f:
        proc = subprocess.Popen([sys.executable, "-m", "cronfleet", "run", "--no-api"],
                                cwd=tmp_path, env=env, stdout=out_f, stderr=err_f, text=True)
    try:
        # until the first span is exported (not a fixed sleep: a loaded machine starts slower)
        deadline = time.monotonic() + 60
        while '"name": "cronfleet.run beat"' not in out_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.1)
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, err
    assert "tracing: one span per run (console)" in err
    assert '"name": "cronfleet.run beat"' in out, out[:2000]
    assert '"service.name": "tr-test"' in out
