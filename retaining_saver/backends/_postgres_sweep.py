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
from retaining_saver.backends._postgres_sql_sweep import (
    DELETE_IF_UNCHANGED_SQL,
    DELETE_THREAD_SQL,
    SCAN_AFTER_SQL,
    SCAN_FIRST_SQL,
    SELECT_HEAD_FACTS_SQL,
    SELECT_THREAD_LEFT_SQL,
    TRY_THREAD_LOCK_SQL,
)
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sweep import Held, SqlSweep, SweepTexts, advisory_key

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
