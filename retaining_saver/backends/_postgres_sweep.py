"""The idle-thread sweep on Postgres: its statements, and `PostgresSweep`.

The scan walks thread ids by key with a recursive query: each step is one
probe of `retaining_saver_checkpoints_root_idx` (root-namespace checkpoints
by thread and id) for the next thread id, and two more for that thread's
newest and oldest ids, so a page costs index probes in proportion to its
size, never a scan of `checkpoints`. `create_retention_indexes()` builds the
index (concurrently); without it the primary key answers the same probes,
stepping over subgraph rows.

Two sweepers never handle one thread at once: each thread's transaction
first takes `pg_try_advisory_xact_lock` on a stable 64-bit hash of the thread
id (`advisory_key`); a thread another sweeper holds is skipped, not waited
on, and the lock ends with the transaction.
"""

from __future__ import annotations

from retaining_saver._rules._idle import HeadFacts
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sweep import Held, SqlSweep, SweepTexts, advisory_key, scan_sql

# The partial index the scan probes: one narrow entry per root checkpoint.
CREATE_ROOT_INDEX_SQL = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS retaining_saver_checkpoints_root_idx
ON checkpoints (thread_id, checkpoint_id) WHERE checkpoint_ns = ''
"""

SCAN_FIRST_SQL = scan_sql(limit="%(limit)s", after=None)

SCAN_AFTER_SQL = scan_sql(limit="%(limit)s", after="%(after)s")

TRY_THREAD_LOCK_SQL = """
SELECT pg_try_advisory_xact_lock(%s::bigint) AS locked
"""

# One round trip for the whole thread: its writes, blobs and reclaim records (whose
# table the backend creates before its first write) go with its checkpoints.
DELETE_THREAD_SQL = """
WITH writes AS (DELETE FROM checkpoint_writes WHERE thread_id = %(thread_id)s),
    blobs AS (DELETE FROM checkpoint_blobs WHERE thread_id = %(thread_id)s),
    records AS (DELETE FROM retaining_saver_reclaimed WHERE thread_id = %(thread_id)s)
DELETE FROM checkpoints WHERE thread_id = %(thread_id)s RETURNING checkpoint_id
"""

# The advisory lock, the re-check of the judged head (its id and its pending writes)
# and the whole thread's deletion, in one statement. The lock CTE is volatile, so it
# runs once; every part reads the statement's snapshot, taken before the lock: a thread
# another sweeper deleted and committed in between finds no rows to delete (0).
DELETE_IF_UNCHANGED_SQL = """
WITH taken AS (
    SELECT pg_try_advisory_xact_lock(%(key)s::bigint) AS locked
),
head AS (
    SELECT c.checkpoint_id, (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count
    FROM checkpoints AS c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
    ORDER BY c.checkpoint_id DESC LIMIT 1
),
judged AS (
    SELECT 1 FROM taken, head
    WHERE taken.locked AND head.checkpoint_id = %(checkpoint_id)s
        AND head.write_count = %(write_count)s
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
gone AS (
    DELETE FROM checkpoints
    WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM judged)
    RETURNING 1
)
SELECT (SELECT locked FROM taken) AS locked, EXISTS (SELECT 1 FROM judged) AS unchanged,
    (SELECT count(*) FROM gone) AS deleted
"""

# What a verdict reads of a thread's newest root checkpoint, in one statement: its id,
# metadata and pending writes, and its trigger channels (`__start__`, `branch:to:*`)
# that hold a value, as the saver stores one: a primitive inline in `channel_values`,
# else a blob of the checkpoint's version whose type is not "empty" (`_upstream` audits
# the saver's read of both; on drift the sweep reads the head through the saver).
SELECT_HEAD_FACTS_SQL = """
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
                        AND b.channel = v.key AND b.version = v.value AND b.type <> 'empty'
                )
            )
    ) AS triggers
FROM checkpoints AS c
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = ''
ORDER BY c.checkpoint_id DESC LIMIT 1
"""

# Under READ COMMITTED each statement sees what committed before it: a row another
# writer committed during the deletes shows here, and the deletion rolls back.
SELECT_THREAD_LEFT_SQL = """
SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = %(thread_id)s)
    OR EXISTS (SELECT 1 FROM checkpoint_writes WHERE thread_id = %(thread_id)s)
    OR EXISTS (SELECT 1 FROM checkpoint_blobs WHERE thread_id = %(thread_id)s) AS found
"""


TEXTS = SweepTexts(
    scan_first=SCAN_FIRST_SQL,
    scan_after=SCAN_AFTER_SQL,
    delete_rows=(),
    delete_checkpoints=DELETE_THREAD_SQL,
    select_left=SELECT_THREAD_LEFT_SQL,
)


class PostgresSweep(SqlSweep):
    """The sweep on a `PostgresBackend`: its statements, and the advisory lock."""

    texts = TEXTS

    def head_facts(self, thread_id: str) -> Op[HeadFacts | None] | None:
        if not self.backend.matches_audit:
            return None
        return self._head_facts(thread_id)

    def _head_facts(self, thread_id: str) -> Op[HeadFacts | None]:
        params = {"thread_id": str(thread_id)}
        rows = yield Statement(SELECT_HEAD_FACTS_SQL, params, fetch=True)
        if not rows:
            return None
        row = rows[0]
        return HeadFacts(
            row["checkpoint_id"],
            row["metadata"] or {},
            int(row["write_count"]),
            frozenset(row["triggers"] or ()),
        )

    def delete_unchanged(self, thread_id: str, head_id: str, head_writes: int) -> Op[int | Held]:
        params = {
            "key": advisory_key(thread_id),
            "thread_id": str(thread_id),
            "checkpoint_id": head_id,
            "write_count": head_writes,
        }
        row = (yield Statement(DELETE_IF_UNCHANGED_SQL, params, fetch=True))[0]
        if not row["locked"]:
            return Held.BUSY
        if not row["unchanged"]:
            return Held.CHANGED
        yield from self._nothing_left(thread_id)
        return int(row["deleted"])

    def lock_thread(self, thread_id: str) -> Op[bool]:
        rows = yield Statement(TRY_THREAD_LOCK_SQL, (advisory_key(thread_id),), fetch=True)
        return bool(rows[0]["locked"])
