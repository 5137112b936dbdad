"""Postgres: the idle-thread sweep's statements, each written out in full under its name.

Apart from `_postgres_sql` for length (see its docstring for where the rest of the
store's SQL lives); `_postgres_sweep` runs them and tells how the scan and the
advisory lock work.
"""

from __future__ import annotations

# The partial index the scan probes: one narrow entry per root checkpoint.
CREATE_ROOT_INDEX_SQL = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS retaining_saver_checkpoints_root_idx
ON checkpoints (thread_id, checkpoint_id) WHERE checkpoint_ns = ''
"""

# The idle-thread scan, from the first thread (`SCAN_FIRST_SQL`) or from the first after
# `after` (`SCAN_AFTER_SQL`). A recursive walk by key: each step probes the root index
# for the next thread id, then for that thread's newest and oldest root checkpoint ids.
SCAN_FIRST_SQL = """
WITH RECURSIVE threads (thread_id, n) AS (
    SELECT (SELECT c.thread_id FROM checkpoints AS c WHERE c.checkpoint_ns = ''
        ORDER BY c.thread_id LIMIT 1), 1
    UNION ALL
    SELECT (
        SELECT c.thread_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id > t.thread_id
        ORDER BY c.thread_id LIMIT 1
    ), t.n + 1
    FROM threads AS t
    WHERE t.thread_id IS NOT NULL AND t.n < %(limit)s
)
SELECT t.thread_id,
    (
        SELECT c.checkpoint_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id = t.thread_id
        ORDER BY c.checkpoint_id DESC LIMIT 1
    ) AS newest_id,
    (
        SELECT c.checkpoint_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id = t.thread_id
        ORDER BY c.checkpoint_id LIMIT 1
    ) AS oldest_id
FROM threads AS t
WHERE t.thread_id IS NOT NULL
ORDER BY t.thread_id
"""

SCAN_AFTER_SQL = """
WITH RECURSIVE threads (thread_id, n) AS (
    SELECT (SELECT c.thread_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id > %(after)s
        ORDER BY c.thread_id LIMIT 1), 1
    UNION ALL
    SELECT (
        SELECT c.thread_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id > t.thread_id
        ORDER BY c.thread_id LIMIT 1
    ), t.n + 1
    FROM threads AS t
    WHERE t.thread_id IS NOT NULL AND t.n < %(limit)s
)
SELECT t.thread_id,
    (
        SELECT c.checkpoint_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id = t.thread_id
        ORDER BY c.checkpoint_id DESC LIMIT 1
    ) AS newest_id,
    (
        SELECT c.checkpoint_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id = t.thread_id
        ORDER BY c.checkpoint_id LIMIT 1
    ) AS oldest_id
FROM threads AS t
WHERE t.thread_id IS NOT NULL
ORDER BY t.thread_id
"""

TRY_THREAD_LOCK_SQL = """
SELECT pg_try_advisory_xact_lock(%s::bigint) AS locked
"""

# One round trip for the whole thread: its writes, blobs, reclaim records and resume
# ledger entries (whose tables the backend creates before its first write) go with its
# checkpoints.
DELETE_THREAD_SQL = """
WITH writes AS (DELETE FROM checkpoint_writes WHERE thread_id = %(thread_id)s),
    blobs AS (DELETE FROM checkpoint_blobs WHERE thread_id = %(thread_id)s),
    records AS (DELETE FROM retaining_saver_reclaimed WHERE thread_id = %(thread_id)s),
    resumed AS (DELETE FROM retaining_saver_resumed WHERE thread_id = %(thread_id)s)
DELETE FROM checkpoints WHERE thread_id = %(thread_id)s RETURNING checkpoint_id
"""

# Under READ COMMITTED each statement sees what committed before it: a row another
# writer committed during the deletes shows here, and the deletion rolls back.
SELECT_THREAD_LEFT_SQL = """
SELECT EXISTS ( -- check: nothing-left
        SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s
    )
    OR EXISTS (SELECT 1 FROM checkpoint_writes WHERE thread_id = %(thread_id)s)
    OR EXISTS (SELECT 1 FROM checkpoint_blobs WHERE thread_id = %(thread_id)s) AS found
"""

# What a verdict reads of the newest root checkpoint of each thread of `thread_ids`, in
# one statement: a row per thread that has one (named by `thread_id`), with its id,
# metadata and pending writes, and its trigger channels (`__start__`, `branch:to:*`) that
# hold a value, as the saver stores one: a primitive inline in `channel_values`, else a
# blob of the checkpoint's version whose type is not "empty" (`_upstream` audits the
# saver's read of both; on drift the sweep reads each head through the saver).
SELECT_BATCH_HEAD_FACTS_SQL = """
SELECT t.thread_id, h.checkpoint_id, h.metadata, h.write_count, h.triggers
FROM unnest(%(thread_ids)s::text[]) AS t (thread_id)
CROSS JOIN LATERAL (
    SELECT c.checkpoint_id, c.metadata, (
            SELECT count(*) FROM checkpoint_writes AS w
            WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
                AND w.checkpoint_id = c.checkpoint_id
        ) AS write_count,
        ARRAY(
            SELECT v.key FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
            WHERE (v.key = '__start__' OR left(v.key, 10) = 'branch:to:')
                AND (
                    c.checkpoint -> 'channel_values' ? v.key
                    OR EXISTS (
                        SELECT 1 FROM checkpoint_blobs AS b
                        WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = ''
                            AND b.channel = v.key AND b.version = v.value
                            AND b.type <> 'empty'
                    )
                )
        ) AS triggers
    FROM checkpoints AS c
    WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''
    ORDER BY c.checkpoint_id DESC LIMIT 1
) AS h
"""

# One judged thread's deletion, the first statement of its own transaction: its commit
# made not to wait for the WAL flush (`ASYNC_COMMIT_SQL`'s setting, by `set_config`: a
# statement fewer a thread), the advisory lock on `key` taken with try, the re-check of
# the head it was judged on (`checkpoint_id`, and `write_count` pending writes), and, where both
# hold, the whole thread's deletion: writes, blobs, reclaim records and resume ledger
# entries (whose tables the backend creates before its first write) with its
# checkpoints. One row: `locked`,
# `unchanged`, the checkpoints `deleted`. The `taken` CTE is volatile, so it runs once.
# Every part reads the statement's snapshot, taken before the lock: a thread another
# sweeper deleted and committed in between finds no rows to delete (0).
DELETE_THREAD_IF_UNCHANGED_SQL = """
WITH taken AS (
    SELECT pg_try_advisory_xact_lock(%(key)s::bigint) AS locked, -- check: locked
        set_config('synchronous_commit', 'off', true) AS commit_mode
),
judged AS (
    SELECT 1 FROM taken AS t
    CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, (
            SELECT count(*) FROM checkpoint_writes AS w
            WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
                AND w.checkpoint_id = c.checkpoint_id
        ) AS write_count
        FROM checkpoints AS c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
        ORDER BY c.checkpoint_id DESC LIMIT 1
    ) AS head
    WHERE t.locked AND head.checkpoint_id = %(checkpoint_id)s -- check: head-as-judged
        AND head.write_count = %(write_count)s::bigint -- check: writes-as-judged
),
writes AS (
    DELETE FROM checkpoint_writes
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
),
blobs AS (
    DELETE FROM checkpoint_blobs
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
),
records AS (
    DELETE FROM retaining_saver_reclaimed
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
),
resumed AS (
    DELETE FROM retaining_saver_resumed
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
),
gone AS (
    DELETE FROM checkpoints
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
    RETURNING 1
)
SELECT t.locked, EXISTS (SELECT 1 FROM judged) AS unchanged,
    (SELECT count(*) FROM gone) AS deleted
FROM taken AS t
"""

# The last statement of a thread's transaction after `DELETE_THREAD_IF_UNCHANGED_SQL`:
# `SELECT_THREAD_LEFT_SQL`, made to abort the transaction. A new statement, so it sees
# what committed during the deletes (READ COMMITTED). If the judged head is gone (this
# transaction deleted the thread) and a row of the thread is there, a writer committed
# it meanwhile: the division by zero (SQLSTATE 22012) fails the statement, and the
# transaction rolls back whole, in the pipeline too, where no client decides in
# between. A thread not deleted (busy, changed) still has its judged head: it passes.
SELECT_NOTHING_LEFT_SQL = """
SELECT 1 / (
    EXISTS ( -- check: nothing-left (or the judged head is still there: not deleted)
        SELECT 1 FROM checkpoints
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''
            AND checkpoint_id = %(checkpoint_id)s
    )
    OR NOT (
        EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s)
        OR EXISTS (SELECT 1 FROM checkpoint_writes WHERE thread_id = %(thread_id)s)
        OR EXISTS (SELECT 1 FROM checkpoint_blobs WHERE thread_id = %(thread_id)s)
    )
)::int AS settled
"""
