"""Moved to :mod:`cronfleet.runtime.executor` (kept importable)."""

from cronfleet.runtime.executor import Outcome, execute, is_async_handler

__all__ = ["Outcome", "execute", "is_async_handler"]
