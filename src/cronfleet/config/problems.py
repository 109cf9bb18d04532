"""What is wrong with a configuration: :class:`Problem` (located) and :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cronfleet.errors import CronfleetError

__all__ = ["ConfigError", "Problem"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration or a plugin.

    ``str(problem)`` is ``file:line:column: message``; the message names the task (or
    plugin and schedule) and the key. ``source`` is the offending line, for a caret.
    """

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    task: str | None = None
    key: str | None = None
    plugin: str | None = None
    schedule: str | None = None
    source: str | None = None

    @property
    def location(self) -> str:
        if self.file is None:
            return ""
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        return out

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message

    def excerpt(self) -> str | None:
        """The offending line with a caret under the column, compiler style."""
        if self.source is None or self.line is None:
            return None
        gutter = f"{self.line:>5} | "
        out = gutter + self.source.replace("\t", " ")
        if self.column is not None:
            out += "\n" + " " * (len(gutter) - 2) + "| " + " " * (self.column - 1) + "^"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": str(self),
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "task": self.task,
            "plugin": self.plugin,
            "schedule": self.schedule,
            "key": self.key,
        }


class ConfigError(CronfleetError, ValueError):
    """The configuration (or a plugin it loads) is invalid; ``problems`` lists every
    problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
