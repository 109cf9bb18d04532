"""The extras: the table is the same in pyproject.toml and cronfleet.extras; the core runs
with every optional module missing; a missing extra is one line naming the pip install."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from cronfleet import extras
from cronfleet.extras import EXTRAS, MissingExtra, available, require

ROOT = Path(__file__).resolve().parents[3]
OPTIONAL = ["psycopg", "psycopg_pool", "httpx", "cryptography", "fastapi", "uvicorn",
            "prometheus_client", "starlette", "pydantic", "opentelemetry"]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_extras_table_matches_pyproject() -> None:
    project = _pyproject()["project"]
    optional = project["optional-dependencies"]
    assert set(EXTRAS) == set(optional) - {"dev", "all"}
    assert optional["all"] == [f"cronfleet[{','.join(EXTRAS)}]"]
    core = {d.split(">=")[0] for d in project["dependencies"]}
    assert core == {"tzdata", "click", "rich", "cron-descriptor"}


def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "postgres",
                        ("the PostgreSQL store", ("cronfleet_no_such_module",)))
    assert not available("postgres")
    with pytest.raises(MissingExtra) as info:
        require("postgres")
    message = str(info.value)
    assert "\n" not in message
    assert "pip install 'cronfleet[postgres]'" in message
    assert "the PostgreSQL store" in message and "cronfleet_no_such_module" in message
    assert isinstance(info.value, ImportError)


def test_unknown_extra_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="unknown extra 'nope'"):
        require("nope")


def _without_optional(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where every optional module is absent."""
    prelude = f"import sys\nfor m in {OPTIONAL!r}:\n    sys.modules[m] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_core_runs_a_job_on_sqlite_without_any_extra(tmp_path: Path) -> None:
    result = _without_optional(f"""
        import asyncio
        from cronfleet import Scheduler
        ran = []
        s = Scheduler("sqlite:///{tmp_path}/core.db")
        @s.job("0 0 1 1 *", id="hello")  # never due now: no lease to meet
        def hello(ctx):
            ran.append(ctx.run_id)
        async def main():
            async with s:
                record = await s.trigger_async("hello")
            print(record.status.value, len(ran))
            print(sorted(m for m in {OPTIONAL!r} if sys.modules.get(m) is not None))
        asyncio.run(main())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["succeeded 1", "[]"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _without_optional("from cronfleet.cli import main\nmain(sys.argv[1:])", *args)


def test_cli_schedule_tools_work_without_extras() -> None:
    result = _cli("next", "0 9 * * 1-5", "-n", "2")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("args", "extra"), [
    (["run", "--no-api"], "server"),
    (["--help"], None),
])
def test_cli_names_the_missing_extra(tmp_path: Path, args: list[str], extra: str | None) -> None:
    result = _cli(*args)
    if extra is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"pip install 'cronfleet[{extra}]'" in lines[0]


def test_postgres_url_without_the_extra_names_it() -> None:
    result = _without_optional("""
        from cronfleet.extras import MissingExtra
        from cronfleet.store import open_store
        try:
            open_store("postgresql://localhost/test")
        except MissingExtra as exc:
            print(exc)
    """)
    assert result.returncode == 0, result.stderr
    assert "pip install 'cronfleet[postgres]'" in result.stdout
    assert "the PostgreSQL store" in result.stdout
