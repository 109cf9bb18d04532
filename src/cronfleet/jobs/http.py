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

Health, auto-pause and notifications are not the handler's: the alerts listener
(:mod:`cronfleet.alerts`) applies them to HTTP jobs as to every job, after the run is
settled; the job supplies what they need of it through :meth:`HttpJob.alert_settings`.
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
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, quote_plus, urlsplit

from cronfleet import signing, tracing
from cronfleet.alerting import AUTO_PAUSE_BY, AlertSettings
from cronfleet.clock import Clock, SystemClock, from_ts, slot_text
from cronfleet.extras import require
from cronfleet.jobs.matching import Matcher, RegexTimeout
from cronfleet.model import BACKOFF_STRATEGIES, RetryPolicy
from cronfleet.secrets import (
    DEFAULT_NAMESPACE,
    BoundSecret,
    Keyring,
    Redactor,
    SecretError,
    Vault,
    expand,
    references,
)
from cronfleet.signing import sign
from cronfleet.spec import header_problem

try:
    import httpx
except ImportError:
    require("http", "HTTP jobs")  # one line naming the pip install
    raise

if TYPE_CHECKING:
    from cronfleet.cron import CronExpr
    from cronfleet.model import Job, RunContext, RunRecord
    from cronfleet.notify import Notifier, NotifyPolicy
    from cronfleet.spec import HttpRequest, JobSpec
    from cronfleet.store.base import Store
    from cronfleet.store.side import HealthStore

__all__ = [
    "BACKOFF_STRATEGIES",
    "MAX_BODY",
    "HttpJob",
    "HttpJobFailed",
    "HttpJobInvalid",
    "HttpRuntime",
    "RetryPolicy",
    "SecretNotAllowed",
    "TargetPolicy",
    "UnsafeTarget",
    "check_address",
    "default_runtime",
    "expand_url",
    "header_problem",
    "idempotency_key",
    "sign",
]

log = logging.getLogger("cronfleet.jobs.http")

MAX_BODY = 1024 * 1024
POOLS = 8
"""How many pooled clients an :class:`HttpRuntime` spreads its requests over (see
:meth:`HttpRuntime.client`)."""
MAX_REDIRECTS = 10
DEFAULT_TIMEOUT = 30.0
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

Sleep = Callable[[float], Awaitable[None]]
Resolver = Callable[[str, int], Awaitable[list[str]]]


class HttpJobFailed(Exception):
    """The last attempt failed. The message names the request (secrets redacted) and the
    last error; ``result`` holds every attempt's record. The message is the whole story:
    no traceback in the run's log (it goes to the ``cronfleet.executor`` logger at DEBUG)."""

    log_traceback = False

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


NO_HEADERS: dict[str, str] = {}  # shared by every job without headers: never written to
NO_RETRY = RetryPolicy()  # one attempt: shared by every job without a retry (it is frozen)


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
# httpx logs every request's URL at INFO and httpcore logs headers at DEBUG: those lines
# are dropped (the run's own record says the same, redacted). Anything else those loggers
# print while an attempt runs goes through the Redactor of its secrets (a context
# variable).

_redactor: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "cronfleet_http_redactor", default=None
)
_LIBRARY_LOGGERS = ("httpx", "httpcore.connection", "httpcore.connection_pool",
                    "httpcore.http11", "httpcore.http2", "httpcore.proxy", "httpcore.socks")


class _RedactLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.INFO:  # request lines (URLs) and header dumps
            return False
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
#
# Every address a request would connect to must be global in the interpreter's view
# (``ipaddress`` is_global) and not a cloud metadata address; an IPv6 address that embeds
# an IPv4 one (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64) is judged by the embedded
# address too. The check runs in the connection backend on every address the host
# resolves to, in order, and the connection is made to the address just checked (no second
# lookup: DNS rebinding cannot slip in between). What a job may reach beyond that is a
# TargetPolicy: nothing (API jobs by default), the networks and hosts the operator lists
# in [api] private_targets (API jobs), or everything (a config task's
# allow_private_targets = true).

_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean ...
    "169.254.170.2",  # AWS ECS task metadata
    "fd00:ec2::254",  # AWS over IPv6
    "100.100.100.200",  # Alibaba Cloud
    "168.63.129.16",  # Azure wire server
    "192.0.0.192",  # Oracle Cloud
))
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def embedded(ip: IPAddress) -> list[IPAddress]:
    """Every IPv4 address an IPv6 form of ``ip`` carries (mapped, compatible, 6to4, Teredo
    server and client, NAT64), then ``ip`` itself."""
    out: list[IPAddress] = []
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            out.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            out.append(ip.sixtofour)
        if ip.teredo is not None:
            out.extend(ip.teredo)
        if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d (IPv4-compatible, deprecated)
            out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if any(ip in net for net in _NAT64):
            out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    out.append(ip)
    return out


def check_address(address: str) -> str | None:
    """Why ``address`` is not a safe public target, or None."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    for inner in embedded(ip):
        shown = str(inner) if inner is ip else f"{inner} (inside {ip})"
        if inner in _METADATA:
            return f"{shown} is a cloud metadata address"
        for what, flag in (("unspecified", inner.is_unspecified),
                           ("loopback", inner.is_loopback),
                           ("link-local", inner.is_link_local),
                           ("site-local", getattr(inner, "is_site_local", False)),
                           ("private", inner.is_private), ("multicast", inner.is_multicast),
                           ("reserved", inner.is_reserved)):
            if flag:
                return f"{shown} is a {what} address"
        if not inner.is_global:
            return f"{shown} is not a public address"
    return None


@dataclass(frozen=True)
class TargetPolicy:
    """What the SSRF guard lets through beyond public addresses: ``everything`` (a config
    task's ``allow_private_targets = true``), else the listed networks and host names
    (``[api] private_targets``). The default lets nothing through."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()
    everything: bool = False
    hint: str = "a config task may set allow_private_targets = true"

    @classmethod
    def parse(cls, entries: Sequence[object], where: str = "private_targets") -> TargetPolicy:
        """``["10.1.2.0/24", "billing.internal"]``: networks (CIDR or one address) and host
        names; raises ValueError naming the bad entry."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        from cronfleet.secrets import check_hosts

        for i, entry in enumerate(entries):
            if not isinstance(entry, str) or not entry.strip():
                raise ValueError(f"{where}[{i}]: expected a network or a host name, got "
                                 f"{entry!r}")
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
                continue
            except ValueError:
                pass
            names, problems = check_hosts([entry])
            if problems or entry.startswith("*."):
                raise ValueError(f"{where}[{i}]: {entry!r} is neither a network (10.1.2.0/24)"
                                 " nor a host name (billing.internal)")
            hosts.update(names)
        return cls(tuple(networks), frozenset(hosts),
                   hint="the operator may list it in [api] private_targets")

    def allows(self, host: str, address: str) -> bool:
        if self.everything:
            return True
        if host.strip("[]").lower().rstrip(".") in self.hosts:
            return True
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        return any(ip.version == net.version and ip in net for net in self.networks)


    def refuses(self, url: str) -> str | None:
        """Why the guard will refuse ``url`` whatever the name service says: its host is a
        non-public address literal, or a ``localhost`` name, that this policy does not let
        through; else None (names are resolved, and checked again, only when sending)."""
        if "${" in url:
            return None
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return None
        if not host:
            return None
        if host == "localhost" or host.endswith(".localhost"):
            return None if self.allows(host, "127.0.0.1") else f"{host} is a loopback name"
        if host[-1].isalpha() and ":" not in host:
            return None  # a name: an address literal ends with a digit (v4) or has a colon
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return None
        why = check_address(host)
        return None if why is None or self.allows(host, host) else why


NO_PRIVATE_TARGETS = TargetPolicy()
ALL_TARGETS = TargetPolicy(everything=True)
# API jobs without [api] private_targets: nothing private, the hint naming the operator's list
NO_API_PRIVATE_TARGETS = TargetPolicy.parse([])

_targets: contextvars.ContextVar[TargetPolicy] = contextvars.ContextVar(
    "cronfleet_http_targets", default=NO_PRIVATE_TARGETS
)


async def _system_resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def _addresses(host: str, port: int, resolve: Resolver) -> list[str]:
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return [host]
    except ValueError:
        try:
            return await resolve(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from None


def _screen(host: str, addresses: Sequence[str], policy: TargetPolicy
            ) -> tuple[list[str], list[str]]:
    """``(allowed addresses in order, the problem of each refused one)``."""
    allowed: list[str] = []
    problems: list[str] = []
    for address in addresses:
        problem = check_address(address)
        if problem is None or policy.allows(host, address):
            allowed.append(address)
        else:
            problems.append(problem)
    return allowed, problems


def _refusal(host: str, problems: Sequence[str], policy: TargetPolicy) -> UnsafeTarget:
    return UnsafeTarget(f"refusing {host}: {'; '.join(dict.fromkeys(problems))} "
                        f"({policy.hint})")


async def _checked_addresses(host: str, port: int, resolve: Resolver,
                             policy: TargetPolicy | None = None) -> list[str]:
    """The addresses of ``host``, in order; raises :class:`UnsafeTarget` when the policy
    refuses any of them (a name that also points inside is not a public target)."""
    policy = _targets.get() if policy is None else policy
    addresses = await _addresses(host, port, resolve)
    allowed, problems = _screen(host.strip("[]"), addresses, policy)
    if problems or not allowed:
        raise _refusal(host.strip("[]"), problems or ["no address"], policy)
    return allowed


class _GuardedBackend:
    """An httpcore network backend that resolves the host at connect time, checks every
    address (any refused one refuses the host), then connects to them in order -- to
    exactly the addresses it checked (no second lookup: DNS rebinding cannot slip in); an
    unreachable address moves on to the next."""

    def __init__(self, inner: Any, resolve: Resolver) -> None:
        self.inner = inner
        self.resolve = resolve

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> Any:
        policy = _targets.get()
        if policy.everything:
            return await self.inner.connect_tcp(host, port, timeout=timeout,
                                                local_address=local_address,
                                                socket_options=socket_options)
        error: Exception | None = None
        for address in await _checked_addresses(host, port, self.resolve, policy):
            try:
                return await self.inner.connect_tcp(address, port, timeout=timeout,
                                                    local_address=local_address,
                                                    socket_options=socket_options)
            except Exception as exc:  # httpcore's ConnectError / ConnectTimeout, OSError
                error = exc
        assert error is not None  # _checked_addresses never returns an empty list
        raise error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- where secrets may go ------------------------------------------------------------------
#
# A secret carries the hosts it may be sent to (set by an admin). While a request runs, the
# secrets it carries are in a context variable; the client's request hook -- run for the
# first request and for every redirect, before it is sent -- refuses a host outside them.


class SecretNotAllowed(UnsafeTarget):
    """A request would send a secret to a host it is not bound to."""


@dataclass(frozen=True)
class Carried:
    """The secrets one request carries: ``{name: hosts}`` (None: no hosts set) and whether
    a secret without hosts is refused (a job saved by an editor)."""

    hosts: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    need_hosts: bool = False


_NOTHING_CARRIED = Carried(MappingProxyType({}))
_bound: contextvars.ContextVar[Carried] = contextvars.ContextVar(
    "cronfleet_http_secrets", default=_NOTHING_CARRIED
)


def check_destination(host: str, carried: Carried) -> None:
    """Raise :class:`SecretNotAllowed` when a carried secret may not go to ``host``."""
    from cronfleet.secrets import host_allowed

    for name, hosts in carried.hosts.items():
        if hosts is None:
            if carried.need_hosts:
                raise SecretNotAllowed(
                    f"secret {name!r} has no hosts: only admins' jobs and config tasks may "
                    f"use it (an admin sets them: cronfleet secrets set {name} --hosts ...); "
                    "nothing was sent")
            continue
        if not host_allowed(host, hosts):
            raise SecretNotAllowed(
                f"secret {name!r} may only be sent to {', '.join(hosts)}; refusing to send it "
                f"to {host.strip('[]')}")


# -- the shared runtime ----------------------------------------------------------------------


class HttpRuntime:
    """What HTTP jobs share: the pooled client, the vault, the SSRF default, the sleep.

    ``store``: a store URL whose secrets table backs the vault (or pass ``vault``).
    ``allow_private_targets``: the default for config tasks that do not say;
    ``api_private_targets``: what jobs created over the API may reach beyond public
    addresses (``[api] private_targets``; they cannot opt out themselves).
    ``regex_timeout``: the time limit of one ``body_regex`` match (a worker process).
    ``sleep``, ``resolve`` and ``clock`` (the wall time of attempts and signatures) are
    injectable for tests. As the alerts' services (``cronfleet.alerts.install``) it also
    provides the health store, the notifier and ``pause``.
    """

    def __init__(
        self,
        *,
        store: str | Store | None = None,
        vault: Vault | None = None,
        keyring: Keyring | None = None,
        allow_private_targets: bool = False,
        api_private_targets: TargetPolicy | None = None,
        regex_timeout: float = 1.0,
        sleep: Sleep | None = None,
        resolve: Resolver | None = None,
        max_connections: int = 100,
        health: HealthStore | None = None,
        notifier: Notifier | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self._vault = vault
        self._keyring = keyring
        self.allow_private_targets = allow_private_targets
        self.api_private_targets = api_private_targets or NO_API_PRIVATE_TARGETS
        self.regex_timeout = regex_timeout
        self._matcher: Matcher | None = None
        self.sleep: Sleep = sleep or asyncio.sleep
        self.resolve: Resolver = resolve or _system_resolve
        self.max_connections = max_connections
        self._clients: list[httpx.AsyncClient] = []
        self._turn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._health = health
        self._notifier = notifier

    @contextlib.contextmanager
    def scope(self, redact: Redactor, policy: TargetPolicy | None = None) -> Iterator[None]:
        """While notifications are sent: the SSRF guard's policy (``policy``, or this
        runtime's default for config tasks) and the redactor for every text the client
        logs."""
        if policy is None:
            policy = ALL_TARGETS if self.allow_private_targets else NO_PRIVATE_TARGETS
        token = _targets.set(policy)
        redact_token = _redactor.set(redact)
        try:
            yield
        finally:
            _targets.reset(token)
            _redactor.reset(redact_token)

    @property
    def matcher(self) -> Matcher:
        """The worker that runs ``body_regex`` off the event loop with a time limit."""
        if self._matcher is None:
            self._matcher = Matcher(self.regex_timeout)
        return self._matcher

    @property
    def health(self) -> HealthStore:
        """Per-job health: shared through the store, else kept in this process."""
        if self._health is None:
            from cronfleet.store.factory import open_health_store
            from cronfleet.store.memory_side import MemoryHealthStore

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
        if not isinstance(self.store, str):  # the scheduler's store, open while it runs
            await self.store.set_override(job_id, False, by=AUTO_PAUSE_BY, note=note,
                                          until=None)
            return True
        from cronfleet.store import open_store

        store = open_store(self.store)
        await store.open()
        try:
            await store.set_override(job_id, False, by=AUTO_PAUSE_BY, note=note,
                                     until=None)
        finally:
            await store.close()
        return True

    @property
    def vault(self) -> Vault | None:
        if self._vault is None and self.store is not None:
            from cronfleet.store.factory import open_secret_store

            self._vault = Vault(open_secret_store(self.store), self._keyring, clock=self.clock)
        return self._vault

    def client(self) -> httpx.AsyncClient:
        """A pooled client of the running loop (a new loop gets new clients): the next of
        :data:`POOLS` clients, in turn, that share ``max_connections`` between them.
        httpcore's pool looks at each of its connections (a ``poll`` of each idle socket)
        for every request it assigns, so one pool of 50 busy connections costs ~3x the
        CPU per request of a pool of 5 (``bench/http_cpu.py``); smaller pools keep that
        look short. The clients share one TLS context: each of its own loads the CA
        bundle again: 8 of them took ~231 ms of this loop and ~7.5 MB at the first HTTP run
        against ~46 ms and ~1.7 MB for one (``bench/http_setup.py``)."""
        loop = asyncio.get_running_loop()
        if not self._clients or self._loop is not loop:
            n = max(1, min(POOLS, self.max_connections))
            share, extra = divmod(self.max_connections, n)
            # made as httpx makes its own: verify=True, the CA bundle, or SSL_CERT_FILE /
            # SSL_CERT_DIR (httpx >= 0.27, the floor, has this call with these defaults)
            tls = httpx.create_ssl_context()
            self._clients = [self._new_client(share + (k < extra), tls) for k in range(n)]
            self._loop = loop
        self._turn = (self._turn + 1) % len(self._clients)
        return self._clients[self._turn]

    def _new_client(self, max_connections: int, tls: ssl.SSLContext) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=max_connections), verify=tls
        )
        pool = getattr(transport, "_pool", None)
        if pool is not None and hasattr(pool, "_network_backend"):
            pool._network_backend = _GuardedBackend(pool._network_backend, self.resolve)
        return httpx.AsyncClient(
            transport=transport,
            trust_env=False,  # a proxy would hide the real target from the guard
            max_redirects=MAX_REDIRECTS,
            event_hooks={"request": [self._check_request]},
        )

    async def _check_request(self, request: httpx.Request) -> None:
        # runs for the first request and for every redirect it follows, before it is sent
        url = request.url
        check_destination(url.host, _bound.get())
        if _targets.get().everything:
            return
        if url.scheme not in ("http", "https"):
            raise UnsafeTarget(f"refusing scheme {url.scheme!r}: only http and https")
        await _checked_addresses(url.host, url.port or (443 if url.scheme == "https" else 80),
                                 self.resolve)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            await client.aclose()
        if self._matcher is not None:
            self._matcher.close()
            self._matcher = None
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


def idempotency_key(job_id: str, slot: datetime) -> str:
    return f"{job_id}:{slot_text(slot)}"


def expand_url(url: str, values: Mapping[str, str]) -> str:
    """``url`` with its ``${secrets.NAME}`` references replaced: a reference at the very
    start stands for the URL itself (its value goes in as written); anywhere else the value
    is percent-encoded as one component (``/``, ``?``, ``&``, ``=``, ``#`` included), so it
    lands whole in the part it was written in."""
    head = ""
    match = _LEADING_REF.match(url)
    if match:
        head, url = expand(match.group(0), values), url[match.end():]
    return head + expand(url, {n: quote(v, safe="") for n, v in values.items()})


_LEADING_REF = re.compile(r"^\$\{secrets\.[^}]*\}")


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


@dataclass(frozen=True, eq=False, slots=True)
class HttpJob:
    """An HTTP request as a job handler.

    Success: a status in ``accept_status`` (default any 2xx), and -- when given -- the
    body contains ``body_contains``, matches ``body_regex``, does not contain
    ``body_not_contains`` and does not match ``body_not_regex``. ``url``, header values,
    ``body`` and ``signing_secret`` may reference ``${secrets.NAME}`` (namespace
    ``namespace``). ``allow_private_targets``: ``None`` takes the runtime's default;
    ``private_targets`` (API jobs) replaces both. A secret bound to hosts is only ever sent
    to them (redirects included); with ``secrets_need_hosts`` a secret without hosts is not
    sent at all.
    """

    kind: ClassVar[str] = "http"  # the job kind the registry shows
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
    retry: RetryPolicy = NO_RETRY
    signing_secret: str | None = None
    signature: str = signing.DEFAULT_SCHEME  # or "standard-webhooks" (cronfleet.signing)
    allow_private_targets: bool | None = None
    namespace: str = DEFAULT_NAMESPACE
    notify: NotifyPolicy | None = None
    auto_pause_after: int | None = None
    runtime: HttpRuntime | None = field(default=None, repr=False)
    # API jobs: the operator's [api] private_targets (allow_private_targets is then not
    # read), and whether a secret without hosts is refused (a job saved by an editor)
    private_targets: TargetPolicy | None = None
    secrets_need_hosts: bool = False
    # retry (per request, Retry-After honoured) is applied inside the handler: the runtime
    # does not retry this job again. Health, auto-pause and notifications are not: the
    # alerts listener applies them, with what alert_settings supplies
    applies_job_policies: ClassVar[bool] = True
    # built by from_spec: the fields were validated with the rest of the job's spec, only
    # the secret references are this class's to check
    spec_checked: InitVar[bool] = False

    def __post_init__(self, spec_checked: bool) -> None:
        problems = self.problems(spec_checked=spec_checked)
        if problems:
            raise HttpJobInvalid(problems)
        # one string per method and one empty table for every job without headers (a
        # million API jobs: ~120 bytes each); a request copies the headers it sends
        object.__setattr__(self, "method", sys.intern(self.method.upper()))
        object.__setattr__(self, "headers", dict(self.headers) if self.headers else NO_HEADERS)
        if self.accept_status is not None:
            object.__setattr__(self, "accept_status", tuple(self.accept_status))

    def problems(self, *, spec_checked: bool = False) -> list[tuple[str, str]]:
        """``(key, message)`` for every invalid field: the request fields are checked by
        :func:`cronfleet.spec.check_http` (the rules every face shares), the policies by
        their spec converters (both skipped when ``spec_checked``: :meth:`from_spec`),
        secret references here."""
        out: list[tuple[str, str]] = []
        if not spec_checked:
            from cronfleet import spec

            fields = {k: getattr(self, k) for k in spec.HTTP_KEYS
                      if k != "allow_private_targets"}
            _, problems = spec.check_http(fields)
            out += [(p.key, p.message) for p in problems]
            if self.allow_private_targets is not None and not isinstance(
                self.allow_private_targets, bool
            ):
                out.append(("allow_private_targets", "expected true or false"))
            if not isinstance(self.retry, RetryPolicy):
                out.append(("retry", "expected a RetryPolicy"))
            if self.auto_pause_after is not None:
                try:
                    spec.whole_number(self.auto_pause_after, 1, spec.AUTO_PAUSE_MAX)
                except spec.FieldError as exc:
                    out.append(("auto_pause_after", exc.message))
        texts = [self.url if isinstance(self.url, str) else None,
                 self.body if isinstance(self.body, str) else None,
                 self.signing_secret if isinstance(self.signing_secret, str) else None]
        if self.notify is not None:
            from cronfleet.notify import policy_texts

            texts[:0] = policy_texts(self.notify)
        if isinstance(self.headers, Mapping):
            texts += [v for v in self.headers.values() if isinstance(v, str)]
        names = references(*texts)
        if not names:  # most jobs reference no secret
            return out
        from cronfleet.secrets import check_secret_name

        for name in names:
            problem = check_secret_name(name)
            if problem:
                out.append(("secrets", f"${{secrets.{name}}}: {problem}"))
        return out

    @classmethod
    def from_spec(cls, job_spec: JobSpec, *, runtime: HttpRuntime | None = None,
                  namespace: str | None = None, private_targets: TargetPolicy | None = None,
                  secrets_need_hosts: bool = False) -> HttpJob:
        """The request of a validated :class:`~cronfleet.spec.JobSpec` (its ``http``
        part, retry, notify, auto_pause_after and allow_private_targets). ``namespace``
        overrides the spec's (stored API jobs use their team's); ``private_targets``
        replaces allow_private_targets (API jobs: the operator's list)."""
        assert job_spec.http is not None, "not an HTTP job spec"
        return cls.from_request(
            job_spec.http, retry=job_spec.retry, notify=job_spec.notify,
            auto_pause_after=job_spec.auto_pause_after,
            allow_private_targets=job_spec.allow_private_targets, runtime=runtime,
            namespace=namespace, private_targets=private_targets,
            secrets_need_hosts=secrets_need_hosts)

    @classmethod
    def from_request(cls, request: HttpRequest, *, retry: RetryPolicy | None = None,
                     notify: NotifyPolicy | None = None, auto_pause_after: int | None = None,
                     allow_private_targets: bool | None = None,
                     runtime: HttpRuntime | None = None, namespace: str | None = None,
                     private_targets: TargetPolicy | None = None,
                     secrets_need_hosts: bool = False) -> HttpJob:
        """:meth:`from_spec` from the validated parts of a spec (a stored API job is
        built from them without a :class:`~cronfleet.spec.JobSpec`)."""
        kwargs = request.kwargs()
        if namespace is not None:
            kwargs["namespace"] = namespace
        allow = None if private_targets is not None else allow_private_targets
        return cls(**kwargs, retry=retry or NO_RETRY,
                   allow_private_targets=allow,
                   notify=notify, auto_pause_after=auto_pause_after,
                   runtime=runtime, private_targets=private_targets,
                   secrets_need_hosts=secrets_need_hosts, spec_checked=True)

    def target_policy(self, rt: HttpRuntime) -> TargetPolicy:
        """What the SSRF guard lets this job reach beyond public addresses."""
        if self.private_targets is not None:
            return self.private_targets
        allow = (self.allow_private_targets if self.allow_private_targets is not None
                 else rt.allow_private_targets)
        return ALL_TARGETS if allow else NO_PRIVATE_TARGETS

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
        rt = self.runtime or default_runtime()
        key = idempotency_key(ctx.job_id, ctx.slot)
        redact = Redactor()
        attempts: list[dict[str, Any]] = []
        ok = False
        status: int | None = None
        for n in range(1, self.retry.attempts + 1):
            ctx.attempt = n  # the run's attempt number (this job retries itself)
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
        if ok:
            return result
        # the attempts are the failed run's result (HttpJobFailed.result), not a log line
        raise HttpJobFailed(message, result)

    def alert_settings(self, run: RunRecord | None) -> AlertSettings:
        """What the alerts of this job need of it (:mod:`cronfleet.alerts` asks, after the
        run is settled): the secrets namespace of its ``notify``, its SSRF policy for the
        deliveries and, of ``run`` (None for a resume), the idempotency key, the last HTTP
        status and the outcome in this job's words (secrets already redacted)."""
        rt = self.runtime or default_runtime()
        scope = functools.partial(rt.scope, policy=self.target_policy(rt))
        if run is None:
            return AlertSettings(namespace=self.namespace, scope=scope)
        result = run.result if isinstance(run.result, Mapping) else {}
        facts = {"idempotency_key": result.get("idempotency_key")
                 or idempotency_key(run.job_id, run.slot),
                 "http_status": result.get("status")}
        message = None
        attempts = result.get("attempts")
        if run.success and isinstance(attempts, list) and attempts:
            request = attempts[-1].get("request") or {}
            message = f"{request.get('method', self.method)} {request.get('url')} -> " \
                      f"{result.get('status')}"
        elif run.error and run.error.startswith(f"{HttpJobFailed.__name__}: "):
            # the handler's own message: it already counts the attempts
            message = run.error.removeprefix(f"{HttpJobFailed.__name__}: ")
        return AlertSettings(namespace=self.namespace, scope=scope, run=facts,
                             message=message)

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
        started_at = from_ts(rt.clock.now())
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
        # every secret is bound to its hosts, the signing secret too: a signature made with
        # it would let the receiver sign requests for the secret's real hosts
        refs = references(self.url, self.body, self.signing_secret, *headers_in.values())
        bound: dict[str, BoundSecret] = {}
        if refs:
            vault = rt.vault
            if vault is None:
                return done("secrets are referenced but no vault is configured", False, False)
            try:
                bound = await vault.resolve_bound(refs, self.namespace)
            except SecretError as exc:
                return done(f"{exc}; nothing was sent", False, False)
            except Exception as exc:
                return done(f"cannot read secrets: {_error_text(exc)}; nothing was sent",
                            False, True)
            for b in bound.values():
                redact.add(b.value)
        values = {name: b.value for name, b in bound.items()}
        url = expand_url(self.url, values)
        form = any(k.lower() == "content-type" and
                   v.lower().startswith("application/x-www-form-urlencoded")
                   for k, v in headers_in.items())
        body_text = None
        if self.body is not None:
            body_text = (expand(self.body, {n: quote_plus(v, safe="") for n, v in values.items()})
                         if form else expand(self.body, values))
        body = body_text.encode() if body_text is not None else b""
        headers = {k: expand(v, values) for k, v in headers_in.items()}
        # a value that cannot go into a header is refused here, before any library sees
        # it (their error texts would quote it)
        for name, value in headers.items():
            problem = header_problem(name, value)
            if problem:
                return done(f"header {name!r}: {problem}; nothing was sent", False, False)
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
                headers.update(signing.headers(self.signature, secret, key, int(rt.clock.now()),
                                               body))
            except ValueError as exc:  # a secret from the vault that cannot sign
                return done(f"signing_secret: {exc}; nothing was sent", False, False)
        record["request"] = {
            "method": self.method, "url": url, "headers": headers,
            "body": _text(body[:MAX_BODY]) if self.body is not None else None,
        }
        carried = Carried({n: bound[n].hosts for n in refs if n in bound},
                          self.secrets_need_hosts)
        timings = record["timings"]
        marks: dict[str, float] = {}

        async def trace(event: str, info: Mapping[str, Any]) -> None:
            marks[event] = time.perf_counter()
            for step in ("connect_tcp", "start_tls"):
                start = marks.get(f"connection.{step}.started")
                if event == f"connection.{step}.complete" and start is not None:
                    timings[f"{'connect' if step == 'connect_tcp' else 'tls'}_ms"] = round(
                        (marks[event] - start) * 1000, 3)

        token = _targets.set(self.target_policy(rt))
        redact_token = _redactor.set(redact)
        bound_token = _bound.set(carried)
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
            _targets.reset(token)
            _redactor.reset(redact_token)
            _bound.reset(bound_token)
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
        try:
            problem = await self._judge(rt, response.status_code, text)
        except RegexTimeout as exc:
            record["failure"] = f"body_regex: {exc}"
            return done(f"body_regex: {exc}", False, False)
        if problem is None:
            return done(None, True, False)
        wait = None
        if response.status_code in (429, 503):
            wait = retry_after(response.headers.get("retry-after"), from_ts(rt.clock.now()))
        record["failure"] = problem
        return done(None, False, True, wait)

    async def _judge(self, rt: HttpRuntime, status: int, text: str) -> str | None:
        """Why the response is a failure, or None. Regular expressions run in the
        runtime's worker process with a time limit, on the body's first 1 MiB."""
        if self.accept_status is not None:
            if status not in self.accept_status:
                return f"status {status} is not one of {list(self.accept_status)}"
        elif not 200 <= status <= 299:
            return f"status {status} is not 2xx"
        if self.body_contains is not None and self.body_contains not in text:
            return f"the body does not contain {self.body_contains!r}"
        if self.body_not_contains is not None and self.body_not_contains in text:
            return f"the body contains {self.body_not_contains!r}"
        text = text[:MAX_BODY]
        if self.body_regex is not None and not await rt.matcher.search(self.body_regex, text):
            return f"the body does not match {self.body_regex!r}"
        if self.body_not_regex is not None and await rt.matcher.search(self.body_not_regex,
                                                                       text):
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
