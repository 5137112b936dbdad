"""Postgres: the resume ledger's statements, each written out in full under its name.

The table (created with the reclaim records', `_postgres_sql.CREATE_TABLES_SQL`) holds
an entry as `_sqlite_sql_resumes` describes it, the serialized value of a special
write in `blob`, as in `checkpoint_writes`; `%(name)s` binds each value.
"""

from __future__ import annotations

SELECT_RESUMED_TABLE_SQL = """
SELECT to_regclass('retaining_saver_resumed') IS NOT NULL AS found
"""

# One round trip: the entry's marker, only if the checkpoint exists, another run (or
# none) made it, and the run has no entry on it yet (`seq` follows the checkpoint's
# last entry); then the checkpoint's writes rows as they are, under it, a regular row
# (`idx >= 0`) by its key only, since a later write never replaces one.
INSERT_RESUMPTION_SQL = """
WITH entry AS (
    INSERT INTO retaining_saver_resumed
        (thread_id, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx)
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, %(run_id)s,
        1 + coalesce((
            SELECT max(r.seq) FROM retaining_saver_resumed AS r
            WHERE r.thread_id = %(thread_id)s AND r.checkpoint_ns = %(checkpoint_ns)s
                AND r.checkpoint_id = %(checkpoint_id)s
        ), 0),
        '', 0
    FROM checkpoints AS c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(checkpoint_id)s
        AND c.metadata ->> 'run_id' IS DISTINCT FROM %(run_id)s
    ON CONFLICT DO NOTHING
    RETURNING seq
),
copied AS (
    INSERT INTO retaining_saver_resumed
        (thread_id, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type,
            blob, task_path)
    SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, %(run_id)s, e.seq, w.task_id, w.idx,
        w.channel, CASE WHEN w.idx < 0 THEN w.type END, CASE WHEN w.idx < 0 THEN w.blob END,
        w.task_path
    FROM checkpoint_writes AS w CROSS JOIN entry AS e
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
        AND w.checkpoint_id = %(checkpoint_id)s AND w.task_id <> ''
    ON CONFLICT DO NOTHING
)
SELECT seq FROM entry
"""

SELECT_RESUMPTIONS_SQL = """
SELECT checkpoint_ns, checkpoint_id, run_id, seq FROM retaining_saver_resumed
WHERE thread_id = %(thread_id)s AND task_id = ''
"""

# Restoring an entry: the writes rows it did not record go, and each special row it
# recorded is put back as it was; both only while the checkpoint has no child.
DELETE_UNRECORDED_WRITES_SQL = """
DELETE FROM checkpoint_writes AS w
WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
    AND w.checkpoint_id = %(checkpoint_id)s
    AND NOT EXISTS (
        SELECT 1 FROM retaining_saver_resumed AS r
        WHERE r.thread_id = %(thread_id)s AND r.checkpoint_ns = %(checkpoint_ns)s
            AND r.checkpoint_id = %(checkpoint_id)s AND r.run_id = %(run_id)s
            AND r.task_id = w.task_id AND r.idx = w.idx
    )
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
            AND c.parent_checkpoint_id = %(checkpoint_id)s
    )
RETURNING w.idx
"""

RESTORE_RECORDED_WRITES_SQL = """
INSERT INTO checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
SELECT r.thread_id, r.checkpoint_ns, r.checkpoint_id, r.task_id, r.task_path, r.idx,
    r.channel, r.type, r.blob
FROM retaining_saver_resumed AS r
WHERE r.thread_id = %(thread_id)s AND r.checkpoint_ns = %(checkpoint_ns)s
    AND r.checkpoint_id = %(checkpoint_id)s AND r.run_id = %(run_id)s AND r.idx < 0
    AND r.task_id <> ''
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
            AND c.parent_checkpoint_id = %(checkpoint_id)s
    )
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
    SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,
        task_path = EXCLUDED.task_path
RETURNING idx
"""

DELETE_RESUMPTION_SQL = """
DELETE FROM retaining_saver_resumed
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
    AND checkpoint_id = %(checkpoint_id)s AND run_id = %(run_id)s
"""

DELETE_THREAD_RESUMED_SQL = """
DELETE FROM retaining_saver_resumed WHERE thread_id = %(thread_id)s
"""

COPY_RESUMED_SQL = """
INSERT INTO retaining_saver_resumed
    (thread_id, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type, blob,
        task_path)
SELECT %(target)s, checkpoint_ns, checkpoint_id, run_id, seq, task_id, idx, channel, type,
    blob, task_path
FROM retaining_saver_resumed WHERE thread_id = %(thread_id)s
"""

# The threads a run resumed, found by its entries (a run that interrupted again wrote
# no checkpoint).
SELECT_RESUMED_THREADS_SQL = """
SELECT DISTINCT thread_id FROM retaining_saver_resumed
WHERE task_id = '' AND run_id = ANY (%(run_ids)s)
"""
