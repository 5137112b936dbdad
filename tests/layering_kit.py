"""Who imports whom in the package, read from the source with `ast`, never by importing it.

Every `import` statement counts, wherever it sits: at the top, inside a function
(a lazy import is still a dependency) or under `TYPE_CHECKING` (reported apart,
as it runs only for the type checker). Two checks read this graph:

- `layering_problems`: the rules package (`_rules`) imports only the standard
  library, LangGraph's packages and itself; a backend imports only types from it
  (classes, enums, dataclasses, type aliases), never a verdict.
- `import_cycles`: the strongly connected modules of the package, each a circle.

Run as a script, it prints the circles and the layering problems of the tree.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "retaining_saver"
RULES = f"{PACKAGE}._rules"
BACKENDS = f"{PACKAGE}.backends"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

THIRD_PARTY_FOR_RULES = ("langgraph", "langchain_core")
"""The packages whose types the rules may read, beside the standard library."""


@dataclass(frozen=True)
class Import:
    """One imported name: `module` (resolved, absolute) and the `name` taken from it (None for
    a plain `import module`)."""

    importer: str
    module: str
    name: str | None
    line: int
    type_checking: bool


def package_sources(root: Path = ROOT) -> dict[str, str]:
    """Every module of the package, by dotted name, with its source text."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path.read_text()
    return found


def _is_package(module: str, sources: Mapping[str, str]) -> bool:
    return any(other.startswith(module + ".") for other in sources)


def _absolute(importer: str, node: ast.ImportFrom, sources: Mapping[str, str]) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, sources):
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def imports_of(importer: str, source: str, sources: Mapping[str, str]) -> Iterator[Import]:
    """Each name `importer` imports. `from a import b`, where `a.b` is a module of the package,
    imports module `a.b`; `import a as m` followed by `m.x` imports name `x` of `a`."""
    tree = ast.parse(source)
    checking = _type_checking_lines(tree)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, None, node.lineno, node.lineno in checking)
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(importer, node, sources)
            for alias in node.names:
                inner = f"{module}.{alias.name}"
                if inner in sources:
                    yield Import(importer, inner, None, node.lineno, node.lineno in checking)
                    aliases[alias.asname or alias.name] = inner
                else:
                    yield Import(importer, module, alias.name, node.lineno, node.lineno in checking)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            module = aliases[node.value.id]
            yield Import(importer, module, node.attr, node.lineno, node.lineno in checking)


def _top(module: str) -> str:
    return module.split(".")[0]


def _is_type(value: object) -> bool:
    """A class (an enum, a dataclass), or a type alias (`tuple[str, str]`, `Callable[...]`)."""
    return (
        isinstance(value, (type, types.GenericAlias, types.UnionType))
        or type(value).__name__ == "TypeAliasType"
        or typing.get_origin(value) is not None
    )


def _rules_problem(found: Import, sources: Mapping[str, str]) -> str | None:
    module = found.module
    if module == "__future__" or _top(module) in sys.stdlib_module_names:
        return None
    if _top(module) in THIRD_PARTY_FOR_RULES or module == RULES or module.startswith(RULES + "."):
        return None
    what = module if found.name is None else f"{module}.{found.name}"
    return f"{found.importer}:{found.line}: the rules import {what}"


def _backend_problem(found: Import) -> str | None:
    module = found.module
    if not (module == RULES or module.startswith(RULES + ".")):
        return None
    if found.name is None:
        return None  # the module itself: each name used from it is checked as an attribute
    value = getattr(importlib.import_module(module), found.name, None)
    if value is None and f"{module}.{found.name}" not in sys.modules:
        return f"{found.importer}:{found.line}: {module} has no {found.name}"
    if isinstance(value, types.ModuleType) or _is_type(value):
        return None
    return (
        f"{found.importer}:{found.line}: a backend uses {found.name} from {module},"
        " which is not a type: the rules judge, backends load facts and carry out"
    )


def layering_problems(sources: Mapping[str, str]) -> list[str]:
    """What breaks the layering in `sources` (module name: text); empty when none."""
    problems: list[str] = []
    for importer, source in sources.items():
        for found in imports_of(importer, source, sources):
            if importer == RULES or importer.startswith(RULES + "."):
                problem = _rules_problem(found, sources)
            elif importer.startswith(BACKENDS + "."):
                problem = _backend_problem(found)
            else:
                problem = None
            if problem is not None and problem not in problems:
                problems.append(problem)
    return problems


def import_graph(sources: Mapping[str, str], *, type_checking: bool) -> dict[str, set[str]]:
    """Module to the package modules it imports (with those only the type checker reads,
    if `type_checking`)."""
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for importer, source in sources.items():
        for found in imports_of(importer, source, sources):
            if found.type_checking and not type_checking:
                continue
            target = found.module
            if found.name is not None and f"{target}.{found.name}" in sources:
                target = f"{target}.{found.name}"
            if target in sources and target != importer:
                graph[importer].add(target)
            graph[importer].update(_packages_run(importer, target, sources))
    return graph


def _packages_run(importer: str, target: str, sources: Mapping[str, str]) -> set[str]:
    """The packages whose `__init__` importing `target` runs, besides those `importer` sits in
    (which are running already): importing `a.b.c` runs `a.b` first."""
    parts = target.split(".")
    ancestors = {".".join(parts[:n]) for n in range(1, len(parts))}
    own = importer.split(".")
    running = {".".join(own[:n]) for n in range(1, len(own) + 1)}
    return {p for p in ancestors - running if p in sources and p != importer}


def import_cycles(sources: Mapping[str, str], *, type_checking: bool = True) -> list[list[str]]:
    """Each import circle: a strongly connected set of two or more modules, sorted."""
    graph = import_graph(sources, type_checking=type_checking)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def room(module: str) -> str:
    """The package a module lives in: `retaining_saver`, `._rules`, `.backends`, `.testing`."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def main() -> None:
    """Print the figures for the package at the path given (a checkout's package), or this one."""
    sources = package_sources(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    for checking in (False, True):
        circles = import_cycles(sources, type_checking=checking)
        label = "with TYPE_CHECKING imports" if checking else "at run time"
        print(f"import circles {label}: {len(circles)}")
        for circle in circles:
            rooms = sorted({room(m) for m in circle})
            where = "inside " + rooms[0] if len(rooms) == 1 else "between " + ", ".join(rooms)
            print(f"  {len(circle)} modules, {where}: {', '.join(circle)}")
    problems = layering_problems(sources)
    print(f"layering problems: {len(problems)}")
    for problem in problems:
        print("  " + problem)


if __name__ == "__main__":
    main()
