"""The stores the admission benchmarks time (`bench_admission`, `bench_bounding`): each
async saver opened on a fresh store, long threads written straight to it, and a growing
Postgres store's tables VACUUMed and ANALYZEd as its autovacuum would."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    empty_checkpoint,
    get_checkpoint_metadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base.id import uuid6

BATCH = 1_000
# A Postgres table the timed calls change is VACUUMed and ANALYZEd (untimed) as autovacuum
# would with its defaults: once more rows died than `autovacuum_vacuum_threshold` (50)
# plus `autovacuum_vacuum_scale_factor` (0.2) of its rows, and once more changed since
# its last ANALYZE than `autovacuum_analyze_threshold` (50) plus
# `autovacuum_analyze_scale_factor` (0.1) of them (`autovacuum_when_due`, which
# `bench_admission.side_by_side` calls between repetitions).
DUE_FOR_AUTOVACUUM_SQL = """
SELECT s.relname,
    s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0) AS vacuum,
    s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0) AS analyze
FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes')
"""


# Savers


@asynccontextmanager
async def open_saver(kind: str, directory: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = str(Path(directory) / f"admission-{uuid.uuid4().hex[:8]}.sqlite")
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        server = _common.pg_server_dsn()
        dsn = await asyncio.to_thread(_common.create_database, server)
        try:
            async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
                await saver.setup()
                yield saver
        finally:
            await asyncio.to_thread(_common.drop_database, server, dsn)


@asynccontextmanager
async def sync_twin(inner: BaseCheckpointSaver[Any]) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The sync saver of `inner`'s store (a `SqliteSaver` on its file, a `PostgresSaver` on
    its database), on a connection of its own; `inner` itself where there is none
    (memory). The store's tables are `inner`'s: a growing one is still VACUUMed through
    it (`autovacuum_when_due`)."""
    kind = type(inner).__name__
    if kind == "AsyncSqliteSaver":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        rows = await (await inner.conn.execute("PRAGMA database_list")).fetchall()  # type: ignore[attr-defined]
        conn = sqlite3.connect(rows[0][2], check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    elif kind == "AsyncPostgresSaver":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(inner.conn.info.dsn) as twin:  # type: ignore[attr-defined]
            yield twin
    else:
        yield inner


# A long thread, written directly: a realistic chain of chat-shaped checkpoints.


def chain(
    inner: BaseCheckpointSaver[Any], thread_id: str, n: int, run_length: int | None = None
) -> list[tuple[RunnableConfig, Checkpoint, dict[str, Any], dict[str, Any]]]:
    """`n` checkpoints, each the child of the one before, as `put` arguments; with
    `run_length`, every `run_length`-th one a run's input checkpoint."""
    items = []
    parent_id: str | None = None
    said: list[str] = []
    version: Any = None
    start = datetime.now(UTC) - timedelta(seconds=n)
    for i in range(n):
        version = inner.get_next_version(version, None)
        said = [*said[-5:], f"message {i}: " + "lorem ipsum dolor sit amet " * 2]
        checkpoint = empty_checkpoint()
        # The format LangGraph's runs write (`langgraph.pregel`), not the base
        # package's older default: a pre-v4 row is read through the saver's migration.
        checkpoint["v"] = 4
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["ts"] = (start + timedelta(seconds=i)).isoformat()
        checkpoint["channel_values"] = {"said": list(said), "turns": i // 4}
        checkpoint["channel_versions"] = {"said": version, "turns": version}
        checkpoint["versions_seen"] = {"reply": {"said": version}, "count": {"turns": version}}
        starts_run = run_length is not None and i % run_length == 0
        metadata = {"source": "input" if starts_run else "loop", "step": i, "parents": {}}
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
            | ({"checkpoint_id": parent_id} if parent_id else {})
        }
        items.append((config, checkpoint, metadata, {"said": version, "turns": version}))
        parent_id = checkpoint["id"]
    return items


async def write_chain(
    inner: BaseCheckpointSaver[Any], thread_id: str, n: int, run_length: int | None = None
) -> None:
    """Store `chain(...)` the way the saver's `aput` would, in batches for SQL backends."""
    items = chain(inner, thread_id, n, run_length)
    kind = type(inner).__name__
    for start in range(0, n, BATCH):
        batch = items[start : start + BATCH]
        if kind == "AsyncSqliteSaver":
            await _sqlite_batch(inner, batch)
        elif kind == "AsyncPostgresSaver":
            await _postgres_batch(inner, batch)
        else:
            for config, checkpoint, metadata, new_versions in batch:
                await inner.aput(config, checkpoint, metadata, new_versions)  # type: ignore[arg-type]
    await analyze(inner)


async def autovacuum_when_due(inner: BaseCheckpointSaver[Any]) -> None:
    """On Postgres, VACUUM and ANALYZE each table as autovacuum would (its server here runs
    none): once enough of its rows died or changed (`DUE_FOR_AUTOVACUUM_SQL`). The counts
    reach the statistics views within about a second, so this acts no later than a server
    checking every second, where autovacuum checks every `autovacuum_naptime` (a minute).
    Without the VACUUM, a pass's deleted rows stay in the indexes that every later read of
    the thread walks."""
    if type(inner).__name__ != "AsyncPostgresSaver":
        return
    async with inner._cursor() as cur:  # type: ignore[attr-defined]
        await cur.execute(DUE_FOR_AUTOVACUUM_SQL)
        for row in await cur.fetchall():
            if row["vacuum"]:  # a name from the list above; VACUUM runs in no transaction
                await cur.execute(f"VACUUM (ANALYZE) {row['relname']}")
            elif row["analyze"]:
                await cur.execute(f"ANALYZE {row['relname']}")


async def analyze(inner: BaseCheckpointSaver[Any]) -> None:
    """On Postgres, what autovacuum does shortly after these inserts: plans use statistics."""
    if type(inner).__name__ == "AsyncPostgresSaver":
        async with inner._cursor() as cur:  # type: ignore[attr-defined]
            await cur.execute("ANALYZE checkpoints, checkpoint_blobs, checkpoint_writes")


async def _sqlite_batch(inner: Any, batch: Sequence[Any]) -> None:
    rows = []
    for config, checkpoint, metadata, _ in batch:
        type_, blob = inner.serde.dumps_typed(checkpoint)
        meta = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
        c = config["configurable"]
        rows.append(
            (
                c["thread_id"],
                c["checkpoint_ns"],
                checkpoint["id"],
                c.get("checkpoint_id"),
                type_,
                blob,
                meta.encode("utf-8", "ignore"),
            )
        )
    async with inner.lock:
        await inner.conn.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        await inner.conn.commit()


async def _postgres_batch(inner: Any, batch: Sequence[Any]) -> None:
    from psycopg.types.json import Jsonb

    blobs, checkpoints = [], []
    for config, checkpoint, metadata, new_versions in batch:
        c = config["configurable"]
        copy = dict(checkpoint)
        values = dict(copy["channel_values"])
        blob_values = {k: values.pop(k) for k in list(values) if not _primitive(values[k])}
        copy["channel_values"] = values
        versions = {k: v for k, v in new_versions.items() if k in blob_values}
        blobs += inner._dump_blobs(c["thread_id"], c["checkpoint_ns"], blob_values, versions)
        checkpoints.append(
            (
                c["thread_id"],
                c["checkpoint_ns"],
                checkpoint["id"],
                c.get("checkpoint_id"),
                Jsonb(copy),
                Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
            )
        )
    async with inner._cursor() as cur, cur.connection.transaction():
        await cur.executemany(inner.UPSERT_CHECKPOINT_BLOBS_SQL, blobs)
        await cur.executemany(inner.UPSERT_CHECKPOINTS_SQL, checkpoints)


def _primitive(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
