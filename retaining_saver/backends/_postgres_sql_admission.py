"""Postgres: the admission read in one round trip, and the saver's own read.

`ADMIT_AND_READ_SQL` and its variant `ADMIT_EXPIRE_AND_READ_SQL` (which also expires
old reclaim records) are written out in full, each holding the saver's own
`BasePostgresSaver.SELECT_SQL` to the letter, as `_upstream` audits it. They are apart
from `_postgres_sql` for their length (see its docstring for where the rest of the
store's SQL lives); `_postgres_admission` runs them.
"""

from __future__ import annotations

# The admission read in one round trip: take the namespace's newest checkpoint if
# `leaf_verdict` would (under the marker `MarkerShape` binds: `marker_source`,
# `marker_keys`), and answer what the saver's own unpinned read answers right after,
# selected by its own `SELECT_SQL`. `leaf` is the head if it has the marker and is not
# protected; `taken` deletes it only if its row still has the marker, its parent `p`
# holds the same versions and is the next newest, and it owns no writes and has no
# child. The conditions on `c` are re-checked on the row as it is when the DELETE
# locks it. `leaf` is a scalar subquery, so that every plan finds the head first, and
# the DELETE is gated on it (`EXISTS`, a one-time filter): a head without the
# marker ends there, and that read costs one index probe more than the saver's own.
# The gate keeps it so in every plan: without statistics (a new table, before
# autovacuum's first ANALYZE) the prepared statement's generic plan estimates one row
# per thread whatever the index, and may look `c` up in the parent index, filtering
# every checkpoint of the thread; gated, no scan of the DELETE runs at all. (A head
# that is a leaf is still taken by that plan until the first ANALYZE: `c`, `p` and `n`
# each filtered from the thread, about 2 ms at 2,400 checkpoints against 0.34 at 10.)
#
# `ADMIT_AND_READ_SQL` stays within psycopg's 4096 characters
# (`MAX_CACHED_STATEMENT_LENGTH`): a longer query is parsed for its placeholders on
# every execution, in Python, which costs about a tenth of the whole read (as
# `ADMIT_EXPIRE_AND_READ_SQL` does, on one admission read in `EXPIRE_EVERY`).
#
# The head's row is read as `SELECT_SQL` reads it, with one change: each channel's blob
# is looked up by its key (`cross join lateral ... limit 1`, which the planner cannot
# turn into a join over the thread's blobs). The saver's own text joins
# `jsonb_each_text` to `checkpoint_blobs`; estimating 100 channels, the planner hashes
# every blob row of the thread, so its read grows with the thread's length. The
# primary key makes each lookup one row: the same rows, in another order, which the
# saver's load does not depend on (it builds a dict). `test_sql_constants` holds the
# rest of the text to upstream's, to the letter.
#
# `recorded` and `commit_mode` are as in `RECLAIM_LEAF_SQL` (`_postgres_sql_take`):
# the take is recorded with its admission's token, and commits without waiting for the
# WAL flush.
ADMIT_AND_READ_SQL = """
WITH leaf AS (
    SELECT h.checkpoint_id
    FROM (
        SELECT checkpoint_id, metadata FROM checkpoints
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        ORDER BY checkpoint_id DESC LIMIT 1
    ) AS h
    WHERE h.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND h.metadata ?| %(marker_keys)s::text[]
        AND h.checkpoint_id <> ALL(%(protected)s::text[]) -- check: not-protected
), taken AS (
    DELETE FROM checkpoints AS c
    USING checkpoints AS p
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = (SELECT checkpoint_id FROM leaf) -- check: newest-parent-next
        AND EXISTS (SELECT 1 FROM leaf)
        AND p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = c.parent_checkpoint_id -- check: parent-present
        AND c.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND c.metadata ?| %(marker_keys)s::text[]
        -- check: still-a-clone
        AND c.checkpoint -> 'channel_versions' = p.checkpoint -> 'channel_versions'
        AND c.checkpoint -> 'versions_seen' = p.checkpoint -> 'versions_seen'
        AND c.checkpoint -> 'v' IS NOT DISTINCT FROM p.checkpoint -> 'v'
        AND NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS ( -- check: childless
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS ( -- check: newest-parent-next
            SELECT 1 FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
                AND n.checkpoint_id > p.checkpoint_id AND n.checkpoint_id <> c.checkpoint_id
        )
    RETURNING c.checkpoint_id, c.parent_checkpoint_id
), recorded AS (
    INSERT INTO retaining_saver_reclaimed AS r
        (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at, taken_by)
    SELECT %(thread_id)s, %(checkpoint_ns)s, checkpoint_id, parent_checkpoint_id, now(),
        %(taken_by)s
    FROM taken
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
        SET clone_id = EXCLUDED.clone_id, reclaimed_at = EXCLUDED.reclaimed_at,
            taken_by = EXCLUDED.taken_by
)
SELECT head.*, t.taken_id, t.commit_mode
FROM (
    SELECT (SELECT checkpoint_id FROM taken) AS taken_id,
        CASE WHEN EXISTS (SELECT 1 FROM taken)
            THEN set_config('synchronous_commit', 'off', true) END AS commit_mode
) AS t
LEFT JOIN LATERAL (
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob])
        from jsonb_each_text(checkpoint -> 'channel_versions')
        cross join lateral (
            select b.channel, b.type, b.blob from checkpoint_blobs b
            where b.thread_id = checkpoints.thread_id
                and b.checkpoint_ns = checkpoints.checkpoint_ns
                and b.channel = jsonb_each_text.key
                and b.version = jsonb_each_text.value
            limit 1
        ) as bl
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob, convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints 
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        AND checkpoint_id IS DISTINCT FROM t.taken_id
    ORDER BY checkpoint_id DESC LIMIT 1
) AS head ON true
"""  # noqa: E501

# `ADMIT_AND_READ_SQL` that also expires the thread's reclaim records older than the
# TTL after a take (`expired`, as in `RECLAIM_LEAF_SQL`): run on one admission read in
# `EXPIRE_EVERY`, as the expiry is a statement node the common read would pay for.
ADMIT_EXPIRE_AND_READ_SQL = """
WITH leaf AS (
    SELECT h.checkpoint_id
    FROM (
        SELECT checkpoint_id, metadata FROM checkpoints
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        ORDER BY checkpoint_id DESC LIMIT 1
    ) AS h
    WHERE h.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND h.metadata ?| %(marker_keys)s::text[]
        AND h.checkpoint_id <> ALL(%(protected)s::text[]) -- check: not-protected
), taken AS (
    DELETE FROM checkpoints AS c
    USING checkpoints AS p
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = (SELECT checkpoint_id FROM leaf) -- check: newest-parent-next
        AND EXISTS (SELECT 1 FROM leaf)
        AND p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = c.parent_checkpoint_id -- check: parent-present
        AND c.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND c.metadata ?| %(marker_keys)s::text[]
        -- check: still-a-clone
        AND c.checkpoint -> 'channel_versions' = p.checkpoint -> 'channel_versions'
        AND c.checkpoint -> 'versions_seen' = p.checkpoint -> 'versions_seen'
        AND c.checkpoint -> 'v' IS NOT DISTINCT FROM p.checkpoint -> 'v'
        AND NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS ( -- check: childless
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS ( -- check: newest-parent-next
            SELECT 1 FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
                AND n.checkpoint_id > p.checkpoint_id AND n.checkpoint_id <> c.checkpoint_id
        )
    RETURNING c.checkpoint_id, c.parent_checkpoint_id
), recorded AS (
    INSERT INTO retaining_saver_reclaimed AS r
        (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at, taken_by)
    SELECT %(thread_id)s, %(checkpoint_ns)s, checkpoint_id, parent_checkpoint_id, now(),
        %(taken_by)s
    FROM taken
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
        SET clone_id = EXCLUDED.clone_id, reclaimed_at = EXCLUDED.reclaimed_at,
            taken_by = EXCLUDED.taken_by
), expired AS (
    DELETE FROM retaining_saver_reclaimed AS r
    WHERE r.thread_id = %(thread_id)s
        AND r.reclaimed_at < now() - make_interval(secs => %(ttl_seconds)s)
        AND EXISTS (SELECT 1 FROM taken)
)
SELECT head.*, t.taken_id, t.commit_mode
FROM (
    SELECT (SELECT checkpoint_id FROM taken) AS taken_id,
        CASE WHEN EXISTS (SELECT 1 FROM taken)
            THEN set_config('synchronous_commit', 'off', true) END AS commit_mode
) AS t
LEFT JOIN LATERAL (
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob])
        from jsonb_each_text(checkpoint -> 'channel_versions')
        cross join lateral (
            select b.channel, b.type, b.blob from checkpoint_blobs b
            where b.thread_id = checkpoints.thread_id
                and b.checkpoint_ns = checkpoints.checkpoint_ns
                and b.channel = jsonb_each_text.key
                and b.version = jsonb_each_text.value
            limit 1
        ) as bl
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob, convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints 
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        AND checkpoint_id IS DISTINCT FROM t.taken_id
    ORDER BY checkpoint_id DESC LIMIT 1
) AS head ON true
"""  # noqa: E501

# After an admission read that raised: the leaf it took, if its statement
# committed all the same (a lost reply).
SELECT_TAKEN_BY_SQL = """
SELECT checkpoint_id, clone_id FROM retaining_saver_reclaimed
WHERE thread_id = %s AND checkpoint_ns = %s AND taken_by = %s
"""

# The saver's own unpinned read, to the letter, so that its prepared statement serves both.
SELECT_HEAD_ROW_SQL = """
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob])
        from jsonb_each_text(checkpoint -> 'channel_versions')
        inner join checkpoint_blobs bl
            on bl.thread_id = checkpoints.thread_id
            and bl.checkpoint_ns = checkpoints.checkpoint_ns
            and bl.channel = jsonb_each_text.key
            and bl.version = jsonb_each_text.value
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob, convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints WHERE thread_id = %s AND checkpoint_ns = %s ORDER BY checkpoint_id DESC LIMIT 1"""  # noqa: E501
