"""Every CLI test runs in its own directory (with ./cronfleet.toml from ``project``), with
no environment overrides, no entry-point plugins and the modules it wrote unloaded after."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from config.fixtures import isolated, real_entry_points, write

from cronfleet.cli import main

# the shared fixtures, re-exported so pytest sees them here
__all__ = ["isolated", "real_entry_points", "write"]

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
