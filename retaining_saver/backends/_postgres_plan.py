"""Carrying out a plan over Postgres: its steps in bulk, and the blobs they free.

A plan's re-parentings, and its deletions, each run as one statement for the
whole plan, every row guarded by what the plan proved (see `_apply`): the
caller compares the rows changed with the rows proven. A value a plan stores
at a checkpoint is written as the saver writes a snapshot; for the rules to
weigh that, a thread with DeltaChannels loads, with its lineage, which of them
each checkpoint already stores. A deleted checkpoint leaves the blobs it
named; the sweep deletes those no surviving checkpoint names, in the same
transaction.

These statements run only for a plan, never on an admission, so they live
apart from the admission's and from the primitives every backend shares.
`PostgresPlans` only builds them: `postgres.PostgresBackend`, which mixes it
in, runs them on its drivers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retaining_saver._rules import BlobKey, CheckpointNode, Lineage
from retaining_saver._rules._recheck import ParentChange, RowKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._postgres_sql_plan import (
    DELETE_BLOBS_SQL,
    DELETE_ROWS_SQL,
    MARK_STORED_SQL,
    SELECT_STORED_SQL,
    SET_PARENTS_SQL,
    STORED_BLOBS_SQL,
    UPSERT_BLOB_SQL,
)
from retaining_saver.backends._sql import Row, SqlBackend, Statement
from retaining_saver.backends._upstream import delta_snapshot

_CHANGE_COLUMNS = ("ns", "id", "old_parent", "new_parent")
_ROW_COLUMNS = ("ns", "id", "parent", "consumed")
_BLOB_COLUMNS = ("checkpoint_ns", "channel", "version")
LINEAGE_FIELDS = (
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "channel_versions",
    "versions_seen",
    "ts",
    "format_version",
    "metadata",
    "write_count",
)
"""The fields of each node `SELECT_LINEAGE_SQL` reads, in its order."""


def _blob_key(key: BlobKey) -> BlobKey:
    """`key` as the blob table spells it: versions are TEXT."""
    ns, channel, version = key
    return (ns, channel, str(version))


class PostgresPlans(SqlBackend):
    """A plan's steps, and the blob sweep, over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    def _lineage_nodes(self, rows: list[Row]) -> Iterable[CheckpointNode]:
        """The nodes of `SELECT_LINEAGE_SQL`'s one row: a JSON array of each node's fields,
        in `LINEAGE_FIELDS`' order, read as `_node` reads a row."""
        return (
            self._node(dict(zip(LINEAGE_FIELDS, f, strict=True)), f[-1]) for f in rows[0]["nodes"]
        )

    def _with_stored(self, lineage: Lineage) -> Op[Lineage]:
        """For a thread with DeltaChannels, which of them each checkpoint stores."""
        channels = sorted(lineage.delta_channels())
        if not channels:
            return lineage
        start = lineage.window_start or ""  # a window's rows only
        rows = yield Statement(SELECT_STORED_SQL, (channels, lineage.thread_id, start), True)
        stored = {(r["checkpoint_ns"], r["checkpoint_id"]): frozenset(r["stored"]) for r in rows}
        return lineage.with_stored(stored)

    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]:
        found = json.dumps([dict(zip(_CHANGE_COLUMNS, c, strict=True)) for c in changes])
        rows = yield Statement(SET_PARENTS_SQL, (found, str(thread_id)), True)
        return len(rows)

    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]:
        doomed = json.dumps([dict(zip(_ROW_COLUMNS, row, strict=True)) for row in rows])
        params = {"thread_id": str(thread_id), "rows": doomed}
        found = yield Statement(DELETE_ROWS_SQL, params, True)
        return int(found[0]["deleted"])

    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]:
        """Each value as the saver stores a snapshot: an inline marker and a blob."""
        for channel, (version, value) in values.items():
            key = (str(thread_id), checkpoint_ns, checkpoint_id)
            if not (yield Statement(MARK_STORED_SQL, (channel, *key, channel, version), True)):
                return False
            type_, blob = self.saver.serde.dumps_typed(delta_snapshot(value))
            params = (str(thread_id), checkpoint_ns, channel, version, type_, blob)
            yield Statement(UPSERT_BLOB_SQL, params)
        return True

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey], since: str = ""
    ) -> Op[list[BlobKey]]:
        """Delete the candidates no surviving checkpoint at or above `since` names; return
        the rows deleted.

        A candidate with no blob row (its value was inlined in the checkpoint
        JSONB) is not returned.
        """
        if not candidates:
            return []
        params = {"keys": _blob_keys(candidates), "thread_id": str(thread_id), "since": since}
        rows = yield Statement(DELETE_BLOBS_SQL, params, True)
        return _answered(candidates, rows)

    def stored_blobs(self, thread_id: str, candidates: Sequence[BlobKey]) -> Op[list[BlobKey]]:
        """The candidates with a blob row (not inlined in the checkpoint JSONB)."""
        if not candidates:
            return []
        params = (_blob_keys(candidates), str(thread_id))
        rows = yield Statement(STORED_BLOBS_SQL, params, True)
        return _answered(candidates, rows)


def _blob_keys(candidates: Sequence[BlobKey]) -> str:
    """The candidates as one JSON array, which the statements read with `jsonb_to_recordset`."""
    return json.dumps([dict(zip(_BLOB_COLUMNS, _blob_key(k), strict=True)) for k in candidates])


def _answered(candidates: Sequence[BlobKey], rows: list[Row]) -> list[BlobKey]:
    """The candidates among the blob rows a statement returned."""
    answered = {(r["checkpoint_ns"], r["channel"], r["version"]) for r in rows}
    return [key for key in candidates if _blob_key(key) in answered]
