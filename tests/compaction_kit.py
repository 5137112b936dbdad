"""Real graphs and twin threads for the history rules' tests (tests/engine/test_compaction.py).

Every scenario is built twice in lock-step on one saver: thread "kept", which a
retention pass then changes, and thread "twin", left untouched. The two have the
same shape, so a checkpoint of one is matched to the other's by its position in
`get_state_history` before the pass.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from retaining_saver.testing.graphs import (
    Flavor,
    FullChat,
    chat_graph,
    extend_all,
    line_graph,
    thread,
    turn,
)

KEPT, TWIN = "kept", "twin"


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _step(name: str) -> Callable[[Log], Log]:
    def node(state: Log) -> Log:
        return {"log": [f"{name}{len(state.get('log', []))}"]}

    return node


def chain_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> a -> b -> c -> END`: five checkpoints per run."""
    return line_graph(Log, [(name, _step(name)) for name in "abc"], saver)


def _ask(state: Log) -> Log:
    answer = interrupt("approve?")
    return {"log": [f"answer {answer}"]}


def interrupt_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> draft -> polish -> ask (interrupts) -> done -> END`."""
    nodes = [("draft", _step("draft")), ("polish", _step("polish")), ("ask", _ask)]
    return line_graph(Log, [*nodes, ("done", _step("done"))], saver)


def _ask_twice(prompt: str) -> Callable[[Log], Log]:
    def node(state: Log) -> Log:
        answer = interrupt(f"{prompt}?")
        return {"log": [f"{prompt} {answer}"]}

    return node


def two_interrupts_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> draft -> review (interrupts) -> sign (interrupts) -> done -> END`."""
    nodes = [("draft", _step("draft")), ("review", _ask_twice("review"))]
    return line_graph(Log, [*nodes, ("sign", _ask_twice("sign")), ("done", _step("done"))], saver)


FAIL = "fail_branch_b"
"""A configurable key: when set, branch `b` of `fan_out_graph` raises."""


class BranchFailed(RuntimeError):
    """What branch `b` raises when the run's config says so."""


def _flaky(state: Log, config: RunnableConfig) -> Log:
    if config["configurable"].get(FAIL):
        raise BranchFailed("b")
    return _step("b")(state)


def fan_out_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """`START -> (a, b in parallel) -> join -> END`: a run is an input checkpoint and
    three super-steps. `b` raises in a run whose config sets `FAIL`."""
    builder: Any = StateGraph(Log)
    builder.add_node("a", _step("a"))
    builder.add_node("b", _flaky)
    builder.add_node("join", _step("join"))
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    # Two edges, not `add_edge(["a", "b"], "join")`: that barrier channel's checkpoint
    # is its live set, which `durability="async"` may serialize after the step's writes
    # changed it (langgraph#8748), so two identical runs store different values.
    builder.add_edge("a", "join")
    builder.add_edge("b", "join")
    builder.add_edge("join", END)
    return builder.compile(checkpointer=saver)


class Memory(TypedDict, total=False):
    memory: Annotated[list[str], operator.add]
    turns: int


class DeltaMemory(TypedDict, total=False):
    memory: Annotated[list[str], DeltaChannel(extend_all, snapshot_frequency=3)]
    turns: int


def _remember(state: Any) -> dict[str, Any]:
    seen = len(state.get("memory", []))
    return {"memory": [f"m{seen}"], "turns": seen + 1}


def memory_graph(saver: BaseCheckpointSaver[Any], flavor: Flavor = "full") -> Any:
    """`START -> pre -> inner -> post -> END` over `FullChat`, where `inner` is a
    `checkpointer=True` subgraph that keeps its memory (namespace `inner`, a DeltaChannel
    for "delta") across turns and reports its length as `turns`. A fork from a root
    checkpoint makes LangGraph load its latest checkpoint before that one."""
    inner = line_graph(DeltaMemory if flavor == "delta" else Memory, [("m", _remember)], True)
    pre, post = (lambda s: {"said": ["pre"]}), (lambda s: {"said": ["post"]})
    return line_graph(FullChat, [("pre", pre), ("inner", inner), ("post", post)], saver)


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


def _twice_interrupted_runs(graph: Any, thread_id: str) -> None:
    """Runs that each stop at two interrupts in turn, each answered by a resume; the
    last run is left at its second interrupt (its head owns the interrupt's write)."""
    for i in range(3):
        graph.invoke(_log(i), thread(thread_id))
        graph.invoke(Command(resume=f"ok {i}"), thread(thread_id))
        if i < 2:
            graph.invoke(Command(resume=f"signed {i}"), thread(thread_id))


def _fan_out_runs(graph: Any, thread_id: str) -> None:
    """Fan-out runs; in the last, `b` raises: the super-step's checkpoint (the head)
    keeps `a`'s write and `b`'s error as pending writes, and `invoke(None)` resumes
    it, running `b` alone."""
    for i in range(3):
        graph.invoke(_log(i), thread(thread_id))
    failing: RunnableConfig = {"configurable": {"thread_id": thread_id, FAIL: True}}
    try:
        graph.invoke(_log(3), failing)
    except BranchFailed:
        pass
    else:  # pragma: no cover - the shape needs the failure
        raise AssertionError("branch b did not fail")


def _pinned_runs(graph: Any, thread_id: str) -> None:
    """Turns, then two runs started from old turn ends by their checkpoint ids (time
    travel): one from turn zero's end, then one from turn two's end, which that first
    run had left off the head line; then a normal turn (from the newest checkpoint)."""
    _chat_turns(graph, thread_id)
    ends = [
        s.config["configurable"]["checkpoint_id"]
        for s in graph.get_state_history(thread(thread_id))
        if not s.next
    ]  # newest first: the ends of turns 3, 2, 1, 0
    graph.invoke(turn(5), thread(thread_id, ends[3]))
    graph.invoke(turn(6), thread(thread_id, ends[1]))
    graph.invoke(turn(7), thread(thread_id))


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
    Shape(
        "multi-interrupt",
        two_interrupts_graph,
        _twice_interrupted_runs,
        Command(resume="late"),
        _log(77),
    ),
    Shape("parallel", fan_out_graph, _fan_out_runs, None, _log(77)),
    Shape("pinned-runs", chat_graph, _pinned_runs, turn(99)),
)


@dataclass
class Twins:
    """The same scenario written on two threads of one saver."""

    graph: Any
    kept_to_twin: dict[str, str]

    @classmethod
    def write(cls, shape: Shape, saver: BaseCheckpointSaver[Any]) -> Twins:
        """Both threads written; again, from scratch, where LangGraph lost a write of one
        of them (`_written_alike`)."""
        graph = shape.graph(saver)
        for _ in range(WRITE_ATTEMPTS):
            shape.write(graph, KEPT)
            shape.write(graph, TWIN)
            kept, twin = history_ids(graph, KEPT), history_ids(graph, TWIN)
            assert len(kept) == len(twin)
            twins = cls(graph, dict(zip(kept, twin, strict=True)))
            if twins._written_alike(shape):
                return twins
            saver.delete_thread(KEPT)
            saver.delete_thread(TWIN)
        raise AssertionError(f"{shape}: LangGraph lost a write in {WRITE_ATTEMPTS} attempts")

    def _written_alike(self, shape: Shape) -> bool:
        """Before any pass the twins load alike, so a difference after one is the pass's.
        Values and `next` always; pending writes are the ones a sync parallel step may
        lose on one thread: where a branch raises, the writes of a branch that finishes
        after the step stopped are dropped ("cannot schedule new futures after
        shutdown", logged by LangGraph's runner), and then the twins differ by a race."""
        for mine, theirs in self.kept_to_twin.items():
            a, b = self.state(KEPT, mine), self.state(TWIN, theirs)
            assert (a.values, a.next) == (b.values, b.next), f"{shape}: twins differ"
            if pending_tasks(a) != pending_tasks(b):
                return False
        return True

    def state(self, thread_id: str, checkpoint_id: str) -> Any:
        return self.graph.get_state(thread(thread_id, checkpoint_id))


WRITE_ATTEMPTS = 5
"""How many times `Twins.write` writes the scenario before it gives up on LangGraph's race."""


def pending_tasks(state: Any) -> list[tuple[Any, ...]]:
    """What a snapshot's tasks show of its pending writes, without ids that differ
    between the twins: each task's node, error, interrupt values and result."""
    return [(t.name, repr(t.error), [i.value for i in t.interrupts], t.result) for t in state.tasks]


def ts_of(twins: Twins, checkpoint_id: str) -> datetime:
    """When the kept thread's checkpoint was written."""
    return datetime.fromisoformat(twins.state(KEPT, checkpoint_id).created_at)


def root_chains(
    deleted: Collection[tuple[str, str]], parents: Mapping[tuple[str, str], str | None]
) -> int:
    """How many chains the deleted root-namespace checkpoints form: those whose parent
    (by `parents`, keyed like `deleted` by (namespace, id)) is not deleted with them.

    A pass deletes past its cap only when nothing else fits, and then one piece
    (`_rules/_cap.py`): one chain of root checkpoints, with the subgraph checkpoints
    written under them, so a pass past its cap has exactly one.
    """
    roots = [key for key in deleted if not key[0]]
    return sum(1 for key in roots if ("", parents[key]) not in deleted)


@dataclass(frozen=True)
class Saved:
    """What `one_piece` reads of a stored checkpoint: its parent's id, the root
    checkpoint it was written under (a subgraph's), and its `source`."""

    parent: str | None
    under: str | None
    source: str | None


def saved_lineage(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[tuple[str, str], Saved]:
    """Every checkpoint of the thread, every namespace, keyed by (namespace, id)."""
    found: dict[tuple[str, str], Saved] = {}
    for saved in saver.list({"configurable": {"thread_id": thread_id}}):
        conf, up, meta = saved.config["configurable"], saved.parent_config, saved.metadata or {}
        found[(conf["checkpoint_ns"], conf["checkpoint_id"])] = Saved(
            up["configurable"]["checkpoint_id"] if up else None,
            (meta.get("parents") or {}).get(""),
            meta.get("source"),
        )
    return found


def one_piece(deleted: Collection[tuple[str, str]], saved: Mapping[tuple[str, str], Saved]) -> bool:
    """Whether what a pass past its cap deleted (`saved`: the thread before it) is one
    piece (`_rules/_cap.py`): one chain of root checkpoints with the subgraph checkpoints
    written under them, or chains none of which could go alone. A chain cannot when a
    subgraph checkpoint written under it continues from, or is continued by, one written
    under another that goes, or is the memory a fork from another's root checkpoint
    loads: the latest of its `checkpointer=True` namespace before that checkpoint's id,
    or its parent's for an `update`/`fork` one."""
    tops: dict[str, str] = {}
    for ns, cid in deleted:
        if not ns:
            top = cid
            while ("", str(saved[("", top)].parent)) in deleted:
                top = str(saved[("", top)].parent)
            tops[cid] = top
    if len(set(tops.values())) <= 1:
        return True
    chain_of = {key: tops.get(str(saved[key].under)) for key in deleted if key[0]}
    spaces = {ns for ns, _ in saved if ns and ":" not in ns.rsplit("|", 1)[-1]}
    ids = {ns: sorted(cid for space, cid in saved if space == ns) for ns in spaces}

    def memory(root: str) -> set[tuple[str, str]]:
        node = saved[("", root)]
        bounds = {root} | ({str(node.parent)} if node.source in ("update", "fork") else set())
        return {
            (ns, max(i for i in ids[ns] if i < b))
            for ns in spaces
            for b in bounds
            if any(i < b for i in ids[ns])
        }

    needed: set[str] = set()
    for key, chain in chain_of.items():
        parent = (key[0], str(saved[key].parent))
        if parent in chain_of and chain_of[parent] != chain:
            needed |= {str(chain), str(chain_of[parent])}
    for root, chain in tops.items():
        needed |= {str(c) for k in memory(root) if (c := chain_of.get(k)) not in (None, chain)}
    return needed >= set(tops.values())
