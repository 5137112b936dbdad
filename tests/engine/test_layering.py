"""The rules decide; everything else supplies facts and carries out plans.

The rules package (`_rules`) imports only the standard library, LangGraph's
packages and itself; a backend imports only types from it, never a verdict.
Read from the source (`layering_kit`), so that a lazy import counts too; and
each check is shown to fail on a planted import.
"""

from __future__ import annotations

import pytest
from layering_kit import (
    PACKAGE,
    import_cycles,
    layering_problems,
    package_sources,
)

SOURCES = package_sources()


def test_the_rules_import_only_the_standard_library_langgraph_and_themselves() -> None:
    problems = layering_problems(SOURCES)
    assert [p for p in problems if "the rules import" in p] == []


def test_backends_import_only_types_from_the_rules() -> None:
    problems = layering_problems(SOURCES)
    assert [p for p in problems if "a backend uses" in p or " has no " in p] == []


def _planted(module: str, line: str) -> dict[str, str]:
    """The package's sources with `line` added at the end of `module`."""
    return {**SOURCES, module: SOURCES[module] + "\n" + line + "\n"}


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        (f"{PACKAGE}._rules._leaf", "import psycopg", "the rules import psycopg"),
        (
            f"{PACKAGE}._rules._checks",
            f"from {PACKAGE}.backends._sql import Statement",
            f"the rules import {PACKAGE}.backends._sql.Statement",
        ),
        (
            f"{PACKAGE}._rules._plan",
            "def later():\n    from retaining_saver import _saver",
            f"the rules import {PACKAGE}._saver",
        ),
        (
            f"{PACKAGE}.backends._apply",
            f"from {PACKAGE}._rules import deletion_holds",
            "a backend uses deletion_holds",
        ),
        (
            f"{PACKAGE}.backends.memory",
            f"from {PACKAGE} import _rules\nx = _rules.leaf_verdict",
            "a backend uses leaf_verdict",
        ),
        (
            f"{PACKAGE}.backends._postgres_plan",
            f"from {PACKAGE}._rules._checks import check_deletion",
            "a backend uses check_deletion",
        ),
    ],
)
def test_a_planted_import_is_rejected(module: str, line: str, named: str) -> None:
    problems = layering_problems(_planted(module, line))
    assert any(named in p for p in problems), problems


def test_types_pass_where_verdicts_fail() -> None:
    types = f"from {PACKAGE}._rules import Deletion, DeletionKind, NodeKey, Plan"
    assert layering_problems(_planted(f"{PACKAGE}.backends._apply", types)) == layering_problems(
        SOURCES
    )


def test_no_import_circle_in_the_package() -> None:
    """No module of the package reaches itself through its imports: those made at run time
    (inside functions included), and those made only for type checking."""
    assert import_cycles(SOURCES, type_checking=False) == []
    assert import_cycles(SOURCES, type_checking=True) == []


def test_a_planted_circle_is_found() -> None:
    planted = _planted(f"{PACKAGE}._rules._lineage", f"from {PACKAGE}._rules._plan import _Planner")
    before = {tuple(c) for c in import_cycles(SOURCES)}
    after = {tuple(c) for c in import_cycles(planted)}
    new = after - before
    assert new and any(f"{PACKAGE}._rules._lineage" in c for c in new), new
