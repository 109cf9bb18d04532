"""``JobState.enabled_at`` / ``skip_reason``: the one rule for "is this job enabled at t",
and paused vs disabled, on every path that records a skip."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronfleet import FakeClock, Job, JobState, RunStatus, Scheduler, StoreUnavailable
from cronfleet.model import SkipReason, enabled_at, skip_reason

from .conftest import STORE_KINDS, T0, Recorder, settle

NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)
PAST, FUTURE = NOW - timedelta(minutes=1), NOW + timedelta(minutes=1)


async def _noop(ctx: Any) -> None:
    return None


def job(enabled: bool) -> Job:
    return Job.create("60s", _noop, id="j", enabled=enabled)


@pytest.mark.parametrize(
    ("declared", "override", "until", "enabled", "reason"),
    [
        (True, None, None, True, None),
        (False, None, None, False, SkipReason.DISABLED),
        (True, False, None, False, SkipReason.PAUSED),
        (False, False, None, False, SkipReason.PAUSED),
        (True, False, FUTURE, False, SkipReason.PAUSED),
        (True, False, PAST, True, None),  # the pause expired
        # an expired pause on a disabled job: the job is disabled, not paused
        (False, False, PAST, False, SkipReason.DISABLED),
        (False, True, None, True, None),  # forced on
        (False, True, PAST, False, SkipReason.DISABLED),
        (True, True, PAST, True, None),
    ],
)
def test_one_rule(declared: bool, override: bool | None, until: datetime | None,
                  enabled: bool, reason: SkipReason | None) -> None:
    j = job(declared)
    st = JobState("j", enabled_override=override, override_until=until)
    assert st.enabled_at(j, NOW) is enabled
    assert enabled_at(j, st, NOW) is enabled
    assert st.skip_reason(j, NOW) is reason
    assert skip_reason(j, st, NOW) is reason
    assert (reason is None) is enabled
    assert enabled_at(j, None, NOW) is declared
    assert skip_reason(j, None, NOW) is (None if declared else SkipReason.DISABLED)


Make = Callable[..., Scheduler]
SLOT = T0 + 60


@pytest.mark.parametrize("withdraw_fails", [False, True])
@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_expired_pause_on_a_disabled_job_is_recorded_disabled_on_every_path(
    make: Make, clock: FakeClock, running: list, withdraw_fails: bool
) -> None:
    """Claimed early while forced on; then paused until just before the slot. At the slot
    the pause has expired and the job is declared disabled: ``disabled``, whether the
    early claim is withdrawn (the slot planned as usual) or kept (the withdraw failed)."""
    s = make()
    rec = Recorder()
    s.job("60s", id="j", enabled=False)(rec)
    await s.start()
    running.append(s)
    await s.resume_async("j", by="ops")  # forced on: claimed early
    clock.set(SLOT - 0.3)
    await settle(s)
    await s.pause_async("j", by="ops", until=datetime.fromtimestamp(SLOT - 0.1, UTC))
    if withdraw_fails:
        async def down(items: Any) -> int:
            raise StoreUnavailable("down")

        s.store.withdraw = down  # type: ignore[attr-defined]
    clock.set(SLOT)
    await settle(s)
    assert rec.calls == []
    [run] = await s.runs_async("j")
    assert run.status is RunStatus.SKIPPED and run.slot.timestamp() == SLOT
    assert run.reason == "disabled"
