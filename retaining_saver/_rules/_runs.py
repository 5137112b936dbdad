"""Facts of a lineage that the history rules read: runs, steps, DeltaChannel walks and
subgraph namespaces. Pure functions of the nodes; no I/O."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from retaining_saver._rules._leaf import ROOT_NAMESPACE
from retaining_saver._rules._lineage import CheckpointNode, Lineage, NodeKey


def uses_delta_channels(lineage: Lineage) -> bool:
    """Whether the thread's graph has a DeltaChannel, told from checkpoint metadata."""
    return bool(delta_channels(lineage))


def delta_channels(lineage: Lineage) -> frozenset[str]:
    """The thread's DeltaChannels, told from checkpoint metadata (`Lineage.delta_channels`)."""
    return lineage.delta_channels()


def walk(
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


def parents_named(node: CheckpointNode) -> set[NodeKey]:
    """The checkpoints of other namespaces `node` names in `metadata["parents"]`."""
    parents = node.metadata.get("parents")
    if not parents or not (type(parents) is dict or isinstance(parents, Mapping)):
        return set()  # most name none; a dict is told without the ABC's check
    return {
        (ns, cid)
        for ns, cid in parents.items()
        if isinstance(ns, str) and isinstance(cid, str) and ns != node.checkpoint_ns
    }


def root_of(node: CheckpointNode) -> str | None:
    """The root checkpoint a subgraph checkpoint was written under (`parents[""]`)."""
    parents = node.metadata.get("parents")
    root = parents.get(ROOT_NAMESPACE) if isinstance(parents, Mapping) else None
    return root if isinstance(root, str) else None


def is_persistent(checkpoint_ns: str) -> bool:
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


def parent_key(lineage: Lineage, key: NodeKey) -> NodeKey | None:
    """The key `key`'s checkpoint names as its parent (a row maybe missing), or None."""
    parent_id = lineage.nodes[key].parent_id
    return None if parent_id is None else (key[0], parent_id)


def post_order(
    children: Mapping[NodeKey, Sequence[NodeKey]], root: NodeKey, within: set[NodeKey]
) -> list[NodeKey]:
    """`root` and its descendants in `within`, each after all its children."""
    order: list[NodeKey] = []
    stack: list[tuple[NodeKey, bool]] = [(root, False)]
    while stack:
        key, expanded = stack.pop()
        if expanded:
            order.append(key)
            continue
        stack.append((key, True))
        stack.extend((k, False) for k in children.get(key, []) if k in within)
    return order
