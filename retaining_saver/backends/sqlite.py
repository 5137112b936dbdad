"""`SqliteSaver` and `AsyncSqliteSaver`: tables `checkpoints` and `writes`.

`checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
type, checkpoint BLOB, metadata BLOB)` holds each checkpoint as one serialized
blob, channel values inline; `metadata` is UTF-8 JSON. `writes(thread_id,
checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value)`
holds pending writes. There is no blob table: deleting a checkpoint row frees
its channel values with it.

Reading `channel_versions`, `versions_seen` and `ts` means decoding the
checkpoint blob (SQLite has no partial decoder for it), so a lineage load costs
one decode per checkpoint it has not read before (`_sqlite_lineage`); one that
leaves the values' messages and models undecoded where the saver's own serde
wrote it (`_sqlite_plan.node_fields`).

Each operation runs in one `BEGIN IMMEDIATE` transaction under the saver's
lock: the write lock is taken before the first read, so a precondition checked
inside it cannot change before the commit, even from another connection. On
an `AsyncSqliteSaver` the whole transaction runs as one call on aiosqlite's
connection thread: a hop to that thread costs more than the statements do.
In WAL mode it commits without an fsync (see `_commit_without_fsync`).

Over `AsyncSqliteSaver` the async admission read runs the saver's own read
statements (`_sqlite_admission.head_row`): both in one hop, under the saver's
lock and outside any transaction, as the saver runs them in six.

All of the store's SQL is named constants in `_sqlite_sql` and `_sqlite_sql_plan`.
The primitives are `SqlBackend`'s (`_sql`), run on the statements `SQL` names;
this module adds the transactions they run in. Four modules beside it hold the rest:
`_sqlite_plan` decodes rows into nodes and carries out a plan's changes,
`_sqlite_lineage` reads each row's payload for a lineage once,
`_sqlite_admission` runs the saver's own reads for admission, and
`_sqlite_compaction` gives free pages back.

`SqliteBackend.compact` / `acompact` (not part of `Backend`) reclaim the file
space deleted rows leave on SQLite's freelist; see `Compaction`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import aiosqlite
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from retaining_saver._rules import CheckpointNode
from retaining_saver.backends._base import Execute, Mode, T, on_saver_loop
from retaining_saver.backends._sql import Row, SqlTexts, Statement
from retaining_saver.backends._sql_resumes import ResumeTexts, SqlResumes
from retaining_saver.backends._sql_threads import ThreadTexts
from retaining_saver.backends._sqlite_admission import SqliteAdmission
from retaining_saver.backends._sqlite_compaction import Compaction, check_ratio, compaction
from retaining_saver.backends._sqlite_lineage import SqliteLineage
from retaining_saver.backends._sqlite_plan import node_fields, node_of
from retaining_saver.backends._sqlite_sql import (
    BEGIN_SQL,
    COMMIT_SQL,
    COPY_CHECKPOINTS_SQL,
    COPY_RECLAIMED_SQL,
    COPY_WRITES_SQL,
    CREATE_PARENT_INDEX_SQL,
    CREATE_RECLAIMED_TABLE_SQL,
    DELETE_CHECKPOINT_SQL,
    DELETE_EXPIRED_RECLAIMED_SQL,
    DELETE_RECLAIMED_CLONES_SQL,
    DELETE_THREAD_RECLAIMED_SQL,
    DELETE_WRITE_SQL,
    DELETE_WRITES_SQL,
    ROLLBACK_SQL,
    SELECT_CHILDREN_SQL,
    SELECT_COMMIT_MODE_SQL,
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
    SET_SYNCHRONOUS_EXTRA_SQL,
    SET_SYNCHRONOUS_FULL_SQL,
    SET_SYNCHRONOUS_NORMAL_SQL,
    SET_SYNCHRONOUS_OFF_SQL,
    UPSERT_RECLAIMED_SQL,
)
from retaining_saver.backends._sqlite_sql_resumes import (
    COPY_RESUMED_SQL,
    CREATE_RESUMED_RUN_INDEX_SQL,
    CREATE_RESUMED_TABLE_SQL,
    DELETE_RESUMPTION_SQL,
    DELETE_THREAD_RESUMED_SQL,
    DELETE_UNRECORDED_WRITES_SQL,
    INSERT_RESUMPTION_SQL,
    RESTORE_RECORDED_WRITES_SQL,
    SELECT_RESUMED_TABLE_SQL,
    SELECT_RESUMED_THREADS_SQL,
    SELECT_RESUMPTIONS_SQL,
)
from retaining_saver.backends._sqlite_stats import SqliteStats

logger = logging.getLogger("retaining_saver")


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
"""The statements `SqlBackend`'s primitives run on SQLite, each named."""

THREAD_SQL = ThreadTexts(
    select_run_threads=SELECT_RUN_THREADS_SQL,
    select_thread_exists=SELECT_THREAD_EXISTS_SQL,
    copy_checkpoints=COPY_CHECKPOINTS_SQL,
    copy_writes=COPY_WRITES_SQL,
    copy_blobs=None,
    copy_reclaimed=COPY_RECLAIMED_SQL,
    delete_reclaimed_clones=DELETE_RECLAIMED_CLONES_SQL,
    select_write_rows=SELECT_WRITE_ROWS_SQL,
    delete_write=DELETE_WRITE_SQL,
)
"""The statements `SqlThreads` runs on SQLite, each named; there is no blob table."""

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
"""The statements of the resume ledger (`SqlResumes`) on SQLite, each named."""

SYNCHRONOUS_NORMAL = 1

# `PRAGMA synchronous` by the level it sets: SQLite has these four.
SET_SYNCHRONOUS = {
    0: SET_SYNCHRONOUS_OFF_SQL,
    SYNCHRONOUS_NORMAL: SET_SYNCHRONOUS_NORMAL_SQL,
    2: SET_SYNCHRONOUS_FULL_SQL,
    3: SET_SYNCHRONOUS_EXTRA_SQL,
}


READONLY = sqlite3.SQLITE_READONLY


def _rows(description: Any, fetched: Iterable[Any]) -> list[Row]:
    """Rows as dicts keyed by the cursor's column names."""
    if description is None:
        return []
    names = [column[0] for column in description]
    return [dict(zip(names, row, strict=True)) for row in fetched]


def _execute(conn: sqlite3.Connection, statement: Statement) -> list[Row]:
    cur = conn.cursor()
    try:
        cur.row_factory = None  # plain tuples, whatever the connection's factory
        cur.execute(statement.sql, statement.params)
        return _rows(cur.description, cur.fetchall())
    finally:
        cur.close()


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """The block in one transaction, ended whatever happens.

    Python 3.12's `autocommit=True` makes `commit()` and `rollback()` do nothing:
    our `BEGIN` is ended by statements. Under `autocommit=False` a transaction is
    always open, so none can begin: the block runs in it (SQLite refuses to commit
    a write over a snapshot another writer changed) and it is committed.
    """
    mode = getattr(conn, "autocommit", None)
    with _commit_without_fsync(conn):
        try:
            if mode is not False:
                _execute(conn, Statement(BEGIN_SQL))
            yield
            _end(conn, mode, COMMIT_SQL)
        except BaseException:
            # Whatever failed after BEGIN ran must not leave the connection inside it.
            _end(conn, mode, ROLLBACK_SQL)
            raise


def _end(conn: sqlite3.Connection, mode: object, sql: str) -> None:
    """Commit or roll back (`sql`) the transaction open on `conn`, in its `autocommit` mode."""
    if mode is True:
        if conn.in_transaction:
            _execute(conn, Statement(sql))
    elif sql == COMMIT_SQL:
        conn.commit()
    elif conn.in_transaction or mode is False:
        conn.rollback()


@contextmanager
def _commit_without_fsync(conn: sqlite3.Connection) -> Iterator[None]:
    """Commit our transaction at `synchronous = NORMAL` when the WAL is in use.

    Every transaction here takes the thread from one valid state to another,
    so losing the newest one in a power cut leaves a valid state. The WAL is
    one append-only log: the next commit that syncs it, on any connection,
    makes ours durable too. In WAL mode NORMAL cannot corrupt the database;
    in rollback-journal mode it can, so the setting is left alone there.
    """
    mode = _execute(conn, Statement(SELECT_COMMIT_MODE_SQL))[0]
    level = int(mode["synchronous"])
    relax = str(mode["journal_mode"]).lower() == "wal" and level > SYNCHRONOUS_NORMAL
    if relax:
        _execute(conn, Statement(SET_SYNCHRONOUS[SYNCHRONOUS_NORMAL]))
    try:
        yield
    finally:
        if relax:
            try:
                _execute(conn, Statement(SET_SYNCHRONOUS[level]))
            except sqlite3.Error as error:
                # The transaction already ended; only this connection's durability is off.
                logger.warning("could not restore PRAGMA synchronous = %s: %r", level, error)


def _end_read(conn: sqlite3.Connection) -> None:
    """After a read's statements, run with no transaction of ours as the saver runs its
    reads: under `autocommit=False`, end the transaction they ran in, so no read lock
    stays."""
    if getattr(conn, "autocommit", None) is False:
        conn.rollback()


async def _on_connection_thread(conn: aiosqlite.Connection, call: Callable[[], T]) -> T:
    """`call()` on the thread that owns `conn`'s sqlite3 connection, in one hop.

    aiosqlite 0.22 queues `_execute(fn, ...)` to that thread and answers its
    result; `conn._conn` is the `sqlite3.Connection` that lives there.
    """
    result: T = await conn._execute(call)  # type: ignore[no-untyped-call]
    return result


class SqliteBackend(SqliteAdmission, SqliteLineage, SqliteStats, SqlResumes):
    """Backend over a `SqliteSaver` (sqlite3) or an `AsyncSqliteSaver` (aiosqlite)."""

    kind = "sqlite"
    tables = ("checkpoints", "writes")
    stores_blobs = False
    sql = SQL
    thread_sql = THREAD_SQL
    resume_sql = RESUME_SQL
    saver: SqliteSaver | AsyncSqliteSaver

    # Transactions

    index_ready = False

    def __init__(self, saver: SqliteSaver | AsyncSqliteSaver) -> None:
        super().__init__(saver)
        if isinstance(saver, AsyncSqliteSaver):
            self.loop = saver.loop

    def permission_problem(self, error: BaseException) -> str | None:
        """SQLITE_READONLY and its extended codes: the file or connection is read-only."""
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(error, sqlite3.Error) and code is not None and code & 0xFF == READONLY:
            return str(error)
        return None

    @contextmanager
    def transaction(self, mode: Mode) -> Iterator[Execute]:
        """On the saver's connection, once it is set up: a READ in no transaction of ours,
        as the saver's own reads run (`BEGIN IMMEDIATE` would take the write lock); a
        WRITE or GUARDED one in one `BEGIN IMMEDIATE` transaction, on this backend's
        first preceded by the parent index, the reclaim records' table and the resume
        ledger's.

        Over an `AsyncSqliteSaver` it is entered on aiosqlite's connection thread,
        by `hop`, which holds the saver's lock.
        """
        if isinstance(saver := self.saver, AsyncSqliteSaver):
            yield from self._statements(saver.conn._conn, mode)
            return
        with saver.lock:
            saver.setup()
            yield from self._statements(saver.conn, mode)

    def _statements(self, conn: sqlite3.Connection, mode: Mode) -> Iterator[Execute]:
        """`transaction`'s body on `conn`: the executor, in what `mode` runs in."""
        execute = partial(_execute, conn)
        if mode is Mode.READ:
            yield execute
            _end_read(conn)
            return
        with _transaction(conn):
            if not self.index_ready:
                execute(Statement(CREATE_PARENT_INDEX_SQL))
                execute(Statement(CREATE_RECLAIMED_TABLE_SQL))
                execute(Statement(CREATE_RESUMED_TABLE_SQL))
                execute(Statement(CREATE_RESUMED_RUN_INDEX_SQL))
            yield execute
            self.index_ready = True

    async def hop(self, call: Callable[[], T]) -> T:
        """`call()` on aiosqlite's connection thread, in one hop, under the saver's lock
        once it is set up; a sync `SqliteSaver` runs it in a worker thread."""
        if isinstance(saver := self.saver, SqliteSaver):
            return await asyncio.to_thread(call)
        await saver.setup()
        async with saver.lock:
            return await _on_connection_thread(saver.conn, call)

    # Dialect hooks

    def _node(self, row: Row, write_count: int) -> CheckpointNode:
        """The node, its versions and ts decoded from the checkpoint blob."""
        return node_of(row, node_fields(self.saver, row), write_count)

    def _ids_param(self, ids: Sequence[str]) -> str:
        """`ids` as one JSON array text, which `SELECT_NODES_SQL` reads with `json_each`."""
        return json.dumps(list(ids))

    def _reclaim_times(self) -> tuple[float, tuple[float]]:
        """Ages by this process's clock: `reclaimed_at` holds the `time.time()` of the
        delete, and a record older than the TTL is one stamped before now minus it."""
        now = time.time()
        return now - self.reclaimed_ttl.total_seconds(), (now,)

    # Compaction (SQLite only)

    def compact(self, min_free_ratio: float = 0.25) -> Compaction:
        """Give free pages back to the filesystem once enough of the file is free.

        When `freelist_count / page_count` is at least `min_free_ratio` (and
        some page is free), checkpoint the WAL with TRUNCATE, `VACUUM`, and
        checkpoint again so the rebuilt pages land in the main file. VACUUM
        cannot run in a transaction, so this runs under the saver's lock but
        outside `transaction`. It needs no other connection to hold the database open
        in a transaction; if one does, SQLite raises `database is locked`.

        Raises:
            ValueError: If `min_free_ratio` is not within [0, 1].
        """
        check_ratio(min_free_ratio)
        if (loop := self.loop) is None:
            return self._compact(min_free_ratio)
        return on_saver_loop(loop, "compact_storage", partial(self.acompact, min_free_ratio))

    async def acompact(self, min_free_ratio: float = 0.25) -> Compaction:
        """`compact`, asynchronously; a sync `SqliteSaver` runs it in a worker thread."""
        check_ratio(min_free_ratio)
        return await self.hop(partial(self._compact, min_free_ratio))

    def _compact(self, min_free_ratio: float) -> Compaction:
        """`compaction` on the saver's connection (as `transaction` takes it), outside any
        transaction: VACUUM cannot run in one."""
        if isinstance(saver := self.saver, AsyncSqliteSaver):
            return compaction(partial(_execute, saver.conn._conn), min_free_ratio)
        with saver.lock:
            saver.setup()
            return compaction(partial(_execute, saver.conn), min_free_ratio)


def make_backend(saver: SqliteSaver | AsyncSqliteSaver) -> SqliteBackend:
    """The backend for a `SqliteSaver` or an `AsyncSqliteSaver`."""
    return SqliteBackend(saver)
