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
from collections.abc import Mapping, Sequence
from typing import Any

from retaining_saver._rules import BlobKey, Lineage
from retaining_saver.backends._apply import ParentChange, RowKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import SqlBackend, Statement
from retaining_saver.backends._upstream import delta_snapshot

# For a thread with DeltaChannels (`channels`): which of them each checkpoint stores,
# inline (a snapshot's marker) or as a blob at its version, as the saver's delta walk
# probes it. Not run for other threads: it probes the blob table per channel.
SELECT_STORED_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id,
    ARRAY(
        SELECT v.key FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
        WHERE v.key = ANY(%s::text[])
            AND (
                c.checkpoint -> 'channel_values' ? v.key
                OR EXISTS (
                    SELECT 1 FROM checkpoint_blobs AS b
                    WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                        AND b.channel = v.key AND b.version = v.value AND b.type <> 'empty'
                )
            )
    ) AS stored
FROM checkpoints AS c
WHERE c.thread_id = %s
"""

# A plan's re-parenting and deletions in one statement each, every row guarded by what
# it proved (see `_apply`): the parent it has, the new parent still there; no child but
# those deleted with it, no writes unless consumed. The caller compares the rows changed
# with the rows proven. Every probe is by key: flat in the thread's length.
# The rows come as one JSON array, which Python dumps in C and Postgres parses in one go.
SET_PARENTS_SQL = """
UPDATE checkpoints AS c SET parent_checkpoint_id = k.new_parent
FROM jsonb_to_recordset(%s::jsonb) AS k(ns text, id text, old_parent text, new_parent text)
WHERE c.thread_id = %s AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
    AND c.parent_checkpoint_id = k.old_parent
    AND (k.new_parent IS NULL OR EXISTS (
        SELECT 1 FROM checkpoints AS p
        WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = k.ns
            AND p.checkpoint_id = k.new_parent
    ))
RETURNING c.checkpoint_id
"""

DELETE_ROWS_SQL = """
WITH doomed AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS k(ns text, id text, parent text, consumed boolean)
), gone AS (
    DELETE FROM checkpoints AS c
    USING doomed AS k
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
        AND c.parent_checkpoint_id IS NOT DISTINCT FROM k.parent -- check: parent-as-proven
        AND NOT EXISTS ( -- check: childless (but those deleted with it)
            SELECT 1 FROM checkpoints AS x
            WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = k.ns
                AND x.parent_checkpoint_id = k.id
                AND NOT EXISTS (
                    SELECT 1 FROM doomed AS d WHERE d.ns = k.ns AND d.id = x.checkpoint_id
                )
        )
        AND (k.consumed OR NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = k.ns
                AND w.checkpoint_id = k.id
        ))
    RETURNING c.checkpoint_ns, c.checkpoint_id
), writes AS (
    DELETE FROM checkpoint_writes AS w
    USING gone AS g
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = g.checkpoint_ns
        AND w.checkpoint_id = g.checkpoint_id
)
SELECT count(*) AS deleted FROM gone
"""

# A value stored whole at a checkpoint, as the saver stores a snapshot: the inline
# marker (only while the checkpoint holds the version proven), then the blob.
MARK_STORED_SQL = """
UPDATE checkpoints
SET checkpoint = jsonb_set(checkpoint, ARRAY['channel_values', %s], 'true'::jsonb, true)
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
    AND checkpoint -> 'channel_versions' ->> %s = %s -- check: versions-as-planned
RETURNING checkpoint_id
"""

UPSERT_BLOB_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, channel, version)
    DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
"""

# Each candidate blob, by primary key, that no checkpoint of its namespace still names
# (in the deleting transaction, after the plan's deletions).
DELETE_BLOBS_SQL = """
DELETE FROM checkpoint_blobs AS b
USING jsonb_to_recordset(%s::jsonb) AS k(checkpoint_ns text, channel text, version text)
WHERE b.thread_id = %s
    AND b.checkpoint_ns = k.checkpoint_ns
    AND b.channel = k.channel
    AND b.version = k.version
    AND NOT EXISTS (
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
            AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
    )
RETURNING b.checkpoint_ns, b.channel, b.version
"""


STORED_BLOBS_SQL = """
SELECT b.checkpoint_ns, b.channel, b.version
FROM checkpoint_blobs AS b
JOIN jsonb_to_recordset(%s::jsonb) AS k(checkpoint_ns text, channel text, version text)
    ON b.checkpoint_ns = k.checkpoint_ns AND b.channel = k.channel AND b.version = k.version
WHERE b.thread_id = %s
"""


_CHANGE_COLUMNS = ("ns", "id", "old_parent", "new_parent")
_ROW_COLUMNS = ("ns", "id", "parent", "consumed")
_BLOB_COLUMNS = ("checkpoint_ns", "channel", "version")


def _blob_key(key: BlobKey) -> BlobKey:
    """`key` as the blob table spells it: versions are TEXT."""
    ns, channel, version = key
    return (ns, channel, str(version))


class PostgresPlans(SqlBackend):
    """A plan's steps, and the blob sweep, over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    def _with_stored(self, lineage: Lineage) -> Op[Lineage]:
        """For a thread with DeltaChannels, which of them each checkpoint stores."""
        channels = sorted(lineage.delta_channels())
        if not channels:
            return lineage
        rows = yield Statement(SELECT_STORED_SQL, (channels, lineage.thread_id), True)
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
        self, thread_id: str, candidates: Sequence[BlobKey]
    ) -> Op[list[BlobKey]]:
        """Delete the candidates no surviving checkpoint names; return the rows deleted.

        A candidate with no blob row (its value was inlined in the checkpoint
        JSONB) is not returned.
        """
        return (yield from _blob_rows(DELETE_BLOBS_SQL, thread_id, candidates))

    def stored_blobs(self, thread_id: str, candidates: Sequence[BlobKey]) -> Op[list[BlobKey]]:
        """The candidates with a blob row (not inlined in the checkpoint JSONB)."""
        return (yield from _blob_rows(STORED_BLOBS_SQL, thread_id, candidates))


def _blob_rows(sql: str, thread_id: str, candidates: Sequence[BlobKey]) -> Op[list[BlobKey]]:
    """The candidates among the blob rows `sql` answers for them (deleted or found)."""
    if not candidates:
        return []
    keys = json.dumps([dict(zip(_BLOB_COLUMNS, _blob_key(k), strict=True)) for k in candidates])
    rows = yield Statement(sql, (keys, str(thread_id)), True)
    answered = {(r["checkpoint_ns"], r["channel"], r["version"]) for r in rows}
    return [key for key in candidates if _blob_key(key) in answered]
