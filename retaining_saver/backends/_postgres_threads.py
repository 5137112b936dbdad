"""The Postgres statements of `SqlThreads` (see `_sql_threads`).

`checkpoints.metadata` has no index: finding a run's threads reads the table, once
per `delete_for_runs` call.
"""

from __future__ import annotations

from retaining_saver.backends._sql_threads import ThreadTexts

SELECT_RUN_THREADS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints WHERE metadata ->> 'run_id' = ANY(%s::text[])
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

THREAD_SQL = ThreadTexts.named(globals())
