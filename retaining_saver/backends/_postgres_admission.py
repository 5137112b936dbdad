"""Admission over Postgres: the guarded takes of a trailing leaf, and the saver's own reads.

Admission takes a leaf in one statement, with no explicit transaction: a
round trip here costs more than a whole bare read's query. The statement
re-checks every precondition the rules' `Deletion` names and answers whether
it took the leaf, with the parent's row; when it took nothing, the rules tell
why from that row and whether the leaf's row was still the one they judged.
Concurrent deletes of one row serialize on its row lock, and the loser
deletes nothing. Each take records, in the same statement, that the leaf's id
now names its parent, in the reclaim records' table that `postgres` creates.

Over `AsyncPostgresSaver`, the async admission read runs the saver's own
statement here and builds its tuple as `_load_checkpoint_tuple` does. The
saver deserializes pending writes in a worker thread; so does this read, but
only when the row holds some, as the hop is a sizable share of a whole read.

These statements run on every admission, so each is one round trip whose query
plan is tuned node by node; they live apart from the rest of the backend so that
they can be read, and changed, on their own. `PostgresAdmission` only builds
them: `postgres.PostgresBackend`, which mixes it in, runs them on its drivers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any, cast

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    PendingWrite,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg.types.json import Jsonb

from retaining_saver._rules import CheckpointNode, LeafFacts, MarkerShape, Skip
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._recheck import LeafTake
from retaining_saver.backends._base import Capabilities, Op
from retaining_saver.backends._head_reader import OneRoundBackend, tuple_configs
from retaining_saver.backends._sql import Row, Statement

# The leaf's row `c` is the one the rules judged: same parent, ts, versions,
# and metadata, so its marker too.
_LEAF_AS_JUDGED = """
        c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = %(leaf_id)s -- check: not-protected (the id judged)
        AND c.parent_checkpoint_id = %(parent_id)s
        AND c.checkpoint ->> 'ts' = %(ts)s
        AND c.checkpoint -> 'channel_versions' = %(channel_versions)s
        AND c.checkpoint -> 'versions_seen' = %(versions_seen)s
        AND c.metadata = %(metadata)s -- check: marked (the metadata judged)"""

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
    USING parent AS p -- check: parent-present
    WHERE"""
    + _LEAF_AS_JUDGED
    + """
        AND p.checkpoint -> 'channel_versions' = %(channel_versions)s -- check: still-a-clone
        AND p.checkpoint -> 'versions_seen' = %(versions_seen)s
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
    WHERE h.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND h.metadata ?| %(marker_keys)s::text[]
        AND h.checkpoint_id <> ALL(%(protected)s::text[]) -- check: not-protected
), taken AS (
    DELETE FROM checkpoints AS c
    USING checkpoints AS p
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
        AND c.checkpoint_id = (SELECT checkpoint_id FROM leaf) -- check: newest-parent-next
        AND p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
        AND p.checkpoint_id = c.parent_checkpoint_id -- check: parent-present
        AND c.metadata ->> 'source' = %(marker_source)s -- check: marked
        AND c.metadata ?| %(marker_keys)s::text[]
        -- check: still-a-clone
        AND c.checkpoint -> 'channel_versions' = p.checkpoint -> 'channel_versions'
        AND c.checkpoint -> 'versions_seen' = p.checkpoint -> 'versions_seen'
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
def text_array(values: tuple[str, ...]) -> str:
    """`values` as a Postgres `text[]` literal, to bind as text and cast in the statement."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


class PostgresAdmission(OneRoundBackend):
    """Admission over a `PostgresSaver` or an `AsyncPostgresSaver`: takes and head reads."""

    saver: PostgresSaver | AsyncPostgresSaver

    # Admission reads so far, to expire old reclaim records in one of `EXPIRE_EVERY`.
    admissions = 0

    # Dialect hooks

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
        took nothing, the rules' `LeafTake.untaken` names the reason from what it read: the
        parent's row, and whether the leaf's was still as judged. With
        `with_parent_row` it reads the parent's row as the saver's own read does.
        """
        params = _take_params(thread_id, leaf, self.reclaimed_ttl)
        with_parent_row = with_parent_row and self.matches_audit  # else the saver reads the parent
        sql = RECLAIM_LEAF_READ_SQL if with_parent_row else RECLAIM_LEAF_SQL
        rows = yield Statement(sql, params, fetch=True)
        if rows[0]["taken"]:
            return _taken_facts(rows[0], params, leaf, with_parent_row=with_parent_row)
        parent = _parent_of(rows[0], params)
        take = LeafTake(policy, protected)
        return take.untaken(leaf, parent, leaf_as_judged=rows[0]["leaf_as_judged"])

    def declare(self, saver: BaseCheckpointSaver[Any]) -> Capabilities:
        """It takes as it reads; it reads the head itself over an `AsyncPostgresSaver`,
        whose read always deserializes pending writes in a worker thread
        (`PostgresSaver` has no async read at all)."""
        return Capabilities(
            reads_head=isinstance(saver, AsyncPostgresSaver), takes_as_it_reads=True
        )

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
            "marker_keys": text_array(marker.keys),
            "protected": text_array(tuple(sorted(filter(_storable, protected)))),
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
