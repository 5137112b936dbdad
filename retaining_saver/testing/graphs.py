"""Small real graphs for the contract scenarios and the tests: no model, deterministic values.

`chat_graph` is the contract's chat: `flavor="full"` keeps a plain reducer
list, stored whole at every checkpoint; `flavor="delta"` declares it as a beta
`DeltaChannel`, rebuilt from ancestor writes, which is what makes a broken
chain silently lose state.

`build_chat_graph`, `build_interrupt_graph` and `build_delta_graph` are the
end-to-end graphs: an `add_messages` chat, a review that calls `interrupt()`,
and a `DeltaChannel` list. Every value they write is deterministic (message
ids are derived from the state, never from `uuid4`), so two threads, or two
savers, that receive the same inputs hold equal state.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from retaining_saver._run_reads import RUNTIME_KEY as _RUNTIME_KEY

Flavor = Literal["full", "delta"]
FLAVORS: tuple[Flavor, ...] = ("full", "delta")

RUNTIME_KEY: str = _RUNTIME_KEY
"""The `configurable` key LangGraph's run loop sets on a run's own reads.

Its presence is how the wrapper tells a run's first read (which admission
serves) from any other read; `run_read` builds such a config.
"""


def extend_all(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    """A batching-invariant reducer: append every write."""
    out = list(state)
    for write in writes:
        out.extend(write)
    return out


def line_graph(
    schema: Any,
    nodes: Sequence[tuple[str, Callable[[Any], dict[str, Any]]]],
    checkpointer: BaseCheckpointSaver[Any] | bool | None,
) -> Any:
    """`START -> nodes... -> END` over `schema`, each node `(name, action)`, compiled with
    `checkpointer`: a graph that runs its nodes one after another."""
    builder: Any = StateGraph(schema)
    names = [name for name, _ in nodes]
    for name, action in nodes:
        builder.add_node(name, action)
    for source, target in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(source, target)
    return builder.compile(checkpointer=checkpointer)


# The contract's chat: `reply` then `count`, four checkpoints per turn


class FullChat(TypedDict, total=False):
    said: Annotated[list[str], operator.add]
    turns: int


class DeltaChat(TypedDict, total=False):
    said: Annotated[list[str], DeltaChannel(extend_all, snapshot_frequency=3)]
    turns: int


def _reply(state: Any) -> dict[str, Any]:
    return {"said": [f"echo {state['said'][-1]}"]}


def _count(state: Any) -> dict[str, Any]:
    return {"turns": state.get("turns", 0) + 1}


def chat_graph(
    checkpointer: BaseCheckpointSaver[Any] | bool | None, flavor: Flavor = "full"
) -> Any:
    """`START -> reply -> count -> END`: four checkpoints per turn."""
    schema: Any = FullChat if flavor == "full" else DeltaChat
    return line_graph(schema, [("reply", _reply), ("count", _count)], checkpointer)


def subgraph_chat(
    checkpointer: BaseCheckpointSaver[Any], flavor: Flavor = "full", *, persistent: bool = True
) -> Any:
    """A root graph whose `inner` node is a subgraph: with `persistent`, a
    `checkpointer=True` one, whose namespace `inner` keeps its own head across calls;
    else a plain one, which saves each call in a namespace of its own (`inner:<task>`)."""
    inner = chat_graph(True if persistent else None, flavor)
    schema: Any = FullChat if flavor == "full" else DeltaChat
    return line_graph(schema, [("inner", inner)], checkpointer)


def turn(i: int) -> dict[str, Any]:
    """The input of user turn `i`."""
    return {"said": [f"user {i}"]}


# Configs


def thread(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """A config for the thread, pinned to `checkpoint_id` when given."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_ns"] = ""
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def thread_config(thread_id: str) -> RunnableConfig:
    """An unpinned config for the thread: `thread(thread_id)`."""
    return thread(thread_id)


def run_read(thread_id: str) -> RunnableConfig:
    """A LangGraph run's first read of `thread_id`: unpinned, root namespace, with the
    run loop's `RUNTIME_KEY`, so the wrapper serves it as the run's admission read."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", RUNTIME_KEY: object()}}


# The end-to-end chat: `respond` then `summarize`, four checkpoints per turn


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


def build_chat_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> Any:
    """`START -> respond -> summarize -> END` over `add_messages` messages."""
    return line_graph(ChatState, [("respond", _respond), ("summarize", _summarize)], checkpointer)


def chat_turn(i: int) -> dict[str, Any]:
    """The input of user turn `i` (the message id is fixed, so runs compare equal)."""
    return {"messages": [HumanMessage(content=f"user says {i}", id=f"human-{i}")]}


# The interrupt graph: `draft` -> `review` (interrupts) -> `publish`


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


def build_interrupt_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> Any:
    """`draft -> review -> publish`; `review` calls `interrupt()`, resumed by `Command`."""
    nodes = [("draft", _draft), ("review", _review), ("publish", _publish)]
    return line_graph(ReviewState, nodes, checkpointer)


# The DeltaChannel graph: a list channel stored as deltas, snapshotted every 3 updates

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


def _count_items(state: DeltaState) -> dict[str, Any]:
    return {"count": len(state["items"])}


def build_delta_graph(checkpointer: BaseCheckpointSaver[Any] | None) -> Any:
    """`add_item -> count` with `items` declared as a beta `DeltaChannel`."""
    return line_graph(DeltaState, [("add_item", _add_item), ("count", _count_items)], checkpointer)


def delta_turn(i: int) -> dict[str, Any]:
    """The input of run `i` of the delta graph (one more item from the caller)."""
    return {"items": [f"input-{i}"]}


# Thread shapes for exactness tests: the graph, and the inputs of its turns

SHAPES: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
    "chat": (build_chat_graph, [chat_turn(i) for i in range(3)]),
    # The interrupted head owns its `__interrupt__` write: a checkpoint with pending writes.
    "interrupt": (build_interrupt_graph, [{"topic": "retention"}]),
    "delta": (build_delta_graph, [delta_turn(i) for i in range(4)]),
}


def _built(checkpointer: BaseCheckpointSaver[Any], shape: str) -> tuple[Any, list[Any]]:
    """`SHAPES[shape]`'s graph, compiled with `checkpointer`, and the inputs of its turns."""
    build, inputs = SHAPES[shape]
    return build(checkpointer), inputs


def run_shape(checkpointer: BaseCheckpointSaver[Any], shape: str, thread_id: str) -> None:
    """Run every turn of `SHAPES[shape]` on `thread_id`."""
    graph, inputs = _built(checkpointer, shape)
    for value in inputs:
        graph.invoke(value, thread_config(thread_id))


async def arun_shape(checkpointer: BaseCheckpointSaver[Any], shape: str, thread_id: str) -> None:
    """Async `run_shape`."""
    graph, inputs = _built(checkpointer, shape)
    for value in inputs:
        await graph.ainvoke(value, thread_config(thread_id))
