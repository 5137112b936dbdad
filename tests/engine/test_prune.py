"""`prune` on every supported saver: upstream's meaning, with what upstream loses kept.

`prune(strategy="keep_latest")` keeps each namespace's latest checkpoint (a
subgraph call's namespace goes with the root checkpoint it ran from, a
`checkpointer=True` subgraph keeps its latest), as upstream's Postgres prune
does; unlike it, it handles DeltaChannel threads (the values stored whole at
the head with `delta_graph`, else the walk back kept) and keeps a childless
checkpoint's pending writes. Each case runs against an untouched twin thread:
the head loads the same state, and the thread goes on alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from compaction_kit import KEPT, TWIN, history_ids
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import TASKS
from langgraph.types import Command, Send
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver._effects import run
from retaining_saver.backends._base import Mode
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import (
    build_interrupt_graph,
    chat_graph,
    subgraph_chat,
    thread,
    thread_config,
    turn,
)
from retaining_saver.testing.views import visible_history


def _state(graph: Any, thread_id: str) -> tuple[Any, Any]:
    state = graph.get_state(thread(thread_id), subgraphs=True)
    return state.values, state.next


@pytest.mark.parametrize("flavor", ["full", "delta", "delta-with-graph"])
@pytest.mark.parametrize("kind", KINDS)
def test_keep_latest_keeps_the_head_and_the_thread_goes_on(
    kind: str, flavor: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver, "full" if flavor == "full" else "delta")
        for thread_id in (KEPT, TWIN):
            for i in range(5):
                graph.invoke(turn(i), thread(thread_id))
        head = history_ids(graph, KEPT)[0]
        expected = _state(graph, KEPT)
        delta_graph = graph if flavor == "delta-with-graph" else None
        saver.prune([KEPT], strategy="keep_latest", delta_graph=delta_graph)
        kept = history_ids(graph, KEPT)
        assert kept[0] == head and _state(graph, KEPT) == expected
        if flavor != "delta":  # without the graph, a delta value's walk back stays
            assert kept == [head]
        assert integrity(inner, KEPT).clean
        assert len(history_ids(graph, TWIN)) == 5 * 4, "other threads untouched"
        for thread_id in (KEPT, TWIN):
            graph.invoke(turn(9), thread(thread_id))
        assert _state(graph, KEPT) == _state(graph, TWIN)


@pytest.mark.parametrize("persistent", [True, False], ids=["checkpointer-true", "per-call"])
@pytest.mark.parametrize("kind", KINDS)
def test_keep_latest_takes_subgraph_calls_with_their_runs(
    kind: str, persistent: bool, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        graph = subgraph_chat(RetainingSaver(inner), persistent=persistent)
        for thread_id in (KEPT, TWIN):
            for i in range(3):
                graph.invoke(turn(i), thread(thread_id))
        expected = _state(graph, KEPT)
        RetainingSaver(inner).prune([KEPT])
        namespaces: dict[str, int] = {}
        for found in inner.list(thread(KEPT)):
            ns = found.config["configurable"]["checkpoint_ns"]
            namespaces[ns] = namespaces.get(ns, 0) + 1
        assert namespaces == ({"": 1, "inner": 1} if persistent else {"": 1})
        assert _state(graph, KEPT) == expected
        assert integrity(inner, KEPT).clean
        for thread_id in (KEPT, TWIN):
            graph.invoke(turn(9), thread(thread_id))
        assert _state(graph, KEPT) == _state(graph, TWIN)


@pytest.mark.parametrize("kind", KINDS)
def test_keep_latest_keeps_an_interrupted_head_and_its_writes(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The head's pending writes (the interrupt, a finished task's output) stay with it,
    and the run resumes from it as on the twin."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_interrupt_graph(saver)
        for thread_id in (KEPT, TWIN):
            graph.invoke({"topic": "retention"}, thread_config(thread_id))
        before = inner.get_tuple(thread_config(KEPT))
        assert before is not None and before.pending_writes
        saver.prune([KEPT])
        after = inner.get_tuple(thread_config(KEPT))
        assert after is not None and after.pending_writes == before.pending_writes
        assert after.parent_config is None
        results = [graph.invoke(Command(resume="yes"), thread_config(t)) for t in (KEPT, TWIN)]
        assert results[0] == results[1]


@pytest.mark.parametrize("strategy", ["delete", "delete_all"])
@pytest.mark.parametrize("kind", KINDS)
async def test_aprune_on_async_savers(
    kind: str, strategy: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver, "delta")
        for i in range(4):
            await graph.ainvoke(turn(i), thread(KEPT))
        await graph.ainvoke(turn(0), thread(TWIN))
        state = await graph.aget_state(thread(KEPT))
        await saver.aprune([KEPT], delta_graph=graph)
        history = [s async for s in graph.aget_state_history(thread(KEPT))]
        assert len(history) == 1 and history[0].values == state.values
        assert (await aintegrity(inner, KEPT)).clean
        # "delete_all" is what the Agent Server's sweep passes.
        await saver.aprune([KEPT, TWIN], strategy=strategy)
        assert await inner.aget_tuple(thread(KEPT)) is None
        assert await inner.aget_tuple(thread(TWIN)) is None


@pytest.mark.parametrize("strategy", ["delete", "delete_all"])
@pytest.mark.parametrize("kind", KINDS)
def test_delete_deletes_the_threads_and_their_reclaim_records(
    kind: str, strategy: str, request: pytest.FixtureRequest
) -> None:
    """A stamp reclaimed on each thread leaves a record: a read pinned to the stamp's id
    answers its clone. Deleting one thread takes its rows and its record; the other
    thread keeps both."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = chat_graph(saver)
        stamps = {}
        for thread_id in (KEPT, TWIN):
            graph.invoke(turn(0), thread(thread_id))
            stamps[thread_id] = write_duration_leaf(saver, thread_id)
            graph.invoke(turn(1), thread(thread_id))
        assert saver.counters.reclaimed == 2
        assert all(saver.get_tuple(thread(t, stamps[t])) is not None for t in stamps)
        twin_before = visible_history(graph, thread(TWIN))
        saver.prune([KEPT], strategy=strategy)
        assert inner.get_tuple(thread(KEPT)) is None
        assert _record(saver, KEPT, stamps[KEPT]) is None, "the record outlived its thread"
        assert _record(saver, TWIN, stamps[TWIN]) is not None
        assert saver.get_tuple(thread(TWIN, stamps[TWIN])) is not None
        assert visible_history(graph, thread(TWIN)) == twin_before
        assert integrity(inner, TWIN).clean


def _record(saver: RetainingSaver, thread_id: str, checkpoint_id: str | None) -> str | None:
    """The clone the store's reclaim record names for `checkpoint_id`, if any."""
    backend = saver._backend
    assert backend is not None and checkpoint_id is not None
    return run(backend, backend.reclaimed_clone(thread_id, "", checkpoint_id), Mode.READ)


def test_bad_arguments_name_themselves() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = RetainingSaver(InMemorySaver())
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["t"], strategy="keep_oldest")
    with pytest.raises(TypeError, match="thread_ids"):
        saver.prune("t")
    with pytest.raises(TypeError, match="delta_graph"):
        saver.prune(["t"], delta_graph=object())


def _write_pre_v4_thread(saver: Any, thread_id: str, version: int, first: int = 0) -> list[str]:
    """Checkpoints of steps `first` to 3 in format `version`, root first, each put as a
    saver of that time put them; steps 1 and 2 own `__pregel_tasks` writes (a Send
    each), which a pre-v4 read of their child turns into its pending sends."""
    ids: list[str] = []
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(first, 4):
        checkpoint = empty_checkpoint()
        checkpoint["v"] = version
        checkpoint["channel_values"] = {"count": step}
        checkpoint["channel_versions"] = {"count": f"{step + 1:032}.0"}
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(config, checkpoint, metadata, {"count": f"{step + 1:032}.0"})
        ids.append(config["configurable"]["checkpoint_id"])
        if step in (1, 2):
            saver.put_writes(config, [(TASKS, Send("fan", {"step": step}))], f"task-{step}")
    return ids


def _as_read(found: Any) -> tuple[Any, Any, Any]:
    """What a read answers of a checkpoint, but for its id, time and parent link."""
    checkpoint = {k: v for k, v in found.checkpoint.items() if k not in ("id", "ts")}
    return checkpoint, found.metadata, found.pending_writes


@pytest.mark.parametrize("kind", KINDS)
def test_keep_latest_keeps_the_parents_pre_v4_checkpoints_read_their_sends_from(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Before format 4 a checkpoint's pending sends are its parent's `__pregel_tasks`
    writes (the Postgres saver moves them into its read). Each kept one keeps that
    parent; the first checkpoint, whose writes nobody reads, goes, and the second becomes
    the root: each kept one reads as on a reference thread that never had the first. At
    format 4 only the head stays."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        old = _write_pre_v4_thread(inner, "old", 3)
        reference = _write_pre_v4_thread(inner, "reference", 3, first=1)
        new = _write_pre_v4_thread(inner, "new", 4)
        pinned = {i: inner.get_tuple(thread("old", i)) for i in old}
        if kind == "postgres":  # the saver that migrates them: the head reads its sends
            assert pinned[old[3]].checkpoint["channel_values"][TASKS] == [Send("fan", {"step": 2})]
        saver.prune(["old", "new"])
        assert [t.config["configurable"]["checkpoint_id"] for t in inner.list(thread("old"))] == [
            old[3],
            old[2],
            old[1],
        ]
        for checkpoint_id, reference_id in zip(old[1:], reference, strict=True):
            kept = _as_read(inner.get_tuple(thread("old", checkpoint_id)))
            assert kept == _as_read(pinned[checkpoint_id]), checkpoint_id
            assert kept == _as_read(inner.get_tuple(thread("reference", reference_id)))
        assert [t.config["configurable"]["checkpoint_id"] for t in inner.list(thread("new"))] == [
            new[3]
        ]
        assert integrity(inner, "old").clean and integrity(inner, "new").clean
