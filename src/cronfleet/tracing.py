"""OpenTelemetry traces (the ``otel`` extra): one span per run.

:func:`install` subscribes three listeners: ``RunStarting`` opens the run's span and makes
it current in the run's task (so the handler's own spans are its children, and an HTTP job
sends its W3C ``traceparent``), ``RunRetried`` adds an ``attempt failed`` event,
``RunFinished`` sets the outcome and ends it. The span is named ``cronfleet.run <job>``
(kind INTERNAL) with attributes ``cronfleet.job``, ``cronfleet.slot``, ``cronfleet.run_id``
(when known), ``cronfleet.instance``, ``cronfleet.fencing_token``, ``cronfleet.trigger``,
``cronfleet.attempts``, ``cronfleet.outcome``; a run that does not succeed has status ERROR
with its error text.

Why a runtime event (``RunStarting``) and not only ``RunFinished``: the span must be open
*while* the handler runs for its context to reach the handler (child spans, the
``traceparent`` of HTTP jobs); ``RunFinished`` comes after. The runtime publishes
``RunStarting`` only when somebody listens (one dict lookup per run otherwise).

:func:`install_from_env` is what ``cronfleet run`` calls: with the standard ``OTEL_*``
variables (an exporter endpoint or ``OTEL_TRACES_EXPORTER``; ``OTEL_SDK_DISABLED=true``
turns it off) it sets up the SDK -- OTLP over HTTP by default, ``console`` or ``none`` as
``OTEL_TRACES_EXPORTER`` says, the service from ``OTEL_SERVICE_NAME`` (default
``cronfleet``) -- unless the process already has a tracer provider (e.g. under
``opentelemetry-instrument``), which is then used as is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cronfleet.runtime.events import RunFinished, RunRetried, RunStarting, Unsubscribe

if TYPE_CHECKING:
    from cronfleet.runtime.scheduler import Scheduler

log = logging.getLogger("cronfleet.tracing")

__all__ = ["ENV_SWITCHES", "inject", "install", "install_from_env"]

#: any of these (non-empty) turns tracing on in ``cronfleet run``
ENV_SWITCHES = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_installed = 0  # how many install() are active: inject() is free while none is


def inject(headers: dict[str, str]) -> None:
    """Add the W3C trace context (``traceparent``, ``tracestate``) of the current span to
    an outgoing request's ``headers`` (HTTP jobs call it); nothing when tracing is off."""
    if not _installed:
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def install(scheduler: Scheduler, tracer_provider: Any = None) -> Unsubscribe:
    """One span per run of ``scheduler``'s jobs, from ``tracer_provider`` (default: the
    global one). Returns the unsubscriber."""
    from cronfleet.extras import require

    require("otel", "tracing")
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from cronfleet import __version__

    tracer = trace.get_tracer("cronfleet", __version__, tracer_provider=tracer_provider)
    spans: dict[int, tuple[Any, Any]] = {}  # id(run record) -> (span, context token)

    def starting(event: RunStarting) -> None:
        run = event.run
        attributes: dict[str, Any] = {
            "cronfleet.job": event.job.id,
            "cronfleet.slot": run.slot.isoformat(),
            "cronfleet.instance": event.instance_id,
            "cronfleet.trigger": str(run.triggered_by),
        }
        if run.id is not None:
            attributes["cronfleet.run_id"] = run.id
        if run.fencing_token is not None:
            attributes["cronfleet.fencing_token"] = run.fencing_token
        span = tracer.start_span(f"cronfleet.run {event.job.id}", kind=SpanKind.INTERNAL,
                                 attributes=attributes)
        # current in this run's task only: the task runs in its own copy of the context
        token = otel_context.attach(trace.set_span_in_context(span))
        spans[id(run)] = (span, token)

    def retried(event: RunRetried) -> None:
        entry = spans.get(id(event.run))
        if entry is not None:
            entry[0].add_event("attempt failed", {
                "cronfleet.attempt": event.attempt,
                "cronfleet.retry_in_s": event.delay,
                "cronfleet.error": event.error or "",
            })

    def finished(event: RunFinished) -> None:
        entry = spans.pop(id(event.run), None)
        if entry is None:
            return
        span, _ = entry
        run = event.run
        if run.id is not None:
            span.set_attribute("cronfleet.run_id", run.id)
        span.set_attribute("cronfleet.outcome", run.status.value)
        span.set_attribute("cronfleet.attempts", run.attempt)
        if not run.success:
            span.set_status(Status(StatusCode.ERROR, run.error or run.status.value))
        end = run.finished_at.timestamp() if run.finished_at is not None else None
        span.end(end_time=int(end * 1e9) if end is not None else None)

    global _installed
    _installed += 1
    offs = [scheduler.subscribe(starting, RunStarting),
            scheduler.subscribe(retried, RunRetried),
            scheduler.subscribe(finished, RunFinished)]
    done = False

    def unsubscribe() -> None:
        global _installed
        nonlocal done
        if done:
            return
        done = True
        _installed -= 1
        for off in offs:
            off()

    return unsubscribe


def _enabled(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENV_SWITCHES)


def install_from_env(scheduler: Scheduler, env: Mapping[str, str] | None = None
                     ) -> Unsubscribe | None:
    """Tracing as the ``OTEL_*`` variables say (``None``: off). A variable set without
    the ``otel`` extra is a warning naming the install, not a failure."""
    env = os.environ if env is None else env
    if not _enabled(env):
        return None
    from cronfleet.extras import available

    if not available("otel"):
        log.warning("OTEL_* is set but tracing needs the 'otel' extra: "
                    "pip install 'cronfleet[otel]'; no traces are sent")
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):  # the no-op default: set up the SDK
        provider = _sdk_provider(env)
        if provider is None:
            return None
        trace.set_tracer_provider(provider)
    log.info("tracing: one span per run (%s)",
             env.get("OTEL_TRACES_EXPORTER", "otlp") or "otlp")
    return install(scheduler, provider)


def _sdk_provider(env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporters = [e.strip() for e in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")]
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "cronfleet"}
    provider = TracerProvider(resource=Resource.create(attributes))
    added = 0
    for name in exporters:
        if name == "none":
            continue
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s: unknown exporter (otlp, console or none); "
                        "ignored", name)
            continue
        added += 1
    return provider if added else None
