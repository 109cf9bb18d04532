"""ScheduledPlugin loading: config lists and entry points, loud failures, priorities,
provider switching, and plugin jobs firing on the real loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronfleet import ConfigError, FakeClock, RunStatus, Schedule, load_config
from cronfleet.config import Loaded
from cronfleet.plugins import EntryPointSpec, import_object

PLUGS = '''
from cronfleet import Schedule, ScheduledPlugin

CALLS = []


class Reports(ScheduledPlugin):
    def name(self):
        return "reports"

    def schedules(self):
        return [
            Schedule(id="daily", cron="@daily", description="daily report",
                     config_json='{"to": "ops"}'),
            Schedule(id="pulse", cron="10s", config_json="opaque, not JSON"),
        ]

    async def run(self, ctx):
        CALLS.append((ctx.job_id, ctx.schedule_id, dict(ctx.config)))
        return ctx.schedule_id

    def cleanup(self):
        CALLS.append("cleanup")


class Override(ScheduledPlugin):
    def name(self):
        return "override"

    def priority(self):
        return 2000

    def schedules(self):
        return [Schedule(id="daily", cron="@hourly")]

    def run(self, ctx):
        CALLS.append((ctx.job_id, "override"))


class Twin(Reports):
    def name(self):
        return "twin"


class Raises(ScheduledPlugin):
    def name(self):
        return "raises"

    def schedules(self):
        raise RuntimeError("database is down")

    def run(self, ctx):
        pass


class Bad(ScheduledPlugin):
    def name(self):
        return "bad"

    def schedules(self):
        return [
            Schedule(id="ok", cron="5m"),
            Schedule(id="broken", cron="* * * *", timeout="-1s"),
            Schedule(id="ok", cron="1m"),
        ]

    def run(self, ctx):
        pass


class NotAList(Raises):
    def name(self):
        return "notalist"

    def schedules(self):
        return {"id": "x"}


class Dicts(Raises):
    def name(self):
        return "dicts"

    def schedules(self):
        return [{"id": "x", "cron": "5m"}]


class Abstract(ScheduledPlugin):
    def name(self):
        return "abstract"

    def schedules(self):
        return []


class Slash(Raises):
    def name(self):
        return "re/ports"


class BadPriority(Reports):
    def priority(self):
        return "high"


class Retrying(ScheduledPlugin):
    def __init__(self):
        self.tasks = {}

    def name(self):
        return "retrying"

    def provide(self, tasks):
        self.tasks = {t.schedule.id: t for t in tasks}

    def schedules(self):
        return [t.schedule for t in self.tasks.values()]

    def run(self, ctx):
        task = self.tasks[ctx.schedule_id]
        for attempt in (1, 2, 3):
            try:
                return task.handler(ctx)
            except Exception as exc:
                ctx.log(f"attempt {attempt} failed: {exc}")
        raise RuntimeError("gave up")


class Forgetful(Retrying):
    def name(self):
        return "forgetful"

    def schedules(self):
        return []


instance = Reports()
'''

HANDLERS = '''
FLAKY = []


def gc(ctx):
    ctx.log("gc ran")
    return "gc"


def flaky(ctx):
    FLAKY.append(ctx.slot)
    if len(FLAKY) < 2:
        raise ValueError("first try fails")
    return "ok on try 2"
'''

TASKS = '''
[[tasks]]
id = "gc"
cron = "5m"
handler = "handlers:gc"

[[tasks]]
id = "flaky"
cron = "1h"
handler = "handlers:flaky"
'''


@pytest.fixture
def conf(write: Callable[..., Path]) -> Callable[..., Path]:
    """conf(plugins=[...], provider=..., tasks=...): a cronfleet.toml next to the modules."""
    write("plugs.py", PLUGS)
    write("handlers.py", HANDLERS)

    def go(plugins: list[str] = (), provider: str | None = None,  # type: ignore[assignment]
           tasks: str = TASKS, extra: str = "") -> Path:
        # fixed lines: plugins on line 3, provider on 4, the tasks' headers on 7 and 12
        lines = [
            "[scheduler]",
            'store = "sqlite:///fleet.db"',
            "plugins = [" + ", ".join(f'"{p}"' for p in plugins) + "]",
            f'provider = "{provider or "cron"}"',
            extra or "# no extra key",
        ]
        return write("cronfleet.toml", "\n".join(lines) + "\n" + tasks)

    return go


def ep(name: str, value: str) -> EntryPointSpec:
    return EntryPointSpec(name, value, "acme-plugins 1.2", lambda: import_object(value))


def calls() -> list[Any]:
    return import_object("plugs:CALLS")  # type: ignore[no-any-return]


def test_plugin_listed_in_the_config(conf: Callable[..., Path]) -> None:
    path = conf(plugins=["plugs:Reports"])
    loaded = load_config(path).load()
    assert loaded.job_ids() == ["gc", "flaky", "reports/daily", "reports/pulse"]
    by_id = {j.id: j for j in loaded.jobs}
    daily, pulse = by_id["reports/daily"], by_id["reports/pulse"]
    assert daily.description == "daily report" and daily.source == "plugin reports"
    assert daily.config == {"to": "ops"}  # a JSON object is handed to the handler
    assert pulse.config == {}  # opaque text: the runtime does not interpret it
    assert getattr(daily.handler, "__self__", None) is loaded.plugins[1].plugin
    assert by_id["gc"].source == f"{path}:7"
    cron, reports = loaded.plugins
    assert (cron.name, cron.provider, cron.jobs) == ("cron", True, ["gc", "flaky"])
    assert reports.origin == f"plugs:Reports listed in {path}:3"
    assert reports.priority == 1000 and reports.jobs == ["reports/daily", "reports/pulse"]


def test_an_instance_can_be_listed(conf: Callable[..., Path]) -> None:
    loaded = load_config(conf(plugins=["plugs:instance"])).load()
    assert "reports/pulse" in loaded.job_ids()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("plugs:Raises", "plugin 'raises' ({origin}): schedules() raised RuntimeError: "
                         "database is down"),
        ("plugs:NotAList", "plugin 'notalist' ({origin}): schedules() must return a list of "
                           "Schedule, got dict"),
        ("plugs:Dicts", "plugin 'dicts' ({origin}): schedules()[0] is a dict, not a "
                        "cronfleet.Schedule"),
        ("plugs:Abstract", "plugin {origin}: cannot create it: TypeError: Can't instantiate "
                           "abstract class Abstract with abstract method run"),
        ("plugs:Slash", "plugin {origin}: name() 're/ports' is invalid: use 1-200 characters "
                        "from letters, digits and ._:@+- starting with a letter or digit ('/' "
                        "separates a plugin's name from its schedule ids)"),
        ("plugs:BadPriority", "plugin {origin}: TypeError: priority() must return an int, got "
                              "a string ('high')"),
        ("plugs:CALLS", "plugin {origin}: cannot create it: TypeError: [] is not a "
                        "ScheduledPlugin (a class or an object with name(), schedules() and "
                        "run()): no name(), schedules(), run()"),
        ("plugs:Nope", "scheduler: plugins: cannot import 'plugs:Nope': 'plugs' has no "
                       "attribute 'Nope'"),
        ("myapp.jobs:Reports", "scheduler: plugins: cannot import 'myapp.jobs:Reports': no "
                               "module named 'myapp'"),
    ],
)
def test_a_plugin_that_fails_to_load_is_an_error(conf: Callable[..., Path], ref: str,
                                                 message: str) -> None:
    path = conf(plugins=[ref])
    with pytest.raises(ConfigError) as info:
        load_config(path).load()
    origin = f"{ref} listed in {path}:3"
    assert [str(p) for p in info.value.problems] == [
        f"{path}:3:12: " + message.format(origin=origin)
    ]


def test_invalid_schedules_name_the_plugin_the_schedule_and_the_key(
    conf: Callable[..., Path],
) -> None:
    path = conf(plugins=["plugs:Bad"])
    with pytest.raises(ConfigError) as info:
        load_config(path).load()
    prefix = f"{path}:3:12: plugin 'bad' (plugs:Bad listed in {path}:3): "
    assert [str(p) for p in info.value.problems] == [
        prefix + "schedule 'broken': cron: expression: expected 5 fields (minute hour "
                 "day-of-month month day-of-week) or 6 (with a leading seconds field), got 4 "
                 "(column 7)",
        prefix + "schedule 'broken': timeout: invalid duration '-1s': must not be negative",
        prefix + "schedule 'ok': id: declared twice",
    ]
    assert [(p.plugin, p.schedule, p.key) for p in info.value.problems] == [
        ("bad", "broken", "cron"), ("bad", "broken", "timeout"), ("bad", "ok", "id")]


def test_non_strict_load_leaves_the_failed_plugin_out(conf: Callable[..., Path]) -> None:
    loaded = load_config(conf(plugins=["plugs:Raises", "plugs:Reports"])).load(strict=False)
    assert loaded.job_ids() == ["gc", "flaky", "reports/daily", "reports/pulse"]
    assert [p.plugin for p in loaded.problems] == ["raises"]
    assert [p.name for p in loaded.plugins] == ["cron", "reports"]


def test_higher_priority_wins_with_a_warning_naming_both(conf: Callable[..., Path]) -> None:
    path = conf(plugins=["plugs:Reports", "plugs:Override"])
    loaded = load_config(path).load()
    assert loaded.job_ids() == ["gc", "flaky", "reports/pulse", "override/daily"]
    assert loaded.warnings == [
        f"schedule id 'daily' is declared twice: plugin 'override' (plugs:Override listed in "
        f"{path}:3, priority 2000) wins over plugin 'reports' (plugs:Reports listed in "
        f"{path}:3, priority 1000) by higher priority (2000 > 1000); job 'reports/daily' will "
        "not run"
    ]


def test_equal_priority_first_declared_wins(conf: Callable[..., Path]) -> None:
    loaded = load_config(conf(plugins=["plugs:Twin", "plugs:Reports"])).load()
    assert loaded.job_ids() == ["gc", "flaky", "twin/daily", "twin/pulse"]
    assert len(loaded.warnings) == 2
    assert "same priority 1000, declared first ([[tasks]], then [scheduler] plugins in order, " \
           "then entry points by name); set priority() to choose; job 'reports/pulse' will " \
           "not run" in loaded.warnings[1]


def test_tasks_take_part_in_schedule_id_conflicts(conf: Callable[..., Path]) -> None:
    tasks = TASKS.replace('id = "gc"', 'id = "daily"')
    path = conf(plugins=["plugs:Reports", "plugs:Override"], tasks=tasks)
    loaded = load_config(path).load()
    assert loaded.job_ids() == ["flaky", "reports/pulse", "override/daily"]
    assert loaded.warnings[0].startswith(
        f"schedule id 'daily' is declared twice: plugin 'override' (plugs:Override listed in "
        f"{path}:3, priority 2000) wins over task 'daily' ({path}:7, provider 'cron', "
        "priority 1000) by higher priority"
    )


def test_entry_points(conf: Callable[..., Path]) -> None:
    path = conf()
    loaded = load_config(path).load(entry_points=[ep("reports", "plugs:Reports")])
    assert loaded.job_ids()[-2:] == ["reports/daily", "reports/pulse"]
    assert loaded.plugins[1].origin == ("entry point 'reports' (plugs:Reports) of "
                                        "acme-plugins 1.2")
    # listed in the config too: loaded once
    loaded = load_config(conf(plugins=["plugs:Reports"])).load(
        entry_points=[ep("reports", "plugs:Reports")])
    assert [p.name for p in loaded.plugins] == ["cron", "reports"]
    # switched off in the config
    loaded = load_config(conf(extra="entry_points = false")).load(
        entry_points=[ep("reports", "plugs:Reports")])
    assert loaded.job_ids() == ["gc", "flaky"]


def test_a_broken_entry_point_is_loud(conf: Callable[..., Path]) -> None:
    def boom() -> Any:
        raise ImportError("cannot import name 'Reports' from 'acme'")

    with pytest.raises(ConfigError) as info:
        load_config(conf()).load(entry_points=[EntryPointSpec("acme", "acme:Reports",
                                                              "acme 0.1", boom)])
    assert str(info.value) == ("plugin entry point 'acme' (acme:Reports) of acme 0.1: cannot "
                               "load it: ImportError: cannot import name 'Reports' from 'acme'")


def test_plugin_names_are_unique(conf: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(conf(plugins=["plugs:Reports"])).load(
            entry_points=[ep("other", "plugs:instance")])
    assert str(info.value).startswith(
        "plugin 'reports' (entry point 'other' (plugs:instance) of acme-plugins 1.2): another "
        "plugin already has this name (plugs:Reports listed in")


def test_switching_provider_keeps_the_tasks_and_their_ids(conf: Callable[..., Path]) -> None:
    builtin = load_config(conf()).load()
    switched = load_config(conf(plugins=["plugs:Retrying"], provider="retrying")).load()
    assert switched.job_ids() == builtin.job_ids() == ["gc", "flaky"]
    [provider] = switched.plugins
    assert provider.name == "retrying" and provider.provider
    assert all(getattr(j.handler, "__self__", None) is provider.plugin for j in switched.jobs)
    # from an entry point, by its entry-point name
    loaded = load_config(conf(provider="retrying")).load(
        entry_points=[ep("retrying", "plugs:Retrying")])
    assert loaded.plugins[0].provider and loaded.job_ids() == ["gc", "flaky"]


def test_a_task_runs_through_the_provider(conf: Callable[..., Path]) -> None:
    loaded = load_config(conf(plugins=["plugs:Retrying"], provider="retrying")).load()
    run = loaded.scheduler(timers=False).trigger("flaky")
    assert run.status is RunStatus.SUCCEEDED and run.result == "ok on try 2"
    assert run.logs[-1] == "attempt 1 failed: first try fails"


def test_provider_problems(conf: Callable[..., Path]) -> None:
    path = conf(plugins=["plugs:Reports"], provider="retryin")
    with pytest.raises(ConfigError) as info:
        load_config(path).load()
    assert [str(p) for p in info.value.problems] == [
        f"{path}:4:12: scheduler: provider: no plugin named 'retryin' (available: reports; "
        "the built-in provider is 'cron')"
    ]
    path = conf(plugins=["plugs:Retrying"], provider="retryin")
    with pytest.raises(ConfigError, match="no plugin named 'retryin' \\(did you mean "
                                          "'retrying'\\?\\)"):
        load_config(path).load()
    path = conf(plugins=["plugs:Reports"], provider="reports")
    with pytest.raises(ConfigError) as info:
        load_config(path).load()
    assert str(info.value) == (
        f"{path}:3:12: provider 'reports' (plugs:Reports listed in {path}:3): cannot take the "
        "[[tasks]]: it has no provide(tasks) method"
    )
    path = conf(plugins=["plugs:Forgetful"], provider="forgetful")
    with pytest.raises(ConfigError) as info:
        load_config(path).load()
    assert [str(p).split(": ", 2)[2] for p in info.value.problems] == [
        f"schedules() does not declare task 'gc' ({path}:7); it would never run",
        f"schedules() does not declare task 'flaky' ({path}:12); it would never run",
    ]


def test_handler_is_optional_for_another_provider(conf: Callable[..., Path]) -> None:
    tasks = '[[tasks]]\nid = "x"\ncron = "5m"\n'
    with pytest.raises(ConfigError, match="handler: none yet"):
        load_config(conf(tasks=tasks)).load()
    config = load_config(conf(plugins=["plugs:Retrying"], provider="retrying", tasks=tasks))
    assert config.tasks[0].handler is None


def test_cleanup_runs_once(conf: Callable[..., Path]) -> None:
    with load_config(conf(plugins=["plugs:Reports"])).load() as loaded:
        assert "cleanup" not in calls()
    loaded.cleanup()
    assert calls().count("cleanup") == 1


def test_scheduler_from_config_and_environment(conf: Callable[..., Path],
                                               tmp_path: Path) -> None:
    loaded = load_config(conf()).load()
    s = loaded.scheduler(env={"CRONFLEET_SCHEDULER": "0"})
    assert s.timers is False and s.store.url == f"sqlite:///{tmp_path / 'fleet.db'}"
    assert sorted(s.jobs) == ["flaky", "gc"]
    assert loaded.scheduler(env={}).timers is True


async def test_plugin_and_task_jobs_fire_on_the_loop(conf: Callable[..., Path]) -> None:
    loaded: Loaded = load_config(conf(plugins=["plugs:Reports"])).load()
    clock = FakeClock(datetime(2026, 3, 2, 12, 0, 5, tzinfo=UTC))
    s = loaded.scheduler(clock=clock, instance_id="t1")
    async with s:
        for _ in range(16):  # 12:00:05 -> 12:00:21: pulse (10s) fires at :10 and :20
            clock.advance(1)
            for _ in range(4):
                for _ in range(10):
                    await asyncio.sleep(0)
                await s.wait_idle()
        runs = await s.runs_async("reports/pulse")
    assert [r.slot.second for r in runs] == [20, 10]
    assert all(r.status is RunStatus.SUCCEEDED and r.result == "pulse" for r in runs)
    assert ("reports/pulse", "pulse", {}) in calls()


def test_schedule_is_plain_data() -> None:
    s = Schedule(id="x", cron="5m", config_json='{"a": 1}')
    assert s.config == {"a": 1} and Schedule(id="y", cron="5m", config_json="[1]").config == {}
    assert s == Schedule(id="x", cron="5m", config_json='{"a": 1}')
