"""The resume ledger (`_rules._resumed`) over SQL, written once over each store's texts,
and the whole-thread operations that keep it with its thread: a run's threads include
those it resumed, a copy copies the thread's entries, forgetting a thread forgets them.

Each store's statements are named constants in its SQL module (`_sqlite_sql_resumes`,
`_postgres_sql_resumes`), bound by name; its backend module assigns each field of its
`ResumeTexts` from one. The table is created with the reclaim records' table before
the backend's first write; a read asks first whether it exists, and creates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from retaining_saver._rules import Resumption
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sql_threads import SqlThreads


@dataclass(frozen=True, slots=True)
class ResumeTexts:
    """The statements behind `SqlResumes`, in one dialect."""

    select_resumed_table: str
    insert_resumption: str
    select_resumptions: str
    delete_unrecorded_writes: str
    restore_recorded_writes: str
    delete_resumption: str
    delete_thread_resumed: str
    copy_resumed: str
    select_resumed_threads: str


class SqlResumes(SqlThreads):
    """`Backend.note_resume`, `resumptions`, `restore_writes` and `drop_resumptions`
    over SQL, and the ledger's part of `run_threads`, `copy_rows` and
    `forget_reclaimed`."""

    resume_sql: ClassVar[ResumeTexts]

    def note_resume(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, run_id: str
    ) -> Op[bool]:
        entry = Resumption(checkpoint_ns, checkpoint_id, run_id, 0)
        params = _entry_params(thread_id, entry)
        rows = yield Statement(self.resume_sql.insert_resumption, params, fetch=True)
        return bool(rows)

    def resumptions(self, thread_id: str) -> Op[list[Resumption]]:
        if not (yield from self._resumed_table()):
            return []
        params = {"thread_id": str(thread_id)}
        rows = yield Statement(self.resume_sql.select_resumptions, params, fetch=True)
        return [
            Resumption(r["checkpoint_ns"], r["checkpoint_id"], r["run_id"], int(r["seq"]))
            for r in rows
        ]

    def restore_writes(self, thread_id: str, entry: Resumption) -> Op[int]:
        params = _entry_params(thread_id, entry)
        deleted = yield Statement(self.resume_sql.delete_unrecorded_writes, params, fetch=True)
        restored = yield Statement(self.resume_sql.restore_recorded_writes, params, fetch=True)
        return len(deleted) + len(restored)

    def drop_resumptions(self, thread_id: str, entries: Sequence[Resumption]) -> Op[None]:
        for entry in entries:
            yield Statement(self.resume_sql.delete_resumption, _entry_params(thread_id, entry))

    def _resumed_table(self) -> Op[bool]:
        """Whether the ledger's table exists: a read must not create it."""
        rows = yield Statement(self.resume_sql.select_resumed_table, fetch=True)
        return bool(rows) and bool(rows[0]["found"])

    def run_threads(self, run_ids: Sequence[str]) -> Op[list[str]]:
        found = set((yield from super().run_threads(run_ids)))
        if run_ids and (yield from self._resumed_table()):
            params = {"run_ids": self._ids_param([str(r) for r in run_ids])}
            rows = yield Statement(self.resume_sql.select_resumed_threads, params, fetch=True)
            found |= {str(r["thread_id"]) for r in rows}
        return sorted(found)

    def copy_rows(self, source_thread_id: str, target_thread_id: str) -> Op[None]:
        yield from super().copy_rows(source_thread_id, target_thread_id)
        if (yield from self._resumed_table()):
            params = {"target": str(target_thread_id), "thread_id": str(source_thread_id)}
            yield Statement(self.resume_sql.copy_resumed, params)

    def forget_reclaimed(self, thread_id: str) -> Op[None]:
        yield from super().forget_reclaimed(thread_id)
        if (yield from self._resumed_table()):
            params = {"thread_id": str(thread_id)}
            yield Statement(self.resume_sql.delete_thread_resumed, params)


def _entry_params(thread_id: str, entry: Resumption) -> dict[str, str]:
    return {
        "thread_id": str(thread_id),
        "checkpoint_ns": entry.checkpoint_ns,
        "checkpoint_id": entry.checkpoint_id,
        "run_id": entry.run_id,
    }
