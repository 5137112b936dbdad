"""docs/rules.md names every deletion shape, protection and skip, under an anchor of its value."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from retaining_saver import Protection, Reason, RetentionPolicy, Skip

RULES_DOC = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def anchored_headings(text: str) -> dict[str, str]:
    """Each `<a id="X"></a>` anchor and the heading on the line after it."""
    found = {}
    for match in re.finditer(r'^<a id="([^"]+)"></a>\n(#+ .+)$', text, re.MULTILINE):
        found[match.group(1)] = match.group(2)
    return found


@pytest.mark.parametrize("enum", [Reason, Protection, Skip], ids=lambda e: e.__name__)
def test_every_value_has_its_heading_and_anchor(enum: type[StrEnum]) -> None:
    headings = anchored_headings(RULES_DOC.read_text())
    for value in enum:
        assert value.value in headings, f"docs/rules.md has no anchor for {value!r}"
        # The heading says the value itself, so GitHub's own slug is the same anchor.
        assert headings[value.value] == f"### {value.value}", headings[value.value]


def test_no_anchor_names_a_value_that_does_not_exist() -> None:
    values = {v.value for enum in (Reason, Protection, Skip) for v in enum}
    assert set(anchored_headings(RULES_DOC.read_text())) == values


def test_links_inside_the_page_point_at_its_anchors() -> None:
    text = RULES_DOC.read_text()
    anchors = set(anchored_headings(text))
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, target


def test_the_ttl_error_points_at_an_anchor_of_the_page() -> None:
    with pytest.raises(ValueError, match=r"docs/rules\.md#too-young") as raised:
        RetentionPolicy(history_keep_runs=3)
    anchor = str(raised.value).rsplit("#", 1)[1]
    assert anchor in anchored_headings(RULES_DOC.read_text())
