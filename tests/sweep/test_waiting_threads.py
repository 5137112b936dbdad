"""Threads that wait on a resume stay, whichever way they wait, on every backend; and
the Postgres sweep's one-statement read of a head tells what the saver's read tells."""

from __future__ import annotations

import operator
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from savers import KINDS, open_sync
from sweep_kit import IDLE_FOR, SweepClock, set_clock

from retaining_saver import IdleThreadPolicy, RetainingSaver, RetentionSweeper, SweepOutcome
from retaining_saver._rules._idle import waits_on_resume
from retaining_saver._sweep_thread import _head_facts
from retaining_saver.backends._sweep_stores import store_for
from retaining_saver.testing.graphs import build_interrupt_graph, thread


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SweepClock:
    return set_clock(monkeypatch)


class State(TypedDict):
    said: Annotated[list[str], operator.add]


def _graph(saver: Any, **compile_options: Any) -> Any:
    return (
        StateGraph(State)
        .add_node("reply", lambda s: {"said": ["reply"]})
        .add_node("count", lambda s: {"said": ["count"]})
        .add_edge(START, "reply")
        .add_edge("reply", "count")
        .compile(checkpointer=saver, **compile_options)
    )


WAITING = {
    "before-count": lambda saver: _graph(saver, interrupt_before=["count"]).invoke(
        {"said": ["x"]}, thread("before-count")
    ),
    "after-reply": lambda saver: _graph(saver, interrupt_after=["reply"]).invoke(
        {"said": ["x"]}, thread("after-reply")
    ),
    "interrupt-call": lambda saver: build_interrupt_graph(saver).invoke(
        {"topic": "t"}, thread("interrupt-call")
    ),
}


@pytest.mark.parametrize("kind", KINDS)
def test_waiting_threads_stay_and_finished_ones_go(
    kind: str, request: pytest.FixtureRequest, clock: SweepClock
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        _graph(saver).invoke({"said": ["x"]}, thread("finished"))
        for write in WAITING.values():
            write(saver)
        clock.advance(IDLE_FOR + timedelta(hours=1))
        store = store_for(saver._require_backend())
        assert (store.head_facts("finished") is not None) is (kind == "postgres")
        for thread_id in ("finished", *WAITING):
            # The store's read and the saver's read of the head judge alike.
            fast = _drive(saver, _head_facts(store, thread_id))
            slow = _drive(saver, _head_facts(_Plain(store), thread_id))
            assert fast is not None and slow is not None
            assert (fast.checkpoint_id, fast.pending_writes) == (
                slow.checkpoint_id,
                slow.pending_writes,
            )
            assert waits_on_resume(fast) is waits_on_resume(slow) is (thread_id != "finished")
        done = RetentionSweeper(saver, IdleThreadPolicy(IDLE_FOR), clock=clock).run_pass()
        outcomes = {r.thread_id: r.outcome for r in done.results}
        assert outcomes == {
            "finished": SweepOutcome.DELETED,
            **dict.fromkeys(WAITING, SweepOutcome.INTERRUPTED),
        }


class _Plain:
    """A store without its own head read: the sweep reads heads through the saver."""

    def __init__(self, store: Any) -> None:
        self.backend = store.backend

    def head_facts(self, thread_id: str) -> None:
        return None


def _drive(saver: RetainingSaver, flow: Any) -> Any:
    from retaining_saver._effects import drive

    return drive(flow, saver._performer)
