"""SQLite: the SQL of the resume ledger (`_rules._resumed`, `backends._sql_resumes`), each
statement written out in full under its name.

An entry is the rows of `retaining_saver_resumed` under one thread, namespace,
checkpoint and run: a marker row (`task_id = ''`, which no task id is) holding its
`seq`, and a row per writes row the checkpoint held before the run's first write
there, with its key and channel, and, for a special write (`idx < 0`, the only kind a
later write replaces), its type and value. Every statement binds its values by name.
"""

from __future__ import annotations

# Created on the backend's first write, with the reclaim records' table.
CREATE_RESUMED_TABLE_SQL = """
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
    value BLOB,
    task_path TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, run_id, task_id, idx)
)
"""

# `SELECT_RESUMED_THREADS_SQL` finds a run's entries by it, not by reading them all.
CREATE_RESUMED_RUN_INDEX_SQL = """
CREATE INDEX IF NOT EXISTS retaining_saver_resumed_run_idx
ON retaining_saver_resumed (run_id, thread_id) WHERE task_id = ''
"""

# A read must not create the table, so it asks first whether there is one.
SELECT_RESUMED_TABLE_SQL = """
SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = 'retaining_saver_resumed'
"""

# One statement: the entry's marker, and the checkpoint's writes rows as they are under
# it, a regular row (`idx >= 0`) by its key only, since a later write never replaces
# one; only if the checkpoint exists, another run (or none) made it, and the run has no
# entry on it yet (`seq` follows the checkpoint's last entry). SQLite reads the whole
# SELECT before it inserts a row, since it reads the table it inserts into.
INSERT_RESUMPTION_SQL = """
INSERT OR IGNORE INTO retaining_saver_resumed
    (thread_id, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type, value,
        task_path)
WITH entry AS (
    SELECT 1 + COALESCE((
        SELECT MAX(r.seq) FROM retaining_saver_resumed AS r
        WHERE r.thread_id = :thread_id AND r.checkpoint_ns = :checkpoint_ns
            AND r.checkpoint_id = :checkpoint_id
    ), 0) AS seq
    FROM checkpoints AS c
    WHERE c.thread_id = :thread_id AND c.checkpoint_ns = :checkpoint_ns
        AND c.checkpoint_id = :checkpoint_id
        AND json_extract(CAST(c.metadata AS TEXT), '$.run_id') IS NOT :run_id
        AND NOT EXISTS (
            SELECT 1 FROM retaining_saver_resumed AS r
            WHERE r.thread_id = :thread_id AND r.checkpoint_ns = :checkpoint_ns
                AND r.checkpoint_id = :checkpoint_id AND r.run_id = :run_id
        )
)
SELECT :thread_id, :checkpoint_ns, :checkpoint_id, :run_id, e.seq, '', 0, NULL, NULL, NULL, ''
FROM entry AS e
UNION ALL
SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, :run_id, e.seq, w.task_id, w.idx,
    w.channel, CASE WHEN w.idx < 0 THEN w.type END, CASE WHEN w.idx < 0 THEN w.value END,
    w.task_path
FROM writes AS w CROSS JOIN entry AS e
WHERE w.thread_id = :thread_id AND w.checkpoint_ns = :checkpoint_ns
    AND w.checkpoint_id = :checkpoint_id AND w.task_id <> ''
RETURNING seq
"""

SELECT_RESUMPTIONS_SQL = """
SELECT checkpoint_ns, checkpoint_id, run_id, seq FROM retaining_saver_resumed
WHERE thread_id = :thread_id AND task_id = ''
"""

# Restoring an entry: the writes rows it did not record go, and each special row it
# recorded is put back as it was; both only while the checkpoint has no child.
DELETE_UNRECORDED_WRITES_SQL = """
DELETE FROM writes
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id
    AND NOT EXISTS (
        SELECT 1 FROM retaining_saver_resumed AS r
        WHERE r.thread_id = :thread_id AND r.checkpoint_ns = :checkpoint_ns
            AND r.checkpoint_id = :checkpoint_id AND r.run_id = :run_id
            AND r.task_id = writes.task_id AND r.idx = writes.idx
    )
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints
        WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
            AND parent_checkpoint_id = :checkpoint_id
    )
RETURNING idx
"""

RESTORE_RECORDED_WRITES_SQL = """
INSERT OR REPLACE INTO writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value)
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value
FROM retaining_saver_resumed
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND run_id = :run_id AND idx < 0 AND task_id <> ''
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints
        WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
            AND parent_checkpoint_id = :checkpoint_id
    )
RETURNING idx
"""

DELETE_RESUMPTION_SQL = """
DELETE FROM retaining_saver_resumed
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns
    AND checkpoint_id = :checkpoint_id AND run_id = :run_id
"""

DELETE_THREAD_RESUMED_SQL = """
DELETE FROM retaining_saver_resumed WHERE thread_id = :thread_id
"""

COPY_RESUMED_SQL = """
INSERT INTO retaining_saver_resumed
    (thread_id, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type, value,
        task_path)
SELECT :target, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type, value,
    task_path
FROM retaining_saver_resumed WHERE thread_id = :thread_id
"""

# The run ids come as one JSON array: the threads a run resumed, found by its entries
# (a run that interrupted again wrote no checkpoint).
SELECT_RESUMED_THREADS_SQL = """
SELECT DISTINCT thread_id FROM retaining_saver_resumed
WHERE task_id = '' AND run_id IN (SELECT value FROM json_each(:run_ids))
"""
