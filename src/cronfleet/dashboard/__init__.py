"""The web dashboard served by ``cronfleet run`` next to the REST API: server-rendered
pages (Jinja2 templates and one small script shipped in the package, no CDN) over the
API's context, tokens, roles and teams. ``install(app)`` adds it to an API app."""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def install(app: Any, codes: Any = None) -> None:
    from cronfleet.dashboard.routes import install as _install

    _install(app, codes)
