"""Running cronfleet inside web applications: :mod:`.asgi` (a lifespan for FastAPI /
Starlette), :mod:`.django` (an app + the ``cronfleet`` management command). Flask and
gunicorn need nothing of their own: ``scheduler.start_in_background()`` (see
docs/deployment.md, "Inside a web application")."""
