"""The Django app: resolves ``settings.CRONFLEET_SCHEDULER`` and, with
``CRONFLEET_AUTOSTART``, starts it in a background thread of each serving process."""

from __future__ import annotations

import sys
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from cronfleet.runtime.scheduler import Scheduler


def get_scheduler() -> Scheduler:
    """The scheduler named by ``settings.CRONFLEET_SCHEDULER`` (``"module:attribute"``)."""
    import importlib

    path = getattr(settings, "CRONFLEET_SCHEDULER", None)
    if not isinstance(path, str) or ":" not in path:
        raise ImproperlyConfigured(
            "CRONFLEET_SCHEDULER: expected the import path of your Scheduler, e.g. "
            f"'myproject.jobs:scheduler', got {path!r}")
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ImproperlyConfigured(f"CRONFLEET_SCHEDULER={path!r}: {exc}") from exc
    if not isinstance(obj, Scheduler):
        raise ImproperlyConfigured(
            f"CRONFLEET_SCHEDULER={path!r} is a {type(obj).__name__}, not a cronfleet "
            "Scheduler")
    return obj


def _serving(argv: list[str]) -> bool:
    """Whether this process serves requests (a WSGI/ASGI worker or ``runserver``) rather
    than running a one-off ``manage.py`` command (``migrate``, ``shell``, ``cronfleet``)."""
    import os

    path = argv[0] if argv else ""
    name = os.path.basename(path)
    manage = name in ("manage.py", "django-admin", "django-admin.py") or (
        name == "__main__.py" and os.path.basename(os.path.dirname(path)) == "django")
    if manage:  # python manage.py X, django-admin X, python -m django X
        return len(argv) > 1 and argv[1] == "runserver"
    return True


class CronfleetConfig(AppConfig):  # type: ignore[misc]  # django has no type hints
    name = "cronfleet.integrations.django"
    label = "cronfleet"
    verbose_name = "cronfleet"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        scheduler = get_scheduler()
        if not getattr(settings, "CRONFLEET_AUTOSTART", False) or not _serving(sys.argv):
            return
        if scheduler.running:
            return
        from cronfleet.extras import available

        on_start = None
        if available("http"):
            from cronfleet import alerts

            on_start = alerts.install
        scheduler.start_in_background(on_start=on_start)
