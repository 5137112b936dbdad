"""Bounded admission cleanup: reclaim the trailing duration leaf before a run reads.

The admission read itself is the head lookup; an explicit `admit` looks the
head up without its channel values. A head that is not shaped like a duration
leaf ends admission there. Otherwise each round (one per stacked leaf, at most
`MAX_STACKED_LEAVES`) invalidates the history caches for the leaf, then runs
the backend's `reclaim_leaf`: the leaf, its parent, the leaf's writes and its
guards read by primary key and judged by the rules, then one guarded delete
(on Postgres one statement that re-checks them all, the rules naming the
reason when it took nothing). The run is answered with the parent, built
from the rows that round read. It never lists the thread, scans writes,
gathers statistics or collects blobs: a reclaimed leaf clones its parent,
which references every blob the leaf did.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from retaining_saver import _rules
from retaining_saver._effects import (
    FellBack,
    Flow,
    Invalidate,
    Lookup,
    Mode,
    Offload,
    Run,
)
from retaining_saver._rules import (
    CheckpointNode,
    LeafFacts,
    MarkerShape,
    NodeKey,
    RetentionPolicy,
    Skip,
)
from retaining_saver._run_reads import run_selectors
from retaining_saver.backends._base import Backend, Op, T
from retaining_saver.backends._head_reader import HeadReader, OneRoundBackend

logger = logging.getLogger("retaining_saver")

FAST_READ = "the admission read's fast path"
"""How `counters.fallbacks` names a failed build of the head the admission read selected."""


@dataclass(frozen=True)
class AdmissionResult:
    """What one admission did.

    Attributes:
        thread_id: The admitted thread.
        reclaimed: Ids deleted, newest first; empty if nothing was.
        skipped: Why nothing (or not everything) was reclaimed, else None.
        head_id: The id of the checkpoint the run starts from (the newest
            once the reclaimed ones are gone); None for an empty thread.
        history_reclaimed: (namespace, id) of each checkpoint the saver's
            `retention` policy deleted in this admission (see `_bounding`).
    """

    thread_id: str
    reclaimed: tuple[str, ...]
    skipped: Skip | None
    head_id: str | None = None
    history_reclaimed: tuple[NodeKey, ...] = ()


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
        format_version=CheckpointNode.format_version_of(checkpoint.get("v")),
    )


def namespace(config: RunnableConfig) -> str:
    """The checkpoint namespace `config` names: '' for the thread's root graph."""
    return cast(str, config.get("configurable", {}).get("checkpoint_ns", ""))


_STACK_ENDS = frozenset(
    {
        Skip.NOT_A_DURATION_LEAF,
        Skip.PROTECTED_ID,
        Skip.OWNS_WRITES,
        Skip.MISSING_PARENT,
        Skip.PARENT_STATE_DIFFERS,
    }
)

Admitted = tuple[AdmissionResult, CheckpointTuple | None]
"""What admission did, and the tuple the admitted run reads (None unless it read one)."""


def admit_read(
    thread_id: str,
    read_config: RunnableConfig,
    backend: Backend,
    policy: RetentionPolicy,
    protected: frozenset[str],
    head: CheckpointTuple | None,
    marker: MarkerShape | None = None,
) -> Flow[Admitted]:
    """Reclaim the stack of duration leaves on `head`, what the admission read returned.

    With `marker` instead of a head (a backend that takes as it reads), the read itself takes
    the trailing leaf the marker names (see `_admit_in_one_round`), and the
    stack goes on from the head it read.
    """
    reclaimed: list[str] = []
    if marker is not None:
        ids = protected | policy.protect_checkpoint_ids
        one_round = cast(OneRoundBackend, backend)  # a marker only where it takes as it reads
        flow = _admit_in_one_round(thread_id, read_config, one_round, ids, marker)
        head, reclaimed = yield from flow
        if head is not None and not _rules.may_have_marker(head.metadata, policy):
            # The common case, told from the metadata alone: no leaf is left to take.
            skip = None if reclaimed else Skip.NOT_A_DURATION_LEAF
            result = AdmissionResult(thread_id, tuple(reclaimed), skip, head.checkpoint["id"])
            return result, head
    node = node_of(head) if head is not None else None
    return (
        yield from _take_stack(
            thread_id, read_config, backend, policy, protected, node, head, reclaimed, read=True
        )
    )


def _admit_in_one_round(
    thread_id: str,
    read_config: RunnableConfig,
    backend: OneRoundBackend,
    protected: frozenset[str],
    marker: MarkerShape,
) -> Flow[tuple[CheckpointTuple | None, list[str]]]:
    """Read the head as its trailing leaf, if any, is taken: the head and the ids taken.

    The store judges the leaf by `marker`, the rules' own; a statement that
    raised is asked about by its token, since it may have committed.
    """
    ns, token = namespace(read_config), os.urandom(16).hex()
    try:
        op = backend.admit_and_read(thread_id, ns, marker, protected, token)
        taken, row = yield Run(op, Mode.GUARDED)
    except Exception as error:
        lost = yield from _taken_by(thread_id, ns, token, backend)
        if lost is None:
            raise
        logger.warning("the take of %s committed, but its reply was lost: %r", lost, error)
        return (yield Lookup(read_config)), [lost]
    head = None
    if row is not None:
        try:
            # After a take, built in place: no suspension between it and its record.
            head = yield from _tuple_of_row(backend, row, offload=taken is None)
        except Exception as error:
            yield FellBack(FAST_READ, error)
        if head is None:
            head = yield Lookup(read_config)
    return head, [] if taken is None else [taken]


def _taken_by(thread_id: str, ns: str, token: str, backend: OneRoundBackend) -> Flow[str | None]:
    """The id an admission read with `token` took though it raised; None if it took none,
    or if asking fails."""
    try:
        taken: str | None = yield Run(backend.taken_by(thread_id, ns, token), Mode.READ)
    except Exception:
        return None
    return taken


def read_head(
    thread_id: str, config: RunnableConfig, backend: HeadReader
) -> Flow[CheckpointTuple | None]:
    """The async admission read, where the saver's own costs more than its statements
    (`Capabilities.reads_head`).

    Answers what `await inner.aget_tuple(config)` answers: the backend runs
    the saver's statements in one round and builds the tuple as the saver
    does, deserializing pending writes in a worker thread only where the
    saver does and there are some.
    """
    row = yield Run(backend.head_row(thread_id, namespace(config)), Mode.READ)
    if row is None:
        return None
    return (yield from _built_or_read(_tuple_of_row(backend, row), config, None))


def _tuple_of_row(
    backend: HeadReader, row: Any, *, offload: bool = True
) -> Flow[CheckpointTuple | None]:
    """The tuple the saver builds from `row`; None where only the saver can build it.

    Pending writes are deserialized where the saver does it (a worker thread,
    for the async Postgres saver), unless `offload` is False.
    """
    load = backend.row_writes(row) if offload else None
    writes = None if load is None else (yield Offload(load))
    return backend.read_tuple(row, writes)


def _in_place(build: Callable[[], CheckpointTuple | None]) -> Flow[CheckpointTuple | None]:
    """`build()` as a flow with no effects: it runs in place, whichever the driver."""
    yield from ()
    return build()


def admit_explicit(
    thread_id: str,
    config: RunnableConfig,
    backend: Backend,
    policy: RetentionPolicy,
    protected: frozenset[str],
) -> Flow[Admitted]:
    """Reclaim the stack of duration leaves on the head, looked up without its values."""
    node = yield from head_node(thread_id, config, backend)
    flow = _take_stack(thread_id, config, backend, policy, protected, node, None, read=False)
    return (yield from flow)


def head_node(
    thread_id: str, config: RunnableConfig, backend: Backend
) -> Flow[CheckpointNode | None]:
    """The newest checkpoint of `config`'s namespace, without its values; a read."""
    node: CheckpointNode | None = yield Run(
        backend.head_node(thread_id, namespace(config)), Mode.READ
    )
    return node


def _take_stack(
    thread_id: str,
    read_config: RunnableConfig,
    backend: Backend,
    policy: RetentionPolicy,
    protected: frozenset[str],
    node: CheckpointNode | None,
    head: CheckpointTuple | None,
    reclaimed_already: Sequence[str] = (),
    *,
    read: bool,
) -> Flow[Admitted]:
    """Reclaim leaves from `node` down; with `read`, keep `head` the tuple the run reads."""
    reclaimed = list(reclaimed_already)
    skip: Skip | None = None if node is not None else Skip.EMPTY_THREAD
    while node is not None and len(reclaimed) < _rules.MAX_STACKED_LEAVES:
        if (skip := _rules.leaf_skip(node, policy, protected)) is not None:
            break
        try:
            op = backend.reclaim_leaf(thread_id, node, policy, protected, with_parent_row=read)
            facts = yield from _cache_safe_take(thread_id, node, op, _is_taken)
        except Exception as error:
            if (yield from _taken_anyway(thread_id, node, backend)):
                reclaimed.append(node.checkpoint_id)  # committed; only the reply was lost
            if not reclaimed:
                raise  # nothing committed: the caller's failsafe reports it
            # Earlier rounds are committed: report them, and read the head as it is now.
            logger.warning("retention round failed after reclaiming %s: %r", reclaimed, error)
            head, node = yield from _head_now(thread_id, read_config, backend, read=read)
            head_id = node.checkpoint_id if node is not None else None
            return AdmissionResult(thread_id, tuple(reclaimed), Skip.FAILED, head_id), head
        if facts is None:
            skip = Skip.CACHE_INVALIDATION_FAILED
            break
        if isinstance(facts, Skip):
            skip = facts
            break
        reclaimed.append(node.checkpoint_id)
        leaf_id, node = node.checkpoint_id, facts.parent
        if read and head is not None:
            build = _in_place(partial(backend.parent_tuple, head, facts))
            head = yield from _built_or_read(build, read_config, f"reclaimed {leaf_id}")
            node = node_of(head) if head is not None else None
    if reclaimed and skip in _STACK_ENDS:
        skip = None  # the stack ended at its first checkpoint that is not a reclaimable leaf
    if skip is Skip.PRECONDITION_CHANGED:
        # Someone else changed the thread meanwhile: find the head as it is now.
        head, node = yield from _head_now(thread_id, read_config, backend, read=read)
    head_id = node.checkpoint_id if node is not None else None
    return AdmissionResult(thread_id, tuple(reclaimed), skip, head_id), head


def _taken_anyway(thread_id: str, leaf: CheckpointNode, backend: Backend) -> Flow[bool]:
    """After a take that raised: whether it committed all the same (a lost reply), told by
    the store. The leaf is gone, and the reclaim record written with its delete names
    its parent. A failing probe says no."""
    ns, leaf_id = leaf.checkpoint_ns, leaf.checkpoint_id
    try:
        found = yield Run(backend.load_nodes(thread_id, ns, [leaf_id]), Mode.READ)
        if leaf_id in found:
            return False
        clone = yield Run(backend.reclaimed_clone(thread_id, ns, leaf_id), Mode.READ)
    except Exception:
        return False
    return clone is not None and clone == leaf.parent_id


def _head_now(
    thread_id: str, config: RunnableConfig, backend: Backend, *, read: bool
) -> Flow[tuple[CheckpointTuple | None, CheckpointNode | None]]:
    """The head as it is now: read through the saver for a run (`read`), else its node."""
    if read:
        head: CheckpointTuple | None = yield Lookup(config)
        return head, node_of(head) if head is not None else None
    return None, (yield from head_node(thread_id, config, backend))


def _is_taken(answer: LeafFacts | Skip) -> bool:
    return isinstance(answer, LeafFacts)


def _cache_safe_take(
    thread_id: str, leaf: CheckpointNode, op: Op[T], taken: Callable[[T], bool]
) -> Flow[T | None]:
    """`op`, the take of `leaf`, with every history cache forgetting the leaf before it
    and again after a take; None, with nothing taken, if the first invalidation fails."""
    ids = [leaf.checkpoint_id]
    try:
        yield Invalidate(thread_id, leaf.checkpoint_ns, ids)
    except Exception as error:
        logger.warning(
            "history cache invalidation failed for checkpoint %s; it is kept: %r",
            leaf.checkpoint_id,
            error,
        )
        return None
    answer: T = yield Run(op, Mode.GUARDED)
    if taken(answer):
        try:
            # A reader may have refilled a cache between the invalidation and the delete.
            yield Invalidate(thread_id, leaf.checkpoint_ns, ids)
        except Exception as error:
            logger.warning(
                "history cache invalidation after reclaiming %s failed; a cache may still "
                "answer for it: %r",
                leaf.checkpoint_id,
                error,
            )
    return answer


def _built_or_read(
    build: Flow[CheckpointTuple | None], read_config: RunnableConfig, taken: str | None
) -> Flow[CheckpointTuple | None]:
    """The head the run reads: what `build` builds, else a fresh read through the saver.

    After the take of `taken` ("reclaimed ID" or "kept ID") the leaf may
    already be deleted, so a failed build must not fail the admission: that
    would report nothing reclaimed for a leaf that is gone. With no take
    (`taken` None) a failed build fails the read, as the saver's own would.
    """
    try:
        built = yield from build
    except Exception:
        if taken is None:
            raise
        logger.warning(
            "could not build the head after the take of checkpoint (%s); reading it instead",
            taken,
            exc_info=True,
        )
        built = None
    if built is not None:
        return built
    found: CheckpointTuple | None = yield Lookup(read_config)
    return found


def head_skip(
    head: CheckpointTuple | None, policy: RetentionPolicy, config: RunnableConfig
) -> Skip | None:
    """Why admission can stop at the head `config` read, before taking any lock, else None.

    An ordinary head is dismissed on its metadata alone: this runs on every run.
    """
    if head is None:
        return Skip.EMPTY_THREAD
    if not _rules.may_have_marker(head.metadata, policy):
        return Skip.NOT_A_DURATION_LEAF
    return _rules.leaf_skip(node_of(head), policy, run_selectors(config))
