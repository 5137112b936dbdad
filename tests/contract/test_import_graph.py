"""The package's modules import each other without a circle.

A circle makes the import order decide which names exist, so a refactor that
moves one import can break a module far away. Only imports that run when a
module loads count: those under `if TYPE_CHECKING:` and inside functions do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import retaining_saver

PACKAGE = "retaining_saver"
ROOT = Path(retaining_saver.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements at module level, outside `if TYPE_CHECKING:` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not _is_type_checking(node.test):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                pending += handler.body
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package's modules one import statement loads (a submodule when it names one)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    base = node.module or ""
    if node.level:
        is_package = MODULES[module].name == "__init__.py"
        anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join([*anchor, *([base] if base else [])])
    found = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    if len(found) < len(node.names) and base in MODULES:
        found.add(base)
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: set[str] = set()
        for node in _load_time_imports(tree):
            edges |= _targets(name, node)
        graph[name] = {e for e in edges if e != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_the_imports_it_should() -> None:
    graph = _graph()
    assert "retaining_saver._rules" in graph["retaining_saver.backends._base"]
    assert "retaining_saver.backends._base" in graph["retaining_saver.backends.postgres"]


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    graph = _graph()
    graph["retaining_saver._rules._runs"].add("retaining_saver.backends.postgres")
    assert _cycle(graph) is not None


def test_no_import_circle() -> None:
    graph = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
