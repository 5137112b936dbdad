"""Rolling back a run that resumed an interrupted thread, against a twin thread.

Thread `target` runs a turn that interrupts in `review` (run-ask), then a run that
resumes it with `Command(resume=...)` (run-resume), which is deleted; thread `twin`
runs only the interrupting turn. LangGraph stores a resume on the checkpoint it
resumes (the `Command`'s writes, then the resumed task's own writes, under the
task's id); after the rollback that checkpoint must hold only what the interrupting
run put there, so that both threads show the same state, next nodes, tasks,
interrupts, pending writes and history, and resume alike.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from law_kit import Flavor, law_graph, listing, state_view, user_turn
from savers import KINDS, open_async, open_sync
from test_thread_ops import STEPS, TARGET, TWIN, assert_twins, play, run_config, run_ids_of

from retaining_saver import RetainingSaver
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import thread
from retaining_saver.testing.views import normalize

ASKING = [("run-a", user_turn("a")), ("run-ask", user_turn("b", ask=True))]
RESUME = ("run-resume", Command(resume="ok"))


def pending(saver: RetainingSaver, thread_id: str) -> Counter[str]:
    """The head's pending writes, as (task name, channel, value): task ids differ."""
    head = saver.get_tuple(thread(thread_id))
    assert head is not None
    return _writes(head)


async def apending(saver: RetainingSaver, thread_id: str) -> Counter[str]:
    head = await saver.aget_tuple(thread(thread_id))
    assert head is not None
    return _writes(head)


def _writes(head: Any) -> Counter[str]:
    return Counter(repr((ch, normalize(v))) for _, ch, v in head.pending_writes or ())


def view(graph: Any, saver: RetainingSaver, thread_id: str) -> Any:
    """History, state (values, next, tasks, interrupts) and the head's pending writes."""
    snapshot = graph.get_state(thread(thread_id))
    results = [(t.name, normalize(t.result)) for t in snapshot.tasks]
    history = listing(graph.get_state_history(thread(thread_id))).entries
    return history, state_view(snapshot), results, pending(saver, thread_id)


async def aview(graph: Any, saver: RetainingSaver, thread_id: str) -> Any:
    snapshot = await graph.aget_state(thread(thread_id))
    results = [(t.name, normalize(t.result)) for t in snapshot.tasks]
    history = listing([s async for s in graph.aget_state_history(thread(thread_id))]).entries
    return history, state_view(snapshot), results, await apending(saver, thread_id)


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_resume_leaves_the_thread_interrupted_as_before(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        for t, steps in ((TARGET, [*ASKING, RESUME]), (TWIN, ASKING)):
            for run_id, given in steps:
                graph.invoke(given, run_config(t, run_id))
        assert view(graph, saver, TARGET) != view(graph, saver, TWIN)
        saver.delete_for_runs(["run-resume"])
        assert view(graph, saver, TARGET) == view(graph, saver, TWIN)
        saver.delete_for_runs(["run-resume"])  # again: nothing left to do
        assert view(graph, saver, TARGET) == view(graph, saver, TWIN)
        assert integrity(inner, TARGET).clean
        for t in (TARGET, TWIN):  # both resume alike, with another answer
            graph.invoke(Command(resume="later"), run_config(t, "run-later"))
        assert view(graph, saver, TARGET) == view(graph, saver, TWIN)


@pytest.mark.parametrize("kind", KINDS)
async def test_async_rolling_back_a_resume(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, "delta")
        for t, steps in ((TARGET, [*ASKING, RESUME]), (TWIN, ASKING)):
            for run_id, given in steps:
                await graph.ainvoke(given, run_config(t, run_id))
        # as the Agent Server rolls back: two calls at once, then one more
        await asyncio.gather(*(saver.adelete_for_runs(["run-resume"]) for _ in range(2)))
        await saver.adelete_for_runs(["run-resume"])
        assert await aview(graph, saver, TARGET) == await aview(graph, saver, TWIN)
        assert (await aintegrity(inner, TARGET)).clean
        for t in (TARGET, TWIN):
            await graph.ainvoke(Command(resume="later"), run_config(t, "run-later"))
        assert await aview(graph, saver, TARGET) == await aview(graph, saver, TWIN)


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_stamped_resume_reads_lists_and_forks_as_the_twin(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """With a duration stamp after each run, as an app writes them: the resume's stamp goes
    with it, and every pinned read, a fork and the next turn match the twin's."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        stamps = {
            TARGET: play(saver, graph, TARGET, STEPS[:3]),
            TWIN: play(saver, graph, TWIN, STEPS[:2]),
        }
        saver.delete_for_runs(["run-c"])
        assert "run-c" not in run_ids_of(saver, TARGET)
        assert pending(saver, TARGET) == pending(saver, TWIN)
        assert_twins(graph, saver, stamps)


class Said(TypedDict, total=False):
    said: Annotated[list[str], operator.add]


def _asking(state: Said) -> dict[str, Any]:
    return {"said": [f"asked {interrupt('a question')}"]}


def _telling(state: Said) -> dict[str, Any]:
    return {"said": ["told"]}


def shape_graph(saver: RetainingSaver, shape: str) -> Any:
    """`parallel`: `asking` interrupts while `telling` finishes, in one step; `subgraph`:
    `asking` interrupts inside a subgraph; `breakpoint`: `interrupt_before` stops the run
    before `telling` runs, and a resume with no input runs it."""
    if shape == "subgraph":
        inner: Any = StateGraph(Said)
        inner.add_node("asking", _asking)
        inner.add_edge(START, "asking")
        inner.add_edge("asking", END)
        nodes = [("outer", inner.compile())]
    else:
        nodes = [("asking", _asking), ("telling", _telling)]
    builder: Any = StateGraph(Said)
    for name, node in nodes:
        builder.add_node(name, node)
    if shape == "breakpoint":
        builder.add_edge(START, "asking")
        builder.add_edge("asking", "telling")
        builder.add_edge("telling", END)
        return builder.compile(checkpointer=saver, interrupt_before=["telling"])
    for name, _ in nodes:
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    return builder.compile(checkpointer=saver)


def subgraph_view(graph: Any, saver: RetainingSaver, thread_id: str) -> Any:
    """`view`, with the subgraphs' state and tasks."""
    snapshot = graph.get_state(thread(thread_id), subgraphs=True)
    tasks = [(t.name, normalize(list(t.interrupts)), t.state is not None) for t in snapshot.tasks]
    return view(graph, saver, thread_id), tasks


def roll_back_against_twin(
    graph: Any, saver: RetainingSaver, given: Any, seen: Callable[..., Any]
) -> None:
    """Run `given` on the target alone (run-resume), roll it back, and hold the target to
    the twin as `seen` shows them: before the next run, and after it on both."""
    graph.invoke(given, run_config(TARGET, "run-resume"))
    assert seen(graph, saver, TARGET) != seen(graph, saver, TWIN)
    saver.delete_for_runs(["run-resume"])
    assert seen(graph, saver, TARGET) == seen(graph, saver, TWIN)
    assert integrity(saver.inner, TARGET).clean
    for t in (TARGET, TWIN):
        graph.invoke(given, run_config(t, "run-later"))
    assert seen(graph, saver, TARGET) == seen(graph, saver, TWIN)


@pytest.mark.parametrize("shape", ["parallel", "subgraph", "breakpoint"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_resume_of_each_shape(
    kind: str, shape: str, request: pytest.FixtureRequest
) -> None:
    """A sibling task's finished writes stay; a subgraph's checkpoint keeps only the
    interrupt; after a static breakpoint the resumed task's writes go."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = shape_graph(saver, shape)
        answer = None if shape == "breakpoint" else Command(resume="yes")
        if shape == "breakpoint":  # `asking` is answered before the breakpoint
            for t in (TARGET, TWIN):
                graph.invoke({"said": []}, run_config(t, "run-1"))
                graph.invoke(Command(resume="sure"), run_config(t, "run-2"))
        else:
            for t in (TARGET, TWIN):
                graph.invoke({"said": []}, run_config(t, "run-1"))
        roll_back_against_twin(graph, saver, answer, subgraph_view)


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_middle_removal_that_keeps_delta_sources_says_so(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """A run removed from the middle of a DeltaChannel thread keeps the checkpoints the
    later runs' values are rebuilt from (no graph is given to store them whole): a
    partial removal, named in a warning each time. A full channel's removal is whole and
    says nothing."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        play(saver, law_graph(saver, flavor), TARGET, STEPS)
        for _ in range(2):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="retaining_saver"):
                saver.delete_for_runs(["run-b"])
            kept = "run-b" in run_ids_of(saver, TARGET)
            assert kept is (flavor == "delta")
            assert ("delta-history" in caplog.text) is kept
            assert (TARGET in caplog.text) is kept


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_run_that_went_on_from_an_edit(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """`update_state` edits the thread as `reply`, then a run goes on from the edit
    (`invoke(None)`, as a human-in-the-loop edit is continued): rolled back, the edit
    waits for `count` again, as on the twin."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        for t in (TARGET, TWIN):
            graph.invoke(user_turn("a"), run_config(t, "run-a"))
            graph.update_state(thread(t), {"said": ["edited"]}, as_node="reply")
        roll_back_against_twin(graph, saver, None, view)
