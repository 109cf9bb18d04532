"""The REST API (FastAPI): ``create_app(scheduler)`` for an ASGI app, ``serve`` to run a
scheduler with the API on uvicorn (what ``cronfleet run`` does)."""

from cronfleet.extras import require

try:
    from cronfleet.api.app import ApiSettings, create_app
    from cronfleet.api.serve import serve
except ImportError:
    require("server", "the REST API")  # one line naming the pip install
    raise

__all__ = ["ApiSettings", "create_app", "serve"]
