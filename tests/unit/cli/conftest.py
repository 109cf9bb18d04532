"""Every CLI test runs in its own directory (with ./cronfleet.toml from ``project``), with
no environment overrides, no entry-point plugins and the modules it wrote unloaded after."""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cronfleet import plugins
from cronfleet.cli import main
from cronfleet.config import CONFIG_ENV, SCHEDULER_ENV, STORE_ENV

_REAL_DISCOVER = plugins.discover_entry_points


@pytest.fixture
def real_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discover the entry points of what is really installed (on sys.path)."""
    monkeypatch.setattr(plugins, "discover_entry_points", _REAL_DISCOVER)


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(plugins, "discover_entry_points", lambda group="": [])
    for var in (CONFIG_ENV, STORE_ENV, SCHEDULER_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    saved = list(sys.path)
    yield
    sys.path[:] = saved
    root = str(tmp_path)
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(root):
            del sys.modules[name]


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    """write("name.toml", text) / write("mod.py", code): a file in the test's directory."""

    def go(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return go


HANDLERS = '''
def tick(ctx):
    ctx.log("tick ran")
    return {"n": 1}


def boom(ctx):
    raise ValueError("kaput")


def quiet(ctx):
    return None
'''

CONFIG = '''
[scheduler]
store = "sqlite:///ops.db"

[[tasks]]
id = "tick"
cron = "1h"
description = "a task that works"
handler = "ops_handlers:tick"

[[tasks]]
id = "boom"
cron = "*/5 * * * *"
timezone = "Europe/Paris"
handler = "ops_handlers:boom"

[[tasks]]
id = "quiet"
cron = "@daily"
handler = "ops_handlers:quiet"
enabled = false
'''


@pytest.fixture
def project(write: Callable[..., Path]) -> Path:
    """./cronfleet.toml with three tasks (tick works, boom fails, quiet is disabled)."""
    write("ops_handlers.py", HANDLERS)
    return write("cronfleet.toml", CONFIG)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """cli("jobs", "--json"): run the command in-process; stdout and stderr apart."""
    monkeypatch.setenv("COLUMNS", "200")

    def go(*args: str) -> Result:
        old_click = "mix_stderr" in inspect.signature(CliRunner).parameters  # click < 8.2
        kwargs = {"mix_stderr": False} if old_click else {}
        return CliRunner(**kwargs).invoke(main, list(args), catch_exceptions=False)

    return go
