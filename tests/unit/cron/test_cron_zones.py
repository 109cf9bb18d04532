"""The zone day cache, and the tz-database facts it relies on (see cronfleet/cron/zones.py)."""

from __future__ import annotations

import itertools
import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest

from cronfleet.cron.zones import Window, ZoneDays, wall_fields, wall_seconds


def _transitions(key: str) -> list[tuple[int, int, int]]:
    """(instant, offset before, offset after) of every offset change listed in the zone file."""
    pure = pytest.importorskip("zoneinfo._zoneinfo")
    try:
        z = pure.ZoneInfo.no_cache(key)
        trans, infos, before = z._trans_utc, z._ttinfos, z._tti_before
    except AttributeError:  # pragma: no cover - private layout changed: nothing to check
        pytest.skip("zoneinfo's pure-Python internals changed")
    out = []
    prev = int(before.utcoff.total_seconds()) if before is not None else None
    for t, info in zip(trans, infos, strict=True):
        off = int(info.utcoff.total_seconds())
        if prev is not None and off != prev:
            out.append((t, prev, off))
        prev = off
    return out


def test_tz_database_assumptions() -> None:
    """Offset changes of one zone are > 27 h apart, offsets stay within +-16 h and one change
    moves the clock by at most a day -- for every zone installed."""
    closest = (10**12, "")
    for key in sorted(zoneinfo.available_timezones()):
        changes = _transitions(key)
        for _t, before, after in changes:
            assert abs(before) <= 16 * 3600 and abs(after) <= 16 * 3600, key
            assert abs(after - before) <= 24 * 3600, key
        for (t1, _, _), (t2, _, _) in itertools.pairwise(changes):
            closest = min(closest, (t2 - t1, key))
    assert closest[0] > 27 * 3600, f"{closest[1]} has offset changes {closest[0]} s apart"


@pytest.mark.parametrize("key", ["Europe/Paris", "America/Sao_Paulo", "Australia/Lord_Howe",
                                 "Pacific/Apia", "America/New_York", "Asia/Gaza"])
def test_clean_days_match_brute_force(key: str) -> None:
    tz = zoneinfo.ZoneInfo(key)
    zd = ZoneDays(tz)
    day = date(2010, 1, 1)
    while day < date(2013, 1, 1):
        info = zd.info(day.year, day.month, day.day)
        base = wall_seconds(day.year, day.month, day.day)
        # every instant whose wall time falls on this day, sampled every 15 minutes
        offsets = set()
        for u in range(base - 16 * 3600, base + 86400 + 16 * 3600, 900):
            local = datetime.fromtimestamp(u, tz)
            if local.date() == day:
                offsets.add(int(local.utcoffset().total_seconds()))  # type: ignore[union-attr]
        if isinstance(info, int):
            assert offsets == {info}, (key, day)
        else:
            assert isinstance(info, Window)
            for a, b, o in info.segs:  # each segment is exact at its ends
                assert datetime.fromtimestamp(a, tz).utcoffset() == timedelta(seconds=o)
                assert datetime.fromtimestamp(b - 1, tz).utcoffset() == timedelta(seconds=o)
        day += timedelta(days=1)


def test_wall_seconds_round_trip() -> None:
    for w in (0, -1, 86399, 1_700_000_000, -62_000_000_000, 253_000_000_000):
        assert wall_seconds(*wall_fields(w)) == w
    assert wall_seconds(1970, 1, 2) == 86400
    assert datetime.fromtimestamp(wall_seconds(2024, 3, 31, 2, 30), UTC).isoformat() == (
        "2024-03-31T02:30:00+00:00"
    )
