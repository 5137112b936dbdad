"""Small real graphs the contract scenarios run: no model, deterministic values.

`flavor="full"` keeps a plain reducer list, stored whole at every checkpoint;
`flavor="delta"` declares it as a beta `DeltaChannel`, rebuilt from ancestor
writes, which is what makes a broken chain silently lose state.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

Flavor = Literal["full", "delta"]
FLAVORS: tuple[Flavor, ...] = ("full", "delta")


def extend_all(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    """A batching-invariant reducer: append every write."""
    out = list(state)
    for write in writes:
        out.extend(write)
    return out


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
    builder: Any = StateGraph(schema)
    builder.add_node("reply", _reply)
    builder.add_node("count", _count)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "count")
    builder.add_edge("count", END)
    return builder.compile(checkpointer=checkpointer)


def subgraph_chat(
    checkpointer: BaseCheckpointSaver[Any], flavor: Flavor = "full", *, persistent: bool = True
) -> Any:
    """A root graph whose `inner` node is a subgraph: with `persistent`, a
    `checkpointer=True` one, whose namespace `inner` keeps its own head across calls;
    else a plain one, which saves each call in a namespace of its own (`inner:<task>`)."""
    inner = chat_graph(True if persistent else None, flavor)
    schema: Any = FullChat if flavor == "full" else DeltaChat
    builder: Any = StateGraph(schema)
    builder.add_node("inner", inner)
    builder.add_edge(START, "inner")
    builder.add_edge("inner", END)
    return builder.compile(checkpointer=checkpointer)


def turn(i: int) -> dict[str, Any]:
    """The input of user turn `i`."""
    return {"said": [f"user {i}"]}


def thread(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """A config for the thread, pinned to `checkpoint_id` when given."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_ns"] = ""
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
