"""``cronfleet run``: the declared jobs (and those created over the API) until SIGINT or
SIGTERM, with the REST API unless the role says otherwise."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from cronfleet.cli.common import (
    _CONFIG,
    _EXIT_CODES,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    _fail,
    _load,
)
from cronfleet.errors import CronfleetError

if TYPE_CHECKING:
    from cronfleet.config import Loaded


# -- run ------------------------------------------------------------------------------

_ROLES = {
    "all": "timers on, REST API on",
    "worker": "timers on, no REST API",
    "api": "no timers: this process fires nothing (manual triggers run here); REST API on",
}


@click.command("run", epilog=_EXIT_CODES)
@_CONFIG
@click.option(
    "--role", type=click.Choice(["all", "worker", "api"]), default=None,
    help="all: timers and the REST API; worker: timers only; api: the REST API, no timers. "
         "Default: all, or api when CRONFLEET_SCHEDULER=0.",
)
@click.option("--host", default=None, help="API address (default: [api] host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="API port (default: [api] port, 8080; 0 picks a free one).")
@click.option("--no-api", is_flag=True, help="Do not serve the REST API (role all or api).")
@click.option("--connect-timeout", default=None, metavar="DURATION",
              help="How long start-up waits for an unreachable store, retrying with backoff "
                   "(e.g. 2m; default: [scheduler] connect_timeout, else forever).")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None,
    help="Log verbosity (logs go to stderr). Default: $CRONFLEET_LOG_LEVEL, else "
         "[scheduler] log_level, else info.",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default=None,
    help="text: one readable line per record; json: one JSON object per line with job, "
         "slot, run_id, instance, fencing_token, outcome, duration. Default: "
         "$CRONFLEET_LOG_FORMAT, else [scheduler] log_format, else text.",
)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None,
    help="Also serve /healthz, /readyz and /metrics on this port (all addresses), "
         "whatever the role; separate from the API. Default: $CRONFLEET_METRICS_PORT, "
         "else [scheduler] metrics_port, else off.",
)
@click.option(
    "--api-workers", type=click.IntRange(0, 64), default=0, show_default=True,
    help="Serve the REST API from N worker processes (role api, on the same port) instead "
         "of the scheduler's own event loop, so that API load never delays firing "
         "(role all). 0: the API shares the scheduler's loop.",
)
@click.option("--api-fd", type=int, default=None, hidden=True,
              help="(internal) an API worker: serve on this inherited socket.")
def run_cmd(config_path: str | None, role: str | None, host: str | None, port: int | None,
            no_api: bool, connect_timeout: str | None, log_level: str | None,
            log_format: str | None, metrics_port: int | None, api_workers: int,
            api_fd: int | None) -> None:
    """Run the declared jobs (and those created over the API) until SIGINT or SIGTERM,
    then stop gracefully.

    Everything is validated first (the config, every plugin, every schedule); any problem
    stops the start with exit code 1 -- nothing fires. Start the same command on several
    hosts against one store: each slot runs once across all of them.
    """
    import asyncio
    import logging

    from cronfleet.extras import require

    require("server", "cronfleet run (the REST API, /healthz and /metrics)")
    from cronfleet.api.app import ApiSettings
    from cronfleet.api.serve import serve
    from cronfleet.config import SCHEDULER_ENV, ConfigError, timers_from_env
    from cronfleet.config.env import pick
    from cronfleet.logs import configure as configure_logs

    wait_for_store: float | None = None
    if connect_timeout is not None:
        from cronfleet.cron.duration import DurationError, parse_duration

        try:
            wait_for_store = parse_duration(connect_timeout).total_seconds()
        except DurationError as exc:
            _fail(f"--connect-timeout: {exc}", EXIT_BAD_INPUT)
    try:
        from_env = timers_from_env()
    except ConfigError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    role_origin = "--role"
    if role is None:
        role = "api" if from_env is False else "all"
        role_origin = f"{SCHEDULER_ENV}=0" if from_env is False else "default"
    loaded = _load(config_path, strict=True)
    config = loaded.config
    if wait_for_store is None:
        wait_for_store = config.connect_timeout  # every start-up step waits this long
    api_on = role in ("all", "api") and config.api_enabled and not no_api
    if role == "api" and not api_on:
        loaded.cleanup()
        _fail("--role api serves only the REST API, which is off here "
              "(--no-api or [api] enabled = false)", EXIT_BAD_INPUT)
    # precedence: flag > environment > file > default (config/env.py)
    level, _ = pick(log_level, "--log-level", config, "log_level")
    fmt, _ = pick(log_format, "--log-format", config, "log_format")
    configure_logs(level, fmt)  # before the first step that may wait for the store
    if not loaded.jobs and not api_on and not _has_stored_jobs(loaded, wait_for_store):
        loaded.cleanup()
        _fail(
            f"nothing to run: {config.display} declares no [[tasks]], no plugin declares a "
            "schedule, no job was created over the API, and the API is off (pass --config "
            "FILE or set CRONFLEET_CONFIG)",
            EXIT_FAILED,
        )
    api_host, host_origin = pick(host, "--host", config, "api_host")
    api_port, port_origin = pick(port, "--port", config, "api_port")
    probe_port: int | None
    probe_port, _ = pick(metrics_port, "--metrics-port", config, "metrics_port")
    worker_argv: list[str] | None = None
    if api_fd is not None:  # an API worker of a parent's --api-workers: the probes are the
        probe_port = None  # parent's
        api_workers = 0
        from cronfleet.api.workers import lower_priority

        lower_priority()
    elif api_workers and (role != "all" or not api_on):
        loaded.cleanup()
        _fail("--api-workers serves the REST API of role all from worker processes; "
              f"here the role is {role}" + ("" if api_on else " and the API is off"),
              EXIT_BAD_INPUT)
    elif api_workers:
        worker_argv = ["run", "--role", "api", "--log-level", level, "--log-format", fmt]
        if config_path is not None:
            worker_argv += ["--config", config_path]
        if connect_timeout is not None:
            worker_argv += ["--connect-timeout", connect_timeout]
    log = logging.getLogger("cronfleet.cli")
    log.info("config %s; store %s (from %s)", config.display, config.store, config.store_origin)
    if api_on:
        log.info("API address %s (from %s), port %s (from %s)", api_host, host_origin,
                 api_port, port_origin)
    for p in loaded.plugins:
        log.info(
            "%s %r (%s, priority %d): %d job(s)%s",
            "provider" if p.provider else "plugin", p.name, p.origin, p.priority, len(p.jobs),
            (": " + ", ".join(p.jobs[:8]) + (", ..." if len(p.jobs) > 8 else ""))
            if p.jobs else "",
        )
    for warning in loaded.warnings:
        log.warning("%s", warning)
    if not loaded.jobs:
        log.info("no declared jobs: running the jobs created over the API")
    if from_env is False and role != "api":
        log.warning("--role %s overrides %s=0: timers are on", role, SCHEDULER_ENV)
    log.info("role %s (%s): %s", role, role_origin,
             _ROLES[role] if api_on or role == "worker" else "timers on, REST API off")
    code = EXIT_OK
    try:
        scheduler = loaded.scheduler(timers=role != "api", role=role,
                                     connect_timeout=wait_for_store)
        settings = ApiSettings(metrics=config.api_metrics,  # type: ignore[arg-type]
                               ready_max_overdue=config.api_ready_max_overdue,
                               max_request_body=config.api_max_request_body,
                               allow_command_jobs=config.api_allow_command_jobs,
                               forwarded_allow_ips=config.api_forwarded_allow_ips)
        asyncio.run(serve(scheduler, api=api_on, host=api_host, port=api_port, settings=settings,
                          http_runtime=config.http_runtime(), metrics_port=probe_port,
                          command_runtime=config.command_runtime(),
                          preflight=lambda: _check_vault(loaded, wait_for_store),
                          api_workers=api_workers, worker_argv=worker_argv, api_fd=api_fd))
    except CronfleetError as exc:
        log.error("cronfleet cannot run: %s", exc)
        code = EXIT_FAILED
    finally:
        loaded.cleanup()
    sys.exit(code)


def _has_stored_jobs(loaded: Loaded, wait_for_store: float | None) -> bool:
    """Whether the store holds jobs created over the API (False when it cannot tell),
    waiting for an unreachable store like every start-up step (runtime/reach.py)."""
    import asyncio

    from cronfleet.errors import StoreUnavailable
    from cronfleet.runtime.reach import until_reachable
    from cronfleet.store.factory import open_api_store
    from cronfleet.store.url import parse_store_url

    url = loaded.config.store
    try:
        if parse_store_url(url).no_file_yet:
            return False
    except CronfleetError:
        return False

    async def look() -> bool:
        store = open_api_store(url)
        try:
            return bool(await store.job_defs())
        finally:
            await store.close()

    try:
        return asyncio.run(until_reachable(look, "the jobs created over the API",
                                           wait_for_store))
    except StoreUnavailable as exc:
        loaded.cleanup()
        _fail(f"cronfleet cannot run: {exc}", EXIT_FAILED)
    except (CronfleetError, OSError):
        return False


async def _check_vault(loaded: Loaded, wait_for_store: float | None) -> None:
    """Refuse to start (exit 1, a clear message) when encrypted secrets exist that the
    configured keys cannot decrypt. Every role checks: each can read secrets (HTTP jobs,
    from config or created over the API) or write them (the API), and a process writing
    under a key the others do not hold would stop them at their next start. Run by
    ``serve`` before the scheduler starts, once the probes listen; an unreachable store
    is waited for like every start-up step (runtime/reach.py)."""
    from cronfleet.errors import StoreUnavailable
    from cronfleet.runtime.reach import until_reachable
    from cronfleet.secrets import Keyring, Vault
    from cronfleet.store.factory import open_secret_store
    from cronfleet.store.url import parse_store_url

    try:
        parsed = parse_store_url(loaded.config.store)
    except CronfleetError:
        return  # the store itself reports its URL
    if parsed.no_file_yet or parsed.in_memory:
        return  # a new store holds no secret yet

    async def check() -> None:
        store = open_secret_store(loaded.config.store)
        try:
            await Vault(store, Keyring.from_env()).check()
        finally:
            await store.close()

    try:
        await until_reachable(check, "the secrets key check", wait_for_store)
    except StoreUnavailable:
        raise  # names the step and the wait already
    except CronfleetError as exc:
        raise CronfleetError(f"secrets: {exc}") from exc
