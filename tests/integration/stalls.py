"""Notice when the whole machine stood still during a real-process test.

A CI virtual machine can be paused by its host, or have its wall clock stepped, for
several seconds. Every process of the fleet then stops together, and when they go on the
scheduler does what it is designed to do after a stall (docs/concepts.md, the backlog
rule): it runs each job's newest due slot and records the older ones ``skipped / missed``.
A test that counts "every slot ran" would call that a defect of cronfleet. ``StallWatch``
runs in the test process: a thread that wakes every 50 ms and records every gap in which
it could not run (or in which the wall clock moved differently from the monotonic one).
A test then accepts a ``missed`` row, and only that, for a slot inside such a gap.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

TICK = 0.05
GAP = 1.0
"""A wake-up this much later than asked (or a wall clock step this big) is a stall."""


EXCUSES = ("missed", "already_executing")


class StallWatch:
    """``with StallWatch() as watch: ...``; then ``watch.stalls``: ``(start, end)`` wall
    clock seconds of each stall seen, and ``watch.covers(t, margin)``."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)

    def _watch(self) -> None:
        wall, mono = time.time(), time.monotonic()
        while not self._stop.wait(TICK):
            now_wall, now_mono = time.time(), time.monotonic()
            late = (now_mono - mono) - TICK
            step = abs((now_wall - wall) - (now_mono - mono))
            if late > GAP or step > GAP:
                self.stalls.append((wall, now_wall))
            wall, mono = now_wall, now_mono

    def covers(self, t: float, margin: float = 1.5) -> bool:
        """Whether the instant ``t`` lies in a stall, give or take ``margin`` seconds."""
        return any(a - margin <= t <= b + margin for a, b in self.stalls)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


def excused(
    missing: set[tuple[str, int]],
    rows: list[tuple[str, int, str, str | None]],
    watch: StallWatch,
) -> set[tuple[str, int]]:
    """The slots of ``missing`` (never ran) that a stall explains: the slot lies in a
    stall seen by ``watch`` and the ledger holds its final row saying why: ``skipped /
    missed`` (the backlog rule), or ``skipped / already_executing`` for the first slot after
    it (the overlap rule: the late run of the slot before still held the job's lane)."""
    recorded = {(j, s) for j, s, st, why in rows if st == "skipped" and why in EXCUSES}
    return {k for k in missing if k in recorded and watch.covers(k[1])}
