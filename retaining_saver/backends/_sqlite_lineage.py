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

A backend that knows some of the thread's rows first reads the window's headers
alone (`SELECT_LINEAGE_HEADERS_SQL`: type, lengths, parent, write count) and
matches them here as `SELECT_LINEAGE_SQL` would (`_known_base`). If it knows
every row, as an admission's pass at a thread's horizon does, that one statement
is the whole load: its nodes are the ones `SELECT_LINEAGE_SQL` would have given at
that moment. Else `SELECT_LINEAGE_SQL` reads the window again, one snapshot of its
own, with the lists. Matching lists of rows inside SQLite cost an admission's pass
more than reading the rows (about 1.2 ms of a 64-row window's load, in context,
against 0.14 ms for the headers alone).

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

A checkpoint stored through a `RetainingSaver` whose passes will read the
thread (one with `retention=`) is known before it is ever read (`stored`): its
node is built from the checkpoint and metadata as put, where the saver is the
stock `SqliteSaver` or `AsyncSqliteSaver` with its own serde (a subclass that
overrides `put`, or another serde, is read as before), and listed as `written`
with what the row must hold: the `msgpack` type and the metadata's byte length
(`put`'s own metadata encoding, copied: `_upstream.tuples.sqlite_stored_metadata`).
Its first load takes the node without reading the row's payload or metadata, and
remembers it with the row's lengths from then on. So a pass reads no row its own
process wrote, and a run's writes cost a node each (the metadata encoded once
more), only under `retention=`. The limit here is wider than for a remembered
row, by the same model: until that first load, a payload something else
rewrites in place is not seen (a metadata of another length is). A value this
library stores at a checkpoint forgets what was written there first.

What is remembered is bounded: a thread's map is replaced by each load (so it
holds only the rows that load read), written rows leave their map once loaded,
and each kind of map holds at most `REMEMBERED_THREADS` threads and about
`REMEMBERED_BYTES` of nodes; a thread whose nodes would hold more than
`REMEMBERED_THREAD_BYTES` is not kept.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retaining_saver._lru import BoundedLru
from retaining_saver._rules import CheckpointNode, NodeKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Row, Statement
from retaining_saver.backends._sqlite_plan import SqlitePlans
from retaining_saver.backends._sqlite_sql import SELECT_LINEAGE_HEADERS_SQL
from retaining_saver.backends._upstream.tuples import sqlite_stored_metadata

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
    """A node a lineage load built, and what its row held when it was read; `size`: about
    how many bytes it holds (a fixed cost a node, one per version entry, and the metadata
    as decoded, a few times its JSON), counted once."""

    node: CheckpointNode
    validators: Validators
    size: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        node = self.node
        entries = len(node.channel_versions) + sum(len(s) for s in node.versions_seen.values())
        object.__setattr__(self, "size", 400 + 100 * entries + 4 * self.validators[2])


class ThreadRows(dict[NodeKey, Remembered]):
    """One thread's remembered (or written) rows, with the bytes they hold kept as rows come
    and go (`add`, `discard`): bounding a map a put adds to costs nothing per row in it."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def add(self, key: NodeKey, remembered: Remembered) -> None:
        self.discard(key)
        self[key] = remembered
        self.bytes += remembered.size

    def discard(self, key: NodeKey) -> None:
        gone = self.pop(key, None)
        if gone is not None:
            self.bytes -= gone.size


def rows_bytes(rows: ThreadRows) -> int:
    """About how many bytes a thread's remembered nodes hold (see `Remembered.size`)."""
    return rows.bytes


def _validators(row: Row) -> Validators | None:
    """What the row holds now, as `SELECT_LINEAGE_SQL` matches it; None where a column is
    NULL (such a row is never remembered)."""
    found = (row["type"], row["payload_length"], row["metadata_length"])
    return None if None in found else found


def _known_base(
    row: Row, known: Mapping[NodeKey, Remembered], written: Mapping[NodeKey, Remembered]
) -> Remembered | None:
    """The node a header row is known by, matched as `SELECT_LINEAGE_SQL` matches it: one
    remembered with the row's type and lengths, else one written with the row's type and
    metadata length; None if neither."""
    if (found := _validators(row)) is None:
        return None
    key = (row["checkpoint_ns"], row["checkpoint_id"])
    remembered = known.get(key)
    if remembered is not None and remembered.validators == found:
        return remembered
    put = written.get(key)
    if put is not None and (put.validators[0], put.validators[2]) == (found[0], found[2]):
        return put
    return None


def _matched_base(
    row: Row, known: Mapping[NodeKey, Remembered], written: Mapping[NodeKey, Remembered]
) -> Remembered | None:
    """The node `SELECT_LINEAGE_SQL` said a row is known by (`remembered`, else
    `written`); None for a row it read whole."""
    key = (row["checkpoint_ns"], row["checkpoint_id"])
    base = known.get(key) if row["remembered"] else None
    if base is None and row["written"]:
        base = written.get(key)
    return base


class SqliteLineage(SqlitePlans):
    """`load_lineage` on SQLite, reading each checkpoint's payload and metadata once."""

    def __init__(self, saver: Any) -> None:
        super().__init__(saver)
        self.remembered: BoundedLru[str, ThreadRows] = _bounded()
        self.written: BoundedLru[str, ThreadRows] = _bounded()
        self._writing = threading.Lock()
        self._puts_as_audited = _stock_put(saver)

    def stored(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any) -> None:
        """Know the node of a checkpoint the stock saver just stored (see the module
        docstring); nothing for a saver whose `put` or serde is not the stock one, or a
        checkpoint whose versions the serde would not give back as they are."""
        if not self._puts_as_audited or self.drift:
            return
        try:
            node = put_node(checkpoint, metadata, config)
        except Exception:  # what the stock put stored is then read, never guessed
            return
        if node is None:
            return
        thread_id = str(config["configurable"]["thread_id"])
        key = (node[0].checkpoint_ns, node[0].checkpoint_id)
        with self._writing:  # in place: a put costs one row, however many are written
            rows = self.written.get(thread_id) or ThreadRows()
            rows.add(key, Remembered(*node))
            self.written.put(thread_id, rows)  # its bytes counted again

    def _rewriting(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        """Before `store_values` rewrites the row's payload: what was written there is
        forgotten (a remembered row is told apart by its length alone)."""
        self._forget_written(str(thread_id), {(checkpoint_ns, checkpoint_id)})

    def _lineage_rows(
        self, thread_id: str, newest: int | None
    ) -> Op[tuple[list[Row], Iterable[CheckpointNode]]]:
        """The window's rows, the ones this backend remembers or wrote without their payload
        or metadata; every node, and the thread's rows remembered as this load read them.

        Where it knows rows, it first reads the window's headers alone
        (`SELECT_LINEAGE_HEADERS_SQL`): if it knows every one, by the same match
        `SELECT_LINEAGE_SQL` makes (`_known_base`), that one statement is the load, as
        an admission's pass finds it at a thread's horizon. Else `SELECT_LINEAGE_SQL`
        reads the window again, with the payload and metadata of every row it does not
        know: one snapshot, as a load that knew nothing would read."""
        known: Mapping[NodeKey, Remembered] = self.remembered.get(thread_id) or {}
        with self._writing:  # a copy: a put of another namespace may add to the map
            written: dict[NodeKey, Remembered] = dict(self.written.get(thread_id) or {})
        window = {"thread_id": thread_id, "newest": newest}
        if known or written:
            rows = yield Statement(SELECT_LINEAGE_HEADERS_SQL, window, fetch=True)
            bases = [_known_base(row, known, written) for row in rows]
            if None not in bases:
                return rows, self._remember(thread_id, rows, bases, written)
        listed = [[*key, r.validators[0], r.validators[2]] for key, r in written.items()]
        params = {
            **window,
            "known": json.dumps([[*key, *r.validators] for key, r in known.items()]),
            "written": json.dumps(listed),
        }
        rows = yield Statement(self.sql.select_lineage, params, fetch=True)
        bases = [_matched_base(row, known, written) for row in rows]
        return rows, self._remember(thread_id, rows, bases, written)

    def _remember(
        self,
        thread_id: str,
        rows: list[Row],
        bases: list[Remembered | None],
        written: Mapping[NodeKey, Remembered],
    ) -> list[CheckpointNode]:
        """Each row's node (from its base, if known), the thread's rows remembered as read,
        and what was written forgotten where it was read."""
        nodes: list[CheckpointNode] = []
        read = ThreadRows()
        for row, base in zip(rows, bases, strict=True):
            key = (row["checkpoint_ns"], row["checkpoint_id"])
            node = self._row_node(row, base)
            nodes.append(node)
            if (validators := _validators(row)) is None:
                continue
            if base is not None and base.node is node and base.validators == validators:
                read.add(key, base)  # unchanged: the same frozen record
            else:
                read.add(key, Remembered(node, validators))
        if read:
            self.remembered.put(thread_id, read)
        else:
            self.remembered.pop(thread_id)
        if written:
            self._forget_written(thread_id, read.keys())
        return nodes

    def _row_node(self, row: Row, base: Remembered | None) -> CheckpointNode:
        """A row's node: the one remembered or written, with the row's parent and write
        count, else decoded from the row."""
        if base is None:
            return self._node(row, row["write_count"])
        node, parent, writes = base.node, row["parent_checkpoint_id"], row["write_count"]
        if node.parent_id == parent and node.write_count == writes:
            return node  # as most are: frozen, so shared with the last load's
        return dataclasses.replace(node, parent_id=parent, write_count=writes)

    def _forget_written(self, thread_id: str, keys: Iterable[NodeKey]) -> None:
        """Forget what this backend wrote at `keys` (read since, or rewritten)."""
        with self._writing:
            rows = self.written.get(thread_id)
            if not rows:
                return
            for key in keys:
                rows.discard(key)
            if rows:
                self.written.put(thread_id, rows)  # its bytes counted again
            else:
                self.written.pop(thread_id)


def _bounded() -> BoundedLru[str, ThreadRows]:
    return BoundedLru(
        REMEMBERED_THREADS,
        size_of=rows_bytes,
        max_bytes=REMEMBERED_BYTES,
        max_entry_bytes=REMEMBERED_THREAD_BYTES,
    )


def _stock_put(saver: Any) -> bool:
    """Whether `saver` stores a checkpoint as the stock SQLite saver does, with its own
    serde: what `put_node` builds a node from."""
    stock = AsyncSqliteSaver if isinstance(saver, AsyncSqliteSaver) else SqliteSaver
    serde: Any = type(getattr(saver, "serde", None))
    return (
        isinstance(saver, stock)
        and type(saver).put is stock.put
        and type(saver).aput is stock.aput
        and serde.dumps_typed is JsonPlusSerializer.dumps_typed
        and serde.loads_typed is JsonPlusSerializer.loads_typed
    )


PLAIN_VERSIONS = (str, int, float)
"""The version types the serde gives back as they were put: a node built from the put
checkpoint equals the node decoded from its row."""


def put_node(
    checkpoint: Checkpoint, metadata: Any, config: RunnableConfig
) -> tuple[CheckpointNode, Validators] | None:
    """The node a load would decode from the row the stock saver's `put` writes, and what
    that row holds (its payload's length unknown: 0); None where a version is not a
    plain value (the row is read instead)."""
    versions = checkpoint.get("channel_versions", {})
    seen = checkpoint.get("versions_seen", {})
    if not _plain(versions) or not all(_plain(s) for s in seen.values()):
        return None
    stored_metadata = sqlite_stored_metadata(config, metadata)
    node = CheckpointNode(
        checkpoint_ns=config["configurable"]["checkpoint_ns"],
        checkpoint_id=checkpoint["id"],
        parent_id=None,  # read from the row
        channel_versions=dict(versions),
        versions_seen={node: dict(s) for node, s in seen.items()},
        write_count=0,  # read from the row
        metadata=json.loads(stored_metadata),
        ts=checkpoint.get("ts", ""),
        stored=frozenset(checkpoint.get("channel_values", {})),
        format_version=CheckpointNode.format_version_of(checkpoint.get("v")),
    )
    return node, ("msgpack", 0, len(stored_metadata))


def _plain(versions: Any) -> bool:
    return isinstance(versions, Mapping) and all(
        type(k) is str and type(v) in PLAIN_VERSIONS for k, v in versions.items()
    )
