"""Postgres: the statements that carry out a plan's steps in bulk and sweep the blobs
they free, and the store's statistics.

Each statement is written out in full under its name; they are apart from
`_postgres_sql` for length (see its docstring for where the rest of the store's SQL
lives). `_postgres_plan` and `_postgres_stats` run them.
"""

from __future__ import annotations

# For a thread with DeltaChannels (`channels`): which of them each checkpoint stores,
# inline (a snapshot's marker) or as a blob at its version, as the saver's delta walk
# probes it, at or above a window's start ('' for the whole thread). Not run for
# other threads: it probes the blob table per channel.
SELECT_STORED_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id,
    ARRAY(
        SELECT v.key FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
        WHERE v.key = ANY(%s::text[])
            AND (
                c.checkpoint -> 'channel_values' ? v.key
                OR EXISTS (
                    SELECT 1 FROM checkpoint_blobs AS b
                    WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                        AND b.channel = v.key AND b.version = v.value AND b.type <> 'empty'
                )
            )
    ) AS stored
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_id >= %s
"""

# A plan's re-parenting and deletions in one statement each, every row guarded by what
# it proved (see `_apply`): the parent it has, the new parent still there; no child but
# those deleted with it, no writes unless consumed. The caller compares the rows changed
# with the rows proven. Every probe is by key: flat in the thread's length.
# The rows come as one JSON array, which Python dumps in C and Postgres parses in one go.
SET_PARENTS_SQL = """
UPDATE checkpoints AS c SET parent_checkpoint_id = k.new_parent
FROM jsonb_to_recordset(%s::jsonb) AS k(ns text, id text, old_parent text, new_parent text)
WHERE c.thread_id = %s AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
    AND c.parent_checkpoint_id = k.old_parent
    AND (k.new_parent IS NULL OR EXISTS (
        SELECT 1 FROM checkpoints AS p
        WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = k.ns
            AND p.checkpoint_id = k.new_parent
    ))
RETURNING c.checkpoint_id
"""

DELETE_ROWS_SQL = """
WITH doomed AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS k(ns text, id text, parent text, consumed boolean)
), gone AS (
    DELETE FROM checkpoints AS c
    USING doomed AS k
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
        AND c.parent_checkpoint_id IS NOT DISTINCT FROM k.parent -- check: parent-as-proven
        AND NOT EXISTS ( -- check: childless (but those deleted with it)
            SELECT 1 FROM checkpoints AS x
            WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = k.ns
                AND x.parent_checkpoint_id = k.id
                AND NOT EXISTS (
                    SELECT 1 FROM doomed AS d WHERE d.ns = k.ns AND d.id = x.checkpoint_id
                )
        )
        AND (k.consumed OR NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = k.ns
                AND w.checkpoint_id = k.id
        ))
    RETURNING c.checkpoint_ns, c.checkpoint_id
), writes AS (
    DELETE FROM checkpoint_writes AS w
    USING gone AS g
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = g.checkpoint_ns
        AND w.checkpoint_id = g.checkpoint_id
)
SELECT count(*) AS deleted FROM gone
"""

# A value stored whole at a checkpoint, as the saver stores a snapshot: the inline
# marker (only while the checkpoint holds the version proven), then the blob.
MARK_STORED_SQL = """
UPDATE checkpoints
SET checkpoint = jsonb_set(checkpoint, ARRAY['channel_values', %s], 'true'::jsonb, true)
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
    AND checkpoint -> 'channel_versions' ->> %s = %s -- check: versions-as-planned
RETURNING checkpoint_id
"""

UPSERT_BLOB_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, channel, version)
    DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
"""

# Each candidate blob, by primary key, that no checkpoint of its namespace still names
# (in the deleting transaction, after the plan's deletions), at or above `since`: a
# window plan's start ('' for the whole thread), below which none can. The versions
# still named are read in one pass over those rows and taken from the candidates as a
# set (`EXCEPT`, hashed), not probed once a candidate: a pass frees dozens of blobs,
# and each probe would read every row's versions again.
DELETE_BLOBS_SQL = """
WITH freed AS (
    SELECT k.checkpoint_ns, k.channel, k.version
    FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(checkpoint_ns text, channel text, version text)
    EXCEPT
    SELECT c.checkpoint_ns, v.key, v.value
    FROM checkpoints AS c
    CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_id >= %(since)s
)
DELETE FROM checkpoint_blobs AS b
USING freed AS f
WHERE b.thread_id = %(thread_id)s
    AND b.checkpoint_ns = f.checkpoint_ns
    AND b.channel = f.channel
    AND b.version = f.version
RETURNING b.checkpoint_ns, b.channel, b.version
"""

# Each candidate blob that has a row (its value is not inlined in the checkpoint JSONB).
STORED_BLOBS_SQL = """
SELECT b.checkpoint_ns, b.channel, b.version
FROM checkpoint_blobs AS b
JOIN jsonb_to_recordset(%s::jsonb) AS k(checkpoint_ns text, channel text, version text)
    ON b.checkpoint_ns = k.checkpoint_ns AND b.channel = k.channel AND b.version = k.version
WHERE b.thread_id = %s
"""

# Statistics: every figure is one aggregate statement; bytes are `pg_column_size`, as
# stored after TOAST compression. A channel's values are its blob rows plus the
# primitive values the saver keeps inline in the checkpoint's JSONB.
SELECT_GONE_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(c.checkpoint) + pg_column_size(c.metadata)), 0)::bigint
        AS byte_count
FROM checkpoints AS c
JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
    ON c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
WHERE c.thread_id = %(thread_id)s
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(b.blob)), 0)::bigint
FROM checkpoint_blobs AS b
JOIN unnest(%(blob_ns)s::text[], %(channels)s::text[], %(versions)s::text[])
    AS k(ns, channel, version)
    ON b.checkpoint_ns = k.ns AND b.channel = k.channel AND b.version = k.version
WHERE b.thread_id = %(thread_id)s
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(w.blob)), 0)::bigint
FROM checkpoint_writes AS w
JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
    ON w.checkpoint_ns = k.ns AND w.checkpoint_id = k.id
WHERE w.thread_id = %(thread_id)s
"""

# `SELECT_GONE_STATS_SQL` per channel: the named blobs, the inline values of the named
# checkpoints and their writes.
SELECT_GONE_CHANNEL_STATS_SQL = """
SELECT channel, sum(value_count)::bigint AS value_count, sum(value_bytes)::bigint AS value_bytes,
    sum(write_count)::bigint AS write_count, sum(write_bytes)::bigint AS write_bytes
FROM (
    SELECT b.channel, count(*) AS value_count, sum(pg_column_size(b.blob)) AS value_bytes,
        0 AS write_count, 0 AS write_bytes
    FROM checkpoint_blobs AS b
    JOIN unnest(%(blob_ns)s::text[], %(channels)s::text[], %(versions)s::text[])
        AS k(ns, channel, version)
        ON b.checkpoint_ns = k.ns AND b.channel = k.channel AND b.version = k.version
    WHERE b.thread_id = %(thread_id)s
    GROUP BY b.channel
    UNION ALL
    SELECT v.key, count(*), sum(pg_column_size(v.value)), 0, 0
    FROM checkpoints AS c
    JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
        ON c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
    CROSS JOIN LATERAL jsonb_each(c.checkpoint -> 'channel_values') AS v
    WHERE c.thread_id = %(thread_id)s
    GROUP BY v.key
    UNION ALL
    SELECT w.channel, 0, 0, count(*), sum(pg_column_size(w.blob))
    FROM checkpoint_writes AS w
    JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
        ON w.checkpoint_ns = k.ns AND w.checkpoint_id = k.id
    WHERE w.thread_id = %(thread_id)s
    GROUP BY w.channel
) AS per_table
GROUP BY channel ORDER BY channel
"""

SELECT_THREAD_CHANNEL_STATS_SQL = """
SELECT channel, sum(value_count)::bigint AS value_count, sum(value_bytes)::bigint AS value_bytes,
    sum(write_count)::bigint AS write_count, sum(write_bytes)::bigint AS write_bytes
FROM (
    SELECT channel, count(*) AS value_count, sum(pg_column_size(blob)) AS value_bytes,
        0 AS write_count, 0 AS write_bytes
    FROM checkpoint_blobs WHERE thread_id = %s GROUP BY channel
    UNION ALL
    SELECT v.key, count(*), sum(pg_column_size(v.value)), 0, 0
    FROM checkpoints, jsonb_each(checkpoint -> 'channel_values') AS v WHERE thread_id = %s GROUP BY v.key
    UNION ALL
    SELECT channel, 0, 0, count(*), sum(pg_column_size(blob))
    FROM checkpoint_writes WHERE thread_id = %s GROUP BY channel
) AS per_table
GROUP BY channel ORDER BY channel
"""  # noqa: E501

SELECT_STORE_CHANNEL_STATS_SQL = """
SELECT channel, sum(value_count)::bigint AS value_count, sum(value_bytes)::bigint AS value_bytes,
    sum(write_count)::bigint AS write_count, sum(write_bytes)::bigint AS write_bytes
FROM (
    SELECT channel, count(*) AS value_count, sum(pg_column_size(blob)) AS value_bytes,
        0 AS write_count, 0 AS write_bytes
    FROM checkpoint_blobs  GROUP BY channel
    UNION ALL
    SELECT v.key, count(*), sum(pg_column_size(v.value)), 0, 0
    FROM checkpoints, jsonb_each(checkpoint -> 'channel_values') AS v  GROUP BY v.key
    UNION ALL
    SELECT channel, 0, 0, count(*), sum(pg_column_size(blob))
    FROM checkpoint_writes  GROUP BY channel
) AS per_table
GROUP BY channel ORDER BY channel
"""

SELECT_TOP_THREADS_SQL = """
SELECT thread_id, sum(row_count)::bigint AS row_count, sum(byte_count)::bigint AS byte_count
FROM (
    SELECT thread_id, count(*) AS row_count,
        sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS byte_count
    FROM checkpoints GROUP BY thread_id
    UNION ALL
    SELECT thread_id, count(*), sum(pg_column_size(blob)) FROM checkpoint_blobs GROUP BY thread_id
    UNION ALL
    SELECT thread_id, count(*), sum(pg_column_size(blob)) FROM checkpoint_writes GROUP BY thread_id
) AS per_table
GROUP BY thread_id ORDER BY byte_count DESC, thread_id LIMIT %s
"""

# The saver's tables and ours, those that exist, by the name the search path finds.
SELECT_RELATION_SIZES_SQL = """
SELECT name AS relation, pg_total_relation_size(to_regclass(name)) AS byte_count
FROM unnest(%s::text[]) AS t(name)
WHERE to_regclass(name) IS NOT NULL
ORDER BY name
"""
