"""The glossary in docs/mechanism.md names what is in the code: one name per concept, each
name it lists found, public names first."""

from __future__ import annotations

import re
from pathlib import Path

import retaining_saver
import retaining_saver.testing

ROOT = Path(retaining_saver.__file__).parent
MECHANISM = ROOT.parent / "docs" / "mechanism.md"
TICKED = re.compile(r"`([^`]+)`")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _rows() -> list[tuple[str, str]]:
    """Each glossary row's term and its "In the code" cell."""
    text = MECHANISM.read_text()
    table = text[text.index("## Glossary") :].splitlines()
    cells = [line.strip("|").split(" | ") for line in table if line.startswith("| ")]
    return [(cell[0].strip(), cell[-1].strip()) for cell in cells[2:]]


def _source() -> str:
    return "\n".join(path.read_text() for path in ROOT.rglob("*.py"))


def test_every_name_the_glossary_gives_is_in_the_code() -> None:
    source, missing = _source(), []
    for term, code in _rows():
        for ticked in TICKED.findall(code):
            if ticked.startswith(("tests/", "backends/")):
                continue  # a place, not a name
            names = NAME.findall(ticked.split("==")[0])
            missing += [f"{term}: {n}" for n in names if not re.search(rf"\b{n}\b", source)]
    assert missing == []


def test_public_names_come_first() -> None:
    """In each row, no public name follows a private one (the part after `;`)."""
    public = set(retaining_saver.__all__) | set(retaining_saver.testing.__all__)
    late = []
    for term, code in _rows():
        _, _, private = code.partition(";")
        for ticked in TICKED.findall(private):
            if NAME.findall(ticked)[0] in public:
                late.append(f"{term}: {ticked}")
    assert late == []
