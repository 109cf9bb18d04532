"""``[[tasks]]`` with several schedules (``cron = [...]``), a one-off ``at``, ``start`` /
``end`` and ``except`` (calendar files next to the config file): every problem at once,
each at its key with its index."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from cronfleet import ConfigError, load_config
from cronfleet.cron import ComposedSchedule

HANDLERS = """
def work(ctx):
    pass
"""

COMPOSED = """
[scheduler]
timezone = "Europe/Paris"

[[tasks]]
id = "office"
cron = ["0 9 * * 1-5", "0 12 * * 6"]
start = 2026-01-01
end = "2026-12-31"
except = ["12-25", "0 12 * * 6", "calendar:cal/holidays.txt"]
handler = "handlers:work"

[[tasks]]
id = "once"
at = 2026-12-24T18:00:00+01:00
handler = "handlers:work"

[[tasks]]
id = "plain"
cron = ["@hourly"]
handler = "handlers:work"
"""


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p) for p in info.value.problems]


def test_composed_tasks_become_composed_jobs(write: Callable[..., Path],
                                             tmp_path: Path) -> None:
    write("handlers.py", HANDLERS)
    write("cal/holidays.txt", "05-01\n2026-05-14  # Ascension\n")
    config = load_config(write("cronfleet.toml", COMPOSED))
    office = config.tasks[0]
    assert office.schedule.cron == ["0 9 * * 1-5", "0 12 * * 6"]
    with config.load() as loaded:
        jobs = {j.id: j for j in loaded.jobs}
    s = jobs["office"].schedule
    assert isinstance(s, ComposedSchedule)
    assert s.expr.startswith("0 12 * * 6 | 0 9 * * 1-5 | start 2026-01-01T00:00:00+01:00 | "
                             "end 2026-12-31T23:59:59+01:00 | except 0 12 * * 6 | except "
                             "12-25 | except calendar:cal/holidays.txt#")
    days = [t.date().isoformat()
            for t in s.next_n(datetime.fromisoformat("2026-04-30T00:00:00+02:00"), 3)]
    assert days == ["2026-04-30", "2026-05-04", "2026-05-05"]  # not 05-01, nor Saturday
    o = jobs["once"].schedule
    assert isinstance(o, ComposedSchedule) and o.one_off
    assert o.expr == "at 2026-12-24T18:00:00+01:00"
    assert jobs["plain"].schedule.expr == "@hourly"  # a one-element list stays plain
    assert not isinstance(jobs["plain"].schedule, ComposedSchedule)


def test_every_problem_of_a_composed_task_at_once(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", """
        [[tasks]]
        id = "bad"
        cron = ["0 9 * * 1-5", "0 25 * * *"]
        at = "soon"
        start = "2026-02-01"
        end = "2026-01-01"
        except = ["02-30", "calendar:missing.txt", "*/0 * * * *"]
        handler = "handlers:work"
        """)
    got = [p.replace(f"{path.parent}/", "") for p in problems(path)]
    assert got == [
        "cronfleet.toml:3:8: task 'bad': cron[1]: hour: '25' is out of range 0-23 "
        "(column 3)",
        "cronfleet.toml:4:6: task 'bad': at: a one-off runs instead of a recurring "
        "schedule: give either the schedule (cron) or at, not both",
        "cronfleet.toml:4:6: task 'bad': at: 'soon' is not an ISO 8601 date-time "
        "(e.g. 2026-12-24T18:00:00+01:00) or date (2026-12-24)",
        "cronfleet.toml:6:7: task 'bad': end: 2026-01-01T23:59:59+00:00 is before start "
        "2026-02-01T00:00:00+00:00",
        "cronfleet.toml:7:10: task 'bad': except[0]: '02-30' is not a month-day (MM-DD)",
        "cronfleet.toml:7:10: task 'bad': except[1]: cannot read calendar file "
        "'missing.txt': No such file or directory",  # read next to the file
        "cronfleet.toml:7:10: task 'bad': except[2]: minute: step must be at least 1 "
        "(column 3)",
    ]


def test_a_task_needs_cron_or_at(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", """
        [[tasks]]
        id = "none"
        handler = "handlers:work"
        exclude = ["12-25"]
        """)
    got = [p.replace(f"{path.parent}/", "") for p in problems(path)]
    assert got == [
        "cronfleet.toml:1:1: task 'none': cron: missing (when it runs, e.g. cron = "
        "\"*/5 * * * *\" or cron = \"5m\"; or at = \"2026-12-24T18:00:00+01:00\" for a "
        "one-off)",
        "cronfleet.toml:4:1: task 'none': unknown key 'exclude' (did you mean 'except'?)",
    ]
