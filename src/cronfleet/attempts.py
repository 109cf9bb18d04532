"""The attempts of a run: one record per try of its handler or request, numbered 1..n.

A run is one slot's execution; inside it the handler may be tried several times
(``retry``), or an HTTP job may send its request several times. Each try is an
:class:`Attempt`: its number, start, end, outcome, error and, for HTTP, the response.
:func:`attempts_of` is the one reader (API, CLI, dashboard, metrics); it reads what the run
already keeps:

* an HTTP run: the attempt records of its result (``result.attempts``), in order;
* a handler run retried by the runtime: the line the runtime writes in the run's log at
  the end of each attempt (:func:`attempt_line`, the one writer of that line);
* any other ended run: one attempt, the run itself.

A run that never started (skipped, pending) has no attempt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cronfleet.clock import slot_text
from cronfleet.model import RunRecord, RunStatus

__all__ = ["OUTCOMES", "Attempt", "attempt_line", "attempt_outcomes", "attempts_of"]

#: what an attempt can end as (``running`` while it runs)
OUTCOMES = ("succeeded", "failed", "timed_out", "cancelled", "interrupted", "running")

_LINE = re.compile(
    r"attempt (\d+)/(\d+) (\w+) after ([0-9.]+)s, started (\S+?)(?:: (.*?))?"
    r"(?:; retrying in ([0-9.]+)s)?", re.DOTALL)
_NEVER_STARTED = (RunStatus.SKIPPED, RunStatus.PENDING)


@dataclass(frozen=True)
class Attempt:
    """One try of a run. ``response``: an HTTP attempt's status, headers and body excerpt
    (None for a handler, or when no response came); ``retry_in``: the wait before the
    next attempt (None for the last)."""

    number: int
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str
    error: str | None = None
    response: dict[str, Any] | None = None
    retry_in: float | None = None

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "duration": None if self.duration is None else round(self.duration, 6),
            "outcome": self.outcome,
            "error": self.error,
            "response": self.response,
            "retry_in": self.retry_in,
        }


def _iso(d: datetime | None) -> str | None:
    return None if d is None else slot_text(d)


def attempt_line(number: int, of: int, outcome: str, started: float, finished: float,
                 error: str | None, retry_in: float | None = None) -> str:
    """The run-log line of one ended attempt of a retried handler (epoch seconds)."""
    start = slot_text(datetime.fromtimestamp(round(started, 3), UTC))
    return (f"attempt {number}/{of} {outcome} after {finished - started:.3f}s, started "
            f"{start}" + (f": {error}" if error else "")
            + ("" if retry_in is None else f"; retrying in {retry_in:g}s"))


def attempts_of(run: RunRecord) -> list[Attempt]:
    """The attempts of ``run``, numbered 1..n in the order they were made."""
    if run.status in _NEVER_STARTED or run.started_at is None:
        return []
    result = run.result
    if isinstance(result, dict) and isinstance(result.get("attempts"), list) \
            and all(isinstance(a, dict) and "request" in a for a in result["attempts"]):
        return _http(result["attempts"], run)
    found = [m for line in run.logs if (m := _LINE.fullmatch(line))]
    if not found:
        return [Attempt(1, run.started_at, run.finished_at, run.status.value, run.error)]
    out = []
    for number, m in enumerate(found, 1):
        started = datetime.fromisoformat(m.group(5).replace("Z", "+00:00"))
        out.append(Attempt(number, started, started + timedelta(seconds=float(m.group(4))),
                           m.group(3), m.group(6) or None,
                           retry_in=None if m.group(7) is None else float(m.group(7))))
    if run.status is RunStatus.RUNNING or out[-1].retry_in is not None:
        # the attempt after the last one logged is under way, or ended without its line
        # (cancelled, interrupted): the run's own end and outcome are its
        last = out[-1]
        start = (last.finished_at + timedelta(seconds=last.retry_in or 0)
                 if last.finished_at is not None else None)
        out.append(Attempt(len(out) + 1, start, run.finished_at, run.status.value,
                           run.error if run.status is not RunStatus.RUNNING else None))
    return out


def _http(records: list[dict[str, Any]], run: RunRecord) -> list[Attempt]:
    out = []
    for number, rec in enumerate(records, 1):
        started = _parse_time(rec.get("started_at"))
        took = (rec.get("timings") or {}).get("total_ms")
        finished = (started + timedelta(milliseconds=float(took))
                    if started is not None and isinstance(took, int | float) else None)
        ok = rec.get("ok")
        if ok is None:  # records of an older release: a 2xx without error is a success
            status = (rec.get("response") or {}).get("status")
            ok = rec.get("error") is None and isinstance(status, int) and 200 <= status < 300
        error = rec.get("error") or (None if ok else rec.get("failure")
                                     or _status_text(rec.get("response")))
        out.append(Attempt(number, started, finished, "succeeded" if ok else "failed",
                           error, rec.get("response"), rec.get("retry_in")))
    if run.status is RunStatus.TIMED_OUT and out:  # the job's timeout ended the last one
        last = out[-1]
        out[-1] = Attempt(last.number, last.started_at, run.finished_at, "timed_out",
                          run.error, last.response)
    return out


def _status_text(response: Any) -> str | None:
    status = response.get("status") if isinstance(response, dict) else None
    return None if status is None else f"HTTP {status}"


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def attempt_outcomes(run: RunRecord) -> list[str]:
    """The outcome of each attempt of an ended run (``/metrics``' attempts counter): the
    run's own status for a run tried once, without reading its log."""
    if run.status in _NEVER_STARTED or run.started_at is None:
        return []
    if run.attempt <= 1 and not (isinstance(run.result, dict) and "attempts" in run.result):
        return [run.status.value]
    return [a.outcome for a in attempts_of(run)]
