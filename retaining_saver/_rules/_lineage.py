"""The data the retention rules read and produce: lineage nodes, plans, reasons.

Plain values with no behaviour beyond navigation; the decisions live in the
rest of this package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Reason(StrEnum):
    """Why a checkpoint is deleted."""

    TRAILING_DURATION_LEAF = "trailing-duration-leaf"
    SUPERSEDED_BRANCH = "superseded-branch"
    GRAFTED_DURATION_LINK = "grafted-duration-link"
    BEYOND_HORIZON = "beyond-history-horizon"
    COMPACTED_STEP = "compacted-step"
    RUN_REMOVED = "run-removed"


class Protection(StrEnum):
    """Why a checkpoint is kept. The module docstring's table explains each."""

    HEAD = "head"
    ANCESTOR = "ancestor"
    EXPLICIT = "explicit"
    PENDING_WRITES = "pending-writes"
    SUBGRAPH_PARENT = "subgraph-parent"
    DURATION_LINK = "duration-link"
    LINK_ON_WRITES = "link-on-writes"
    TOO_YOUNG = "too-young"
    FORK_POINT_MISSING = "fork-point-missing"
    NOT_ENABLED = "not-enabled"
    CAPPED = "capped"
    YOUNG_PARENT = "parent-of-young"
    DELTA_HISTORY = "delta-history"
    FORK_POINT = "fork-point"
    KEEP_STEP = "keep-step"
    LIVE_RUN = "live-run"
    PRE_V4_SENDS = "pre-v4-sends"
    FORK_MEMORY = "fork-memory"
    WINDOW_EDGE = "window-edge"


@dataclass(frozen=True, slots=True)
class CheckpointNode:
    """What the rules know of one checkpoint.

    Attributes:
        checkpoint_ns: Its namespace; `""` is the root graph.
        checkpoint_id: Its id (time-ordered, so the max id is the latest).
        parent_id: The id its `parent_config` names, or None.
        channel_versions: Its full `channel_versions` map.
        versions_seen: Its full `versions_seen` map.
        write_count: How many writes rows it owns (empty entries count 0).
        metadata: Its stored metadata (Postgres drops the `writes` key).
        ts: Its ISO-8601 timestamp.
        stored: The channels whose value is stored at it (not rebuilt from
            ancestors' writes); None where not loaded, taken as none.
        format_version: Its checkpoint format (`v`); None where not loaded,
            which a clone check matches only to another unloaded one. Below 4,
            the saver's read migrates the pending sends of a checkpoint from its
            parent's writes (Postgres).
    """

    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    channel_versions: Mapping[str, Any]
    versions_seen: Mapping[str, Any]
    write_count: int
    metadata: Mapping[str, Any]
    ts: str
    stored: frozenset[str] | None = None
    format_version: int | None = None

    @property
    def is_pre_v4(self) -> bool:
        """Whether its format is known and below 4: the saver's read then migrates its
        pending sends from its parent's writes, so that parent is part of its state."""
        return self.format_version is not None and self.format_version < 4

    @staticmethod
    def format_version_of(value: Any) -> int | None:
        """A stored checkpoint's `v` (an int, or its decimal text) as `format_version`; None
        for anything else."""
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


DELTA_METADATA_KEY = "counters_since_delta_snapshot"
"""The metadata key LangGraph writes on checkpoints of a graph with a DeltaChannel."""

NodeKey = tuple[str, str]
BlobKey = tuple[str, str, str]
"""(checkpoint_ns, channel, version)"""


@dataclass(frozen=True, slots=True)
class Deletion:
    """One checkpoint to delete, with the state the deletion was proven against.

    A backend re-checks, inside its transaction: the row still has `parent_id`;
    it has no child left; it owns no writes unless `writes_consumed`; with
    `clone_of`, that parent still exists and it still clones it; with
    `must_be_head`, no newer checkpoint is in its namespace.
    """

    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    reason: Reason
    clone_of: str | None = None
    must_be_head: bool = False
    writes_consumed: bool = False


@dataclass(frozen=True, slots=True)
class LeafFacts:
    """What one admission round reads about a trailing leaf, by primary key.

    Attributes:
        leaf: The leaf's row as stored now, with its write count; None if gone.
        parent: The row of the leaf's parent; None if gone (or the leaf is).
        has_children: Whether any checkpoint names the leaf as its parent.
        newest_id: The newest checkpoint id of the leaf's namespace.
        runner_up_id: The newest id below the leaf's; None if there is none.
        parent_row: The parent's stored row, in the backend's own shape, from
            which it answers the read the run makes once the leaf is gone.
    """

    leaf: CheckpointNode | None
    parent: CheckpointNode | None
    has_children: bool
    newest_id: str | None
    runner_up_id: str | None
    parent_row: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Graft:
    """Re-parent `child_id` past the removed checkpoints `via` onto `new_parent_id`.

    `via` lists them nearest first. For a duration link (the default `reason`)
    each must still clone its parent and own no writes when the graft is
    carried out; for a history rule (`BEYOND_HORIZON`, `COMPACTED_STEP`) the
    chain from `child_id` through `via` to `new_parent_id` must be as planned.
    """

    checkpoint_ns: str
    child_id: str
    via: tuple[str, ...]
    new_parent_id: str
    reason: Reason = Reason.GRAFTED_DURATION_LINK


@dataclass(frozen=True, slots=True)
class Root:
    """Make `checkpoint_id` a root (parent None): every ancestor it had, `via`, is removed.

    `via` lists them nearest first; the chain from `checkpoint_id` through
    `via` to a checkpoint without a parent must be as planned when it runs.
    """

    checkpoint_ns: str
    checkpoint_id: str
    via: tuple[str, ...]
    reason: Reason = Reason.BEYOND_HORIZON


@dataclass(frozen=True, slots=True)
class Materialise:
    """Store the values of `channels` whole at `checkpoint_id`, before its ancestors go.

    Each is a DeltaChannel whose value at the checkpoint is rebuilt from its
    ancestors' writes; stored there (under the version it already has), reads
    of it and of its descendants stop there and need no ancestor.
    """

    checkpoint_ns: str
    checkpoint_id: str
    channels: tuple[str, ...]
    versions: tuple[str, ...] = ()
    """Each channel's version at the checkpoint, as planned: the values go under it."""


@dataclass(frozen=True)
class Plan:
    """What one retention pass over a thread does.

    `deletions` are ordered so that a checkpoint comes after all its children.
    `materialise`, then `grafts`, then `roots`, run before them. `freed_blobs`
    are the blob keys that only deleted checkpoints referenced. `window_start`: the
    plan was made on a window (`Lineage.window_start`); no checkpoint below it can
    reference a freed blob (`_window`).
    """

    deletions: tuple[Deletion, ...] = ()
    grafts: tuple[Graft, ...] = ()
    kept: Mapping[NodeKey, Protection] = field(default_factory=dict)
    deferred: tuple[Deletion, ...] = ()
    heads: Mapping[str, str] = field(default_factory=dict)
    freed_blobs: tuple[BlobKey, ...] = ()
    roots: tuple[Root, ...] = ()
    materialise: tuple[Materialise, ...] = ()
    window_start: str | None = None

    @property
    def empty(self) -> bool:
        return not self.deletions and not self.grafts and not self.roots


@dataclass(frozen=True)
class Lineage:
    """All checkpoints of one thread, or of a window of its newest (`window_start`), as
    the rules see them."""

    thread_id: str
    nodes: Mapping[NodeKey, CheckpointNode]
    stores_whole: bool = True
    """Whether the store can hold a DeltaChannel's value whole (LangGraph's snapshot), as a
    pass that materialises one at a new root needs: a fact of the installed
    langgraph-checkpoint, which the backend that loads the lineage supplies. Without it,
    no value is materialised and every walk a kept checkpoint reads stays."""

    window_start: str | None = None
    """Where the load took only the thread's newest checkpoints (a window), the oldest id
    it took: every checkpoint of every namespace whose id is at or above it is here, and
    none below. Ids are time-ordered and a child is newer than its parent, so a node here
    has all its children here; what a node whose parent lies below (`below_window`)
    rests on is unseen, and stays. None: the whole thread."""

    @classmethod
    def of(
        cls,
        thread_id: str,
        nodes: Iterable[CheckpointNode],
        *,
        stores_whole: bool = True,
        window_start: str | None = None,
    ) -> Lineage:
        keyed = {(n.checkpoint_ns, n.checkpoint_id): n for n in nodes}
        return cls(thread_id, keyed, stores_whole, window_start)

    def windowed(self, newest: int | None) -> Lineage:
        """This lineage as a load of the window of its `newest` newest root-namespace
        checkpoints finds it: every checkpoint at or above the oldest of those
        (`window_start`). Itself when `newest` is None or the root namespace has no more."""
        if newest is None:
            return self
        roots = sorted((cid for ns, cid in self.nodes if ns == ""), reverse=True)
        if len(roots) <= newest:
            return self
        start = roots[newest - 1]
        nodes = {k: n for k, n in self.nodes.items() if k[1] >= start}
        return replace(self, nodes=nodes, window_start=start)

    def below_window(self, node: CheckpointNode) -> bool:
        """Whether `node`'s parent lies below the window this lineage was loaded with: a
        row not loaded, not a missing one."""
        return (
            self.window_start is not None
            and node.parent_id is not None
            and node.parent_id < self.window_start
        )

    def with_stored(self, stored: Mapping[NodeKey, frozenset[str]]) -> Lineage:
        """This lineage, each node knowing which channels are stored at it."""
        nodes = {k: replace(n, stored=stored.get(k, frozenset())) for k, n in self.nodes.items()}
        return replace(self, nodes=nodes)

    def children(self) -> dict[NodeKey, list[NodeKey]]:
        found: dict[NodeKey, list[NodeKey]] = {}
        for key, node in self.nodes.items():
            if node.parent_id is not None:
                found.setdefault((node.checkpoint_ns, node.parent_id), []).append(key)
        return found

    def parent(self, node: CheckpointNode) -> CheckpointNode | None:
        if node.parent_id is None:
            return None
        return self.nodes.get((node.checkpoint_ns, node.parent_id))

    def delta_channels(self) -> frozenset[str]:
        """The thread's DeltaChannels, told from checkpoint metadata.

        LangGraph writes `counters_since_delta_snapshot` (by channel) on the
        checkpoints of such a graph; not on every one (a snapshot resets it), so
        any one of them tells. A channel stored at every step is never named, and
        needs no walk.
        """
        found: set[str] = set()
        for node in self.nodes.values():
            counters = node.metadata.get(DELTA_METADATA_KEY)
            if isinstance(counters, Mapping):
                found.update(str(channel) for channel in counters)
        return frozenset(found)

    def heads(self) -> dict[str, str]:
        latest: dict[str, str] = {}
        for ns, checkpoint_id in self.nodes:
            if checkpoint_id > latest.get(ns, ""):
                latest[ns] = checkpoint_id
        return latest


class Skip(StrEnum):
    """Why admission cleanup reclaimed nothing."""

    EMPTY_THREAD = "empty-thread"
    NOT_A_DURATION_LEAF = "not-a-duration-leaf"
    OWNS_WRITES = "owns-writes"
    PROTECTED_ID = "protected-id"
    MISSING_PARENT = "missing-parent"
    PARENT_STATE_DIFFERS = "parent-state-differs"
    PRECONDITION_CHANGED = "precondition-changed"
    CACHE_INVALIDATION_FAILED = "cache-invalidation-failed"
    PERMISSION_DENIED = "permission-denied"
    FAILED = "failed"
    CLEANUP_DISABLED = "cleanup-disabled"


@dataclass
class HistoryUnit:
    """What a history rule removes in one piece: a stretch with the graft or root that
    closes the gap, or a branch; and the subgraph checkpoints that go with them.

    `deletions` run children first: the branches forked inside a stretch, then
    the stretch itself from the kept child's side up.
    """

    deletions: list[Deletion]
    grafts: list[Graft] = field(default_factory=list)
    roots: list[Root] = field(default_factory=list)

    def absorb(self, other: HistoryUnit) -> None:
        self.deletions += other.deletions
        self.grafts += other.grafts
        self.roots += other.roots
