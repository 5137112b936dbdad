"""The interface every storage backend implements, and the plan executor they share.

A backend speaks in operations: generators that yield its own statements (SQL
with bound parameters, or a callable for the in-memory saver) and receive
their rows. It supplies a transaction per `Mode` (`transaction`, and
`atransaction` where its statements are awaited) that yields the executor of
those statements; the drivers in `retaining_saver._effects` feed each
operation's statements to it, so each operation is written once for both ways
of calling and no backend drives one itself (see `_ops`). What a backend can do
beyond the primitives it declares as `Capabilities` (the classes of
`_head_reader` name what those add).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple

from retaining_saver._reclaimed import RECLAIMED_ID_TTL
from retaining_saver._rules import (
    BlobKey,
    CheckpointNode,
    Deletion,
    DeletionFacts,
    LeafFacts,
    Lineage,
    NodeKey,
    Plan,
    Skip,
)
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._recheck import Applied, LeafTake, ParentChange, PlanRecheck, RowKey
from retaining_saver.backends._apply import apply_plan
from retaining_saver.backends._ops import AExecute as AExecute
from retaining_saver.backends._ops import AwaitedTransactions as AwaitedTransactions
from retaining_saver.backends._ops import Capabilities as Capabilities
from retaining_saver.backends._ops import Execute as Execute
from retaining_saver.backends._ops import Integrity as Integrity
from retaining_saver.backends._ops import Mode as Mode
from retaining_saver.backends._ops import Op as Op
from retaining_saver.backends._ops import T as T
from retaining_saver.backends._ops import on_saver_loop as on_saver_loop
from retaining_saver.backends._ops import window_size as window_size
from retaining_saver.backends._resumed_writes import ResumedWrites
from retaining_saver.backends._stats import (
    ChannelStats,
    SpaceStats,
    StorageStats,
    TableStats,
    ThreadStats,
)


class Backend(ResumedWrites, ABC):
    """Loads lineage and carries out plans for one saver.

    Subclasses implement the primitives below as operations, and the transactions
    they run in; `apply_plan` is shared.
    """

    kind: ClassVar[str]
    tables: ClassVar[tuple[str, ...]]
    stores_blobs: ClassVar[bool]
    holds_nul: ClassVar[bool] = True
    """Whether a thread id may contain NUL (Postgres text cannot)."""
    loop: asyncio.AbstractEventLoop | None = None
    """An async saver's event loop, where a sync caller's transaction runs; None where the
    calling thread runs it."""
    awaited: AwaitedTransactions | None = None
    """The backend itself where its statements are awaited on `loop` (its
    `atransaction`); None where an async caller runs the sync `transaction` whole, where
    `hop` puts it."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.reclaimed_ttl = RECLAIMED_ID_TTL
        # What of the saver's internals no longer matches the audit (`_upstream`).
        self.drift: list[str] = []
        self.capabilities = self.declare(saver)

    def declare(self, saver: BaseCheckpointSaver[Any]) -> Capabilities:
        """What this backend can do over `saver`; by default nothing beyond the primitives."""
        return Capabilities()

    @property
    def matches_audit(self) -> bool:
        """Whether the saver's internals match what `_upstream` audited, so the fast paths
        built on them may run. Else every read goes through the saver."""
        return not self.drift

    def create_indexes(self) -> None:
        """Create what keeps this backend's statements flat on a large store; by default
        nothing (a backend that needs an index creates it on first use)."""
        return None

    async def acreate_indexes(self) -> None:
        """Async `create_indexes`."""
        return None

    def stored(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any) -> None:
        """The saver stored `checkpoint` with `metadata` at `config` (as put), through a
        wrapper whose passes will read the thread: by default nothing (`_sqlite_lineage`)."""
        return None

    def permission_problem(self, error: BaseException) -> str | None:
        """What `error` says is not permitted, if it is the store refusing a privilege
        (a read-only database, a role without DELETE); else None."""
        return None

    # Transactions

    @abstractmethod
    def transaction(self, mode: Mode) -> AbstractContextManager[Execute]:
        """The transaction `mode` calls for, on the saver's connection, yielding the executor
        of this backend's statements: ended with a commit when the block ends, with a
        rollback if it raises."""

    async def hop(self, call: Callable[[], T]) -> T:
        """`call()`, a sync transaction with its statements, run whole where this backend's
        connection can be used for an async caller: by default in a worker thread, as the
        async savers run a blocking call."""
        return await asyncio.to_thread(call)

    # Primitives

    @abstractmethod
    def load_lineage(self, thread_id: str, newest: int | None = None) -> Op[Lineage]:
        """Every checkpoint of the thread: ids, parents, versions, write counts, metadata.
        With `newest`, a window: the rows at or above the `newest`-th newest root
        checkpoint's id (`Lineage.windowed`), bounded by `newest`, not the thread.

        Postgres reads these through JSONB operators; SQLite must decode each
        checkpoint payload, since its versions live inside it.

        Raises:
            ValueError: If `newest` is given and is not a positive int (`window_size`).
        """

    @abstractmethod
    def load_nodes(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, CheckpointNode]]:
        """The named checkpoints of one namespace that exist, by id."""

    @abstractmethod
    def head_node(self, thread_id: str, checkpoint_ns: str) -> Op[CheckpointNode | None]:
        """The newest checkpoint of the namespace, without its channel values.

        One statement: it runs as a read, outside any transaction, so two
        statements could see a row deleted between them.
        """

    def leaf_facts(
        self, thread_id: str, checkpoint_ns: str, leaf_id: str, parent_id: str | None
    ) -> Op[LeafFacts]:
        """The leaf and its parent by primary key, the leaf's guards, and the parent's row."""
        nodes, parent_row = yield from self.leaf_rows(thread_id, checkpoint_ns, leaf_id, parent_id)
        return LeafFacts(
            leaf=nodes.get(leaf_id),
            parent=nodes.get(parent_id) if parent_id is not None else None,
            has_children=(yield from self.has_children(thread_id, checkpoint_ns, leaf_id)),
            newest_id=(yield from self.newest_id(thread_id, checkpoint_ns)),
            runner_up_id=(yield from self.newest_id(thread_id, checkpoint_ns, below=leaf_id)),
            parent_row=parent_row,
        )

    def leaf_rows(
        self, thread_id: str, checkpoint_ns: str, leaf_id: str, parent_id: str | None
    ) -> Op[tuple[dict[str, CheckpointNode], Any]]:
        """The leaf and parent nodes found, and the parent's row as `parent_tuple` wants it.

        By default `parent_tuple` needs no row (None).
        """
        ids = [leaf_id] if parent_id is None else [leaf_id, parent_id]
        nodes = yield from self.load_nodes(thread_id, checkpoint_ns, ids)
        return nodes, None

    def take_leaf(self, thread_id: str, deletion: Deletion) -> Op[bool]:
        """Delete the leaf `leaf_verdict` chose; False if it was gone.

        Its facts were read in this same transaction, under the write lock, so
        nothing they prove can have changed; a backend that reads them outside
        its delete must re-check them in the delete itself.
        """
        return (yield from self.delete_as_planned(thread_id, deletion))

    def delete_as_planned(self, thread_id: str, deletion: Deletion) -> Op[bool]:
        """Delete `deletion`'s checkpoint; a clone's id keeps resolving to what it cloned."""
        ns, checkpoint_id = deletion.checkpoint_ns, deletion.checkpoint_id
        deleted = yield from self.delete_checkpoint(thread_id, ns, checkpoint_id)
        if deleted and deletion.clone_of is not None:
            yield from self.record_reclaimed(thread_id, ns, checkpoint_id, deletion.clone_of)
        return deleted

    @abstractmethod
    def parent_tuple(self, leaf: CheckpointTuple, facts: LeafFacts) -> CheckpointTuple | None:
        """What an unpinned read returns once `leaf` is gone: its parent, from `facts`.

        None when the backend cannot build it exactly; the caller reads it then.
        """

    @abstractmethod
    def has_children(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        """Whether any checkpoint names `checkpoint_id` as its parent."""

    @abstractmethod
    def newest_id(
        self, thread_id: str, checkpoint_ns: str, below: str | None = None
    ) -> Op[str | None]:
        """The latest checkpoint id of the namespace (of those less than `below`, if given)."""

    @abstractmethod
    def delete_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        """Delete one checkpoint row and the writes rows keyed by its id.

        Answers False, deleting nothing, if the row was already gone.
        """

    @abstractmethod
    def record_reclaimed(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, clone_id: str
    ) -> Op[None]:
        """Record, in the deleting transaction, that `checkpoint_id` went as a duplicate of
        `clone_id`; and forget the thread's records older than `reclaimed_ttl`."""

    @abstractmethod
    def reclaimed_clone(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[str | None]:
        """The clone a reclaimed `checkpoint_id` was a duplicate of, within `reclaimed_ttl`;
        None if it was not reclaimed (or no record exists yet). A read."""

    @abstractmethod
    def forget_reclaimed(self, thread_id: str) -> Op[None]:
        """Delete every reclaim record and resume ledger entry of `thread_id`, once its
        checkpoints are gone."""

    @abstractmethod
    def children_of(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, set[str]]]:
        """The children of each named checkpoint that has any, by its id."""

    @abstractmethod
    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]:
        """Point each checkpoint at its new parent (None: a root), each only if it still
        has the parent the change names; how many changed."""

    @abstractmethod
    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]:
        """Delete each checkpoint that still has the parent named, with its writes rows;
        how many were deleted."""

    @abstractmethod
    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]:
        """Store each channel's value whole at the checkpoint, under the version given with
        it, as LangGraph stores a DeltaChannel snapshot (`_upstream.delta_snapshot`);
        False, storing nothing, if the checkpoint is gone or holds other versions."""

    @abstractmethod
    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey], since: str = ""
    ) -> Op[list[BlobKey]]:
        """Delete each candidate blob no surviving checkpoint at or above `since` (a window
        plan's `Plan.window_start`: none below can) references; return those."""

    def stored_blobs(self, thread_id: str, candidates: Sequence[BlobKey]) -> Op[list[BlobKey]]:
        """The candidates that have a blob row: what a dry run reports as freed.

        Args:
            thread_id: The thread whose blobs to look up.
            candidates: The plan's freed blob keys.

        Returns:
            The candidates stored as blob rows, in their order.
        """
        yield from ()
        return list(candidates)

    @abstractmethod
    def run_threads(self, run_ids: Sequence[str]) -> Op[list[str]]:
        """The threads holding a checkpoint whose metadata names one of `run_ids`, or a
        resume ledger entry of one, in order."""

    @abstractmethod
    def forget_reclaimed_clones(self, thread_id: str, keys: Sequence[NodeKey]) -> Op[None]:
        """Delete the reclaim records that resolve to one of `keys` (deleted checkpoints)."""

    @abstractmethod
    def thread_exists(self, thread_id: str) -> Op[bool]:
        """Whether the thread has any checkpoint."""

    @abstractmethod
    def copy_rows(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        """Copy every checkpoint, writes row, blob, reclaim record and resume ledger entry
        of the source thread under the target id, each otherwise unchanged."""

    @abstractmethod
    def stats(self, thread_id: str | None) -> Op[StorageStats]:
        """Rows and bytes per table for the thread, or for the whole store."""

    @abstractmethod
    def gone_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, TableStats]]:
        """Per table, the rows and bytes of the named checkpoints (with their writes) and
        blobs: what deleting them frees. A read."""

    @abstractmethod
    def channel_stats(self, thread_id: str | None) -> Op[dict[str, ChannelStats]]:
        """Per channel, its stored values and writes, for the thread or the whole store."""

    @abstractmethod
    def gone_channel_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, ChannelStats]]:
        """`gone_stats` per channel: the values and writes of the named checkpoints and
        blobs, as `channel_stats` counts them. A read."""

    @abstractmethod
    def top_threads(self, limit: int) -> Op[list[ThreadStats]]:
        """The `limit` threads holding the most bytes, most first, aggregated in the store."""

    def space(self) -> Op[SpaceStats | None]:
        """The whole store's space on disk; None where it has none (memory)."""
        yield from ()
        return None

    @abstractmethod
    def thread_ids(self, after: str | None, limit: int) -> Op[list[str]]:
        """Up to `limit` thread ids greater than `after`, in order."""

    @abstractmethod
    def integrity(self, thread_id: str) -> Op[Integrity]:
        """Count the thread's dangling parents, orphan writes and orphan blobs."""

    # Shared

    def apply_plan(
        self,
        thread_id: str,
        plan: Plan,
        values: Mapping[NodeKey, Mapping[str, Any]] | None = None,
    ) -> Op[Applied]:
        """Carry out `plan`, re-checked on the rows as they are now (see `_apply`);
        `values`: the channel values each `Materialise` stores."""
        return (yield from apply_plan(self, thread_id, plan, values or {}))

    def reclaim_leaf(
        self,
        thread_id: str,
        leaf: CheckpointNode,
        policy: RetentionPolicy,
        protected: frozenset[str],
        *,
        with_parent_row: bool = True,
    ) -> Op[LeafFacts | Skip]:
        """Delete `leaf` if the rules' take allows it on the rows as they are now.

        Answers the facts of the leaf taken, or the reason nothing was deleted.
        `with_parent_row`: the facts carry what `parent_tuple` needs to build the
        parent's tuple (a backend may skip reading it otherwise).
        """
        facts = yield from self.leaf_facts(
            thread_id, leaf.checkpoint_ns, leaf.checkpoint_id, leaf.parent_id
        )
        verdict = LeafTake(policy, protected).verdict(facts)
        if isinstance(verdict, Skip):
            return verdict
        taken = yield from self.take_leaf(thread_id, verdict)
        return facts if taken else Skip.PRECONDITION_CHANGED

    def deletion_facts(self, thread_id: str, deletion: Deletion) -> Op[DeletionFacts]:
        """What the rules re-check `deletion` on (`FactsToRead`), each read for it now."""
        ns, wanted = deletion.checkpoint_ns, PlanRecheck.facts_to_read(deletion)
        now = yield from self.load_nodes(thread_id, ns, wanted.ids)
        has_children = yield from self.has_children(thread_id, ns, deletion.checkpoint_id)
        newest = runner_up = None
        if wanted.head:
            newest = yield from self.newest_id(thread_id, ns)
            runner_up = yield from self.newest_id(thread_id, ns, below=deletion.checkpoint_id)
        parent = now.get(deletion.clone_of) if deletion.clone_of is not None else None
        node = now.get(deletion.checkpoint_id)
        return DeletionFacts(node, parent, has_children, newest, runner_up)
