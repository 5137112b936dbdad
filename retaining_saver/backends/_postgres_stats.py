"""Statistics of a Postgres store: what frees, which channels take the bytes, the top threads.

Every figure is one aggregate statement; bytes are `pg_column_size`, as
stored after TOAST compression. A channel's values are its blob rows plus
the primitive values the saver keeps inline in the checkpoint's JSONB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retaining_saver._rules import BlobKey, NodeKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._postgres_sql_plan import (
    SELECT_GONE_CHANNEL_STATS_SQL,
    SELECT_GONE_STATS_SQL,
    SELECT_RELATION_SIZES_SQL,
    SELECT_STORE_CHANNEL_STATS_SQL,
    SELECT_THREAD_CHANNEL_STATS_SQL,
    SELECT_TOP_THREADS_SQL,
)
from retaining_saver.backends._sql import Row, SqlBackend, Statement
from retaining_saver.backends._stats import ChannelStats, SpaceStats, TableStats, ThreadStats

RELATIONS = (
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
    "retaining_saver_reclaimed",
)


class PostgresStats(SqlBackend):
    """The statistics primitives of `PostgresBackend`."""

    def gone_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, TableStats]]:
        params = _named(thread_id, checkpoints, blobs)
        rows = yield Statement(SELECT_GONE_STATS_SQL, params, fetch=True)
        return self.in_table_order(rows)

    def gone_channel_stats(
        self, thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
    ) -> Op[dict[str, ChannelStats]]:
        params = _named(thread_id, checkpoints, blobs)
        rows = yield Statement(SELECT_GONE_CHANNEL_STATS_SQL, params, fetch=True)
        return _channels(rows)

    def channel_stats(self, thread_id: str | None) -> Op[dict[str, ChannelStats]]:
        if thread_id is None:
            rows = yield Statement(SELECT_STORE_CHANNEL_STATS_SQL, fetch=True)
        else:
            params = (str(thread_id),) * 3
            rows = yield Statement(SELECT_THREAD_CHANNEL_STATS_SQL, params, fetch=True)
        return _channels(rows)

    def top_threads(self, limit: int) -> Op[list[ThreadStats]]:
        rows = yield Statement(SELECT_TOP_THREADS_SQL, (limit,), fetch=True)
        return [ThreadStats(r["thread_id"], r["row_count"], r["byte_count"]) for r in rows]

    def space(self) -> Op[SpaceStats | None]:
        rows = yield Statement(SELECT_RELATION_SIZES_SQL, (list(RELATIONS),), fetch=True)
        return SpaceStats(relations={r["relation"]: r["byte_count"] for r in rows})


def _named(
    thread_id: str, checkpoints: Sequence[NodeKey], blobs: Sequence[BlobKey]
) -> dict[str, Any]:
    """The named checkpoints and blobs as the statistics statements bind them."""
    return {
        "thread_id": str(thread_id),
        "ns": [ns for ns, _ in checkpoints],
        "ids": [checkpoint_id for _, checkpoint_id in checkpoints],
        "blob_ns": [b[0] for b in blobs],
        "channels": [b[1] for b in blobs],
        "versions": [str(b[2]) for b in blobs],
    }


def _channels(rows: Sequence[Row]) -> dict[str, ChannelStats]:
    return {
        r["channel"]: ChannelStats(
            r["value_count"], r["value_bytes"], r["write_count"], r["write_bytes"]
        )
        for r in rows
    }
