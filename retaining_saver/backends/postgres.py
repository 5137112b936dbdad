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
has a pool), the way the saver's `prune` runs. Statements are prepared as the
connection's `prepare_threshold` says, as the saver's own are.
The default READ COMMITTED isolation applies: a precondition is re-checked
inside the transaction, but a checkpoint another connection commits after
that check is not seen by it.

The backend is three modules, each with its SQL at its top, split by when
their statements run, so that each can be read whole:

- this one: the drivers, which run every statement of the three; the reclaim
  records' table and the parent index; and the statements of `SqlBackend`'s
  primitives (`_sql`), gathered by name (`SQL`);
- `_postgres_admission` (`PostgresAdmission`): the statements of admission,
  on the path of every run's read, each one round trip tuned to its query
  plan: the guarded takes of a trailing leaf, and the saver's own reads;
- `_postgres_plan` (`PostgresPlans`): the statements that carry out a plan's
  steps in bulk and sweep the blobs they free.

`PostgresBackend` mixes the two in; their statements reach the database only
through the drivers here (`run`, `arun`, by `_execute`, `_aexecute`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import timedelta

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow

from retaining_saver._rules import CheckpointNode
from retaining_saver.backends._base import Mode, Op, T, on_saver_loop
from retaining_saver.backends._postgres_admission import PostgresAdmission
from retaining_saver.backends._postgres_plan import PostgresPlans
from retaining_saver.backends._postgres_stats import PostgresStats
from retaining_saver.backends._postgres_sweep import CREATE_ROOT_INDEX_SQL
from retaining_saver.backends._postgres_threads import THREAD_SQL
from retaining_saver.backends._sql import Row, SqlTexts, Statement
from retaining_saver.backends._sql_threads import SqlThreads

# `v` as text: psycopg would decode a JSONB column with a `json.loads` per row.
_NODE_COLUMNS = """
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions' AS channel_versions,
    c.checkpoint -> 'versions_seen' AS versions_seen,
    c.checkpoint ->> 'ts' AS ts,
    c.checkpoint ->> 'v' AS format_version,
    c.metadata"""

_WRITE_COUNT_COLUMN = """
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count"""

SELECT_LINEAGE_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s
"""

SELECT_NODES_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = ANY(%s::text[])
"""

SELECT_HEAD_NODE_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s
ORDER BY c.checkpoint_id DESC LIMIT 1
"""

# Each reclaimed duplicate's id and the clone it resolves to; written in the
# deleting statement or transaction. Created before this backend's first
# write (and by `create_indexes`); a read never creates it.
# Two workers creating it at once can both pass IF NOT EXISTS; the loser's
# unique violation on the catalog means the table is there, so it is ignored.
# CREATE is only tried when the table is missing: a role that may write the
# tables but not create in the schema is refused even an IF NOT EXISTS.
CREATE_RECLAIMED_TABLE_SQL = """
DO $$
BEGIN
    IF to_regclass('retaining_saver_reclaimed') IS NOT NULL THEN
        RETURN;
    END IF;
    CREATE TABLE IF NOT EXISTS retaining_saver_reclaimed (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        clone_id TEXT NOT NULL,
        reclaimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        taken_by TEXT,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    CREATE INDEX IF NOT EXISTS retaining_saver_reclaimed_age_idx
        ON retaining_saver_reclaimed (thread_id, reclaimed_at);
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN NULL;
END
$$
"""

UPSERT_RECLAIMED_SQL = """
INSERT INTO retaining_saver_reclaimed (thread_id, checkpoint_ns, checkpoint_id, clone_id)
VALUES (%s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET clone_id = EXCLUDED.clone_id, reclaimed_at = EXCLUDED.reclaimed_at,
        taken_by = NULL
"""

DELETE_EXPIRED_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = %s AND reclaimed_at < now() - %s::interval
"""

DELETE_THREAD_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = %s
"""

SELECT_RECLAIMED_TABLE_SQL = """
SELECT to_regclass('retaining_saver_reclaimed') IS NOT NULL AS found
"""

SELECT_RECLAIMED_CLONE_SQL = """
SELECT clone_id FROM retaining_saver_reclaimed
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
    AND reclaimed_at >= now() - %s::interval
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

SELECT_CHILDREN_SQL = """
SELECT parent_checkpoint_id AS parent_id, checkpoint_id FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND parent_checkpoint_id = ANY(%s::text[])
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

SQL = SqlTexts.named(globals())
"""The constants above that `SqlBackend`'s primitives run, found by their names."""

INSUFFICIENT_PRIVILEGE = "42501"


def _execute(cur: Cursor[DictRow], statement: Statement) -> list[Row]:
    cur.execute(statement.sql, statement.params)
    return cur.fetchall() if statement.fetch else []


async def _aexecute(cur: AsyncCursor[DictRow], statement: Statement) -> list[Row]:
    await cur.execute(statement.sql, statement.params)
    return await cur.fetchall() if statement.fetch else []


class PostgresBackend(PostgresAdmission, PostgresPlans, PostgresStats, SqlThreads):
    """Backend over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    kind = "postgres"
    holds_nul = False
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    stores_blobs = True
    sql = SQL
    thread_sql = THREAD_SQL
    saver: PostgresSaver | AsyncPostgresSaver

    # Drivers

    reclaimed_table_ready = False

    def permission_problem(self, error: BaseException) -> str | None:
        """SQLSTATE 42501 (insufficient_privilege): the driver's first line names it."""
        if getattr(error, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            return None
        return str(error).splitlines()[0] if str(error) else "insufficient privilege"

    def run(self, op: Op[T], mode: Mode = Mode.WRITE) -> T:
        """Carry out `op` on the saver's connection: a READ or GUARDED one statement per
        transaction where the connection autocommits, else (and a WRITE always) in one
        transaction. An async saver runs it on its loop.

        The statements are fed to `_execute` right here, not through a shared
        driver: a statement climbs no frame of ours between the flow and the
        cursor (`scripts/statement_frames.py`).
        """
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            return on_saver_loop(saver.loop, None, lambda: self.arun(op, mode))
        op = self._ready(op, mode)
        with saver._cursor() as cur:
            if saver.pipe:
                # The transaction must not take in what the pipeline queued before it.
                saver.pipe.sync()
            each = mode is not Mode.WRITE and cur.connection.autocommit
            with nullcontext() if each else cur.connection.transaction():
                try:
                    statement = next(op)
                    while True:
                        statement = op.send(_execute(cur, statement))
                except StopIteration as done:
                    result: T = done.value
                    return result
                finally:
                    op.close()

    async def arun(self, op: Op[T], mode: Mode = Mode.WRITE) -> T:
        """`run`, asynchronously; a sync `PostgresSaver` runs it in a worker thread."""
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            return await asyncio.to_thread(self.run, op, mode)
        op = self._ready(op, mode)
        async with saver._cursor() as cur:
            if saver.pipe:
                await saver.pipe.sync()
            each = mode is not Mode.WRITE and cur.connection.autocommit
            async with nullcontext() if each else cur.connection.transaction():
                try:
                    statement = next(op)
                    while True:
                        statement = op.send(await _aexecute(cur, statement))
                except StopIteration as done:
                    result: T = done.value
                    return result
                finally:
                    op.close()

    def _ready(self, op: Op[T], mode: Mode) -> Op[T]:
        """`op`, preceded on this backend's first write by the reclaim records' table; a
        read creates nothing."""
        if mode is Mode.READ or self.reclaimed_table_ready:
            return op
        return self._creating_table(op)

    def _creating_table(self, op: Op[T]) -> Op[T]:
        yield Statement(CREATE_RECLAIMED_TABLE_SQL)
        result = yield from op
        self.reclaimed_table_ready = True
        return result

    def create_indexes(self) -> None:
        """Create the parent index and the sweep's root index, concurrently, and the reclaim
        records' table; needs an autocommit connection."""
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            on_saver_loop(saver.loop, "create_retention_indexes", self.acreate_indexes)
            return
        with saver._cursor() as cur:
            cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)
            cur.execute(CREATE_ROOT_INDEX_SQL, prepare=False)
            cur.execute(CREATE_RECLAIMED_TABLE_SQL, prepare=False)
        self.reclaimed_table_ready = True

    async def acreate_indexes(self) -> None:
        """Async `create_indexes`."""
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            await asyncio.to_thread(self.create_indexes)
            return
        async with saver._cursor() as cur:
            await cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)
            await cur.execute(CREATE_ROOT_INDEX_SQL, prepare=False)
            await cur.execute(CREATE_RECLAIMED_TABLE_SQL, prepare=False)
        self.reclaimed_table_ready = True

    # Dialect hooks

    def _node(self, row: Row, write_count: int) -> CheckpointNode:
        """The node from the JSONB columns the statement selected."""
        return CheckpointNode(
            checkpoint_ns=row["checkpoint_ns"],
            checkpoint_id=row["checkpoint_id"],
            parent_id=row["parent_checkpoint_id"],
            channel_versions=row["channel_versions"] or {},
            versions_seen=row["versions_seen"] or {},
            write_count=write_count,
            metadata=row["metadata"] or {},
            ts=row["ts"] or "",
            format_version=CheckpointNode.format_version_of(row["format_version"]),
        )

    def _ids_param(self, ids: Sequence[str]) -> list[str]:
        """`ids` as a list, which psycopg binds as an array."""
        return list(ids)

    def _reclaim_times(self) -> tuple[timedelta, tuple[()]]:
        """Ages by the server's clock: the TTL, for the statements to subtract from `now()`,
        which also stamps each record (the column's default)."""
        return self.reclaimed_ttl, ()


def make_backend(saver: PostgresSaver | AsyncPostgresSaver) -> PostgresBackend:
    """The backend for a `PostgresSaver` or an `AsyncPostgresSaver`."""
    return PostgresBackend(saver)
