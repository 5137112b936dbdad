"""A long chat for the `retention=` flag's tests (tests/admission/test_retention_flag.py).

Thread "kept" runs through a `RetainingSaver` with a `retention` policy; thread
"twin" runs the same operations on the bare saver it wraps, in lock-step.
Every value is deterministic, so the two hold equal state. Checkpoints are
matched by the order they were written in: each operation writes the same
number of root checkpoints on both threads, and ids are time-ordered.

The graph: `reply`, then `tools` (which calls a subgraph: a namespace of its
own per call), then `count`, then, for a turn that asks, `review`, which
calls `interrupt()` until a `Command(resume=...)` answers it. `said` is a
plain list (`full`) or a `DeltaChannel` (`delta`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, StateSnapshot, interrupt

from retaining_saver import RetentionPolicy
from retaining_saver.testing.graphs import extend_all, line_graph, thread
from retaining_saver.testing.views import visible_state

KEPT, TWIN = "kept", "twin"

_NO_GRACE = timedelta(0)
RETENTION_SHAPES = {
    "horizon-0": RetentionPolicy(history_keep_runs=0, history_min_age=_NO_GRACE),
    "horizon-1": RetentionPolicy(history_keep_runs=1, history_min_age=_NO_GRACE),
    "horizon-2": RetentionPolicy(history_keep_runs=2, history_min_age=_NO_GRACE),
    "horizon-2-compacted": RetentionPolicy(
        history_keep_runs=2, compact_steps=True, history_min_age=_NO_GRACE
    ),
    "keep-latest": RetentionPolicy(keep_latest=True, history_min_age=_NO_GRACE),
    "keep-latest-compacted": RetentionPolicy(
        keep_latest=True, compact_steps=True, history_min_age=_NO_GRACE
    ),
}
"""One policy of each shape `retention=` accepts (compaction only beside a horizon or
keep_latest), for the tests that hold a property under all of them."""
Flavor = Literal["full", "delta"]
Op = tuple[str, ...]
"""("turn", label), ("ask", label): a turn that interrupts, ("resume", answer), ("regen",):
the head run again from its input checkpoint (a fork from a kept turn)."""


class Tool(TypedDict, total=False):
    question: str
    answer: str


def _think(state: Tool) -> Tool:
    return {"answer": f"thought about {state['question']}"}


def _conclude(state: Tool) -> Tool:
    return {"answer": state["answer"] + "!"}


def _think_and_conclude(state: Tool) -> Tool:
    return _conclude(_think(state))


def chat(
    checkpointer: BaseCheckpointSaver[Any] | None, flavor: Flavor, *, subgraph: bool = True
) -> Any:
    """`START -> reply -> tools (a subgraph call) -> count -> [review] -> END`; without
    `subgraph`, `tools` thinks and concludes itself (no subgraph checkpoints)."""
    line = line_graph(Tool, [("think", _think), ("conclude", _conclude)], None)
    tool: Any = line if subgraph else RunnableLambda(_think_and_conclude)
    said: Any = operator.add if flavor == "full" else DeltaChannel(extend_all, snapshot_frequency=3)
    typed_dict: Any = TypedDict
    schema = typed_dict(
        "BoundedChat",
        {"said": Annotated[list[str], said], "turns": int, "ask": bool},
        total=False,
    )

    def reply(state: Any) -> dict[str, Any]:
        return {"said": [f"echo {state['said'][-1]}"]}

    def tools(state: Any, config: RunnableConfig) -> dict[str, Any]:
        found = tool.invoke({"question": state["said"][-1]}, config)
        return {"said": [found["answer"]]}

    async def atools(state: Any, config: RunnableConfig) -> dict[str, Any]:
        found = await tool.ainvoke({"question": state["said"][-1]}, config)
        return {"said": [found["answer"]]}

    def count(state: Any) -> dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    def review(state: Any) -> dict[str, Any]:
        answer = interrupt(f"review turn {state.get('turns', 0)}")
        return {"said": [f"human {answer}"], "ask": False}

    builder: Any = StateGraph(schema)
    builder.add_node("reply", reply)
    builder.add_node("tools", RunnableLambda(tools, afunc=atools))
    builder.add_node("count", count)
    builder.add_node("review", review)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "tools")
    builder.add_edge("tools", "count")
    builder.add_conditional_edges("count", lambda s: "review" if s.get("ask") else END)
    builder.add_edge("review", END)
    return builder.compile(checkpointer=checkpointer)


def script(turns: int) -> list[Op]:
    """A long chat: a turn that asks (then its answer) every fifth, a regenerate every
    sixth, and a last turn left waiting on its interrupt."""
    ops: list[Op] = []
    for i in range(turns):
        if i % 5 == 3:
            ops += [("ask", f"u{i}"), ("resume", f"ok{i}")]
        else:
            ops.append(("turn", f"u{i}"))
        if i % 6 == 5:
            ops.append(("regen",))
    return [*ops, ("ask", "last")]


def invocation(op: Op, target: str | None, thread_id: str) -> tuple[Any, RunnableConfig]:
    """What `graph.invoke` takes for `op` on `thread_id` (`target`: a regenerate's input
    checkpoint on that thread)."""
    kind = op[0]
    if kind == "regen":
        return None, thread(thread_id, target)
    if kind == "resume":
        return Command(resume=op[1]), thread(thread_id)
    return {"said": [op[1]], "ask": kind == "ask"}, thread(thread_id)


@dataclass
class Pairing:
    """The twin's id of each checkpoint of "kept", as both were written."""

    twin_of: dict[str, str] = field(default_factory=dict)

    def pair_new(self, kept: list[StateSnapshot], twin: list[StateSnapshot]) -> None:
        known = set(self.twin_of.values())
        new_kept = sorted(i for i in map(_id, kept) if i not in self.twin_of)
        new_twin = sorted(i for i in map(_id, twin) if i not in known)
        assert len(new_kept) == len(new_twin), (len(new_kept), len(new_twin))
        self.twin_of.update(zip(new_kept, new_twin, strict=True))


def _id(snapshot: StateSnapshot) -> str:
    return str(snapshot.config["configurable"]["checkpoint_id"])


def head_run_input(history: list[StateSnapshot]) -> str:
    """The input checkpoint of the head's run (what a regenerate forks from)."""
    for snapshot in _head_line(history):
        if (snapshot.metadata or {}).get("source") == "input":
            return _id(snapshot)
    raise AssertionError("the head line has no input checkpoint")


def runs_on_head_line(history: list[StateSnapshot]) -> int:
    """How many runs (input checkpoints) the head's parent chain holds."""
    return sum(1 for s in _head_line(history) if (s.metadata or {}).get("source") == "input")


def _head_line(history: list[StateSnapshot]) -> Iterator[StateSnapshot]:
    by_id = {_id(s): s for s in history}
    current = history[0] if history else None  # newest first
    while current is not None:
        yield current
        parent = current.parent_config
        current = by_id.get(str(parent["configurable"]["checkpoint_id"])) if parent else None


def compare(
    pairing: Pairing, kept: list[StateSnapshot], twin: list[StateSnapshot]
) -> list[tuple[str, Any, Any]]:
    """Every kept checkpoint whose view differs from its twin's (empty: none), after
    pairing the new ones; the heads first."""
    pairing.pair_new(kept, twin)
    twins = {_id(s): s for s in twin}
    differences = []
    if kept and visible_state(kept[0]) != visible_state(twin[0]):
        differences.append(("head", visible_state(kept[0]), visible_state(twin[0])))
    for snapshot in kept:
        mine, theirs = visible_state(snapshot), visible_state(twins[pairing.twin_of[_id(snapshot)]])
        if mine != theirs:
            differences.append((_id(snapshot), mine, theirs))
    return differences
