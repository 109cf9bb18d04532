"""Run a scheduler, its job catalog and (optionally) the REST API in one event loop until
SIGINT/SIGTERM, then stop in order: the HTTP server stops taking requests, the scheduler
finishes running handlers within its grace period, the stores close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from cronfleet import alerts, tracing
from cronfleet.api.app import ApiSettings, create_app
from cronfleet.api.workers import Workers
from cronfleet.cancel import cancel_and_wait
from cronfleet.catalog import Catalog
from cronfleet.errors import CronfleetError
from cronfleet.health import ProbeServer
from cronfleet.runtime.process import (
    freeze_start_up,
    raise_if_failed,
    run_until_signal,
    set_on_signals,
)
from cronfleet.runtime.reach import until_reachable
from cronfleet.store.factory import open_api_store
from cronfleet.store.side import ApiStore

log = logging.getLogger("cronfleet.api")

__all__ = ["ServeError", "serve"]


class ServeError(CronfleetError):
    """The API server could not start (e.g. the port is taken)."""


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        # the process's signals belong to serve(), which stops everything in order
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    return Server


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, so a taken port is a clear error instead of
    uvicorn's ``sys.exit``."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as exc:
        raise ServeError(f"the API cannot listen on {host}:{port}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        raise ServeError(f"the API cannot listen on {host}:{port}: {exc.strerror or exc} "
                         "(choose another with --port or [api] port)") from None
    return sock


async def _first_start_codes(api_store: ApiStore, host: str,
                             settings: ApiSettings | None) -> Any:
    """A one-time sign-in code when the dashboard is on, the API listens on loopback only
    and the store holds no token yet (``make run`` then leads into the dashboard)."""
    from cronfleet.dashboard.auth import OneTimeCodes, is_loopback

    if not (settings or ApiSettings()).dashboard or not is_loopback(host):
        return None
    try:
        if await api_store.list_tokens():
            return None
    except CronfleetError as exc:
        log.warning("cannot tell whether API tokens exist (%s): no sign-in link", exc)
        return None
    codes = OneTimeCodes()
    codes.new()
    return codes


async def _unless_stopped(step: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await ``step`` unless ``stop`` is set first (then it is cancelled): True when it
    ended (what it raised is raised)."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            await cancel_and_wait([task])
    if task.cancelled():
        return False
    task.result()
    return True


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve(
    scheduler: Any,
    *,
    api: bool = True,
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: ApiSettings | None = None,
    http_runtime: Any = None,
    command_runtime: Any = None,
    stop: asyncio.Event | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
    preflight: Callable[[], Awaitable[None]] | None = None,
    api_workers: int = 0,
    worker_argv: list[str] | None = None,
    api_fd: int | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or until ``stop`` is set). ``metrics_port``: also serve
    ``/healthz``, ``/readyz`` and ``/metrics`` there (:class:`~cronfleet.health.ProbeServer`),
    whatever the role. ``preflight``: checks awaited once the port is bound and the probes
    listen, before the scheduler starts (``cronfleet run``'s secrets key check, which may
    wait for the store); what it raises stops the start. ``api_workers`` > 0: this
    process binds the port but serves nothing itself; that many ``cronfleet
    <worker_argv>`` processes (api/workers.py) serve the API on its socket, so that no
    request holds this scheduler's loop. ``api_fd``: the socket such a parent handed
    this process (a worker)."""
    import uvicorn

    stop = stop or asyncio.Event()
    set_on_signals(stop)
    api_store = open_api_store(scheduler.store)
    if http_runtime is None:
        from cronfleet.jobs.http import HttpRuntime

        http_runtime = HttpRuntime(store=scheduler.store)
    # health, auto-pause and notifications for every job kind that asks for them
    unsubscribe_alerts = alerts.install(scheduler, http_runtime)
    # one span per run when the OTEL_* variables ask for traces (the otel extra)
    unsubscribe_tracing = tracing.install_from_env(scheduler)
    catalog = Catalog(scheduler, api_store, runtime=http_runtime,
                      poll=(settings or ApiSettings()).catalog_poll,
                      allow_commands=(settings or ApiSettings()).allow_command_jobs,
                      command_runtime=command_runtime, shares=True, freeze=True)
    server: Any = None
    # the port first: a taken port must stop the process before any timer has fired a
    # slot (a supervisor's restart loop would otherwise run jobs without an API)
    sock: socket.socket | None = None
    probes: ProbeServer | None = None
    workers: Workers | None = None
    try:
        if api and api_fd is not None:  # a worker: the parent's listening socket
            try:
                sock = socket.socket(fileno=api_fd)
            except OSError as bad:
                raise ServeError(f"--api-fd {api_fd}: not a socket this process holds "
                                 f"({bad.strerror or bad})") from None
        elif api:
            sock = _bind(host, port)
        if metrics_port is not None:
            # before the scheduler starts: /readyz says "not ready" (503) while start-up
            # waits for the store, /healthz that the process lives
            probes = ProbeServer(scheduler, metrics_host, metrics_port,
                                 ready_max_overdue=(settings or ApiSettings())
                                 .ready_max_overdue, catalog=catalog)
            await probes.start()
        if preflight is not None and not await _unless_stopped(preflight(), stop):
            return  # SIGTERM while it waited for the store: nothing started
        async with scheduler:
            # the store answered the scheduler's open; should it go away again at once,
            # the catalog's first read waits for it the same way (runtime/reach.py)
            await until_reachable(catalog.start, "the job catalog", scheduler.connect_timeout)
            watched: set[asyncio.Future[Any]] = set()
            server_task: asyncio.Task[Any] | None = None
            if sock is not None and api_workers > 0:
                workers = Workers(worker_argv or ["run", "--role", "api"], sock, api_workers)
                workers.start()
                watched.add(asyncio.ensure_future(workers.first_exit()))
                name = sock.getsockname()
                log.info("API listening on http://%s:%s (dashboard at /, docs at /docs)",
                         _url_host(name[0]), name[1])
            elif sock is not None:
                codes = await _first_start_codes(api_store, host, settings)
                app = create_app(scheduler, settings=settings, http_runtime=http_runtime,
                                 catalog=catalog, signin_codes=codes)
                # X-Forwarded-Proto/-For from these peers only: the scheme decides the
                # session cookie's Secure flag and the dashboard's Origin check
                config = uvicorn.Config(app, host=host, port=port, access_log=False,
                                        log_config=None, lifespan="on", log_level="warning",
                                        proxy_headers=True, forwarded_allow_ips=(
                                            settings or ApiSettings()).forwarded_allow_ips)
                server = _server_class()(config)
                server_task = asyncio.create_task(server.serve(sockets=[sock]),
                                                  name="cronfleet-api")
                watched.add(server_task)
                while not server.started and not server_task.done():  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
                if server_task.done():
                    exc = server_task.exception() if not server_task.cancelled() else None
                    raise ServeError(f"the API could not listen on {host}:{port}"
                                     + (f" ({exc})" if exc and not isinstance(exc, SystemExit)
                                        else " (see the log above)"))
                for srv in server.servers:
                    for listening in srv.sockets:
                        name = listening.getsockname()
                        log.info("API listening on http://%s:%s (dashboard at /, docs at "
                                 "/docs)", name[0], name[1])
                        if codes is not None and codes.codes:
                            url = (f"http://{_url_host(name[0])}:{name[1]}/signin/once/"
                                   f"{next(iter(codes.codes))}")
                            log.warning("no API token exists yet: open the dashboard with "
                                        "this one-time sign-in link (it creates an admin "
                                        "token of team default): %s", url)
            freeze_start_up()  # the jobs, the catalog's, the app: kept for the process's life
            loop_task = scheduler.loop_task
            await run_until_signal(loop_task, *watched, stop=stop, signals=False)
            if server is not None and server_task is not None:
                server.should_exit = True
                with contextlib.suppress(BaseException):
                    await server_task
            if workers is not None:
                await workers.stop()
            await catalog.stop()
            raise_if_failed(loop_task)
            if workers is not None and workers.failed:
                raise ServeError("an API worker process exited (see the log above)")
    finally:
        if workers is not None:
            await workers.stop()
        if probes is not None:
            await probes.stop()
        if sock is not None:
            sock.close()
        unsubscribe_alerts()
        if unsubscribe_tracing is not None:
            unsubscribe_tracing()
        await catalog.stop()
        await api_store.close()
