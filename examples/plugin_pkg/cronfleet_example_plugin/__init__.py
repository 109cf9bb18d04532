"""Example cronfleet plugins, installed through the ``cronfleet.plugins`` entry point."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

from cronfleet import RunContext, Schedule, ScheduledPlugin
from cronfleet.plugins import Task

log = logging.getLogger("example.plugin")


class Reports(ScheduledPlugin):
    """Declares its schedules; the runtime fires them and calls ``run``."""

    def name(self) -> str:
        return "reports"

    def schedules(self) -> list[Schedule]:
        return [
            Schedule(id="pulse", cron="10s", description="report plugin heartbeat"),
            Schedule(
                id="daily-traffic",
                cron="@daily",
                timezone="Europe/Paris",
                description="email yesterday's traffic report",
                timeout="10m",
                config_json='{"recipients": ["ops@example.com"]}',
            ),
        ]

    async def run(self, ctx: RunContext) -> Any:
        if ctx.schedule_id == "pulse":
            log.info("📈 reports plugin pulse for slot %s", ctx.slot.strftime("%H:%M:%S"))
            return "ok"
        if ctx.schedule_id == "daily-traffic":
            recipients = ctx.config.get("recipients", [])
            ctx.log(f"traffic report for {ctx.slot.date()} sent to {', '.join(recipients)}")
            return {"sent_to": recipients}
        raise LookupError(f"reports: no schedule {ctx.schedule_id!r}")

    def cleanup(self) -> None:
        log.info("reports plugin unloaded")


class RetryingProvider(ScheduledPlugin):
    """A provider: runs the config's ``[[tasks]]``, retrying a handler that raises.

    Select it with ``provider = "retrying"``; the tasks stay as written.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def name(self) -> str:
        return "retrying"

    def provide(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            if task.handler is None:
                raise ValueError(f"task {task.schedule.id!r} has no handler to retry")
        self._tasks = {t.schedule.id: t for t in tasks}

    def schedules(self) -> list[Schedule]:
        return [t.schedule for t in self._tasks.values()]

    async def run(self, ctx: RunContext) -> Any:
        task = self._tasks[ctx.schedule_id]
        assert task.handler is not None
        retries = int(ctx.config.get("retries", 2))
        for attempt in range(1, retries + 2):
            try:
                if inspect.iscoroutinefunction(task.handler):
                    return await task.handler(ctx)
                result = await asyncio.to_thread(task.handler, ctx)
                return await result if inspect.isawaitable(result) else result
            except Exception as exc:
                if attempt > retries:
                    raise
                ctx.log(f"attempt {attempt} failed ({exc!r}); retrying")
        raise AssertionError("unreachable")
