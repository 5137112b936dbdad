"""The idle-thread sweep on SQLite: its statements, and `SqliteSweep`.

The scan walks thread ids by key with a recursive query, each step a probe of
`retaining_saver_checkpoints_root_idx` (root-namespace checkpoints by thread
and id), created on the sweeper's first write. A dry run, which must not
change the file, scans by the primary key instead. Each thread's transaction
is `BEGIN IMMEDIATE` (the backend's `transaction`): the write lock first, so no
other connection writes between the re-check and the commit; that is also
what keeps two sweepers off one thread.
"""

from __future__ import annotations

from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sqlite_sql_plan import (
    CREATE_ROOT_INDEX_SQL,
    DELETE_THREAD_CHECKPOINTS_SQL,
    DELETE_THREAD_RECORDS_SQL,
    DELETE_THREAD_WRITES_SQL,
    SCAN_AFTER_SQL,
    SCAN_FIRST_SQL,
    SELECT_THREAD_LEFT_SQL,
)
from retaining_saver.backends._sqlite_sql_resumes import DELETE_THREAD_RESUMED_SQL
from retaining_saver.backends._sweep import SqlSweep, SweepTexts

TEXTS = SweepTexts(
    scan_first=SCAN_FIRST_SQL,
    scan_after=SCAN_AFTER_SQL,
    delete_rows=(DELETE_THREAD_WRITES_SQL, DELETE_THREAD_RECORDS_SQL, DELETE_THREAD_RESUMED_SQL),
    delete_checkpoints=DELETE_THREAD_CHECKPOINTS_SQL,
    select_left=SELECT_THREAD_LEFT_SQL,
)


class SqliteSweep(SqlSweep):
    """The sweep on a `SqliteBackend`."""

    texts = TEXTS

    def prepare(self) -> Op[None]:
        yield Statement(CREATE_ROOT_INDEX_SQL)
