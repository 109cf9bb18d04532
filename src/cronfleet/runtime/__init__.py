"""The runtime: the scheduler facade and the parts that fire, run and record slots
(docs/architecture.md, "The runtime: parts and owners" and "The path of one slot").

The names below are loaded on first use (PEP 562): importing a part (``runtime.loop``,
...) does not load the facade, which imports every part."""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["RunFinished", "RunRetried", "RunStarting", "Scheduler"]

_WHERE = {
    "RunFinished": "cronfleet.runtime.events",
    "RunRetried": "cronfleet.runtime.events",
    "RunStarting": "cronfleet.runtime.events",
    "Scheduler": "cronfleet.runtime.scheduler",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'cronfleet.runtime' has no attribute {name!r}")
    return getattr(import_module(where), name)
