"""``cronfleet backfill`` covers the past only (#24, item 3): a --to later than now exits
2 naming --to, before any request is sent (the rule of every face: backfill_slots)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import Result


def test_a_to_in_the_future_exits_2_naming_it(cli: Callable[..., Result],
                                             project: Path) -> None:
    ahead = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    r = cli("backfill", "tick", "--from", "2h", "--to", ahead)
    assert r.exit_code == 2, r.stderr
    assert "--to:" in r.stderr and "later than now" in r.stderr
    r = cli("backfill", "tick", "--from", "1h", "--to", "2h")  # reversed: named too
    assert r.exit_code == 2 and "--to:" in r.stderr and "is before from" in r.stderr
