"""The rules module's tables cannot drift from its code: each table row names a member
of the enum it documents, and each member has a row."""

from __future__ import annotations

import re

import retaining_saver._rules as rules
from retaining_saver._rules._lineage import Protection, Reason


def _first_cells(heading: str) -> set[str]:
    """The non-empty first cells of the docstring table whose header starts with `heading`."""
    doc = rules.__doc__ or ""
    table = doc.split(f"| {heading}", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]  # the header's rest and the rule line
    return {m.group(1).strip() for r in rows if (m := re.match(r"\|\s*([^|]*?)\s*\|", r))} - {""}


def test_every_protection_has_a_row_and_every_row_a_protection() -> None:
    assert _first_cells("Protection") == {p.value for p in Protection}


def test_every_deletion_reason_has_a_shape_row() -> None:
    shapes = " ".join(_first_cells("Shape"))
    described = {
        Reason.TRAILING_DURATION_LEAF: "trailing duration-only leaf",
        Reason.SUPERSEDED_BRANCH: "superseded sibling subtree",
        Reason.GRAFTED_DURATION_LINK: "duration-only chain link",
        Reason.BEYOND_HORIZON: "beyond the history horizon",
        Reason.COMPACTED_STEP: "compacted super-step",
        Reason.RUN_REMOVED: "removed run",
    }
    assert set(described) == set(Reason), "a new Reason needs a row in the Shape table"
    for reason, shape in described.items():
        assert shape in shapes, f"{reason} has no row {shape!r}"
