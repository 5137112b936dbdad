"""Figures issue #20 is judged by, measured on the package's source with `ast` alone.

    python scripts/house_metrics.py [--pairs] [package directory]

- twin excess: for each sync/async pair (`name` and `aname` defined in the
  same class, or both at module level, of one module), the lines of each body
  beyond a 3-line shim, summed over both; a pair of shims costs nothing, a
  body written twice costs both copies. A body's lines run from its first
  statement after the docstring to its last line, blank lines and comments
  inside it included (they are written twice too).
- modules over 400 lines, with their line counts.

`--pairs` lists every pair that carries excess, largest first.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHIM_LINES = 3
MODULE_LIMIT = 400

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Pair:
    """A sync function and its async twin, and the lines they carry beyond two shims."""

    module: str
    owner: str
    name: str
    excess: int


def body_lines(function: FunctionNode) -> int:
    """The lines of `function`'s body, without its docstring."""
    body = function.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    last = body[-1].end_lineno or body[-1].lineno
    return last - body[0].lineno + 1


def scopes(tree: ast.Module) -> Iterator[tuple[str, list[ast.stmt]]]:
    """The module's top level, and each class (nested ones too), with their statements."""
    yield "<module>", tree.body
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            yield node.name, node.body


def pairs_in(path: Path, root: Path) -> Iterator[Pair]:
    """Every sync/async twin pair defined in one scope of the module at `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = str(path.relative_to(root.parent))
    for owner, statements in scopes(tree):
        functions = {
            node.name: node
            for node in statements
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for name, function in functions.items():
            twin = functions.get(_async_name(name))
            if twin is None or twin is function:
                continue
            excess = sum(max(0, body_lines(f) - SHIM_LINES) for f in (function, twin))
            yield Pair(module, owner, name, excess)


def _async_name(name: str) -> str:
    """`aname` for `name`; `_aname` for `_name`, as the package spells private twins."""
    if name.startswith("_"):
        stripped = name.lstrip("_")
        return name[: len(name) - len(stripped)] + "a" + stripped
    return "a" + name


def module_sizes(root: Path) -> list[tuple[str, int]]:
    """Modules of the package over `MODULE_LIMIT` lines, longest first."""
    sizes = [
        (str(path.relative_to(root.parent)), len(path.read_text(encoding="utf-8").splitlines()))
        for path in sorted(root.rglob("*.py"))
    ]
    return sorted(((m, n) for m, n in sizes if n > MODULE_LIMIT), key=lambda item: -item[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="retaining_saver", type=Path)
    parser.add_argument("--pairs", action="store_true", help="list each pair with excess")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    pairs = [pair for path in sorted(root.rglob("*.py")) for pair in pairs_in(path, root)]
    heavy = sorted((p for p in pairs if p.excess), key=lambda p: -p.excess)
    total = sum(p.excess for p in pairs)
    print(f"twin excess: {total} lines in {len(heavy)} of {len(pairs)} pairs (goal <= 80)")
    if args.pairs:
        for pair in heavy:
            print(f"  {pair.excess:4d}  {pair.module} {pair.owner}.{pair.name}")
    big = module_sizes(root)
    print(f"modules over {MODULE_LIMIT} lines: {len(big)}")
    for module, lines in big:
        print(f"  {lines:4d}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
