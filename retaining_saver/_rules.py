"""The retention rules: which checkpoints of a thread may go, and why. No I/O.

Everything that decides a deletion lives here, as functions of a thread's
lineage. Backends load a `Lineage` and carry out the `Plan` made from it;
`RetainingSaver`'s admission cleanup asks `leaf_skip` about the head it read,
then `leaf_verdict` about the leaf and parent rows it read by primary key.
Nothing else decides. Backends only re-check, inside the deleting
transaction, the preconditions a `Deletion` names. Postgres also judges a
trailing leaf inside the statement that reads the head (`ADMIT_AND_READ_SQL`),
by this module's marker bound as data (`MarkerShape`), and in the one that
takes a leaf judged here (`RECLAIM_LEAF_SQL`, asking `untaken_skip` why when
it took nothing); tests/test_reclaim_guard.py holds both to `leaf_verdict`.

| Shape                        | Default   | Deleted when                                  |
|------------------------------|-----------|-----------------------------------------------|
| trailing duration-only leaf  | on (E1)   | head of its namespace, marker shape, clone of |
|                              |           | its parent, owns no writes                    |
| superseded sibling subtree   | opt-in    | whole subtree off the protected chain, forked |
| (E2)                         |           | off a present checkpoint, older than the TTL  |
| duration-only chain link     | opt-in    | clone of its parent, owns no writes; its      |
|                              | (graft)   | children are re-parented to its parent        |
| beyond the history horizon   | opt-in    | on the root namespace's head line, older than |
|                              | (root,    | its newest `history_keep_runs` runs (0: older |
|                              | graft)    | than the head), or in a branch forked there;  |
|                              |           | under `keep_latest`, every checkpoint of a    |
|                              |           | namespace but its head; a subgraph checkpoint |
|                              |           | whose root checkpoint goes (below). Older     |
|                              |           | than `history_min_age`. The oldest kept       |
|                              |           | checkpoint becomes a root (parent None)       |
| compacted super-step         | opt-in    | a `loop` checkpoint of a head-line run        |
|                              | (graft)   | strictly between the run's first and last     |
|                              |           | `loop` checkpoint; older than                 |
|                              |           | `history_min_age`; the next kept checkpoint   |
|                              |           | is re-parented onto the previous kept one     |

A run is the checkpoints of a line from a `source == "input"` checkpoint up to
the last before the next input checkpoint (what precedes the first input is a
run of its own).

Subgraph namespaces go with the root's runs: a subgraph checkpoint names the
root checkpoint it was written under (`parents[""]`) and goes when that one
goes, and only then. A subgraph call's namespace (`node:task_id`) goes whole
or stays; a `checkpointer=True` subgraph's (no task id) keeps its head, the
subgraph's memory. A namespace that does not name its roots is left alone
(under `keep_latest`, it keeps its latest). Only subgraph checkpoints that
stay whatever the runs do (a head, a protection) keep the root checkpoints
they name (`subgraph-parent`); `keep_latest`, as upstream's prune, keeps none.

DeltaChannels (named in `counters_since_delta_snapshot` metadata) rebuild a
value from ancestors' writes back to the nearest checkpoint that stores it
(`_walk`). No rule cuts such a walk of a checkpoint it keeps: the walk stays
(`delta-history`), or, at a root the history rules make in the root
namespace and for the channels `RetentionPolicy.delta_graph` declares, the
value is stored whole there first (`Plan.materialise`). A thread marked by
LangGraph.js (`delta_writes_versioned`, channels unnamed) keeps all of it.

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
| capped                 | deletable, deferred by `max_delete_per_run`; a history unit    |
|                        | (a removed stretch with its graft or root, and the subgraph    |
|                        | checkpoints that go with it) is deferred whole                 |
| parent-of-young        | parent of a checkpoint inside `history_min_age`: a young       |
|                        | checkpoint's parent link is never rewritten                    |
| delta-history          | on a kept checkpoint's walk back to a delta channel's stored   |
|                        | value: the value there is rebuilt from its writes              |
| fork-point             | super-step with several children: branches keep their base     |
| keep-step              | super-step the policy's `keep_step` keeps                      |
| live-run               | super-step of the head's run while the head owns writes        |

Under the history rules, too-young also names a checkpoint younger than
`history_min_age`, explicit keeps its whole ancestor chain, and any kept
checkpoint off the head line keeps its chain down to the line (a branch stays
a branch). Pending-writes and subgraph-parent keep the checkpoint itself,
which a graft or root may then re-parent.

A missing ancestor row ends a walk: it never raises, and whatever it cannot
prove unreachable stays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from retaining_saver._lineage import (
    BlobKey,
    CheckpointNode,
    Deletion,
    Graft,
    LeafFacts,
    Lineage,
    Materialise,
    NodeKey,
    Plan,
    Protection,
    Reason,
    Root,
    Skip,
)
from retaining_saver._policy import LeafPredicate, RetentionPolicy

__all__ = [
    "DELTA_METADATA_KEY",
    "DURATION_MARKER",
    "MAX_STACKED_LEAVES",
    "RUN_HISTORY_KEYS",
    "BlobKey",
    "CheckpointNode",
    "Deletion",
    "Graft",
    "LeafFacts",
    "LeafPredicate",
    "Lineage",
    "MarkerShape",
    "NodeKey",
    "Plan",
    "Protection",
    "Reason",
    "RetentionPolicy",
    "Root",
    "Skip",
    "compactable_steps",
    "deletion_holds",
    "graft_holds",
    "has_marker",
    "is_clone",
    "is_duration_marker",
    "is_duration_metadata",
    "leaf_deletion",
    "leaf_skip",
    "leaf_verdict",
    "marker_shape",
    "may_have_marker",
    "parent_skip",
    "plan_retention",
    "root_holds",
    "split_runs",
    "untaken_skip",
    "uses_delta_channels",
]

RUN_HISTORY_KEYS = ("run_durations", "run_message_ids")
MAX_STACKED_LEAVES = 3
"""How many stacked duration leaves one admission reclaims at the most."""
DELTA_METADATA_KEY = "counters_since_delta_snapshot"
"""The metadata key LangGraph writes on checkpoints of a graph with a DeltaChannel."""
DELTA_UNNAMED_KEY = "delta_writes_versioned"
"""The metadata key LangGraph.js marks a DeltaChannel graph's threads with, without
naming its channels: such a thread keeps all its history."""
ROOT_NAMESPACE = ""


def is_duration_marker(node: CheckpointNode) -> bool:
    """The default marker rule: a metadata-only checkpoint a run-history writer stamped.

    It looks at shape alone, so it holds on every backend: `source == "update"`
    and a run-history key. Postgres drops `metadata["writes"]`, so the
    `runtime_run_duration` write marker is not required.
    """
    return is_duration_metadata(node.metadata)


def is_duration_metadata(metadata: Mapping[str, Any]) -> bool:
    """`is_duration_marker`, on a checkpoint's metadata alone."""
    return DURATION_MARKER.matches(metadata)


@dataclass(frozen=True, slots=True)
class MarkerShape:
    """A marker rule stated as data, so that a store can test it inside a statement.

    Metadata has the marker when its `source` is `source` and it has one of
    `keys` at its top level. A backend that judges a leaf in SQL binds these
    values, never its own copy of them; tests/test_reclaim_guard.py holds the
    statements to `leaf_verdict`.
    """

    source: str
    keys: tuple[str, ...]

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return metadata.get("source") == self.source and any(k in metadata for k in self.keys)


DURATION_MARKER = MarkerShape("update", RUN_HISTORY_KEYS)
"""The default marker: what a run-history writer stamps (see `is_duration_marker`)."""


def marker_shape(policy: RetentionPolicy) -> MarkerShape | None:
    """The policy's marker as data; None when an app's own predicate replaces it."""
    return DURATION_MARKER if policy.is_reclaimable_leaf is None else None


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
    """Whether `node` holds exactly its parent's state, compared as whole maps, with the
    same values stored (a delta walk through either stops at the same place)."""
    return (
        node.parent_id == parent.checkpoint_id
        and node.checkpoint_ns == parent.checkpoint_ns
        and dict(node.channel_versions) == dict(parent.channel_versions)
        and dict(node.versions_seen) == dict(parent.versions_seen)
        and (node.stored or frozenset()) == (parent.stored or frozenset())
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
        self.history_scope: set[NodeKey] = set()
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
        history = _History(self, set(_flatten(units)))
        links = self._links()
        # A link may also parent a superseded subtree, which must go first.
        taken = set(_flatten(units + links)) | history.removed
        units += self._superseded_subtrees(taken)
        units += links
        deletions, deferred = _cap(units, self.policy.max_delete_per_run)
        # History units come last: their stretches parent no other rule's deletions.
        taken_units, deferred_units = history.capped(self._room_left(len(deletions)))
        deletions += [d for unit in taken_units for d in unit.deletions]
        deferred += [d for unit in deferred_units for d in unit.deletions]
        for deletion in deferred:
            self.kept[(deletion.checkpoint_ns, deletion.checkpoint_id)] = Protection.CAPPED
        done = {(d.checkpoint_ns, d.checkpoint_id) for d in deletions}
        roots = tuple(r for u in taken_units for r in u.roots)
        return Plan(
            deletions=tuple(deletions),
            grafts=tuple(self._grafts(done, history.scope))
            + tuple(g for u in taken_units for g in u.grafts),
            kept=dict(self.kept),
            deferred=tuple(deferred),
            heads=self.lineage.heads(),
            freed_blobs=_freed_blobs(self.lineage, done),
            roots=roots,
            materialise=tuple(
                Materialise(r.checkpoint_ns, r.checkpoint_id, channels, self._versions(r, channels))
                for r in roots
                if (channels := history.materialise.get((r.checkpoint_ns, r.checkpoint_id)))
            ),
        )

    def _versions(self, root: Root, channels: Sequence[str]) -> tuple[str, ...]:
        versions = self.lineage.nodes[(root.checkpoint_ns, root.checkpoint_id)].channel_versions
        return tuple(str(versions[c]) for c in channels)

    def _room_left(self, planned: int) -> int | None:
        cap = self.policy.max_delete_per_run
        return None if cap is None else max(cap - planned, 0)

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
        # The history rules own the head line: a link there is theirs to keep or remove.
        links = sorted(
            (k for k in self.kept if k not in self.history_scope and self._is_link(k)),
            reverse=True,
        )
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

    def _grafts(self, done: set[NodeKey], history_scope: set[NodeKey]) -> list[Graft]:
        """Re-parent each surviving child of a deleted link past every deleted link above it.

        The history rules graft inside their own scope themselves.
        """
        grafts: list[Graft] = []
        for key, node in self.lineage.nodes.items():
            if key in history_scope:
                continue
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


@dataclass
class _HistoryUnit:
    """What a history rule removes in one piece: a stretch with the graft or root that
    closes the gap, or a branch; and the subgraph checkpoints that go with them.

    `deletions` run children first: the branches forked inside a stretch, then
    the stretch itself from the kept child's side up.
    """

    deletions: list[Deletion]
    grafts: list[Graft] = field(default_factory=list)
    roots: list[Root] = field(default_factory=list)

    def absorb(self, other: _HistoryUnit) -> None:
        self.deletions += other.deletions
        self.grafts += other.grafts
        self.roots += other.roots


class _History:
    """The history rules (horizon, step compaction, keep_latest) over each namespace.

    Planned once, on construction: `removed` is what the rules delete, `scope`
    every checkpoint they judged, `materialise` the delta values stored whole
    at new roots. The planner's `kept` is updated in place.

    The root namespace is judged by its runs (horizon, compaction), or keeps
    only its head (keep_latest). A subgraph namespace whose checkpoints all
    name their root checkpoint (`parents[""]`) goes with the root's runs: a
    checkpoint goes when its root checkpoint goes, except the head of a
    persistent namespace (a `checkpointer=True` subgraph's memory, with no
    task id in its name), and it stays when its root checkpoint stays. Under
    keep_latest every namespace keeps only its head instead; otherwise a
    namespace that does not name its roots is left alone. A namespace with a
    missing row is left alone: nothing there is proven.
    """

    def __init__(self, planner: _Planner, taken: set[NodeKey]) -> None:
        self.planner = planner
        self.lineage, self.policy = planner.lineage, planner.policy
        self.kept = planner.kept
        self.taken = taken
        self.scope: set[NodeKey] = set()
        self.removed: set[NodeKey] = set()
        self.units: list[_HistoryUnit] = []
        self.materialise: dict[NodeKey, tuple[str, ...]] = {}
        self.delta = delta_channels(self.lineage)
        self.unnamed_delta = any(
            DELTA_UNNAMED_KEY in n.metadata for n in self.lineage.nodes.values()
        )
        # Root checkpoints a kept subgraph checkpoint names: kept as its parent. Under
        # keep_latest none are, as upstream's prune keeps none.
        self.named_parents: set[NodeKey] = (
            set() if self.policy.keep_latest else set(planner.referenced)
        )
        if self.policy.history_rules:
            self._plan_all()
        planner.history_scope = self.scope

    def _plan_all(self) -> None:
        heads = self._heads()
        others = sorted(ns for ns in heads if ns != ROOT_NAMESPACE)
        if self.policy.keep_latest:
            if ROOT_NAMESPACE in heads:
                self._plan(heads[ROOT_NAMESPACE], self._all_but_head)
            for ns in others:
                gone = not _is_persistent(ns) and self._names_its_roots(ns)
                self._plan(heads[ns], self._with_root_runs if gone else self._all_but_head)
            return
        rooted = [ns for ns in others if self._names_its_roots(ns)]
        # Only the subgraph checkpoints that stay whatever the root's runs do keep theirs:
        # in a namespace left alone, all of them.
        subgraphs = {k[0] for k in self.lineage.nodes} - {ROOT_NAMESPACE}
        self.named_parents = {
            parent
            for ns in sorted(subgraphs)
            for key in (self._sticky(ns, heads[ns]) if ns in rooted else self._in_ns(ns))
            for parent in _parents_named(self.lineage.nodes[key])
        }
        if ROOT_NAMESPACE in heads:
            self._plan(heads[ROOT_NAMESPACE], self._by_runs)
        root_units = self.units
        for ns in rooted:
            self.units = []
            self._plan(heads[ns], self._with_root_runs)
            for unit in self.units:
                root_units = self._tied(root_units, unit)
        self.units = root_units

    def _heads(self) -> dict[str, NodeKey]:
        """Each namespace's head as `_trailing_stacks` left it, where no row is missing."""
        heads: dict[str, NodeKey] = {}
        for key in self.lineage.nodes:
            if key not in self.taken and key > heads.get(key[0], ("", "")):
                heads[key[0]] = key
        return {ns: k for ns, k in heads.items() if ns not in self.planner.newest_missing}

    def _in_ns(self, ns: str) -> list[NodeKey]:
        return [k for k in self.lineage.nodes if k[0] == ns]

    def _names_its_roots(self, ns: str) -> bool:
        """Whether every checkpoint of `ns` names its root checkpoint; in a task's
        namespace, all the same one (the checkpoint the task ran from)."""
        roots = {_root_of(self.lineage.nodes[k]) for k in self._in_ns(ns)}
        return None not in roots and (_is_persistent(ns) or len(roots) == 1)

    # Candidates for removal in the namespace being planned, by key

    def _all_but_head(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        return dict.fromkeys(self.ns_scope - {head}, Reason.BEYOND_HORIZON)

    def _by_runs(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        runs = split_runs([self.lineage.nodes[k] for k in line])
        removal: dict[NodeKey, Reason] = {}
        if self.policy.history_keep_runs is not None:
            removal.update(dict.fromkeys(self._beyond_horizon(runs), Reason.BEYOND_HORIZON))
        if self.policy.compact_steps:
            for key in self._compacted_steps(runs, head):
                removal.setdefault(key, Reason.COMPACTED_STEP)
        return removal

    def _with_root_runs(self, head: NodeKey, line: Sequence[NodeKey]) -> dict[NodeKey, Reason]:
        spare = {head} if _is_persistent(head[0]) else set()
        removal = {
            key: Reason.BEYOND_HORIZON
            for key in self.ns_scope - spare
            if (ROOT_NAMESPACE, _root_of(self.lineage.nodes[key])) in self.removed
        }
        if spare or len(removal) == len(self.ns_scope):
            return removal
        # A task's namespace holds that task's state alone: it goes whole, or it stays
        # (under keep_latest, as its latest checkpoint).
        return self._all_but_head(head, line) if self.policy.keep_latest else {}

    def _sticky(self, ns: str, head: NodeKey) -> set[NodeKey]:
        """What of a rooted subgraph namespace stays whatever its root checkpoints do."""
        self._enter(head)
        spare = {head} if _is_persistent(ns) else set()
        everything = dict.fromkeys(self.ns_scope, Reason.BEYOND_HORIZON)
        kept = set(self._rescued(everything)) | spare
        walked, _ = self._walks(kept, {k: r for k, r in everything.items() if k not in kept}, [])
        return kept | walked.keys()

    # Planning one namespace

    def _enter(self, head: NodeKey) -> list[NodeKey]:
        line = self._line(head)
        self.on_line = set(line)
        self.ns_scope = self._descendants(line)
        return line

    def _plan(self, head: NodeKey, candidates: Callable[..., dict[NodeKey, Reason]]) -> None:
        line = self._enter(head)
        self.scope |= self.ns_scope
        self.spared: dict[NodeKey, Protection] = {}
        removal = candidates(head, line)
        rescued = self._rescued(removal)
        rescued.update({k: p for k, p in self.spared.items() if k not in removal})
        if self.unnamed_delta:
            rescued.update(dict.fromkeys(removal, Protection.DELTA_HISTORY))
        removed = {k: r for k, r in removal.items() if k not in rescued}
        if self.delta:
            walked, materialise = self._walks(self.ns_scope - removed.keys(), removed, line)
            rescued.update(walked)
            removed = {k: r for k, r in removed.items() if k not in walked}
            self.materialise.update(materialise)
        if removed and line[-1] in removed and len(removed) < len(self.ns_scope):
            removed = {}  # a task's namespace, part of which a protection keeps: all stays
        for key, protection in rescued.items():
            if self.kept.get(key) in (None, Protection.ANCESTOR):
                self.kept[key] = protection
        for key in removed:
            self.kept.pop(key, None)
        self.removed |= removed.keys()
        self.units += self._units(line, removed)

    def _line(self, head: NodeKey) -> list[NodeKey]:
        """The head's chain, root first (it ends at a root: no row is missing)."""
        chain = [head]
        parent = self.lineage.parent(self.lineage.nodes[head])
        while parent is not None:
            chain.append((parent.checkpoint_ns, parent.checkpoint_id))
            parent = self.lineage.parent(parent)
        return chain[::-1]

    def _descendants(self, tops: Iterable[NodeKey]) -> set[NodeKey]:
        found: set[NodeKey] = set()
        todo = [k for k in tops if k not in self.taken]
        while todo:
            key = todo.pop()
            if key not in found:
                found.add(key)
                todo += [k for k in self.planner.children.get(key, []) if k not in self.taken]
        return found

    def _beyond_horizon(self, runs: Sequence[Sequence[CheckpointNode]]) -> set[NodeKey]:
        keep = self.policy.history_keep_runs or 0
        newest = [runs[-1][-1]] if keep == 0 else [n for run in runs[-keep:] for n in run]
        return self.ns_scope - self._descendants((n.checkpoint_ns, n.checkpoint_id) for n in newest)

    def _compacted_steps(
        self, runs: Sequence[Sequence[CheckpointNode]], head: NodeKey
    ) -> Iterable[NodeKey]:
        live = self.lineage.nodes[head].write_count > 0
        keep_step = self.policy.keep_step
        for run in runs:
            for node in compactable_steps(run):
                key = (node.checkpoint_ns, node.checkpoint_id)
                if live and run is runs[-1]:
                    self.spared[key] = Protection.LIVE_RUN
                elif len(self.planner.children.get(key, [])) > 1:
                    self.spared[key] = Protection.FORK_POINT
                elif keep_step is not None and keep_step(node):
                    self.spared[key] = Protection.KEEP_STEP
                else:
                    yield key

    def _rescued(self, removal: Mapping[NodeKey, Reason]) -> dict[NodeKey, Protection]:
        """What the protections keep of `removal`, each with the protection that keeps it."""
        rescued: dict[NodeKey, Protection] = {}

        def keep(key: NodeKey | None, protection: Protection, *, to_root: bool = False) -> None:
            while key is not None and key in self.lineage.nodes:
                if key in removal:
                    rescued.setdefault(key, protection)
                if not to_root and key in self.on_line:
                    return
                protection, key = Protection.ANCESTOR, self.planner._parent_key(key)

        for key in sorted(self.ns_scope):
            node = self.lineage.nodes[key]
            if node.checkpoint_id in self.policy.protect_checkpoint_ids:
                keep(key, Protection.EXPLICIT, to_root=True)
            if key in self.named_parents:
                keep(key, Protection.SUBGRAPH_PARENT)
            if node.write_count and not self.planner._kids(node):
                keep(key, Protection.PENDING_WRITES)
            if self._young(node):
                keep(key, Protection.TOO_YOUNG)
                keep(self.planner._parent_key(key), Protection.YOUNG_PARENT)
        return rescued

    def _walks(
        self,
        kept: Iterable[NodeKey],
        removed: Mapping[NodeKey, Any],
        line: Sequence[NodeKey],
    ) -> tuple[dict[NodeKey, Protection], dict[NodeKey, tuple[str, ...]]]:
        """What of `removed` a kept checkpoint's delta value is rebuilt from, to keep; and
        what to materialise instead, at the root a pass makes.

        A delta channel's value at a checkpoint it does not store is its nearest
        storing ancestor's value plus every writes row on the way (`_walk`). A
        kept checkpoint's walks must stay whole, unless its value is stored
        there first: at the new root of the root namespace, for the channels
        `delta_graph` declares.
        """
        materialise: dict[NodeKey, tuple[str, ...]] = {}
        root = self._new_root(line, removed)
        if root is not None:
            needed = self._unstored(self.lineage.nodes[root])
            if needed and set(needed) <= self.policy.materializable:
                materialise[root] = tuple(sorted(needed))
        walked: dict[NodeKey, Protection] = {}
        todo = list(kept)
        while todo:
            key = todo.pop()
            node = self.lineage.nodes[key]
            for channel in self._unstored(node):
                if channel in materialise.get(key, ()):
                    continue
                for step in _walk(self.lineage, node, channel, materialise):
                    if step in removed and step not in walked:
                        walked[step] = Protection.DELTA_HISTORY
                        todo.append(step)
        still = {k: r for k, r in removed.items() if k not in walked}
        if root is not None and root in materialise and self._new_root(line, still) != root:
            del materialise[root]  # walks for other channels kept what is above it
        return walked, materialise

    def _new_root(self, line: Sequence[NodeKey], removed: Mapping[NodeKey, Any]) -> NodeKey | None:
        """The oldest kept checkpoint of the root namespace's line, if the pass removes
        what is above it."""
        if not line or line[0] not in removed or line[0][0] != ROOT_NAMESPACE:
            return None
        return next((k for k in line if k not in removed), None)

    def _unstored(self, node: CheckpointNode) -> list[str]:
        """The delta channels `node` has a version of but does not store."""
        stored = node.stored or frozenset()
        return [c for c in sorted(self.delta) if c in node.channel_versions and c not in stored]

    def _young(self, node: CheckpointNode) -> bool:
        """Inside `history_min_age`, or of unknown age."""
        stamp = _parse_ts(node.ts)
        min_age = self.policy.history_min_age or timedelta(0)
        return stamp is None or self.planner.now - stamp < min_age

    def _units(
        self, line: Sequence[NodeKey], removed: Mapping[NodeKey, Reason]
    ) -> list[_HistoryUnit]:
        """Each removed stretch of the line with its graft or root; then lone removed branches.

        A namespace removed whole (its head too) is one unit, children first.
        """
        if line[-1] in removed:
            return [_HistoryUnit(self._branch(line[0], removed))]
        units: list[_HistoryUnit] = []
        below, stretch = line[-1], list[NodeKey]()
        for key in reversed(line[:-1]):
            if key in removed:
                stretch.append(key)
                continue
            if stretch:
                units.append(self._stretch(below, stretch, key, removed))
            below, stretch = key, []
        if stretch:
            units.append(self._stretch(below, stretch, None, removed))
        for top in sorted(
            k
            for k in removed
            if k not in self.on_line and self.planner._parent_key(k) not in removed
        ):
            units.append(_HistoryUnit(self._branch(top, removed)))
        return units

    def _stretch(
        self,
        child: NodeKey,
        stretch: Sequence[NodeKey],
        above: NodeKey | None,
        removed: Mapping[NodeKey, Reason],
    ) -> _HistoryUnit:
        branches = [
            d
            for key in stretch
            for kid in self.planner.children.get(key, [])
            if kid not in self.on_line
            for d in self._branch(kid, removed)
        ]
        line = [self._deletion(k, removed[k]) for k in stretch]
        reasons = {removed[k] for k in stretch}
        reason = (
            Reason.COMPACTED_STEP if reasons == {Reason.COMPACTED_STEP} else Reason.BEYOND_HORIZON
        )
        via = tuple(k[1] for k in stretch)
        if above is None:
            return _HistoryUnit(branches + line, roots=[Root(child[0], child[1], via, reason)])
        graft = Graft(child[0], child[1], via, above[1], reason)
        return _HistoryUnit(branches + line, grafts=[graft])

    def _branch(self, top: NodeKey, removed: Mapping[NodeKey, Reason]) -> list[Deletion]:
        order = self.planner._post_order(top, set(removed))
        return [self._deletion(k, removed[k]) for k in order]

    def _deletion(self, key: NodeKey, reason: Reason) -> Deletion:
        node = self.lineage.nodes[key]
        # Their writes were consumed: the next checkpoint already holds what they wrote.
        return Deletion(
            key[0], key[1], node.parent_id, reason, writes_consumed=node.write_count > 0
        )

    def _tied(self, units: list[_HistoryUnit], unit: _HistoryUnit) -> list[_HistoryUnit]:
        """`units`, with a subgraph namespace's `unit` and every unit removing the root
        checkpoints its checkpoints were written under made one: capped, they go
        together or wait together."""
        nodes = self.lineage.nodes
        roots = {_root_of(nodes[(d.checkpoint_ns, d.checkpoint_id)]) for d in unit.deletions}
        ties = [u for u in units if any(d.checkpoint_id in roots for d in u.deletions)]
        merged = _HistoryUnit([])
        for tie in [*ties, unit]:
            merged.absorb(tie)
        rest = [u for u in units if all(u is not t for t in ties)]
        at = min((i for i, u in enumerate(units) if any(u is t for t in ties)), default=len(units))
        before = sum(1 for u in units[:at] if all(u is not t for t in ties))
        return [*rest[:before], merged, *rest[before:]]

    def capped(self, room: int | None) -> tuple[list[_HistoryUnit], list[_HistoryUnit]]:
        """The units that fit in `room` deletions, taken whole, and the ones deferred.

        After the first unit that does not fit, every later one waits too: a
        subgraph namespace's units follow the root's, and must not go while the
        root checkpoints they belong to stay.
        """
        fitting = len(self.units)
        for index, unit in enumerate(self.units):
            if room is not None and len(unit.deletions) > room:
                fitting = index
                break
            if room is not None:
                room -= len(unit.deletions)
        return self.units[:fitting], self.units[fitting:]


def uses_delta_channels(lineage: Lineage) -> bool:
    """Whether the thread's graph has a DeltaChannel, told from checkpoint metadata."""
    return bool(delta_channels(lineage))


def delta_channels(lineage: Lineage) -> frozenset[str]:
    """The thread's DeltaChannels, told from checkpoint metadata.

    LangGraph writes `counters_since_delta_snapshot` (by channel) on the
    checkpoints of such a graph; not on every one (a snapshot resets it), so
    any one of them tells. A channel stored at every step is never named, and
    needs no walk.
    """
    found: set[str] = set()
    for node in lineage.nodes.values():
        counters = node.metadata.get(DELTA_METADATA_KEY)
        if isinstance(counters, Mapping):
            found.update(str(channel) for channel in counters)
    return frozenset(found)


def _walk(
    lineage: Lineage,
    node: CheckpointNode,
    channel: str,
    materialise: Mapping[NodeKey, Sequence[str]],
) -> Iterator[NodeKey]:
    """The checkpoints whose rows rebuild `channel`'s value at `node`, nearest first.

    LangGraph collects the writes of each ancestor from the parent up, and
    stops at the first that stores the value (its seed, included). An
    ancestor with no version of the channel ends the walk too (included: its
    writes may be the ones that created it): nothing above wrote it. A value
    `materialise` stores counts as stored.
    """
    parent = lineage.parent(node)
    while parent is not None:
        key = (parent.checkpoint_ns, parent.checkpoint_id)
        yield key
        if (
            channel in (parent.stored or ())
            or channel in materialise.get(key, ())
            or channel not in parent.channel_versions
        ):
            return
        parent = lineage.parent(parent)


def _parents_named(node: CheckpointNode) -> set[NodeKey]:
    """The checkpoints of other namespaces `node` names in `metadata["parents"]`."""
    parents = node.metadata.get("parents")
    if not isinstance(parents, Mapping):
        return set()
    return {
        (ns, cid)
        for ns, cid in parents.items()
        if isinstance(ns, str) and isinstance(cid, str) and ns != node.checkpoint_ns
    }


def _root_of(node: CheckpointNode) -> str | None:
    """The root checkpoint a subgraph checkpoint was written under (`parents[""]`)."""
    parents = node.metadata.get("parents")
    root = parents.get(ROOT_NAMESPACE) if isinstance(parents, Mapping) else None
    return root if isinstance(root, str) else None


def _is_persistent(checkpoint_ns: str) -> bool:
    """Whether a subgraph namespace is a `checkpointer=True` subgraph's own memory,
    which outlives each call: its last part names no task (`node:task_id` does)."""
    return ":" not in checkpoint_ns.rsplit("|", 1)[-1]


def split_runs(line: Sequence[CheckpointNode]) -> list[list[CheckpointNode]]:
    """A line, root first, cut before each `source == "input"` checkpoint.

    What precedes the first input checkpoint is a run of its own.
    """
    runs: list[list[CheckpointNode]] = []
    for node in line:
        if not runs or node.metadata.get("source") == "input":
            runs.append([node])
        else:
            runs[-1].append(node)
    return runs


def compactable_steps(run: Sequence[CheckpointNode]) -> list[CheckpointNode]:
    """The super-steps step compaction removes from `run`, before its protections.

    Those are the `loop` checkpoints strictly between the first one (the input
    applied: regenerate's base) and the last one (where the run ended). The
    input checkpoint and every `update`/`fork` checkpoint stay; what precedes
    a thread's first input is no run.
    """
    if not run or run[0].metadata.get("source") != "input":
        return []
    loops = [n for n in run if n.metadata.get("source") == "loop"]
    return loops[1:-1]


def _subgraph_parents(lineage: Lineage) -> set[NodeKey]:
    """Checkpoints another namespace's checkpoints name in `metadata["parents"]`."""
    return {key for node in lineage.nodes.values() for key in _parents_named(node)}


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
    """Whether `graft` is still sound, on the rows `now` read in its transaction.

    A duration-link graft: every link it skips clones its parent and owns no
    writes, and the new parent owns none (`_graftable_onto`). A history graft:
    the chain is as planned (`_chain_as_planned`).
    """
    if graft.reason is not Reason.GRAFTED_DURATION_LINK:
        return _chain_as_planned(graft.child_id, graft.via, graft.new_parent_id, now)
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


def root_holds(root: Root, now: Mapping[str, CheckpointNode]) -> bool:
    """Whether `root` is still sound: its chain runs through `via` to a root, as planned."""
    return _chain_as_planned(root.checkpoint_id, root.via, None, now)


def _chain_as_planned(
    child_id: str, via: Sequence[str], top_id: str | None, now: Mapping[str, CheckpointNode]
) -> bool:
    """Whether `child_id`'s parents are `via` then `top_id` (None: `via` ends at a root),
    as the rows `now` read.

    A changed chain means the thread changed since the plan; it is judged again
    on the next pass. (A delta channel's walk back from the child was judged on
    these same rows: a checkpoint's versions, values and writes do not change
    once written, and a walk runs only up its chain.)
    """
    chain = [child_id, *via]
    for checkpoint_id, parent_id in zip(chain, [*via, top_id], strict=True):
        node = now.get(checkpoint_id)
        if node is None or node.parent_id != parent_id:
            return False
    return top_id is None or top_id in now
