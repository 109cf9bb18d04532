"""The pure run-row decisions (store/ledger.py) and the request kinds (store/base.py),
table-driven: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronfleet.model import RunStatus, SkipReason, TriggeredBy
from cronfleet.store import ledger
from cronfleet.store.base import Dispatch, DispatchKind, watermark
from cronfleet.store.driver import ClaimRow, Retention, RunRow

NOW = datetime(2026, 5, 28, 20, 26, 40, tzinfo=UTC)
SLOT = NOW - timedelta(seconds=1)
DEADLINE = NOW + timedelta(seconds=90)
S = TriggeredBy.SCHEDULE


def item(**kw: Any) -> Dispatch:
    return Dispatch(job_id="a", slot=SLOT.timestamp(), triggered_by=S, **kw)


# (request, lease taken, expected status, reason, written now, lease busy)
CASES: list[tuple[str, Dispatch, bool, RunStatus, str | None, bool, bool]] = [
    ("hot path: leased, record=False", item(lease=True, record=False), True,
     RunStatus.RUNNING, None, False, False),
    ("hot path without a lease", item(record=False), False, RunStatus.RUNNING, None, False, False),
    ("plain run, recorded", item(), False, RunStatus.RUNNING, None, True, False),
    ("leased, recorded", item(lease=True), True, RunStatus.RUNNING, None, True, False),
    ("missed slot", item(skip_reason="missed", is_catchup=True), False,
     RunStatus.SKIPPED, "missed", True, False),
    ("jitter: deferred", item(lease=True, defer=True), False, RunStatus.PENDING, None, True,
     False),
    ("lease busy", item(lease=True, record=False), False, RunStatus.SKIPPED,
     SkipReason.ALREADY_EXECUTING.value, True, True),
    ("lease busy, queue one", item(lease=True, record=False, wait_if_busy=True), False,
     RunStatus.PENDING, None, True, True),
    ("manual, lease busy", item(claim="token", manual=True, lease=True), False,
     RunStatus.SKIPPED, SkipReason.ALREADY_EXECUTING.value, True, True),
    ("recovery", item(reclaim_token=7, is_recovery=True, lease=True), True,
     RunStatus.RUNNING, None, True, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "req", "taken", "status", "reason", "write", "busy"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_dispatch_run_table(
    name: str,
    req: Dispatch,
    taken: bool,
    status: RunStatus,
    reason: str | None,
    write: bool,
    busy: bool,
) -> None:
    run, write_now, lease_busy = ledger.dispatch_run(
        req, slot=SLOT, now=NOW, deadline=DEADLINE, token=5, instance="i1",
        lease_taken=taken, holder="other",
    )  # fmt: skip
    assert (run.status, run.reason, write_now, lease_busy) == (status, reason, write, busy)
    assert run.id is None and run.fencing_token == 5 and run.instance_id == "i1"
    assert run.slot == SLOT and run.claimed_at == NOW and run.job_id == "a"
    if status is RunStatus.RUNNING:
        assert run.started_at == NOW and run.deadline == DEADLINE and run.finished_at is None
    elif status is RunStatus.PENDING:
        assert run.started_at is None and run.deadline == DEADLINE
    else:
        assert run.started_at is None and run.finished_at == NOW and run.deadline is None
        assert run.result == {"skipped": True, "reason": reason}
    if busy and status is RunStatus.SKIPPED:
        assert run.logs[-1] == ledger.busy_log("other")
        assert "lease held by other" in run.logs[-1]


def test_dispatch_run_keeps_logs_and_result_of_the_request() -> None:
    req = item(skip_reason="missed", result={"why": "late"}, logs=["first"])
    run, _, _ = ledger.dispatch_run(
        req, slot=SLOT, now=NOW, deadline=DEADLINE, token=None, instance="i",
        lease_taken=False, holder=None,
    )  # fmt: skip
    assert run.result == {"why": "late"} and run.logs == ["first"]
    assert run.logs is not req.logs  # the request's list is never shared with the record


def test_wording() -> None:
    assert ledger.busy_log(None).endswith("(lease held by unknown)")
    assert ledger.skip_result("paused") == {"skipped": True, "reason": "paused"}
    assert ledger.interrupted_log(None, "me") == (
        "Interrupted: an instance did not finish this run before its lease expired "
        "(marked by me)"
    )
    before, anon, after = ledger.interrupted_log_parts("me")
    assert before + "host-1" + after == ledger.interrupted_log("host-1", "me")
    assert before + anon + after == ledger.interrupted_log(None, "me")


def test_lost_run_reconstruction() -> None:
    lost = ledger.lost_run("a", 9, "dead", SLOT, NOW - timedelta(1), now=NOW, marked_by="me")
    assert lost.status is RunStatus.INTERRUPTED and lost.reason == ledger.INTERRUPTED_REASON
    assert lost.slot == SLOT and lost.finished_at == NOW and lost.fencing_token == 9
    assert lost.error == ledger.INTERRUPTED_ERROR
    assert lost.logs == [ledger.interrupted_log("dead", "me")]
    manual = ledger.lost_run("a", 9, None, None, SLOT, now=NOW, marked_by="me")
    assert manual.slot == SLOT  # a manual run's token has no slot: its claim time stands in
    kept = ledger.kept_lost_run("a", 9, "dead", None, SLOT, overdue=NOW)
    assert kept.status is RunStatus.RUNNING and kept.manual and kept.deadline == NOW


# -- request kinds -------------------------------------------------------------------------

KINDS: list[tuple[Dispatch, DispatchKind]] = [
    (item(lease=True, record=False), DispatchKind.SCHEDULED),
    (item(lease=True, record=False, early=True), DispatchKind.EARLY),
    (item(skip_reason="missed", is_catchup=True), DispatchKind.MISSED),
    (item(claim="none", skip_reason="missed"), DispatchKind.MISSED),
    (item(claim="token", manual=True), DispatchKind.MANUAL),
    (item(claim="none", manual=True), DispatchKind.MANUAL),
    (item(claim="token", lease=True), DispatchKind.MANUAL),  # a token: asked for now
    (item(reclaim_token=3, is_recovery=True), DispatchKind.RECOVERY),
    (item(claim="none"), DispatchKind.LOCAL),
    (Dispatch.scheduled("a", 1.0, lease=True), DispatchKind.SCHEDULED),
    (Dispatch.early_claim("a", 1.0, hold=5), DispatchKind.EARLY),
    (Dispatch.missed("a", 1.0, reason="missed"), DispatchKind.MISSED),
    (Dispatch.missed("a", 1.0, reason="missed", local=True), DispatchKind.MISSED),
    (Dispatch.manual_run("a", 1.0, lease=True), DispatchKind.MANUAL),
    (Dispatch.manual_run("a", 1.0, lease=True, local=True), DispatchKind.MANUAL),
    (Dispatch.recovery("a", 1.0, token=4, lease=True), DispatchKind.RECOVERY),
    (Dispatch.local("a", 1.0), DispatchKind.LOCAL),
]


@pytest.mark.parametrize(("req", "kind"), KINDS, ids=[f"{k.value}-{i}" for i, (_, k) in
                                                        enumerate(KINDS)])
def test_kind_is_derived_from_the_fields(req: Dispatch, kind: DispatchKind) -> None:
    assert req.kind is kind
    # the keyword form of the same request derives the same kind
    fields = {f: getattr(req, f) for f in Dispatch.__dataclass_fields__ if f != "kind"}
    assert Dispatch(**fields).kind is kind


def test_named_constructors_set_what_the_stores_read() -> None:
    hot = Dispatch.scheduled("a", 1.0, lease=True, hold=30)
    assert (hot.claim, hot.lease, hot.record, hot.triggered_by) == ("slot", True, False, S)
    jitter = Dispatch.scheduled("a", 1.0, lease=True, defer=True)
    assert jitter.record and jitter.defer
    early = Dispatch.early_claim("a", 1.0, hold=5)
    assert early.early and early.lease and not early.record
    missed = Dispatch.missed("a", 1.0, reason="missed", local=True)
    assert missed.claim == "none" and missed.is_catchup
    assert missed.triggered_by is TriggeredBy.CATCHUP
    manual = Dispatch.manual_run("a", 1.0, lease=True, local=True)
    assert manual.claim == "none" and not manual.lease and manual.manual
    rec = Dispatch.recovery("a", 1.0, token=4, lease=True, catchup=True)
    assert rec.reclaim_token == 4 and rec.is_recovery and rec.is_catchup
    assert rec.triggered_by is TriggeredBy.RECOVERY


IMPOSSIBLE: list[tuple[str, dict[str, Any]]] = [
    ("early without lease", {"early": True, "record": False}),
    ("early recorded", {"early": True, "lease": True}),
    ("early deferred", {"early": True, "lease": True, "record": False, "defer": True}),
    ("early skipped", {"early": True, "lease": True, "record": False, "skip_reason": "x"}),
    ("early node-local", {"early": True, "lease": True, "record": False, "claim": "none"}),
    ("early token", {"claim": "token", "early": True, "lease": True, "record": False}),
    ("manual slot claim", {"manual": True}),
    ("manual recovery", {"manual": True, "claim": "token", "reclaim_token": 3}),
    ("recovery without claim", {"claim": "none", "reclaim_token": 3}),
    ("recovery skipped", {"reclaim_token": 3, "skip_reason": "missed"}),
    ("unknown claim", {"claim": "both"}),
    ("kind that does not match", {"kind": DispatchKind.MANUAL}),
]


@pytest.mark.parametrize(("name", "kw"), IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE])
def test_impossible_combinations_raise(name: str, kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        item(**kw)


# -- the watermark and retention rules ---------------------------------------------------


@pytest.mark.parametrize(
    ("claimed", "skipped", "expected"),
    [(None, None, None), (5.0, None, 5.0), (None, 7.0, 7.0), (5.0, 7.0, 7.0), (9.0, 7.0, 9.0)],
)
def test_watermark_rule(
    claimed: float | None, skipped: float | None, expected: float | None
) -> None:
    assert watermark(claimed, skipped) == expected


def test_retention_rule_claims() -> None:
    """Old claims go, except each job's claim of its newest slot; manual tokens too."""
    rule = Retention(claims_before=10.0, runs_before=0.0, runs_per_job=1)
    claims = [ClaimRow(1, "a", 1000, 1000), ClaimRow(2, "a", 2000, 2000),  # old, newest kept
              ClaimRow(3, "a", None, 3000),  # an old manual token
              ClaimRow(1, "b", 5000, 20_000)]  # recent  # fmt: skip
    assert rule.kept_claims(claims) == {("a", 2), ("b", 1)}


def test_retention_rule_runs() -> None:
    """Old finished runs go first, then those beyond the newest N of what is left; open
    runs and each job's newest claim-less skip stay."""
    rule = Retention(claims_before=0.0, runs_before=10.0, runs_per_job=2)
    runs = [
        RunRow(1, "a", False, 1000, True),  # old, but the newest claim-less skip of a
        RunRow(2, "a", True, None, False),  # open
        RunRow(3, "a", False, 20_000, False),
        RunRow(4, "a", False, 5000, False),  # old
        RunRow(5, "a", False, 30_000, False),
        RunRow(6, "a", False, 40_000, False),
    ]
    # after the age cut: 6, 5, 3, 2 (open), 1 (skip): 6 and 5 are the newest two
    assert rule.kept_runs(runs) == {6, 5, 2, 1}


def test_dispatch_runs_decides_like_dispatch_run_for_every_case() -> None:
    """The batch form (what the stores call) inlines only the hot path; every row it makes
    equals the single decision's."""
    from cronfleet.store.base import Dispatched

    out = [
        Dispatched(request=req, won=True, token=5)
        for _, req, _, _, _, _, _ in CASES
    ]
    lost = Dispatched(request=item(), won=False)
    acquired = {f"j{i}" for i, case in enumerate(CASES) if case[2]}
    for i, d in enumerate(out):
        d.request.job_id = f"j{i}"
    written = ledger.dispatch_runs(
        [*out, lost], slots=[SLOT] * (len(out) + 1), deadlines=[DEADLINE] * (len(out) + 1),
        now=NOW, instance="i1", acquired=acquired, holders={j.request.job_id: "other"
                                                            for j in out},
    )  # fmt: skip
    assert lost.run is None
    expected_written = []
    for d in out:
        run, write, busy = ledger.dispatch_run(
            d.request, slot=SLOT, now=NOW, deadline=DEADLINE, token=5, instance="i1",
            lease_taken=d.request.job_id in acquired, holder="other",
        )  # fmt: skip
        assert d.run == run
        assert d.holder == ("other" if busy else None)
        if write:
            expected_written.append(run)
    assert written == expected_written


def test_the_schedulers_wordings_live_here_unchanged() -> None:
    """The words the scheduler writes today (scheduler.py at c879552), one home for them."""
    assert ledger.override_skip_log("paused", "ops", "vendor down") == (
        "Skipped: the job is paused by ops (vendor down)"
    )
    assert ledger.override_skip_log("disabled", None, None) == "Skipped: the job is disabled"
    assert ledger.removed_or_skipped_log("paused", True) == "Skipped: the job is paused"
    assert ledger.removed_or_skipped_log("paused", False) == "Skipped: the job was removed"
    assert ledger.missed_log("2026-01-01T00:00:00+00:00", "missed while no scheduler ran it",
                             "RUN_ONCE", 3600.0) == (
        "Skipped: slot 2026-01-01T00:00:00+00:00 missed while no scheduler ran it "
        "(policy RUN_ONCE, window 3600s)"
    )
    why, result = ledger.missed_summary(None, "a", "b")
    assert why == "many missed slots from a to b summarised in this record"
    assert result == {"skipped": True, "reason": "missed", "count": None, "first": "a",
                      "last": "b"}
    assert ledger.store_unavailable_log("down") == (
        "Skipped: the store was unavailable (down) and the job requires a global claim"
    )
    assert ledger.shutdown_log() == (
        "Interrupted: the scheduler stopped before the run finished"
    )
    assert ledger.SHUTDOWN_REASON == "shutdown"
