"""The overrides warnings of a store that cannot answer repeat at most once per
WARN_EVERY (10 s) per kind, with a count (#24, item 7), like every outage warning."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cronfleet import FakeClock, StoreUnavailable

from .conftest import advance


async def test_cannot_read_overrides_is_said_once_per_ten_seconds(
    make: Any, clock: FakeClock, running: list, caplog: pytest.LogCaptureFixture
) -> None:
    s = make()
    s.job("1s", id="tick")(lambda ctx: None)
    await s.start()
    running.append(s)
    frozen = [0.0]
    s.outage.warn.clock = lambda: frozen[0]  # the warnings' own (monotonic) clock

    async def down(job_ids: Any) -> Any:
        raise StoreUnavailable("no answer")

    s.store.read_overrides = down  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="cronfleet")
    await advance(clock, 8, s, step=0.25)  # eight instants, each reading the overrides
    said = [r for r in caplog.records if "cannot read overrides" in r.getMessage()]
    assert len(said) == 1
    frozen[0] = 10.5  # 10 s later: said again, with the count held back
    await advance(clock, 2, s, step=0.25)
    said = [r for r in caplog.records if "cannot read overrides" in r.getMessage()]
    assert len(said) == 2 and "more like this" in said[1].getMessage()
