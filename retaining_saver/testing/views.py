"""What a user sees of a thread, as plain values that compare across threads and savers.

`visible_history` turns `get_state_history` into a plain structure: it keeps
what a user sees (values, next nodes, metadata source and step, interrupts,
and which snapshot is whose parent) and drops what legitimately differs
(checkpoint ids, timestamps, task ids). Two threads that received the same
inputs through the graphs of `retaining_saver.testing.graphs` compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Interrupt, StateSnapshot


def normalize(value: Any) -> Any:
    """Replace messages by `(type, content, id)`, interrupts by their value, recursively.

    Interrupt ids are dropped: they hash the task, whose id depends on the
    checkpoint id, so they differ between two threads with equal state.
    """
    if isinstance(value, BaseMessage):
        return (value.type, value.content, value.id)
    if isinstance(value, Interrupt):
        return ("interrupt", normalize(value.value))
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


def _checkpoint_id(config: RunnableConfig | None) -> str | None:
    if config is None:
        return None
    checkpoint_id: str | None = config["configurable"].get("checkpoint_id")
    return checkpoint_id


def visible_state(snapshot: StateSnapshot) -> dict[str, Any]:
    """What a user sees of one snapshot, without ids or timestamps."""
    metadata = snapshot.metadata or {}
    return {
        "values": normalize(snapshot.values),
        "next": tuple(snapshot.next),
        "source": metadata.get("source"),
        "step": metadata.get("step"),
        "tasks": [
            (task.name, normalize(list(task.interrupts)), task.error is not None)
            for task in snapshot.tasks
        ],
        "interrupts": normalize(list(snapshot.interrupts)),
    }


def _link_shape(snapshots: list[StateSnapshot]) -> list[dict[str, Any]]:
    ids = [_checkpoint_id(s.config) for s in snapshots]
    position = {cid: i for i, cid in enumerate(ids)}
    if len(position) != len(ids):
        raise AssertionError(f"get_state_history repeated a checkpoint id: {ids}")
    out = []
    for snapshot in snapshots:
        entry = visible_state(snapshot)
        parent = _checkpoint_id(snapshot.parent_config)
        # The parent's position in the listing (newest first); "missing" if the
        # parent is not listed, None for a root checkpoint.
        entry["parent"] = None if parent is None else position.get(parent, "missing")
        out.append(entry)
    return out


def visible_history(graph: Any, config: RunnableConfig, **kwargs: Any) -> list[dict[str, Any]]:
    """`get_state_history` newest first, as `visible_state` dicts with parent positions.

    `kwargs` (`filter`, `before`, `limit`) go to `get_state_history`.

    Raises:
        AssertionError: If the listing names one checkpoint twice.
    """
    return _link_shape(list(graph.get_state_history(config, **kwargs)))


async def avisible_history(
    graph: Any, config: RunnableConfig, **kwargs: Any
) -> list[dict[str, Any]]:
    """Async `visible_history`."""
    return _link_shape([s async for s in graph.aget_state_history(config, **kwargs)])


def find_snapshot(snapshots: Iterable[StateSnapshot], **values: Any) -> StateSnapshot:
    """The newest snapshot that has finished its run (`next == ()`) with these values.

    Raises:
        LookupError: If no finished snapshot holds them.
    """
    for snapshot in snapshots:
        if snapshot.next == () and all(snapshot.values.get(k) == v for k, v in values.items()):
            return snapshot
    raise LookupError(f"no finished snapshot with values {values}")
