"""cronfleet.toml: reading, defaults, environment overrides and exact error messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cronfleet import ConfigError, Locking, Missed, Overlap, load_config
from cronfleet.config import Config, timers_from_env

HANDLERS = """
def gc(ctx):
    ctx.log("gc")

async def report(ctx):
    return dict(ctx.config)

def no_args():
    pass

NOT_CALLABLE = 3
"""

VALID = """
[scheduler]
store = "sqlite:///data/fleet.db"
timezone = "Europe/Paris"
catch_up_window = "2h"
shutdown_grace = 10
run_retention = "7d"
runs_per_job = 50

[[tasks]]
id = "gc"
cron = "5m"
description = "garbage collect expired tokens"
handler = "handlers:gc"

[[tasks]]
id = "daily-report"
cron = "@daily"
handler = "handlers:report"
timezone = "UTC"
jitter = "30s"
missed = "RUN_ALL"
catch_up_window = 0
locking = "require_global"
overlap = "queue_one"
timeout = "10m"
enabled = false
recover = true
config_json = '{"recipients": ["ops@example.com"]}'
"""


def problems(path: Path | str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p) for p in info.value.problems]


def test_valid_config_is_read_with_defaults_applied(write: Callable[..., Path],
                                                    tmp_path: Path) -> None:
    write("handlers.py", HANDLERS)
    config = load_config(write("cronfleet.toml", VALID))
    assert config.store == f"sqlite:///{tmp_path / 'data' / 'fleet.db'}"  # next to the file
    assert config.store_origin == str(tmp_path / "cronfleet.toml")
    assert (config.timezone, config.catch_up_window, config.provider) == ("Europe/Paris",
                                                                         7200.0, "cron")
    assert (config.shutdown_grace, config.run_retention, config.runs_per_job) == (10, 604800, 50)
    gc, report = config.tasks
    assert gc.schedule.id == "gc" and gc.schedule.cron == "5m" and gc.schedule.timezone is None
    assert gc.handler is not None and gc.handler.__name__ == "gc"
    assert gc.handler_path == "handlers:gc"
    assert gc.location == f"{tmp_path / 'cronfleet.toml'}:9"
    assert report.schedule.config == {"recipients": ["ops@example.com"]}
    assert report.schedule.missed == "RUN_ALL" and report.schedule.enabled is False


def test_instance_ttl_is_read_and_reaches_the_scheduler(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    config = load_config(write("cronfleet.toml", '[scheduler]\ninstance_ttl = "20s"\n'))
    assert config.instance_ttl == 20.0
    with config.load() as loaded:
        assert loaded.scheduler(timers=False).instance_ttl == 20.0


def test_tasks_become_jobs_with_every_option(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    loaded = load_config(write("cronfleet.toml", VALID)).load()
    gc, report = loaded.jobs
    assert gc.id == "gc" and str(gc.schedule.tz) == "Europe/Paris"  # the [scheduler] zone
    assert gc.catch_up_window == 7200 and gc.missed is Missed.RUN_ONCE
    assert gc.description == "garbage collect expired tokens"
    assert report.id == "daily-report" and str(report.schedule.tz) == "UTC"
    assert (report.jitter, report.catch_up_window, report.timeout) == (30, 0, 600)
    assert report.missed is Missed.RUN_ALL and report.locking is Locking.REQUIRE_GLOBAL
    assert report.overlap is Overlap.QUEUE_ONE
    assert report.enabled is False and report.recover is True
    assert report.config == {"recipients": ["ops@example.com"]}
    assert report.handler is not None and report.handler.__name__ == "report"


def test_no_file_means_defaults(tmp_path: Path) -> None:
    config = load_config()
    assert config.path is None and config.tasks == [] and config.entry_points
    assert config.store == "sqlite:///cronfleet.db" and config.store_origin == "default"


def test_cronfleet_toml_in_the_working_directory_is_used(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    write("cronfleet.toml", VALID)
    assert load_config().display == "cronfleet.toml"


def test_environment_overrides(write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                               tmp_path: Path) -> None:
    write("handlers.py", HANDLERS)
    path = write("conf/other.toml", VALID)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CRONFLEET_CONFIG", str(path))
    monkeypatch.setenv("CRONFLEET_STORE", "sqlite:///elsewhere.db")
    config = load_config()
    assert config.path == path
    assert (config.store, config.store_origin) == ("sqlite:///elsewhere.db", "CRONFLEET_STORE")


def test_missing_files_and_bad_environment() -> None:
    assert problems("nope.toml") == [
        "cannot read the configuration nope.toml: No such file or directory"
    ]
    with pytest.raises(ConfigError) as info:
        load_config(env={"CRONFLEET_CONFIG": "/no/such.toml"})
    assert str(info.value) == ("cannot read the configuration CRONFLEET_CONFIG=/no/such.toml: "
                               "No such file or directory")
    with pytest.raises(ConfigError) as info:
        load_config(env={"CRONFLEET_STORE": "mysql://db"})
    assert str(info.value) == (
        "CRONFLEET_STORE: unknown store URL 'mysql://db': expected sqlite:///path.db, "
        "postgresql://user@host/db or redis://host:6379/0"
    )


def test_timers_from_env() -> None:
    assert timers_from_env({}) is None
    assert timers_from_env({"CRONFLEET_SCHEDULER": "0"}) is False
    assert timers_from_env({"CRONFLEET_SCHEDULER": "off"}) is False
    assert timers_from_env({"CRONFLEET_SCHEDULER": "1"}) is True
    with pytest.raises(ConfigError, match="CRONFLEET_SCHEDULER='maybe': expected 0"):
        timers_from_env({"CRONFLEET_SCHEDULER": "maybe"})


def test_invalid_toml_names_line_and_column(write: Callable[..., Path]) -> None:
    path = write("cronfleet.toml", '[scheduler]\ntimezone = "UTC\n')
    assert problems(path) == [f"{path}:2:16: invalid TOML: Illegal character '\\n'"]


TASK = '[[tasks]]\nid = "gc"\ncron = "5m"\nhandler = "handlers:gc"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cron syntax: the column points at the token inside the quoted expression
        (TASK.replace('"5m"', '"*/5 * 32 * *"'),
         "3:15: task 'gc': cron: day-of-month: '32' is out of range 1-31 (column 7)"),
        (TASK.replace('"5m"', '"@fortnightly"'),
         "3:9: task 'gc': cron: expression: unknown macro '@fortnightly' (expected @yearly, "
         "@annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>) "
         "(column 1)"),
        (TASK + 'timezone = "Mars/Olympus"\n',
         "5:12: task 'gc': timezone: unknown time zone 'Mars/Olympus' (expected an IANA name "
         "such as 'Europe/Paris')"),
        (TASK + 'timeout = "soon"\n',
         "5:11: task 'gc': timeout: invalid duration 'soon': unexpected 'soon' at column 1 "
         "(expected a number and a unit (ms, s, m, h, d, w), e.g. '30s', '10m', '1h30m')"),
        (TASK + "timeout = 0\n", "5:11: task 'gc': timeout: must be positive (got 0)"),
        (TASK + 'jitter = "-5s"\n',
         "5:10: task 'gc': jitter: invalid duration '-5s': must not be negative"),
        (TASK + 'overlap = "queue"\n',
         "5:11: task 'gc': overlap: 'queue' is not one of skip, queue_one, allow, replace "
         "(did you mean 'queue_one'?)"),
        (TASK + 'enabled = "no"\n',
         "5:11: task 'gc': enabled: expected true or false, got a string ('no')"),
        (TASK + "config_json = '{\"a\": 1'\n",
         "5:15: task 'gc': config_json: invalid JSON: Expecting ',' delimiter: line 1 "
         "column 8 (char 7)"),
        (TASK + "config_json = '[1, 2]'\n",
         "5:15: task 'gc': config_json: must be a JSON object ({...}), got list '[1, 2]'"),
        (TASK + 'schedule = "5m"\n', "5:1: task 'gc': unknown key 'schedule' (did you mean "
                                     "'cron'?)"),
        (TASK + "max_instances = 0\n",
         "5:17: task 'gc': max_instances: expected a whole number from 1 to 100, got 0"),
        (TASK + 'overlap = "allow"\nmax_instances = 2\n',
         "6:17: task 'gc': max_instances: 2 with overlap = 'allow': allow sets no limit at "
         "all; give overlap = 'skip', 'queue_one' or 'replace' to cap concurrent runs, or "
         "drop max_instances"),
        (TASK + "concurrency = 2\n", "5:1: task 'gc': unknown key 'concurrency' (did you "
                                     "mean 'max_instances'?)"),
        (TASK + 'timezon = "UTC"\n', "5:1: task 'gc': unknown key 'timezon' (did you mean "
                                     "'timezone'?)"),
        (TASK.replace('"handlers:gc"', '"handlers:gcc"'),
         "4:11: task 'gc': handler: cannot import 'handlers:gcc': 'handlers' has no attribute "
         "'gcc' (did you mean 'gc'?)"),
        (TASK.replace('"handlers:gc"', '"handlers.gc"'),
         "4:11: task 'gc': handler: 'handlers.gc' is not an import path: expected "
         "'module:attribute', e.g. 'myapp.tasks:cleanup' (did you mean 'handlers:gc'?)"),
        (TASK.replace('"handlers:gc"', '"myapp.jobs:gc"'),
         "4:11: task 'gc': handler: cannot import 'myapp.jobs:gc': no module named 'myapp'"),
        (TASK.replace('"handlers:gc"', '"handlers:no_args"'),
         "4:11: task 'gc': handler: 'handlers:no_args' cannot be called with one argument "
         "(signature no_args()); a handler receives a RunContext"),
        (TASK.replace('"handlers:gc"', '"handlers:NOT_CALLABLE"'),
         "4:11: task 'gc': handler: 'handlers:NOT_CALLABLE' is not callable (it is int)"),
        (TASK.replace('cron = "5m"\n', ""),
         "1:1: task 'gc': cron: missing (when it runs, e.g. cron = \"*/5 * * * *\" or "
         'cron = "5m"; or at = "2026-12-24T18:00:00+01:00" for a one-off)'),
        (TASK.replace('id = "gc"\n', ""),
         '1:1: task #1: id: missing (every task needs a unique id, e.g. id = "cleanup")'),
        (TASK.replace('"gc"', '"reports/gc"', 1),
         "2:6: task 'reports/gc': id: id 'reports/gc' is invalid: use 1-200 characters from "
         "letters, digits and ._:@+- starting with a letter or digit ('/' separates a "
         "plugin's name from its schedule ids)"),
        (TASK + "\n" + TASK,
         "7:6: task 'gc': id: duplicate id 'gc' (first declared at line 2)"),
        ('[tasks]\nid = "gc"\n',
         "1:1: tasks: expected [[tasks]] entries (an array of tables), got a single [tasks] "
         "table: write each task under its own [[tasks]] header"),
        ('[schedular]\ntimezone = "UTC"\n',
         "1:1: unknown table 'schedular' (did you mean 'scheduler'?) (expected [scheduler], "
         "[api] and [[tasks]])"),
        ('[[task]]\nid = "gc"\n',
         "1:1: unknown table 'task' (did you mean 'tasks'?) (expected [scheduler], [api] and "
         "[[tasks]])"),
        ('[apu]\nport = 1\n',
         "1:1: unknown table 'apu' (did you mean 'api'?) (expected [scheduler], [api] and "
         "[[tasks]])"),
        ('[api]\nprot = 8080\n', "2:1: api: unknown key 'prot' (did you mean 'port'?)"),
        ('[api]\nport = 70000\n',
         "2:8: api: port: expected a port number 0-65535, got a number (70000)"),
        ('[api]\nport = "8080"\n',
         "2:8: api: port: expected a port number 0-65535, got a string ('8080')"),
        ('[api]\nmetrics = "private"\n',
         "2:11: api: metrics: expected \"public\" or \"token\", got a string ('private')"),
        ('[api]\nenabled = "yes"\n',
         "2:11: api: enabled: expected true or false, got a string ('yes')"),
        ('[api]\nready_max_overdue = "soon"\n',
         "2:21: api: ready_max_overdue: invalid duration 'soon': unexpected 'soon' at column 1 "
         "(expected a number and a unit (ms, s, m, h, d, w), e.g. '30s', '10m', '1h30m')"),
        ('api = 3\n', "1:1: api: expected a table ([api])"),
        (TASK + 'team = "no spaces"\n',
         "5:8: task 'gc': team: team 'no spaces' is invalid: use 1-64 characters from letters, "
         "digits and ._- starting with a letter or digit"),
        ('[scheduler]\ntz = "UTC"\n',
         "2:1: scheduler: unknown key 'tz' (did you mean 'timezone'?)"),
        ('[scheduler]\nstore = "mysql://db/x"\n',
         "2:9: scheduler: store: unknown store URL 'mysql://db/x': expected sqlite:///path.db, "
         "postgresql://user@host/db or redis://host:6379/0"),
        ('[scheduler]\ncatch_up_window = true\n',
         "2:19: scheduler: catch_up_window: expected a duration like '30s' or a number of "
         "seconds, got a boolean (True)"),
        ('[scheduler]\ninstance_ttl = "500ms"\n',
         "2:16: scheduler: instance_ttl: expected at least 1 second, got 0.5s"),
        ('[scheduler]\ninstance_ttl = "soon"\n',
         "2:16: scheduler: instance_ttl: invalid duration 'soon': unexpected 'soon' at column "
         "1 (expected a number and a unit (ms, s, m, h, d, w), e.g. '30s', '10m', '1h30m')"),
        ('[scheduler]\nmetrics_job_label = "no"\n',
         "2:21: scheduler: metrics_job_label: expected true or false, got a string ('no')"),
        ('[scheduler]\nruns_per_job = 0\n',
         "2:16: scheduler: runs_per_job: expected a whole number of at least 1, got a number "
         "(0)"),
        ('[scheduler]\nplugins = "myapp:Reports"\n',
         '2:11: scheduler: plugins: expected a list of import paths, e.g. '
         '["myapp.jobs:Reports"]'),
        ('[scheduler]\nplugins = [\n  "myapp:Reports",\n  "myapp.Reports",\n]\n',
         "4:3: scheduler: plugins: 'myapp.Reports' is not an import path: expected "
         "'module:Class', e.g. 'myapp.jobs:Reports'"),
        ('[scheduler]\nprovider = "my/provider"\n',
         "2:12: scheduler: provider: 'my/provider' is invalid: use 1-200 characters from "
         "letters, digits and ._:@+- starting with a letter or digit ('/' separates a "
         "plugin's name from its schedule ids)"),
    ],
)
def test_one_problem_exact_message(write: Callable[..., Path], text: str,
                                   expected: str) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", text)
    assert problems(path) == [f"{path}:{expected}"]


def test_every_problem_is_reported_in_file_order(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", """
        [scheduler]
        timezone = "Mars/Olympus"

        [[tasks]]
        id = "a"
        cron = "61 * * * *"
        handler = "handlers:nope"

        [[tasks]]
        id = "b"
        cron = "5m"
        handler = "handlers:gc"
        missed = "never"
        """)
    found = problems(path)
    assert [p.split(": ", 1)[0] for p in found] == [f"{path}:{n}" for n in
                                                     ("2:12", "6:9", "7:11", "13:10")]
    assert "task 'b': missed: 'never' is not one of skip, run_once, run_all" in found[3]


def test_problem_excerpt_points_at_the_token(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", TASK.replace('"5m"', '"0 25 * * *"'))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [problem] = info.value.problems
    assert (problem.line, problem.column, problem.task, problem.key) == (3, 11, "gc", "cron")
    assert problem.excerpt() == '    3 | cron = "0 25 * * *"\n      |           ^'
    assert problem.to_dict()["message"] == str(problem)


def test_positions_survive_multiline_strings_and_arrays(write: Callable[..., Path]) -> None:
    write("handlers.py", HANDLERS)
    path = write("cronfleet.toml", '''
        [scheduler]
        plugins = [
          # [[tasks]] in a comment is not a header
        ]

        [[tasks]]
        id = "gc"
        description = """
        [[tasks]]
        cron = "this is text"
        """
        cron = "5m"
        handler = "handlers:gc"
        config_json = \'\'\'
        {"a": [1,
        2]}\'\'\'
        missed = "sometimes"
        ''')
    assert problems(path) == [
        f"{path}:17:10: task 'gc': missed: 'sometimes' is not one of skip, run_once, run_all"
    ]


def test_config_class_defaults_match_the_scheduler() -> None:
    c = Config()
    assert (c.timezone, c.catch_up_window, c.shutdown_grace, c.runs_per_job) == (
        "UTC", 3600.0, 30.0, 1000)
    import inspect

    from cronfleet import Scheduler

    default = inspect.signature(Scheduler).parameters["instance_ttl"].default
    assert c.instance_ttl == default == 1.5


def test_a_task_without_handler_waits_for_a_handlers_module(write: Callable[..., Path]) -> None:
    """Read (`check` warns), but not loaded to run until a handler or a handlers module
    is given."""
    config = load_config(write("cronfleet.toml", TASK.replace('handler = "handlers:gc"\n', "")))
    [warning] = config.warnings
    assert warning.line == 1 and warning.message.startswith(
        "task 'gc': handler: none yet: the built-in 'cron' provider needs handler = "
        '"module:function" on the task, or a module whose functions are named after the '
        'task ids: handlers = "myapp.tasks" in [scheduler] (or CRONFLEET_HANDLERS)')
    with pytest.raises(ConfigError) as info:
        config.load()
    assert [p.message for p in info.value.problems] == [warning.message]
