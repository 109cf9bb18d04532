"""The REST API (FastAPI): ``create_app(scheduler)`` for an ASGI app, ``serve`` to run a
scheduler with the API on uvicorn (what ``cronfleet run`` does)."""

from cronfleet.extras import require

require("server", "the REST API")

from cronfleet.api.app import ApiSettings, create_app  # noqa: E402
from cronfleet.api.serve import serve  # noqa: E402

__all__ = ["ApiSettings", "create_app", "serve"]
