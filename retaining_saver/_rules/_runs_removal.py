"""What deleting runs removes from a thread (`delete_for_runs`), and how what stays is
re-linked. No I/O.

A run's checkpoints are those whose metadata names its `run_id` (LangGraph copies it
there from `configurable` or the config's `metadata`), with the checkpoints of the
subgraph calls made under them (a `node:task_id` namespace goes with the root
checkpoint it names, as in the history rules), and the duration stamps an app wrote
on them (a childless marker clone owning no writes, which shows the run's state and
no state of its own). They go with their writes and the blobs only they reference.

What stays reads as before:

- a kept checkpoint whose parent goes is grafted onto its nearest kept ancestor (a
  root, if none is left): its own row holds its values, so only its parent link
  changes;
- a kept checkpoint's DeltaChannel walk (`_runs.walk`) is never cut: a checkpoint of
  a removed run that such a walk reads from stays (`delta-history`), with what it
  reads in turn. A run whose last checkpoints are kept this way is deleted in part;
  the next call finds the rest again.
- an ancestor chain that ends at a missing row is not proven: its run's checkpoints
  on it stay (`fork-point-missing`).
- a kept checkpoint written before format 4 (`v` < 4) reads its pending sends from
  its parent's `__pregel_tasks` writes (the Postgres saver moves them into its read),
  so a parent of a removed run stays under it (`pre-v4-sends`), unless neither that
  parent nor the one the checkpoint would get (none, for a root) owns writes: as the
  history rules keep it, failing closed.

The checkpoints kept so are the plan's `kept`: the removal is partial, and the caller
reports it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from retaining_saver._rules._leaf import ROOT_NAMESPACE, has_marker, is_clone
from retaining_saver._rules._lineage import (
    BlobKey,
    CheckpointNode,
    Deletion,
    Graft,
    Lineage,
    NodeKey,
    Plan,
    Protection,
    Reason,
    Root,
)
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._runs import delta_channels, is_persistent, root_of, walk

RUN_ID_KEY = "run_id"
"""The metadata key LangGraph writes a run's id under."""


def run_of(node: CheckpointNode) -> str | None:
    """The run that wrote `node`, as its metadata names it; None if it names none."""
    run_id = node.metadata.get(RUN_ID_KEY)
    return None if run_id is None else str(run_id)


def plan_run_removal(
    lineage: Lineage, run_ids: Collection[str], policy: RetentionPolicy | None = None
) -> Plan:
    """The plan that deletes the checkpoints of `run_ids` from `lineage` (see the module
    docstring): deletions children first, each kept child's graft or root, and the blob
    keys only deleted checkpoints referenced.

    Args:
        lineage: Every checkpoint of the thread.
        run_ids: The runs to remove.
        policy: Whose marker tells a stamp (None: the default duration marker).

    Returns:
        The plan; empty if no checkpoint of the thread belongs to those runs.
    """
    doomed = _written_by(lineage, frozenset(run_ids))
    doomed |= _stamps_on(lineage, doomed, policy or RetentionPolicy())
    kept: dict[NodeKey, Protection] = {}
    while True:
        read = (
            _read_by_kept(lineage, doomed)
            | _above_missing(lineage, doomed)
            | _sends_of_kept(lineage, doomed)
        )
        if not read:
            break
        kept.update(read)
        doomed -= read.keys()
    if not doomed:
        return Plan(kept=kept)
    grafts, roots = _relinks(lineage, doomed)
    order = sorted(doomed, key=lambda key: (key[0], key[1]), reverse=True)  # children first
    deletions = tuple(
        Deletion(
            ns, cid, lineage.nodes[(ns, cid)].parent_id, Reason.RUN_REMOVED, writes_consumed=True
        )
        for ns, cid in order
    )
    return Plan(
        deletions=deletions,
        grafts=grafts,
        roots=roots,
        kept=kept,
        heads=lineage.heads(),
        freed_blobs=_freed_blobs(lineage, doomed),
    )


def _written_by(lineage: Lineage, run_ids: frozenset[str]) -> set[NodeKey]:
    """The checkpoints the runs wrote, with the subgraph calls made under their root
    checkpoints."""
    doomed = {key for key, node in lineage.nodes.items() if run_of(node) in run_ids}
    roots = {cid for ns, cid in doomed if ns == ROOT_NAMESPACE}
    for key, node in lineage.nodes.items():
        if key[0] != ROOT_NAMESPACE and not is_persistent(key[0]) and root_of(node) in roots:
            doomed.add(key)
    return doomed


def _stamps_on(lineage: Lineage, doomed: set[NodeKey], policy: RetentionPolicy) -> set[NodeKey]:
    """The stamps on doomed checkpoints, stacked ones included: marker clones that own no
    writes and have no children but such stamps."""
    found: set[NodeKey] = set()
    grew = True
    while grew:  # down from the doomed checkpoints, stamp by stamp
        grew = False
        for key, node in lineage.nodes.items():
            parent = lineage.parent(node)
            if key in found or key in doomed or parent is None:
                continue
            if not _parent_doomed(node, doomed | found):
                continue
            if node.write_count == 0 and has_marker(node, policy) and is_clone(node, parent):
                found.add(key)
                grew = True
    children = lineage.children()
    shrank = True
    while shrank:  # a stamp something else was written on stays, with its ancestors
        kept = {k for k in found if not set(children.get(k, ())) <= found}
        found -= kept
        shrank = bool(kept)
    return found


def _read_by_kept(lineage: Lineage, doomed: set[NodeKey]) -> dict[NodeKey, Protection]:
    """The doomed checkpoints a kept checkpoint's DeltaChannel value is rebuilt from."""
    channels = delta_channels(lineage)
    found: dict[NodeKey, Protection] = {}
    if not channels:
        return found
    for key, node in lineage.nodes.items():
        if key in doomed:
            continue
        stored = node.stored or frozenset()
        for channel in channels:
            if channel not in node.channel_versions or channel in stored:
                continue
            for step in walk(lineage, node, channel, {}):
                if step in doomed:
                    found[step] = Protection.DELTA_HISTORY
    return found


def _above_missing(lineage: Lineage, doomed: set[NodeKey]) -> dict[NodeKey, Protection]:
    """Doomed checkpoints on a kept child's way up that ends at a missing row."""
    found: dict[NodeKey, Protection] = {}
    for key, node in lineage.nodes.items():
        if key in doomed or not _parent_doomed(node, doomed):
            continue
        chain, ancestor = _doomed_chain(lineage, node, doomed)
        if ancestor is None and chain and lineage.nodes[chain[-1]].parent_id is not None:
            found.update(dict.fromkeys(chain, Protection.FORK_POINT_MISSING))
    return found


def _sends_of_kept(lineage: Lineage, doomed: set[NodeKey]) -> dict[NodeKey, Protection]:
    """Doomed parents of kept pre-format-4 checkpoints, which read their pending sends
    from their parent's writes: each stays unless neither it nor the checkpoint's new
    parent owns writes."""
    found: dict[NodeKey, Protection] = {}
    for key, node in lineage.nodes.items():
        if key in doomed or not node.is_pre_v4:
            continue
        parent = lineage.parent(node)
        if parent is None or not _parent_doomed(node, doomed):
            continue
        _, new_parent = _doomed_chain(lineage, node, doomed)
        if parent.write_count or (new_parent is not None and new_parent.write_count):
            found[(parent.checkpoint_ns, parent.checkpoint_id)] = Protection.PRE_V4_SENDS
    return found


def _parent_doomed(node: CheckpointNode, doomed: set[NodeKey]) -> bool:
    return node.parent_id is not None and (node.checkpoint_ns, node.parent_id) in doomed


def _doomed_chain(
    lineage: Lineage, node: CheckpointNode, doomed: set[NodeKey]
) -> tuple[list[NodeKey], CheckpointNode | None]:
    """The doomed ancestors above `node`, nearest first, and the kept one they end at
    (None: the chain ends at a root, or at a missing row)."""
    chain: list[NodeKey] = []
    parent = lineage.parent(node)
    while parent is not None:
        key = (parent.checkpoint_ns, parent.checkpoint_id)
        if key not in doomed:
            return chain, parent
        chain.append(key)
        parent = lineage.parent(parent)
    return chain, None


def _relinks(lineage: Lineage, doomed: set[NodeKey]) -> tuple[tuple[Graft, ...], tuple[Root, ...]]:
    """Each kept child of a doomed checkpoint, grafted onto its nearest kept ancestor, or
    made a root where none is left."""
    grafts: list[Graft] = []
    roots: list[Root] = []
    for key, node in sorted(lineage.nodes.items()):
        if key in doomed or not _parent_doomed(node, doomed):
            continue
        chain, ancestor = _doomed_chain(lineage, node, doomed)
        via = tuple(cid for _, cid in chain)
        if ancestor is None:
            roots.append(Root(key[0], key[1], via, Reason.RUN_REMOVED))
        else:
            grafts.append(Graft(key[0], key[1], via, ancestor.checkpoint_id, Reason.RUN_REMOVED))
    return tuple(grafts), tuple(roots)


def _freed_blobs(lineage: Lineage, doomed: set[NodeKey]) -> tuple[BlobKey, ...]:
    """The blob keys a doomed checkpoint references that no kept one does."""
    referenced = _blob_keys(lineage.nodes[k] for k in lineage.nodes.keys() - doomed)
    return tuple(sorted(_blob_keys(lineage.nodes[k] for k in doomed) - referenced))


def _blob_keys(nodes: Iterable[CheckpointNode]) -> set[BlobKey]:
    return {
        (node.checkpoint_ns, str(channel), str(version))
        for node in nodes
        for channel, version in node.channel_versions.items()
    }
