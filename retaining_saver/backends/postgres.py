"""`PostgresSaver` and `AsyncPostgresSaver`: tables `checkpoints`, `checkpoint_blobs`
and `checkpoint_writes`.

`checkpoints.checkpoint` is JSONB holding `channel_versions`, `versions_seen`,
`ts` and the primitive channel values; every other channel value is a
`checkpoint_blobs` row keyed by `(thread_id, checkpoint_ns, channel, version)`,
written only for the channels in a put's `new_versions`, and shared by every
later checkpoint that keeps that version. Versions are TEXT there. Metadata is
JSONB, saved without its `writes` key. Lineage is read with JSONB operators,
without deserialising anything.

Each operation runs in one `connection.transaction()` on a cursor from the
saver's own `_cursor()` (so under its lock, and on a pooled connection when it
has a pool), the way the saver's `prune` runs. Statements are prepared as the
connection's `prepare_threshold` says, as the saver's own are.
The default READ COMMITTED isolation applies: a precondition is re-checked
inside the transaction, but a checkpoint another connection commits after
that check is not seen by it.

Admission takes a leaf in one statement, with no explicit transaction: a
round trip here costs more than a whole bare read's query. The statement
re-checks every precondition the rules' `Deletion` names and answers whether
it took the leaf, with the parent's row; when it took nothing, the rules tell
why from that row and whether the leaf's row was still the one they judged.
Concurrent deletes of one row serialize on its row lock, and the loser
deletes nothing.

Over `AsyncPostgresSaver`, the async admission read runs the saver's own
statement here and builds its tuple as `_load_checkpoint_tuple` does. The
saver deserializes pending writes in a worker thread; so does this read, but
only when the row holds some, as the hop is a sizable share of a whole read.

The other primitives are `SqlBackend`'s (`_sql`), run on the statements below
(`SQL`); this module adds its drivers, the guarded takes, the blob sweep, and
the saver's own reads.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, cast

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, PendingWrite
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from retaining_saver import _rules
from retaining_saver._policy import RetentionPolicy
from retaining_saver._rules import BlobKey, CheckpointNode, LeafFacts, Lineage, MarkerShape, Skip
from retaining_saver.backends._apply import ParentChange, RowKey
from retaining_saver.backends._base import (
    OneRoundBackend,
    Op,
    T,
    adrive_statements,
    drive_statements,
    on_saver_loop,
    tuple_configs,
)
from retaining_saver.backends._sql import Row, SqlBackend, SqlTexts, Statement
from retaining_saver.backends._upstream import delta_snapshot

_NODE_COLUMNS = """
    c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint -> 'channel_versions' AS channel_versions,
    c.checkpoint -> 'versions_seen' AS versions_seen,
    c.checkpoint ->> 'ts' AS ts,
    c.metadata"""

_WRITE_COUNT_COLUMN = """
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = c.thread_id
            AND w.checkpoint_ns = c.checkpoint_ns
            AND w.checkpoint_id = c.checkpoint_id
    ) AS write_count"""

SELECT_LINEAGE_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s
"""

SELECT_NODES_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s AND c.checkpoint_id = ANY(%s::text[])
"""

SELECT_HEAD_NODE_SQL = f"""
SELECT {_NODE_COLUMNS}, {_WRITE_COUNT_COLUMN}
FROM checkpoints AS c
WHERE c.thread_id = %s AND c.checkpoint_ns = %s
ORDER BY c.checkpoint_id DESC LIMIT 1
"""

# The leaf's row `c` is the one the rules judged: same parent, ts, versions,
# and metadata, so its marker too.
_LEAF_AS_JUDGED = """
        c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s"""

# What every take does with the leaf it deleted, in its own statement: record
# that its id now names its parent (the clone), with the admission that took
# it (`taken_by`, so that a take whose reply was lost can be told).
_RECORD_TAKEN = """
), recorded AS (
    INSERT INTO retaining_saver_reclaimed AS r
        (thread_id, checkpoint_ns, checkpoint_id, clone_id, reclaimed_at, taken_by)
    SELECT %(thread_id)s, %(checkpoint_ns)s, checkpoint_id, parent_checkpoint_id, now(),
        %(taken_by)s
    FROM taken
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
        SET clone_id = EXCLUDED.clone_id, reclaimed_at = EXCLUDED.reclaimed_at,
            taken_by = EXCLUDED.taken_by
"""

# After a take, drop the thread's records older than the TTL, found by the age
# index: the cost grows with how many expired, never with how many are kept.
# A read of a record checks its age itself, so this only bounds the table.
_EXPIRE_RECORDS = """
), expired AS (
    DELETE FROM retaining_saver_reclaimed AS r
    WHERE r.thread_id = %(thread_id)s
        AND r.reclaimed_at < now() - make_interval(secs => %(ttl_seconds)s)
        AND EXISTS (SELECT 1 FROM taken)
"""

EXPIRE_EVERY = 16
"""One admission read in this many also expires old reclaim records (every other take
does, every time): the expiry is a statement node the common read would pay for."""

# A take sets `synchronous_commit` off for its own statement alone, and only
# when it took something: losing the delete in a crash leaves the leaf, a
# valid state, and since the WAL is one sequence, the next durable commit
# (the run's own next checkpoint) makes it durable.
_COMMIT_MODE = """CASE WHEN EXISTS (SELECT 1 FROM taken)
        THEN set_config('synchronous_commit', 'off', true) END AS commit_mode"""

# Take one trailing leaf the rules judged, guarded, inside a statement.
# `parent` reads the parent's row once; `taken` deletes the leaf only if
# every precondition of the `Deletion` holds: the leaf row is as judged, the
# parent holds the same versions, the leaf owns no writes and has no child,
# and it is the newest with its parent next. Every subquery names its rows by
# bound id: one index probe each, whatever the thread's length. The guards
# sit in the DELETE itself, and the answers below carry no more facts than
# `untaken_skip` needs: each plan node costs executor time on every run.
_TAKE_LEAF_CTES = (
    """
WITH parent AS (
    SELECT p.parent_checkpoint_id, p.checkpoint, p.metadata
    FROM checkpoints AS p
    WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = %(parent_id)s
), taken AS (
    DELETE FROM checkpoints AS c
    USING parent AS p
    WHERE"""
    + _LEAF_AS_JUDGED
    + """
        AND p.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND p.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND NOT EXISTS (
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = %(leaf_id)s
        )
        AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = %(leaf_id)s
        )
        AND ARRAY(
            SELECT n.checkpoint_id FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
            ORDER BY n.checkpoint_id DESC LIMIT 2
        ) = ARRAY[%(leaf_id)s, %(parent_id)s]::text[]
    RETURNING c.checkpoint_id, c.parent_checkpoint_id"""
    + _RECORD_TAKEN
    + _EXPIRE_RECORDS
    + ")"
)

# The take, answering one row: whether it took the leaf; if not, whether the
# leaf's row was still as judged; and the parent's row, all from the
# statement's snapshot. `{parent}` is one of the two parent selects below.
_RECLAIM_LEAF_SQL = (
    _TAKE_LEAF_CTES
    + """
SELECT t.taken, t.taken OR EXISTS (SELECT 1 FROM checkpoints AS c WHERE"""
    + _LEAF_AS_JUDGED
    + """
    ) AS leaf_as_judged,
    t.commit_mode, p.*
FROM (SELECT EXISTS (SELECT 1 FROM taken) AS taken, """
    + _COMMIT_MODE
    + """) AS t
LEFT JOIN LATERAL ({parent}) AS p ON true
"""
)

# The parent's row as the saver's own read selects it, blobs and writes
# included: the run that reads after the take is answered from it, built as
# the saver builds it, never from the leaf's already loaded values.
RECLAIM_LEAF_READ_SQL = _RECLAIM_LEAF_SQL.format(
    parent=BasePostgresSaver.SELECT_SQL
    + """
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        AND checkpoint_id = %(parent_id)s"""
)

# For an explicit admission, which reads no values: the parent's facts only,
# so its cost does not grow with the thread's state.
RECLAIM_LEAF_SQL = _RECLAIM_LEAF_SQL.format(
    parent="""
    SELECT parent.parent_checkpoint_id, parent.checkpoint, parent.metadata,
        (
            SELECT array_agg(w.idx) FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = %(parent_id)s
        ) AS pending_writes
    FROM parent"""
)

# The admission read in one round trip: take the namespace's newest
# checkpoint if `leaf_verdict` would (under the marker `MarkerShape` binds:
# `marker_source`, `marker_keys`), and answer what the saver's own unpinned
# read answers right after, selected by its own `SELECT_SQL`. `leaf` is the
# head if it has the marker and is not protected; `taken` deletes it only if
# its row still has the marker, its parent `p` holds the same versions and is
# the next newest, and it owns no writes and has no child. The conditions on
# `c` are re-checked on the row as it is when the DELETE locks it. `leaf` is
# a scalar subquery, so that every plan finds the head first and `c` by its
# primary key: a head without the marker ends there, and that read costs one
# index probe more than the saver's own.
_ADMIT_AND_READ_SQL = (
    """
WITH leaf AS (
    SELECT h.checkpoint_id
    FROM (
        SELECT checkpoint_id, metadata FROM checkpoints
        WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        ORDER BY checkpoint_id DESC LIMIT 1
    ) AS h
    WHERE h.metadata ->> 'source' = %(marker_source)s
        AND h.metadata ?| %(marker_keys)s::text[]
        AND h.checkpoint_id <> ALL(%(protected)s::text[])
), taken AS (
    DELETE FROM checkpoints AS c
    USING checkpoints AS p
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = (SELECT checkpoint_id FROM leaf)
        AND p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = c.parent_checkpoint_id
        AND c.metadata ->> 'source' = %(marker_source)s
        AND c.metadata ?| %(marker_keys)s::text[]
        AND c.checkpoint -> 'channel_versions' = p.checkpoint -> 'channel_versions'
        AND c.checkpoint -> 'versions_seen' = p.checkpoint -> 'versions_seen'
        AND NOT EXISTS (
            SELECT 1 FROM checkpoint_writes AS w
            WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
                AND w.checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS k
            WHERE k.thread_id = %(thread_id)s AND k.checkpoint_ns = %(checkpoint_ns)s
                AND k.parent_checkpoint_id = c.checkpoint_id
        )
        AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS n
            WHERE n.thread_id = %(thread_id)s AND n.checkpoint_ns = %(checkpoint_ns)s
                AND n.checkpoint_id > p.checkpoint_id AND n.checkpoint_id <> c.checkpoint_id
        )
    RETURNING c.checkpoint_id, c.parent_checkpoint_id"""
    + _RECORD_TAKEN
    + "{expire})"
    + """
SELECT head.*, t.taken_id, t.commit_mode
FROM (SELECT (SELECT checkpoint_id FROM taken) AS taken_id, """
    + _COMMIT_MODE
    + """) AS t
LEFT JOIN LATERAL ("""
    + BasePostgresSaver.SELECT_SQL
    + """
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
        AND checkpoint_id IS DISTINCT FROM t.taken_id
    ORDER BY checkpoint_id DESC LIMIT 1
) AS head ON true
"""
)

ADMIT_AND_READ_SQL = _ADMIT_AND_READ_SQL.replace("{expire}", "")

ADMIT_EXPIRE_AND_READ_SQL = _ADMIT_AND_READ_SQL.replace("{expire}", _EXPIRE_RECORDS)

# After an admission read that raised: the leaf it took, if its statement
# committed all the same (a lost reply).
SELECT_TAKEN_BY_SQL = """
SELECT checkpoint_id, clone_id FROM retaining_saver_reclaimed
WHERE thread_id = %s AND checkpoint_ns = %s AND taken_by = %s
"""

# The saver's own unpinned read, to the letter, so that its prepared statement serves both.
SELECT_HEAD_ROW_SQL = (
    BasePostgresSaver.SELECT_SQL
    + "WHERE thread_id = %s AND checkpoint_ns = %s ORDER BY checkpoint_id DESC LIMIT 1"
)

# Each reclaimed duplicate's id and the clone it resolves to; written in the
# deleting statement or transaction. Created before this backend's first
# write (and by `create_indexes`); a read never creates it.
# Two workers creating it at once can both pass IF NOT EXISTS; the loser's
# unique violation on the catalog means the table is there, so it is ignored.
# CREATE is only tried when the table is missing: a role that may write the
# tables but not create in the schema is refused even an IF NOT EXISTS.
CREATE_RECLAIMED_TABLE_SQL = """
DO $$
BEGIN
    IF to_regclass('retaining_saver_reclaimed') IS NOT NULL THEN
        RETURN;
    END IF;
    CREATE TABLE IF NOT EXISTS retaining_saver_reclaimed (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        clone_id TEXT NOT NULL,
        reclaimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        taken_by TEXT,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    CREATE INDEX IF NOT EXISTS retaining_saver_reclaimed_age_idx
        ON retaining_saver_reclaimed (thread_id, reclaimed_at);
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN NULL;
END
$$
"""

UPSERT_RECLAIMED_SQL = """
INSERT INTO retaining_saver_reclaimed (thread_id, checkpoint_ns, checkpoint_id, clone_id)
VALUES (%s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET clone_id = EXCLUDED.clone_id, reclaimed_at = EXCLUDED.reclaimed_at,
        taken_by = NULL
"""

DELETE_EXPIRED_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = %s AND reclaimed_at < now() - %s::interval
"""

DELETE_THREAD_RECLAIMED_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = %s
"""

SELECT_RECLAIMED_TABLE_SQL = """
SELECT to_regclass('retaining_saver_reclaimed') IS NOT NULL AS found
"""

SELECT_RECLAIMED_CLONE_SQL = """
SELECT clone_id FROM retaining_saver_reclaimed
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
    AND reclaimed_at >= now() - %s::interval
"""

# Lets the in-transaction "still childless?" check find children by index
# instead of scanning the thread. Created by `create_indexes`, not implicitly:
# building it on a large table is an operator's decision.
CREATE_PARENT_INDEX_SQL = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS retaining_saver_checkpoints_parent_idx
ON checkpoints (thread_id, checkpoint_ns, parent_checkpoint_id)
"""

SELECT_HAS_CHILDREN_SQL = """
SELECT EXISTS (
    SELECT 1 FROM checkpoints
    WHERE thread_id = %s AND checkpoint_ns = %s AND parent_checkpoint_id = %s
) AS found
"""

SELECT_NEWEST_ID_SQL = """
SELECT max(checkpoint_id) AS newest FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s
    AND (%s::text IS NULL OR checkpoint_id < %s)
"""

DELETE_WRITES_SQL = """
DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

# RETURNING tells a transaction that lost a race (the row went meanwhile) it deleted nothing.
DELETE_CHECKPOINT_SQL = """
DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
RETURNING checkpoint_id
"""

UPDATE_PARENT_SQL = """
UPDATE checkpoints SET parent_checkpoint_id = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

MAKE_ROOT_SQL = """
UPDATE checkpoints SET parent_checkpoint_id = NULL
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

SELECT_CHILDREN_SQL = """
SELECT parent_checkpoint_id AS parent_id, checkpoint_id FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND parent_checkpoint_id = ANY(%s::text[])
"""

# For a thread with DeltaChannels (`channels`): which of them each checkpoint stores,
# inline (a snapshot's marker) or as a blob at its version, as the saver's delta walk
# probes it. Not run for other threads: it probes the blob table per channel.
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
WHERE c.thread_id = %s
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
        AND c.parent_checkpoint_id IS NOT DISTINCT FROM k.parent
        AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS x
            WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = k.ns
                AND x.parent_checkpoint_id = k.id
                AND NOT EXISTS (
                    SELECT 1 FROM doomed AS d WHERE d.ns = k.ns AND d.id = x.checkpoint_id
                )
        )
        AND (k.consumed OR NOT EXISTS (
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
    AND checkpoint -> 'channel_versions' ->> %s = %s
RETURNING checkpoint_id
"""

UPSERT_BLOB_SQL = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, channel, version)
    DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob
"""

# Every (channel, version) the thread's checkpoints in these namespaces still name.
# Each candidate blob, by primary key, that no checkpoint of its namespace still names
# (in the deleting transaction, after the plan's deletions).
DELETE_BLOBS_SQL = """
DELETE FROM checkpoint_blobs AS b
USING jsonb_to_recordset(%s::jsonb) AS k(checkpoint_ns text, channel text, version text)
WHERE b.thread_id = %s
    AND b.checkpoint_ns = k.checkpoint_ns
    AND b.channel = k.channel
    AND b.version = k.version
    AND NOT EXISTS (
        SELECT 1 FROM checkpoints AS c
        WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
            AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
    )
RETURNING b.checkpoint_ns, b.channel, b.version
"""

# Bytes are as stored: `pg_column_size`, after any TOAST compression.
_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)::bigint
        AS byte_count
FROM checkpoints {where}
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_blobs {where}
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(blob)), 0)::bigint
FROM checkpoint_writes {where}
"""

SELECT_THREAD_STATS_SQL = _STATS_SQL.format(where="WHERE thread_id = %s")

SELECT_STORE_STATS_SQL = _STATS_SQL.format(where="")

SELECT_FIRST_THREAD_IDS_SQL = """
SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id LIMIT %s
"""

SELECT_THREAD_IDS_AFTER_SQL = """
SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > %s ORDER BY thread_id LIMIT %s
"""

SELECT_INTEGRITY_SQL = """
SELECT
    (
        SELECT count(*) FROM checkpoints AS c
        WHERE c.thread_id = %s AND c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS p
            WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
                AND p.checkpoint_id = c.parent_checkpoint_id
        )
    ) AS dangling_parents,
    (
        SELECT count(*) FROM checkpoint_writes AS w
        WHERE w.thread_id = %s AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS c
            WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                AND c.checkpoint_id = w.checkpoint_id
        )
    ) AS orphan_writes,
    (
        SELECT count(*) FROM checkpoint_blobs AS b
        WHERE b.thread_id = %s AND NOT EXISTS (
            SELECT 1 FROM checkpoints AS c
            WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version
        )
    ) AS orphan_blobs
"""

SQL = SqlTexts.named(globals())
"""The constants above that `SqlBackend`'s primitives run, found by their names."""

INSUFFICIENT_PRIVILEGE = "42501"


def _execute(cur: Cursor[DictRow], statement: Statement) -> list[Row]:
    cur.execute(statement.sql, statement.params)
    return cur.fetchall() if statement.fetch else []


async def _aexecute(cur: AsyncCursor[DictRow], statement: Statement) -> list[Row]:
    await cur.execute(statement.sql, statement.params)
    return await cur.fetchall() if statement.fetch else []


def _parent_of(row: Row, params: Mapping[str, Any]) -> CheckpointNode | None:
    """The parent's node from a `RECLAIM_LEAF_SQL` row read with `params`; None if missing."""
    stored = row["checkpoint"]
    if params["parent_id"] is None or stored is None:
        return None
    return CheckpointNode(
        checkpoint_ns=params["checkpoint_ns"],
        checkpoint_id=params["parent_id"],
        parent_id=row["parent_checkpoint_id"],
        channel_versions=stored.get("channel_versions") or {},
        versions_seen=stored.get("versions_seen") or {},
        write_count=len(row["pending_writes"] or ()),
        metadata=row["metadata"] or {},
        ts=stored.get("ts") or "",
    )


def _taken_facts(
    row: Row, params: Mapping[str, Any], leaf: CheckpointNode, *, with_parent_row: bool
) -> LeafFacts:
    """What the take of `leaf` proved before it deleted it; with `with_parent_row`, the
    parent's row as the saver's `SELECT_SQL` reads it.

    The leaf's row was `leaf`, childless and the newest, its parent next.
    """
    return LeafFacts(
        leaf=leaf,
        parent=_parent_of(row, params),
        has_children=False,
        newest_id=leaf.checkpoint_id,
        runner_up_id=leaf.parent_id,
        parent_row=row if with_parent_row else None,
    )


def _take_params(thread_id: str, leaf: CheckpointNode, ttl: timedelta) -> dict[str, Any]:
    """The parameters of the guarded take of `leaf`, with the parent it must clone."""
    return {
        "thread_id": str(thread_id),
        "checkpoint_ns": leaf.checkpoint_ns,
        "leaf_id": leaf.checkpoint_id,
        "parent_id": leaf.parent_id,
        "ts": leaf.ts,
        "channel_versions": Jsonb(dict(leaf.channel_versions)),
        "versions_seen": Jsonb(dict(leaf.versions_seen)),
        "metadata": Jsonb(dict(leaf.metadata)),
        "ttl_seconds": ttl.total_seconds(),
        "taken_by": None,
    }


def _storable(text: str) -> bool:
    """Whether Postgres text can hold `text`: no NUL, and valid Unicode. An id that is
    not can name no stored checkpoint, so protecting it changes nothing."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@functools.lru_cache(maxsize=64)
def _text_array(values: tuple[str, ...]) -> str:
    """`values` as a Postgres `text[]` literal, to bind as text and cast in the statement."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


_CHANGE_COLUMNS = ("ns", "id", "old_parent", "new_parent")
_ROW_COLUMNS = ("ns", "id", "parent", "consumed")
_BLOB_COLUMNS = ("checkpoint_ns", "channel", "version")


def _blob_key(key: BlobKey) -> BlobKey:
    """`key` as the blob table spells it: versions are TEXT."""
    ns, channel, version = key
    return (ns, channel, str(version))


class PostgresBackend(SqlBackend, OneRoundBackend):
    """Backend over a `PostgresSaver` or an `AsyncPostgresSaver`."""

    kind = "postgres"
    holds_nul = False
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    stores_blobs = True
    sql = SQL
    saver: PostgresSaver | AsyncPostgresSaver

    # Drivers

    reclaimed_table_ready = False
    # Admission reads so far, to expire old reclaim records in one of `EXPIRE_EVERY`.
    admissions = 0

    def permission_problem(self, error: BaseException) -> str | None:
        """SQLSTATE 42501 (insufficient_privilege): the driver's first line names it."""
        if getattr(error, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            return None
        return str(error).splitlines()[0] if str(error) else "insufficient privilege"

    def run(self, op: Op[T]) -> T:
        """Carry out `op` in one transaction on the saver's connection."""
        return self._run(self._ready(op), each=False)

    async def arun(self, op: Op[T]) -> T:
        """`run`, asynchronously; a sync `PostgresSaver` runs it in a worker thread."""
        return await self._arun(self._ready(op), each=False)

    def run_each(self, op: Op[T]) -> T:
        """Carry out `op` one statement per transaction, on an autocommit connection."""
        return self._run(self._ready(op), each=True)

    async def arun_each(self, op: Op[T]) -> T:
        """Async `run_each`."""
        return await self._arun(self._ready(op), each=True)

    def read(self, op: Op[T]) -> T:
        """Carry out `op`, which only reads, one statement at a time, creating nothing."""
        return self._run(op, each=True)

    async def aread(self, op: Op[T]) -> T:
        """Async `read`."""
        return await self._arun(op, each=True)

    def _ready(self, op: Op[T]) -> Op[T]:
        """`op`, preceded on this backend's first write by the reclaim records' table."""
        return op if self.reclaimed_table_ready else self._creating_table(op)

    def _creating_table(self, op: Op[T]) -> Op[T]:
        yield Statement(CREATE_RECLAIMED_TABLE_SQL)
        result = yield from op
        self.reclaimed_table_ready = True
        return result

    def _run(self, op: Op[T], *, each: bool) -> T:
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            return on_saver_loop(saver.loop, "run", lambda: self._arun(op, each=each))
        with saver._cursor() as cur:
            if saver.pipe:
                # The transaction must not take in what the pipeline queued before it.
                saver.pipe.sync()
            if each and cur.connection.autocommit:
                return drive_statements(op, partial(_execute, cur))
            with cur.connection.transaction():
                return drive_statements(op, partial(_execute, cur))

    async def _arun(self, op: Op[T], *, each: bool) -> T:
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            return await asyncio.to_thread(self._run, op, each=each)
        async with saver._cursor() as cur:
            if saver.pipe:
                await saver.pipe.sync()
            if each and cur.connection.autocommit:
                return await adrive_statements(op, partial(_aexecute, cur))
            async with cur.connection.transaction():
                return await adrive_statements(op, partial(_aexecute, cur))

    def create_indexes(self) -> None:
        """Create the parent index, concurrently, and the reclaim records' table; needs an
        autocommit connection."""
        saver = self.saver
        if isinstance(saver, AsyncPostgresSaver):
            on_saver_loop(saver.loop, "create_indexes", self.acreate_indexes)
            return
        with saver._cursor() as cur:
            cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)
            cur.execute(CREATE_RECLAIMED_TABLE_SQL, prepare=False)
        self.reclaimed_table_ready = True

    async def acreate_indexes(self) -> None:
        """Async `create_indexes`."""
        saver = self.saver
        if isinstance(saver, PostgresSaver):
            await asyncio.to_thread(self.create_indexes)
            return
        async with saver._cursor() as cur:
            await cur.execute(CREATE_PARENT_INDEX_SQL, prepare=False)
            await cur.execute(CREATE_RECLAIMED_TABLE_SQL, prepare=False)
        self.reclaimed_table_ready = True

    # Dialect hooks

    def _node(self, row: Row, write_count: int) -> CheckpointNode:
        """The node from the JSONB columns the statement selected."""
        return CheckpointNode(
            checkpoint_ns=row["checkpoint_ns"],
            checkpoint_id=row["checkpoint_id"],
            parent_id=row["parent_checkpoint_id"],
            channel_versions=row["channel_versions"] or {},
            versions_seen=row["versions_seen"] or {},
            write_count=write_count,
            metadata=row["metadata"] or {},
            ts=row["ts"] or "",
        )

    def _with_stored(self, lineage: Lineage) -> Op[Lineage]:
        """For a thread with DeltaChannels, which of them each checkpoint stores."""
        channels = sorted(_rules.delta_channels(lineage))
        if not channels:
            return lineage
        rows = yield Statement(SELECT_STORED_SQL, (channels, lineage.thread_id), True)
        stored = {(r["checkpoint_ns"], r["checkpoint_id"]): frozenset(r["stored"]) for r in rows}
        return lineage.with_stored(stored)

    def set_parents(self, thread_id: str, changes: Sequence[ParentChange]) -> Op[int]:
        found = json.dumps([dict(zip(_CHANGE_COLUMNS, c, strict=True)) for c in changes])
        rows = yield Statement(SET_PARENTS_SQL, (found, str(thread_id)), True)
        return len(rows)

    def delete_rows(self, thread_id: str, rows: Sequence[RowKey]) -> Op[int]:
        doomed = json.dumps([dict(zip(_ROW_COLUMNS, row, strict=True)) for row in rows])
        params = {"thread_id": str(thread_id), "rows": doomed}
        found = yield Statement(DELETE_ROWS_SQL, params, True)
        return int(found[0]["deleted"])

    def store_values(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        values: Mapping[str, tuple[str, Any]],
    ) -> Op[bool]:
        """Each value as the saver stores a snapshot: an inline marker and a blob."""
        for channel, (version, value) in values.items():
            key = (str(thread_id), checkpoint_ns, checkpoint_id)
            if not (yield Statement(MARK_STORED_SQL, (channel, *key, channel, version), True)):
                return False
            type_, blob = self.saver.serde.dumps_typed(delta_snapshot(value))
            params = (str(thread_id), checkpoint_ns, channel, version, type_, blob)
            yield Statement(UPSERT_BLOB_SQL, params)
        return True

    def _ids_param(self, ids: Sequence[str]) -> list[str]:
        """`ids` as a list, which psycopg binds as an array."""
        return list(ids)

    def _reclaim_times(self) -> tuple[timedelta, tuple[()]]:
        """Ages by the server's clock: the TTL, for the statements to subtract from `now()`,
        which also stamps each record (the column's default)."""
        return self.reclaimed_ttl, ()

    # Primitives

    def reclaim_leaf(
        self,
        thread_id: str,
        leaf: CheckpointNode,
        policy: RetentionPolicy,
        protected: frozenset[str],
        *,
        with_parent_row: bool = True,
    ) -> Op[LeafFacts | Skip]:
        """Carry out the rules' deletion of `leaf` in one guarded statement.

        The statement re-checks every precondition of the `Deletion`; when it
        took nothing, `untaken_skip` names the reason from what it read: the
        parent's row, and whether the leaf's was still as judged. With
        `with_parent_row` it reads the parent's row as the saver's own read does.
        """
        params = _take_params(thread_id, leaf, self.reclaimed_ttl)
        with_parent_row = with_parent_row and self.fast  # else the saver reads the parent
        sql = RECLAIM_LEAF_READ_SQL if with_parent_row else RECLAIM_LEAF_SQL
        rows = yield Statement(sql, params, fetch=True)
        if rows[0]["taken"]:
            return _taken_facts(rows[0], params, leaf, with_parent_row=with_parent_row)
        parent = _parent_of(rows[0], params)
        return _rules.untaken_skip(leaf, parent, leaf_as_judged=rows[0]["leaf_as_judged"])

    @property
    def reads_head_itself(self) -> bool:
        """True for `AsyncPostgresSaver`, whose read always deserializes pending writes in a
        worker thread; `PostgresSaver` has no async read at all. Off on drift."""
        return isinstance(self.saver, AsyncPostgresSaver) and self.fast

    def head_row(self, thread_id: str, checkpoint_ns: str) -> Op[Any]:
        rows = yield Statement(SELECT_HEAD_ROW_SQL, (str(thread_id), checkpoint_ns), fetch=True)
        return rows[0] if rows else None

    def admit_and_read(
        self,
        thread_id: str,
        checkpoint_ns: str,
        marker: MarkerShape,
        protected: frozenset[str],
        token: str,
    ) -> Op[tuple[str | None, Any]]:
        """Take the namespace's trailing leaf if there is one, and read the head after it,
        in one statement (`ADMIT_AND_READ_SQL`)."""
        # Every value is bound as text or a number (arrays as their text form): psycopg
        # dumps those for less than lists or intervals, and this runs on every admission.
        params = {
            "thread_id": str(thread_id),
            "checkpoint_ns": checkpoint_ns,
            "marker_source": marker.source,
            "marker_keys": _text_array(marker.keys),
            "protected": _text_array(tuple(sorted(filter(_storable, protected)))),
            "ttl_seconds": self.reclaimed_ttl.total_seconds(),
            "taken_by": token,
        }
        self.admissions += 1
        expiring = self.admissions % EXPIRE_EVERY == 0
        sql = ADMIT_EXPIRE_AND_READ_SQL if expiring else ADMIT_AND_READ_SQL
        rows = yield Statement(sql, params, fetch=True)
        row = rows[0]
        taken: str | None = row["taken_id"]
        return taken, None if row["checkpoint_id"] is None else row

    def taken_by(self, thread_id: str, checkpoint_ns: str, token: str) -> Op[str | None]:
        rows = yield Statement(SELECT_TAKEN_BY_SQL, (str(thread_id), checkpoint_ns, token), True)
        return str(rows[0]["checkpoint_id"]) if rows else None

    def row_writes(self, row: Any) -> Callable[[], list[PendingWrite]] | None:
        """`_load_writes` of the row's writes, if any: the async saver runs it in a worker
        thread."""
        if not row["pending_writes"]:
            return None
        return partial(self.saver._load_writes, row["pending_writes"])

    def read_tuple(
        self, row: Any, writes: list[PendingWrite] | None = None
    ) -> CheckpointTuple | None:
        """The tuple the saver's `_load_checkpoint_tuple` builds from a `SELECT_SQL` row.

        A row in the pre-v4 format needs the saver's pending-sends migration:
        None, so that the caller reads it through the saver.
        """
        if row["checkpoint"].get("v", 0) < 4:
            return None
        return self._tuple_of(row, self.saver._load_blobs(row["channel_values"]), writes)

    def parent_tuple(self, leaf: CheckpointTuple, facts: LeafFacts) -> CheckpointTuple | None:
        """The tuple the saver's read builds for the parent, from the parent's own row.

        Never from the leaf's loaded values: a value the serializer reads back
        in another type than it was written cannot tell how it was stored.
        """
        row = facts.parent_row
        return None if row is None or row["checkpoint"] is None else self.read_tuple(row)

    def _tuple_of(
        self, row: Row, blob_values: dict[str, Any], writes: list[PendingWrite] | None = None
    ) -> CheckpointTuple:
        """A checkpoint row with its blob-backed values, as `_load_checkpoint_tuple` builds it."""
        stored: dict[str, Any] = row["checkpoint"]
        ids = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
        config, parent_config = tuple_configs(*ids, row["parent_checkpoint_id"])
        values = {**(stored.get("channel_values") or {}), **blob_values}
        if writes is None:
            pending = row["pending_writes"]
            writes = self.saver._load_writes(pending) if pending else []
        return CheckpointTuple(
            config,
            cast(Checkpoint, {**stored, "channel_values": values}),
            row["metadata"],
            parent_config,
            writes,
        )

    def delete_unreferenced_blobs(
        self, thread_id: str, candidates: Sequence[BlobKey]
    ) -> Op[list[BlobKey]]:
        """Delete the candidates no surviving checkpoint names; return the rows deleted.

        A candidate with no blob row (its value was inlined in the checkpoint
        JSONB) is not returned.
        """
        if not candidates:
            return []
        keys = json.dumps([dict(zip(_BLOB_COLUMNS, _blob_key(k), strict=True)) for k in candidates])
        rows = yield Statement(DELETE_BLOBS_SQL, (keys, str(thread_id)), True)
        gone = {(r["checkpoint_ns"], r["channel"], r["version"]) for r in rows}
        return [key for key in candidates if _blob_key(key) in gone]


def make_backend(saver: PostgresSaver | AsyncPostgresSaver) -> PostgresBackend:
    """The backend for a `PostgresSaver` or an `AsyncPostgresSaver`."""
    return PostgresBackend(saver)
