"""`cronfleet import-crontab` on the stock cron files of Debian 12 (tests/unit/command_jobs/
debian/README.md says where each comes from): tab-separated fields are read as cron reads
them, the user field is never glued to a command, ids say what the command does."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cronfleet import load_config
from cronfleet.cli import main
from cronfleet.config.crontab import convert
from unit.config.fixtures import isolated  # noqa: F401  (autouse: own dir, no plugins)

DEBIAN = Path(__file__).with_name("debian")
FILES = ["crontab", "cron.d/certbot", "cron.d/sysstat", "cron.d/e2scrub_all"]


def only_root(name: str) -> bool:
    return name == "root"


def test_the_stock_etc_crontab_uses_tabs() -> None:
    assert "25 6\t* * *\troot\ttest -x /usr/sbin/anacron" in (DEBIAN / "crontab").read_text()


def test_system_crontab_fields_separated_by_tabs() -> None:
    result = convert((DEBIAN / "crontab").read_text(), system=True, users=only_root)
    assert [(t["id"], t["cron"], t["command"]) for t in result.tasks] == [
        ("run-parts-cron-hourly", "17 * * * *", "cd / && run-parts --report /etc/cron.hourly"),
        ("run-parts-cron-daily", "25 6 * * *",
         "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }"),
        ("run-parts-cron-weekly", "47 6 * * 7",
         "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.weekly; }"),
        ("run-parts-cron-monthly", "52 6 1 * *",
         "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.monthly; }"),
    ]
    assert result.skipped == []
    assert any("user column (root)" in n for n in result.notes)


def test_cron_d_files_import_with_ids_that_say_what_runs() -> None:
    ids = []
    for name in FILES[1:]:
        result = convert((DEBIAN / name).read_text(), system=True, users=only_root)
        assert result.skipped == []
        assert all(not t["command"].startswith(("root", "-x", "-e", "-v"))
                   for t in result.tasks)
        ids += [t["id"] for t in result.tasks]
    assert ids == ["certbot-renew", "debian-sa1", "debian-sa1-2", "e2scrub_all_cron",
                   "e2scrub_all"]


@pytest.mark.parametrize("name", FILES)
def test_a_system_file_without_system_is_refused_not_glued(name: str) -> None:
    result = convert((DEBIAN / name).read_text(), system=None, users=only_root)
    assert result.tasks == []  # before: every command started with "root"
    assert result.skipped
    assert all("'root' is a user of this machine" in s.reason and "--system" in s.reason
               for s in result.skipped)


def test_a_user_crontab_with_one_command_named_like_a_user_is_imported() -> None:
    text = "0 8 * * * mail -s hi boss@example.com\n0 9 * * * /usr/bin/backup\n"
    result = convert(text, system=None, users=lambda n: n in ("root", "mail"))
    assert [t["command"] for t in result.tasks] == ["mail -s hi boss@example.com",
                                                    "/usr/bin/backup"]
    assert any("line 1: 'mail' is also a user of this machine" in n for n in result.notes)


def test_the_cli_reads_etc_paths_as_system_crontabs(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "cron.d").mkdir(parents=True)
    out = tmp_path / "tasks.toml"
    # the same bytes under a system path: what `import-crontab /etc/crontab` reads
    src = (DEBIAN / "crontab").read_bytes()
    r = CliRunner().invoke(main, ["import-crontab", str(DEBIAN / "crontab"), "-o", str(out)])
    assert r.exit_code == 1 and "--system" in r.output  # refused, nothing glued
    import cronfleet.config.crontab as crontab

    real = crontab.system_path
    try:
        crontab.system_path = lambda p: True  # type: ignore[assignment]
        r = CliRunner().invoke(main, ["import-crontab", "-", "-o", str(out)], input=src)
    finally:
        crontab.system_path = real  # type: ignore[assignment]
    assert r.exit_code == 0, r.output
    assert "is a system crontab" in r.output
    config = load_config(out)
    commands = {t.schedule.id: t.handler.command for t in config.tasks}  # type: ignore[attr-defined]
    assert sorted(commands) == ["run-parts-cron-daily", "run-parts-cron-hourly",
                                "run-parts-cron-monthly", "run-parts-cron-weekly"]
    assert crontab.system_path("/etc/crontab") and crontab.system_path("/etc/cron.d/x")
    assert not crontab.system_path("./crontab") and not crontab.system_path("-")


def test_system_flag_imports_every_stock_file(tmp_path: Path) -> None:
    for name in FILES:
        out = tmp_path / (name.replace("/", "_") + ".toml")
        r = CliRunner().invoke(main, ["import-crontab", str(DEBIAN / name), "--system",
                                      "-o", str(out)])
        assert r.exit_code == 0, r.output
        config = load_config(out)
        for task in config.tasks:
            command = task.handler.command  # type: ignore[attr-defined]
            assert "root" not in str(command).split()[:1]
