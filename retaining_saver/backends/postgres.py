"""`PostgresSaver` and `AsyncPostgresSaver`: tables `checkpoints`, `checkpoint_blobs`
and `checkpoint_writes`.

`checkpoints.checkpoint` is JSONB holding `channel_versions`, `versions_seen`,
`ts` and the primitive channel values; every other channel value is a
`checkpoint_blobs` row keyed by `(thread_id, checkpoint_ns, channel, version)`,
written only for the channels in a put's `new_versions`, and shared by every
later checkpoint that keeps that version. Versions are TEXT there. Metadata is
JSONB, saved without its `writes` key. Lineage is read with JSONB operators,
without deserialising anything.

Each operation runs in one `connection.transaction()` on a cursor from the
saver's own `_cursor()` (so under its lock, and on a pooled connection when it
has a pool), the way the saver's `prune` runs; statements are unprepared.
The default READ COMMITTED isolation applies: a precondition is re-checked
inside the transaction, but a checkpoint another connection commits after
that check is not seen by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow

from retaining_saver._rules import BlobKey, CheckpointNode, Graft, Lineage
from retaining_saver.backends._base import (
    Backend,
    Integrity,
    Op,
    StorageStats,
    T,
    TableStats,
    adrive_statements,
    drive_statements,
    on_saver_loop,
)

_NODE_COLUMNS = """
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions' AS channel_versions,
    c.checkpoint -> 'versions_seen' AS versions_seen,
    c.checkpoint ->> 'ts' AS ts,
    c.metadata"""

SELECT_LINEAGE_SQL = f"""
SELECT {_NODE_COLUMNS}
FROM checkpoints AS c
WHERE c.thread_id = %s
"""

SELECT_WRITE_COUNTS_SQL = """
SELECT checkpoint_ns, checkpoint_id, count(*) AS write_count
FROM checkpoint_writes
WHERE thread_id = %s
GROUP BY checkpoint_ns, checkpoint_id
"""

SELECT_NODES_SQL = f"""
SELECT {_NODE_COLUMNS},
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = ANY(%s::text[])
"""

# Lets the in-transaction "still childless?" check find children by index
# instead of scanning the thread. Created by `create_indexes`, not implicitly:
# building it on a large table is an operator's decision.
CREATE_PARENT_INDEX_SQL = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS retaining_saver_checkpoints_parent_idx
ON checkpoints (thread_id, checkpoint_ns, parent_checkpoint_id)
"""

SELECT_HAS_CHILDREN_SQL = """
SELECT EXISTS (
    SELECT 1 FROM checkpoints
    WHERE thread_id = %s AND checkpoint_ns = %s AND parent_checkpoint_id = %s
) AS found
"""

SELECT_NEWEST_ID_SQL = """
SELECT max(checkpoint_id) AS newest FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s
    AND (%s::text IS NULL OR checkpoint_id < %s)
"""

DELETE_WRITES_SQL = """
DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

# RETURNING tells a transaction that lost a race (the row went meanwhile) it deleted nothing.
DELETE_CHECKPOINT_SQL = """
DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
RETURNING checkpoint_id
"""

UPDATE_PARENT_SQL = """
UPDATE checkpoints SET parent_checkpoint_id = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

# Every (channel, version) the thread's checkpoints in these namespaces still name.
SELECT_REFERENCED_BLOBS_SQL = """
SELECT DISTINCT c.checkpoint_ns, v.key AS channel, v.value AS version
FROM checkpoints AS c
CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
WHERE c.thread_id = %s AND c.checkpoint_ns = ANY(%s::text[])
"""

# Deletes by primary key, one candidate at a time.
DELETE_BLOBS_SQL = """
DELETE FROM checkpoint_blobs AS b
USING unnest(%s::text[], %s::text[], %s::text[]) AS k(checkpoint_ns, channel, version)
WHERE b.thread_id = %s
    AND b.checkpoint_ns = k.checkpoint_ns
    AND b.channel = k.channel
    AND b.version = k.version
RETURNING b.checkpoint_ns, b.channel, b.version
"""

# Bytes are as stored: `pg_column_size`, after any TOAST compression.
_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)::bigint
        AS byte_count
FROM checkpoints {where}
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_blobs {where}
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_writes {where}
"""

SELECT_THREAD_STATS_SQL = _STATS_SQL.format(where="WHERE thread_id = %s")

SELECT_STORE_STATS_SQL = _STATS_SQL.format(where="")

SELECT_FIRST_THREAD_IDS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id LIMIT %s
"""

SELECT_THREAD_IDS_AFTER_SQL = """
SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > %s ORDER BY thread_id LIMIT %s
"""

SELECT_INTEGRITY_SQL = """
SELECT
    (
        SELECT count(*) FROM checkpoints AS c
        WHERE c.thread_id = %s AND c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS p
            WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
                AND p.checkpoint_id = c.parent_checkpoint_id
        )
    ) AS dangling_parents,
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = %s AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS c
            WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                AND c.checkpoint_id = w.checkpoint_id
        )
    ) AS orphan_writes,
    (
        SELECT count(*) FROM checkpoint_blobs AS b
        WHERE b.thread_id = %s AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS c
            WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
        )
    ) AS orphan_blobs
"""

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement, its `%s` parameters, and whether its rows are read back."""

    sql: str
    params: tuple[Any, ...] = ()
    fetch: bool = False


def _execute(cur: Cursor[DictRow], statement: Statement) -> list[Row]:
    cur.execute(statement.sql, statement.params, prepare=False)
    return [dict(row) for row in cur.fetchall()] if statement.fetch else []


async def _aexecute(cur: AsyncCursor[DictRow], statement: Statement) -> list[Row]:
    await cur.execute(statement.sql, statement.params, prepare=False)
    return [dict(row) for row in await cur.fetchall()] if statement.fetch else []


def _node(row: Row, write_count: int) -> CheckpointNode:
    return CheckpointNode(
        checkpoint_ns=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_id=row["parent_checkpoint_id"],
        channel_versions=row["channel_versions"] or {},
        versions_seen=row["versions_seen"] or {},
        write_count=write_count,
        metadata=row["metadata"] or {},
        ts=row["ts"] or "",
    )


def _blob_key(key: BlobKey) -> BlobKey:
    """`key` as the blob table spells it: versions are TEXT."""
    ns, channel, version = key
    return (ns, channel, str(version))


class PostgresBackend(Backend):
    """Backend over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    kind = "postgres"
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    stores_blobs = True
    saver: PostgresSaver | AsyncPostgresSaver

    # Drivers

    def run(self, op: Op[T]) -> T:
        """Carry out `op` in one transaction on the saver's connection."""
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            return on_saver_loop(saver.loop, "run", lambda: self.arun(op))
        with saver._cursor() as cur:
            if saver.pipe:
                # The transaction must not take in what the pipeline queued before it.
                saver.pipe.sync()
            with cur.connection.transaction():
                return drive_statements(op, partial(_execute, cur))

    async def arun(self, op: Op[T]) -> T:
        """`run`, asynchronously; a sync `PostgresSaver` runs it in a worker thread."""
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            return await asyncio.to_thread(self.run, op)
        async with saver._cursor() as cur:
            if saver.pipe:
                await saver.pipe.sync()
            async with cur.connection.transaction():
                return await adrive_statements(op, partial(_aexecute, cur))

    def create_indexes(self) -> None:
        """Create the parent index, concurrently; needs an autocommit connection."""
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            on_saver_loop(saver.loop, "create_indexes", self.acreate_indexes)
            return
        with saver._cursor() as cur:
            cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)

    async def acreate_indexes(self) -> None:
        """Async `create_indexes`."""
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            await asyncio.to_thread(self.create_indexes)
            return
        async with saver._cursor() as cur:
            await cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)

    # Primitives

    def load_lineage(self, thread_id: str) -> Op[Lineage]:
        rows = yield Statement(SELECT_LINEAGE_SQL, (str(thread_id),), True)
        counts = yield Statement(SELECT_WRITE_COUNTS_SQL, (str(thread_id),), True)
        owned = {(r["checkpoint_ns"], r["checkpoint_id"]): r["write_count"] for r in counts}
        return Lineage.of(
            thread_id,
            (_node(r, owned.get((r["checkpoint_ns"], r["checkpoint_id"]), 0)) for r in rows),
        )

    def load_nodes(
        self, thread_id: str, checkpoint_ns: str, ids: Sequence[str]
    ) -> Op[dict[str, CheckpointNode]]:
        params = (str(thread_id), checkpoint_ns, list(ids))
        rows = yield Statement(SELECT_NODES_SQL, params, True)
        return {r["checkpoint_id"]: _node(r, r["write_count"]) for r in rows}

    def has_children(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        params = (str(thread_id), checkpoint_ns, checkpoint_id)
        rows = yield Statement(SELECT_HAS_CHILDREN_SQL, params, True)
        return bool(rows[0]["found"])

    def newest_id(
        self, thread_id: str, checkpoint_ns: str, below: str | None = None
    ) -> Op[str | None]:
        params = (str(thread_id), checkpoint_ns, below, below)
        rows = yield Statement(SELECT_NEWEST_ID_SQL, params, True)
        newest: str | None = rows[0]["newest"]
        return newest

    def delete_checkpoint(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Op[bool]:
        key = (str(thread_id), checkpoint_ns, checkpoint_id)
        deleted = yield Statement(DELETE_CHECKPOINT_SQL, key, fetch=True)
        if deleted:
            yield Statement(DELETE_WRITES_SQL, key)
        return bool(deleted)

    def reparent(self, thread_id: str, graft: Graft) -> Op[None]:
        params = (graft.new_parent_id, str(thread_id), graft.checkpoint_ns, graft.child_id)
        yield Statement(UPDATE_PARENT_SQL, params)

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey]
    ) -> Op[list[BlobKey]]:
        """Delete the candidates no surviving checkpoint names; return the rows deleted.

        A candidate with no blob row (its value was inlined in the checkpoint
        JSONB) is not returned.
        """
        if not candidates:
            return []
        namespaces = sorted({ns for ns, _, _ in candidates})
        params = (str(thread_id), namespaces)
        rows = yield Statement(SELECT_REFERENCED_BLOBS_SQL, params, True)
        referenced = {(r["checkpoint_ns"], r["channel"], r["version"]) for r in rows}
        garbage = [key for key in candidates if _blob_key(key) not in referenced]
        if not garbage:
            return []
        columns = [list(column) for column in zip(*map(_blob_key, garbage), strict=True)]
        rows = yield Statement(DELETE_BLOBS_SQL, (*columns, str(thread_id)), True)
        gone = {(r["checkpoint_ns"], r["channel"], r["version"]) for r in rows}
        return [key for key in garbage if _blob_key(key) in gone]

    def stats(self, thread_id: str | None) -> Op[StorageStats]:
        if thread_id is None:
            rows = yield Statement(SELECT_STORE_STATS_SQL, (), True)
        else:
            rows = yield Statement(SELECT_THREAD_STATS_SQL, (str(thread_id),) * 3, True)
        tables = {r["table_name"]: TableStats(r["row_count"], r["byte_count"]) for r in rows}
        return StorageStats(thread_id, tables)

    def thread_ids(self, after: str | None, limit: int) -> Op[list[str]]:
        if limit <= 0:
            return []
        if after is None:
            rows = yield Statement(SELECT_FIRST_THREAD_IDS_SQL, (limit,), True)
        else:
            rows = yield Statement(SELECT_THREAD_IDS_AFTER_SQL, (after, limit), True)
        return [r["thread_id"] for r in rows]

    def integrity(self, thread_id: str) -> Op[Integrity]:
        """Dangling parents, orphan writes rows and blob rows no checkpoint names."""
        rows = yield Statement(SELECT_INTEGRITY_SQL, (str(thread_id),) * 3, True)
        row = rows[0]
        return Integrity(row["dangling_parents"], row["orphan_writes"], row["orphan_blobs"])


def make_backend(saver: PostgresSaver | AsyncPostgresSaver) -> PostgresBackend:
    """The backend for a `PostgresSaver` or an `AsyncPostgresSaver`."""
    return PostgresBackend(saver)
