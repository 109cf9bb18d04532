"""HTTP jobs: call a URL on a schedule, retry, record every attempt, never leak a secret.

:class:`HttpJob` is an async handler (an object whose ``__call__`` is ``async def``): the
scheduler runs it like any other job. One :class:`HttpRuntime` holds what jobs share --
one pooled ``httpx.AsyncClient`` per event loop, the secrets vault, the SSRF policy and
the sleep function used between attempts (tests inject a fake one).

Every request carries ``Idempotency-Key: <job id>:<slot ISO-8601 UTC>`` (the same on every
attempt and every instance), ``X-Cronfleet-Slot``, ``X-Cronfleet-Attempt`` and
``X-Cronfleet-Fencing-Token``; with a signing secret also ``X-Cronfleet-Timestamp`` and
``X-Cronfleet-Signature: v1=<hex HMAC-SHA256 over "<timestamp>." + body>``.

The run's result is ``{"ok", "status", "idempotency_key", "attempts": [...]}``; when the
last attempt fails the handler raises :class:`HttpJobFailed` (its ``result`` attribute
holds the same record, which is also written to the run's log).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar

from cronfleet import signing, tracing
from cronfleet.extras import require
from cronfleet.model import BACKOFF_STRATEGIES, RetryPolicy
from cronfleet.secrets import (
    DEFAULT_NAMESPACE,
    Keyring,
    Redactor,
    SecretError,
    Vault,
    expand,
    references,
)
from cronfleet.signing import sign

try:
    import httpx
except ImportError:
    require("http", "HTTP jobs")  # one line naming the pip install
    raise

if TYPE_CHECKING:
    from cronfleet.cron import CronExpr
    from cronfleet.model import Job, RunContext
    from cronfleet.notify import Notifier, NotifyPolicy
    from cronfleet.spec import JobSpec
    from cronfleet.store.health import HealthStore

__all__ = [
    "BACKOFF_STRATEGIES",
    "MAX_BODY",
    "HttpJob",
    "HttpJobFailed",
    "HttpJobInvalid",
    "HttpRuntime",
    "RetryPolicy",
    "UnsafeTarget",
    "check_address",
    "default_runtime",
    "idempotency_key",
    "sign",
]

log = logging.getLogger("cronfleet.jobs.http")

MAX_BODY = 1024 * 1024
MAX_REDIRECTS = 10
DEFAULT_TIMEOUT = 30.0
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

Sleep = Callable[[float], Awaitable[None]]
Resolver = Callable[[str, int], Awaitable[list[str]]]


class HttpJobFailed(Exception):
    """The last attempt failed. The message names the request (secrets redacted) and the
    last error; ``result`` holds every attempt's record."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


class HttpJobInvalid(ValueError):
    """Invalid fields of an :class:`HttpJob`; ``problems`` lists ``(key, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{k}: {m}" for k, m in problems))
        self.problems = problems


class UnsafeTarget(Exception):
    """The SSRF guard refused a target (loopback, private, link-local, metadata ...)."""


# -- retries ---------------------------------------------------------------------------


def retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


# -- keeping secrets out of httpx's own logs ---------------------------------------------
#
# httpx logs every request's URL at INFO and httpcore logs headers at DEBUG. While an
# attempt runs, the Redactor of its secrets is in a context variable and a filter on those
# loggers rewrites their records.

_redactor: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "cronfleet_http_redactor", default=None
)
_LIBRARY_LOGGERS = ("httpx", "httpcore.connection", "httpcore.connection_pool",
                    "httpcore.http11", "httpcore.http2", "httpcore.proxy", "httpcore.socks")


class _RedactLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        redact = _redactor.get()
        if redact:
            try:
                text = record.getMessage()
            except Exception:  # a malformed record: drop it rather than risk a leak
                return False
            clean = redact(text)
            if clean != text:
                record.msg, record.args = clean, None
        return True


_FILTER = _RedactLogs()
for _name in _LIBRARY_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)


# -- SSRF guard --------------------------------------------------------------------------

_allow_private: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cronfleet_http_allow_private", default=False
)
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
             ipaddress.ip_address("100.100.100.200")}


def check_address(address: str) -> str | None:
    """Why ``address`` is not a safe public target, or None."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in _METADATA:
        return f"{ip} is a cloud metadata address"
    for what, flag in (("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
                       ("link-local", ip.is_link_local), ("private", ip.is_private),
                       ("multicast", ip.is_multicast), ("reserved", ip.is_reserved)):
        if flag:
            return f"{ip} is a {what} address"
    if not ip.is_global:
        return f"{ip} is not a public address"
    return None


async def _system_resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def _checked_addresses(host: str, port: int, resolve: Resolver) -> list[str]:
    """The addresses of ``host``; raises :class:`UnsafeTarget` if any is not public."""
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        addresses = [host]
    except ValueError:
        try:
            addresses = await resolve(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from None
    for address in addresses:
        problem = check_address(address)
        if problem:
            raise UnsafeTarget(
                f"refusing {host}: {problem} (set allow_private_targets = true to allow it)"
            )
    return addresses


class _GuardedBackend:
    """An httpcore network backend that checks the resolved address at connect time and
    connects to exactly that address (no second lookup: DNS rebinding cannot slip in)."""

    def __init__(self, inner: Any, resolve: Resolver) -> None:
        self.inner = inner
        self.resolve = resolve

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> Any:
        if not _allow_private.get():
            addresses = await _checked_addresses(host, port, self.resolve)
            host = addresses[0]
        return await self.inner.connect_tcp(host, port, timeout=timeout,
                                            local_address=local_address,
                                            socket_options=socket_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- the shared runtime ----------------------------------------------------------------------


class HttpRuntime:
    """What HTTP jobs share: the pooled client, the vault, the SSRF default, the sleep.

    ``store``: a store URL whose secrets table backs the vault (or pass ``vault``).
    ``allow_private_targets``: the default for jobs that do not say. ``sleep`` and
    ``resolve`` are injectable for tests.
    """

    def __init__(
        self,
        *,
        store: str | None = None,
        vault: Vault | None = None,
        keyring: Keyring | None = None,
        allow_private_targets: bool = False,
        sleep: Sleep | None = None,
        resolve: Resolver | None = None,
        max_connections: int = 100,
        health: HealthStore | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        self._vault = vault
        self._keyring = keyring
        self.allow_private_targets = allow_private_targets
        self.sleep: Sleep = sleep or asyncio.sleep
        self.resolve: Resolver = resolve or _system_resolve
        self.max_connections = max_connections
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._health = health
        self._notifier = notifier

    @contextlib.contextmanager
    def scope(self, redact: Redactor, allow_private: bool | None = None) -> Iterator[None]:
        """While notifications are sent: the SSRF guard's setting (``allow_private``, or
        this runtime's default) and the redactor for every text the client logs."""
        token = _allow_private.set(
            self.allow_private_targets if allow_private is None else allow_private
        )
        redact_token = _redactor.set(redact)
        try:
            yield
        finally:
            _allow_private.reset(token)
            _redactor.reset(redact_token)

    @property
    def health(self) -> HealthStore:
        """Per-job health: shared through the store, else kept in this process."""
        if self._health is None:
            from cronfleet.store.health import MemoryHealthStore, open_health_store

            self._health = (open_health_store(self.store) if self.store is not None
                            else MemoryHealthStore())
        return self._health

    @property
    def notifier(self) -> Notifier:
        if self._notifier is None:
            from cronfleet.notify import Notifier

            self._notifier = Notifier(sleep=self.sleep)
        return self._notifier

    async def pause(self, job_id: str, note: str) -> bool:
        """Pause ``job_id`` for the whole fleet (an override with ``note``); False without
        a store."""
        if self.store is None:
            log.warning("job %s: cannot auto-pause: no store configured", job_id)
            return False
        from cronfleet.store import open_store

        store = open_store(self.store)
        await store.open()
        try:
            await store.set_override(job_id, False, by="cronfleet (auto-pause)", note=note,
                                     until=None)
        finally:
            await store.close()
        return True

    @property
    def vault(self) -> Vault | None:
        if self._vault is None and self.store is not None:
            from cronfleet.store.secrets import open_secret_store

            self._vault = Vault(open_secret_store(self.store), self._keyring)
        return self._vault

    def client(self) -> httpx.AsyncClient:
        """The pooled client of the running loop (a new loop gets a new client)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=self.max_connections)
            )
            pool = getattr(transport, "_pool", None)
            if pool is not None and hasattr(pool, "_network_backend"):
                pool._network_backend = _GuardedBackend(pool._network_backend, self.resolve)
            self._client = httpx.AsyncClient(
                transport=transport,
                trust_env=False,  # a proxy would hide the real target from the guard
                max_redirects=MAX_REDIRECTS,
                event_hooks={"request": [self._check_request]},
            )
            self._loop = loop
        return self._client

    async def _check_request(self, request: httpx.Request) -> None:
        # runs for the first request and for every redirect it follows
        if _allow_private.get():
            return
        url = request.url
        if url.scheme not in ("http", "https"):
            raise UnsafeTarget(f"refusing scheme {url.scheme!r}: only http and https")
        await _checked_addresses(url.host, url.port or (443 if url.scheme == "https" else 80),
                                 self.resolve)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        if self._vault is not None:
            await self._vault.store.close()
        if self._health is not None:
            await self._health.close()


_default: HttpRuntime | None = None


def default_runtime() -> HttpRuntime:
    """The process-wide runtime used by jobs built without one (no vault, guard on)."""
    global _default
    if _default is None:
        _default = HttpRuntime()
    return _default


# -- helpers ----------------------------------------------------------------------------------


def slot_text(slot: datetime) -> str:
    return slot.astimezone(UTC).isoformat().replace("+00:00", "Z")


def idempotency_key(job_id: str, slot: datetime) -> str:
    return f"{job_id}:{slot_text(slot)}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _seconds(value: object, key: str) -> float:
    from cronfleet.cron.duration import DurationError, to_timedelta

    if isinstance(value, bool) or not isinstance(value, str | int | float | timedelta):
        raise ValueError(f"{key}: expected a duration like '30s' or a number of seconds, got "
                         f"{value!r}")
    try:
        return to_timedelta(value).total_seconds()
    except DurationError as exc:
        raise ValueError(f"{key}: {str(exc).removeprefix('duration: ')}") from None


# -- the job --------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class HttpJob:
    """An HTTP request as a job handler.

    Success: a status in ``accept_status`` (default any 2xx), and -- when given -- the
    body contains ``body_contains``, matches ``body_regex``, does not contain
    ``body_not_contains`` and does not match ``body_not_regex``. ``url``, header values,
    ``body`` and ``signing_secret`` may reference ``${secrets.NAME}`` (namespace
    ``namespace``). ``allow_private_targets``: ``None`` takes the runtime's default.
    """

    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    follow_redirects: bool = True
    accept_status: tuple[int, ...] | None = None
    body_contains: str | None = None
    body_not_contains: str | None = None
    body_regex: str | None = None
    body_not_regex: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    signing_secret: str | None = None
    signature: str = signing.DEFAULT_SCHEME  # or "standard-webhooks" (cronfleet.signing)
    allow_private_targets: bool | None = None
    namespace: str = DEFAULT_NAMESPACE
    notify: NotifyPolicy | None = None
    auto_pause_after: int | None = None
    runtime: HttpRuntime | None = field(default=None, repr=False)
    # retry (per request, Retry-After honoured), health, auto-pause and notifications are
    # applied inside the handler (their results go into the run's result): the runtime does
    # not retry this job again and cronfleet.alerts leaves it alone
    applies_job_policies: ClassVar[bool] = True

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise HttpJobInvalid(problems)
        object.__setattr__(self, "method", self.method.upper())
        object.__setattr__(self, "headers", dict(self.headers))
        if self.accept_status is not None:
            object.__setattr__(self, "accept_status", tuple(self.accept_status))

    def problems(self) -> list[tuple[str, str]]:
        """``(key, message)`` for every invalid field: the request fields are checked by
        :func:`cronfleet.spec.check_http` (the rules every face shares), the policies by
        their spec converters, secret references here."""
        from cronfleet import spec

        fields = {k: getattr(self, k) for k in spec.HTTP_KEYS if k != "allow_private_targets"}
        _, problems = spec.check_http(fields)
        out = [(p.key, p.message) for p in problems]
        if self.allow_private_targets is not None and not isinstance(
            self.allow_private_targets, bool
        ):
            out.append(("allow_private_targets", "expected true or false"))
        if not isinstance(self.retry, RetryPolicy):
            out.append(("retry", "expected a RetryPolicy"))
        if self.auto_pause_after is not None:
            try:
                spec.whole_number(self.auto_pause_after, 1)
            except spec.FieldError as exc:
                out.append(("auto_pause_after", exc.message))
        from cronfleet.notify import policy_texts

        texts = [*(policy_texts(self.notify) if self.notify is not None else ()),
                 self.url if isinstance(self.url, str) else None,
                 self.body if isinstance(self.body, str) else None,
                 self.signing_secret if isinstance(self.signing_secret, str) else None]
        if isinstance(self.headers, Mapping):
            texts += [v for v in self.headers.values() if isinstance(v, str)]
        from cronfleet.secrets import check_secret_name

        for name in references(*texts):
            problem = check_secret_name(name)
            if problem:
                out.append(("secrets", f"${{secrets.{name}}}: {problem}"))
        return out

    @classmethod
    def from_spec(cls, job_spec: JobSpec, *, runtime: HttpRuntime | None = None,
                  namespace: str | None = None) -> HttpJob:
        """The request of a validated :class:`~cronfleet.spec.JobSpec` (its ``http``
        part, retry, notify, auto_pause_after and allow_private_targets). ``namespace``
        overrides the spec's (stored API jobs use their team's)."""
        assert job_spec.http is not None, "not an HTTP job spec"
        kwargs = job_spec.http.kwargs()
        if namespace is not None:
            kwargs["namespace"] = namespace
        return cls(**kwargs, retry=job_spec.retry or RetryPolicy(),
                   allow_private_targets=job_spec.allow_private_targets,
                   notify=job_spec.notify, auto_pause_after=job_spec.auto_pause_after,
                   runtime=runtime)

    def job(self, schedule: str | CronExpr | Sequence[str | CronExpr] | None, *, id: str,
            **options: Any) -> Job:
        """A :class:`~cronfleet.Job` that runs this request (``options`` as for
        :meth:`Job.create`)."""
        from cronfleet.model import Job

        options.setdefault("description", f"{self.method} {self.url}")
        for key in ("retry", "notify", "auto_pause_after"):  # on the Job too (alerts)
            options.setdefault(key, getattr(self, key))
        return Job.create(schedule, self, id=id, **options)

    # -- running ----------------------------------------------------------------------

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        began = time.monotonic()
        rt = self.runtime or default_runtime()
        key = idempotency_key(ctx.job_id, ctx.slot)
        redact = Redactor()
        attempts: list[dict[str, Any]] = []
        ok = False
        status: int | None = None
        for n in range(1, self.retry.attempts + 1):
            record, ok, retryable, wait = await self._attempt(ctx, rt, n, key, redact)
            attempts.append(record)
            status = record["response"]["status"] if record["response"] else None
            ctx.log(self._summary(record, n))
            if ok or not retryable or n == self.retry.attempts:
                break
            delay = self.retry.wait(n) if wait is None else min(wait, self.timeout)
            record["retry_in"] = delay
            ctx.log(f"retrying in {delay:g}s")
            await rt.sleep(delay)
        result = {"ok": ok, "status": status, "idempotency_key": key, "attempts": attempts}
        result = dict(redact.data(result))
        last = attempts[-1]
        if ok:
            message = f"{self.method} {last['request']['url']} -> {status}"
        else:
            # the transport error, else the status and the rule it broke (a status out
            # of 2xx says it alone)
            failure = last.get("failure") or ""
            reason = last["error"] or f"HTTP {status}" + (
                f" ({failure})" if failure and not failure.endswith("is not 2xx") else "")
            message = redact(
                f"{self.method} {last['request']['url']} failed after {len(attempts)} attempt"
                f"{'' if len(attempts) == 1 else 's'}: {reason}"
            )
        try:
            await self._after_run(ctx, rt, ok, result, time.monotonic() - began, message,
                                  redact)
        except Exception as exc:  # health and notifications never fail the job
            log.warning("job %s: recording health / notifying failed: %s", ctx.job_id,
                        redact(_error_text(exc)))
        if ok:
            return result
        # the attempts are the failed run's result (HttpJobFailed.result), not a log line
        raise HttpJobFailed(message, result)

    async def _after_run(self, ctx: RunContext, rt: HttpRuntime, ok: bool,
                         result: dict[str, Any], duration: float, message: str,
                         redact: Redactor) -> None:
        """Health, auto-pause and notifications (``cronfleet.alerts``), written into the
        result; this job applies its policies itself (``applies_job_policies``)."""
        from cronfleet.alerts import RunFacts, record_and_alert

        facts = RunFacts(
            job_id=ctx.job_id, slot=ctx.slot, instance_id=ctx.instance_id, ok=ok,
            duration=duration, message=message,
            run={"ok": ok, "status": result["status"], "attempts": len(result["attempts"]),
                 "idempotency_key": result["idempotency_key"]},
        )
        await record_and_alert(facts, rt, result, notify=self.notify,
                               auto_pause_after=self.auto_pause_after,
                               namespace=self.namespace, redact=redact, log_line=ctx.log,
                               scope=functools.partial(rt.scope,
                                                       allow_private=self.allow_private_targets))

    def _summary(self, record: dict[str, Any], n: int) -> str:
        head = f"attempt {n}/{self.retry.attempts}: {record['request']['method']} " \
               f"{record['request']['url']}"
        took = record["timings"]["total_ms"]
        if record["error"]:
            return f"{head} -> {record['error']} ({took} ms)"
        failure = f": {record['failure']}" if record.get("failure") else ""
        return f"{head} -> {record['response']['status']} in {took} ms{failure}"

    async def _attempt(
        self, ctx: RunContext, rt: HttpRuntime, n: int, key: str, redact: Redactor
    ) -> tuple[dict[str, Any], bool, bool, float | None]:
        """One request: ``(record, ok, retryable, server-requested wait)``."""
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        record: dict[str, Any] = {
            "attempt": n,
            "triggered_by": str(ctx.triggered_by),
            "started_at": started_at.isoformat(),
            "request": {"method": self.method, "url": self.url,
                        "headers": dict(self.headers), "body": self.body},
            "response": None,
            "timings": {"total_ms": 0.0},
            "error": None,
        }

        def done(error: str | None, ok: bool, retryable: bool, wait: float | None = None
                 ) -> tuple[dict[str, Any], bool, bool, float | None]:
            record["timings"]["total_ms"] = round((time.perf_counter() - t0) * 1000, 3)
            record["error"] = redact(error) if error else None
            record["ok"] = ok
            return redact.data(record), ok, retryable, wait

        # 1. secrets, right before sending; an unknown name sends nothing
        headers_in = dict(self.headers)
        refs = references(self.url, self.body, self.signing_secret, *headers_in.values())
        values: dict[str, str] = {}
        if refs:
            vault = rt.vault
            if vault is None:
                return done("secrets are referenced but no vault is configured", False, False)
            try:
                values = await vault.resolve(refs, self.namespace)
            except SecretError as exc:
                return done(f"{exc}; nothing was sent", False, False)
            except Exception as exc:
                return done(f"cannot read secrets: {_error_text(exc)}; nothing was sent",
                            False, True)
            for v in values.values():
                redact.add(v)
        url = expand(self.url, values)
        body = expand(self.body, values).encode() if self.body is not None else b""
        headers = {k: expand(v, values) for k, v in headers_in.items()}
        headers.setdefault("User-Agent", "cronfleet")
        headers["Idempotency-Key"] = key
        headers["X-Cronfleet-Slot"] = slot_text(ctx.slot)
        headers["X-Cronfleet-Attempt"] = str(n)
        if ctx.fencing_token is not None:
            headers["X-Cronfleet-Fencing-Token"] = str(ctx.fencing_token)
        tracing.inject(headers)  # W3C traceparent of the run's span, when tracing is on
        if self.signing_secret is not None:
            secret = expand(self.signing_secret, values)
            redact.add(secret)
            try:
                headers.update(signing.headers(self.signature, secret, key, int(time.time()),
                                               body))
            except ValueError as exc:  # a secret from the vault that cannot sign
                return done(f"signing_secret: {exc}; nothing was sent", False, False)
        record["request"] = {
            "method": self.method, "url": url, "headers": headers,
            "body": _text(body[:MAX_BODY]) if self.body is not None else None,
        }
        timings = record["timings"]
        marks: dict[str, float] = {}

        async def trace(event: str, info: Mapping[str, Any]) -> None:
            marks[event] = time.perf_counter()
            for step in ("connect_tcp", "start_tls"):
                start = marks.get(f"connection.{step}.started")
                if event == f"connection.{step}.complete" and start is not None:
                    timings[f"{'connect' if step == 'connect_tcp' else 'tls'}_ms"] = round(
                        (marks[event] - start) * 1000, 3)

        allow = (self.allow_private_targets if self.allow_private_targets is not None
                 else rt.allow_private_targets)
        token = _allow_private.set(allow)
        redact_token = _redactor.set(redact)
        try:
            client = rt.client()
            request = client.build_request(
                self.method, url, headers=headers,
                content=body if self.body is not None else None,
                timeout=httpx.Timeout(self.timeout), extensions={"trace": trace},
            )
            async with asyncio.timeout(self.timeout):
                response = await client.send(request, stream=True,
                                             follow_redirects=self.follow_redirects)
                try:
                    chunks: list[bytes] = []
                    size = 0
                    truncated = False
                    async for chunk in response.aiter_raw():
                        chunks.append(chunk)
                        size += len(chunk)
                        if size > MAX_BODY:
                            truncated = True
                            break
                    timings["response_ms"] = round((time.perf_counter() - t0) * 1000, 3)
                finally:
                    await response.aclose()
        except UnsafeTarget as exc:
            return done(str(exc), False, False)
        except TimeoutError:
            return done(f"timed out after {self.timeout:g}s", False, True)
        except httpx.TooManyRedirects:
            return done(f"more than {MAX_REDIRECTS} redirects", False, True)
        except (httpx.HTTPError, OSError) as exc:
            return done(_error_text(exc), False, True)
        finally:
            _allow_private.reset(token)
            _redactor.reset(redact_token)
        raw = b"".join(chunks)
        data = _decode(raw[:MAX_BODY], response.headers.get("content-encoding"), truncated)
        text = _text(data[:MAX_BODY])
        record["response"] = {
            "status": response.status_code,
            "reason": response.reason_phrase,
            "http_version": response.http_version,
            "url": str(response.url),
            "redirects": [str(r.url) for r in response.history],
            "headers": dict(response.headers),
            "body": text,
            "truncated": truncated or len(data) > MAX_BODY,
        }
        problem = self._judge(response.status_code, text)
        if problem is None:
            return done(None, True, False)
        wait = None
        if response.status_code in (429, 503):
            wait = retry_after(response.headers.get("retry-after"), datetime.now(UTC))
        record["failure"] = problem
        return done(None, False, True, wait)

    def _judge(self, status: int, text: str) -> str | None:
        """Why the response is a failure, or None."""
        if self.accept_status is not None:
            if status not in self.accept_status:
                return f"status {status} is not one of {list(self.accept_status)}"
        elif not 200 <= status <= 299:
            return f"status {status} is not 2xx"
        if self.body_contains is not None and self.body_contains not in text:
            return f"the body does not contain {self.body_contains!r}"
        if self.body_not_contains is not None and self.body_not_contains in text:
            return f"the body contains {self.body_not_contains!r}"
        if self.body_regex is not None and not re.search(self.body_regex, text):
            return f"the body does not match {self.body_regex!r}"
        if self.body_not_regex is not None and re.search(self.body_not_regex, text):
            return f"the body matches {self.body_not_regex!r}"
        return None


def _decode(raw: bytes, encoding: str | None, truncated: bool) -> bytes:
    """Undo gzip/deflate of the (possibly cut) raw body as far as it goes."""
    if not encoding:
        return raw
    import zlib

    enc = encoding.strip().lower()
    try:
        if enc in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, MAX_BODY + 1)
        if enc == "deflate":
            return zlib.decompressobj().decompress(raw, MAX_BODY + 1)
    except zlib.error:
        return raw
    return raw
