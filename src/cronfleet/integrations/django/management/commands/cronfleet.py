"""``python manage.py cronfleet``: the scheduler of ``settings.CRONFLEET_SCHEDULER`` in the
foreground until SIGINT / SIGTERM, then a graceful stop."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from cronfleet.integrations.django.apps import get_scheduler


class Command(BaseCommand):  # type: ignore[misc]  # django has no type hints
    help = ("Run the cronfleet scheduler (settings.CRONFLEET_SCHEDULER) until SIGINT or "
            "SIGTERM. Start it on several hosts against one store: each slot runs once.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="also serve /healthz, /readyz and /metrics on this port")

    def handle(self, *args: Any, **options: Any) -> None:
        asyncio.run(self._run(get_scheduler(), options.get("metrics_port")))

    async def _run(self, scheduler: Any, metrics_port: int | None) -> None:
        from cronfleet.extras import available
        from cronfleet.health import ProbeServer
        from cronfleet.runtime.process import raise_if_failed, run_until_signal

        unsubscribe = None
        if available("http"):
            from cronfleet import alerts

            unsubscribe = alerts.install(scheduler)
        probes = None
        try:
            async with scheduler:
                if metrics_port is not None:
                    probes = ProbeServer(scheduler, port=metrics_port)
                    await probes.start()
                self.stdout.write(f"cronfleet {scheduler.instance_id}: "
                                  f"{len(scheduler.jobs)} job(s) on {scheduler.store.url}")
                await run_until_signal(scheduler.loop_task)
                raise_if_failed(scheduler.loop_task)
        finally:
            if probes is not None:
                await probes.stop()
            if unsubscribe is not None:
                unsubscribe()
