"""`SqliteSaver` and `AsyncSqliteSaver`: tables `checkpoints` and `writes`.

`checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
type, checkpoint BLOB, metadata BLOB)` holds each checkpoint as one serialized
blob, channel values inline; `metadata` is UTF-8 JSON. `writes(thread_id,
checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value)`
holds pending writes. There is no blob table: deleting a checkpoint row frees
its channel values with it.

Reading `channel_versions`, `versions_seen` and `ts` means decoding the whole
checkpoint blob with the saver's serde (SQLite has no partial decoder for it),
so a lineage load costs one decode per checkpoint.

Each operation runs in one `BEGIN IMMEDIATE` transaction under the saver's
lock: the write lock is taken before the first read, so a precondition checked
inside it cannot change before the commit, even from another connection. On
an `AsyncSqliteSaver` the whole transaction runs as one call on aiosqlite's
connection thread: a hop to that thread costs more than the statements do.
In WAL mode it commits without an fsync (see `_commit_without_fsync`).

Over `AsyncSqliteSaver` the async admission read runs the saver's own read
statements (`_sqlite_admission.head_row`): both in one hop, under the saver's
lock and outside any transaction, as the saver runs them in six.

The primitives are `SqlBackend`'s (`_sql`), run on the statements below (`SQL`);
this module adds the drivers. Three modules beside it hold the rest, each with
its own statements: `_sqlite_plan` decodes rows into nodes and carries out a
plan's changes, `_sqlite_admission` runs the saver's own reads for admission,
and `_sqlite_compaction` gives free pages back.

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

from retaining_saver.backends._base import Mode, Op, T, drive_statements, on_saver_loop
from retaining_saver.backends._sql import Row, SqlTexts, Statement
from retaining_saver.backends._sql_threads import SqlThreads
from retaining_saver.backends._sqlite_admission import SqliteAdmission
from retaining_saver.backends._sqlite_compaction import Compaction, check_ratio, compaction
from retaining_saver.backends._sqlite_stats import SqliteStats
from retaining_saver.backends._sqlite_threads import THREAD_SQL

logger = logging.getLogger("retaining_saver")

BEGIN_SQL = "BEGIN IMMEDIATE"
COMMIT_SQL = "COMMIT"
ROLLBACK_SQL = "ROLLBACK"

SELECT_COMMIT_MODE_SQL = """
SELECT s.synchronous, j.journal_mode FROM pragma_synchronous() AS s, pragma_journal_mode() AS j
"""

# PRAGMA takes no bound parameters; the value is one of two fixed literals below.
SET_SYNCHRONOUS_SQL = "PRAGMA synchronous = {level}"

SYNCHRONOUS_NORMAL = 1

# Lets the in-transaction "still childless?" check find children by index
# instead of reading every row of the thread; created on first use.
CREATE_PARENT_INDEX_SQL = """
CREATE INDEX IF NOT EXISTS retaining_saver_checkpoints_parent_idx
ON checkpoints (thread_id, checkpoint_ns, parent_checkpoint_id)
"""

# Each reclaimed duplicate's id and the clone it resolves to; written in the
# deleting transaction, created on first use with the parent index.
CREATE_RECLAIMED_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS retaining_saver_reclaimed (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    clone_id TEXT NOT NULL,
    reclaimed_at REAL NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)
"""

UPSERT_RECLAIMED_SQL = """
INSERT OR REPLACE INTO retaining_saver_reclaimed
    (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at)
VALUES (?, ?, ?, ?, ?)
"""

DELETE_EXPIRED_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = ? AND reclaimed_at < ?
"""

DELETE_THREAD_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = ?
"""

# A read must not create the table, so it asks first whether there is one.
SELECT_RECLAIMED_TABLE_SQL = """
SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = 'retaining_saver_reclaimed'
"""

SELECT_RECLAIMED_CLONE_SQL = """
SELECT clone_id FROM retaining_saver_reclaimed
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND reclaimed_at >= ?
"""

# A node's columns and its write count, read from `checkpoints AS c`.
_NODE_COLUMNS = """
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint,
    c.metadata,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = ?"""

SELECT_LINEAGE_SQL = _NODE_COLUMNS

_NODE_SELECT = _NODE_COLUMNS + " AND c.checkpoint_ns = ?"

# The ids come as one JSON array, so the statement text never depends on their number.
SELECT_NODES_SQL = (
    _NODE_SELECT
    + """
    AND c.checkpoint_id IN (SELECT value FROM json_each(?))
"""
)

# One statement, so that a read outside any transaction sees one snapshot.
SELECT_HEAD_NODE_SQL = (
    _NODE_SELECT
    + """
ORDER BY c.checkpoint_id DESC LIMIT 1
"""
)

SELECT_HAS_CHILDREN_SQL = """
SELECT EXISTS (
    SELECT 1 FROM checkpoints
    WHERE thread_id = ? AND checkpoint_ns = ? AND parent_checkpoint_id = ?
) AS found
"""

SELECT_NEWEST_ID_SQL = """
SELECT MAX(checkpoint_id) AS newest FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?
    AND (? IS NULL OR checkpoint_id < ?)
"""

DELETE_WRITES_SQL = """
DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
"""

# RETURNING tells a transaction that lost a race (the row went meanwhile) it deleted nothing.
DELETE_CHECKPOINT_SQL = """
DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
RETURNING checkpoint_id
"""

SELECT_CHILDREN_SQL = """
SELECT parent_checkpoint_id AS parent_id, checkpoint_id FROM checkpoints
WHERE thread_id = ? AND checkpoint_ns = ?
    AND parent_checkpoint_id IN (SELECT value FROM json_each(?))
"""

_STATS_SQL = """
SELECT 'checkpoints' AS table_name, COUNT(*) AS row_count,
    COALESCE(SUM(COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0)), 0)
        AS byte_count
FROM checkpoints {where}
UNION ALL
SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes {where}
"""

SELECT_THREAD_STATS_SQL = _STATS_SQL.format(where="WHERE thread_id = ?")

SELECT_STORE_STATS_SQL = _STATS_SQL.format(where="")

SELECT_INTEGRITY_SQL = """
SELECT
    (
        SELECT COUNT(*) FROM checkpoints AS c
        WHERE c.thread_id = ? AND c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS p
            WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
                AND p.checkpoint_id = c.parent_checkpoint_id
        )
    ) AS dangling_parents,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = ? AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS c
            WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                AND c.checkpoint_id = w.checkpoint_id
        )
    ) AS orphan_writes
"""

SELECT_FIRST_THREAD_IDS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id LIMIT ?
"""

SELECT_THREAD_IDS_AFTER_SQL = """
SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > ? ORDER BY thread_id LIMIT ?
"""

SQL = SqlTexts.named(globals())
"""The constants above that `SqlBackend`'s primitives run, found by their names."""

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


def _transaction(conn: sqlite3.Connection, op: Op[T]) -> T:
    """`op` in one transaction, ended whatever happens.

    Python 3.12's `autocommit=True` makes `commit()` and `rollback()` do nothing:
    our `BEGIN` is ended by statements. Under `autocommit=False` a transaction is
    always open, so none can begin: `op` runs in it (SQLite refuses to commit
    a write over a snapshot another writer changed) and it is committed.
    """
    mode = getattr(conn, "autocommit", None)
    with _commit_without_fsync(conn):
        try:
            if mode is not False:
                _execute(conn, Statement(BEGIN_SQL))
            result = drive_statements(op, partial(_execute, conn))
            _end(conn, mode, COMMIT_SQL)
        except BaseException:
            # Whatever failed after BEGIN ran must not leave the connection inside it.
            _end(conn, mode, ROLLBACK_SQL)
            raise
    return result


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
        _execute(conn, Statement(SET_SYNCHRONOUS_SQL.format(level=SYNCHRONOUS_NORMAL)))
    try:
        yield
    finally:
        if relax:
            try:
                _execute(conn, Statement(SET_SYNCHRONOUS_SQL.format(level=level)))
            except sqlite3.Error as error:
                # The transaction already ended; only this connection's durability is off.
                logger.warning("could not restore PRAGMA synchronous = %s: %r", level, error)


def _statements(conn: sqlite3.Connection, op: Op[T]) -> T:
    """`op`'s statements with no transaction of ours, as the saver runs its reads; under
    `autocommit=False`, the transaction they ran in is ended, so no read lock stays."""
    result = drive_statements(op, partial(_execute, conn))
    if getattr(conn, "autocommit", None) is False:
        conn.rollback()
    return result


async def _on_connection_thread(
    conn: aiosqlite.Connection, call: Callable[..., T], *args: Any
) -> T:
    """`call(*args)` on the thread that owns `conn`'s sqlite3 connection, in one hop.

    aiosqlite 0.22 queues `_execute(fn, ...)` to that thread and answers its
    result; `conn._conn` is the `sqlite3.Connection` that lives there.
    """
    result: T = await conn._execute(call, *args)  # type: ignore[no-untyped-call]
    return result


class SqliteBackend(SqliteAdmission, SqliteStats, SqlThreads):
    """Backend over a `SqliteSaver` (sqlite3) or an `AsyncSqliteSaver` (aiosqlite)."""

    kind = "sqlite"
    tables = ("checkpoints", "writes")
    stores_blobs = False
    sql = SQL
    thread_sql = THREAD_SQL
    saver: SqliteSaver | AsyncSqliteSaver

    # Drivers

    index_ready = False

    def permission_problem(self, error: BaseException) -> str | None:
        """SQLITE_READONLY and its extended codes: the file or connection is read-only."""
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(error, sqlite3.Error) and code is not None and code & 0xFF == READONLY:
            return str(error)
        return None

    def run(self, op: Op[T], mode: Mode = Mode.WRITE) -> T:
        """Carry out `op` under the saver's lock, once it is set up: a READ outside any
        transaction of ours, as the saver's own reads run (`BEGIN IMMEDIATE` would take
        the write lock); a WRITE or GUARDED one in one `BEGIN IMMEDIATE` transaction.
        An async saver runs it on its loop."""
        saver = self.saver
        if isinstance(saver, AsyncSqliteSaver):
            return on_saver_loop(saver.loop, None, lambda: self.arun(op, mode))
        with saver.lock:
            saver.setup()
            if mode is Mode.READ:
                return _statements(saver.conn, op)
            return _transaction(saver.conn, self._indexed(op))

    async def arun(self, op: Op[T], mode: Mode = Mode.WRITE) -> T:
        """`run`, asynchronously: on aiosqlite's connection thread, in one hop; a sync
        `SqliteSaver` runs it in a worker thread."""
        saver = self.saver
        if isinstance(saver, SqliteSaver):
            return await asyncio.to_thread(self.run, op, mode)
        await saver.setup()
        async with saver.lock:
            conn = saver.conn
            if mode is Mode.READ:
                return await _on_connection_thread(conn, _statements, conn._conn, op)
            return await _on_connection_thread(conn, _transaction, conn._conn, self._indexed(op))

    def _indexed(self, op: Op[T]) -> Op[T]:
        """`op`, preceded on this backend's first run by the parent index and the
        reclaim records' table."""
        if not self.index_ready:
            yield Statement(CREATE_PARENT_INDEX_SQL)
            yield Statement(CREATE_RECLAIMED_TABLE_SQL)
        result = yield from op
        self.index_ready = True
        return result

    # Dialect hooks

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
        outside `run`. It needs no other connection to hold the database open
        in a transaction; if one does, SQLite raises `database is locked`.

        Raises:
            ValueError: If `min_free_ratio` is not within [0, 1].
        """
        check_ratio(min_free_ratio)
        saver = self.saver
        if isinstance(saver, AsyncSqliteSaver):
            return on_saver_loop(
                saver.loop, "compact_storage", lambda: self.acompact(min_free_ratio)
            )
        with saver.lock:
            saver.setup()
            return drive_statements(compaction(min_free_ratio), partial(_execute, saver.conn))

    async def acompact(self, min_free_ratio: float = 0.25) -> Compaction:
        """`compact`, asynchronously; a sync `SqliteSaver` runs it in a worker thread."""
        check_ratio(min_free_ratio)
        saver = self.saver
        if isinstance(saver, SqliteSaver):
            return await asyncio.to_thread(self.compact, min_free_ratio)
        await saver.setup()
        async with saver.lock:
            conn = saver.conn
            return await _on_connection_thread(
                conn, drive_statements, compaction(min_free_ratio), partial(_execute, conn._conn)
            )


def make_backend(saver: SqliteSaver | AsyncSqliteSaver) -> SqliteBackend:
    """The backend for a `SqliteSaver` or an `AsyncSqliteSaver`."""
    return SqliteBackend(saver)
