"""Waiting for an unreachable store at start-up: the one rule every start-up step follows
(the scheduler's open, and before it ``cronfleet run``'s key-ring check and stored-jobs
look-up; the job catalog's first read).

A step that raises :class:`~cronfleet.errors.StoreUnavailable` is tried again after a
random wait (full jitter, so a fleet restarted together does not retry in lockstep) whose
bound doubles from 0.5 s up to 5 s, for ever by default or until ``connect_timeout``
seconds have passed (the last wait ends there, and the step is tried once more); then the
last error is raised with what was waited for. Any other
error (a bad path, a newer schema, a refused password) stops the start at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cronfleet.errors import StoreUnavailable

__all__ = ["FIRST_DELAY", "MAX_DELAY", "until_reachable"]

log = logging.getLogger("cronfleet.scheduler")

T = TypeVar("T")

FIRST_DELAY = 0.5  # the first wait's bound (s); it doubles after each failed try
MAX_DELAY = 5.0
WARN_EVERY = 10.0  # one "waiting for it" line per step this often


async def until_reachable(
    step: Callable[[], Awaitable[T]],
    what: str,
    timeout: float | None,
    *,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """``await step()``, tried again while it raises ``StoreUnavailable`` (see the module
    docstring); ``what`` names the step in the log and in the error."""
    started = monotonic()
    deadline = None if timeout is None else started + timeout
    delay, tries, warned = FIRST_DELAY, 0, -WARN_EVERY
    while True:
        try:
            result = await step()
        except StoreUnavailable as exc:
            tries += 1
            now = monotonic()
            if deadline is not None and now >= deadline:
                raise StoreUnavailable(
                    f"{what}: the store is still unreachable after {now - started:.1f} s "
                    f"(connect_timeout {timeout:g} s; unset, start-up waits for ever): {exc}"
                ) from exc
            if now - warned >= WARN_EVERY:
                warned = now
                log.warning("%s: store unreachable (%s); waiting for it%s", what, exc,
                            "" if timeout is None else f" (up to {timeout:g} s)")
            # the last wait ends at the deadline, and the step is tried once more there
            wait = random.uniform(0, delay)
            await asyncio.sleep(wait if deadline is None else min(wait, deadline - now))
            delay = min(delay * 2, MAX_DELAY)
        else:
            if tries:
                log.info("%s: store reachable after %d attempts", what, tries + 1)
            return result
