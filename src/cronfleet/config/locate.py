"""Where tables and keys are in a TOML text.

:mod:`tomllib` (the stdlib parser) returns plain dicts without line numbers, and no
position-aware TOML parser is a dependency, so :class:`Locator` scans the text once for
table headers and ``key =`` lines (skipping multi-line strings and arrays). It only has to
find where a key *is*, not to parse values -- tomllib has already parsed and checked the
document. When a key cannot be located (an inline table, a dotted key), messages fall back
to the line of the table's header.
"""

from __future__ import annotations

import re

__all__ = ["Locator"]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r"\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_KEY_PART = rf"(?:{_BARE}|{_QUOTED})"
_KEY_LINE = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=\s*")
_HEADER = re.compile(rf"^\s*(\[\[|\[)\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]\]?\s*(?:#.*)?$")


def _key_name(raw: str) -> str:
    parts = re.findall(_KEY_PART, raw)
    return ".".join(p[1:-1] if p[:1] in "\"'" else p for p in parts)


class Locator:
    """Where tables and keys are: ``(table, index) -> header line`` and
    ``(table, index, key) -> (line, value column)``; index is the position of an
    array-of-tables entry (``[[tasks]]``), -1 for a plain table, and ``("", -1)`` is the
    root table. Lines and columns are 1-based."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.tables: dict[tuple[str, int], int] = {}
        self.keys: dict[tuple[str, int, str], tuple[int, int]] = {}
        counts: dict[str, int] = {}
        current = ("", -1)
        closing: str | None = None  # inside a multi-line string: its delimiter
        depth = 0  # inside a multi-line array or inline table
        for n, line in enumerate(self.lines, 1):
            if closing is not None:
                if closing in line:
                    closing = None
                continue
            if depth > 0:
                depth = max(depth + _bracket_balance(line), 0)
                continue
            header = _HEADER.match(line)
            if header:
                name = _key_name(header.group(2))
                if header.group(1) == "[[":
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                    current = (name, index)
                else:
                    current = (name, -1)
                self.tables.setdefault(current, n)
                continue
            m = _KEY_LINE.match(line)
            if not m:
                continue
            self.keys.setdefault((*current, _key_name(m.group(1))), (n, m.end() + 1))
            rest = line[m.end():]
            for delim in ('"""', "'''"):
                if rest.startswith(delim) and rest.count(delim) == 1:
                    closing = delim
            if closing is None and rest[:1] in "[{":
                depth = max(_bracket_balance(rest), 0)

    def table(self, table: str, index: int = -1) -> int | None:
        return self.tables.get((table, index))

    def key(self, table: str, index: int, key: str) -> tuple[int, int] | None:
        return self.keys.get((table, index, key))

    def find(self, text: str, start: int) -> tuple[int, int] | None:
        """The first occurrence of ``text`` at or after line ``start``."""
        for n in range(start, len(self.lines) + 1):
            col = self.lines[n - 1].find(text)
            if col >= 0:
                return n, col + 1
        return None

    def source(self, line: int | None) -> str | None:
        if line is None or not 1 <= line <= len(self.lines):
            return None
        return self.lines[line - 1]


def _bracket_balance(text: str) -> int:
    """Opening minus closing brackets outside quotes (comments ignored)."""
    balance = 0
    quote: str | None = None
    escaped = False
    for ch in text:
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        elif ch in "[{":
            balance += 1
        elif ch in "]}":
            balance -= 1
    return balance
