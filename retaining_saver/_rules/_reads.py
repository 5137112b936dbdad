"""What a checkpoint the history rules keep reads from its ancestors, which must stay
with it: a DeltaChannel value's walk back to where it is stored, a pre-v4
checkpoint's pending sends in its parent's writes, and the `checkpointer=True`
subgraph memory a fork from it loads. No I/O."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retaining_saver._rules._leaf import ROOT_NAMESPACE
from retaining_saver._rules._lineage import (
    DELTA_METADATA_KEY,
    CheckpointNode,
    Lineage,
    NodeKey,
    Protection,
    Reason,
)
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._runs import is_persistent, root_of, walk

FORK_SOURCES = ("update", "fork")
"""Sources of checkpoints that a fork replays from their parent: LangGraph bounds its
subgraphs' memory by the parent's id, as the fork was written after their checkpoints."""


class _AncestorReads:
    """`_History`'s judgement of what its kept checkpoints read from above them."""

    lineage: Lineage
    policy: RetentionPolicy
    delta: frozenset[str]
    pre_v4: bool
    ns_scope: set[NodeKey]
    replays_memory: bool
    removed: set[NodeKey]
    taken: set[NodeKey]
    on_line: set[NodeKey]
    materialise: dict[NodeKey, tuple[str, ...]]
    namer_roots: set[NodeKey]

    def _walks(
        self,
        kept: Iterable[NodeKey],
        removed: Mapping[NodeKey, Any],
        line: Sequence[NodeKey],
    ) -> tuple[dict[NodeKey, Protection], dict[NodeKey, tuple[str, ...]]]:
        """What of `removed` a kept checkpoint's delta value is rebuilt from, to keep; and
        what to materialise instead, at the root a pass makes.

        A delta channel's value at a checkpoint it does not store is its nearest
        storing ancestor's value plus every writes row on the way (`_runs.walk`). A
        kept checkpoint's walks must stay whole, unless its value is stored
        there first: at the new root of the root namespace, for the channels
        `delta_graph` declares.
        """
        materialise: dict[NodeKey, tuple[str, ...]] = {}
        root = self._new_root(line, removed)
        if root is not None:
            needed = self._unstored(self.lineage.nodes[root])
            if needed and self.lineage.stores_whole and set(needed) <= self.policy.materializable:
                materialise[root] = tuple(sorted(needed))
        walked: dict[NodeKey, Protection] = {}
        todo = list(kept)
        while todo:
            key = todo.pop()
            node = self.lineage.nodes[key]
            for channel in self._unstored(node):
                if channel in materialise.get(key, ()):
                    continue
                for step in walk(self.lineage, node, channel, materialise):
                    if step in removed and step not in walked:
                        walked[step] = Protection.DELTA_HISTORY
                        todo.append(step)
        still = {k: r for k, r in removed.items() if k not in walked}
        if root is not None and root in materialise and self._new_root(line, still) != root:
            del materialise[root]  # walks for other channels kept what is above it
        return walked, materialise

    def _keep_reads(
        self,
        line: Sequence[NodeKey],
        removed: dict[NodeKey, Reason],
        rescued: dict[NodeKey, Protection],
        *,
        namers: bool = True,
    ) -> tuple[dict[NodeKey, Reason], dict[NodeKey, tuple[str, ...]]]:
        """`removed` without what the checkpoints kept read from above them (added to
        `rescued`), and the delta values to materialise instead. A parent kept for its
        pre-v4 sends is kept whole, with what it reads in turn. With `namers`, the last
        checkpoint to name a DeltaChannel stays too (`_last_namers`)."""
        materialise: dict[NodeKey, tuple[str, ...]] = {}
        while True:
            if self.delta:
                walked, materialise = self._walks(self.ns_scope - removed.keys(), removed, line)
                rescued.update(walked)
                removed = {k: r for k, r in removed.items() if k not in walked}
            needed = self._sends_parents(removed) | self._replay_parents(removed)
            if namers and not needed:
                needed = self._last_namers(removed, materialise)
            if not needed:
                return removed, materialise
            rescued.update(needed)
            removed = {k: r for k, r in removed.items() if k not in needed}

    def _last_namers(
        self, removed: Mapping[NodeKey, Any], materialise: Mapping[NodeKey, tuple[str, ...]]
    ) -> dict[NodeKey, Protection]:
        """For a delta channel that only checkpoints in `removed` name, while one that
        stays does not store it: the newest of them, with what of `removed` is above it
        up to the line being planned (as every protection keeps its ancestors).

        The walks are told from the channels the thread's metadata names (LangGraph
        names them at each checkpoint that does not store them): were none left to
        name one, the next pass would judge the walks through what stays as none,
        and remove what they read. A value the pass stores whole (`materialise`, or
        the root namespace's, planned before) is stored: no walk reads through it.
        """
        needed: dict[NodeKey, Protection] = {}
        gone = removed.keys() | self.removed | self.taken
        stays = {k: n for k, n in self.lineage.nodes.items() if k not in gone}

        def walks(key: NodeKey, node: CheckpointNode, channel: str) -> bool:
            whole = (*materialise.get(key, ()), *self.materialise.get(key, ()))
            stored = {*(node.stored or ()), *whole}
            return channel in node.channel_versions and channel not in stored

        for channel in sorted(self.delta):
            if any(_names(n, channel) for n in stays.values()) or not any(
                walks(k, n, channel) for k, n in stays.items()
            ):
                continue
            namers = [k for k in removed if _names(self.lineage.nodes[k], channel)]
            protection, key = Protection.DELTA_HISTORY, max(namers, default=None)
            while key is not None and key in removed:
                needed[key] = protection
                root = root_of(self.lineage.nodes[key])
                if key[0] != ROOT_NAMESPACE and (ROOT_NAMESPACE, str(root)) in self.removed:
                    self.namer_roots.add((ROOT_NAMESPACE, str(root)))
                if key in self.on_line:
                    break  # the line's own stretches end in a root or a graft
                parent_id = self.lineage.nodes[key].parent_id
                protection, key = Protection.ANCESTOR, (key[0], str(parent_id))
        return needed

    def _sends_parents(self, removed: Mapping[NodeKey, Any]) -> dict[NodeKey, Protection]:
        """The parents of `removed` that a kept pre-v4 checkpoint reads its pending sends
        from, to keep.

        Below format 4, the saver's read of a checkpoint turns its parent's
        `__pregel_tasks` writes into its pending sends. Once its parent goes, it
        reads the new parent's (a graft) or none (a root): the parent stays
        unless neither it nor the new parent owns writes.
        """
        needed: dict[NodeKey, Protection] = {}
        if not self.pre_v4:
            return needed
        for key in sorted(self.ns_scope - removed.keys()):
            node = self.lineage.nodes[key]
            parent = self.lineage.parent(node)
            if not node.is_pre_v4 or parent is None:
                continue
            parent_key = (parent.checkpoint_ns, parent.checkpoint_id)
            if parent_key not in removed:
                continue
            new_parent: CheckpointNode | None = parent
            while new_parent is not None and (
                (new_parent.checkpoint_ns, new_parent.checkpoint_id) in removed
            ):
                new_parent = self.lineage.parent(new_parent)
            if parent.write_count or (new_parent is not None and new_parent.write_count):
                needed[parent_key] = Protection.PRE_V4_SENDS
        return needed

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

    def _replay_parents(self, removed: Mapping[NodeKey, Any]) -> dict[NodeKey, Protection]:
        """The parents of kept root `update`/`fork` checkpoints in `removed`, to keep
        while a `checkpointer=True` subgraph's memory is rebuilt from them.

        A fork from such a checkpoint loads each such subgraph's latest checkpoint
        before its parent's id: a new parent (older) or none (then its own id,
        newer) would load other memory.
        """
        if not self.replays_memory:
            return {}
        needed: dict[NodeKey, Protection] = {}
        for key in self.ns_scope - removed.keys():
            node = self.lineage.nodes[key]
            parent_key = (ROOT_NAMESPACE, str(node.parent_id))
            if (
                key[0] == ROOT_NAMESPACE
                and node.metadata.get("source") in FORK_SOURCES
                and parent_key in removed
            ):
                needed[parent_key] = Protection.FORK_MEMORY
        return needed

    def _fork_memory(self, kept_roots: Iterable[NodeKey], spaces: Iterable[str]) -> set[NodeKey]:
        """In each `checkpointer=True` subgraph namespace of `spaces`, the checkpoint a fork
        from each of `kept_roots` loads as the subgraph's memory: its latest one before
        the fork's replay bound (`replay_bound`), and before the kept checkpoint's own id,
        which bounds what a fork from its `update`/`fork` children loads, those written
        later included (a fork or `update_state` from it writes one)."""
        bounds = {
            bound for key in kept_roots for bound in (replay_bound(self.lineage.nodes[key]), key[1])
        }
        found: set[NodeKey] = set()
        for ns in spaces:
            if not is_persistent(ns):
                continue
            ids = sorted(cid for space, cid in self.lineage.nodes if space == ns)
            for bound in bounds:
                at = bisect_left(ids, bound)
                if at:
                    found.add((ns, ids[at - 1]))
        return found


def replay_bound(node: CheckpointNode) -> str:
    """The id before which a fork from the root checkpoint `node` loads its
    `checkpointer=True` subgraphs' memory: its parent's for an `update`/`fork`
    checkpoint, else its own (LangGraph's `ReplayState`)."""
    if node.metadata.get("source") in FORK_SOURCES and node.parent_id is not None:
        return node.parent_id
    return node.checkpoint_id


def moves_fork_memory(lineage: Lineage, link: CheckpointNode, kids: Iterable[NodeKey]) -> bool:
    """Whether grafting `kids` past the root checkpoint `link` onto its parent moves what a
    fork from one of them loads as a `checkpointer=True` subgraph's memory: an `update`/
    `fork` child's replay bound becomes the parent's id, and a subgraph checkpoint lies
    between the two."""
    if link.checkpoint_ns != ROOT_NAMESPACE or not any(
        lineage.nodes[k].metadata.get("source") in FORK_SOURCES for k in kids
    ):
        return False
    floor = link.parent_id or ""
    return any(
        ns != ROOT_NAMESPACE and is_persistent(ns) and floor <= cid < link.checkpoint_id
        for ns, cid in lineage.nodes
    )


def _names(node: CheckpointNode, channel: str) -> bool:
    """Whether `node`'s metadata names `channel` as a delta channel."""
    counters = node.metadata.get(DELTA_METADATA_KEY)
    return isinstance(counters, Mapping) and channel in counters
