"""The judging half of the re-checks a deletion makes in its transaction. No I/O.

A backend carries out a plan, or admission's take of a leaf, in one
transaction: it reads the rows named here, hands them over, and carries out
what comes back; it judges nothing itself. `PlanRecheck` walks a plan's steps
(see `backends/_apply`) over the rows read for them, as the steps change them;
`LeafTake` judges admission's take. Both judge by `_checks`' table.

Most steps of a plan are guarded in the statements that carry them out (each
guard clause names its check); only a duplicate (a duration link's deletion,
which must still clone its parent) and a link's graft are judged here again,
on rows read in the transaction. A deletion that must leave its parent the
head (a trailing duration leaf) is judged on its own, first, on the facts read
for it: whether it is the newest checkpoint is a question about the namespace,
not about the plan's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from retaining_saver._rules._checks import (
    DeletionFacts,
    DeletionKind,
    check_deletion,
    kind_of,
    leaf_verdict,
    untaken_skip,
)
from retaining_saver._rules._leaf import graft_holds
from retaining_saver._rules._lineage import (
    BlobKey,
    CheckpointNode,
    Deletion,
    Graft,
    LeafFacts,
    NodeKey,
    Plan,
    Reason,
    Root,
    Skip,
)
from retaining_saver._rules._policy import RetentionPolicy

ParentChange = tuple[str, str, str, str | None]
"""(checkpoint_ns, checkpoint_id, parent it has, parent it gets; None makes a root)."""

RowKey = tuple[str, str, str | None, bool]
"""(checkpoint_ns, checkpoint_id, parent it has, whether its writes were consumed): a
checkpoint to delete, as proven."""


@dataclass
class Applied:
    """What carrying out a plan did, after re-checking each step in the transaction."""

    deleted: list[Deletion] = field(default_factory=list)
    dropped: list[Deletion] = field(default_factory=list)
    grafted: list[Graft] = field(default_factory=list)
    rooted: list[Root] = field(default_factory=list)
    freed_blobs: list[BlobKey] = field(default_factory=list)
    materialised: list[NodeKey] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RowsToRead:
    """One namespace's rows a plan's re-check reads: `ids`, and the children of `parents_of`."""

    checkpoint_ns: str
    ids: list[str]
    parents_of: list[str]


@dataclass(frozen=True, slots=True)
class FactsToRead:
    """What one deletion's re-check reads: the rows of `ids` (the checkpoint, and the parent
    it must clone), whether it has children, and with `head`, the namespace's two newest ids
    (the newest, and the newest below the checkpoint's)."""

    ids: list[str]
    head: bool


def facts_to_read(deletion: Deletion) -> FactsToRead:
    """What the re-check of `deletion` reads (`DeletionFacts`)."""
    ids = [deletion.checkpoint_id] + ([deletion.clone_of] if deletion.clone_of else [])
    return FactsToRead(ids, deletion.must_be_head)


class _Rows:
    """The rows read to judge duration links again, and their children, as the plan's
    steps change them."""

    def __init__(self) -> None:
        self.nodes: dict[NodeKey, CheckpointNode] = {}
        self.kids: dict[NodeKey, set[NodeKey]] = {}

    def named(self, ns: str, ids: Sequence[str]) -> dict[str, CheckpointNode]:
        return {i: self.nodes[(ns, i)] for i in ids if (ns, i) in self.nodes}

    def reparent(self, ns: str, child_id: str, old: str, new: str | None) -> None:
        key = (ns, child_id)
        self.kids.get((ns, old), set()).discard(key)
        if new is not None:
            self.kids.setdefault((ns, new), set()).add(key)
        if key in self.nodes:
            self.nodes[key] = replace(self.nodes[key], parent_id=new)

    def delete(self, key: NodeKey, parent_id: str | None) -> None:
        self.nodes.pop(key, None)
        if parent_id is not None:
            self.kids.get((key[0], parent_id), set()).discard(key)


class PlanRecheck:
    """The rules' side of carrying out one `Plan`: which rows to read, and, on them, which
    steps still hold. `applied` records what was carried out and what was dropped.

    In the order a backend calls it: `rows_to_read` then `read` for each; for each of
    `stamps`, `facts_to_read`, `holds` and `carried_out`; then `parent_changes`, then
    `doomed`, whose statements the backend runs; `reclaimed` names the duplicates
    whose ids now resolve to their clone.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.applied = Applied()
        self._rows = _Rows()
        self._stamps = [d for d in plan.deletions if kind_of(d) is DeletionKind.STAMP]

    def rows_to_read(self) -> list[RowsToRead]:
        """The rows of the duration links the plan grafts past or deletes, with the children
        of those it deletes; none for a plan without any."""
        named: dict[str, set[str]] = {}
        for graft in plan_link_grafts(self.plan):
            chain = [graft.child_id, *graft.via, graft.new_parent_id]
            named.setdefault(graft.checkpoint_ns, set()).update(chain)
        doomed: dict[str, set[str]] = {}
        for d in self.plan.deletions:
            if kind_of(d) is DeletionKind.CLONE and d.clone_of is not None:
                named.setdefault(d.checkpoint_ns, set()).update([d.checkpoint_id, d.clone_of])
                doomed.setdefault(d.checkpoint_ns, set()).add(d.checkpoint_id)
        return [
            RowsToRead(ns, sorted(ids), sorted(doomed.get(ns, ())))
            for ns, ids in sorted(named.items())
        ]

    def read(
        self, ns: str, nodes: Mapping[str, CheckpointNode], children: Mapping[str, set[str]]
    ) -> None:
        """Take the rows `rows_to_read` named for `ns`: each found node, and the children of
        each parent that has any."""
        self._rows.nodes.update({(ns, i): n for i, n in nodes.items()})
        for parent_id, child_ids in children.items():
            self._rows.kids[(ns, parent_id)] = {(ns, c) for c in child_ids}

    def stamps(self) -> list[Deletion]:
        """The deletions to judge and carry out first, each on its own: those that must leave
        their parent the head, planned before any value was stored at their parent."""
        return list(self._stamps)

    @staticmethod
    def facts_to_read(deletion: Deletion) -> FactsToRead:
        """What `holds` reads for one of `stamps`."""
        return facts_to_read(deletion)

    @staticmethod
    def holds(deletion: Deletion, facts: DeletionFacts) -> bool:
        """Whether every check of `deletion`'s kind holds on `facts`, read in the transaction."""
        return check_deletion(deletion, facts)

    def carried_out(self, deletion: Deletion, taken: bool) -> None:
        """Record one of `stamps`: deleted (`taken`) or dropped."""
        if taken:
            self._rows.delete((deletion.checkpoint_ns, deletion.checkpoint_id), deletion.parent_id)
            self.applied.deleted.append(deletion)
        else:
            self.applied.dropped.append(deletion)

    def parent_changes(self) -> list[ParentChange]:
        """The grafts, then the roots, to carry out: a link's graft judged again on the rows,
        each other one guarded by its statement."""
        changes: list[ParentChange] = []
        rows = self._rows
        for graft in self.plan.grafts:
            ids = [graft.child_id, *graft.via, graft.new_parent_id]
            if graft.reason is Reason.GRAFTED_DURATION_LINK and not graft_holds(
                graft, rows.named(graft.checkpoint_ns, ids)
            ):
                continue
            changes.append((graft.checkpoint_ns, graft.child_id, graft.via[0], graft.new_parent_id))
            rows.reparent(graft.checkpoint_ns, graft.child_id, graft.via[0], graft.new_parent_id)
            self.applied.grafted.append(graft)
        for root in self.plan.roots:
            changes.append((root.checkpoint_ns, root.checkpoint_id, root.via[0], None))
            rows.reparent(root.checkpoint_ns, root.checkpoint_id, root.via[0], None)
            self.applied.rooted.append(root)
        return changes

    def doomed(self) -> list[RowKey]:
        """The rows of the other deletions, children before parents: each guarded by its
        statement (a row), a duplicate's judged again on the rows."""
        doomed: list[RowKey] = []
        stamps = {(d.checkpoint_ns, d.checkpoint_id) for d in self._stamps}
        for deletion in self.plan.deletions:
            key = (deletion.checkpoint_ns, deletion.checkpoint_id)
            if key in stamps:
                continue
            if kind_of(deletion) is DeletionKind.ROW or self._still_a_clone(deletion):
                doomed.append((*key, deletion.parent_id, deletion.writes_consumed))
                self._rows.delete(key, deletion.parent_id)
                self.applied.deleted.append(deletion)
            else:
                self.applied.dropped.append(deletion)
        return doomed

    def reclaimed(self) -> list[Deletion]:
        """The duplicates deleted by `doomed`: each id now resolves to the clone it copied."""
        return [d for d in self.applied.deleted if kind_of(d) is DeletionKind.CLONE]

    def _still_a_clone(self, deletion: Deletion) -> bool:
        key = (deletion.checkpoint_ns, deletion.checkpoint_id)
        node = self._rows.nodes.get(key)
        parent = (
            self._rows.nodes.get((deletion.checkpoint_ns, deletion.clone_of))
            if deletion.clone_of is not None
            else None
        )
        return check_deletion(deletion, DeletionFacts(node, parent, bool(self._rows.kids.get(key))))


def plan_link_grafts(plan: Plan) -> list[Graft]:
    """The plan's grafts past duration links: judged again on the rows, not by a guard."""
    return [g for g in plan.grafts if g.reason is Reason.GRAFTED_DURATION_LINK]


@dataclass(frozen=True, slots=True)
class LeafTake:
    """The rules' side of admission's take of a trailing leaf, under `policy` with the
    admission's `protected` ids: the verdict on the facts a round reads, and, for a store
    that takes in one guarded statement, why it took nothing."""

    policy: RetentionPolicy
    protected: frozenset[str]

    def verdict(self, facts: LeafFacts) -> Deletion | Skip:
        """The deletion to carry out, or why there is none (`leaf_verdict`)."""
        return leaf_verdict(facts, self.policy, self.protected)

    @staticmethod
    def untaken(
        judged: CheckpointNode, parent: CheckpointNode | None, *, leaf_as_judged: bool
    ) -> Skip:
        """Why a guarded take of `judged` took nothing, from the rows it read (`untaken_skip`)."""
        return untaken_skip(judged, parent, leaf_as_judged=leaf_as_judged)
