"""The percentile every benchmark prints: nearest rank (the value at rank ⌈p/100 · n⌉ of
the sorted values, no interpolation: a figure that one of the measurements really took)."""

from __future__ import annotations

import math

__all__ = ["pct"]


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0 < p <= 100) of ``values`` by nearest rank; NaN when
    there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
