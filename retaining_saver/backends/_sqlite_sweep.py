"""The idle-thread sweep on SQLite: its statements, and `SqliteSweep`.

The scan walks thread ids by key with a recursive query, each step a probe of
`retaining_saver_checkpoints_root_idx` (root-namespace checkpoints by thread
and id), created on the sweeper's first write. A dry run, which must not
change the file, scans by the primary key instead. Each thread's transaction
is `BEGIN IMMEDIATE` (the backend's `run`): the write lock first, so no
other connection writes between the re-check and the commit; that is also
what keeps two sweepers off one thread.
"""

from __future__ import annotations

from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Statement
from retaining_saver.backends._sweep import SqlSweep, SweepTexts, scan_sql

CREATE_ROOT_INDEX_SQL = """
CREATE INDEX IF NOT EXISTS retaining_saver_checkpoints_root_idx
ON checkpoints (thread_id, checkpoint_id) WHERE checkpoint_ns = ''
"""

SCAN_FIRST_SQL = scan_sql(limit=":limit", after=None)

SCAN_AFTER_SQL = scan_sql(limit=":limit", after=":after")

DELETE_THREAD_WRITES_SQL = """
DELETE FROM writes WHERE thread_id = :thread_id
"""

# The backend creates the reclaim records' table before its first write.
DELETE_THREAD_RECORDS_SQL = """
DELETE FROM retaining_saver_reclaimed WHERE thread_id = :thread_id
"""

DELETE_THREAD_CHECKPOINTS_SQL = """
DELETE FROM checkpoints WHERE thread_id = :thread_id RETURNING checkpoint_id
"""

SELECT_THREAD_LEFT_SQL = """
SELECT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = :thread_id)
    OR EXISTS (SELECT 1 FROM writes WHERE thread_id = :thread_id) AS found
"""

TEXTS = SweepTexts(
    scan_first=SCAN_FIRST_SQL,
    scan_after=SCAN_AFTER_SQL,
    delete_rows=(DELETE_THREAD_WRITES_SQL, DELETE_THREAD_RECORDS_SQL),
    delete_checkpoints=DELETE_THREAD_CHECKPOINTS_SQL,
    select_left=SELECT_THREAD_LEFT_SQL,
)


class SqliteSweep(SqlSweep):
    """The sweep on a `SqliteBackend`."""

    texts = TEXTS

    def prepare(self) -> Op[None]:
        yield Statement(CREATE_ROOT_INDEX_SQL)
