"""Admission on SQLite: the saver's own reads, run in one hop, and the leaf's rows.

Over `AsyncSqliteSaver` the async admission read runs the saver's own read
statements here (`head_row`): both in one hop to aiosqlite's thread, under
the saver's lock and outside any transaction, where the saver takes six. The
tuples are built as the saver builds them, from the same
statements and the same upstream helpers (`_upstream.tuples`), so that a
wrapped read answers what a bare one would; on drift (`matches_audit` false) the saver reads
for itself.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    PendingWrite,
)
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retaining_saver._rules import CheckpointNode, LeafFacts
from retaining_saver.backends._base import Capabilities, Op
from retaining_saver.backends._sql import SqlBackend, Statement
from retaining_saver.backends._sqlite_plan import checkpoint_of, node_of
from retaining_saver.backends._sqlite_sql import (
    SELECT_HEAD_ROW_SQL,
    SELECT_NODES_SQL,
    SELECT_PENDING_WRITES_NO_TASK_PATH_SQL,
    SELECT_PENDING_WRITES_SQL,
)
from retaining_saver.backends._upstream.tuples import sqlite_tuple, sqlite_writes


class SqliteAdmission(SqlBackend):
    """`SqliteBackend`'s admission primitives."""

    saver: SqliteSaver | AsyncSqliteSaver

    def leaf_rows(
        self, thread_id: str, checkpoint_ns: str, leaf_id: str, parent_id: str | None
    ) -> Op[tuple[dict[str, CheckpointNode], Any]]:
        """Each row's node as a lineage load reads it (`_node`: no values rebuilt), but the
        parent's where `parent_tuple` needs its row decoded whole (with its writes): that
        one decode gives its node too."""
        ids = [leaf_id] if parent_id is None else [leaf_id, parent_id]
        params = (str(thread_id), checkpoint_ns, self._ids_param(ids))
        rows = {r["checkpoint_id"]: r for r in (yield Statement(SELECT_NODES_SQL, params))}
        whole = parent_id if parent_id in rows and self.matches_audit else None
        nodes = {i: self._node(r, r["write_count"]) for i, r in rows.items() if i != whole}
        if whole is None:
            return nodes, None
        row = rows[whole]
        parent = checkpoint_of(self.saver, row)
        nodes[whole] = node_of(row, parent, row["write_count"])
        writes = yield from self._pending_writes(thread_id, checkpoint_ns, whole)
        return nodes, (row, parent, writes)

    def _pending_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[list[tuple[Any, ...]]]:
        """A checkpoint's writes as the saver selects them, for `load_pending_writes`."""
        key = (str(thread_id), checkpoint_ns, checkpoint_id)
        # `pending_writes_sql(has_task_path)`, as the saver words it (`_upstream` audits both).
        sql = (
            SELECT_PENDING_WRITES_SQL
            if self.saver._has_task_path
            else SELECT_PENDING_WRITES_NO_TASK_PATH_SQL
        )
        rows = yield Statement(sql, key)
        return [tuple(r.values()) for r in rows]

    def parent_tuple(self, leaf: CheckpointTuple, facts: LeafFacts) -> CheckpointTuple | None:
        """The tuple the saver's unpinned get_tuple builds from the parent's row; None on
        drift, so that the saver reads it."""
        if facts.parent_row is None or not self.matches_audit:
            return None
        row, checkpoint, writes = facts.parent_row
        thread_id = str(leaf.config["configurable"]["thread_id"])
        return sqlite_tuple(thread_id, row, checkpoint, sqlite_writes(self.saver, writes))

    def declare(self, saver: BaseCheckpointSaver[Any]) -> Capabilities:
        """It reads the head itself over an `AsyncSqliteSaver` (the sync saver's read has
        no hops to save), and compacts."""
        return Capabilities(reads_head=isinstance(saver, AsyncSqliteSaver), compacts=True)

    def head_row(self, thread_id: str, checkpoint_ns: str) -> Op[Any]:
        """The saver's own statements: the newest row, then its pending writes."""
        rows = yield Statement(SELECT_HEAD_ROW_SQL, (str(thread_id), checkpoint_ns))
        if not rows:
            return None
        row = {**rows[0], "checkpoint_ns": checkpoint_ns}
        found = self._pending_writes(thread_id, checkpoint_ns, row["checkpoint_id"])
        row["writes"] = yield from found
        return row

    def row_writes(self, row: Any) -> None:
        """None: the saver deserializes pending writes in place, as `read_tuple` does."""
        return None

    def read_tuple(
        self, row: Any, writes: list[PendingWrite] | None = None
    ) -> CheckpointTuple | None:
        """The tuple the saver's `aget_tuple` builds from what `head_row` read."""
        if writes is None:
            writes = sqlite_writes(self.saver, row["writes"])
        return sqlite_tuple(row["thread_id"], row, checkpoint_of(self.saver, row), writes)
