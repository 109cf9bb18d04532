"""Command tasks in cronfleet.toml (read, located errors, run for real) and
`cronfleet import-crontab` on a 30-line crontab with every feature."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cronfleet import ConfigError, Scheduler, load_config
from cronfleet.cli import main
from cronfleet.config.crontab import REBOOT_REASON, convert
from cronfleet.jobs.command import CommandJob
from cronfleet.model import RunStatus
from unit.config.fixtures import isolated  # noqa: F401  (autouse: own dir, no plugins)

CRONTAB = Path(__file__).with_name("crontab.txt")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cronfleet.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p).removeprefix(f"{path}:") for p in info.value.problems]


async def test_a_command_task_is_read_and_runs(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    path = write(tmp_path, f"""
[scheduler]
store = "sqlite:///{tmp_path / 'cf.db'}"

[[tasks]]
id = "dump"
cron = "0 2 * * *"
command = ["sh", "-c", "echo $GREETING from $(pwd); exit 2"]
env = {{ GREETING = "hello" }}
cwd = "data"
timeout = "5m"
kill_grace = "30s"
success_codes = [0, 2]
max_output = "64KiB"
retry = {{ attempts = 2, delay = "1s" }}
""")
    config = load_config(path)
    (task,) = config.tasks
    job = task.handler
    assert isinstance(job, CommandJob)
    assert job.command == ("sh", "-c", "echo $GREETING from $(pwd); exit 2")
    assert job.cwd == str(tmp_path / "data")  # relative to the config file
    assert (job.timeout, job.kill_grace, job.success_codes, job.max_output) == (
        300.0, 30.0, (0, 2), 64 * 1024)
    assert job.runtime is config.command_runtime()
    with config.load() as loaded:
        (built,) = loaded.jobs
        assert built.handler is job
        assert built.timeout == 300 + 30 + 5  # the net behind the command's own timeout
        assert built.retry is not None and built.retry.attempts == 2
        assert built.description == "sh -c 'echo $GREETING from $(pwd); exit 2'"
        s = Scheduler(store=config.store, timers=False)
        s.add_job(built)
        async with s:
            run = await s.trigger_async("dump", wait=True)
    assert run.status is RunStatus.SUCCEEDED
    assert f"[stdout] hello from {tmp_path / 'data'}" in run.logs


@pytest.mark.parametrize(("body", "expected"), [
    ('command = "echo hi"',
     "5:11: task 'c': command: a text runs through /bin/sh only with shell = true"),
    ('command = []', "5:11: task 'c': command: expected a non-empty list of texts"),
    ('command = ["a"]\nshell = true',
     "6:9: task 'c': shell: shell = true takes the command as one text"),
    ('command = ["a"]\nenv = { "1X" = "y" }', "6:7: task 'c': env: 1X: not a valid variable"),
    ('command = ["a"]\nenv = { CRONFLEET_JOB = "y" }',
     "6:7: task 'c': env: CRONFLEET_JOB: CRONFLEET_* variables are set by cronfleet"),
    ('command = ["a"]\nsuccess_codes = [256]',
     "6:17: task 'c': success_codes: expected a non-empty list of exit codes 0-255"),
    ('command = ["a"]\nmax_output = "lots"',
     "6:14: task 'c': max_output: expected a size in bytes or a text like '1MiB'"),
    ('command = ["a"]\nmax_output = 100',
     "6:14: task 'c': max_output: expected 1KiB to 64MiB, got 100 bytes"),
    ('command = ["a"]\nkill_grace = "soon"', "6:14: task 'c': kill_grace: invalid duration"),
    ('env = { A = "b" }\nhandler = "m:f"',
     "5:7: task 'c': env: only applies to command jobs"),
    ('command = ["a"]\nhttp = { url = "https://x" }',
     "5:11: task 'c': command: a job runs either a command or an http request, not both"),
    ('command = ["a"]\nhandler = "m:f"',
     "5:11: task 'c': command: a task has either a handler or a command, not both"),
    ('command = ["a", "${secrets.9bad}"]', "5:11: task 'c': command: ${secrets.9bad}"),
    ('argv = ["a"]', "5:1: task 'c': unknown key 'argv' (did you mean 'command'?)"),
    ('cmd = ["a"]', "5:1: task 'c': unknown key 'cmd' (did you mean 'command'?)"),
])
def test_located_errors(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f"""[scheduler]

[[tasks]]
id = "c"
{body}
cron = "5m"
""")
    found = problems(path)
    assert any(p.startswith(expected) for p in found), found


def test_a_30_line_crontab_with_every_feature() -> None:
    text = CRONTAB.read_text()
    assert len(text.splitlines()) == 30
    result = convert(text, smtp_host="smtp.example.com")
    by_id = {t["id"]: t for t in result.tasks}
    assert list(by_id) == [
        "pg_dump", "sync-reports", "invoice.sh", "cleanup-tmp", "python", "rotate-logs",
        "archive", "new-year", "new-year-2", "cleanup-tmp-2", "echo", "mail", "leap-day",
        "process", "env"]  # "process": the loop's command, not the keyword "for"
    dump = by_id["pg_dump"]
    assert dump["cron"] == "30 2 * * *" and dump["timezone"] == "Europe/Paris"
    assert dump["command"] == "pg_dump -Fc app > $BACKUP_DIR/app.dump" and dump["shell"]
    assert dump["env"] == {"PATH": "/usr/local/bin:/usr/bin:/bin",
                           "BACKUP_DIR": "/var/backups"}
    mail = {"on": ["failure"], "email": {"host": "smtp.example.com",
                                         "to": ["ops@example.com", "dba@example.com"]}}
    assert dump["notify"] == mail
    assert by_id["sync-reports"]["timezone"] == "Europe/Paris"
    assert by_id["cleanup-tmp"]["timezone"] == "UTC"  # CRON_TZ=UTC applies from there on
    assert [by_id[i]["cron"] for i in ("cleanup-tmp", "python", "rotate-logs", "archive",
                                      "new-year", "new-year-2", "cleanup-tmp-2")] == [
        "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight"]
    assert by_id["echo"]["command"] == 'echo "done at $(date +%H:%M)" >> /tmp/heartbeat.log'
    assert by_id["mail"]["command"] == (
        "{\nmail -s \"weekly report\" boss@example.com\n} <<'CRONFLEET_STDIN'\n"
        "Hello,\nthe report is attached.\n\nCRONFLEET_STDIN")
    assert "notify" not in by_id["leap-day"]  # MAILTO="" turns mail off
    assert by_id["process"]["command"][:2] == ["/bin/bash", "-c"]  # SHELL=/bin/bash
    assert "shell" not in by_id["process"]
    assert by_id["env"]["timezone"] == "UTC"  # the bad CRON_TZ changed nothing
    skipped = {s.line: s.reason for s in result.skipped}
    assert skipped[18] == REBOOT_REASON
    assert skipped[23].startswith("schedule '61 * * * *': minute")
    assert skipped[24].startswith("CRON_TZ: unknown time zone 'Mars/Olympus'")
    assert skipped[25].startswith("neither an entry")
    assert skipped[28].startswith("unknown macro '@every'")
    assert skipped[29].startswith("CRONFLEET_* variables are set by cronfleet")
    assert len(skipped) == 6
    assert any("MAILTO became e-mail on failure through smtp.example.com" in n
               for n in result.notes)


def test_import_crontab_writes_tasks_that_load(tmp_path: Path) -> None:
    out = tmp_path / "tasks.toml"
    r = CliRunner().invoke(main, ["import-crontab", str(CRONTAB), "-o", str(out)])
    assert r.exit_code == 1  # some lines could not be mapped
    assert "not imported: line 18: '@reboot /usr/bin/start-agent': @reboot is not a " \
           "schedule" in r.output
    assert "15 tasks imported, 6 line(s) not imported" in r.output
    config = load_config(out)
    assert len(config.tasks) == 15
    jobs = {t.schedule.id: t.handler for t in config.tasks}
    assert isinstance(jobs["mail"], CommandJob) and jobs["mail"].shell
    with config.load() as loaded:
        notify = {j.id: j.notify for j in loaded.jobs}
    assert notify["pg_dump"] is not None and notify["pg_dump"].email is not None
    assert notify["pg_dump"].email.to == ("ops@example.com", "dba@example.com")
    assert notify["leap-day"] is None


async def test_an_imported_entry_runs_with_its_stdin(tmp_path: Path) -> None:
    result = convert("SHELL=/bin/sh\nGREETING=hi\n* * * * * cat; echo $GREETING 50\\%%one%two\n")
    (task,) = result.tasks
    path = write(tmp_path, f'[scheduler]\nstore = "sqlite:///{tmp_path / "cf.db"}"\n\n'
                 + result.toml())
    config = load_config(path)
    with config.load() as loaded:
        (job,) = loaded.jobs
        s = Scheduler(store=config.store, timers=False)
        s.add_job(job)
        async with s:
            run = await s.trigger_async(task["id"], wait=True)
    assert run.status is RunStatus.SUCCEEDED, run.logs
    out = [line for line in run.logs if line.startswith("[stdout]")]
    assert out == ["[stdout] one", "[stdout] two", "[stdout] hi 50%"]
