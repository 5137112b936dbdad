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
plan is tuned node by node; their texts are in `_postgres_sql_take` and
`_postgres_sql_admission`. `PostgresAdmission` only binds them:
`postgres.PostgresBackend`, which mixes it in, runs them on its drivers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, PendingWrite
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.types.json import Jsonb

from retaining_saver._rules import CheckpointNode, LeafFacts, MarkerShape, Skip
from retaining_saver._rules._policy import RetentionPolicy
from retaining_saver._rules._recheck import LeafTake
from retaining_saver.backends._base import Capabilities, Op
from retaining_saver.backends._head_reader import OneRoundBackend
from retaining_saver.backends._postgres_sql_admission import (
    ADMIT_AND_READ_SQL,
    ADMIT_EXPIRE_AND_READ_SQL,
    SELECT_HEAD_ROW_SQL,
    SELECT_TAKEN_BY_SQL,
)
from retaining_saver.backends._postgres_sql_take import RECLAIM_LEAF_READ_SQL, RECLAIM_LEAF_SQL
from retaining_saver.backends._sql import Row, Statement
from retaining_saver.backends._upstream.tuples import postgres_tuple

EXPIRE_EVERY = 16
"""One admission read in this many also expires old reclaim records (every other take
does, every time): the expiry is a statement node the common read would pay for."""


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
        format_version=CheckpointNode.format_version_of(stored.get("v")),
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
        """The tuple the saver's `_load_checkpoint_tuple` builds from a `SELECT_SQL` row
        (`postgres_tuple`); None for a pre-v4 row, so that the caller reads it through the
        saver."""
        return postgres_tuple(self.saver, row, writes)

    def parent_tuple(self, leaf: CheckpointTuple, facts: LeafFacts) -> CheckpointTuple | None:
        """The tuple the saver's read builds for the parent, from the parent's own row.

        Never from the leaf's loaded values: a value the serializer reads back
        in another type than it was written cannot tell how it was stored.
        """
        row = facts.parent_row
        return None if row is None or row["checkpoint"] is None else self.read_tuple(row)
