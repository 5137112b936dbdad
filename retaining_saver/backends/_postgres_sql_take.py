"""Postgres: the guarded take of one leaf the rules judged, in one statement.

Two variants of one statement, each written out in full: `RECLAIM_LEAF_SQL` answers
the parent's facts, `RECLAIM_LEAF_READ_SQL` the parent's row as the saver reads it.
They are apart from `_postgres_sql` for their length (see its docstring for where the
rest of the store's SQL lives); `_postgres_admission` runs them.
"""

from __future__ import annotations

# Take one trailing leaf the rules judged, guarded, inside a statement, answering one
# row: whether it took the leaf; if not, whether the leaf's row was still as judged
# (`leaf_as_judged`); and the parent's row, all from the statement's snapshot.
#
# `parent` reads the parent's row once; `taken` deletes the leaf only if every
# precondition of the `Deletion` holds: the leaf row `c` is the one the rules judged
# (same parent, ts, versions, and metadata, so its marker too), the parent holds the
# same versions, the leaf owns no writes and has no child, and it is the newest with
# its parent next. Every subquery names its rows by bound id: one index probe each,
# whatever the thread's length. The guards sit in the DELETE itself, and the answers
# carry no more facts than `untaken_skip` needs: each plan node costs executor time on
# every run.
#
# `recorded` records, in the same statement, that the leaf's id now names its parent
# (the clone), with the admission that took it (`taken_by`, so that a take whose reply
# was lost can be told). `expired` then drops the thread's records older than the TTL,
# found by the age index: the cost grows with how many expired, never with how many are
# kept. A read of a record checks its age itself, so this only bounds the table.
#
# `commit_mode` sets `synchronous_commit` off for this statement alone, and only when
# it took something: losing the delete in a crash leaves the leaf, a valid state, and
# since the WAL is one sequence, the next durable commit (the run's own next
# checkpoint) makes it durable.
#
# This one, for an explicit admission, which reads no values, answers the parent's
# facts only, so its cost does not grow with the thread's state.
RECLAIM_LEAF_SQL = """
WITH parent AS (
    SELECT p.parent_checkpoint_id, p.checkpoint, p.metadata
    FROM checkpoints AS p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = %(parent_id)s
), taken AS (
    DELETE FROM checkpoints AS c
    USING parent AS p -- check: parent-present
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s -- check: not-protected (the id judged)
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s -- check: marked (the metadata judged)
        AND p.checkpoint -> 'channel_versions' = %(channel_versions)s -- check: still-a-clone
        AND p.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.checkpoint -> 'v' IS NOT DISTINCT FROM p.checkpoint -> 'v'
        AND NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = %(leaf_id)s
        )
        AND NOT EXISTS ( -- check: childless
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = %(leaf_id)s
        )
        AND ARRAY( -- check: newest-parent-next
            SELECT n.checkpoint_id FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
            ORDER BY n.checkpoint_id DESC LIMIT 2
        ) = ARRAY[%(leaf_id)s, %(parent_id)s]::text[]
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
SELECT t.taken, t.taken OR EXISTS (
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s -- check: not-protected (the id judged)
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s -- check: marked (the metadata judged)
    ) AS leaf_as_judged,
    t.commit_mode, p.*
FROM (
    SELECT EXISTS (SELECT 1 FROM taken) AS taken,
        CASE WHEN EXISTS (SELECT 1 FROM taken)
            THEN set_config('synchronous_commit', 'off', true) END AS commit_mode
) AS t
LEFT JOIN LATERAL (
    SELECT parent.parent_checkpoint_id, parent.checkpoint, parent.metadata,
        (
            SELECT array_agg(w.idx) FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = %(parent_id)s
        ) AS pending_writes
    FROM parent
) AS p ON true
"""

# `RECLAIM_LEAF_SQL`, answering the parent's row as the saver's own read selects it
# (`BasePostgresSaver.SELECT_SQL`, to the letter, as `_upstream` audits it), blobs and
# writes included: the run that reads after the take is answered from it, built as the
# saver builds it, never from the leaf's already loaded values.
RECLAIM_LEAF_READ_SQL = """
WITH parent AS (
    SELECT p.parent_checkpoint_id, p.checkpoint, p.metadata
    FROM checkpoints AS p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = %(parent_id)s
), taken AS (
    DELETE FROM checkpoints AS c
    USING parent AS p -- check: parent-present
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s -- check: not-protected (the id judged)
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s -- check: marked (the metadata judged)
        AND p.checkpoint -> 'channel_versions' = %(channel_versions)s -- check: still-a-clone
        AND p.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.checkpoint -> 'v' IS NOT DISTINCT FROM p.checkpoint -> 'v'
        AND NOT EXISTS ( -- check: no-pending-writes
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = %(leaf_id)s
        )
        AND NOT EXISTS ( -- check: childless
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = %(leaf_id)s
        )
        AND ARRAY( -- check: newest-parent-next
            SELECT n.checkpoint_id FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
            ORDER BY n.checkpoint_id DESC LIMIT 2
        ) = ARRAY[%(leaf_id)s, %(parent_id)s]::text[]
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
SELECT t.taken, t.taken OR EXISTS (
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s -- check: not-protected (the id judged)
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s -- check: marked (the metadata judged)
    ) AS leaf_as_judged,
    t.commit_mode, p.*
FROM (
    SELECT EXISTS (SELECT 1 FROM taken) AS taken,
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
from checkpoints 
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        AND checkpoint_id = %(parent_id)s) AS p ON true
"""  # noqa: E501
