"""One named precondition of a deletion, as data (`_checks.PRECONDITIONS`). No I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from retaining_saver._rules._lineage import Skip

Subject = TypeVar("Subject")
Facts = TypeVar("Facts")


@dataclass(frozen=True, slots=True)
class Check(Generic[Subject, Facts]):
    """One named precondition: `name` (what guard comments cite), `holds_when` (the table's
    words), `predicate` over what is deleted and the facts read in its transaction, and
    `skip` (why a take it stops reclaimed nothing)."""

    name: str
    holds_when: str
    predicate: Callable[[Subject, Facts], bool]
    skip: Skip = Skip.PRECONDITION_CHANGED


def first_failed(
    checks: tuple[Check[Subject, Facts], ...], subject: Subject, facts: Facts
) -> Check[Subject, Facts] | None:
    """The first of `checks` that fails for `subject` on `facts`; None if all hold."""
    for check in checks:  # a plain loop: a take runs this on every admission
        if not check.predicate(subject, facts):
            return check
    return None
