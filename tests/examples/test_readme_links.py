"""Every file the README and docs/ link to or show exists in the checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_name_existing_files(page: Path) -> None:
    prose = re.sub(r"```.*?```|`[^`]*`", "", page.read_text(), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
