"""The SQLite statements of `SqlThreads` (see `_sql_threads`)."""

from __future__ import annotations

from retaining_saver.backends._sql_threads import ThreadTexts

# The run ids come as one JSON array; `metadata` is UTF-8 JSON, read as the saver's
# own metadata filter reads it.
SELECT_RUN_THREADS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints
WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') IN (SELECT value FROM json_each(?))
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

THREAD_SQL = ThreadTexts.named(globals())
