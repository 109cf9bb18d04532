"""``cronfleet check``: one call that loads everything and reports every problem and
warning, for the text output and ``--json`` alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cronfleet.config.keys import CONFIG_ENV, DEFAULT_CONFIG
from cronfleet.config.problems import ConfigError, Problem
from cronfleet.config.reader import load_config
from cronfleet.config.settings import Loaded

__all__ = ["CheckReport", "check_config"]


@dataclass
class CheckReport:
    """What :func:`check_config` found. ``loaded`` is None when the file itself is invalid
    (then ``problems`` says why); otherwise it holds the jobs that did load (plugins that
    failed are left out, their problems in ``problems``). ``warnings`` are located like
    problems; ``cronfleet check --strict`` fails on them."""

    name: str
    loaded: Loaded | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems


def check_config(path: str | Path | None = None) -> CheckReport:
    """Read, validate and load the configuration at ``path`` (default: as
    :func:`load_config` finds it) without raising: every problem and every warning."""
    import os

    name = str(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:
        loaded = load_config(path).load(strict=False)
    except ConfigError as exc:
        return CheckReport(name, None, list(exc.problems))
    warnings = [*loaded.config.warnings, *(Problem(w) for w in loaded.warnings)]
    return CheckReport(loaded.config.display, loaded, list(loaded.problems), warnings)
