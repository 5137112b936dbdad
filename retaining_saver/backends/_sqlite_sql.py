"""SQLite: the SQL of the transactions, of the primitives every backend has, of the reclaim
records' table, of whole-thread operations and of admission's reads, each statement
written out in full under its name.

All of the SQLite backend's SQL lives in two modules: this one, and
`_sqlite_sql_plan` (a plan's changes, the statistics, compaction and the idle-thread
sweep), apart for length. A statement that differs from another by a clause is
written out again, whole, so that `grep NAME` finds the text that runs. The modules
that run them import them by name.
"""

from __future__ import annotations

# The transactions': a write one takes the write lock before its first read.
BEGIN_SQL = "BEGIN IMMEDIATE"

COMMIT_SQL = "COMMIT"

ROLLBACK_SQL = "ROLLBACK"

# How the connection commits: `_commit_without_fsync` relaxes `synchronous` in WAL mode.
SELECT_COMMIT_MODE_SQL = """
SELECT s.synchronous, j.journal_mode FROM pragma_synchronous() AS s, pragma_journal_mode() AS j
"""

# PRAGMA takes no bound parameters: one statement per level SQLite has (`OFF` to
# `EXTRA`), to relax to `NORMAL` and restore the level the connection had.
SET_SYNCHRONOUS_OFF_SQL = "PRAGMA synchronous = 0"

SET_SYNCHRONOUS_NORMAL_SQL = "PRAGMA synchronous = 1"

SET_SYNCHRONOUS_FULL_SQL = "PRAGMA synchronous = 2"

SET_SYNCHRONOUS_EXTRA_SQL = "PRAGMA synchronous = 3"

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

# A node's columns and its write count, read from `checkpoints AS c`. With `newest`, a
# window: only the rows, of every namespace, at or above the `newest`-th newest root
# checkpoint's id, which the primary key finds newest first (`Lineage.window_start`,
# on every row; '' for the whole thread: `newest` NULL, or no more root checkpoints).
# A row `known` lists (a JSON array of [ns, id, type, payload bytes, metadata bytes],
# each as the caller last read it) comes `remembered`, and a row `written` lists (an
# array of [ns, id, type, metadata bytes], as the caller put it) comes `written`: either
# without its payload or its metadata. `length` of a blob is read from the row's
# header, where the metadata, stored after the payload, is reached only by walking the
# payload's overflow pages.
SELECT_LINEAGE_SQL = """
WITH known(checkpoint_ns, checkpoint_id, type, payload_length, metadata_length) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
        json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]')
    FROM json_each(:known)
), written(checkpoint_ns, checkpoint_id, type, metadata_length) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
        json_extract(value, '$[2]'), json_extract(value, '$[3]')
    FROM json_each(:written)
)
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type,
    length(c.checkpoint) AS payload_length, length(c.metadata) AS metadata_length,
    CASE WHEN (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.checkpoint),
        length(c.metadata)) IN known
        OR (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.metadata)) IN written
        THEN NULL ELSE c.checkpoint END AS checkpoint,
    CASE WHEN (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.checkpoint),
        length(c.metadata)) IN known
        OR (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.metadata)) IN written
        THEN NULL ELSE c.metadata END AS metadata,
    (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.checkpoint),
        length(c.metadata)) IN known AS remembered,
    (c.checkpoint_ns, c.checkpoint_id, c.type, length(c.metadata)) IN written AS written,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count,
    edge.window_start
FROM (
    SELECT coalesce(CASE WHEN :newest IS NOT NULL THEN (
        SELECT max(r.checkpoint_id) FROM (
            SELECT checkpoint_id FROM checkpoints
            WHERE thread_id = :thread_id AND checkpoint_ns = ''
            ORDER BY checkpoint_id DESC
            LIMIT 2 OFFSET :newest - 1
        ) AS r
        HAVING count(*) = 2
    ) END, '') AS window_start
) AS edge
JOIN checkpoints AS c ON c.checkpoint_id >= edge.window_start
WHERE c.thread_id = :thread_id"""

# `SELECT_LINEAGE_SQL`'s rows with neither payload nor metadata, nor any list to match:
# what tells each row's remembered or written node apart (type and lengths, from the
# row's header), its parent and its write count. A load whose every row is one it
# knows builds its lineage from this alone (`_sqlite_lineage`).
SELECT_LINEAGE_HEADERS_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type,
    length(c.checkpoint) AS payload_length, length(c.metadata) AS metadata_length,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count,
    edge.window_start
FROM (
    SELECT coalesce(CASE WHEN :newest IS NOT NULL THEN (
        SELECT max(r.checkpoint_id) FROM (
            SELECT checkpoint_id FROM checkpoints
            WHERE thread_id = :thread_id AND checkpoint_ns = ''
            ORDER BY checkpoint_id DESC
            LIMIT 2 OFFSET :newest - 1
        ) AS r
        HAVING count(*) = 2
    ) END, '') AS window_start
) AS edge
JOIN checkpoints AS c ON c.checkpoint_id >= edge.window_start
WHERE c.thread_id = :thread_id"""

# The ids come as one JSON array, so the statement text never depends on their number.
SELECT_NODES_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint,
    c.metadata,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = ? AND c.checkpoint_ns = ?
    AND c.checkpoint_id IN (SELECT value FROM json_each(?))
"""

# One statement, so that a read outside any transaction sees one snapshot.
SELECT_HEAD_NODE_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint,
    c.metadata,
    (
        SELECT COUNT(*) FROM writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = ? AND c.checkpoint_ns = ?
ORDER BY c.checkpoint_id DESC LIMIT 1
"""

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

SELECT_THREAD_STATS_SQL = """
SELECT 'checkpoints' AS table_name, COUNT(*) AS row_count,
    COALESCE(SUM(COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0)), 0)
        AS byte_count
FROM checkpoints WHERE thread_id = ?
UNION ALL
SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?
"""

SELECT_STORE_STATS_SQL = """
SELECT 'checkpoints' AS table_name, COUNT(*) AS row_count,
    COALESCE(SUM(COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0)), 0)
        AS byte_count
FROM checkpoints
UNION ALL
SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes
"""

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

# Whole-thread and whole-run operations (`SqlThreads`): `delete_for_runs` finds a run's
# threads and forgets the reclaim records of what it deleted; `copy_thread` copies a
# thread's rows under another id. There is no blob table to copy.
#
# The run ids come as one JSON array; `metadata` is UTF-8 JSON, read as the saver's
# own metadata filter reads it.
SELECT_RUN_THREADS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints
WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') IN (SELECT value FROM json_each(?))
"""

# A resumed checkpoint's writes rows, and the deletion of one that a removed run put
# there (`_rules._resumed`): only while the checkpoint has no child left.
SELECT_WRITE_ROWS_SQL = """
SELECT task_id, channel, idx FROM writes
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
ORDER BY task_id, idx
"""

DELETE_WRITE_SQL = """
DELETE FROM writes
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? AND idx = ?
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = writes.thread_id AND c.checkpoint_ns = writes.checkpoint_ns
            AND c.parent_checkpoint_id = writes.checkpoint_id
    )
RETURNING idx
"""

SELECT_THREAD_EXISTS_SQL = """
SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = ?) AS found
"""

# Binds the target, the target again (a `thread_id` in metadata names the copy, as the
# Agent Server's own copy writes it), then the source.
COPY_CHECKPOINTS_SQL = """
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
    CASE WHEN json_type(CAST(metadata AS TEXT), '$.thread_id') IS NULL THEN metadata
        ELSE CAST(json_set(CAST(metadata AS TEXT), '$.thread_id', ?) AS BLOB) END
FROM checkpoints WHERE thread_id = ?
"""

COPY_WRITES_SQL = """
INSERT INTO writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value)
SELECT ?, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
FROM writes WHERE thread_id = ?
"""

COPY_RECLAIMED_SQL = """
INSERT INTO retaining_saver_reclaimed
    (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at)
SELECT ?, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at
FROM retaining_saver_reclaimed WHERE thread_id = ?
"""

DELETE_RECLAIMED_CLONES_SQL = """
DELETE FROM retaining_saver_reclaimed
WHERE thread_id = ? AND checkpoint_ns = ? AND clone_id IN (SELECT value FROM json_each(?))
"""

# The saver's own reads, to the letter, so that sqlite3's statement cache serves both
# (`_upstream` audits them): the unpinned read of the newest row, then its pending
# writes, as `pending_writes_sql` words them with a `task_path` column and without.
SELECT_HEAD_ROW_SQL = (
    "SELECT thread_id, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
    "FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
    "ORDER BY checkpoint_id DESC LIMIT 1"
)

SELECT_PENDING_WRITES_SQL = (
    "SELECT task_id, channel, type, value, task_path, idx FROM writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)

SELECT_PENDING_WRITES_NO_TASK_PATH_SQL = (
    "SELECT task_id, channel, type, value, '', idx FROM writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
