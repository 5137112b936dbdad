"""SQLite lineage loads that read each checkpoint's payload and metadata once.

A lineage load needs each checkpoint's versions, `ts`, format and stored
channels, which SQLite keeps inside the serialized payload beside the channel
values, and its metadata, which the table stores after the payload: reading
either walks every overflow page of a row that holds a large state. An
admission's pass reads the same window of a thread every few runs, so without
memory it would read each kept checkpoint's whole state again on every pass,
and a pass would cost the window times the state, not what it deletes.

So the backend remembers, per thread, the nodes its last lineage load built,
each with what its row held then: its payload's type and the byte lengths of
its payload and its metadata. The next load lists them (`known` in
`SELECT_LINEAGE_SQL`); a row whose type and lengths still match comes back
`remembered`, without payload or metadata (SQLite reads a blob's length from the
row's header), and its node is the remembered one with the parent and the write
count read now. Every other row is read and decoded as before.

Why type and lengths are proof enough that the node is still the row's: the
saver writes a row's payload and metadata once, by `put`, and LangGraph never
puts a checkpoint id twice; this library's one rewrite of a payload, storing a
value whole at a checkpoint (`store_values`), adds a channel the payload did not
hold, so the payload grows. The parent, which a plan changes (`set_parents`),
and the write count are read on every load, from the row itself. The limit, by
the same token: a row rewritten in place by some other writer, to the same type
and the same byte lengths, is read as remembered until the backend is made anew
(a new `RetainingSaver`); the plan it feeds is still carried out by the guarded
statements, which re-check parents, children and writes in the row.

What is remembered is bounded: a thread's map is replaced by each load (so it
holds only the rows that load read), and the maps together hold at most
`REMEMBERED_THREADS` threads and about `REMEMBERED_BYTES` of nodes; a thread
whose nodes would hold more than `REMEMBERED_THREAD_BYTES` is not remembered.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from retaining_saver._lru import BoundedLru
from retaining_saver._rules import CheckpointNode, NodeKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Row, SqlBackend, Statement

REMEMBERED_THREADS = 256
"""Threads whose lineage rows one SQLite backend remembers, least recently loaded first out."""

REMEMBERED_BYTES = 32 * 2**20
"""About how many bytes of nodes one SQLite backend remembers, all threads together."""

REMEMBERED_THREAD_BYTES = 8 * 2**20
"""A thread whose nodes would hold more than about this many bytes is not remembered."""

Validators = tuple[str, int, int]
"""What a remembered row held: its payload's type, its payload's and its metadata's bytes."""


@dataclasses.dataclass(frozen=True, slots=True)
class Remembered:
    """A node a lineage load built, and what its row held when it was read."""

    node: CheckpointNode
    validators: Validators


ThreadRows = Mapping[NodeKey, Remembered]


def rows_bytes(rows: ThreadRows) -> int:
    """About how many bytes a thread's remembered nodes hold: a fixed cost a node, one
    per version entry, and the metadata as decoded (a few times its JSON)."""
    return sum(_node_bytes(r) for r in rows.values())


def _node_bytes(remembered: Remembered) -> int:
    node = remembered.node
    entries = len(node.channel_versions) + sum(len(seen) for seen in node.versions_seen.values())
    return 400 + 100 * entries + 4 * remembered.validators[2]


def _validators(row: Row) -> Validators | None:
    """What the row holds now, as `SELECT_LINEAGE_SQL` matches it; None where a column is
    NULL (such a row is never remembered)."""
    found = (row["type"], row["payload_length"], row["metadata_length"])
    return None if None in found else found


class SqliteLineage(SqlBackend):
    """`load_lineage` on SQLite, reading each checkpoint's payload and metadata once."""

    def __init__(self, saver: Any) -> None:
        super().__init__(saver)
        self.remembered: BoundedLru[str, ThreadRows] = BoundedLru(
            REMEMBERED_THREADS,
            size_of=rows_bytes,
            max_bytes=REMEMBERED_BYTES,
            max_entry_bytes=REMEMBERED_THREAD_BYTES,
        )

    def _lineage_rows(
        self, thread_id: str, newest: int | None
    ) -> Op[tuple[list[Row], Iterable[CheckpointNode]]]:
        """The window's rows, the ones this backend remembers without their payload or
        metadata; every node, and the thread's rows remembered as this load read them."""
        known = self.remembered.get(thread_id) or {}
        listed = [[ns, checkpoint_id, *r.validators] for (ns, checkpoint_id), r in known.items()]
        params = {"thread_id": thread_id, "newest": newest, "known": json.dumps(listed)}
        rows = yield Statement(self.sql.select_lineage, params, fetch=True)
        nodes: list[CheckpointNode] = []
        read: dict[NodeKey, Remembered] = {}
        for row in rows:
            key = (row["checkpoint_ns"], row["checkpoint_id"])
            node = self._row_node(row, known.get(key) if row["remembered"] else None)
            nodes.append(node)
            if (validators := _validators(row)) is not None:
                read[key] = Remembered(node, validators)
        if read:
            self.remembered.put(thread_id, read)
        else:
            self.remembered.pop(thread_id)
        return rows, nodes

    def _row_node(self, row: Row, remembered: Remembered | None) -> CheckpointNode:
        """A row's node: the remembered one with the row's parent and write count, else
        decoded from the row."""
        if remembered is None:
            return self._node(row, row["write_count"])
        parent, writes = row["parent_checkpoint_id"], row["write_count"]
        return dataclasses.replace(remembered.node, parent_id=parent, write_count=writes)
