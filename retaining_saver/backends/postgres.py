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
has a pool), the way the saver's `prune` runs; a WRITE transaction of ours commits without
waiting for the WAL flush (`ASYNC_COMMIT_SQL`). Statements are prepared as the
connection's `prepare_threshold` says, as the saver's own are.
The default READ COMMITTED isolation applies: a precondition is re-checked
inside the transaction, but a checkpoint another connection commits after
that check is not seen by it.

All of the store's SQL is named constants in the `_postgres_sql*` modules
(see `_postgres_sql`). The logic is in modules split by when their statements
run, so that each can be read whole:

- this one: the transactions, whose executors run every statement; the reclaim
  records' table and the parent index; and the statements of `SqlBackend`'s
  primitives (`_sql`), each field of `SQL` assigned from its constant;
- `_postgres_admission` (`PostgresAdmission`): admission, on the path of every
  run's read, each statement one round trip tuned to its query plan: the
  guarded takes of a trailing leaf, and the saver's own reads;
- `_postgres_plan` (`PostgresPlans`): a plan's steps in bulk and the sweep of
  the blobs they free; `_postgres_stats` (`PostgresStats`): the statistics.

`PostgresBackend` mixes them in; their statements reach the database only
through the executors of the transactions here (`_execute`, `_aexecute`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, nullcontext
from datetime import timedelta
from functools import partial
from typing import Any, cast

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow

from retaining_saver._rules import CheckpointNode
from retaining_saver.backends._base import AExecute, Execute, Mode, on_saver_loop
from retaining_saver.backends._postgres_admission import PostgresAdmission
from retaining_saver.backends._postgres_apart import OPEN, Rounds
from retaining_saver.backends._postgres_plan import PostgresPlans
from retaining_saver.backends._postgres_sql import (
    ASYNC_COMMIT_SQL,
    COPY_BLOBS_SQL,
    COPY_CHECKPOINTS_SQL,
    COPY_RECLAIMED_SQL,
    COPY_WRITES_SQL,
    CREATE_PARENT_INDEX_SQL,
    CREATE_RUN_INDEX_SQL,
    CREATE_TABLES_SQL,
    DELETE_CHECKPOINT_SQL,
    DELETE_EXPIRED_RECLAIMED_SQL,
    DELETE_RECLAIMED_CLONES_SQL,
    DELETE_THREAD_RECLAIMED_SQL,
    DELETE_WRITE_SQL,
    DELETE_WRITES_SQL,
    SELECT_CHILDREN_SQL,
    SELECT_FIRST_THREAD_IDS_SQL,
    SELECT_HAS_CHILDREN_SQL,
    SELECT_HEAD_NODE_SQL,
    SELECT_INTEGRITY_SQL,
    SELECT_LINEAGE_SQL,
    SELECT_NEWEST_ID_SQL,
    SELECT_NODES_SQL,
    SELECT_RECLAIMED_CLONE_SQL,
    SELECT_RECLAIMED_TABLE_SQL,
    SELECT_RUN_THREADS_SQL,
    SELECT_STORE_STATS_SQL,
    SELECT_THREAD_EXISTS_SQL,
    SELECT_THREAD_IDS_AFTER_SQL,
    SELECT_THREAD_STATS_SQL,
    SELECT_WRITE_ROWS_SQL,
    UPSERT_RECLAIMED_SQL,
)
from retaining_saver.backends._postgres_sql_resumes import (
    COPY_RESUMED_SQL,
    DELETE_RESUMPTION_SQL,
    DELETE_THREAD_RESUMED_SQL,
    DELETE_UNRECORDED_WRITES_SQL,
    INSERT_RESUMPTION_SQL,
    RESTORE_RECORDED_WRITES_SQL,
    SELECT_RESUMED_TABLE_SQL,
    SELECT_RESUMED_THREADS_SQL,
    SELECT_RESUMPTIONS_SQL,
)
from retaining_saver.backends._postgres_sql_sweep import CREATE_ROOT_INDEX_SQL
from retaining_saver.backends._postgres_stats import PostgresStats
from retaining_saver.backends._sql import Apart, Done, Row, SqlTexts, Statement
from retaining_saver.backends._sql_resumes import ResumeTexts, SqlResumes
from retaining_saver.backends._sql_threads import ThreadTexts

SQL = SqlTexts(
    select_lineage=SELECT_LINEAGE_SQL,
    select_nodes=SELECT_NODES_SQL,
    select_head_node=SELECT_HEAD_NODE_SQL,
    select_has_children=SELECT_HAS_CHILDREN_SQL,
    select_newest_id=SELECT_NEWEST_ID_SQL,
    delete_checkpoint=DELETE_CHECKPOINT_SQL,
    delete_writes=DELETE_WRITES_SQL,
    delete_expired_reclaimed=DELETE_EXPIRED_RECLAIMED_SQL,
    upsert_reclaimed=UPSERT_RECLAIMED_SQL,
    select_reclaimed_table=SELECT_RECLAIMED_TABLE_SQL,
    select_reclaimed_clone=SELECT_RECLAIMED_CLONE_SQL,
    delete_thread_reclaimed=DELETE_THREAD_RECLAIMED_SQL,
    select_thread_stats=SELECT_THREAD_STATS_SQL,
    select_store_stats=SELECT_STORE_STATS_SQL,
    select_first_thread_ids=SELECT_FIRST_THREAD_IDS_SQL,
    select_thread_ids_after=SELECT_THREAD_IDS_AFTER_SQL,
    select_integrity=SELECT_INTEGRITY_SQL,
    select_children=SELECT_CHILDREN_SQL,
)
"""The statements `SqlBackend`'s primitives run on Postgres, each named."""

THREAD_SQL = ThreadTexts(
    select_run_threads=SELECT_RUN_THREADS_SQL,
    select_thread_exists=SELECT_THREAD_EXISTS_SQL,
    copy_checkpoints=COPY_CHECKPOINTS_SQL,
    copy_writes=COPY_WRITES_SQL,
    copy_blobs=COPY_BLOBS_SQL,
    copy_reclaimed=COPY_RECLAIMED_SQL,
    delete_reclaimed_clones=DELETE_RECLAIMED_CLONES_SQL,
    select_write_rows=SELECT_WRITE_ROWS_SQL,
    delete_write=DELETE_WRITE_SQL,
)
"""The statements `SqlThreads` runs on Postgres, each named."""

RESUME_SQL = ResumeTexts(
    select_resumed_table=SELECT_RESUMED_TABLE_SQL,
    insert_resumption=INSERT_RESUMPTION_SQL,
    select_resumptions=SELECT_RESUMPTIONS_SQL,
    delete_unrecorded_writes=DELETE_UNRECORDED_WRITES_SQL,
    restore_recorded_writes=RESTORE_RECORDED_WRITES_SQL,
    delete_resumption=DELETE_RESUMPTION_SQL,
    delete_thread_resumed=DELETE_THREAD_RESUMED_SQL,
    copy_resumed=COPY_RESUMED_SQL,
    select_resumed_threads=SELECT_RESUMED_THREADS_SQL,
)
"""The statements of the resume ledger (`SqlResumes`) on Postgres, each named."""


INSUFFICIENT_PRIVILEGE = "42501"


def _execute(cur: Cursor[DictRow], statement: Statement | Apart) -> Any:
    if isinstance(statement, Apart):
        return _execute_apart(cur, statement)
    cur.execute(statement.sql, statement.params, prepare=statement.prepare)
    return cur.fetchall() if statement.fetch else []


async def _aexecute(cur: AsyncCursor[DictRow], statement: Statement | Apart) -> Any:
    if isinstance(statement, Apart):
        return await _aexecute_apart(cur, statement)
    await cur.execute(statement.sql, statement.params, prepare=statement.prepare)
    return await cur.fetchall() if statement.fetch else []


def _execute_apart(cur: Cursor[DictRow], apart: Apart) -> list[Done]:
    """Each transaction of `apart` committed or rolled back alone, in order, in rounds of
    one pipeline each (see `_postgres_apart`)."""
    rounds = Rounds(cur, apart)
    for step in rounds:
        step.record([cursor.fetchall() for cursor in step.settle(_send(cur, step))])
    return rounds.results()


async def _aexecute_apart(cur: AsyncCursor[DictRow], apart: Apart) -> list[Done]:
    """`_execute_apart`, asynchronously."""
    rounds = Rounds(cur, apart)
    for step in rounds:
        step.record([await cursor.fetchall() for cursor in step.settle(await _asend(cur, step))])
    return rounds.results()


def _send(cur: Cursor[DictRow], step: Rounds) -> list[Exception]:
    """Send a round's calls in one pipeline; what it raised (the server skips the rest
    after a failure: so does the sending)."""
    try:
        with cur.connection.pipeline():
            for cursor, statement in step.calls():
                cursor.execute(statement.sql, statement.params, prepare=statement.prepare)
    except psycopg.Error as error:
        return [error]
    finally:  # a failure (or a cancel) left a transaction of ours open: end it
        if cur.connection.info.transaction_status in OPEN:
            cur.connection.rollback()
    return []


async def _asend(cur: AsyncCursor[DictRow], step: Rounds) -> list[Exception]:
    """`_send`, asynchronously."""
    try:
        async with cur.connection.pipeline():
            for cursor, statement in step.calls():
                await cursor.execute(statement.sql, statement.params, prepare=statement.prepare)
    except psycopg.Error as error:
        return [error]
    finally:  # a failure (or a cancel) left a transaction of ours open: end it
        if cur.connection.info.transaction_status in OPEN:
            await cur.connection.rollback()
    return []


INDEXING = tuple(
    Statement(sql, prepare=False)
    for sql in (
        CREATE_PARENT_INDEX_SQL,
        CREATE_ROOT_INDEX_SQL,
        CREATE_RUN_INDEX_SQL,
        CREATE_TABLES_SQL,
    )
)
"""The statements of `create_indexes`, each on its own (`CONCURRENTLY` runs in no
transaction) and never prepared: each runs once."""


class PostgresBackend(PostgresAdmission, PostgresPlans, PostgresStats, SqlResumes):
    """Backend over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    kind = "postgres"
    holds_nul = False
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    stores_blobs = True
    sql = SQL
    thread_sql = THREAD_SQL
    resume_sql = RESUME_SQL
    saver: PostgresSaver | AsyncPostgresSaver

    # Transactions

    reclaimed_table_ready = False

    def __init__(self, saver: PostgresSaver | AsyncPostgresSaver) -> None:
        super().__init__(saver)
        if isinstance(saver, AsyncPostgresSaver):
            self.loop, self.awaited = saver.loop, self

    def permission_problem(self, error: BaseException) -> str | None:
        """SQLSTATE 42501 (insufficient_privilege): the driver's first line names it."""
        if getattr(error, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            return None
        return str(error).splitlines()[0] if str(error) else "insufficient privilege"

    @contextmanager
    def transaction(self, mode: Mode) -> Iterator[Execute]:
        """The sync saver's cursor: a READ or GUARDED transaction one statement each where
        the connection autocommits, else (and a WRITE always) one transaction. The
        saver's pipeline is synced first, so that the transaction takes in nothing it
        queued."""
        with (saver := cast(PostgresSaver, self.saver))._cursor() as cur:
            if saver.pipe:
                saver.pipe.sync()
            with self._enclosing(mode, cur):
                list(map(execute := partial(_execute, cur), self._preamble(mode, cur)))
                yield execute
                self.reclaimed_table_ready |= mode is not Mode.READ

    @asynccontextmanager
    async def atransaction(self, mode: Mode) -> AsyncIterator[AExecute]:
        """`transaction`, for the async saver."""
        async with (saver := cast(AsyncPostgresSaver, self.saver))._cursor() as cur:
            if saver.pipe:
                await saver.pipe.sync()
            async with self._enclosing(mode, cur):
                for statement in self._preamble(mode, cur):
                    await _aexecute(cur, statement)
                yield partial(_aexecute, cur)
                self.reclaimed_table_ready |= mode is not Mode.READ

    def _enclosing(self, mode: Mode, cur: Any) -> Any:
        """The connection's transaction `mode` runs in; none for a READ or GUARDED one on an
        autocommit connection, whose statements each run on their own, and none for an
        APART one, whose `Apart` holds transactions of its own."""
        if mode is Mode.APART or (mode is not Mode.WRITE and cur.connection.autocommit):
            return nullcontext()
        return cur.connection.transaction()

    def _preamble(self, mode: Mode, cur: Any) -> list[Statement]:
        """What runs first in the transaction: on this backend's first write, the reclaim
        records' and resume ledger's tables, in one statement (a read creates nothing);
        in a WRITE transaction of ours (on an autocommit connection, not inside a
        caller's), `ASYNC_COMMIT_SQL`, so that its commit does not wait for the WAL
        flush."""
        first = []
        if mode is not Mode.READ and not self.reclaimed_table_ready:
            first.append(Statement(CREATE_TABLES_SQL))
        if mode is Mode.WRITE and cur.connection.autocommit:
            first.append(Statement(ASYNC_COMMIT_SQL, prepare=False))
        return first

    def create_indexes(self) -> None:
        """Create the parent index, the sweep's root index and the run index, concurrently,
        and the reclaim records' and resume ledger's tables; needs an autocommit
        connection."""
        if self.loop is not None:
            return on_saver_loop(self.loop, "create_retention_indexes", self.acreate_indexes)
        with self.transaction(Mode.GUARDED) as execute:
            list(map(execute, INDEXING))

    async def acreate_indexes(self) -> None:
        """Async `create_indexes`; a sync `PostgresSaver` runs it in a worker thread."""
        if self.awaited is None:
            return await self.hop(self.create_indexes)
        async with self.atransaction(Mode.GUARDED) as aexecute:
            for statement in INDEXING:
                await aexecute(statement)

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
