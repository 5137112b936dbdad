"""What `storage_stats` answers: rows and bytes per table, channel and thread, and space.

Plain figures, shared by every backend. Bytes are as each store keeps them:
`LENGTH` of the stored column on SQLite, `pg_column_size` (after TOAST
compression) on Postgres, the serialized length in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class TableStats:
    """Rows and bytes one thread (or the store) holds in one table."""

    rows: int
    bytes: int

    def __sub__(self, gone: TableStats) -> TableStats:
        return TableStats(self.rows - gone.rows, self.bytes - gone.bytes)


@dataclass(frozen=True)
class ChannelStats:
    """What one channel's values and writes take.

    Attributes:
        values: Stored values of the channel: blob rows on Postgres and in
            memory, values inside checkpoint rows on SQLite (and inline
            values inside Postgres checkpoints).
        value_bytes: Their bytes. On SQLite each value is measured as the
            saver serializes it alone, inside the checkpoint row.
        writes: Pending-write rows for the channel.
        write_bytes: Their bytes.
    """

    values: int = 0
    value_bytes: int = 0
    writes: int = 0
    write_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.value_bytes + self.write_bytes

    def __add__(self, other: ChannelStats) -> ChannelStats:
        return ChannelStats(
            self.values + other.values,
            self.value_bytes + other.value_bytes,
            self.writes + other.writes,
            self.write_bytes + other.write_bytes,
        )

    def __sub__(self, gone: ChannelStats) -> ChannelStats:
        return self + ChannelStats(-gone.values, -gone.value_bytes, -gone.writes, -gone.write_bytes)


def ranked(channels: Mapping[str, ChannelStats]) -> dict[str, ChannelStats]:
    """`channels` with the most bytes first (by name among equals), empty ones left out."""
    held = [(name, c) for name, c in channels.items() if c != ChannelStats()]
    return dict(sorted(held, key=lambda item: (-item[1].bytes, item[0])))


@dataclass(frozen=True)
class ThreadStats:
    """Rows and bytes of one thread, over every table."""

    thread_id: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class SpaceStats:
    """What the whole store takes on disk.

    Attributes:
        file_bytes: SQLite: the database file plus its `-wal` file.
        page_size: SQLite: bytes per page.
        pages: SQLite: pages in the database.
        free_pages: SQLite: pages on the freelist, which only a VACUUM gives back.
        relations: Postgres: each LangGraph table's total size on disk, its
            TOAST data and indexes included (`pg_total_relation_size`).
    """

    file_bytes: int | None = None
    page_size: int | None = None
    pages: int | None = None
    free_pages: int | None = None
    relations: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def free_bytes(self) -> int | None:
        """SQLite: the freelist's bytes, what a VACUUM would give back."""
        if self.free_pages is None or self.page_size is None:
            return None
        return self.free_pages * self.page_size


@dataclass(frozen=True)
class StorageStats:
    """Rows and bytes per table of one thread (all threads when thread_id is None).

    Attributes:
        thread_id: The thread, or None for the whole store.
        tables: Rows and bytes per table.
        channels: Per channel, what its values and writes take, the most bytes
            first (filled when asked for: `storage_stats(channels=True)`).
        top_threads: The threads taking the most bytes, most first (whole store,
            when asked for: `storage_stats(top_threads=N)`).
        space: The whole store's space on disk, where it was measured: None in
            memory, and in a dry run's "after" (see `RetentionReport.after`).
    """

    thread_id: str | None
    tables: dict[str, TableStats]
    channels: dict[str, ChannelStats] = field(default_factory=dict)
    top_threads: tuple[ThreadStats, ...] = ()
    space: SpaceStats | None = None

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables.values())

    def without(
        self,
        gone: Mapping[str, TableStats],
        gone_channels: Mapping[str, ChannelStats] | None = None,
    ) -> StorageStats:
        """These figures with `gone`'s rows and bytes taken off each table, and
        `gone_channels`' off each channel (the channels kept only when it is given).
        The space on disk is left unknown: deleting rows frees pages inside the store."""
        tables = {name: t - gone.get(name, TableStats(0, 0)) for name, t in self.tables.items()}
        channels: dict[str, ChannelStats] = {}
        if gone_channels is not None:
            left = {n: c - gone_channels.get(n, ChannelStats()) for n, c in self.channels.items()}
            channels = ranked(left)
        return StorageStats(self.thread_id, tables, channels)
