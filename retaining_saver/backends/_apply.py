"""Carrying out a plan: one transaction, every step guarded by what it proved.

The rules judge (`_rules._recheck.PlanRecheck`); this reads the rows they
name and carries out what they answer. Most steps are guarded in the
statements that carry them out, a few bulk statements for the whole plan,
each guard clause naming the check it enforces (`_rules._checks`): a
re-parenting only changes a checkpoint that still has the parent the plan
proved (and whose new parent still exists); a deletion only removes a
checkpoint that still has its parent, has no child the plan does not delete
with it, and owns no writes unless the plan counts them consumed. A statement
that changes fewer rows than proven raises `PlanChanged`, which rolls the
whole transaction back: a pass is carried out whole or not at all, and the
next pass judges the thread again.

A duration link's graft and deletion need more than parent links (it must
still clone its parent, which must own no writes): their rows are read in the
transaction and judged by the rules again, as the plan's earlier steps change
them; what no longer holds is dropped. A deletion that must leave its parent
the head (a trailing duration leaf) is judged and carried out on its own,
first (before any value is stored at its parent, which it must clone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from retaining_saver._rules import BlobKey, CheckpointNode, Deletion, DeletionFacts, NodeKey, Plan
from retaining_saver._rules._recheck import Applied, ParentChange, PlanRecheck, RowKey
from retaining_saver.backends._ops import Op


class PlanStore(Protocol):
    """What carrying out a plan asks of a backend (`Backend` has all of it): named here so
    that this module needs no import of the backend it serves."""

    @property
    def stores_blobs(self) -> bool: ...

    def load_nodes(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, CheckpointNode]]: ...

    def children_of(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, set[str]]]: ...

    def deletion_facts(self, thread_id: str, deletion: Deletion) -> Op[DeletionFacts]: ...

    def delete_as_planned(self, thread_id: str, deletion: Deletion) -> Op[bool]: ...

    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]: ...

    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]: ...

    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]: ...

    def record_reclaimed(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, clone_id: str
    ) -> Op[None]: ...

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey], since: str = ""
    ) -> Op[list[BlobKey]]: ...


class PlanChanged(RuntimeError):
    """A statement of a plan found a row other than the plan proved: nothing is done."""


def apply_plan(
    backend: PlanStore,
    thread_id: str,
    plan: Plan,
    values: Mapping[NodeKey, Mapping[str, Any]],
) -> Op[Applied]:
    """Carry out `plan` (see the module docstring); `values`: each `Materialise`'s channel
    values, as computed before the transaction."""
    recheck = PlanRecheck(plan)
    for rows in recheck.rows_to_read():
        found = yield from backend.load_nodes(thread_id, rows.checkpoint_ns, rows.ids)
        children: dict[str, set[str]] = {}
        if rows.parents_of:
            children = yield from backend.children_of(
                thread_id, rows.checkpoint_ns, rows.parents_of
            )
        recheck.read(rows.checkpoint_ns, found, children)
    for deletion in recheck.stamps():
        facts = yield from backend.deletion_facts(thread_id, deletion)
        taken = recheck.holds(deletion, facts) and (
            yield from backend.delete_as_planned(thread_id, deletion)
        )
        recheck.carried_out(deletion, taken)
    applied = recheck.applied
    for stored in plan.materialise:
        key = (stored.checkpoint_ns, stored.checkpoint_id)
        versions = dict(zip(stored.channels, stored.versions, strict=True))
        found_values = {c: (versions[c], value) for c, value in values.get(key, {}).items()}
        if found_values and not (yield from backend.store_values(thread_id, *key, found_values)):
            raise PlanChanged(f"checkpoint {key} changed before its values were stored")
        applied.materialised.append(key)
    changes = recheck.parent_changes()
    if changes and (yield from backend.set_parents(thread_id, changes)) != len(changes):
        raise PlanChanged("a checkpoint to re-parent changed")
    doomed = recheck.doomed()
    if doomed and (yield from backend.delete_rows(thread_id, doomed)) != len(doomed):
        raise PlanChanged("a checkpoint to delete changed")
    for d in recheck.reclaimed():
        if d.clone_of is not None:
            yield from backend.record_reclaimed(
                thread_id, d.checkpoint_ns, d.checkpoint_id, d.clone_of
            )
    if backend.stores_blobs and plan.freed_blobs and applied.deleted:
        since = plan.window_start or ""
        freed = yield from backend.delete_unreferenced_blobs(thread_id, plan.freed_blobs, since)
        applied.freed_blobs.extend(freed)
    return applied
