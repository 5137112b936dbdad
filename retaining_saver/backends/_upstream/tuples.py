"""The checkpoint tuples the stock savers' private readers build, copied, beside the audit.

A backend's fast path answers a read itself (see `HeadReader`) and must answer
the tuple the saver's own read would: these builders follow each saver's
private reader line by line (`_load_checkpoint_tuple` for Postgres, `get_tuple`
for SQLite and `InMemorySaver`), calling the same private helpers. Every
private name they touch is listed in this package's audit (`__init__`), so a
saver that drifted turns them off with the rest of its fast paths.
"""

from __future__ import annotations

import json
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite.utils import load_pending_writes


def tuple_configs(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent_id: str | None
) -> tuple[RunnableConfig, RunnableConfig | None]:
    """The `config` and `parent_config` the stock savers give a checkpoint tuple."""

    def config(target: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": target,
            }
        }

    return config(checkpoint_id), config(parent_id) if parent_id else None


def postgres_tuple(
    saver: Any, row: Any, writes: list[PendingWrite] | None = None
) -> CheckpointTuple | None:
    """The tuple a Postgres saver's `_load_checkpoint_tuple` builds from a `SELECT_SQL` row,
    with its pending writes deserialized as `writes` (here, if None).

    A row in the pre-v4 format needs the saver's pending-sends migration:
    None, so that the caller reads it through the saver.
    """
    stored: dict[str, Any] = row["checkpoint"]
    if stored.get("v", 0) < 4:
        return None
    ids = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
    config, parent_config = tuple_configs(*ids, row["parent_checkpoint_id"])
    values = {**(stored.get("channel_values") or {}), **saver._load_blobs(row["channel_values"])}
    if writes is None:
        pending = row["pending_writes"]
        writes = saver._load_writes(pending) if pending else []
    return CheckpointTuple(
        config,
        cast(Checkpoint, {**stored, "channel_values": values}),
        row["metadata"],
        parent_config,
        writes,
    )


def sqlite_metadata(row: Any) -> dict[str, Any]:
    """A SQLite row's metadata, stored as UTF-8 JSON."""
    loaded: dict[str, Any] = json.loads(row["metadata"]) if row["metadata"] is not None else {}
    return loaded


def sqlite_stored_metadata(config: RunnableConfig, metadata: CheckpointMetadata) -> bytes:
    """The metadata column a SQLite saver's `put` writes for a checkpoint put at `config`."""
    merged = get_checkpoint_metadata(config, metadata)
    return json.dumps(merged, ensure_ascii=False).encode("utf-8", "ignore")


def sqlite_writes(saver: Any, rows: Any) -> list[PendingWrite]:
    """Pending writes as a SQLite saver deserializes the rows `pending_writes_sql` selects."""
    loaded: list[PendingWrite] = load_pending_writes(rows, saver.serde)
    return loaded


def sqlite_tuple(
    thread_id: str, row: Any, checkpoint: Checkpoint, writes: list[PendingWrite]
) -> CheckpointTuple:
    """The tuple a SQLite saver's `get_tuple` builds from a checkpoint row, its payload
    decoded, and its pending writes deserialized (`sqlite_writes`)."""
    ids = (thread_id, row["checkpoint_ns"], row["checkpoint_id"])
    config, parent_config = tuple_configs(*ids, row["parent_checkpoint_id"])
    metadata = cast(CheckpointMetadata, sqlite_metadata(row))
    return CheckpointTuple(config, checkpoint, metadata, parent_config, writes)


def memory_tuple(
    saver: Any, thread_id: str, checkpoint_ns: str, checkpoint_id: str, saved: Any
) -> CheckpointTuple:
    """The tuple an `InMemorySaver`'s `get_tuple` builds from a saved `storage` row."""
    checkpoint_typed, metadata_typed, parent_id = saved
    serde = saver.serde
    checkpoint: Checkpoint = serde.loads_typed(checkpoint_typed)
    values = saver._load_blobs(thread_id, checkpoint_ns, checkpoint["channel_versions"])
    writes = saver._ordered_writes(thread_id, checkpoint_ns, checkpoint_id)
    config, parent_config = tuple_configs(thread_id, checkpoint_ns, checkpoint_id, parent_id)
    return CheckpointTuple(
        config=config,
        checkpoint={**checkpoint, "channel_values": values},
        metadata=serde.loads_typed(metadata_typed),
        pending_writes=[(i, c, serde.loads_typed(v)) for i, c, v, _ in writes],
        parent_config=parent_config,
    )
