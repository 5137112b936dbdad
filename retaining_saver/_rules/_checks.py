"""What each deletion re-checks in its transaction, stated once, as data. No I/O.

A deletion was proven against rows read before its transaction; inside it,
the rows are read again (or a statement re-reads them) and each named check
of its kind must still hold. `PRECONDITIONS` is the table: the Python verdicts
(`check_deletion`, and through it `deletion_holds` and `leaf_verdict`) run its
predicates in order; each guard clause of a statement that deletes carries a
`-- check: <name>` comment naming the checks it enforces, and
tests/engine/test_preconditions.py holds the statements to the table. The
table as `_rules` renders it (`preconditions_table`):

| Kind      | Check               | Holds when                                            |
|-----------|---------------------|-------------------------------------------------------|
| take      | marked              | it has the policy's metadata-only marker              |
| take      | not-protected       | its id is not protected                               |
| take      | no-pending-writes   | it owns no writes                                     |
| take      | parent-present      | it names a parent, and that row exists                |
| take      | still-a-clone       | it holds exactly its parent's state                   |
| take      | childless           | no checkpoint names it as parent                      |
| take      | newest-parent-next  | it is its namespace's newest, its parent the next     |
| stamp     | parent-as-proven    | it is there, with the parent it was proven against    |
| stamp     | childless           | no checkpoint names it as parent                      |
| stamp     | no-pending-writes   | it owns no writes                                     |
| stamp     | newest-parent-next  | it is its namespace's newest, its parent the next     |
| stamp     | still-a-clone       | it holds exactly its parent's state                   |
| clone     | parent-as-proven    | it is there, with the parent it was proven against    |
| clone     | childless           | no checkpoint names it as parent                      |
| clone     | no-pending-writes   | it owns no writes                                     |
| clone     | still-a-clone       | it holds exactly its parent's state                   |
| row       | parent-as-proven    | it is there, with the parent it was proven against    |
| row       | childless           | no checkpoint names it as parent                      |
| row       | no-pending-writes   | it owns no writes, unless the plan counts them        |
|           |                     | consumed                                              |
| writes    | childless           | no checkpoint names it as parent                      |
| thread    | locked              | no other sweeper holds the thread                     |
| thread    | head-as-judged      | its newest root checkpoint is the one judged          |
| thread    | writes-as-judged    | that checkpoint owns the pending writes judged        |
| thread    | nothing-left        | no row of it is there after its deletes               |

A take is admission's: a stamp at the head judged on the rows one round reads
(`leaf_verdict`). A stamp deletion is a plan's stamp at the head, judged on its
own first; a clone deletion is a grafted duration link, judged on the rows the
plan reads and changes (`_recheck`); a row is every other deletion, which its
statement alone guards, the plan's own deletions aside (a child deleted with
it does not count). A writes deletion takes, from a checkpoint that stays, the
writes rows a removed run left there (`_resumed`), or puts back the rows the resume
ledger recorded before it, each statement guarded. A thread deletion is the idle-thread
sweep's, of a whole thread judged expired on its head (`_thread_checks`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from retaining_saver._rules._check import Check, first_failed
from retaining_saver._rules._leaf import has_marker, is_clone, leaf_deletion
from retaining_saver._rules._lineage import CheckpointNode, Deletion, LeafFacts, Reason, Skip
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._thread_checks import THREAD_CHECKS


class DeletionKind(StrEnum):
    """Which preconditions a deletion re-checks (`PRECONDITIONS`)."""

    TAKE = "take"
    STAMP = "stamp"
    CLONE = "clone"
    ROW = "row"
    WRITES = "writes"
    THREAD = "thread"


@dataclass(slots=True)
class DeletionFacts:
    """What a re-check reads, in the deleting transaction, about one deletion.

    Attributes:
        node: The checkpoint's row as it is now; None if gone.
        parent: The row of the parent it must clone (`Deletion.clone_of`), or, for a take,
            of the parent it names; None if gone or none.
        has_children: Whether a checkpoint (not deleted with it) names it as parent.
        newest_id: The newest id of its namespace; read for a take or a trailing leaf.
        runner_up_id: The newest id below its own; read with `newest_id`.
        policy: For a take, the policy whose marker and protected ids it must pass.
        protected: For a take, the ids the admission protects besides the policy's.
    """

    node: CheckpointNode | None
    parent: CheckpointNode | None
    has_children: bool
    newest_id: str | None = None
    runner_up_id: str | None = None
    policy: RetentionPolicy | None = None
    protected: frozenset[str] = frozenset()


DeletionCheck = Check[Deletion, DeletionFacts]
"""A precondition of a checkpoint's deletion."""


def _marked(deletion: Deletion, facts: DeletionFacts) -> bool:
    assert facts.policy is not None, "a take is judged under a policy"
    return facts.node is not None and has_marker(facts.node, facts.policy)


def _not_protected(deletion: Deletion, facts: DeletionFacts) -> bool:
    assert facts.policy is not None, "a take is judged under a policy"
    checkpoint_id = deletion.checkpoint_id
    return checkpoint_id not in facts.protected | facts.policy.protect_checkpoint_ids


def _no_pending_writes(deletion: Deletion, facts: DeletionFacts) -> bool:
    return facts.node is not None and (not facts.node.write_count or deletion.writes_consumed)


def _parent_present(deletion: Deletion, facts: DeletionFacts) -> bool:
    return deletion.parent_id is not None and facts.parent is not None


def _parent_as_proven(deletion: Deletion, facts: DeletionFacts) -> bool:
    return facts.node is not None and facts.node.parent_id == deletion.parent_id


def _still_a_clone(deletion: Deletion, facts: DeletionFacts) -> bool:
    if deletion.clone_of is None:
        return True  # nothing to clone: a row the plan proved other ways
    return (
        facts.node is not None and facts.parent is not None and is_clone(facts.node, facts.parent)
    )


def _childless(deletion: Deletion, facts: DeletionFacts) -> bool:
    return not facts.has_children


def _newest_parent_next(deletion: Deletion, facts: DeletionFacts) -> bool:
    """Removing it makes its parent the latest: no newer checkpoint on another branch."""
    return facts.newest_id == deletion.checkpoint_id and facts.runner_up_id == deletion.clone_of


MARKED = Check(
    "marked", "it has the policy's metadata-only marker", _marked, Skip.NOT_A_DURATION_LEAF
)
NOT_PROTECTED = Check("not-protected", "its id is not protected", _not_protected, Skip.PROTECTED_ID)
NO_PENDING_WRITES = Check(
    "no-pending-writes", "it owns no writes", _no_pending_writes, Skip.OWNS_WRITES
)
NO_UNCONSUMED_WRITES = Check(
    "no-pending-writes",
    "it owns no writes, unless the plan counts them consumed",
    _no_pending_writes,
)
PARENT_PRESENT = Check(
    "parent-present", "it names a parent, and that row exists", _parent_present, Skip.MISSING_PARENT
)
PARENT_AS_PROVEN = Check(
    "parent-as-proven", "it is there, with the parent it was proven against", _parent_as_proven
)
STILL_A_CLONE = Check(
    "still-a-clone",
    "it holds exactly its parent's state",
    _still_a_clone,
    Skip.PARENT_STATE_DIFFERS,
)
CHILDLESS = Check("childless", "no checkpoint names it as parent", _childless)
NEWEST_PARENT_NEXT = Check(
    "newest-parent-next",
    "it is its namespace's newest, its parent the next",
    _newest_parent_next,
)

PRECONDITIONS: Mapping[DeletionKind, tuple[Check[Any, Any], ...]] = {
    DeletionKind.TAKE: (
        MARKED,
        NOT_PROTECTED,
        NO_PENDING_WRITES,
        PARENT_PRESENT,
        STILL_A_CLONE,
        CHILDLESS,
        NEWEST_PARENT_NEXT,
    ),
    DeletionKind.STAMP: (
        PARENT_AS_PROVEN,
        CHILDLESS,
        NO_PENDING_WRITES,
        NEWEST_PARENT_NEXT,
        STILL_A_CLONE,
    ),
    DeletionKind.CLONE: (PARENT_AS_PROVEN, CHILDLESS, NO_PENDING_WRITES, STILL_A_CLONE),
    DeletionKind.ROW: (PARENT_AS_PROVEN, CHILDLESS, NO_UNCONSUMED_WRITES),
    DeletionKind.WRITES: (CHILDLESS,),
    DeletionKind.THREAD: THREAD_CHECKS,
}
"""Each kind's checks, in the order a verdict runs them (the first that fails names a take's
`Skip`)."""

_LEAF_ALONE = (MARKED, NOT_PROTECTED, NO_PENDING_WRITES)
"""The take's checks that read the leaf alone: a head read can dismiss it before its parent."""
_ON_PARENT = (PARENT_PRESENT, STILL_A_CLONE)
"""The take's checks on its parent."""


def kind_of(deletion: Deletion) -> DeletionKind:
    """The kind of a planned deletion: a stamp (must leave its parent the head), a clone
    (must still clone its parent), or a row."""
    if deletion.must_be_head:
        return DeletionKind.STAMP
    return DeletionKind.CLONE if deletion.clone_of is not None else DeletionKind.ROW


def failed_check(
    deletion: Deletion, facts: DeletionFacts, kind: DeletionKind
) -> DeletionCheck | None:
    """The first check of `kind` (a checkpoint's) that `deletion` fails on `facts`; None
    if all hold."""
    checks: tuple[DeletionCheck, ...] = PRECONDITIONS[kind]
    return first_failed(checks, deletion, facts)


def check_deletion(deletion: Deletion, facts: DeletionFacts) -> bool:
    """Whether every precondition of the planned `deletion`'s kind holds on `facts`."""
    return failed_check(deletion, facts, kind_of(deletion)) is None


def deletion_holds(
    deletion: Deletion,
    now: Mapping[str, CheckpointNode],
    *,
    has_children: bool,
    newest_id: str | None,
    runner_up_id: str | None = None,
) -> bool:
    """Whether what `deletion` was proven against still holds, as read in its transaction:
    `check_deletion` on the facts given.

    Args:
        deletion: The planned deletion.
        now: The rows of the checkpoint and of `clone_of`, by id, as they are now.
        has_children: Whether any checkpoint still names it as parent.
        newest_id: The newest id in its namespace, read when `must_be_head`.
        runner_up_id: The newest id below it, read when `must_be_head`: it must
            be `clone_of`, so that removing the head makes its parent the latest.
    """
    parent = now.get(deletion.clone_of) if deletion.clone_of is not None else None
    node = now.get(deletion.checkpoint_id)
    facts = DeletionFacts(node, parent, has_children, newest_id, runner_up_id)
    return check_deletion(deletion, facts)


def leaf_skip(
    node: CheckpointNode, policy: RetentionPolicy, protected: frozenset[str]
) -> Skip | None:
    """Why `node` cannot be a reclaimable leaf before its parent is known, else None: the
    take's checks that read the leaf alone (marked, not protected, no pending writes)."""
    deletion = _take_of(node.checkpoint_ns, node.checkpoint_id, node.parent_id)
    facts = DeletionFacts(node, None, False, policy=policy, protected=protected)
    failed = first_failed(_LEAF_ALONE, deletion, facts)
    return None if failed is None else failed.skip


@functools.lru_cache(maxsize=256)
def _take_of(checkpoint_ns: str, checkpoint_id: str, parent_id: str | None) -> Deletion:
    """The take's `Deletion` of a leaf, kept: admission asks `leaf_skip` about every head
    it reads, and the deletion is a value."""
    return Deletion(
        checkpoint_ns,
        checkpoint_id,
        parent_id,
        Reason.TRAILING_DURATION_LEAF,
        clone_of=parent_id,
        must_be_head=True,
    )


def parent_skip(leaf: CheckpointNode, parent: CheckpointNode | None) -> Skip | None:
    """Why `leaf` cannot go given its `parent` row (None if missing), else None: the take's
    checks on its parent (present, and cloned)."""
    deletion = leaf_deletion(leaf, Reason.TRAILING_DURATION_LEAF, head=True)
    facts = DeletionFacts(leaf, parent, False)
    failed = first_failed(_ON_PARENT, deletion, facts)
    return None if failed is None else failed.skip


def untaken_skip(
    judged: CheckpointNode, parent: CheckpointNode | None, *, leaf_as_judged: bool
) -> Skip:
    """Why a guarded take of `judged` took nothing, told from the rows it read.

    The take re-checked every precondition of the `Deletion` in one statement
    and read, in the same snapshot, the `parent` row and whether the leaf's
    row was still `judged` (`leaf_as_judged`). Judged reclaimable before it
    (`leaf_skip`), a leaf still as judged was not taken because of its
    parent, or because something else changed meanwhile (a write, a child, a
    newer checkpoint). A leaf gone or rewritten says nothing about its parent:
    the thread changed under the admission, which reads its head again. A
    leaf judged without a parent never had one to clone.
    """
    if judged.parent_id is None:
        return Skip.MISSING_PARENT
    if not leaf_as_judged:
        return Skip.PRECONDITION_CHANGED
    return parent_skip(judged, parent) or Skip.PRECONDITION_CHANGED


def leaf_verdict(
    facts: LeafFacts, policy: RetentionPolicy, protected: frozenset[str]
) -> Deletion | Skip:
    """The deletion of the trailing leaf `facts` describes, or why there is none: the
    take's checks (`PRECONDITIONS[TAKE]`) in order, the first that fails naming the `Skip`.

    A leaf goes when it is still a reclaimable leaf (marked, not protected, no
    writes), its parent exists and it clones it, nothing names it as parent,
    and it is the newest checkpoint of its namespace, its parent the next.
    """
    leaf = facts.leaf
    if leaf is None:
        return Skip.PRECONDITION_CHANGED
    deletion = leaf_deletion(leaf, Reason.TRAILING_DURATION_LEAF, head=True)
    failed = failed_check(deletion, take_facts(facts, policy, protected), DeletionKind.TAKE)
    return deletion if failed is None else failed.skip


def take_facts(
    facts: LeafFacts, policy: RetentionPolicy, protected: frozenset[str]
) -> DeletionFacts:
    """The facts of an admission round (`LeafFacts`) as the take's checks read them."""
    return DeletionFacts(
        facts.leaf,
        facts.parent,
        facts.has_children,
        facts.newest_id,
        facts.runner_up_id,
        policy,
        protected,
    )


def preconditions_table() -> str:
    """`PRECONDITIONS` as the Markdown table this module's docstring shows."""
    width = 53
    lines = [
        f"| {'Kind':<9} | {'Check':<19} | {'Holds when':<{width}} |",
        f"|{'-' * 11}|{'-' * 21}|{'-' * (width + 2)}|",
    ]
    for kind, checks in PRECONDITIONS.items():
        for check in checks:
            words, first = check.holds_when.split(), True
            while words:
                line = words.pop(0)
                while words and len(line) + 1 + len(words[0]) <= width:
                    line += " " + words.pop(0)
                cells = (kind.value, check.name) if first else ("", "")
                lines.append(f"| {cells[0]:<9} | {cells[1]:<19} | {line:<{width}} |")
                first = False
    return "\n".join(lines)
