"""Whole-thread and whole-run operations of the SQL backends: `delete_for_runs` finds a
run's threads and forgets the reclaim records of what it deleted; `copy_thread` copies
a thread's rows under another id.

Each store's statements are named constants in its SQL module (`_sqlite_sql`,
`_postgres_sql`); its backend module assigns each field of its `ThreadTexts` from one,
as it does its `SqlTexts` for the primitives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from retaining_saver._rules import NodeKey, WriteKey, WriteRow
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import SqlBackend, Statement


@dataclass(frozen=True, slots=True)
class ThreadTexts:
    """The statements behind `SqlThreads`, in one dialect.

    `copy_blobs` is None where the store has no blob table (SQLite).
    """

    select_run_threads: str
    select_thread_exists: str
    copy_checkpoints: str
    copy_writes: str
    copy_blobs: str | None
    copy_reclaimed: str
    delete_reclaimed_clones: str
    select_write_rows: str
    delete_write: str


class SqlThreads(SqlBackend):
    """`Backend.run_threads`, `forget_reclaimed_clones` and `copy_rows` over SQL."""

    thread_sql: ClassVar[ThreadTexts]

    def run_threads(self, run_ids: Sequence[str]) -> Op[list[str]]:
        if not run_ids:
            return []
        params = (self._ids_param([str(r) for r in run_ids]),)
        rows = yield Statement(self.thread_sql.select_run_threads, params, fetch=True)
        return sorted(str(r["thread_id"]) for r in rows)

    def forget_reclaimed_clones(self, thread_id: str, keys: Sequence[NodeKey]) -> Op[None]:
        if not keys or not (yield from self._reclaimed_table()):
            return
        by_ns: dict[str, list[str]] = {}
        for ns, checkpoint_id in keys:
            by_ns.setdefault(ns, []).append(checkpoint_id)
        for ns, ids in sorted(by_ns.items()):
            params = (str(thread_id), ns, self._ids_param(ids))
            yield Statement(self.thread_sql.delete_reclaimed_clones, params)

    def write_rows(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> Op[list[WriteRow]]:
        params = (str(thread_id), checkpoint_ns, checkpoint_id)
        rows = yield Statement(self.thread_sql.select_write_rows, params, fetch=True)
        return [(str(r["task_id"]), str(r["channel"]), int(r["idx"])) for r in rows]

    def delete_writes(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, keys: Sequence[WriteKey]
    ) -> Op[int]:
        deleted = 0
        for task_id, idx in keys:
            params = (str(thread_id), checkpoint_ns, checkpoint_id, task_id, idx)
            rows = yield Statement(self.thread_sql.delete_write, params, fetch=True)
            deleted += len(rows)
        return deleted

    def thread_exists(self, thread_id: str) -> Op[bool]:
        rows = yield Statement(self.thread_sql.select_thread_exists, (str(thread_id),), fetch=True)
        return bool(rows) and bool(rows[0]["found"])

    def copy_rows(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        target, params = str(target_thread_id), (str(target_thread_id), str(source_thread_id))
        yield Statement(self.thread_sql.copy_checkpoints, (target, *params))
        yield Statement(self.thread_sql.copy_writes, params)
        if self.thread_sql.copy_blobs is not None:
            yield Statement(self.thread_sql.copy_blobs, params)
        if (yield from self._reclaimed_table()):
            yield Statement(self.thread_sql.copy_reclaimed, params)
