"""The law under the history rules, on the shapes `test_history_stateful` does not write
(issue #19): a graph that fans out with `Send` and ends each turn at `interrupt()`, so
the head is interrupted most of the time; turns, resumes, forks from every kept turn
and history passes (`history_keep_runs` 0..3, `compact_steps`, capped passes
repeated), on the sync savers and on AsyncSqliteSaver and AsyncPostgresSaver, beside a
twin thread that never had a pass.

After every step: each root checkpoint the thread keeps loads the twin's values, `next`
and tasks (interrupts included), the head goes on alike, an interrupted head keeps its
whole run back to its input, and no parent dangles and no write or blob is orphaned.
Forking from every kept turn (regenerating it from its input checkpoint) ends as on
the twin.

Run longer with, for example::

    RETAINING_SAVER_HISTORY_EXAMPLES=2000 RETAINING_SAVER_HISTORY_STEPS=20 \\
        .venv/bin/pytest tests/law/test_history_stateful_shapes.py
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import pytest
from compaction_kit import root_chains
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from law_kit import pair_new_ids, run_machine
from savers import open_async, open_sync, race_free_writes

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import thread

_SCALE = int(os.environ.get("RETAINING_SAVER_HISTORY_EXAMPLES", "0") or 0)
STEPS = int(os.environ.get("RETAINING_SAVER_HISTORY_STEPS", "0") or 0) or 5
# The default run adds about half a minute to `test_history_stateful`'s; memory and
# SQLite carry that suite's 200 examples each.
EXAMPLES = {"memory": max(20, _SCALE // 5), "sqlite": max(12, _SCALE // 10)}
ASYNC_EXAMPLES = {"sqlite": max(8, _SCALE // 10), "postgres": max(4, _SCALE // 40)}
LATER = datetime.now(UTC) + timedelta(days=1)
_threads = itertools.count()

POLICIES = st.builds(
    RetentionPolicy,
    history_keep_runs=st.sampled_from([None, 0, 1, 2, 3]),
    compact_steps=st.booleans(),
    history_min_age=st.just(timedelta(hours=1)),
    max_delete_per_run=st.sampled_from([None, None, 2, 5]),
).filter(lambda p: p.history_rules)


class Said(TypedDict, total=False):
    said: Annotated[list[str], operator.add]


def _fan_out(state: Said) -> list[Send]:
    seen = len(state.get("said", []))
    return [Send("work", {"said": [f"job {seen}.{i}"]}) for i in range(2)]


def _work(state: Said) -> Said:
    return {"said": [f"done {state['said'][-1]}"]}


def _ask(state: Said) -> Said:
    answer = interrupt(f"approve {len(state.get('said', []))}?")
    return {"said": [f"answer {answer}"]}


def send_interrupt_graph(saver: Any) -> Any:
    """`START -> plan -> (Send: work x 2) -> ask (interrupts) -> END`."""
    builder: Any = StateGraph(Said)
    builder.add_node("plan", lambda s: {"said": ["plan"]})
    builder.add_node("work", _work)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", _fan_out, ["work"])
    builder.add_edge("work", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _tasks(state: Any) -> list[tuple[Any, ...]]:
    return [(t.name, [i.value for i in t.interrupts], t.result) for t in state.tasks]


class ShapesMachine(RuleBasedStateMachine):
    """One kept thread and its twin; `saver` and `loop` (None: sync) set per run."""

    saver: Any
    loop: asyncio.AbstractEventLoop | None

    def __init__(self) -> None:
        super().__init__()
        self.graph = send_interrupt_graph(self.saver)
        self.wrapped = RetainingSaver(self.saver, admission="off")
        n = next(_threads)
        self.kept, self.twin = f"kept-{n}", f"twin-{n}"
        self.to_twin: dict[str, str] = {}
        self.turns = 0
        for _ in range(2):
            self.user_turn()

    # Sync or async, one body

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """`graph.<name>` (or the RetainingSaver's, for `enforce_thread_retention`), or
        its `a`-prefixed twin run on the machine's loop."""
        owner = self.wrapped if name == "enforce_thread_retention" else self.graph
        if self.loop is None:
            return getattr(owner, name)(*args, **kwargs)
        return self._await(getattr(owner, f"a{name}")(*args, **kwargs))

    def _await(self, awaitable: Coroutine[Any, Any, Any]) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(awaitable)

    def _history(self, thread_id: str) -> list[Any]:
        if self.loop is None:
            return list(self.graph.get_state_history(thread(thread_id)))

        async def collect() -> list[Any]:
            return [s async for s in self.graph.aget_state_history(thread(thread_id))]

        return list(self._await(collect()))

    def _head_run(self, thread_id: str) -> list[str]:
        """The head's run, newest first: its chain of parents back to its input."""
        history = self._history(thread_id)
        by_id = {s.config["configurable"]["checkpoint_id"]: s for s in history}
        run: list[str] = []
        snapshot = history[0] if history else None
        while snapshot is not None:
            run.append(snapshot.config["configurable"]["checkpoint_id"])
            parent = (snapshot.parent_config or {}).get("configurable", {})
            if snapshot.metadata.get("source") == "input":
                break
            snapshot = by_id.get(parent.get("checkpoint_id"))
        return run

    def _ids(self, thread_id: str) -> list[str]:
        return sorted(s.config["configurable"]["checkpoint_id"] for s in self._history(thread_id))

    def _both(self, write: Callable[[str], Any]) -> None:
        for thread_id in (self.kept, self.twin):
            write(thread_id)
        pair_new_ids(self.to_twin, self._ids(self.kept), self._ids(self.twin))

    # Operations

    @rule()
    def user_turn(self) -> None:
        """A new turn (the head is often interrupted: the new input starts over)."""
        self.turns += 1
        self._both(lambda t: self._call("invoke", {"said": [f"user {self.turns}"]}, thread(t)))

    @rule()
    def resume(self) -> None:
        if self._call("get_state", thread(self.kept)).next:
            self._both(lambda t: self._call("invoke", Command(resume="yes"), thread(t)))

    @rule()
    def fork_from_every_kept_turn(self) -> None:
        """Regenerate every kept turn from its input checkpoint, on both threads alike:
        each ends at the same interrupt with the same values."""
        inputs = [
            s.config["configurable"]["checkpoint_id"]
            for s in self._history(self.kept)
            if s.metadata.get("source") == "input"
        ]
        for mine in sorted(inputs):
            pins = {self.kept: mine, self.twin: self.to_twin[mine]}
            ends = {}
            for thread_id, pin in pins.items():
                self._call("invoke", None, thread(thread_id, pin))
                state = self._call("get_state", thread(thread_id))
                ends[thread_id] = (state.values, state.next, _tasks(state))
            assert ends[self.kept] == ends[self.twin], mine
            self._both(lambda t: None)

    @rule(policy=POLICIES, repeat=st.integers(1, 3))
    def history_pass(self, policy: RetentionPolicy, repeat: int) -> None:
        for _ in range(repeat):
            parents = self._parents()
            report = self._call("enforce_thread_retention", self.kept, policy, now=LATER)
            cap = policy.max_delete_per_run
            if cap is not None and len(report.deleted) > cap:
                # Past the cap only when nothing fits, and then one piece (`_rules/_cap.py`).
                assert root_chains(report.deleted, parents) == 1

    def _parents(self) -> dict[tuple[str, str], str | None]:
        """Each root checkpoint's parent id (the graph has no subgraph)."""
        return {
            ("", s.config["configurable"]["checkpoint_id"]): (
                s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
            )
            for s in self._history(self.kept)
        }

    # The law

    @invariant()
    def kept_checkpoints_load_like_the_twin(self) -> None:
        for mine in self._ids(self.kept):
            a = self._call("get_state", thread(self.kept, mine))
            b = self._call("get_state", thread(self.twin, self.to_twin[mine]))
            assert (a.values, a.next, _tasks(a)) == (b.values, b.next, _tasks(b)), mine
        head, twin_head = (self._call("get_state", thread(t)) for t in (self.kept, self.twin))
        assert (head.values, head.next, _tasks(head)) == (
            twin_head.values,
            twin_head.next,
            _tasks(twin_head),
        )
        if head.next:  # interrupted: its run is live, kept whole back to its input
            mine = [self.to_twin[i] for i in self._head_run(self.kept)]
            assert mine == self._head_run(self.twin), "an interrupted head lost its run"
        if self.loop is None:
            assert integrity(self.saver, self.kept).clean
        else:
            assert self._await(aintegrity(self.saver, self.kept)).clean


def _check(saver: Any, examples: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
    machine = type("Bound", (ShapesMachine,), {"saver": saver, "loop": loop})
    run_machine(machine, examples, STEPS)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_history_law_send_and_interrupt(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as saver:
        _check(saver, EXAMPLES[kind])


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_history_law_send_and_interrupt_async(kind: str, request: pytest.FixtureRequest) -> None:
    """AsyncSqliteSaver and AsyncPostgresSaver (fewer examples), on one event loop that
    the machine runs each operation on."""
    loop = asyncio.new_event_loop()
    opened: AbstractAsyncContextManager[Any] = open_async(kind, request)
    try:
        saver = loop.run_until_complete(opened.__aenter__())
        try:
            _check(saver, ASYNC_EXAMPLES[kind], loop)
        finally:
            loop.run_until_complete(opened.__aexit__(None, None, None))
    finally:
        loop.close()


def test_the_shapes_are_written() -> None:
    """The graph does what the suite claims: a `Send` fan-out, then an interrupted head."""
    from langgraph.checkpoint.memory import InMemorySaver

    graph = send_interrupt_graph(race_free_writes(InMemorySaver()))
    graph.invoke({"said": ["user 0"]}, thread("t"))
    state = graph.get_state(thread("t"))
    assert state.next == ("ask",)
    assert [i.value for t in state.tasks for i in t.interrupts] == ["approve 4?"]
    assert sum(1 for s in state.values["said"] if s.startswith("done job")) == 2


def test_a_pass_past_its_cap_deletes_one_piece() -> None:
    """A sequence the long profile found: with the head interrupted, nothing of a
    resumed run's stretch fits a cap of 2, so the pass deletes its smallest piece whole
    (4 checkpoints, one chain), as `_rules/_cap.py` says, and the thread still reads
    as the twin."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver = race_free_writes(InMemorySaver())
    machine = type("Bound", (ShapesMachine,), {"saver": saver, "loop": None})()

    def horizon(cap: int | None) -> RetentionPolicy:
        return RetentionPolicy(
            history_keep_runs=0, history_min_age=timedelta(hours=1), max_delete_per_run=cap
        )

    machine.history_pass(horizon(None), 1)
    machine.resume()
    machine.fork_from_every_kept_turn()
    machine.resume()
    machine.history_pass(horizon(5), 1)
    parents = machine._parents()
    report = machine._call("enforce_thread_retention", machine.kept, horizon(2), now=LATER)
    assert len(report.deleted) > 2
    assert root_chains(report.deleted, parents) == 1
    machine.kept_checkpoints_load_like_the_twin()
