"""Real graphs and twin threads for the history rules' tests (tests/test_compaction.py).

Every scenario is built twice in lock-step on one saver: thread "kept", which a
retention pass then changes, and thread "twin", left untouched. The two have the
same shape, so a checkpoint of one is matched to the other's by its position in
`get_state_history` before the pass.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from retaining_saver.testing.graphs import chat_graph, thread, turn

KEPT, TWIN = "kept", "twin"


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Callable[[Log], Log]:
    def node(state: Log) -> Log:
        return {"log": [f"{name}{len(state.get('log', []))}"]}

    return node


def chain_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> a -> b -> c -> END`: five checkpoints per run."""
    builder: Any = StateGraph(Log)
    for name in "abc":
        builder.add_node(name, _step(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


def _ask(state: Log) -> Log:
    answer = interrupt("approve?")
    return {"log": [f"answer {answer}"]}


def interrupt_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> draft -> polish -> ask (interrupts) -> done -> END`."""
    builder: Any = StateGraph(Log)
    builder.add_node("draft", _step("draft"))
    builder.add_node("polish", _step("polish"))
    builder.add_node("ask", _ask)
    builder.add_node("done", _step("done"))
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "polish")
    builder.add_edge("polish", "ask")
    builder.add_edge("ask", "done")
    builder.add_edge("done", END)
    return builder.compile(checkpointer=saver)


def history_ids(graph: Any, thread_id: str) -> list[str]:
    """The thread's root-namespace checkpoint ids, newest first."""
    return [
        s.config["configurable"]["checkpoint_id"]
        for s in graph.get_state_history(thread(thread_id))
    ]


def _log(i: int) -> dict[str, Any]:
    return {"log": [f"user {i}"]}


def _chat_turns(graph: Any, thread_id: str) -> None:
    for i in range(4):
        graph.invoke(turn(i), thread(thread_id))


def _chain_runs(graph: Any, thread_id: str) -> None:
    for i in range(3):
        graph.invoke(_log(i), thread(thread_id))


def _interrupted_runs(graph: Any, thread_id: str, *, resume_last: bool) -> None:
    for i in range(3):
        graph.invoke(_log(i), thread(thread_id))
        if i < 2 or resume_last:
            graph.invoke(Command(resume=f"yes {i}"), thread(thread_id))


def _update_state_fork(graph: Any, thread_id: str) -> None:
    """Turns, then `update_state` on an older turn's end (a fork), then turns from it."""
    _chat_turns(graph, thread_id)
    ends = [s for s in graph.get_state_history(thread(thread_id)) if not s.next]
    forked = graph.update_state(ends[2].config, {"said": ["edited"]})
    graph.invoke(turn(7), forked)
    graph.invoke(turn(8), thread(thread_id))


def _regenerate(graph: Any, thread_id: str) -> None:
    """Turns, then the second turn regenerated from where it began, then one more turn."""
    _chat_turns(graph, thread_id)
    inputs = [
        s for s in graph.get_state_history(thread(thread_id)) if s.metadata["source"] == "input"
    ]
    base = inputs[-2].parent_config  # the end of turn one: regenerate turn two from there
    graph.invoke(turn(1), base)
    graph.invoke(turn(5), thread(thread_id))


@dataclass(frozen=True)
class Shape:
    """A scenario: its graph, how one thread of it is written, what continues it."""

    name: str
    graph: Callable[[BaseCheckpointSaver[Any]], Any]
    write: Callable[[Any, str], None]
    next_input: Any
    branch_input: Any = None

    def __repr__(self) -> str:
        return self.name


SHAPES = (
    Shape("chat", chat_graph, _chat_turns, turn(99)),
    Shape("chain", chain_graph, _chain_runs, _log(99)),
    Shape(
        "interrupt-resumed",
        interrupt_graph,
        lambda g, t: _interrupted_runs(g, t, resume_last=True),
        _log(99),
    ),
    Shape(
        "interrupt-pending",
        interrupt_graph,
        lambda g, t: _interrupted_runs(g, t, resume_last=False),
        Command(resume="late"),
        _log(77),
    ),
    Shape("update-state-fork", chat_graph, _update_state_fork, turn(99)),
    Shape("regenerate", chat_graph, _regenerate, turn(99)),
)


@dataclass
class Twins:
    """The same scenario written on two threads of one saver."""

    graph: Any
    kept_to_twin: dict[str, str]

    @classmethod
    def write(cls, shape: Shape, saver: BaseCheckpointSaver[Any]) -> Twins:
        graph = shape.graph(saver)
        shape.write(graph, KEPT)
        shape.write(graph, TWIN)
        kept, twin = history_ids(graph, KEPT), history_ids(graph, TWIN)
        assert len(kept) == len(twin)
        return cls(graph, dict(zip(kept, twin, strict=True)))

    def state(self, thread_id: str, checkpoint_id: str) -> Any:
        return self.graph.get_state(_pinned(thread_id, checkpoint_id))


def _pinned(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    return thread(thread_id, checkpoint_id)


def ts_of(twins: Twins, checkpoint_id: str) -> datetime:
    """When the kept thread's checkpoint was written."""
    return datetime.fromisoformat(twins.state(KEPT, checkpoint_id).created_at)
