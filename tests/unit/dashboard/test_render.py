"""The dashboard's compact timeline markup and data, the run-now form's parameters and
what the run page picks out of a stored result."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cronfleet.dashboard import read
from cronfleet.dashboard.routes import cells_data, cells_html, run_details, trigger_params
from cronfleet.model import RunRecord, RunStatus, TriggeredBy

T = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)  # the clocks go back in Paris at 01:00 UTC


def decode(data: str) -> tuple[list[int], list[int], str]:
    """What app.js does with #timeline-data."""
    raw = json.loads(data)

    def flat(items: list[Any]) -> list[int]:  # [v, n]: v repeated n times
        return [y for x in items for y in ([x] if isinstance(x, int) else [x[0]] * x[1])]

    times = [raw["t0"]]
    for d in flat(raw["dt"]):
        times.append(times[-1] + d)
    runs, prev = [], 0
    for v in flat(raw["runs"]):
        if v:
            prev += v
            runs.append(prev)
        else:
            runs.append(0)
    return times, runs, raw["tz"]


def test_timeline_markup_is_one_element_per_slot_and_its_data_round_trips() -> None:
    paris = ZoneInfo("Europe/Paris")
    slots = [(T + timedelta(minutes=30 * k)).astimezone(paris) for k in range(8)]
    ids = [7, 0, 9, 8, 0, 0, 40, 41]  # a recovery row can be newer than the next slot's
    runs: list[RunRecord | None] = [
        None if not i else RunRecord(i, "j", s, TriggeredBy.SCHEDULE,
                                     RunStatus.FAILED if i == 9 else RunStatus.SUCCEEDED)
        for i, s in zip(ids, slots, strict=True)]
    tl = read.Timeline(slots, [s.timestamp() for s in slots], runs)
    html = str(cells_html(tl))
    assert html.count("<i ") == 8 and html.startswith("<i class=su></i>"
                                                      "<i class=no></i>"
                                                      "<i class=fa></i>")
    times, got_ids, tz = decode(str(cells_data(tl, paris)))
    assert times == [int(s.timestamp()) for s in slots] and got_ids == ids
    assert tz == "Europe/Paris"
    assert decode(str(cells_data(tl, UTC)))[2] == "UTC"
    empty = read.Timeline([], [], [])
    assert str(cells_html(empty)) == "" and decode(str(cells_data(empty, UTC)))[1] == []
    # indexing gives the cells the rest of the code knows
    assert tl[2].state == "failed" and tl[2].run is runs[2] and tl[-1].slot == slots[-1]


def test_trigger_params_from_the_form_rows() -> None:
    assert trigger_params(["", ""], ["", " "]) is None
    assert trigger_params(["region", " date ", ""], ["eu", "2026-11-30", ""]) == {
        "region": "eu", "date": "2026-11-30"}
    with pytest.raises(ValueError, match="row 2: the value 'x' has no name"):
        trigger_params(["a", ""], ["1", "x"])
    with pytest.raises(ValueError, match="row 2: 'a' is given twice"):
        trigger_params(["a", "a"], ["1", "2"])
    with pytest.raises(ValueError, match="longer than 4096"):
        trigger_params(["a"], ["x" * 5000])
    with pytest.raises(ValueError, match="at most 50"):
        trigger_params([f"k{i}" for i in range(51)], ["v"] * 51)


def test_run_details_attempts_and_late_result() -> None:
    attempt = {"attempt": 1, "request": {"method": "GET", "url": "https://x.example/",
                                         "headers": {"Authorization": "[redacted]"}},
               "response": {"status": 502}, "ok": False}
    got = run_details({"ok": False, "attempts": [attempt, "junk"],
                       "late_result": {"status": "succeeded", "instance_id": "w-2"}})
    assert got["attempts"] == [attempt]
    assert got["late"] == {"status": "succeeded", "instance_id": "w-2"}
    assert run_details("text") == {"attempts": [], "late": None}
    assert run_details({"rows": 3}) == {"attempts": [], "late": None}


def test_run_logs_one_line_each_and_the_cut_marked() -> None:
    """The run page's log: one line per stored line (what a <pre> shows), the command's
    ``[output cut: ...]`` line as a <mark>, the text escaped; a run in progress says it
    is live and leaves the refresh on, an ended one says the region is final."""
    from cronfleet.dashboard.routes import _env
    from cronfleet.jobs.command import OutputLog

    logs: list[str] = ["$ seq 1 400"]
    out = OutputLog(logs, 200, lambda s: s)
    for k in range(1, 401):
        out.feed("stdout", f"<{k}>\n".encode())
    out.close()
    run = RunRecord(5, "j", T, TriggeredBy.API, RunStatus.RUNNING, logs=logs)
    html = _env.get_template("_run.html").render(
        run=run, s=None, tz=UTC, command=True, attempts=[], late=None, result=None)
    pre = html.split('<pre class="log"', 1)[1].split("</pre>", 1)[0]
    lines = pre.split(">", 1)[1].split("\n")
    assert lines[0] == "$ seq 1 400" and lines[1] == "[stdout] &lt;1&gt;"
    cut = [ln for ln in lines if "output cut" in ln]
    assert len(cut) == 1 and cut[0].startswith('<mark class="cut">[output cut: ')
    assert lines[-2] == "[stdout] &lt;400&gt;" and lines[-1] == ""
    assert 'id="output-cut"' in html and 'id="tailing"' in html and "data-final" not in html
    ended = RunRecord(5, "j", T, TriggeredBy.API, RunStatus.SUCCEEDED, logs=logs[:3])
    html = _env.get_template("_run.html").render(
        run=ended, s=None, tz=UTC, command=True, attempts=[], late=None, result=None)
    assert "data-final" in html and 'id="tailing"' not in html and "output-cut" not in html


def test_the_run_page_lists_the_attempts_numbered_from_1() -> None:
    from cronfleet.attempts import attempt_line, attempts_of
    from cronfleet.dashboard.routes import _env

    t0 = T.timestamp()
    logs = [attempt_line(1, 3, "failed", t0, t0 + 0.5, "RuntimeError: down", 2),
            attempt_line(2, 3, "failed", t0 + 2.5, t0 + 3, "RuntimeError: still down", 2),
            attempt_line(3, 3, "succeeded", t0 + 5, t0 + 5.25, None)]
    run = RunRecord(9, "j", T, TriggeredBy.SCHEDULE, RunStatus.SUCCEEDED, attempt=3,
                    started_at=T, finished_at=T + timedelta(seconds=5.25), logs=logs)
    html = _env.get_template("_run.html").render(
        run=run, s=None, tz=UTC, command=False, attempts=[], late=None, result=None,
        tries=attempts_of(run))
    assert '<dd id="attempt-count">3</dd>' in html
    table = html.split('<table id="run-attempts">', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[2:]
    assert [r.split("<td>")[1].split("</td>")[0] for r in rows] == ["1", "2", "3"]
    assert "RuntimeError: still down" in rows[1] and "st-succeeded" in rows[2]
    assert "2026-10-25T00:00:02.500Z" in rows[1]


def test_timeline_data_repeats_are_short_and_round_trip() -> None:
    slots = [T + timedelta(minutes=k) for k in range(10_000)]
    runs: list[RunRecord | None] = [
        None if k % 500 == 7 else RunRecord(100 + k, "j", s, TriggeredBy.SCHEDULE,
                                           RunStatus.SUCCEEDED)
        for k, s in enumerate(slots)]
    tl = read.Timeline(slots, [s.timestamp() for s in slots], runs)
    data = str(cells_data(tl, UTC))
    assert len(data) < 1000  # was ~50 KB of numbers
    times, ids, _ = decode(data)
    assert times == [int(s.timestamp()) for s in slots]
    assert ids == [0 if r is None else r.id for r in runs]
