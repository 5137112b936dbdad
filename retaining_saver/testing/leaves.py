"""Write the checkpoint shapes the contract is about, as real apps write them.

`write_duration_leaf` stamps a run's duration the way DeerFlow's
`persist_run_durations` does: a copy of the head checkpoint with a new id and
timestamp, written with `new_versions={}` and metadata-only changes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6

from retaining_saver._effects import Call, Flow, Performer, adrive, drive

INTERRUPT = "__interrupt__"


def leaf_of(head: CheckpointTuple, run_id: str, seconds: float) -> tuple[Any, Any]:
    """The checkpoint and metadata of a duration leaf on `head`, not yet written.

    What `write_duration_leaf` puts: `head`'s checkpoint under a new id and
    timestamp, with `run_id`'s duration added to the run history; for a test
    that writes it itself (`saver.put(head.config, checkpoint, metadata, {})`)
    or compares a read against it.
    """
    checkpoint = dict(head.checkpoint)
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["ts"] = datetime.now(UTC).isoformat()
    metadata_in: dict[str, Any] = dict(head.metadata)
    durations = dict(metadata_in.get("run_durations") or {})
    durations[run_id] = seconds
    message_ids = dict(metadata_in.get("run_message_ids") or {})
    message_ids[run_id] = []
    metadata = {
        "source": "update",
        "step": int(head.metadata.get("step", -1)) + 1,
        "run_durations": durations,
        "run_message_ids": message_ids,
        "writes": {"runtime_run_duration": {"run_id": run_id, "seconds": seconds}},
        "parents": head.metadata.get("parents", {}),
    }
    return checkpoint, metadata


def _skip(head: CheckpointTuple | None) -> bool:
    return head is None or any(w[1] == INTERRUPT for w in head.pending_writes or ())


def _head_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def write_duration_leaf(
    saver: BaseCheckpointSaver[Any], thread_id: str, run_id: str = "run", seconds: float = 1.0
) -> str | None:
    """Append a duration-only leaf to the thread's root head; return its id.

    Like DeerFlow's writer, it writes nothing when the head carries a pending
    interrupt, and returns None then (or for an empty thread).
    """
    return drive(_writing_leaf(saver, thread_id, run_id, seconds), Performer(saver, None, ()))


async def awrite_duration_leaf(
    saver: BaseCheckpointSaver[Any], thread_id: str, run_id: str = "run", seconds: float = 1.0
) -> str | None:
    """Async `write_duration_leaf`."""
    leaf = _writing_leaf(saver, thread_id, run_id, seconds)
    return await adrive(leaf, Performer(saver, None, ()))


def _writing_leaf(
    saver: BaseCheckpointSaver[Any], thread_id: str, run_id: str, seconds: float
) -> Flow[str | None]:
    """`write_duration_leaf`, with `saver`'s sync or async methods as the driver runs."""
    head = yield Call(saver.get_tuple, saver.aget_tuple, (_head_config(thread_id),))
    if head is None or _skip(head):
        return None
    checkpoint, metadata = leaf_of(head, run_id, seconds)
    yield Call(saver.put, saver.aput, (head.config, checkpoint, metadata, {}))
    return str(checkpoint["id"])
