"""`delete_for_runs` and `copy_thread` on every supported saver, against twin threads.

A thread whose run is deleted is compared with a twin thread that received the same
inputs without that run (and the same duration stamps): what a client sees of each
(the history without its stamps, the state, every pinned read, a fork, the next turn)
must be equal, and no row may point at nothing. A run deleted from the middle of a
thread leaves every remaining checkpoint reading exactly as before. A copied thread
reads, lists, resumes and forks as its source, under the same checkpoint ids.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command
from law_kit import Flavor, checkpoint_id_of, law_graph, listing, state_view, user_turn
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import subgraph_chat, thread, turn

TARGET, TWIN = "target", "twin"
Step = tuple[str, Any]
"""A run's id and its input (a `Command` resumes)."""

STEPS: list[Step] = [
    ("run-a", user_turn("a")),
    ("run-b", user_turn("b", ask=True)),  # interrupts in `review`
    ("run-c", Command(resume="ok")),
    ("run-d", user_turn("d")),
]


def run_config(thread_id: str, run_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The config of a run: LangGraph copies `run_id` into each checkpoint's metadata."""
    config = thread(thread_id, checkpoint_id)
    config["configurable"]["run_id"] = run_id
    return config


def play(saver: RetainingSaver, graph: Any, thread_id: str, steps: list[Step]) -> set[str]:
    """Run `steps` on the thread, each followed by a duration stamp; the stamps' ids."""
    stamps = set()
    for run_id, given in steps:
        graph.invoke(given, run_config(thread_id, run_id))
        stamp = write_duration_leaf(saver, thread_id, run_id)
        if stamp is not None:
            stamps.add(stamp)
    return stamps


def seen(graph: Any, thread_id: str, stamps: set[str]) -> Any:
    """What a client sees of the thread: its history without stamps, and its state."""
    history = listing(graph.get_state_history(thread(thread_id)), stamps)
    return history.entries, state_view(graph.get_state(thread(thread_id)))


def run_ids_of(saver: RetainingSaver, thread_id: str) -> set[Any]:
    return {t.metadata.get("run_id") for t in saver.inner.list(thread(thread_id))}


def assert_twins(graph: Any, saver: RetainingSaver, stamps: dict[str, set[str]]) -> None:
    """The two threads look alike: history, state, every pinned read, a fork, a next turn."""
    assert seen(graph, TARGET, stamps[TARGET]) == seen(graph, TWIN, stamps[TWIN])
    ids = {t: listing(graph.get_state_history(thread(t)), stamps[t]).ids for t in stamps}
    for target_id, twin_id in zip(ids[TARGET], ids[TWIN], strict=True):
        pinned = [
            state_view(graph.get_state(thread(t, i)))
            for t, i in ((TARGET, target_id), (TWIN, twin_id))
        ]
        assert pinned[0] == pinned[1]
    middle = len(ids[TWIN]) // 2
    for t in stamps:
        graph.invoke(user_turn("fork"), run_config(t, "run-fork", ids[t][middle]))
        graph.invoke(user_turn("next"), run_config(t, "run-next"))
    assert seen(graph, TARGET, stamps[TARGET]) == seen(graph, TWIN, stamps[TWIN])
    for t in stamps:
        assert integrity(saver.inner, t).clean


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_the_last_run_leaves_the_thread_as_before_it(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        stamps = {
            TARGET: play(saver, graph, TARGET, STEPS),
            TWIN: play(saver, graph, TWIN, STEPS[:-1]),
        }
        saver.delete_for_runs(["run-d"])
        assert "run-d" not in run_ids_of(saver, TARGET)
        assert integrity(inner, TARGET).clean
        before = seen(graph, TARGET, stamps[TARGET])
        saver.delete_for_runs(["run-d", "run-never"])  # again: nothing left to do
        assert seen(graph, TARGET, stamps[TARGET]) == before
        assert_twins(graph, saver, stamps)


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_regenerated_branch(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """A run regenerated from an earlier checkpoint forks a branch; deleting it leaves the
    thread as if it was never regenerated."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        steps = [("run-a", user_turn("a")), ("run-b", user_turn("b")), ("run-c", user_turn("c"))]
        stamps = {t: play(saver, graph, t, steps) for t in (TARGET, TWIN)}
        base = listing(graph.get_state_history(thread(TARGET)), stamps[TARGET]).ids[3]
        graph.invoke(None, run_config(TARGET, "run-regen", base))
        saver.delete_for_runs(["run-regen"])
        assert "run-regen" not in run_ids_of(saver, TARGET)
        assert_twins(graph, saver, stamps)


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_deleted_from_the_middle_leaves_every_other_checkpoint_as_it_read(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """The runs after it are grafted onto the run before it: each remaining checkpoint
    reads as before (a delta value keeps what it is rebuilt from), nothing dangles."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        play(saver, graph, TARGET, STEPS)
        before = {
            s.config["configurable"]["checkpoint_id"]: state_view(s)
            for s in graph.get_state_history(thread(TARGET))
        }
        saver.delete_for_runs(["run-b"])
        after = {
            s.config["configurable"]["checkpoint_id"]: state_view(s)
            for s in graph.get_state_history(thread(TARGET))
        }
        assert after and set(after) < set(before)
        assert {i: before[i] for i in after} == after
        assert state_view(graph.get_state(thread(TARGET))) == before[max(before)]
        assert integrity(inner, TARGET).clean
        if flavor == "full":
            assert "run-b" not in run_ids_of(saver, TARGET)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_back_a_run_with_a_subgraph(
    kind: str, persistent: bool, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = subgraph_chat(saver, "delta", persistent=persistent)
        for t in (TARGET, TWIN):
            for i in range(3):
                graph.invoke(turn(i), run_config(t, f"run-{i}"))
        graph.invoke(turn(3), run_config(TARGET, "run-3"))
        saver.delete_for_runs(["run-3"])
        for t in (TARGET, TWIN):
            graph.invoke(turn(9), run_config(t, "run-9"))
        states = [graph.get_state(thread(t), subgraphs=True) for t in (TARGET, TWIN)]
        assert states[0].values == states[1].values
        histories = [listing(graph.get_state_history(thread(t))).entries for t in (TARGET, TWIN)]
        assert histories[0] == histories[1]
        assert integrity(inner, TARGET).clean


@pytest.mark.parametrize("kind", KINDS)
async def test_concurrent_async_rollbacks_are_harmless(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The Agent Server calls rollback's delete two or three times, two at once."""
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, "delta")
        stamps: dict[str, set[str]] = {TARGET: set(), TWIN: set()}
        for t, steps in ((TARGET, STEPS), (TWIN, STEPS[:-1])):
            for run_id, given in steps:
                await graph.ainvoke(given, run_config(t, run_id))
                stamp = await awrite_duration_leaf(saver, t, run_id)
                stamps[t] |= {stamp} if stamp else set()
        await asyncio.gather(*(saver.adelete_for_runs(["run-d"]) for _ in range(2)))
        await saver.adelete_for_runs(["run-d"])
        assert (await aintegrity(inner, TARGET)).clean
        views = []
        for t in (TARGET, TWIN):
            history = [s async for s in graph.aget_state_history(thread(t))]
            views.append(
                (listing(history, stamps[t]).entries, state_view(await graph.aget_state(thread(t))))
            )
        assert views[0] == views[1]


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_copy_reads_lists_resumes_and_forks_as_its_source(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = law_graph(saver, flavor)
        stamps = play(saver, graph, TARGET, STEPS[:2])  # ends interrupted in `review`
        write_duration_leaf(saver, TARGET)  # skipped: a pending interrupt
        saver.copy_thread(TARGET, TWIN)
        assert integrity(inner, TWIN).clean
        histories = [list(graph.get_state_history(thread(t))) for t in (TARGET, TWIN)]
        assert [s.config["configurable"]["checkpoint_id"] for s in histories[0]] == [
            s.config["configurable"]["checkpoint_id"] for s in histories[1]
        ]
        for source, copy in zip(*histories, strict=True):
            assert state_view(source) == state_view(copy)
            assert copy.metadata == {
                **source.metadata,
                **({"thread_id": TWIN} if "thread_id" in source.metadata else {}),
            }
            assert checkpoint_id_of(source.parent_config) == checkpoint_id_of(copy.parent_config)
        with pytest.raises(ValueError, match="already has checkpoints"):
            saver.copy_thread(TARGET, TWIN)
        assert_twins(graph, saver, {TARGET: stamps, TWIN: stamps})
        for t in (TARGET, TWIN):
            graph.invoke(Command(resume="later"), run_config(t, "run-resume"))
        assert seen(graph, TARGET, stamps) == seen(graph, TWIN, stamps)


@pytest.mark.parametrize("kind", KINDS)
async def test_acopy_thread_copies_every_namespace(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = subgraph_chat(saver, "delta", persistent=True)
        for i in range(2):
            await graph.ainvoke(turn(i), thread(TARGET))
        await saver.acopy_thread(TARGET, TWIN)
        await saver.acopy_thread("no-such-thread", "empty-copy")
        assert await inner.aget_tuple(thread("empty-copy")) is None
        assert (await aintegrity(inner, TWIN)).clean
        for ns in ("", "inner"):
            ids = [
                [c.checkpoint["id"] async for c in inner.alist(thread_in(t, ns))]
                for t in (TARGET, TWIN)
            ]
            assert ids[0] and ids[0] == ids[1]
        for t in (TARGET, TWIN):
            await graph.ainvoke(turn(5), thread(t))
        states = [await graph.aget_state(thread(t), subgraphs=True) for t in (TARGET, TWIN)]
        assert states[0].values == states[1].values


def thread_in(thread_id: str, checkpoint_ns: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}


def test_bad_arguments_name_themselves() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = RetainingSaver(InMemorySaver())
    with pytest.raises(TypeError, match="run_ids"):
        saver.delete_for_runs("run-a")
    with pytest.raises(TypeError, match="run_ids"):
        saver.delete_for_runs([1])
    with pytest.raises(TypeError, match="target_thread_id"):
        saver.copy_thread("a", "")
    with pytest.raises(ValueError, match="two thread ids"):
        saver.copy_thread("a", "a")
    saver.delete_for_runs([])


@pytest.mark.parametrize("kind", KINDS)
def test_a_copy_names_its_own_thread_in_metadata(kind: str, request: pytest.FixtureRequest) -> None:
    """The Agent Server writes `thread_id` into each checkpoint's metadata, and its own copy
    names the new thread there; so does this one. Other keys are copied as they are."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        parent: RunnableConfig = thread_in(TARGET, "")
        for step in range(2):  # as the server's adapter enriches each put's metadata
            metadata: Any = {"source": "loop", "step": step, "thread_id": TARGET, "graph_id": "g"}
            parent = saver.put(parent, empty_checkpoint(), metadata, {})
        saver.copy_thread(TARGET, TWIN)
        listed = [list(inner.list(thread(t))) for t in (TARGET, TWIN)]  # one at a time
        assert len(listed[0]) == 2
        for source, copy in zip(*listed, strict=True):
            assert source.metadata["thread_id"] == TARGET
            assert copy.metadata == {**source.metadata, "thread_id": TWIN}
