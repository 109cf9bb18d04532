"""Fixtures shared by the config and CLI tests: each test runs in its own directory, with
no environment overrides, no entry-point plugins (unless it asks for the real ones) and the
modules it wrote unloaded after."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cronfleet import plugins
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
    for var in list(os.environ):  # every setting can come from the environment
        if var.startswith("CRONFLEET_") and not var.startswith("CRONFLEET_SECRET_KEY"):
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
