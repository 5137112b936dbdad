"""Statistics of a Postgres store: what frees, which channels take the bytes, the top threads.

Every figure is one aggregate statement; bytes are `pg_column_size`, as
stored after TOAST compression. A channel's values are its blob rows plus
the primitive values the saver keeps inline in the checkpoint's JSONB.
"""

from __future__ import annotations

from collections.abc import Sequence

from retaining_saver._rules import BlobKey, NodeKey
from retaining_saver.backends._base import Op
from retaining_saver.backends._sql import SqlBackend, Statement
from retaining_saver.backends._stats import ChannelStats, SpaceStats, TableStats, ThreadStats

SELECT_GONE_STATS_SQL = """
SELECT 'checkpoints' AS table_name, count(*) AS row_count,
    coalesce(sum(pg_column_size(c.checkpoint) + pg_column_size(c.metadata)), 0)::bigint
        AS byte_count
FROM checkpoints AS c
JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
    ON c.checkpoint_ns = k.ns AND c.checkpoint_id = k.id
WHERE c.thread_id = %(thread_id)s
UNION ALL
SELECT 'checkpoint_blobs', count(*), coalesce(sum(pg_column_size(b.blob)), 0)::bigint
FROM checkpoint_blobs AS b
JOIN unnest(%(blob_ns)s::text[], %(channels)s::text[], %(versions)s::text[])
    AS k(ns, channel, version)
    ON b.checkpoint_ns = k.ns AND b.channel = k.channel AND b.version = k.version
WHERE b.thread_id = %(thread_id)s
UNION ALL
SELECT 'checkpoint_writes', count(*), coalesce(sum(pg_column_size(w.blob)), 0)::bigint
FROM checkpoint_writes AS w
JOIN unnest(%(ns)s::text[], %(ids)s::text[]) AS k(ns, id)
    ON w.checkpoint_ns = k.ns AND w.checkpoint_id = k.id
WHERE w.thread_id = %(thread_id)s
"""

_CHANNEL_STATS_SQL = """
SELECT channel, sum(value_count)::bigint AS value_count, sum(value_bytes)::bigint AS value_bytes,
    sum(write_count)::bigint AS write_count, sum(write_bytes)::bigint AS write_bytes
FROM (
    SELECT channel, count(*) AS value_count, sum(pg_column_size(blob)) AS value_bytes,
        0 AS write_count, 0 AS write_bytes
    FROM checkpoint_blobs {where} GROUP BY channel
    UNION ALL
    SELECT v.key, count(*), sum(pg_column_size(v.value)), 0, 0
    FROM checkpoints, jsonb_each(checkpoint -> 'channel_values') AS v {where} GROUP BY v.key
    UNION ALL
    SELECT channel, 0, 0, count(*), sum(pg_column_size(blob))
    FROM checkpoint_writes {where} GROUP BY channel
) AS per_table
GROUP BY channel ORDER BY channel
"""

SELECT_THREAD_CHANNEL_STATS_SQL = _CHANNEL_STATS_SQL.format(where="WHERE thread_id = %s")

SELECT_STORE_CHANNEL_STATS_SQL = _CHANNEL_STATS_SQL.format(where="")

SELECT_TOP_THREADS_SQL = """
SELECT thread_id, sum(row_count)::bigint AS row_count, sum(byte_count)::bigint AS byte_count
FROM (
    SELECT thread_id, count(*) AS row_count,
        sum(pg_column_size(checkpoint) + pg_column_size(metadata)) AS byte_count
    FROM checkpoints GROUP BY thread_id
    UNION ALL
    SELECT thread_id, count(*), sum(pg_column_size(blob)) FROM checkpoint_blobs GROUP BY thread_id
    UNION ALL
    SELECT thread_id, count(*), sum(pg_column_size(blob)) FROM checkpoint_writes GROUP BY thread_id
) AS per_table
GROUP BY thread_id ORDER BY byte_count DESC, thread_id LIMIT %s
"""

# The saver's tables and ours, those that exist, by the name the search path finds.
SELECT_RELATION_SIZES_SQL = """
SELECT name AS relation, pg_total_relation_size(to_regclass(name)) AS byte_count
FROM unnest(%s::text[]) AS t(name)
WHERE to_regclass(name) IS NOT NULL
ORDER BY name
"""

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
        params = {
            "thread_id": str(thread_id),
            "ns": [ns for ns, _ in checkpoints],
            "ids": [checkpoint_id for _, checkpoint_id in checkpoints],
            "blob_ns": [b[0] for b in blobs],
            "channels": [b[1] for b in blobs],
            "versions": [str(b[2]) for b in blobs],
        }
        rows = yield Statement(SELECT_GONE_STATS_SQL, params, fetch=True)
        return {r["table_name"]: TableStats(r["row_count"], r["byte_count"]) for r in rows}

    def channel_stats(self, thread_id: str | None) -> Op[dict[str, ChannelStats]]:
        if thread_id is None:
            rows = yield Statement(SELECT_STORE_CHANNEL_STATS_SQL, fetch=True)
        else:
            params = (str(thread_id),) * 3
            rows = yield Statement(SELECT_THREAD_CHANNEL_STATS_SQL, params, fetch=True)
        return {
            r["channel"]: ChannelStats(
                r["value_count"], r["value_bytes"], r["write_count"], r["write_bytes"]
            )
            for r in rows
        }

    def top_threads(self, limit: int) -> Op[list[ThreadStats]]:
        rows = yield Statement(SELECT_TOP_THREADS_SQL, (limit,), fetch=True)
        return [ThreadStats(r["thread_id"], r["row_count"], r["byte_count"]) for r in rows]

    def space(self) -> Op[SpaceStats | None]:
        rows = yield Statement(SELECT_RELATION_SIZES_SQL, (list(RELATIONS),), fetch=True)
        return SpaceStats(relations={r["relation"]: r["byte_count"] for r in rows})
