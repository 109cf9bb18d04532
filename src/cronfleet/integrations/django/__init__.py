"""Django integration: add ``"cronfleet.integrations.django"`` to ``INSTALLED_APPS``.

Settings:

``CRONFLEET_SCHEDULER``
    the import path of your :class:`~cronfleet.Scheduler` (``"myproject.jobs:scheduler"``),
    where the jobs are declared with ``@scheduler.job(...)``. Required.
``CRONFLEET_AUTOSTART``
    ``True``: every process that loads Django (each gunicorn / uWSGI worker) starts the
    scheduler in a background thread when the app registry is ready -- safe, each slot runs
    once across all of them -- except ``manage.py`` commands other than ``runserver``.
    Default ``False``: run ``python manage.py cronfleet`` as a process of its own.

The management command ``cronfleet`` runs the scheduler in the foreground until SIGINT /
SIGTERM (``--metrics-port`` serves /healthz, /readyz, /metrics).
"""

