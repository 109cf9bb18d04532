"""When to strike the process running the current instant's jobs.

The fleet tests fire jobs on whole seconds with handlers that take 0.4 s. A test that
finds the lease holder and then kills or stops it must do so while those runs are in
flight: a holder read late in a second can have released every lease by the time the
signal lands, and then there is nothing to interrupt (a flaky test, not a finding).
"""

from __future__ import annotations

import math
import time

#: how far into a second the holder is first read
EARLY = 0.05
#: a holder read is used only if it finished this early in its second (the handlers take
#: 0.4 s, so runs are still in flight when the caller's signal lands)
EARLY_ENOUGH = 0.25


def wait_for_early_in_a_second() -> float:
    """Seconds to sleep until ``EARLY`` past the next whole second."""
    now = time.time()
    target = math.floor(now) + EARLY
    if target <= now:
        target += 1
    return target - now
