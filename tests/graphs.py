"""Small real LangGraph graphs for end-to-end tests (no LLM involved).

Every value the graphs write is deterministic: message ids are derived from the
state, never from `uuid4`, so two threads (or two savers) that receive the same
inputs hold equal state. `visible_history` turns `get_state_history` into a
plain structure that can be compared across threads and savers: it keeps what
a user sees (values, next nodes, metadata source/step, interrupts, and which
snapshot is whose parent) and drops what legitimately differs (checkpoint ids,
timestamps, task ids).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Interrupt, StateSnapshot, interrupt

from retaining_saver._admission import RUNTIME_KEY
from retaining_saver.testing.graphs import extend_all

# Chat graph: `respond` then `summarize`, four checkpoints per turn


class ChatState(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], add_messages]
    turns: int
    summary: str


def _respond(state: ChatState) -> dict[str, Any]:
    messages = state["messages"]
    last = messages[-1]
    return {
        "messages": [
            AIMessage(content=f"echo: {last.content}", id=f"ai-{len(messages)}"),
        ]
    }


def _summarize(state: ChatState) -> dict[str, Any]:
    turns = state.get("turns", 0) + 1
    said = [str(m.content) for m in state["messages"] if isinstance(m, HumanMessage)]
    return {"turns": turns, "summary": f"{turns} turn(s): " + " | ".join(said)}


def build_chat_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> CompiledStateGraph:
    """`START -> respond -> summarize -> END` over `add_messages` messages."""
    builder = StateGraph(ChatState)
    builder.add_node("respond", _respond)
    builder.add_node("summarize", _summarize)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=checkpointer)


def chat_turn(i: int) -> dict[str, Any]:
    """The input of user turn `i` (the message id is fixed, so runs compare equal)."""
    return {"messages": [HumanMessage(content=f"user says {i}", id=f"human-{i}")]}


# Interrupt graph: `draft` -> `review` (interrupts) -> `publish`


class ReviewState(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str
    published: str


def _draft(state: ReviewState) -> dict[str, Any]:
    return {"draft": f"draft about {state['topic']}"}


def _review(state: ReviewState) -> dict[str, Any]:
    verdict = interrupt({"question": "approve?", "draft": state["draft"]})
    return {"verdict": str(verdict)}


def _publish(state: ReviewState) -> dict[str, Any]:
    return {"published": f"{state['draft']} ({state['verdict']})"}


def build_interrupt_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> CompiledStateGraph:
    """`draft -> review -> publish`; `review` calls `interrupt()`, resumed by `Command`."""
    builder = StateGraph(ReviewState)
    builder.add_node("draft", _draft)
    builder.add_node("review", _review)
    builder.add_node("publish", _publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer)


# DeltaChannel graph: a list channel stored as deltas, snapshotted every 3 updates

DELTA_SNAPSHOT_FREQUENCY = 3


class DeltaState(TypedDict, total=False):
    items: Annotated[
        list[str], DeltaChannel(extend_all, snapshot_frequency=DELTA_SNAPSHOT_FREQUENCY)
    ]
    log: Annotated[list[str], operator.add]
    count: int


def _add_item(state: DeltaState) -> dict[str, Any]:
    n = len(state.get("items", []))
    return {"items": [f"item-{n}"], "log": [f"add_item saw {n}"]}


def _count(state: DeltaState) -> dict[str, Any]:
    return {"count": len(state["items"])}


def build_delta_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> CompiledStateGraph:
    """`add_item -> count` with `items` declared as a beta `DeltaChannel`."""
    builder = StateGraph(DeltaState)
    builder.add_node("add_item", _add_item)
    builder.add_node("count", _count)
    builder.add_edge(START, "add_item")
    builder.add_edge("add_item", "count")
    builder.add_edge("count", END)
    return builder.compile(checkpointer=checkpointer)


def delta_turn(i: int) -> dict[str, Any]:
    """The input of run `i` of the delta graph (one more item from the caller)."""
    return {"items": [f"input-{i}"]}


# Comparable views of state


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def run_read(thread_id: str) -> RunnableConfig:
    """A LangGraph run's first read of `thread_id`: unpinned, root namespace."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", RUNTIME_KEY: object()}}


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
    return config["configurable"].get("checkpoint_id")


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


def visible_history(
    graph: CompiledStateGraph, config: RunnableConfig, **kwargs: Any
) -> list[dict[str, Any]]:
    """`get_state_history` newest first, as `visible_state` dicts with parent positions.

    `kwargs` (`filter`, `before`, `limit`) go to `get_state_history`.
    """
    return _link_shape(list(graph.get_state_history(config, **kwargs)))


async def avisible_history(
    graph: CompiledStateGraph, config: RunnableConfig, **kwargs: Any
) -> list[dict[str, Any]]:
    """Async twin of `visible_history`."""
    return _link_shape([s async for s in graph.aget_state_history(config, **kwargs)])


def find_snapshot(snapshots: Iterable[StateSnapshot], **values: Any) -> StateSnapshot:
    """The newest snapshot that has finished its run (`next == ()`) with these values."""
    for snapshot in snapshots:
        if snapshot.next == () and all(snapshot.values.get(k) == v for k, v in values.items()):
            return snapshot
    raise LookupError(f"no finished snapshot with values {values}")


# Thread shapes for exactness tests: the graph, and the inputs of its turns.
SHAPES: dict[str, tuple[Callable[[Any], CompiledStateGraph], list[Any]]] = {
    "chat": (build_chat_graph, [chat_turn(i) for i in range(3)]),
    # The interrupted head owns its `__interrupt__` write: a checkpoint with pending writes.
    "interrupt": (build_interrupt_graph, [{"topic": "retention"}]),
    "delta": (build_delta_graph, [delta_turn(i) for i in range(4)]),
}


def run_shape(checkpointer: BaseCheckpointSaver[Any], shape: str, thread_id: str) -> None:
    """Run every turn of `shape` on `thread_id`."""
    build, inputs = SHAPES[shape]
    graph = build(checkpointer)
    for value in inputs:
        graph.invoke(value, thread_config(thread_id))


async def arun_shape(checkpointer: BaseCheckpointSaver[Any], shape: str, thread_id: str) -> None:
    """Async `run_shape`."""
    build, inputs = SHAPES[shape]
    graph = build(checkpointer)
    for value in inputs:
        await graph.ainvoke(value, thread_config(thread_id))
