"""A whole thread's plan: trailing leaves, superseded branches, duration links, and the
history rules (`_history`) over its lineage. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from retaining_saver._rules._cap import capped
from retaining_saver._rules._checks import leaf_skip, leaf_verdict
from retaining_saver._rules._history import _History
from retaining_saver._rules._leaf import (
    _aware,
    _graftable_onto,
    _parse_ts,
    _time_text,
    is_clone,
    leaf_deletion,
)
from retaining_saver._rules._lineage import (
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
)
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._reads import moves_fork_memory
from retaining_saver._rules._runs import parent_key, parents_named, post_order
from retaining_saver._rules._window import beyond_the_window, unjudged


def plan_retention(lineage: Lineage, policy: RetentionPolicy, now: datetime) -> Plan:
    """Turn one thread's lineage into a plan under `policy`. Pure and total."""
    if unjudged(lineage):  # a window it cannot judge: nothing proven (`_window`)
        kept = dict.fromkeys(lineage.nodes, Protection.WINDOW_EDGE)
        return Plan(kept=kept, heads=lineage.heads())
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
        # Below a window's start rows were not loaded, not lost: the history rules
        # keep the checkpoints that rest on them (`WINDOW_EDGE`, `_window`).
        self.newest_missing: dict[str, str] = {}
        for node in lineage.nodes.values():
            unseen = lineage.below_window(node)
            if node.parent_id is not None and lineage.parent(node) is None and not unseen:
                ns = node.checkpoint_ns
                self.newest_missing[ns] = max(self.newest_missing.get(ns, ""), node.parent_id)

    def plan(self) -> Plan:
        units = self._stamp_stacks()
        taken_early = set(_flatten(units))
        self._protect_chains(taken_early)
        # A subgraph checkpoint kept as the last to name a DeltaChannel keeps the root
        # checkpoint it was written under; which root checkpoints go is known only once
        # planned: plan again with those kept until none more is needed.
        namer_roots: frozenset[NodeKey] = frozenset()
        while True:
            history = _History(
                self.lineage,
                self.policy,
                self.now,
                children=self.children,
                kept=self.kept,
                taken=set(_flatten(units)),
                referenced=self.referenced,
                newest_missing=self.newest_missing,
                namer_roots=namer_roots,
            )
            if history.namer_roots <= namer_roots:
                break
            namer_roots |= history.namer_roots
        self.kept, self.history_scope = history.kept, history.scope
        beyond = beyond_the_window(self.lineage, self.history_scope, taken_early)
        for key in beyond:  # no link graft, no branch deletion: see `_window`
            if self.kept.get(key) in (None, Protection.ANCESTOR, Protection.DURATION_LINK):
                self.kept[key] = Protection.WINDOW_EDGE
        links = self._links()
        # A link may also parent a superseded subtree, which must go first.
        taken = set(_flatten(units + links)) | history.removed
        units += self._superseded_subtrees(taken)
        units += links
        deletions, deferred = _cap(units, self.policy.max_delete_per_run)
        # History units come last: their stretches parent no other rule's deletions.
        taken_units, deferred_units = capped(
            history,
            self._room_left(len(deletions)),
            deletions,
            may_pass_the_cap=not deletions and bool(self.policy.max_delete_per_run),
        )
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
            window_start=self.lineage.window_start,
            materialise=tuple(
                Materialise(key[0], key[1], channels, self._versions(key, channels))
                for key in [(r.checkpoint_ns, r.checkpoint_id) for r in roots]
                + [(g.checkpoint_ns, g.child_id) for u in taken_units for g in u.grafts]
                if (channels := history.materialise.get(key))
            ),
        )

    def _versions(self, key: NodeKey, channels: Sequence[str]) -> tuple[str, ...]:
        versions = self.lineage.nodes[key].channel_versions
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

    def _stamp_stacks(self) -> list[list[Deletion]]:
        """Each namespace's run of newest checkpoints, each the clone child of the next.

        Each goes as admission's take would (`leaf_verdict`, the take's checks),
        judged as if the ones stacked above it were gone already: its one child
        is the leaf above it, and the newest id is its own. The parent must be
        the next newest, so that "latest" lands on it: a newer checkpoint on
        another branch would otherwise become the head.
        """
        units: list[list[Deletion]] = []
        for ns, newest_first in self._ids_newest_first().items():
            stack: list[Deletion] = []
            node = self.lineage.nodes[(ns, newest_first[0])]
            while self.policy.trailing_duration_leaves:
                taken = self._take(node, newest_first[len(stack) :], stacked=bool(stack))
                if taken is None:
                    break
                stack.append(taken)
                node = self.lineage.nodes[(ns, str(node.parent_id))]
            self.kept[(ns, node.checkpoint_id)] = Protection.HEAD
            if stack:
                units.append(stack)
        return units

    def _take(
        self, node: CheckpointNode, newest_first: list[str], *, stacked: bool
    ) -> Deletion | None:
        """The deletion of `node`, the newest of `newest_first`, if the take's checks pass on
        the lineage (`stacked`: its one child is a leaf taken above it); None if not."""
        if (node.checkpoint_ns, node.checkpoint_id) in self.referenced:
            return None
        facts = LeafFacts(
            leaf=node,
            parent=self.lineage.parent(node),
            has_children=len(self._kids(node)) > (1 if stacked else 0),
            newest_id=node.checkpoint_id,
            runner_up_id=newest_first[1] if len(newest_first) > 1 else None,
        )
        verdict = leaf_verdict(facts, self.policy, frozenset())
        return verdict if isinstance(verdict, Deletion) else None

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
        memory = [
            k
            for k in links
            if moves_fork_memory(self.lineage, self.lineage.nodes[k], self.children.get(k, []))
        ]
        self.kept.update(dict.fromkeys(memory, Protection.FORK_MEMORY))
        links = [k for k in links if k not in on_writes and k not in memory]
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
        roots = [k for k in loose if parent_key(self.lineage, k) not in loose]
        for root in roots:
            above = parent_key(self.lineage, root)
            if above is not None and above not in self.lineage.nodes:
                # The missing row may hang below any other loose subtree here.
                self.broken_namespaces.add(root[0])
        subtrees = [(root, post_order(self.children, root, loose)) for root in roots]
        subtrees.sort(key=lambda pair: max(_time_text(self.lineage.nodes[k].ts) for k in pair[1]))
        units: list[list[Deletion]] = []
        for root, keys in subtrees:
            protection = self._subtree_protection(root, keys)
            if protection is not None:
                self.kept.update(dict.fromkeys(keys, protection))
                continue
            units.append([self._branch_deletion(self.lineage.nodes[k]) for k in keys])
        return units

    def _subtree_protection(self, root: NodeKey, keys: Sequence[NodeKey]) -> Protection | None:
        above = parent_key(self.lineage, root)
        if above is None or above not in self.lineage.nodes or root[0] in self.broken_namespaces:
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
    return {key for node in lineage.nodes.values() for key in parents_named(node)}


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
