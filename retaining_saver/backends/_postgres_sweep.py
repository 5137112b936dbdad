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
"delete" strategy handles up to `BATCH_SIZE` expired threads together: one
statement reads their heads, then each thread is deleted in a transaction
of its own (lock, re-check and deletes in one statement; rows written
meanwhile looked for in a second, which aborts it), and all those
transactions travel in one round trip (`Apart`, a pipeline). So a run that
meets a thread being swept (its `put` upserting a blob key the deletion
took, say) waits for that one thread's transaction, never for the batch's.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.errors import DivisionByZero

from retaining_saver._rules._idle import HeadFacts
from retaining_saver.backends._base import Backend, Op
from retaining_saver.backends._postgres_sql_sweep import (
    DELETE_THREAD_IF_UNCHANGED_SQL,
    DELETE_THREAD_SQL,
    SCAN_AFTER_SQL,
    SCAN_FIRST_SQL,
    SELECT_BATCH_HEAD_FACTS_SQL,
    SELECT_NOTHING_LEFT_SQL,
    SELECT_THREAD_LEFT_SQL,
    TRY_THREAD_LOCK_SQL,
)
from retaining_saver.backends._sql import Aborted, Apart, Done, Row, Statement
from retaining_saver.backends._sweep import Held, Judged, SqlSweep, SweepTexts, advisory_key

TEXTS = SweepTexts(
    scan_first=SCAN_FIRST_SQL,
    scan_after=SCAN_AFTER_SQL,
    delete_rows=(),
    delete_checkpoints=DELETE_THREAD_SQL,
    select_left=SELECT_THREAD_LEFT_SQL,
)

BATCH_SIZE = 50
"""Expired threads judged and deleted together: one statement reads their heads, and one
round trip carries their transactions, one a thread (`Apart`)."""

DELETION = 0
"""The place, in a thread's transaction, of its deletion (the look for rows written
meanwhile follows it, reading no rows back: only whether it failed counts)."""


class PostgresSweep(SqlSweep):
    """The sweep on a `PostgresBackend`: its statements, and the advisory lock."""

    texts = TEXTS
    batch_size = BATCH_SIZE

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.batches = self

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
        """The thread's deletion on its own, in the caller's transaction (`Mode.WRITE`),
        whose rollback `ThreadChanged` asks for."""
        params = _judged(thread_id, head_id, head_writes)
        rows = yield Statement(DELETE_THREAD_IF_UNCHANGED_SQL, params, fetch=True)
        done = _counted(rows[0])
        if not isinstance(done, Held):
            yield from self._nothing_left(thread_id)
        return done

    def delete_batch_unchanged(
        self, judged: Sequence[Judged]
    ) -> Op[dict[str, int | Held | Exception]]:
        transactions = tuple(
            (
                Statement(DELETE_THREAD_IF_UNCHANGED_SQL, params, fetch=True),
                Statement(SELECT_NOTHING_LEFT_SQL, params),
            )
            for params in (_judged(*j) for j in judged)
        )
        ended = yield Apart(transactions)
        return {str(t): _outcome(done) for (t, _, _), done in zip(judged, ended, strict=True)}

    def lock_thread(self, thread_id: str) -> Op[bool]:
        rows = yield Statement(TRY_THREAD_LOCK_SQL, (advisory_key(thread_id),), fetch=True)
        return bool(rows[0]["locked"])


def _judged(thread_id: str, head_id: str, head_writes: int) -> dict[str, object]:
    """The parameters of a judged thread's statements."""
    return {
        "thread_id": str(thread_id),
        "key": advisory_key(thread_id),
        "checkpoint_id": head_id,
        "write_count": head_writes,
    }


def _outcome(done: Done) -> int | Held | Exception:
    """What a thread's transaction did: the checkpoints deleted, why none were, or (it
    failed and rolled back) the error."""
    if isinstance(done, Aborted):
        if done.at > DELETION and isinstance(done.error, DivisionByZero):
            return Held.CHANGED  # a writer committed a row meanwhile: rolled back
        return done.error
    return _counted(done[DELETION][0])


def _counted(row: Row) -> int | Held:
    """What `DELETE_THREAD_IF_UNCHANGED_SQL` answered: the checkpoints deleted, or why
    none were."""
    if not row["locked"]:
        return Held.BUSY
    if not row["unchanged"]:
        return Held.CHANGED
    return int(row["deleted"])


def _one(read: Op[dict[str, HeadFacts]], thread_id: str) -> Op[HeadFacts | None]:
    """The facts of `thread_id` that `read` answers (None: it has no root checkpoint)."""
    facts = yield from read
    return facts.get(str(thread_id))
