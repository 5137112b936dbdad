"""`InMemorySaver`: `storage[thread][ns][id] = (checkpoint, metadata, parent_id)`,
`writes[(thread, ns, id)] = {(task_id, idx): ...}`, `blobs[(thread, ns, channel, version)]`.

Statements are closures over the saver's dicts. `writes` is a defaultdict, so a
checkpoint may have an empty entry that was only ever read: it owns no writes.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from operator import itemgetter
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver._rules import BlobKey, CheckpointNode, LeafFacts, Lineage
from retaining_saver._rules._recheck import ParentChange, RowKey
from retaining_saver.backends._base import Execute, Integrity, Mode, Op, T, window_size
from retaining_saver.backends._memory_resumes import MemoryResumes
from retaining_saver.backends._memory_rows import Journalled, MemoryThreads, drop, journal
from retaining_saver.backends._memory_stats import MemoryStats
from retaining_saver.backends._upstream import delta_snapshot, stores_delta_snapshots
from retaining_saver.backends._upstream.tuples import memory_tuple

Statement = Callable[[], Any]


def _execute(statement: Statement) -> Any:
    """Run one statement: a closure over the saver's dicts."""
    return statement()


def _set_row(rows: dict[str, Any], checkpoint_id: str, parent_id: str | None) -> None:
    """Point a saved row at another parent, undoably."""
    old = rows[checkpoint_id]
    rows[checkpoint_id] = (old[0], old[1], parent_id)
    journal(partial(rows.__setitem__, checkpoint_id, old))


# Per saver, every reclaim record: (thread, ns, id) -> (clone id, when). Kept
# beside the saver rather than in one backend, so every wrapper of the same
# store (several "workers" in one process) resolves the others' reclaims.
_RECLAIMED: weakref.WeakKeyDictionary[InMemorySaver, dict[tuple[str, str, str], Any]] = (
    weakref.WeakKeyDictionary()
)
_RECLAIMED_LOCK = threading.Lock()


def _names_as_parent(rows: dict[str, Any], checkpoint_id: str) -> bool:
    """Whether any of a namespace's saved rows names `checkpoint_id` as its parent."""
    return checkpoint_id in map(itemgetter(2), rows.values())


class MemoryBackend(MemoryStats, MemoryResumes, MemoryThreads):
    """Backend over an `InMemorySaver`'s three dicts."""

    kind = "memory"
    tables = ("storage", "writes", "blobs")
    stores_blobs = True
    saver: InMemorySaver

    def transaction(self, mode: Mode) -> AbstractContextManager[Execute]:
        """Any mode: if a statement raises, undo what the earlier ones changed, so that
        the operation is one transaction here too."""
        return Journalled(_execute)

    async def hop(self, call: Callable[[], T]) -> T:
        # Nothing here awaits, so the operation is as atomic as a sync call.
        return call()

    def _namespaces(self, thread_id: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = self.saver.storage.get(thread_id, {})
        return found

    def _node(self, thread_id: str, ns: str, checkpoint_id: str, row: Any) -> CheckpointNode:
        checkpoint_typed, metadata_typed, parent_id = row
        checkpoint = self.saver.serde.loads_typed(checkpoint_typed)
        metadata = self.saver.serde.loads_typed(metadata_typed)
        writes = self.saver.writes.get((thread_id, ns, checkpoint_id)) or {}
        versions = checkpoint.get("channel_versions", {})
        return CheckpointNode(
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            channel_versions=versions,
            versions_seen=checkpoint.get("versions_seen", {}),
            write_count=len(writes),
            metadata=metadata,
            ts=checkpoint.get("ts", ""),
            stored=self._stored(thread_id, ns, versions),
            format_version=CheckpointNode.format_version_of(checkpoint.get("v")),
        )

    def _stored(self, thread_id: str, ns: str, versions: Mapping[str, Any]) -> frozenset[str]:
        """The channels whose value a blob holds at their version (`empty` holds none)."""
        blobs = self.saver.blobs
        return frozenset(
            channel
            for channel, version in versions.items()
            if (blob := blobs.get((thread_id, ns, channel, version))) is not None
            and blob[0] != "empty"
        )

    def _iter_nodes(self, thread_id: str) -> Iterator[CheckpointNode]:
        for ns, rows in self._namespaces(thread_id).items():
            for checkpoint_id, row in rows.items():
                yield self._node(thread_id, ns, checkpoint_id, row)

    def load_lineage(self, thread_id: str, newest: int | None = None) -> Op[Lineage]:
        size = window_size(newest)
        nodes = yield lambda: list(self._iter_nodes(thread_id))
        return Lineage.of(thread_id, nodes, stores_whole=stores_delta_snapshots()).windowed(size)

    def load_nodes(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, CheckpointNode]]:
        def statement() -> dict[str, CheckpointNode]:
            rows = self._namespaces(thread_id).get(checkpoint_ns, {})
            return {i: self._node(thread_id, checkpoint_ns, i, rows[i]) for i in ids if i in rows}

        found: dict[str, CheckpointNode] = yield statement
        return found

    def head_node(self, thread_id: str, checkpoint_ns: str) -> Op[CheckpointNode | None]:
        def statement() -> CheckpointNode | None:
            rows = self._namespaces(thread_id).get(checkpoint_ns, {})
            newest = max(rows, default=None)
            if newest is None:
                return None
            return self._node(thread_id, checkpoint_ns, newest, rows[newest])

        found: CheckpointNode | None = yield statement
        return found

    def leaf_facts(
        self, thread_id: str, checkpoint_ns: str, leaf_id: str, parent_id: str | None
    ) -> Op[LeafFacts]:
        """`Backend.leaf_facts` in one statement, each fact one pass in C over the namespace:
        the facts only (the take's `childless` and `newest-parent-next` read them); the
        rules judge them (`LeafTake`)."""

        def statement() -> LeafFacts:
            rows = self._namespaces(thread_id).get(checkpoint_ns, {})
            newest = max(rows, default=None)
            runner_up = max(filter(leaf_id.__gt__, rows), default=None)

            def node(checkpoint_id: str | None) -> CheckpointNode | None:
                if checkpoint_id is None or checkpoint_id not in rows:
                    return None
                return self._node(thread_id, checkpoint_ns, checkpoint_id, rows[checkpoint_id])

            has_children = _names_as_parent(rows, leaf_id)
            return LeafFacts(node(leaf_id), node(parent_id), has_children, newest, runner_up)

        facts: LeafFacts = yield statement
        return facts

    def parent_tuple(self, leaf: CheckpointTuple, facts: LeafFacts) -> CheckpointTuple | None:
        """The tuple the saver's unpinned get_tuple builds for the parent, from its row;
        None on drift, so that the saver reads it."""
        if facts.parent is None or not self.matches_audit:
            return None
        configurable = leaf.config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        parent_id = facts.parent.checkpoint_id
        saved = self._namespaces(thread_id).get(ns, {}).get(parent_id)
        if saved is None:
            return None
        return memory_tuple(self.saver, thread_id, ns, parent_id, saved)

    def has_children(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        rows = self._namespaces(thread_id).get(checkpoint_ns, {})
        found: bool = yield lambda: _names_as_parent(rows, checkpoint_id)
        return found

    def newest_id(
        self, thread_id: str, checkpoint_ns: str, below: str | None = None
    ) -> Op[str | None]:
        rows = self._namespaces(thread_id).get(checkpoint_ns, {})
        # One pass in C over the namespace: admission's take reads both newest ids.
        newest: str | None = yield lambda: max(
            rows if below is None else filter(below.__gt__, rows), default=None
        )
        return newest

    def delete_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        deleted: bool = yield lambda: self._drop_row(thread_id, checkpoint_ns, checkpoint_id)
        return deleted

    def _drop_row(self, thread_id: str, ns: str, checkpoint_id: str, *, parent: Any = ...) -> bool:
        """Delete one row (if it still has `parent`, when given) and its writes, undoably."""
        rows = self._namespaces(thread_id).get(ns, {})
        if checkpoint_id not in rows or (parent is not ... and rows[checkpoint_id][2] != parent):
            return False
        drop(rows, [checkpoint_id])
        drop(self.saver.writes, [(thread_id, ns, checkpoint_id)])
        return True

    def children_of(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, set[str]]]:
        def statement() -> dict[str, set[str]]:
            wanted, found = set(ids), dict[str, set[str]]()
            for child_id, row in self._namespaces(thread_id).get(checkpoint_ns, {}).items():
                if row[2] in wanted:
                    found.setdefault(row[2], set()).add(child_id)
            return found

        children: dict[str, set[str]] = yield statement
        return children

    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]:
        def statement() -> int:
            changed = 0
            for ns, child_id, old, new in changes:
                rows = self._namespaces(thread_id).get(ns, {})
                there = new is None or new in rows
                if child_id in rows and rows[child_id][2] == old and there:
                    _set_row(rows, child_id, new)
                    changed += 1
            return changed

        changed: int = yield statement
        return changed

    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]:
        def statement() -> int:
            deleted = 0
            for ns, checkpoint_id, parent, consumed in rows:
                stored = self._namespaces(thread_id).get(ns, {})
                owns = bool(self.saver.writes.get((thread_id, ns, checkpoint_id)))
                if _names_as_parent(stored, checkpoint_id):  # check: childless
                    continue
                if owns and not consumed:  # check: no-pending-writes
                    continue
                # check: parent-as-proven
                deleted += self._drop_row(thread_id, ns, checkpoint_id, parent=parent)
            return deleted

        deleted: int = yield statement
        return deleted

    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]:
        """Each value as the saver stores a snapshot: a blob at the channel's version."""

        def statement() -> bool:
            row = self._namespaces(thread_id).get(checkpoint_ns, {}).get(checkpoint_id)
            if row is None:
                return False
            versions = self.saver.serde.loads_typed(row[0]).get("channel_versions", {})
            # check: versions-as-planned
            if any(str(versions.get(c)) != version for c, (version, _) in values.items()):
                return False
            for channel, (_, value) in values.items():
                key = (thread_id, checkpoint_ns, channel, versions[channel])
                drop(self.saver.blobs, [key])
                self.saver.blobs[key] = self.saver.serde.dumps_typed(delta_snapshot(value))
                journal(partial(self.saver.blobs.pop, key, None))
            return True

        stored: bool = yield statement
        return stored

    def _records(self) -> dict[tuple[str, str, str], Any]:
        with _RECLAIMED_LOCK:
            return _RECLAIMED.setdefault(self.saver, {})

    def record_reclaimed(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, clone_id: str
    ) -> Op[None]:
        def statement() -> None:
            records, now = self._records(), time.time()
            oldest = now - self.reclaimed_ttl.total_seconds()
            key = (thread_id, checkpoint_ns, checkpoint_id)
            drop(
                records, [k for k, (_, at) in records.items() if k[0] == thread_id and at < oldest]
            )
            drop(records, [key])
            records[key] = (clone_id, now)
            journal(partial(records.pop, key, None))

        yield statement

    def reclaimed_clone(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[str | None]:
        def statement() -> str | None:
            found = self._records().get((thread_id, checkpoint_ns, checkpoint_id))
            if found is None or time.time() - found[1] > self.reclaimed_ttl.total_seconds():
                return None
            clone: str = found[0]
            return clone

        clone: str | None = yield statement
        return clone

    def forget_reclaimed(self, thread_id: str) -> Op[None]:
        def statement() -> None:
            records = self._records()
            drop(records, [k for k in records if k[0] == thread_id])
            self.forget_resumptions(thread_id)

        yield statement

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey], since: str = ""
    ) -> Op[list[BlobKey]]:
        def statement() -> list[BlobKey]:
            referenced = {
                (n.checkpoint_ns, channel, version)
                for n in self._iter_nodes(thread_id)
                if n.checkpoint_id >= since
                for channel, version in n.channel_versions.items()
            }
            freed = [
                key
                for key in candidates
                if key not in referenced and (thread_id, *key) in self.saver.blobs
            ]
            for ns, channel, version in freed:
                blob_key = (thread_id, ns, channel, version)
                blob = self.saver.blobs.pop(blob_key)
                journal(partial(self.saver.blobs.__setitem__, blob_key, blob))
            return freed

        freed: list[BlobKey] = yield statement
        return freed

    def integrity(self, thread_id: str) -> Op[Integrity]:
        def statement() -> Integrity:
            namespaces = self._namespaces(thread_id)
            nodes = list(self._iter_nodes(thread_id))
            referenced = {
                (n.checkpoint_ns, c, v) for n in nodes for c, v in n.channel_versions.items()
            }
            return Integrity(
                dangling_parents=sum(
                    1
                    for n in nodes
                    if n.parent_id is not None and n.parent_id not in namespaces[n.checkpoint_ns]
                ),
                orphan_writes=sum(
                    len(rows)
                    for (t, ns, cid), rows in self.saver.writes.items()
                    if t == thread_id and cid not in namespaces.get(ns, {})
                ),
                orphan_blobs=sum(
                    1
                    for (t, *key) in self.saver.blobs
                    if t == thread_id and tuple(key) not in referenced
                ),
            )

        found: Integrity = yield statement
        return found

    def thread_ids(self, after: str | None, limit: int) -> Op[list[str]]:
        def statement() -> list[str]:
            ids = sorted(t for t, nss in self.saver.storage.items() if any(nss.values()))
            return [t for t in ids if after is None or t > after][:limit]

        found: list[str] = yield statement
        return found


def make_backend(saver: InMemorySaver) -> MemoryBackend:
    return MemoryBackend(saver)
