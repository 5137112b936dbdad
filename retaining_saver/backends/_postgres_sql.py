"""Postgres: the SQL of the primitives every backend has, of the reclaim records' table,
and of whole-thread operations, each statement written out in full under its name.

All of the Postgres backend's SQL lives in the `_postgres_sql*` modules, split by
when the statements run so that each module stays readable:

- this one: the primitives (`SqlBackend`, `SqlThreads`), the reclaim records'
  table and the parent index;
- `_postgres_sql_take`: the guarded take of one judged leaf;
- `_postgres_sql_admission`: the one-round admission read, and the saver's own read;
- `_postgres_sql_plan`: a plan's steps in bulk, the blob sweep, and the statistics;
- `_postgres_sql_sweep`: the idle-thread sweep.

A statement that differs from another by a clause is written out again, whole, so that
`grep NAME` finds the text that runs. The modules that run them import them by name.
"""

from __future__ import annotations

# A thread's nodes, as one row: a JSON array of each checkpoint's fields (those of
# `SELECT_NODES_SQL`, in its order: `_postgres_plan.LINEAGE_FIELDS`). One
# document, which psycopg decodes in one `json.loads` (JSONB columns would be three a
# row), and the write counts in one pass over the thread's writes (a count per
# checkpoint would probe them once a row). With `newest`, a window: only the rows, of
# every namespace, at or above the `newest`-th newest root checkpoint's id, which the
# primary key finds newest first (`Lineage.window_start`, returned beside the nodes;
# '' for the whole thread: `newest` None, or no more root checkpoints than `newest`).
SELECT_LINEAGE_SQL = """
WITH edge AS (
    SELECT coalesce(CASE WHEN %(newest)s::integer IS NOT NULL THEN (
        SELECT max(r.checkpoint_id) FROM (
            SELECT checkpoint_id FROM checkpoints
            WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''
            ORDER BY checkpoint_id DESC
            OFFSET %(newest)s::integer - 1 LIMIT 2
        ) AS r
        HAVING count(*) = 2
    ) END, '') AS window_start
), writes AS (
    SELECT w.checkpoint_ns, w.checkpoint_id, count(*) AS write_count
    FROM checkpoint_writes AS w
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_id >= (SELECT window_start FROM edge)
    GROUP BY w.checkpoint_ns, w.checkpoint_id
)
SELECT (SELECT window_start FROM edge) AS window_start,
    coalesce(json_agg(json_build_array(
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions',
    c.checkpoint -> 'versions_seen',
    c.checkpoint ->> 'ts',
    c.checkpoint ->> 'v',
    c.metadata,
    coalesce(w.write_count, 0)
)), '[]'::json) AS nodes
FROM checkpoints AS c
LEFT JOIN writes AS w
    ON w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_id >= (SELECT window_start FROM edge)
"""

# A node's columns and its write count, read from `checkpoints AS c`. `v` is selected
# as text: psycopg would decode a JSONB column with a `json.loads` per row.
SELECT_NODES_SQL = """
SELECT
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions' AS channel_versions,
    c.checkpoint -> 'versions_seen' AS versions_seen,
    c.checkpoint ->> 'ts' AS ts,
    c.checkpoint ->> 'v' AS format_version,
    c.metadata,
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = ANY(%s::text[])
"""

SELECT_HEAD_NODE_SQL = """
SELECT
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions' AS channel_versions,
    c.checkpoint -> 'versions_seen' AS versions_seen,
    c.checkpoint ->> 'ts' AS ts,
    c.checkpoint ->> 'v' AS format_version,
    c.metadata,
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s
ORDER BY c.checkpoint_id DESC LIMIT 1
"""

# Run first in each WRITE transaction of ours (not in a caller's): its commit does not
# wait for the WAL flush. Every such transaction takes the thread from one valid state
# to another, so losing the newest in a crash leaves a valid state (the deletions are
# simply not done), and a later commit that does wait flushes it too.
ASYNC_COMMIT_SQL = "SET LOCAL synchronous_commit = off"

# Around each transaction of an `Apart` sent in a pipeline (on an autocommit connection):
# written out, where a single Sync would make the pipeline one implicit transaction.
BEGIN_SQL = "BEGIN"

COMMIT_SQL = "COMMIT"

# Each reclaimed duplicate's id and the clone it resolves to, written in the
# deleting statement or transaction; and the resume ledger (`_postgres_sql_resumes`),
# written at a resume's first write. Created before this backend's first write (and
# by `create_indexes`), in one statement; a read never creates them.
# Two workers creating one at once can both pass IF NOT EXISTS; the loser's
# unique violation on the catalog means the table is there, so it is ignored.
# CREATE is only tried when a table is missing: a role that may write the
# tables but not create in the schema is refused even an IF NOT EXISTS.
CREATE_TABLES_SQL = """
DO $$
BEGIN
    IF to_regclass('retaining_saver_reclaimed') IS NULL THEN
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
    END IF;
    IF to_regclass('retaining_saver_resumed') IS NULL THEN
        CREATE TABLE IF NOT EXISTS retaining_saver_resumed (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            channel TEXT,
            type TEXT,
            blob BYTEA,
            task_path TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, run_id, task_id, idx)
        );
        CREATE INDEX IF NOT EXISTS retaining_saver_resumed_run_idx
            ON retaining_saver_resumed (run_id, thread_id) WHERE task_id = '';
    END IF;
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
SELECT_THREAD_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)::bigint
        AS byte_count
FROM checkpoints WHERE thread_id = %s
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_blobs WHERE thread_id = %s
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_writes WHERE thread_id = %s
"""

SELECT_STORE_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)::bigint
        AS byte_count
FROM checkpoints
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_blobs
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_writes
"""

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

# Whole-thread and whole-run operations (`SqlThreads`): `delete_for_runs` finds a run's
# threads and forgets the reclaim records of what it deleted; `copy_thread` copies a
# thread's rows under another id. Finding a run's threads probes the run index
# (`CREATE_RUN_INDEX_SQL`, built by `create_indexes`); without it, the lookup reads the
# whole table, once per `delete_for_runs` call.
CREATE_RUN_INDEX_SQL = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS retaining_saver_checkpoints_run_idx
ON checkpoints ((metadata ->> 'run_id'), thread_id)
"""

SELECT_RUN_THREADS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints WHERE metadata ->> 'run_id' = ANY(%s::text[])
"""

# A resumed checkpoint's writes rows, and the deletion of one that a removed run put
# there (`_rules._resumed`): only while the checkpoint has no child left.
SELECT_WRITE_ROWS_SQL = """
SELECT task_id, channel, idx FROM checkpoint_writes
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
ORDER BY task_id, idx
"""

DELETE_WRITE_SQL = """
DELETE FROM checkpoint_writes AS w
WHERE w.thread_id = %s AND w.checkpoint_ns = %s AND w.checkpoint_id = %s
    AND w.task_id = %s AND w.idx = %s
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
            AND c.parent_checkpoint_id = w.checkpoint_id
    )
RETURNING w.idx
"""

SELECT_THREAD_EXISTS_SQL = """
SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %s) AS found
"""

# Binds the target, the target again (a `thread_id` in metadata names the copy, as the
# Agent Server's own copy writes it), then the source.
COPY_CHECKPOINTS_SQL = """
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata)
SELECT %s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
    CASE WHEN metadata ? 'thread_id'
        THEN jsonb_set(metadata, '{thread_id}', to_jsonb(%s::text)) ELSE metadata END
FROM checkpoints WHERE thread_id = %s
"""

COPY_WRITES_SQL = """
INSERT INTO checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
SELECT %s, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
FROM checkpoint_writes WHERE thread_id = %s
"""

COPY_BLOBS_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT %s, checkpoint_ns, channel, version, type, blob
FROM checkpoint_blobs WHERE thread_id = %s
"""

COPY_RECLAIMED_SQL = """
INSERT INTO retaining_saver_reclaimed
    (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at)
SELECT %s, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at
FROM retaining_saver_reclaimed WHERE thread_id = %s
"""

DELETE_RECLAIMED_CLONES_SQL = """
DELETE FROM retaining_saver_reclaimed
WHERE thread_id = %s AND checkpoint_ns = %s AND clone_id = ANY(%s::text[])
"""
