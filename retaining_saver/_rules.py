"""The retention rules: which checkpoints of a thread may go, and why. No I/O.

Everything that decides a deletion lives here, as functions of a thread's
lineage. Backends load a `Lineage` and carry out the `Plan` made from it;
`RetainingSaver`'s admission cleanup asks `leaf_skip` about the head it read,
then `leaf_verdict` about the leaf and parent rows it read by primary key.
Nothing else decides. Backends only re-check, inside the deleting
transaction, the preconditions a `Deletion` names; Postgres does it in SQL
(`RECLAIM_LEAF_SQL`), asks `untaken_skip` why when it took nothing, and
tests/test_reclaim_guard.py holds that statement to `leaf_verdict`.

| Shape                        | Default   | Deleted when                                  |
|------------------------------|-----------|-----------------------------------------------|
| trailing duration-only leaf  | on (E1)   | head of its namespace, marker shape, clone of |
|                              |           | its parent, owns no writes                    |
| superseded sibling subtree   | opt-in    | whole subtree off the protected chain, forked |
| (E2)                         |           | off a present checkpoint, older than the TTL  |
| duration-only chain link     | opt-in    | clone of its parent, owns no writes; its      |
|                              | (graft)   | children are re-parented to its parent        |

| Protection             | Meaning                                                        |
|------------------------|----------------------------------------------------------------|
| head                   | latest checkpoint of a namespace, after its trailing leaves    |
| ancestor               | on the parent chain of a protected checkpoint                  |
| explicit               | named in `protect_checkpoint_ids`                              |
| pending-writes         | owns writes and has no child: live, uncommitted state          |
| subgraph-parent        | named as `parents[""]` by a checkpoint of another namespace    |
| duration-link          | duration-only checkpoint a later run forked from (no graft)    |
| link-on-writes         | duration link whose parent owns writes: a graft would put      |
|                        | them on its children's delta-history walk, changing its value  |
| too-young              | superseded subtree whose newest checkpoint is inside the TTL   |
| fork-point-missing     | off-chain subtree whose fork point row is missing: unproven    |
| not-enabled            | deletable shape whose rule the policy leaves off               |
| capped                 | deletable, deferred by `max_delete_per_run`                    |

A missing ancestor row ends a walk: it never raises, and whatever it cannot
prove unreachable stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from retaining_saver._lineage import (
    BlobKey,
    CheckpointNode,
    Deletion,
    Graft,
    LeafFacts,
    Lineage,
    NodeKey,
    Plan,
    Protection,
    Reason,
    Skip,
)
from retaining_saver._policy import LeafPredicate, RetentionPolicy

__all__ = [
    "MAX_STACKED_LEAVES",
    "RUN_HISTORY_KEYS",
    "BlobKey",
    "CheckpointNode",
    "Deletion",
    "Graft",
    "LeafFacts",
    "LeafPredicate",
    "Lineage",
    "NodeKey",
    "Plan",
    "Protection",
    "Reason",
    "RetentionPolicy",
    "Skip",
    "deletion_holds",
    "graft_holds",
    "has_marker",
    "is_clone",
    "is_duration_marker",
    "is_duration_metadata",
    "leaf_deletion",
    "leaf_skip",
    "leaf_verdict",
    "may_have_marker",
    "parent_skip",
    "plan_retention",
    "untaken_skip",
]

RUN_HISTORY_KEYS = ("run_durations", "run_message_ids")
MAX_STACKED_LEAVES = 3
"""How many stacked duration leaves one admission reclaims at the most."""


def is_duration_marker(node: CheckpointNode) -> bool:
    """The default marker rule: a metadata-only checkpoint a run-history writer stamped.

    It looks at shape alone, so it holds on every backend: `source == "update"`
    and a run-history key. Postgres drops `metadata["writes"]`, so the
    `runtime_run_duration` write marker is not required.
    """
    return is_duration_metadata(node.metadata)


def is_duration_metadata(metadata: Mapping[str, Any]) -> bool:
    """`is_duration_marker`, on a checkpoint's metadata alone."""
    return metadata.get("source") == "update" and any(k in metadata for k in RUN_HISTORY_KEYS)


def may_have_marker(metadata: Mapping[str, Any], policy: RetentionPolicy) -> bool:
    """False when no checkpoint with this metadata has the marker under `policy`.

    It needs no `CheckpointNode`, so a read can dismiss an ordinary head cheaply.
    """
    return policy.is_reclaimable_leaf is not None or is_duration_metadata(metadata)


def has_marker(node: CheckpointNode, policy: RetentionPolicy) -> bool:
    """Whether `node` has the metadata-only marker under `policy`."""
    rule = policy.is_reclaimable_leaf or is_duration_marker
    return bool(rule(node))


def is_clone(node: CheckpointNode, parent: CheckpointNode) -> bool:
    """Whether `node` holds exactly its parent's state, compared as whole maps."""
    return (
        node.parent_id == parent.checkpoint_id
        and node.checkpoint_ns == parent.checkpoint_ns
        and dict(node.channel_versions) == dict(parent.channel_versions)
        and dict(node.versions_seen) == dict(parent.versions_seen)
    )


def leaf_skip(
    node: CheckpointNode, policy: RetentionPolicy, protected: frozenset[str]
) -> Skip | None:
    """Why `node` cannot be a reclaimable leaf before its parent is known, else None."""
    if not has_marker(node, policy):
        return Skip.NOT_MARKED
    if node.checkpoint_id in protected or node.checkpoint_id in policy.protect_checkpoint_ids:
        return Skip.PROTECTED
    if node.write_count:
        return Skip.OWNS_WRITES
    return None


def leaf_deletion(node: CheckpointNode, reason: Reason, *, head: bool) -> Deletion:
    """The guarded deletion of a duration-only checkpoint that clones its parent."""
    return Deletion(
        node.checkpoint_ns,
        node.checkpoint_id,
        node.parent_id,
        reason,
        clone_of=node.parent_id,
        must_be_head=head,
    )


def parent_skip(leaf: CheckpointNode, parent: CheckpointNode | None) -> Skip | None:
    """Why `leaf` cannot go given its `parent` row (None if missing), else None."""
    if leaf.parent_id is None or parent is None:
        return Skip.MISSING_PARENT
    if not is_clone(leaf, parent):
        return Skip.NOT_A_CLONE
    return None


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
    """The deletion of the trailing leaf `facts` describes, or why there is none.

    A leaf goes when it is still a reclaimable leaf (`leaf_skip`), its parent
    exists and it clones it, and `deletion_holds`: it is the newest checkpoint
    of its namespace, its parent is the next newest, and nothing names it as
    parent.
    """
    leaf, parent = facts.leaf, facts.parent
    if leaf is None:
        return Skip.PRECONDITION_CHANGED
    if (skip := leaf_skip(leaf, policy, protected)) is not None:
        return skip
    skip = parent_skip(leaf, parent)
    if skip is not None or parent is None:  # parent_skip says MISSING_PARENT for None
        return skip or Skip.MISSING_PARENT
    deletion = leaf_deletion(leaf, Reason.TRAILING_DURATION_LEAF, head=True)
    holds = deletion_holds(
        deletion,
        {leaf.checkpoint_id: leaf, parent.checkpoint_id: parent},
        has_children=facts.has_children,
        newest_id=facts.newest_id,
        runner_up_id=facts.runner_up_id,
    )
    return deletion if holds else Skip.PRECONDITION_CHANGED


def plan_retention(lineage: Lineage, policy: RetentionPolicy, now: datetime) -> Plan:
    """Turn one thread's lineage into a plan under `policy`. Pure and total."""
    return _Planner(lineage, policy, now).plan()


class _Planner:
    def __init__(self, lineage: Lineage, policy: RetentionPolicy, now: datetime) -> None:
        self.lineage = lineage
        self.policy = policy
        self.now = _aware(now)
        self.children = lineage.children()
        self.kept: dict[NodeKey, Protection] = {}
        self.referenced = _subgraph_parents(lineage)
        # Namespaces where a protected chain runs into a missing row: any loose
        # checkpoint there may be an ancestor of that row, so none is superseded.
        self.broken_namespaces: set[str] = set()
        # Per namespace, the newest id a checkpoint names as parent but the load
        # did not find. Ids are time-ordered: only older checkpoints can parent it.
        self.newest_missing: dict[str, str] = {}
        for node in lineage.nodes.values():
            if node.parent_id is not None and lineage.parent(node) is None:
                ns = node.checkpoint_ns
                self.newest_missing[ns] = max(self.newest_missing.get(ns, ""), node.parent_id)

    def plan(self) -> Plan:
        units = self._trailing_stacks()
        self._protect_chains(set(_flatten(units)))
        links = self._links()
        # A link may also parent a superseded subtree, which must go first.
        units += self._superseded_subtrees(set(_flatten(units + links)))
        units += links
        deletions, deferred = _cap(units, self.policy.max_delete_per_run)
        for deletion in deferred:
            self.kept[(deletion.checkpoint_ns, deletion.checkpoint_id)] = Protection.CAPPED
        done = {(d.checkpoint_ns, d.checkpoint_id) for d in deletions}
        return Plan(
            deletions=tuple(deletions),
            grafts=tuple(self._grafts(done)),
            kept=dict(self.kept),
            deferred=tuple(deferred),
            heads=self.lineage.heads(),
            freed_blobs=_freed_blobs(self.lineage, done),
        )

    def _reclaimable(self, node: CheckpointNode) -> bool:
        key = (node.checkpoint_ns, node.checkpoint_id)
        if key in self.referenced or leaf_skip(node, self.policy, frozenset()) is not None:
            return False
        parent = self.lineage.parent(node)
        return parent is not None and is_clone(node, parent)

    def _trailing_stacks(self) -> list[list[Deletion]]:
        """Each namespace's run of newest checkpoints, each the clone child of the next.

        The parent must be the next newest, so that "latest" lands on it: a
        newer checkpoint on another branch would otherwise become the head.
        """
        units: list[list[Deletion]] = []
        for ns, newest_first in self._ids_newest_first().items():
            stack: list[Deletion] = []
            node = self.lineage.nodes[(ns, newest_first[0])]
            while (
                self.policy.trailing_duration_leaves
                and len(newest_first) > len(stack) + 1
                and node.parent_id == newest_first[len(stack) + 1]
                and self._reclaimable(node)
                and len(self._kids(node)) == (1 if stack else 0)
            ):
                stack.append(leaf_deletion(node, Reason.TRAILING_DURATION_LEAF, head=True))
                node = self.lineage.nodes[(ns, str(node.parent_id))]
            self.kept[(ns, node.checkpoint_id)] = Protection.HEAD
            if stack:
                units.append(stack)
        return units

    def _ids_newest_first(self) -> dict[str, list[str]]:
        by_ns: dict[str, list[str]] = {}
        for ns, checkpoint_id in self.lineage.nodes:
            by_ns.setdefault(ns, []).append(checkpoint_id)
        return {ns: sorted(ids, reverse=True) for ns, ids in by_ns.items()}

    def _kids(self, node: CheckpointNode) -> list[NodeKey]:
        return self.children.get((node.checkpoint_ns, node.checkpoint_id), [])

    def _protect_chains(self, deleted: set[NodeKey]) -> None:
        for key, node in self.lineage.nodes.items():
            if key in deleted:
                continue
            if node.checkpoint_id in self.policy.protect_checkpoint_ids:
                self.kept[key] = Protection.EXPLICIT
            elif key in self.referenced:
                self.kept[key] = Protection.SUBGRAPH_PARENT
            elif node.write_count and not self._kids(node):
                self.kept[key] = Protection.PENDING_WRITES
        for key in list(self.kept):
            node = self.lineage.nodes[key]
            parent = self.lineage.parent(node)
            while parent is not None:
                pkey = (parent.checkpoint_ns, parent.checkpoint_id)
                if pkey in self.kept:
                    break
                self.kept[pkey] = Protection.ANCESTOR
                node, parent = parent, self.lineage.parent(parent)
            if parent is None and node.parent_id is not None:
                self.broken_namespaces.add(node.checkpoint_ns)

    def _is_link(self, key: NodeKey) -> bool:
        if key[1] < self.newest_missing.get(key[0], ""):
            return False  # it may also parent a missing row: not proven childless elsewhere
        return self.kept.get(key) in (Protection.ANCESTOR, Protection.DURATION_LINK) and (
            self._reclaimable(self.lineage.nodes[key])
        )

    def _links(self) -> list[list[Deletion]]:
        links = sorted((k for k in self.kept if self._is_link(k)), reverse=True)
        on_writes = [k for k in links if not _graftable_onto(self._parent(k))]
        self.kept.update(dict.fromkeys(on_writes, Protection.LINK_ON_WRITES))
        links = [k for k in links if k not in on_writes]
        if not self.policy.graft_duration_links:
            self.kept.update(dict.fromkeys(links, Protection.DURATION_LINK))
            return []
        for key in links:
            del self.kept[key]
        nodes = (self.lineage.nodes[k] for k in links)
        return [[leaf_deletion(n, Reason.GRAFTED_DURATION_LINK, head=False)] for n in nodes]

    def _parent(self, key: NodeKey) -> CheckpointNode | None:
        return self.lineage.parent(self.lineage.nodes[key])

    def _grafts(self, done: set[NodeKey]) -> list[Graft]:
        """Re-parent each surviving child of a deleted link past every deleted link above it."""
        grafts: list[Graft] = []
        for key, node in self.lineage.nodes.items():
            via: list[str] = []
            parent = self.lineage.parent(node)
            while parent is not None and (parent.checkpoint_ns, parent.checkpoint_id) in done:
                if not self._reclaimable(parent):
                    break
                via.append(parent.checkpoint_id)
                parent = self.lineage.parent(parent)
            if key not in done and via and parent is not None:
                grafts.append(Graft(key[0], key[1], tuple(via), parent.checkpoint_id))
        return grafts

    def _superseded_subtrees(self, taken: set[NodeKey]) -> list[list[Deletion]]:
        loose = {k for k in self.lineage.nodes if k not in self.kept and k not in taken}
        roots = [k for k in loose if self._parent_key(k) not in loose]
        for root in roots:
            parent_key = self._parent_key(root)
            if parent_key is not None and parent_key not in self.lineage.nodes:
                # The missing row may hang below any other loose subtree here.
                self.broken_namespaces.add(root[0])
        subtrees = [(root, self._post_order(root, loose)) for root in roots]
        subtrees.sort(key=lambda pair: max(self.lineage.nodes[k].ts for k in pair[1]))
        units: list[list[Deletion]] = []
        for root, keys in subtrees:
            protection = self._subtree_protection(root, keys)
            if protection is not None:
                self.kept.update(dict.fromkeys(keys, protection))
                continue
            units.append([self._branch_deletion(self.lineage.nodes[k]) for k in keys])
        return units

    def _parent_key(self, key: NodeKey) -> NodeKey | None:
        parent_id = self.lineage.nodes[key].parent_id
        return None if parent_id is None else (key[0], parent_id)

    def _post_order(self, root: NodeKey, loose: set[NodeKey]) -> list[NodeKey]:
        order: list[NodeKey] = []
        stack: list[tuple[NodeKey, bool]] = [(root, False)]
        while stack:
            key, expanded = stack.pop()
            if expanded:
                order.append(key)
                continue
            stack.append((key, True))
            node = self.lineage.nodes[key]
            stack.extend((k, False) for k in self._kids(node) if k in loose)
        return order

    def _subtree_protection(self, root: NodeKey, keys: Sequence[NodeKey]) -> Protection | None:
        parent_key = self._parent_key(root)
        if (
            parent_key is None
            or parent_key not in self.lineage.nodes
            or root[0] in self.broken_namespaces
        ):
            return Protection.FORK_POINT_MISSING
        if not self.policy.prune_leaf_sibling_branches:
            return Protection.NOT_ENABLED
        min_age = self.policy.sibling_branch_min_age
        if min_age is not None:
            stamps = [_parse_ts(self.lineage.nodes[k].ts) for k in keys]
            if None in stamps or self.now - max(t for t in stamps if t) < min_age:
                return Protection.TOO_YOUNG
        return None

    def _branch_deletion(self, node: CheckpointNode) -> Deletion:
        return Deletion(
            node.checkpoint_ns,
            node.checkpoint_id,
            node.parent_id,
            Reason.SUPERSEDED_BRANCH,
            writes_consumed=node.write_count > 0,
        )


def _subgraph_parents(lineage: Lineage) -> set[NodeKey]:
    """Checkpoints another namespace's checkpoints name in `metadata["parents"]`."""
    found: set[NodeKey] = set()
    for node in lineage.nodes.values():
        parents = node.metadata.get("parents")
        if isinstance(parents, Mapping):
            found.update(
                (ns, cid)
                for ns, cid in parents.items()
                if isinstance(cid, str) and ns != node.checkpoint_ns
            )
    return found


def _flatten(units: Iterable[Sequence[Deletion]]) -> Iterable[NodeKey]:
    return ((d.checkpoint_ns, d.checkpoint_id) for unit in units for d in unit)


def _cap(
    units: Sequence[Sequence[Deletion]], cap: int | None
) -> tuple[list[Deletion], list[Deletion]]:
    """Take whole units, then a prefix of the next: every prefix keeps children first."""
    ordered = [d for unit in units for d in unit]
    if cap is None:
        return ordered, []
    return ordered[:cap], ordered[cap:]


def _freed_blobs(lineage: Lineage, deleted: set[NodeKey]) -> tuple[BlobKey, ...]:
    def versions(keys: Iterable[NodeKey]) -> set[BlobKey]:
        return {
            (ns, channel, version)
            for ns, cid in keys
            for channel, version in lineage.nodes[(ns, cid)].channel_versions.items()
        }

    survivors = (k for k in lineage.nodes if k not in deleted)
    return tuple(sorted(versions(deleted) - versions(survivors), key=repr))


def _parse_ts(ts: str) -> datetime | None:
    try:
        return _aware(datetime.fromisoformat(ts))
    except (TypeError, ValueError):
        return None


def _aware(moment: datetime) -> datetime:
    """Naive times are taken as UTC, which is what LangGraph writes."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def deletion_holds(
    deletion: Deletion,
    now: Mapping[str, CheckpointNode],
    *,
    has_children: bool,
    newest_id: str | None,
    runner_up_id: str | None = None,
) -> bool:
    """Whether what `deletion` was proven against still holds, as read in its transaction.

    Args:
        deletion: The planned deletion.
        now: The rows of the checkpoint and of `clone_of`, by id, as they are now.
        has_children: Whether any checkpoint still names it as parent.
        newest_id: The newest id in its namespace, read when `must_be_head`.
        runner_up_id: The newest id below it, read when `must_be_head`: it must
            be `clone_of`, so that removing the head makes its parent the latest.
    """
    node = now.get(deletion.checkpoint_id)
    if node is None or node.parent_id != deletion.parent_id or has_children:
        return False
    if node.write_count and not deletion.writes_consumed:
        return False
    if deletion.must_be_head and (
        newest_id != deletion.checkpoint_id or runner_up_id != deletion.clone_of
    ):
        return False
    if deletion.clone_of is not None:
        parent = now.get(deletion.clone_of)
        return parent is not None and is_clone(node, parent)
    return True


def _graftable_onto(parent: CheckpointNode | None) -> bool:
    """Whether a link's children may be re-parented onto `parent`.

    A delta channel's value at a child is rebuilt by walking up from its
    parent, collecting writes down to the nearest stored value, the seed's own
    writes included. A link clones its parent and owns no writes; grafting
    past it changes the walk only by the writes of the new parent, should the
    link have been the seed. So the new parent must own none.
    """
    return parent is not None and not parent.write_count


def graft_holds(graft: Graft, now: Mapping[str, CheckpointNode]) -> bool:
    """Whether `graft` is still sound: every link it skips clones its parent and owns no
    writes, and the new parent owns none (`_graftable_onto`)."""
    child = now.get(graft.child_id)
    if child is None or child.parent_id != graft.via[0]:
        return False
    if not _graftable_onto(now.get(graft.new_parent_id)):
        return False
    for link_id, parent_id in zip(graft.via, (*graft.via[1:], graft.new_parent_id), strict=True):
        link, parent = now.get(link_id), now.get(parent_id)
        if link is None or parent is None or link.write_count or not is_clone(link, parent):
            return False
    return True
