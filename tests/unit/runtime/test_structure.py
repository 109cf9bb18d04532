"""The runtime's own structure rules (docs/architecture.md, "The runtime: parts and
owners"), stricter than tests/test_layers.py's for the whole package (which also checks
the size of every class): no part imports the facade and the runtime's imports form no
cycle, ``TYPE_CHECKING`` imports counted too; no part holds the scheduler."""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[3] / "src" / "cronfleet" / "runtime"
PACKAGE = "cronfleet.runtime"


def _modules() -> dict[str, ast.Module]:
    return {f"{PACKAGE}.{f.stem}": ast.parse(f.read_text()) for f in RUNTIME.glob("*.py")
            if f.stem != "__init__"}


def _imports(tree: ast.Module, names: set[str]) -> set[str]:
    """Every runtime module ``tree`` imports, wherever the import is."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in names:
                    out.add(sub)
                elif node.module in names:
                    out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in names)
    return out


def test_no_runtime_module_imports_the_facade() -> None:
    mods = _modules()
    names = set(mods)
    importers = sorted(m for m, tree in mods.items()
                       if f"{PACKAGE}.scheduler" in _imports(tree, names))
    assert importers == []


def test_the_runtime_imports_form_no_cycle() -> None:
    mods = _modules()
    names = set(mods)
    graph = {m: _imports(tree, names) - {m} for m, tree in mods.items()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(m):], m]))
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])


def test_no_part_holds_the_scheduler() -> None:
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert not (node.value.id == "self" and node.attr == "s"), name
