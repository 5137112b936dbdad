"""Giving a SQLite file's free pages back: what `SqliteBackend.compact` runs.

Deleting rows never shrinks a SQLite file: the pages go to its freelist. This
module measures the freelist (`measure`, an operation) and, past a ratio, checkpoints
the WAL and runs `VACUUM` (`compaction`: its statements, in `_sqlite_sql_plan`, run one
by one outside any transaction, which VACUUM needs); `SqliteBackend` gives it the saver's
connection, under its lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from retaining_saver.backends._base import Execute, Op
from retaining_saver.backends._sql import Row, Statement
from retaining_saver.backends._sqlite_sql_plan import (
    SELECT_PAGES_SQL,
    VACUUM_SQL,
    WAL_CHECKPOINT_SQL,
)


@dataclass(frozen=True, slots=True)
class Pages:
    """A SQLite database's pages, as `compaction` decides by them."""

    pages: int
    free_pages: int
    page_size: int
    file_bytes: int
    """The main database file plus its `-wal` file, or `pages * page_size` with no file."""

    @property
    def free_ratio(self) -> float:
        """The share of the database's pages on the freelist."""
        return self.free_pages / self.pages if self.pages else 0.0

    def worth_vacuum(self, min_free_ratio: float) -> bool:
        """Whether some page is free and at least `min_free_ratio` of them are."""
        return self.free_pages > 0 and self.free_ratio >= min_free_ratio


@dataclass(frozen=True, slots=True)
class Compaction:
    """What one `compact` call found and did.

    `file_bytes_*` is the main database file plus its `-wal` file, or
    `page_count * page_size` for a database with no file.
    """

    ran: bool
    pages_before: int
    pages_after: int
    free_pages_before: int
    free_pages_after: int
    file_bytes_before: int
    file_bytes_after: int
    page_size: int = 0

    @property
    def free_ratio_before(self) -> float:
        """The share of the file's pages that was free before."""
        return self.free_pages_before / self.pages_before if self.pages_before else 0.0


def check_ratio(min_free_ratio: float) -> None:
    """Raise unless `min_free_ratio` is a number within [0, 1]."""
    if isinstance(min_free_ratio, bool) or not isinstance(min_free_ratio, int | float):
        raise TypeError("min_free_ratio must be a number")
    if not 0 <= min_free_ratio <= 1:
        raise ValueError(f"min_free_ratio must be within [0, 1], got {min_free_ratio}")


def measure() -> Op[Pages]:
    """The database's pages, free pages, page size and bytes on disk; reads only."""
    return _pages((yield Statement(SELECT_PAGES_SQL))[0])


def compaction(execute: Execute, min_free_ratio: float) -> Compaction:
    """Measure the freelist; when it is large enough, vacuum and measure again. Each
    statement goes to `execute` on its own: VACUUM cannot run in a transaction."""
    before = after = _pages(execute(Statement(SELECT_PAGES_SQL))[0])
    ran = before.worth_vacuum(min_free_ratio)
    if ran:
        for sql in (WAL_CHECKPOINT_SQL, VACUUM_SQL, WAL_CHECKPOINT_SQL):
            execute(Statement(sql))
        after = _pages(execute(Statement(SELECT_PAGES_SQL))[0])
    return Compaction(
        ran=ran,
        pages_before=before.pages,
        pages_after=after.pages,
        free_pages_before=before.free_pages,
        free_pages_after=after.free_pages,
        file_bytes_before=before.file_bytes,
        file_bytes_after=after.file_bytes,
        page_size=before.page_size,
    )


def _pages(row: Row) -> Pages:
    """The `Pages` of `SELECT_PAGES_SQL`'s row."""
    return Pages(
        pages=int(row["page_count"]),
        free_pages=int(row["freelist_count"]),
        page_size=int(row["page_size"]),
        file_bytes=_file_bytes(row),
    )


def _file_bytes(page_row: Row) -> int:
    path = page_row["file"]
    if not path:
        return int(page_row["page_count"]) * int(page_row["page_size"])
    wal = f"{path}-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)
