"""Statistics of a SQLite store: what frees, which channels take the bytes, the top threads.

SQLite keeps a checkpoint's channel values inside its serialized payload, so
a channel's bytes are measured by decoding each payload (a page of rows at a
time) and serializing each value alone, as the saver does. Writes name their
channel in a column, and the top threads are one aggregate query.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from retaining_saver._rules import BlobKey, NodeKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import Row, SqlBackend, Statement
from retaining_saver.backends._sqlite_compaction import measure
from retaining_saver.backends._sqlite_sql_plan import (
    SELECT_GONE_CHANNEL_WRITES_SQL,
    SELECT_GONE_STATS_SQL,
    SELECT_NAMED_PAYLOADS_SQL,
    SELECT_STORE_CHANNEL_WRITES_SQL,
    SELECT_STORE_PAYLOAD_PAGE_SQL,
    SELECT_THREAD_CHANNEL_WRITES_SQL,
    SELECT_THREAD_PAYLOAD_PAGE_SQL,
    SELECT_TOP_THREADS_SQL,
)
from retaining_saver.backends._stats import ChannelStats, SpaceStats, TableStats, ThreadStats

PAYLOAD_PAGE = 200
"""Checkpoints decoded per statement: memory stays bounded by a page of payloads."""


class SqliteStats(SqlBackend):
    """The statistics primitives of `SqliteBackend`."""

    def gone_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, TableStats]]:
        named = json.dumps([list(key) for key in checkpoints])
        rows = yield Statement(SELECT_GONE_STATS_SQL, {"thread_id": str(thread_id), "named": named})
        return {r["table_name"]: TableStats(r["row_count"], r["byte_count"]) for r in rows}

    def channel_stats(self, thread_id: str | None) -> Op[dict[str, ChannelStats]]:
        found: dict[str, ChannelStats] = {}
        yield from self._count_payloads(thread_id, found)
        if thread_id is None:
            writes = yield Statement(SELECT_STORE_CHANNEL_WRITES_SQL)
        else:
            writes = yield Statement(SELECT_THREAD_CHANNEL_WRITES_SQL, (str(thread_id),))
        return _with_writes(found, writes)

    def gone_channel_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, ChannelStats]]:
        found: dict[str, ChannelStats] = {}
        for start in range(0, len(checkpoints), PAYLOAD_PAGE):
            named = json.dumps([list(key) for key in checkpoints[start : start + PAYLOAD_PAGE]])
            params = {"thread_id": str(thread_id), "named": named}
            for row in (yield Statement(SELECT_NAMED_PAYLOADS_SQL, params)):
                self._count_values(row, found)
        named = json.dumps([list(key) for key in checkpoints])
        params = {"thread_id": str(thread_id), "named": named}
        writes = yield Statement(SELECT_GONE_CHANNEL_WRITES_SQL, params)
        return _with_writes(found, writes)

    def _count_payloads(self, thread_id: str | None, found: dict[str, ChannelStats]) -> Op[None]:
        """Count the values of every checkpoint of the thread (the store) into `found`, a
        page of payloads at a time, so that memory holds one page."""
        # The key columns past which the next page starts; a thread's are within it.
        key: tuple[str, ...] = ("thread_id", "checkpoint_ns", "checkpoint_id")
        sql, prefix = SELECT_STORE_PAYLOAD_PAGE_SQL, tuple[str, ...]()
        if thread_id is not None:
            key, sql, prefix = key[1:], SELECT_THREAD_PAYLOAD_PAGE_SQL, (str(thread_id),)
        after = ("",) * len(key)
        while page := (yield Statement(sql, (*prefix, *after, PAYLOAD_PAGE))):
            for row in page:
                self._count_values(row, found)
            after = tuple(page[-1][k] for k in key)

    def _count_values(self, row: Row, found: dict[str, ChannelStats]) -> None:
        serde = self.saver.serde
        checkpoint = serde.loads_typed((row["type"], row["checkpoint"]))
        for channel, value in (checkpoint.get("channel_values") or {}).items():
            size = len(serde.dumps_typed(value)[1])
            more = ChannelStats(values=1, value_bytes=size)
            found[channel] = found.get(channel, ChannelStats()) + more

    def top_threads(self, limit: int) -> Op[list[ThreadStats]]:
        rows = yield Statement(SELECT_TOP_THREADS_SQL, (limit,))
        return [ThreadStats(r["thread_id"], r["row_count"], r["byte_count"]) for r in rows]

    def space(self) -> Op[SpaceStats | None]:
        pages = yield from measure()
        return SpaceStats(
            file_bytes=pages.file_bytes,
            page_size=pages.page_size,
            pages=pages.pages,
            free_pages=pages.free_pages,
        )


def _with_writes(found: dict[str, ChannelStats], writes: Sequence[Row]) -> dict[str, ChannelStats]:
    """`found` (values counted) with each channel's writes added, by channel name."""
    for row in writes:
        more = ChannelStats(writes=row["row_count"], write_bytes=row["byte_count"])
        found[row["channel"]] = found.get(row["channel"], ChannelStats()) + more
    return dict(sorted(found.items()))
