"""Bounded admission cleanup: reclaim the trailing duration leaf before a run reads.

The admission read itself is the head lookup. A head that is not shaped like
a duration leaf ends admission there. Otherwise the flow looks up the parent
(one more lookup per stacked leaf, at most `MAX_STACKED_LEAVES`), and runs one
guarded deletion transaction whose probe re-reads the leaf, its writes count
and its parent by primary key. It never lists the thread, scans writes,
gathers statistics or collects blobs: a reclaimed leaf clones its parent,
which references every blob the leaf did.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver import _rules
from retaining_saver._effects import Flow, History, Invalidate, Lookup, Transact
from retaining_saver._rules import CheckpointNode, Plan, Reason, RetentionPolicy, Skip
from retaining_saver.backends._base import Applied, Backend

# LangGraph marks the reads of its run loop with this `configurable` key;
# tests/test_admission_detection.py pins it against the installed LangGraph.
RUNTIME_KEY = "__pregel_runtime"


@dataclass(frozen=True)
class AdmissionResult:
    """What one admission did.

    Attributes:
        thread_id: The admitted thread.
        reclaimed: Ids deleted, newest first; empty if nothing was.
        skipped: Why nothing (or not everything) was reclaimed, else None.
        head: The checkpoint the run should start from, as an unpinned read
            would return it now.
    """

    thread_id: str
    reclaimed: tuple[str, ...]
    skipped: Skip | None
    head: CheckpointTuple | None = field(repr=False, default=None)


def node_of(value: CheckpointTuple) -> CheckpointNode:
    """The rules' view of a checkpoint tuple a saver returned."""
    configurable = value.config.get("configurable", {})
    parent = (value.parent_config or {}).get("configurable", {})
    checkpoint = value.checkpoint
    return CheckpointNode(
        checkpoint_ns=configurable.get("checkpoint_ns", ""),
        checkpoint_id=checkpoint["id"],
        parent_id=parent.get("checkpoint_id"),
        channel_versions=checkpoint.get("channel_versions", {}),
        versions_seen=checkpoint.get("versions_seen", {}),
        write_count=len(value.pending_writes or ()),
        metadata=value.metadata,
        ts=checkpoint.get("ts", ""),
    )


def pinned(config: RunnableConfig, checkpoint_id: str) -> RunnableConfig:
    configurable = config.get("configurable", {})
    return {
        "configurable": {
            "thread_id": configurable["thread_id"],
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint_id,
        }
    }


def run_selectors(config: RunnableConfig) -> frozenset[str]:
    """Checkpoint ids a run's config addresses: its `checkpoint_id` and `checkpoint_map`."""
    configurable = config.get("configurable", {})
    ids = set()
    if checkpoint_id := configurable.get("checkpoint_id"):
        ids.add(str(checkpoint_id))
    checkpoint_map = configurable.get("checkpoint_map")
    if isinstance(checkpoint_map, Mapping):
        ids.update(str(v) for v in checkpoint_map.values() if v)
    return frozenset(ids)


def bounded_cleanup(
    thread_id: str,
    read_config: RunnableConfig,
    backend: Backend,
    policy: RetentionPolicy,
    protected: frozenset[str],
    head: CheckpointTuple | None,
) -> Flow[AdmissionResult]:
    """Reclaim `head`'s stack of duration leaves; answer the head the run should read.

    `head` is what the admission read of `read_config` returned: the first of
    the lookups, made by the caller.
    """
    if head is None:
        return AdmissionResult(thread_id, (), Skip.EMPTY_THREAD, None)
    chain = [(node_of(head), head)]
    skip: Skip | None = None
    while len(chain) <= _rules.MAX_STACKED_LEAVES:
        leaf = chain[-1][0]
        skip = _rules.leaf_skip(leaf, policy, protected)
        if skip is None and leaf.parent_id is None:
            skip = Skip.MISSING_PARENT
        if skip is not None:
            break
        parent_tuple = yield Lookup(pinned(read_config, str(leaf.parent_id)))
        if parent_tuple is None:
            skip = Skip.MISSING_PARENT
            break
        parent = node_of(parent_tuple)
        if not _rules.is_clone(leaf, parent):
            skip = Skip.NOT_A_CLONE
            break
        chain.append((parent, parent_tuple))
    leaves = [node for node, _ in chain[:-1]]
    if not leaves:
        return AdmissionResult(thread_id, (), skip, head)
    ids = [leaf.checkpoint_id for leaf in leaves]
    try:
        yield Invalidate(thread_id, leaves[0].checkpoint_ns, ids)
    except Exception:
        return AdmissionResult(thread_id, (), Skip.CACHE_INVALIDATION_FAILED, head)
    plan = Plan(
        deletions=tuple(
            _rules.leaf_deletion(n, Reason.TRAILING_DURATION_LEAF, head=True) for n in leaves
        )
    )
    applied: Applied = yield Transact(backend.apply_plan(thread_id, plan))
    reclaimed = tuple(d.checkpoint_id for d in applied.deleted)
    with contextlib.suppress(Exception):
        # A reader may have refilled a cache between the invalidation and the delete.
        yield Invalidate(thread_id, leaves[0].checkpoint_ns, ids)
    if len(reclaimed) == len(leaves):
        return AdmissionResult(thread_id, reclaimed, None, chain[-1][1])
    # Someone else changed the thread meanwhile: read the head as it is now.
    fresh = yield Lookup(read_config)
    return AdmissionResult(thread_id, reclaimed, Skip.PRECONDITION_CHANGED, fresh)


class RunTracker:
    """Tells a run's first checkpoint read from its later ones.

    A run pinned to a `checkpoint_id` also reads "latest" later (to see whether
    its target was superseded); only a run whose *first* read is unpinned is
    being admitted. Runs are told apart by their runtime object; the most
    recent `size` are remembered, strongly, so an id is never reused while kept.
    """

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._seen: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()

    def first_read(self, runtime: Any) -> bool:
        key = id(runtime)
        with self._lock:
            if self._seen.get(key) is runtime:
                return False
            self._seen[key] = runtime
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
            return True


def head_skip(
    head: CheckpointTuple | None, policy: RetentionPolicy, protected: frozenset[str]
) -> Skip | None:
    """Why admission can stop at the head it read, before taking any lock, else None."""
    if head is None:
        return Skip.EMPTY_THREAD
    return _rules.leaf_skip(node_of(head), policy, protected)


def is_admission_read(config: RunnableConfig, runs: RunTracker) -> bool:
    """Whether `config` is the first read of a LangGraph run, unpinned, in the root graph."""
    configurable = config.get("configurable", {})
    runtime = configurable.get(RUNTIME_KEY)
    if runtime is None:
        return False
    first = runs.first_read(runtime)
    return (
        first
        and not configurable.get("checkpoint_id")
        and not configurable.get("checkpoint_ns", "")
    )


def could_vanish(found: CheckpointTuple, policy: RetentionPolicy) -> bool:
    return _rules.leaf_skip(node_of(found), policy, frozenset()) is None


def still_there(target: CheckpointTuple, backend: Backend) -> Flow[bool]:
    """Whether `target`'s row still exists: one probe by primary key."""
    node = node_of(target)
    thread_id = str(target.config["configurable"]["thread_id"])
    op = backend.load_nodes(thread_id, node.checkpoint_ns, [node.checkpoint_id])
    still: dict[str, CheckpointNode] = yield Transact(op)
    return node.checkpoint_id in still


def vanished_history(
    answer: Mapping[str, Any],
    target: CheckpointTuple,
    channels: Sequence[str],
    backend: Backend,
) -> Flow[Mapping[str, Any]]:
    """Delta history for `target`, an unpinned read's result, even if it was reclaimed since.

    A reclaimed target cloned its parent, so its history is its parent's own
    pending writes on top of the parent's history, seeded at the parent when
    the parent stores the value: what the walk from the target would have
    collected. Any non-empty answer, or a target still present, stands.
    """
    if any(entry.get("writes") or "seed" in entry for entry in answer.values()):
        return answer
    if target.parent_config is None or (yield from still_there(target, backend)):
        return answer
    parent: CheckpointTuple | None = yield Lookup(target.parent_config)
    if parent is None:
        return answer
    below: Mapping[str, Any] = yield History(target.parent_config, channels)
    rebuilt: dict[str, Any] = {}
    for channel in channels:
        own = [w for w in parent.pending_writes or () if w[1] == channel]
        if channel in parent.checkpoint["channel_values"]:
            rebuilt[channel] = {"writes": own, "seed": parent.checkpoint["channel_values"][channel]}
            continue
        entry = dict(below.get(channel, {"writes": []}))
        entry["writes"] = [*entry.get("writes", []), *own]
        rebuilt[channel] = entry
    return rebuilt
