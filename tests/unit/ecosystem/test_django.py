"""The Django integration in real processes: the management command runs the scheduler
until SIGTERM; CRONFLEET_AUTOSTART starts it in a serving process's background thread."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("django")

JOBS = '''
from pathlib import Path
from cronfleet import Scheduler

HERE = Path(__file__).parent
scheduler = Scheduler(f"sqlite:///{HERE / 'dj.db'}", shutdown_grace="5s")

@scheduler.job("1s", id="beat")
def beat(ctx):
    with open(HERE / "beats.txt", "a") as f:
        f.write(ctx.slot.isoformat() + "\\n")
'''

SETTINGS = '''
SECRET_KEY = "test"
INSTALLED_APPS = ["cronfleet.integrations.django"]
CRONFLEET_SCHEDULER = "djjobs:scheduler"
CRONFLEET_AUTOSTART = {autostart}
USE_TZ = True
'''


def _project(tmp_path: Path, autostart: bool) -> dict[str, str]:
    (tmp_path / "djjobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "djsettings.py").write_text(SETTINGS.format(autostart=autostart))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONFLEET_")}
    env.update(DJANGO_SETTINGS_MODULE="djsettings",
               PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    return env


def _succeeded(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'")
                   .fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


@pytest.mark.slow
def test_management_command_runs_until_sigterm(tmp_path: Path) -> None:
    env = _project(tmp_path, autostart=False)
    proc = subprocess.Popen([sys.executable, "-m", "django", "cronfleet"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while _succeeded(tmp_path / "dj.db") < 2 and time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "1 job(s) on sqlite:///" in text
    beats = (tmp_path / "beats.txt").read_text().split()
    assert len(beats) >= 2 and len(beats) == len(set(beats))
    assert _succeeded(tmp_path / "dj.db") == len(beats)


@pytest.mark.slow
def test_autostart_in_a_serving_process_and_not_in_manage_commands(tmp_path: Path) -> None:
    env = _project(tmp_path, autostart=True)
    serving = textwrap.dedent("""
        import time, django
        django.setup()   # what a WSGI worker does (get_wsgi_application)
        from djjobs import scheduler
        assert scheduler.running
        deadline = time.time() + 30
        while len(scheduler.runs(limit=5)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        print("runs", len(scheduler.runs(limit=5)))
        scheduler.stop()
        print("running", scheduler.running)
    """)
    result = subprocess.run([sys.executable, "-c", serving], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert int(lines["runs"]) >= 2 and lines["running"] == "False", result.stdout
    # `manage.py check` loads the app but starts nothing
    (tmp_path / "manage.py").write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n")
    before = _succeeded(tmp_path / "dj.db")
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=90)
    assert check.returncode == 0, check.stderr
    assert "started with" not in check.stderr
    assert _succeeded(tmp_path / "dj.db") == before


def test_a_wrong_setting_is_named(tmp_path: Path) -> None:
    env = _project(tmp_path, autostart=False)
    (tmp_path / "djsettings.py").write_text(
        SETTINGS.format(autostart=False).replace("djjobs:scheduler", "djjobs:nothing"))
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "CRONFLEET_SCHEDULER='djjobs:nothing'" in result.stderr


@pytest.mark.parametrize(("argv", "serving"), [
    (["/srv/venv/bin/gunicorn", "myproject.wsgi"], True),
    (["uwsgi"], True),
    (["manage.py", "runserver"], True),
    (["manage.py", "migrate"], False),
    (["/srv/app/manage.py", "shell"], False),
    (["/srv/venv/bin/django-admin", "check"], False),
    (["/srv/venv/lib/python3.11/site-packages/django/__main__.py", "migrate"], False),
    (["/srv/venv/lib/python3.11/site-packages/django/__main__.py", "runserver"], True),
    ([], True),
])
def test_which_processes_autostart(argv: list[str], serving: bool) -> None:
    from cronfleet.integrations.django.apps import _serving

    assert _serving(argv) is serving
