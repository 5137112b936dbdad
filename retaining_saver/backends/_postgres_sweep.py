"""The idle-thread sweep on Postgres: its statements, and `PostgresSweep`.

The scan walks thread ids by key with a recursive query: each step is one
probe of `retaining_saver_checkpoints_root_idx` (root-namespace checkpoints
by thread and id) for the next thread id, and two more for that thread's
newest and oldest ids, so a page costs index probes in proportion to its
size, never a scan of `checkpoints`. `create_retention_indexes()` builds the
index (concurrently); without it the primary key answers the same probes,
stepping over subgraph rows.

Two sweepers never handle one thread at once: a transaction that deletes
expired threads takes, for each, `pg_try_advisory_xact_lock` on a stable
64-bit hash of its id (`advisory_key`); a thread another sweeper holds is
skipped, not waited on, and the lock ends with the transaction. The
"delete" strategy handles up to `BATCH_SIZE` expired threads together, in
three statements whatever their number (heads read; locks, re-checks and
deletes; rows written meanwhile looked for), where a thread at a time
would cost a round trip or more per statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from retaining_saver._rules._idle import HeadFacts
from retaining_saver.backends._base import Op
from retaining_saver.backends._postgres_sql_sweep import (
    DELETE_BATCH_IF_UNCHANGED_SQL,
    DELETE_THREAD_SQL,
    SCAN_AFTER_SQL,
    SCAN_FIRST_SQL,
    SELECT_BATCH_HEAD_FACTS_SQL,
    SELECT_BATCH_LEFT_SQL,
    SELECT_THREAD_LEFT_SQL,
    TRY_THREAD_LOCK_SQL,
)
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sweep import (
    Held,
    Judged,
    SqlSweep,
    SweepTexts,
    ThreadChanged,
    advisory_key,
)

TEXTS = SweepTexts(
    scan_first=SCAN_FIRST_SQL,
    scan_after=SCAN_AFTER_SQL,
    delete_rows=(),
    delete_checkpoints=DELETE_THREAD_SQL,
    select_left=SELECT_THREAD_LEFT_SQL,
)

BATCH_SIZE = 50
"""Expired threads judged and deleted together: one statement reads their heads, one
takes, re-checks and deletes them, one looks for rows written meanwhile."""


class PostgresSweep(SqlSweep):
    """The sweep on a `PostgresBackend`: its statements, and the advisory lock."""

    texts = TEXTS
    batch_size = BATCH_SIZE

    def head_facts(self, thread_id: str) -> Op[HeadFacts | None] | None:
        read = self.batch_head_facts([thread_id])
        return None if read is None else _one(read, thread_id)

    def batch_head_facts(self, thread_ids: Sequence[str]) -> Op[dict[str, HeadFacts]] | None:
        if not self.backend.matches_audit:
            return None
        return self._head_facts([str(t) for t in thread_ids])

    def _head_facts(self, thread_ids: list[str]) -> Op[dict[str, HeadFacts]]:
        params = {"thread_ids": thread_ids}
        rows = yield Statement(SELECT_BATCH_HEAD_FACTS_SQL, params, fetch=True)
        return {
            row["thread_id"]: HeadFacts(
                row["checkpoint_id"],
                row["metadata"] or {},
                int(row["write_count"]),
                frozenset(row["triggers"] or ()),
            )
            for row in rows
        }

    def delete_unchanged(self, thread_id: str, head_id: str, head_writes: int) -> Op[int | Held]:
        done = yield from self.delete_batch_unchanged([(thread_id, head_id, head_writes)])
        return done[str(thread_id)]

    def delete_batch_unchanged(self, judged: Sequence[Judged]) -> Op[dict[str, int | Held]]:
        params = {
            "thread_ids": [str(t) for t, _, _ in judged],
            "keys": [advisory_key(t) for t, _, _ in judged],
            "checkpoint_ids": [head_id for _, head_id, _ in judged],
            "write_counts": [writes for _, _, writes in judged],
        }
        rows = yield Statement(DELETE_BATCH_IF_UNCHANGED_SQL, params, fetch=True)
        done: dict[str, int | Held] = {}
        for row in rows:
            if not row["locked"]:
                done[row["thread_id"]] = Held.BUSY
            elif not row["unchanged"]:
                done[row["thread_id"]] = Held.CHANGED
            else:
                done[row["thread_id"]] = int(row["deleted"])
        taken = [t for t, d in done.items() if not isinstance(d, Held)]
        if taken:
            left = yield Statement(SELECT_BATCH_LEFT_SQL, {"thread_ids": taken}, fetch=True)
            if left:
                raise ThreadChanged(left[0]["thread_id"])
        return done

    def lock_thread(self, thread_id: str) -> Op[bool]:
        rows = yield Statement(TRY_THREAD_LOCK_SQL, (advisory_key(thread_id),), fetch=True)
        return bool(rows[0]["locked"])


def _one(read: Op[dict[str, HeadFacts]], thread_id: str) -> Op[HeadFacts | None]:
    """The facts of `thread_id` that `read` answers (None: it has no root checkpoint)."""
    facts = yield from read
    return facts.get(str(thread_id))
