"""Operator commands against the store: jobs, history, show-run, trigger, pause, resume,
clear-override."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import Result

from cronfleet.model import TriggeredBy
from cronfleet.store import open_store
from cronfleet.store.base import Dispatch


def hold_lease(db: Path, job_id: str, holder: str) -> None:
    """Another process takes the job's lease and starts a run (it is still running)."""

    async def go() -> None:
        store = open_store(f"sqlite:///{db}")
        await store.open()
        await store.dispatch([Dispatch(job_id=job_id, slot=time.time(),
                                       triggered_by=TriggeredBy.SCHEDULE, claim="token",
                                       lease=True, hold=600)], holder)
        await store.close()

    asyncio.run(go())


# -- jobs -----------------------------------------------------------------------------


def test_jobs_before_any_run(cli: Callable[..., Result], project: Path) -> None:
    r = cli("jobs", "--wide")
    assert r.exit_code == 0, r.stderr
    for text in ("tick", "a task that works", "1h", "Europe/Paris", "Every 5 minutes",
                 "never run", "disabled (declared)", "lease holder"):
        assert text in r.stdout


def test_jobs_json_shows_last_run_override_and_lease(cli: Callable[..., Result], project: Path,
                                                     tmp_path: Path) -> None:
    assert cli("trigger", "tick").exit_code == 0
    assert cli("pause", "boom", "--note", "vendor down", "--by", "ops").exit_code == 0
    hold_lease(tmp_path / "ops.db", "quiet", "other-host:42:abc")
    r = cli("jobs", "--json")
    assert r.exit_code == 0
    listed = {j["id"]: j for j in json.loads(r.stdout)}  # in id order
    assert list(listed) == sorted(listed)
    tick, boom, quiet = listed["tick"], listed["boom"], listed["quiet"]
    assert tick["id"] == "tick" and tick["schedule"] == "1h" and tick["timezone"] == "UTC"
    assert tick["description"] == "a task that works" and tick["when"].startswith("Every 1h")
    assert tick["last_run"]["status"] == "succeeded" and tick["override"] is None
    assert tick["enabled"] is True and tick["next_run"] is not None
    assert boom["enabled"] is False and boom["declared_enabled"] is True
    assert boom["override"]["enabled"] is False and boom["override"]["by"] == "ops"
    assert boom["override"]["note"] == "vendor down" and boom["override"]["until"] is None
    assert boom["last_run"] is None
    assert quiet["lease"]["holder"] == "other-host:42:abc"
    assert quiet["last_run"]["status"] == "running" and quiet["declared_enabled"] is False
    r = cli("jobs", "--wide")
    assert "paused by ops: vendor down" in r.stdout and "other-host:42:abc" in r.stdout
    assert "succeeded" in r.stdout and "running" in r.stdout


def test_config_json_is_shown_and_a_paused_job_does_not_look_due(
        cli: Callable[..., Result], project: Path) -> None:
    project.write_text(project.read_text().replace(
        'description = "a task that works"',
        'description = "a task that works"\nconfig_json = \'{"region": "eu", "n": 3}\''))
    listed = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout)}
    tick, boom = listed["tick"], listed["boom"]
    assert tick["config"] == {"region": "eu", "n": 3} and boom["config"] == {}
    assert tick["paused"] is False and tick["next_run"] == tick["next_fire"] is not None
    checked = json.loads(cli("check", "--json").stdout)["jobs"]
    assert checked[0]["config"] == {"region": "eu", "n": 3}
    assert 'config: {"n": 3, "region": "eu"}' in cli("check").stdout
    # paused for good: no next run (the schedule's next fire stays visible as next_fire)
    assert cli("pause", "tick").exit_code == 0
    tick = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout)}["tick"]
    assert tick["paused"] is True and tick["next_run"] is None and tick["next_fire"]
    assert "paused" in cli("jobs").stdout.split("tick", 1)[1].split("\n")[0]
    # paused for 2h30m of an hourly job: the next run is the first slot at or after the end
    assert cli("pause", "tick", "--until", "2h30m").exit_code == 0
    tick = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout)}["tick"]
    until = datetime.fromisoformat(tick["override"]["until"])
    nxt = datetime.fromisoformat(tick["next_run"])
    assert until <= nxt < until + timedelta(hours=1) and nxt.minute == 0 and nxt.second == 0
    assert datetime.fromisoformat(tick["next_fire"]) < until
    assert "paused; then" in cli("jobs", "--wide").stdout
    assert "paused, then in " in cli("jobs").stdout  # the narrow form (a pipe)


def test_jobs_create_and_delete_api_jobs(cli: Callable[..., Result], project: Path,
                                        write: Callable[..., Path], tmp_path: Path) -> None:
    import asyncio

    from cronfleet.store.factory import open_api_store

    # a stored job cannot opt out of the SSRF guard ([api] private_targets is the operator's)
    refused = write("inside.toml", 'id = "inside"\nschedule = "@daily"\n[http]\n'
                                   'url = "http://127.0.0.1:9/x"\nallow_private_targets = true\n')
    r = cli("jobs", "create", str(refused), "--team", "ops", "--by", "alice")
    assert r.exit_code == 2 and "cannot turn the SSRF guard off" in r.stderr
    # a private target the operator did not list would fail on every run: refused too
    toml = write("hook.toml", 'id = "hook"\nschedule = "*/10 * * * *"\n[http]\n'
                              'url = "http://127.0.0.1:9/x"\n')
    r = cli("jobs", "create", str(toml), "--team", "ops", "--by", "alice")
    assert r.exit_code == 2 and "127.0.0.1 is a loopback address" in r.stderr
    assert "[api] private_targets" in r.stderr
    toml.write_text(toml.read_text().replace("http://127.0.0.1:9/x", "https://example.com/x"))
    r = cli("jobs", "create", str(toml), "--team", "ops", "--by", "alice")
    assert r.exit_code == 0, r.stderr
    assert "created job 'hook' (team ops)" in r.stdout

    async def stored() -> tuple[object, list[str]]:
        api = open_api_store(f"sqlite:///{tmp_path / 'ops.db'}")
        try:
            d = await api.job_def("hook")
            audit = [e.action for e in await api.audit_entries("ops")]
            return d, audit
        finally:
            await api.close()

    d, audit = asyncio.run(stored())
    assert d is not None and d.team == "ops" and d.created_by == "alice"  # type: ignore[attr-defined]
    assert d.spec["schedule"] == "*/10 * * * *" and audit == ["job.create"]  # type: ignore[attr-defined]
    # the same validation as the API: every problem at once, by field; nothing stored
    bad = write("bad.json", '{"id": "bad", "schedule": "61 * * * *", "timeout": "soon", '
                            '"http": {"url": "ftp://x"}}')
    r = cli("jobs", "create", str(bad))
    assert r.exit_code == 2
    for field in ("schedule:", "timeout:", "http.url:"):
        assert f"{bad}: {field}" in r.stderr
    assert "job 'bad' not created: 3 problem(s)" in r.stderr
    r = cli("jobs", "create", str(toml))
    assert r.exit_code == 2 and "id: job id 'hook' is already taken" in r.stderr
    taken = write("tick.json", '{"id": "tick", "schedule": "@daily", "http": {"url": '
                               '"https://example.com"}}')
    assert "is already taken" in cli("jobs", "create", str(taken)).stderr  # declared in config
    broken = write("broken.json", '{"id": "x",\n  "schedule": }')
    r = cli("jobs", "create", str(broken))
    assert r.exit_code == 2 and f"{broken}:2:15: invalid JSON" in r.stderr
    assert "id: is missing" in cli("jobs", "create", str(write("noid.toml", 'a = 1\n'))).stderr
    # delete: the stored job goes, its tombstone keeps the team; declared jobs are refused
    r = cli("jobs", "delete", "tick")
    assert r.exit_code == 2 and "declared in cronfleet.toml" in r.stderr
    r = cli("jobs", "delete", "hook", "--by", "bob")
    assert r.exit_code == 0, r.stderr
    assert "deleted job 'hook' (team ops)" in r.stdout
    d, audit = asyncio.run(stored())
    assert d is not None and d.deleted_at is not None  # type: ignore[attr-defined]
    assert audit == ["job.delete", "job.create"]
    r = cli("jobs", "delete", "hook")
    assert r.exit_code == 2 and "no job 'hook' created over the API" in r.stderr
    assert cli("jobs", "--json").exit_code == 0  # the list is still `jobs`


# -- trigger --------------------------------------------------------------------------


def test_trigger_runs_the_job_here_and_now(cli: Callable[..., Result], project: Path) -> None:
    r = cli("trigger", "tick", "--by", "alice")
    assert r.exit_code == 0, r.stderr
    assert "run 1 · job tick · succeeded" in r.stdout
    assert "triggered by  manual" in r.stdout and '{"n": 1}' in r.stdout
    assert "Manual run requested by alice" in r.stdout and "tick ran" in r.stdout
    r = cli("trigger", "tick", "--json")
    run = json.loads(r.stdout)
    assert run["status"] == "succeeded" and run["manual"] is True and run["id"] == 2


def test_trigger_with_params_and_force(cli: Callable[..., Result], project: Path,
                                      write: Callable[..., Path]) -> None:
    write("ops_handlers.py", (project.parent / "ops_handlers.py").read_text()
          + "\n\ndef echo(ctx):\n    return dict(ctx.params)\n")
    project.write_text(project.read_text() + '\n[[tasks]]\nid = "echo"\ncron = "@daily"\n'
                       'handler = "ops_handlers:echo"\n')
    r = cli("trigger", "echo", "--param", "region=eu", "--param", "q=a=b", "--json")
    assert r.exit_code == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["result"] == {"region": "eu", "q": "a=b"} == run["params"]
    assert run["forced"] is False
    shown = cli("show-run", str(run["id"])).stdout
    assert 'params        {"q": "a=b", "region": "eu"}' in shown
    for bad, message in ((("--param", "novalue"), "'novalue' is not KEY=VALUE"),
                         (("--param", "=v"), "'=v' is not KEY=VALUE"),
                         (("--param", "a=1", "--param", "a=2"), "'a' is given twice")):
        r = cli("trigger", "echo", *bad)
        assert r.exit_code == 2 and message in r.stderr
    assert cli("pause", "echo", "--by", "ops", "--note", "vendor down").exit_code == 0
    r = cli("trigger", "echo")
    assert r.exit_code == 3
    assert "job 'echo' is paused (by ops: vendor down)" in r.stderr and "--force" in r.stderr
    assert len(json.loads(cli("history", "echo", "--json").stdout)) == 1  # nothing recorded
    r = cli("trigger", "echo", "--force", "--by", "alice", "--json")
    assert r.exit_code == 0, r.stderr
    forced = json.loads(r.stdout)
    assert forced["forced"] is True and forced["forced_by"] == "alice"
    assert "forced by     alice" in cli("show-run", str(forced["id"])).stdout


def test_trigger_exits_1_when_the_run_fails(cli: Callable[..., Result], project: Path) -> None:
    r = cli("trigger", "boom")
    assert r.exit_code == 1
    assert "failed" in r.stdout and "ValueError: kaput" in r.stdout
    assert "Traceback" in r.stdout  # the logs are shown


def test_trigger_exits_3_naming_the_holder(cli: Callable[..., Result], project: Path,
                                          tmp_path: Path) -> None:
    hold_lease(tmp_path / "ops.db", "tick", "worker-7:1234:beef")
    r = cli("trigger", "tick")
    assert r.exit_code == 3
    assert r.stderr == ("job 'tick' is already executing: the lease is held by "
                        "worker-7:1234:beef (skip recorded as run 2)\n")
    r = cli("trigger", "tick", "--json")
    assert r.exit_code == 3
    body = json.loads(r.stdout)
    assert body["code"] == "CRON_JOB_ALREADY_EXECUTING"
    assert body["details"]["log"]["reason"] == "already_executing"


def test_unknown_job_exits_2_with_a_suggestion(cli: Callable[..., Result],
                                               project: Path) -> None:
    for cmd in ("trigger", "pause", "resume", "clear-override", "history"):
        r = cli(cmd, "tik")
        assert r.exit_code == 2, cmd
        assert r.stderr == ("no job 'tik' in cronfleet.toml (did you mean 'tick'?); jobs: "
                            "tick, boom, quiet\n")


# -- pause, resume, clear-override -----------------------------------------------------


def test_pause_with_a_duration(cli: Callable[..., Result], project: Path) -> None:
    before = datetime.now(UTC)
    r = cli("pause", "tick", "--until", "2h", "--note", "deploy", "--by", "bob", "--json")
    assert r.exit_code == 0, r.stderr
    state = json.loads(r.stdout)
    assert state["enabled"] is False and state["declared_enabled"] is True
    until = datetime.fromisoformat(state["override"]["until"])
    assert timedelta(hours=2) <= until - before < timedelta(hours=2, seconds=30)
    assert state["override"]["by"] == "bob" and state["override"]["note"] == "deploy"
    r = cli("pause", "tick", "--until", "90m", "--by", "bob")
    assert r.stdout.startswith("paused 'tick' by bob until ")
    assert "(in 1h 29m)" in r.stdout or "(in 1h 30m)" in r.stdout


def test_pause_until_a_time_in_the_jobs_zone(cli: Callable[..., Result],
                                             project: Path) -> None:
    future = datetime.now(ZoneInfo("Europe/Paris")).replace(microsecond=0) + timedelta(days=1)
    naive = future.replace(tzinfo=None).isoformat()
    r = cli("pause", "boom", "--until", naive, "--json")
    assert r.exit_code == 0, r.stderr
    until = datetime.fromisoformat(json.loads(r.stdout)["override"]["until"])
    assert until == future  # read in Europe/Paris, the job's zone


@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("2020-01-01T00:00:00+00:00", "--until: 2020-01-01T00:00:00+00:00 is in the past\n"),
        ("tomorrow", "--until: 'tomorrow' is neither an ISO 8601 time (e.g. "
                     "2026-03-02T18:00:00+01:00) nor a duration (e.g. 2h, 1h30m)\n"),
        ("0s", "--until: '0s' must be a positive duration\n"),
    ],
)
def test_pause_rejects_a_bad_until(cli: Callable[..., Result], project: Path, until: str,
                                   message: str) -> None:
    r = cli("pause", "tick", "--until", until)
    assert r.exit_code == 2 and r.stderr == message


def test_resume_and_clear_override(cli: Callable[..., Result], project: Path,
                                   tmp_path: Path) -> None:
    r = cli("resume", "quiet", "--by", "carol")
    assert r.exit_code == 0
    assert r.stdout == ("resumed 'quiet' by carol: forced on although it is declared "
                        "enabled = false\n")
    state = json.loads(cli("resume", "quiet", "--json").stdout)
    assert state["enabled"] is True and state["override"]["enabled"] is True
    r = cli("clear-override", "quiet", "--by", "carol")
    assert r.stdout == ("cleared the override of 'quiet': back to its declared setting, "
                        "disabled (enabled = false)\n")
    state = json.loads(cli("clear-override", "tick", "--json").stdout)
    assert state == {"job_id": "tick", "declared_enabled": True, "enabled": True,
                     "override": None, "lease": None}
    hold_lease(tmp_path / "ops.db", "tick", "w1:1:aa")
    r = cli("pause", "tick", "--by", "dan")
    assert r.stdout == ("paused 'tick' by dan\nnote: a run is in progress (lease held by "
                        "w1:1:aa); this does not stop it\n")


# -- history, show-run ----------------------------------------------------------------


def test_history(cli: Callable[..., Result], project: Path) -> None:
    assert cli("history", "tick").stdout == "no runs of 'tick'\n"
    for _ in range(3):
        cli("trigger", "tick")
    cli("trigger", "boom")
    r = cli("history", "tick", "--limit", "2")
    assert r.exit_code == 0
    assert "tick: last 2 run(s)" in r.stdout and "succeeded" in r.stdout
    runs = json.loads(cli("history", "tick", "--json").stdout)
    assert [x["id"] for x in runs] == [3, 2, 1]
    assert [x["id"] for x in json.loads(cli("history", "boom", "--status", "failed",
                                            "--json").stdout)] == [4]
    assert json.loads(cli("history", "boom", "--status", "succeeded", "--json").stdout) == []
    assert cli("history", "tick", "--status", "done").exit_code == 2


def test_history_across_jobs_with_status_since_and_instance(cli: Callable[..., Result],
                                                            project: Path) -> None:
    assert cli("history").stdout == "no runs\n"
    cli("trigger", "tick")
    cli("trigger", "boom")
    cli("trigger", "tick")
    runs = json.loads(cli("history", "--json").stdout)
    assert [(x["id"], x["job_id"]) for x in runs] == [(3, "tick"), (2, "boom"), (1, "tick")]
    failed = json.loads(cli("history", "--status", "failed", "--since", "1d", "--json").stdout)
    assert [(x["id"], x["job_id"]) for x in failed] == [(2, "boom")]
    r = cli("history", "--status", "failed", "--since", "1d")
    assert r.exit_code == 0 and "across jobs" in r.stdout and "boom" in r.stdout
    assert "tick" not in r.stdout
    assert json.loads(cli("history", "--since", "2099-01-01", "--json").stdout) == []
    assert json.loads(cli("history", "--until", "1d", "--json").stdout) == []
    assert len(json.loads(cli("history", "--until", "2099-01-01T00:00:00+00:00",
                              "--json").stdout)) == 3
    me = runs[0]["instance_id"]  # each trigger is a process of its own
    assert [x["id"] for x in json.loads(cli("history", "--instance", me, "--json").stdout)] \
        == [3]
    assert json.loads(cli("history", "--instance", "nobody", "--json").stdout) == []
    assert [x["id"] for x in json.loads(cli("history", "tick", "--since", "1h",
                                            "--json").stdout)] == [3, 1]
    assert [x["id"] for x in json.loads(cli("runs", "--job", "boom", "--json").stdout)] == [2]
    assert cli("history", "--limit", "1", "--json").stdout.count('"id"') == 1
    r = cli("history", "--since", "last tuesday")
    assert r.exit_code == 2 and "--since: 'last tuesday' is neither" in r.stderr


def test_runs_running_shows_instance_start_and_lease(cli: Callable[..., Result], project: Path,
                                                     tmp_path: Path) -> None:
    assert json.loads(cli("runs", "--running", "--json").stdout) == []
    assert "nothing running" in cli("runs", "--running").stdout
    hold_lease(tmp_path / "ops.db", "quiet", "other-host:42:abc")
    [item] = json.loads(cli("runs", "--running", "--json").stdout)
    assert item["job_id"] == "quiet" and item["instance_id"] == "other-host:42:abc"
    assert item["started_at"] is not None
    lease = datetime.fromisoformat(item["lease_until"])
    assert timedelta(minutes=9) < lease - datetime.now(UTC) <= timedelta(minutes=10)
    r = cli("runs", "--running")
    assert r.exit_code == 0 and "other-host:42:abc" in r.stdout
    assert "(in 10m" in r.stdout or "(in 9m" in r.stdout
    status = json.loads(cli("status", "--json").stdout)
    assert [x["run_id"] for x in status["running"]] == [item["run_id"]]
    assert status["running"][0]["lease_until"] == item["lease_until"]


def test_history_of_a_job_no_longer_declared(cli: Callable[..., Result],
                                             project: Path) -> None:
    cli("trigger", "tick")
    project.write_text(project.read_text().replace('id = "tick"', 'id = "tock"'))
    r = cli("history", "tick")
    assert r.exit_code == 0
    assert "note: 'tick' is not declared in cronfleet.toml; showing its recorded history" \
        in r.stdout


def test_show_run(cli: Callable[..., Result], project: Path) -> None:
    cli("trigger", "boom", "--by", "erin")
    r = cli("show-run", "1")
    assert r.exit_code == 0
    for text in ("run 1 · job boom · failed", "error         ValueError: kaput",
                 "logs (2 line(s))", "  Manual run requested by erin",
                 "raise ValueError(\"kaput\")"):
        assert text in r.stdout
    run = json.loads(cli("show-run", "1", "--json").stdout)
    assert run["job_id"] == "boom" and run["error"] == "ValueError: kaput"
    assert run["logs"][0] == "Manual run requested by erin"
    r = cli("show-run", "99")
    assert r.exit_code == 2 and r.stderr.startswith("no run with id 99 in sqlite:///")
    assert cli("show-run", "abc").exit_code == 2


# -- failures ---------------------------------------------------------------------------


def test_store_that_cannot_be_opened_exits_1(cli: Callable[..., Result], project: Path,
                                            tmp_path: Path) -> None:
    (tmp_path / "ops.db").mkdir()
    for args in (("jobs",), ("pause", "tick"), ("history", "tick"), ("status", "--once")):
        r = cli(*args)
        assert r.exit_code == 1, args
        assert r.stderr.startswith(f"store sqlite:///{tmp_path / 'ops.db'}: "), args


def test_a_broken_plugin_does_not_block_operators(cli: Callable[..., Result], project: Path,
                                                  write: Callable[..., Path]) -> None:
    write("plugs.py", """
        class Gone:
            pass
        """)
    project.write_text(project.read_text().replace(
        'store = "sqlite:///ops.db"', 'store = "sqlite:///ops.db"\nplugins = ["plugs:Gone"]'))
    r = cli("pause", "tick")
    assert r.exit_code == 0
    assert r.stderr.startswith(
        "warning: 1 plugin problem(s); the jobs of the plugins that failed are left out (see "
        "'cronfleet check'):\n  cronfleet.toml:3:12: plugin plugs:Gone listed in "
        "cronfleet.toml:3: cannot create it: TypeError: plugs.Gone is not a ScheduledPlugin: "
        "no name(), schedules(), run()"
    )
    assert cli("run").exit_code == 1  # but nothing starts


def test_a_bad_config_fails_every_command(cli: Callable[..., Result], project: Path) -> None:
    project.write_text(project.read_text().replace('cron = "1h"', 'cron = "1x"'))
    for args in (("jobs",), ("history", "tick"), ("show-run", "1"), ("trigger", "tick"),
                 ("pause", "tick"), ("resume", "tick"), ("clear-override", "tick"),
                 ("status", "--once")):
        r = cli(*args)
        assert r.exit_code == 1, args
        assert r.stderr.startswith("cronfleet.toml:6:9: task 'tick': cron: expression: "), args


def test_every_command_documents_its_exit_codes(cli: Callable[..., Result]) -> None:
    for cmd in ("run", "check", "jobs", "history", "show-run", "trigger", "pause", "resume",
                "clear-override", "status"):
        r = cli(cmd, "--help")
        assert r.exit_code == 0, cmd
        assert "Exit codes" in r.stdout and "3  the job is already executing" in r.stdout, cmd


# -- status: the fleet's instances ----------------------------------------------------


def test_status_lists_the_instances(cli: Callable[..., Result], project: Path,
                                    tmp_path: Path) -> None:
    from cronfleet.store.base import Instance, InstanceStore

    async def go() -> None:
        store = open_store(f"sqlite:///{tmp_path / 'ops.db'}")
        await store.open()
        assert isinstance(store, InstanceStore)
        await store.heartbeat(Instance("w1:1:aa", "host-1", 1, "worker", "1.2"), ttl=15)
        await store.close()

    asyncio.run(go())
    r = cli("status", "--json")
    assert r.exit_code == 0, r.stderr
    [inst] = json.loads(r.stdout)["instances"]
    assert inst["instance_id"] == "w1:1:aa" and inst["live"] is True
    assert (inst["host"], inst["pid"], inst["role"], inst["version"]) == ("host-1", 1, "worker",
                                                                         "1.2")
    r = cli("status", "--once")
    assert r.exit_code == 0, r.stderr
    assert "instances: 1 live, 0 lost" in r.stdout and "w1:1:aa (worker, host-1 pid 1" in r.stdout


# -- narrow terminals and pipes ---------------------------------------------------------


def _rows_fit(text: str, width: int, rows: int) -> None:
    """Each table row on one line within ``width``: title, header, rule, then ``rows``."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert all(len(line) <= width for line in lines), lines
    assert len(lines) == rows + 2 + (0 if lines[0].lstrip().startswith(("job", "run"))
                                     else 1), lines


def test_jobs_and_history_never_wrap_in_a_pipe(cli: Callable[..., Result], project: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    project.write_text(project.read_text().replace(
        'description = "a task that works"',
        'description = "a task that works, described at a length that used to wrap every '
        'row of the table over three or four lines"'))
    assert cli("trigger", "tick").exit_code == 0
    assert cli("trigger", "boom").exit_code != 0
    assert cli("pause", "tick", "--note", "vendor down until the end of the month; ask "
                                          "ops before resuming it").exit_code == 0
    jobs = cli("jobs")
    assert jobs.exit_code == 0, jobs.stderr
    _rows_fit(jobs.stdout, 80, 3)
    head = jobs.stdout.splitlines()[0].split()
    assert head == ["job", "schedule", "next", "run", "last", "run", "override"]
    assert "paused by" in jobs.stdout and "lease holder" not in jobs.stdout
    for args in (("history",), ("history", "boom"), ("runs",)):
        r = cli(*args)
        assert r.exit_code == 0, r.stderr
        _rows_fit(r.stdout, 80, 2 if args != ("history", "boom") else 1)
        assert "instance" not in r.stdout and "ValueError: kaput" in r.stdout
    wide = cli("jobs", "--wide").stdout  # every column, wrapped to fit
    assert "holder" in wide and "described" in wide
    assert len(wide.splitlines()) > len(jobs.stdout.splitlines()) + 3


def test_jobs_on_an_80_column_terminal(project: Path, tmp_path: Path) -> None:
    """A real terminal (a pty) of 80 columns: the narrow form; of 160: every column."""
    import fcntl
    import os
    import pty
    import re
    import struct
    import subprocess
    import sys
    import termios

    def on_tty(columns: int) -> str:
        main_fd, tty = pty.openpty()
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        env = {**{k: v for k, v in os.environ.items()
                  if not k.startswith("CRONFLEET_") and k not in ("COLUMNS", "LINES")},
               "TERM": "xterm", "NO_COLOR": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "cronfleet.cli", "jobs", "--config",
                                 str(project)], stdout=tty, stderr=subprocess.PIPE,
                                cwd=tmp_path, env=env)
        os.close(tty)
        out = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # the pty's other end closed
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=60)
        os.close(main_fd)
        return re.sub(r"\x1b\[[0-9;]*m", "", out.decode().replace("\r\n", "\n"))

    narrow = on_tty(80)
    _rows_fit(narrow, 80, 3)
    assert "lease holder" not in narrow
    assert "lease holder" in on_tty(160)


def test_jobs_pages_by_id_over_declared_and_stored_jobs(
        cli: Callable[..., Result], project: Path, tmp_path: Path) -> None:
    """`cronfleet jobs` reads the team's API jobs from the store by key: a page of
    ``--limit`` in id order with the declared ones, then the command of the next page;
    ``--prefix`` their range; a bad ``--after`` is refused naming it."""
    lines = [json.dumps({"id": f"api-{i}", "schedule": "0 4 * * *",
                         "http": {"url": "https://example.com/x"}}) for i in range(5)]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert cli("jobs", "import", str(path)).exit_code == 0
    every = sorted(["api-0", "api-1", "api-2", "api-3", "api-4", "boom", "quiet", "tick"])
    seen: list[str] = []
    after: list[str] = []
    for _ in range(5):
        r = cli("jobs", "--json", "--limit", "3", *after)
        assert r.exit_code == 0, r.stderr
        seen += [j["id"] for j in json.loads(r.stdout)]
        if "more: " not in r.stderr:
            break
        after = ["--after", r.stderr.split("--after ", 1)[1].split()[0]]
    assert seen == every
    r = cli("jobs", "--json", "--prefix", "api-")
    assert [j["id"] for j in json.loads(r.stdout)] == every[:5]
    r = cli("jobs", "--limit", "2")
    assert "more: cronfleet jobs --team default --after api-1" in r.stdout
    r = cli("jobs", "--json", "--limit", "1", "--prefix", "api-")  # the same hint in JSON
    assert "more: cronfleet jobs --team default --prefix api- --after api-0" in r.stderr
    r = cli("jobs", "--json", "--team", "other")
    assert [j["id"] for j in json.loads(r.stdout)] == ["boom", "quiet", "tick"]
    r = cli("jobs", "--after", "a b")
    assert r.exit_code == 2 and "--after: 'a b' is not part of a job id" in r.stderr
