"""The import structure of src/cronfleet, read statically (ast, nothing is imported).

Three rules (docs/architecture.md, "Import layers"):

* no import cycle, counting imports made inside functions too;
* no module imports a module of a higher layer -- at module level or inside a function;
* no class has more than ``MAX_METHODS`` methods.

Imports under ``if TYPE_CHECKING:`` are not run and are ignored. A module is placed in a
layer by the longest matching prefix in ``LAYERS``, so modules added under a mapped
package (``cronfleet.runtime.loop``, ``cronfleet.store.sqlite.queries``,
``cronfleet.config.tasks``) need no change here; a module that matches no prefix fails
the test until it is given a layer.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "cronfleet"

# lowest first; a module may import its own layer and the layers before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("root", ("cronfleet",)),  # the package itself: lazy re-exports, imports nothing
    ("cron", ("cronfleet.cron",)),
    ("core", ("cronfleet.model", "cronfleet.clock", "cronfleet.errors", "cronfleet.spec",
              "cronfleet.cancel",
              "cronfleet.attempts",
              "cronfleet.extras", "cronfleet.signing", "cronfleet.shares")),
    ("store", ("cronfleet.store",)),
    ("runtime", ("cronfleet.runtime",)),
    ("features", ("cronfleet.alerts", "cronfleet.alerting", "cronfleet.jobs", "cronfleet.notify",
                  "cronfleet.secrets", "cronfleet.config", "cronfleet.plugins",
                  "cronfleet.catalog", "cronfleet.views", "cronfleet.metrics",
                  "cronfleet.logs", "cronfleet.health", "cronfleet.tracing")),
    ("faces", ("cronfleet.api", "cronfleet.cli", "cronfleet.dashboard", "cronfleet.__main__",
               "cronfleet.integrations")),
]

# (importer, imported) pairs allowed to break a rule; empty, and it may only shrink
# (test_known_exceptions_still_exist fails on a listed pair that no longer exists).
KNOWN: set[tuple[str, str]] = set()

MAX_METHODS = 40


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank < 0 or (rank == 0 and module != ROOT):
        raise LookupError(module)
    return rank


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    top_level: bool  # run when the importer is imported (not inside a function)


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Collector(ast.NodeVisitor):
    """Import statements, each with whether it runs at import time (not inside a function);
    the bodies of ``if TYPE_CHECKING:`` are skipped (their ``else`` is not)."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self.depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          ) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.found.append((node, self.depth == 0))

    visit_ImportFrom = visit_Import


def imports(known: dict[str, Path]) -> list[Import]:
    out = []
    for name, path in known.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        collector = _Collector()
        collector.visit(ast.parse(path.read_text(), str(path)))
        for node, top in collector.found:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                assert isinstance(node, ast.ImportFrom)
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join([*base, node.module] if node.module else base)
                else:
                    mod = node.module or ""
                for alias in node.names:  # `from pkg import submodule` names the submodule
                    sub = f"{mod}.{alias.name}"
                    targets.append(sub if sub in known else mod)
            for t in targets:
                if t == ROOT or t.startswith(ROOT + "."):
                    while t not in known:  # an attribute path: its module
                        t = t.rpartition(".")[0]
                    if t != name:
                        out.append(Import(name, t, node.lineno, top))
    return out


KNOWN_MODULES = modules()
IMPORTS = imports(KNOWN_MODULES)


def test_the_walker_sees_the_package() -> None:
    assert {"cronfleet", "cronfleet.cron.expr", "cronfleet.views",
            "cronfleet.api.app"} <= set(KNOWN_MODULES)
    assert any(i.importer == "cronfleet.cron.expr" and i.imported == "cronfleet.cron.describe"
               and i.top_level for i in IMPORTS)
    # the lazy re-exports of cronfleet/__init__ are under TYPE_CHECKING: not edges
    assert not [i for i in IMPORTS if i.importer == "cronfleet"]


def test_every_module_has_a_layer() -> None:
    unmapped = []
    for name in KNOWN_MODULES:
        try:
            layer_of(name)
        except LookupError:
            unmapped.append(name)
    assert not unmapped, f"give these modules a layer in LAYERS: {unmapped}"


def test_no_lower_layer_imports_a_higher_one() -> None:
    bad = []
    for imp in IMPORTS:
        if (imp.importer, imp.imported) in KNOWN:
            continue
        if layer_of(imp.imported) > layer_of(imp.importer):
            where = "" if imp.top_level else " (inside a function)"
            bad.append(f"{imp.importer} [{LAYERS[layer_of(imp.importer)][0]}] imports "
                       f"{imp.imported} [{LAYERS[layer_of(imp.imported)][0]}] at line "
                       f"{imp.line}{where}")
    assert not bad, "\n".join(bad)


def test_known_exceptions_still_exist() -> None:
    pairs = {(i.importer, i.imported) for i in IMPORTS}
    gone = sorted(KNOWN - pairs)
    assert not gone, f"these imports are gone: remove them from KNOWN: {gone}"


def import_edges(*, skip: set[tuple[str, str]]) -> dict[str, set[str]]:
    """Every import, at module level or inside a function (``TYPE_CHECKING`` aside)."""
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if (imp.importer, imp.imported) not in skip:
            edges.setdefault(imp.importer, set()).add(imp.imported)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each a set of modules
    that import one another, directly or not), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for start in sorted(edges):
        if start not in index:
            visit(start)
    return sorted(found)


def _cycle_text(edges: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    lines = [f"  {' <-> '.join(component)}:"]
    for imp in IMPORTS:
        if imp.importer in members and imp.imported in members \
                and imp.imported in edges.get(imp.importer, ()):
            where = "" if imp.top_level else " (inside a function)"
            lines.append(f"    {imp.importer}:{imp.line} imports {imp.imported}{where}")
    return "\n".join(dict.fromkeys(lines))


def test_no_import_cycle() -> None:
    """No cycle, counting imports inside functions: a function-level import that closes
    a cycle only hides it until the function runs."""
    edges = import_edges(skip=KNOWN)
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(_cycle_text(edges, c) for c in found)


def method_counts() -> dict[str, int]:
    """``module.Class`` -> the functions defined in its body (methods, properties, static
    and class methods), for every class of src/cronfleet (nested ones too)."""
    out: dict[str, int] = {}
    for name, path in KNOWN_MODULES.items():
        tree = ast.parse(path.read_text(), str(path))

        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    qual = f"{prefix}.{child.name}"
                    out[qual] = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                                    for b in child.body)
                    walk(child, qual)
                elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    walk(child, prefix)

        walk(tree, name)
    return out


def test_no_class_has_more_than_40_methods() -> None:
    big = {name: n for name, n in method_counts().items() if n > MAX_METHODS}
    assert not big, f"classes with more than {MAX_METHODS} methods: {big}"


def test_the_cycle_finder_counts_imports_inside_functions() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []
    assert not [i for i in IMPORTS if i.importer == "cronfleet.model"
                and i.imported == "cronfleet.api.app"]  # TYPE_CHECKING aside
    assert any(not i.top_level for i in IMPORTS)  # function-level imports are edges


@pytest.mark.parametrize(("edges", "cyclic"), [
    ({"a": {"b"}, "b": {"c"}}, False),
    ({"a": {"b"}, "b": {"a"}}, True),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
])
def test_cycles(edges: dict[str, set[str]], cyclic: bool) -> None:
    assert bool(cycles(edges)) is cyclic


def test_layer_of() -> None:
    assert layer_of("cronfleet.runtime.loop") > layer_of("cronfleet.store.sqlite.store")
    assert layer_of("cronfleet.config.tasks") == layer_of("cronfleet.views")
    assert layer_of("cronfleet.api.jobs") > layer_of("cronfleet.views")
    with pytest.raises(LookupError):
        layer_of("cronfleet.newthing")


def test_the_cli_starts_without_the_stores_httpx_or_cryptography() -> None:
    """``import cronfleet`` loads no submodule; the ``next`` command loads the schedule
    tools only (docs/architecture.md, "Import layers")."""
    code = (
        "import sys, cronfleet\n"
        "root = sorted(m for m in sys.modules if m.startswith('cronfleet.'))\n"
        "import cronfleet.cli, cronfleet.cli.cron\n"
        "heavy = ('httpx', 'cryptography', 'fastapi', 'rich', 'cronfleet.store',\n"
        "         'cronfleet.model', 'cronfleet.config', 'cronfleet.runtime.scheduler')\n"
        "print(root, sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["[]", "[]"]


def test_every_public_name_resolves_where_type_checkers_look() -> None:
    """``cronfleet.__all__`` names resolve on first use, to the module the
    ``TYPE_CHECKING`` imports of cronfleet/__init__.py name (what type checkers read)."""
    import importlib

    import cronfleet

    tree = ast.parse((SRC / ROOT / "__init__.py").read_text())
    declared: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    declared.update((a.asname or a.name, stmt.module) for a in stmt.names)
    public = set(cronfleet.__all__) - {"__version__"}
    assert set(declared) == public
    assert declared == cronfleet._EXPORTS  # the lazy table and the typed imports agree
    for name, module in declared.items():
        assert getattr(cronfleet, name) is getattr(importlib.import_module(module), name)
