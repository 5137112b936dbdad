"""Every file the README and docs/ link to or show exists in the checkout."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(page: Path) -> str:
    """`page` without its code: code blocks and inline code hold no links."""
    return re.sub(r"```.*?```|`[^`]*`", "", page.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_name_existing_files(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose(page)):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


@functools.cache
def heading_anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives `page`'s headings: lower case, each space a hyphen, and
    every other character but letters, digits, hyphens and underscores dropped; a
    repeated one gets `-1`, `-2`, ... (headings inside code blocks are none)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, repeat = slug, 0
        while anchor in anchors:
            repeat += 1
            anchor = f"{slug}-{repeat}"
        anchors.add(anchor)
    return frozenset(anchors)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_into_pages_name_existing_headings(page: Path) -> None:
    for target, anchor in re.findall(r"\]\(([^)#]*)#([^)]+)\)", prose(page)):
        if "://" in target or not (target == "" or target.endswith(".md")):
            continue
        linked = page if target == "" else page.parent / target
        assert anchor in heading_anchors(linked), f"{page.name} links to missing {target}#{anchor}"
