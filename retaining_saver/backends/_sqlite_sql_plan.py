"""SQLite: the statements of a plan's changes, the statistics, compaction and the
idle-thread sweep, each written out in full under its name.

Apart from `_sqlite_sql` (the rest of the store's SQL) for length; `_sqlite_plan`,
`_sqlite_stats`, `_sqlite_compaction` and `_sqlite_sweep` run them.
"""

from __future__ import annotations

# A plan's re-parenting and deletions, each guarded by what it proved (see `_apply`):
# the parent it has, the new parent still there; no child left, no writes unless consumed.
SET_PARENT_GUARDED_SQL = """
UPDATE checkpoints SET parent_checkpoint_id = :new_parent
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
    AND parent_checkpoint_id = :old_parent
    AND (:new_parent IS NULL OR EXISTS (
        SELECT 1 FROM checkpoints AS p
        WHERE p.thread_id = :thread_id AND p.checkpoint_ns = :checkpoint_ns
            AND p.checkpoint_id = :new_parent
    ))
RETURNING checkpoint_id
"""

DELETE_CHECKPOINT_GUARDED_SQL = """
DELETE FROM checkpoints
WHERE thread_id = :thread_id AND checkpoint_ns = :checkpoint_ns AND checkpoint_id = :checkpoint_id
    AND parent_checkpoint_id IS :parent -- check: parent-as-proven
    AND NOT EXISTS ( -- check: childless
        SELECT 1 FROM checkpoints AS k
        WHERE k.thread_id = :thread_id AND k.checkpoint_ns = :checkpoint_ns
            AND k.parent_checkpoint_id = :checkpoint_id
    )
    AND (:consumed OR NOT EXISTS ( -- check: no-pending-writes
        SELECT 1 FROM writes AS w
        WHERE w.thread_id = :thread_id AND w.checkpoint_ns = :checkpoint_ns
            AND w.checkpoint_id = :checkpoint_id
    ))
RETURNING checkpoint_id
"""

SELECT_PAYLOAD_SQL = """
SELECT type, checkpoint FROM checkpoints
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
"""

UPDATE_PAYLOAD_SQL = """
UPDATE checkpoints SET type = ?, checkpoint = ?
WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
"""

# Statistics: a channel's bytes are measured by decoding each payload, a page at a
# time (`_sqlite_stats`); writes name their channel in a column. The named
# checkpoints are bound as one JSON array of [ns, id] pairs (`:named`).
SELECT_GONE_STATS_SQL = """
WITH named AS (
    SELECT json_extract(value, '$[0]') AS ns, json_extract(value, '$[1]') AS id
    FROM json_each(:named)
)
SELECT 'checkpoints' AS table_name, COUNT(*) AS row_count,
    COALESCE(SUM(COALESCE(LENGTH(c.checkpoint), 0) + COALESCE(LENGTH(c.metadata), 0)), 0)
        AS byte_count
FROM checkpoints AS c JOIN named ON c.checkpoint_ns = named.ns AND c.checkpoint_id = named.id
WHERE c.thread_id = :thread_id
UNION ALL
SELECT 'writes', COUNT(*), COALESCE(SUM(LENGTH(w.value)), 0)
FROM writes AS w JOIN named ON w.checkpoint_ns = named.ns AND w.checkpoint_id = named.id
WHERE w.thread_id = :thread_id
"""

# `SELECT_GONE_STATS_SQL` per channel: the named checkpoints' writes, and their
# payloads (a page of names at a time), whose values `_sqlite_stats` measures.
SELECT_GONE_CHANNEL_WRITES_SQL = """
WITH named AS (
    SELECT json_extract(value, '$[0]') AS ns, json_extract(value, '$[1]') AS id
    FROM json_each(:named)
)
SELECT w.channel, COUNT(*) AS row_count, COALESCE(SUM(LENGTH(w.value)), 0) AS byte_count
FROM writes AS w JOIN named ON w.checkpoint_ns = named.ns AND w.checkpoint_id = named.id
WHERE w.thread_id = :thread_id
GROUP BY w.channel
"""

SELECT_NAMED_PAYLOADS_SQL = """
WITH named AS (
    SELECT json_extract(value, '$[0]') AS ns, json_extract(value, '$[1]') AS id
    FROM json_each(:named)
)
SELECT c.type, c.checkpoint
FROM checkpoints AS c JOIN named ON c.checkpoint_ns = named.ns AND c.checkpoint_id = named.id
WHERE c.thread_id = :thread_id
"""

SELECT_THREAD_CHANNEL_WRITES_SQL = """
SELECT channel, COUNT(*) AS row_count, COALESCE(SUM(LENGTH(value)), 0) AS byte_count
FROM writes WHERE thread_id = ? GROUP BY channel
"""

SELECT_STORE_CHANNEL_WRITES_SQL = """
SELECT channel, COUNT(*) AS row_count, COALESCE(SUM(LENGTH(value)), 0) AS byte_count
FROM writes  GROUP BY channel
"""

# Keyset pages of payloads: past the last row of the previous page, in primary key order.
SELECT_THREAD_PAYLOAD_PAGE_SQL = """
SELECT thread_id, checkpoint_ns, checkpoint_id, type, checkpoint FROM checkpoints
WHERE thread_id = ? AND (checkpoint_ns, checkpoint_id) > (?, ?)
ORDER BY checkpoint_ns, checkpoint_id
LIMIT ?
"""

SELECT_STORE_PAYLOAD_PAGE_SQL = """
SELECT thread_id, checkpoint_ns, checkpoint_id, type, checkpoint FROM checkpoints
WHERE (thread_id, checkpoint_ns, checkpoint_id) > (?, ?, ?)
ORDER BY thread_id, checkpoint_ns, checkpoint_id
LIMIT ?
"""

SELECT_TOP_THREADS_SQL = """
SELECT thread_id, SUM(row_count) AS row_count, SUM(byte_count) AS byte_count FROM (
    SELECT thread_id, COUNT(*) AS row_count,
        SUM(COALESCE(LENGTH(checkpoint), 0) + COALESCE(LENGTH(metadata), 0)) AS byte_count
    FROM checkpoints GROUP BY thread_id
    UNION ALL
    SELECT thread_id, COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM writes GROUP BY thread_id
)
GROUP BY thread_id ORDER BY byte_count DESC, thread_id LIMIT ?
"""

# Compaction (`_sqlite_compaction`): the freelist measured, then the WAL checkpointed
# and the file vacuumed.
SELECT_PAGES_SQL = """
SELECT p.page_count, f.freelist_count, s.page_size, d.file
FROM pragma_page_count() AS p, pragma_freelist_count() AS f, pragma_page_size() AS s,
    pragma_database_list() AS d
WHERE d.name = 'main'
"""

WAL_CHECKPOINT_SQL = "PRAGMA wal_checkpoint(TRUNCATE)"

VACUUM_SQL = "VACUUM"

# The idle-thread sweep (`_sqlite_sweep`): the partial index the scan probes, one
# narrow entry per root checkpoint.
CREATE_ROOT_INDEX_SQL = """
CREATE INDEX IF NOT EXISTS retaining_saver_checkpoints_root_idx
ON checkpoints (thread_id, checkpoint_id) WHERE checkpoint_ns = ''
"""

# The scan, from the first thread (`SCAN_FIRST_SQL`) or from the first after `:after`
# (`SCAN_AFTER_SQL`). A recursive walk by key: each step probes the root index for the
# next thread id, then for that thread's newest and oldest root checkpoint ids.
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
    WHERE t.thread_id IS NOT NULL AND t.n < :limit
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
        WHERE c.checkpoint_ns = '' AND c.thread_id > :after
        ORDER BY c.thread_id LIMIT 1), 1
    UNION ALL
    SELECT (
        SELECT c.thread_id FROM checkpoints AS c
        WHERE c.checkpoint_ns = '' AND c.thread_id > t.thread_id
        ORDER BY c.thread_id LIMIT 1
    ), t.n + 1
    FROM threads AS t
    WHERE t.thread_id IS NOT NULL AND t.n < :limit
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

DELETE_THREAD_WRITES_SQL = """
DELETE FROM writes WHERE thread_id = :thread_id
"""

# The backend creates the reclaim records' table before its first write.
DELETE_THREAD_RECORDS_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = :thread_id
"""

DELETE_THREAD_CHECKPOINTS_SQL = """
DELETE FROM checkpoints WHERE thread_id = :thread_id RETURNING checkpoint_id
"""

SELECT_THREAD_LEFT_SQL = """
SELECT EXISTS ( -- check: nothing-left
        SELECT 1 FROM checkpoints WHERE thread_id = :thread_id
    )
    OR EXISTS (SELECT 1 FROM writes WHERE thread_id = :thread_id) AS found
"""
