"""Carrying out a plan on SQLite: the statements `_apply` drives for a `SqliteBackend`.

Each change is one guarded statement: a re-parenting only moves a checkpoint
that still has the parent the plan proved, onto a parent that still exists; a
deletion only removes a checkpoint that still has its parent, no child, and no
writes unless the plan counts them consumed. A DeltaChannel value is stored as
the saver stores a snapshot: inside the checkpoint's serialized payload.

In process there is no round trip to save by batching. One statement over a
`json_each` list of the rows, as Postgres deletes them, was measured on SQLite
3.40: 0.20 ms against 0.28 ms for the 24 rows of an admission's pass, but far
worse than linear beyond (356 ms for 2,000 rows, 19 s for 20,000: its lookups in
the list find no index), where a prune deletes them one by one in linear time.
Not built.

The module also decodes rows into nodes (`checkpoint_of`, `node_of`: SQLite
keeps versions inside the serialized payload), which lineage loads and
admission share. A node needs only the payload's versions, `ts`, format and
which channels it stores, never their values: a payload the saver's own
msgpack serde wrote is read with every extension value (a message, a model, a
delta snapshot) left undecoded (`node_fields`), which keeps a lineage load from
rebuilding each checkpoint's messages. Anything else, or anything that reads
short of those fields, is decoded by the saver's serde, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import ormsgpack
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retaining_saver._rules import BlobKey, CheckpointNode
from retaining_saver._rules._recheck import ParentChange, RowKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Row, SqlBackend, Statement
from retaining_saver.backends._sqlite_sql import DELETE_WRITES_SQL
from retaining_saver.backends._sqlite_sql_plan import (
    DELETE_CHECKPOINT_GUARDED_SQL,
    SELECT_PAYLOAD_SQL,
    SET_PARENT_GUARDED_SQL,
    UPDATE_PAYLOAD_SQL,
)
from retaining_saver.backends._upstream import delta_snapshot
from retaining_saver.backends._upstream.tuples import sqlite_metadata


def node_of(row: Row, checkpoint: Checkpoint, write_count: int) -> CheckpointNode:
    """The node of a row whose payload decoded to `checkpoint`."""
    return CheckpointNode(
        checkpoint_ns=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_id=row["parent_checkpoint_id"],
        channel_versions=checkpoint.get("channel_versions", {}),
        versions_seen=checkpoint.get("versions_seen", {}),
        write_count=write_count,
        metadata=sqlite_metadata(row),
        ts=checkpoint.get("ts", ""),
        # The values inside the payload are the ones stored; the others are rebuilt.
        stored=frozenset(checkpoint.get("channel_values", {})),
        format_version=CheckpointNode.format_version_of(checkpoint.get("v")),
    )


def checkpoint_of(saver: SqliteSaver | AsyncSqliteSaver, row: Row) -> Checkpoint:
    """A row's checkpoint payload, decoded with the saver's serde."""
    checkpoint: Checkpoint = saver.serde.loads_typed((row["type"], row["checkpoint"]))
    return checkpoint


def node_fields(saver: SqliteSaver | AsyncSqliteSaver, row: Row) -> Checkpoint:
    """A row's payload as far as `node_of` reads it: skimmed (`skimmed_fields`) where the
    saver's own `JsonPlusSerializer` wrote it as msgpack, else `checkpoint_of`."""
    if row["type"] == "msgpack" and type(saver.serde).loads_typed is _JSONPLUS_LOADS:
        skimmed = skimmed_fields(row["checkpoint"])
        if skimmed is not None:
            return skimmed
    return checkpoint_of(saver, row)


_JSONPLUS_LOADS = JsonPlusSerializer.loads_typed


def skimmed_fields(payload: bytes) -> Checkpoint | None:
    """A msgpack payload decoded as `JsonPlusSerializer` decodes it, but for extension
    values (messages, models, delta snapshots), which stay undecoded as None: a
    node reads which channels hold a value, never the value. None where a field a
    node reads is not what the serde would give (not a mapping, or a version that
    was itself an extension value): the caller then decodes it whole."""
    try:
        fields = ormsgpack.unpackb(payload, ext_hook=_undecoded, option=ormsgpack.OPT_NON_STR_KEYS)
    except Exception:  # the serde's own decode answers, or raises as the saver would
        return None
    if not isinstance(fields, dict) or not _plain_versions(fields):
        return None
    return cast(Checkpoint, fields)


def _undecoded(code: int, data: bytes) -> None:
    """An extension value, skipped: its bytes are never rebuilt into an object."""
    return None


def _plain_versions(fields: Mapping[str, Any]) -> bool:
    """Whether the fields `node_of` reads came out of the skim as the serde gives them."""
    try:
        return (
            isinstance(fields.get("channel_values", {}), dict)
            and isinstance(fields.get("ts", ""), str)
            and None not in fields.get("channel_versions", {}).values()
            and not any(None in seen.values() for seen in fields.get("versions_seen", {}).values())
        )
    except AttributeError:  # a field that is not a mapping
        return False


class SqlitePlans(SqlBackend):
    """`SqliteBackend`'s plan primitives."""

    saver: SqliteSaver | AsyncSqliteSaver

    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]:
        """One guarded statement each: in process, there is no round trip to save."""
        changed = 0
        for ns, child_id, old, new in changes:
            params = {
                "new_parent": new,
                "thread_id": str(thread_id),
                "checkpoint_ns": ns,
                "checkpoint_id": child_id,
                "old_parent": old,
            }
            changed += len((yield Statement(SET_PARENT_GUARDED_SQL, params)))
        return changed

    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]:
        """One guarded statement each; a checkpoint's writes go with it."""
        deleted = 0
        for ns, checkpoint_id, parent, consumed in rows:
            key = (str(thread_id), ns, checkpoint_id)
            guarded = {
                "thread_id": key[0],
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "parent": parent,
                "consumed": consumed,
            }
            if (yield Statement(DELETE_CHECKPOINT_GUARDED_SQL, guarded)):
                yield Statement(DELETE_WRITES_SQL, key)
                deleted += 1
        return deleted

    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]:
        """Each value as the saver stores a snapshot: inside the checkpoint's payload."""
        key = (str(thread_id), checkpoint_ns, checkpoint_id)
        rows = yield Statement(SELECT_PAYLOAD_SQL, key)
        if not rows:
            return False
        checkpoint = checkpoint_of(self.saver, rows[0])
        versions = checkpoint.get("channel_versions", {})
        # check: versions-as-planned
        if any(str(versions.get(c)) != version for c, (version, _) in values.items()):
            return False
        stored = {c: delta_snapshot(value) for c, (_, value) in values.items()}
        checkpoint["channel_values"] = {**checkpoint.get("channel_values", {}), **stored}
        type_, payload = self.saver.serde.dumps_typed(checkpoint)
        self._rewriting(*key)
        yield Statement(UPDATE_PAYLOAD_SQL, (type_, payload, *key))
        return True

    def _rewriting(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        """Told before `store_values` rewrites a row's payload; by default nothing."""

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey], since: str = ""
    ) -> Op[list[BlobKey]]:
        """Nothing to do: channel values live inside the checkpoint rows."""
        yield from ()
        return []
