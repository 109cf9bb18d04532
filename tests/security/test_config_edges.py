"""Config parser edges: absurd nesting is a located error (no traceback), a UTF-8 byte order
mark is accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TASK = '[[tasks]]\nid = "tick"\ncron = "1h"\nhandler = "json:dumps"\n'


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "cronfleet.toml").write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "cronfleet", "check", "--no-history"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("value", "column"), [
    ("[" * 100_000 + "]" * 100_000, 110),  # "config = " and the 101st [
    ("{a = " * 5000 + "1" + "}" * 5000, 510),
])
def test_absurd_nesting_is_a_located_error(tmp_path: Path, value: str, column: int) -> None:
    done = check(tmp_path, f'{TASK}config = {value}\n')
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) < 10, \
        done.stderr[:2000]
    assert (f"cronfleet.toml:5:{column}: invalid TOML: arrays and inline tables nested "
            "deeper than 100 levels") in done.stderr


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    done = check(tmp_path, "\ufeff" + TASK)
    assert done.returncode == 0, done.stderr
