"""Carrying out a plan: one transaction, every step guarded by what it proved.

Most steps are guarded in the statements that carry them out, a few bulk
statements for the whole plan: a re-parenting only changes a checkpoint that
still has the parent the plan proved (and whose new parent still exists); a
deletion only removes a checkpoint that still has its parent, has no child
the plan does not delete with it, and owns no writes unless the plan counts
them consumed. A statement that changes fewer rows than proven raises
`PlanChanged`, which rolls the whole transaction back: a pass is carried out
whole or not at all, and the next pass judges the thread again.

A duration link's graft and deletion need more than parent links (it must
still clone its parent, which must own no writes): their rows are read in the
transaction and judged by the rules again, as the plan's earlier steps change
them (`_Rows`); what no longer holds is dropped. A deletion that must leave its
parent the head (a trailing duration leaf) is judged and carried out on its
own, first (before any value is stored at its parent, which it must clone):
whether it is the newest checkpoint is a question about the namespace, not
about the plan's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from retaining_saver import _rules
from retaining_saver._rules import (
    BlobKey,
    CheckpointNode,
    Deletion,
    Graft,
    NodeKey,
    Plan,
    Reason,
    Root,
)

if TYPE_CHECKING:
    from retaining_saver.backends._base import Backend, Op

ParentChange = tuple[str, str, str, str | None]
"""(checkpoint_ns, checkpoint_id, parent it has, parent it gets; None makes a root)."""

RowKey = tuple[str, str, str | None, bool]
"""(checkpoint_ns, checkpoint_id, parent it has, whether its writes were consumed): a
checkpoint to delete, as proven."""


class PlanChanged(RuntimeError):
    """A statement of a plan found a row other than the plan proved: nothing is done."""


@dataclass
class Applied:
    """What carrying out a plan did, after re-checking each step in the transaction."""

    deleted: list[Deletion] = field(default_factory=list)
    dropped: list[Deletion] = field(default_factory=list)
    grafted: list[Graft] = field(default_factory=list)
    rooted: list[Root] = field(default_factory=list)
    freed_blobs: list[BlobKey] = field(default_factory=list)
    materialised: list[NodeKey] = field(default_factory=list)


class _Rows:
    """The rows read to judge duration links again, and their children, as the plan's
    steps change them."""

    def __init__(
        self, nodes: dict[NodeKey, CheckpointNode], kids: dict[NodeKey, set[NodeKey]]
    ) -> None:
        self.nodes = nodes
        self.kids = kids

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


def _judged_again(deletion: Deletion) -> bool:
    """Whether the rules judge `deletion` again on rows read in the transaction (a
    duplicate's, which must still clone its parent) rather than its statement's guards."""
    return deletion.clone_of is not None and not deletion.must_be_head


def apply_plan(
    backend: Backend,
    thread_id: str,
    plan: Plan,
    values: Mapping[NodeKey, Mapping[str, Any]],
) -> Op[Applied]:
    """Carry out `plan` (see the module docstring); `values`: each `Materialise`'s channel
    values, as computed before the transaction."""
    applied = Applied()
    rows = yield from _read_rows(backend, thread_id, plan)
    taken = yield from _take_trailing(backend, thread_id, plan, rows, applied)
    for stored in plan.materialise:
        key = (stored.checkpoint_ns, stored.checkpoint_id)
        versions = dict(zip(stored.channels, stored.versions, strict=True))
        found = {c: (versions[c], value) for c, value in values.get(key, {}).items()}
        if found and not (yield from backend.store_values(thread_id, *key, found)):
            raise PlanChanged(f"checkpoint {key} changed before its values were stored")
        applied.materialised.append(key)
    changes = _parent_changes(plan, rows, applied)
    if changes and (yield from backend.set_parents(thread_id, changes)) != len(changes):
        raise PlanChanged("a checkpoint to re-parent changed")
    doomed = _judge_deletions(plan, rows, applied, taken)
    if doomed and (yield from backend.delete_rows(thread_id, doomed)) != len(doomed):
        raise PlanChanged("a checkpoint to delete changed")
    for d in applied.deleted:
        if _judged_again(d) and d.clone_of is not None:
            yield from backend.record_reclaimed(
                thread_id, d.checkpoint_ns, d.checkpoint_id, d.clone_of
            )
    if backend.stores_blobs and plan.freed_blobs and applied.deleted:
        freed = yield from backend.delete_unreferenced_blobs(thread_id, plan.freed_blobs)
        applied.freed_blobs.extend(freed)
    return applied


def _read_rows(backend: Backend, thread_id: str, plan: Plan) -> Op[_Rows]:
    """The rows of the duration links the plan grafts past or deletes, with the children
    of those it deletes; none for a plan without any."""
    named: dict[str, set[str]] = {}
    for graft in plan.grafts:
        if graft.reason is Reason.GRAFTED_DURATION_LINK:
            chain = [graft.child_id, *graft.via, graft.new_parent_id]
            named.setdefault(graft.checkpoint_ns, set()).update(chain)
    doomed: dict[str, set[str]] = {}
    for d in plan.deletions:
        if _judged_again(d) and d.clone_of is not None:
            named.setdefault(d.checkpoint_ns, set()).update([d.checkpoint_id, d.clone_of])
            doomed.setdefault(d.checkpoint_ns, set()).add(d.checkpoint_id)
    nodes: dict[NodeKey, CheckpointNode] = {}
    kids: dict[NodeKey, set[NodeKey]] = {}
    for ns, ids in sorted(named.items()):
        found = yield from backend.load_nodes(thread_id, ns, sorted(ids))
        nodes.update({(ns, i): n for i, n in found.items()})
        if ns in doomed:
            children = yield from backend.children_of(thread_id, ns, sorted(doomed[ns]))
            for parent_id, child_ids in children.items():
                kids[(ns, parent_id)] = {(ns, c) for c in child_ids}
    return _Rows(nodes, kids)


def _parent_changes(plan: Plan, rows: _Rows, applied: Applied) -> list[ParentChange]:
    """The grafts, then the roots, to carry out: a link's graft judged again on `rows`,
    each other one guarded by its statement."""
    changes: list[ParentChange] = []
    for graft in plan.grafts:
        ids = [graft.child_id, *graft.via, graft.new_parent_id]
        if graft.reason is Reason.GRAFTED_DURATION_LINK and not _rules.graft_holds(
            graft, rows.named(graft.checkpoint_ns, ids)
        ):
            continue
        changes.append((graft.checkpoint_ns, graft.child_id, graft.via[0], graft.new_parent_id))
        rows.reparent(graft.checkpoint_ns, graft.child_id, graft.via[0], graft.new_parent_id)
        applied.grafted.append(graft)
    for root in plan.roots:
        changes.append((root.checkpoint_ns, root.checkpoint_id, root.via[0], None))
        rows.reparent(root.checkpoint_ns, root.checkpoint_id, root.via[0], None)
        applied.rooted.append(root)
    return changes


def _take_trailing(
    backend: Backend, thread_id: str, plan: Plan, rows: _Rows, applied: Applied
) -> Op[set[NodeKey]]:
    """Judge and carry out, first and each on its own, the deletions that must leave their
    parent the head: they were planned on the rows as they were, before any value was
    stored at their parent. Answers the ones judged (taken or dropped)."""
    judged: set[NodeKey] = set()
    for deletion in plan.deletions:
        if not deletion.must_be_head:
            continue
        key = (deletion.checkpoint_ns, deletion.checkpoint_id)
        judged.add(key)
        holds = yield from backend.deletion_holds_now(thread_id, deletion)
        if holds and (yield from backend.delete_as_planned(thread_id, deletion)):
            rows.delete(key, deletion.parent_id)
            applied.deleted.append(deletion)
        else:
            applied.dropped.append(deletion)
    return judged


def _judge_deletions(
    plan: Plan, rows: _Rows, applied: Applied, taken: set[NodeKey]
) -> list[RowKey]:
    """The rows of the other deletions, children before parents: each guarded by its
    statement, a duplicate's judged again on `rows`."""
    doomed: list[RowKey] = []
    for deletion in plan.deletions:
        key = (deletion.checkpoint_ns, deletion.checkpoint_id)
        if key in taken:
            continue
        if not _judged_again(deletion) or _still_a_duplicate(deletion, rows):
            doomed.append((*key, deletion.parent_id, deletion.writes_consumed))
            rows.delete(key, deletion.parent_id)
            applied.deleted.append(deletion)
        else:
            applied.dropped.append(deletion)
    return doomed


def _still_a_duplicate(deletion: Deletion, rows: _Rows) -> bool:
    ids = [deletion.checkpoint_id] + ([deletion.clone_of] if deletion.clone_of else [])
    key = (deletion.checkpoint_ns, deletion.checkpoint_id)
    return _rules.deletion_holds(
        deletion,
        rows.named(deletion.checkpoint_ns, ids),
        has_children=bool(rows.kids.get(key)),
        newest_id=None,
    )
