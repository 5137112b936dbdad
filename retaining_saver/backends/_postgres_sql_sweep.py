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
SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s)
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

# A batch of judged threads (the arrays `thread_ids`, `keys`, `checkpoint_ids`,
# `write_counts`, in step) in one statement: per thread, the advisory lock taken with
# try, the re-check of the head it was judged on (its id and its pending writes), and,
# where both hold, the whole thread's deletion: writes, blobs and reclaim records (whose
# table the backend creates before its first write) with its checkpoints. A row per
# thread: `locked`, `unchanged`, the checkpoints `deleted`. The `taken` CTE is volatile,
# so it runs once, one lock per thread. Every part reads the statement's snapshot, taken
# before the locks: a thread another sweeper deleted and committed in between finds no
# rows to delete (0). The deletes match `= ANY` of an array: an index probe per thread,
# whatever the planner guesses of the batch's size.
DELETE_BATCH_IF_UNCHANGED_SQL = """
WITH taken AS (
    SELECT j.thread_id, j.checkpoint_id, j.write_count,
        pg_try_advisory_xact_lock(j.key) AS locked
    FROM unnest(
        %(thread_ids)s::text[], %(keys)s::bigint[], %(checkpoint_ids)s::text[],
        %(write_counts)s::bigint[]
    ) AS j (thread_id, key, checkpoint_id, write_count)
),
judged AS (
    SELECT t.thread_id FROM taken AS t
    CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, (
            SELECT count(*) FROM checkpoint_writes AS w
            WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
                AND w.checkpoint_id = c.checkpoint_id
        ) AS write_count
        FROM checkpoints AS c
        WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''
        ORDER BY c.checkpoint_id DESC LIMIT 1
    ) AS head
    WHERE t.locked AND head.checkpoint_id = t.checkpoint_id
        AND head.write_count = t.write_count
),
writes AS (
    DELETE FROM checkpoint_writes
    WHERE thread_id = ANY (ARRAY(SELECT thread_id FROM judged))
),
blobs AS (
    DELETE FROM checkpoint_blobs
    WHERE thread_id = ANY (ARRAY(SELECT thread_id FROM judged))
),
records AS (
    DELETE FROM retaining_saver_reclaimed
    WHERE thread_id = ANY (ARRAY(SELECT thread_id FROM judged))
),
resumed AS (
    DELETE FROM retaining_saver_resumed
    WHERE thread_id = ANY (ARRAY(SELECT thread_id FROM judged))
),
gone AS (
    DELETE FROM checkpoints
    WHERE thread_id = ANY (ARRAY(SELECT thread_id FROM judged))
    RETURNING thread_id
),
counted AS (
    SELECT thread_id, count(*) AS deleted FROM gone GROUP BY thread_id
)
SELECT t.thread_id, t.locked, j.thread_id IS NOT NULL AS unchanged,
    coalesce(n.deleted, 0) AS deleted
FROM taken AS t
LEFT JOIN judged AS j ON j.thread_id = t.thread_id
LEFT JOIN counted AS n ON n.thread_id = t.thread_id
"""

# `SELECT_THREAD_LEFT_SQL` for a batch: the threads of `thread_ids` with a row left (a
# new statement, so it sees what committed during the deletes).
SELECT_BATCH_LEFT_SQL = """
SELECT t.thread_id FROM unnest(%(thread_ids)s::text[]) AS t (thread_id)
WHERE EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = t.thread_id)
    OR EXISTS (SELECT 1 FROM checkpoint_writes AS w WHERE w.thread_id = t.thread_id)
    OR EXISTS (SELECT 1 FROM checkpoint_blobs AS b WHERE b.thread_id = t.thread_id)
"""
