"""How many examples a property test draws: ``examples(n)``.

``make test`` (and CI) draws every property's full count. ``make check``, the inner loop,
sets ``CRONFLEET_PROPERTY_SCALE=0.1``: each property draws a tenth of its count (at least
10), and the tests without a count of their own draw 10 instead of Hypothesis's 100 (the
``quick`` profile, tests/conftest.py). The same properties, fewer examples.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("CRONFLEET_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    """``n``, or its share under ``CRONFLEET_PROPERTY_SCALE`` (at least 10)."""
    return n if SCALE >= 1 else max(10, round(n * SCALE))
