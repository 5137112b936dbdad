"""An id the library showed a client keeps working after its checkpoint is reclaimed.

`get_state` shows the stamp's id after a turn; a client keeps it; the next turn
reclaims the stamp. On the reference thread, which never had the stamp, the
client was shown the stamp's parent. Whatever the client does with the id it
holds (read it, resume from it, fork from it) must give what the reference
gives with the parent's id, in this process and in another; and nothing may
become the child of a deleted id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base.id import uuid6
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
from retaining_saver._effects import run
from retaining_saver.backends._base import Mode
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, thread_config
from retaining_saver.testing.views import visible_history, visible_state

RETAINED, REFERENCE = "retained", "reference"


def _at(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}


def _shown(graph: Any, thread_id: str) -> str:
    """The checkpoint id `get_state` shows a client."""
    checkpoint_id: str = graph.get_state(thread_config(thread_id)).config["configurable"][
        "checkpoint_id"
    ]
    return checkpoint_id


def _two_threads(saver: RetainingSaver) -> tuple[Any, str, str]:
    """A turn on both threads, a stamp on the retained one, then a second turn on both
    (which reclaims the stamp); the ids the client was shown after the first turn."""
    graph = build_chat_graph(saver)
    for thread_id in (RETAINED, REFERENCE):
        graph.invoke(chat_turn(0), thread_config(thread_id))
    stamp = write_duration_leaf(saver, RETAINED)
    held = (_shown(graph, RETAINED), _shown(graph, REFERENCE))
    assert held[0] == stamp
    for thread_id in (RETAINED, REFERENCE):
        graph.invoke(chat_turn(1), thread_config(thread_id))
    assert saver.counters.reclaimed == 1
    return graph, *held


def _same(graph: Any, retained: RunnableConfig, reference: RunnableConfig) -> None:
    assert visible_state(graph.get_state(retained)) == visible_state(graph.get_state(reference))


@pytest.mark.parametrize("kind", KINDS)
def test_a_held_id_reads_resumes_and_forks_as_the_reference(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph, stamp, parent = _two_threads(saver)
        assert inner.get_tuple(_at(RETAINED, stamp)) is None, "the stamp was reclaimed"
        _same(graph, _at(RETAINED, stamp), _at(REFERENCE, parent))
        # Fork from the held id: a new turn pinned to it, on both threads.
        graph.invoke(chat_turn(7), _at(RETAINED, stamp))
        graph.invoke(chat_turn(7), _at(REFERENCE, parent))
        _same(graph, thread_config(RETAINED), thread_config(REFERENCE))
        retained = visible_history(graph, thread_config(RETAINED))
        assert retained == visible_history(graph, thread_config(REFERENCE))
        assert integrity(saver, RETAINED).clean


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_another_process_resolves_the_held_id(kind: str, request: pytest.FixtureRequest) -> None:
    """The reclaim is recorded in the deleting transaction; another saver on another
    connection, which reclaimed nothing itself, resolves the held id through the store."""
    with open_sync(kind, request) as inner, open_sync(kind, request) as elsewhere:
        _graph, stamp, parent = _two_threads(RetainingSaver(inner))
        other = RetainingSaver(elsewhere)
        other_graph = build_chat_graph(other)
        _same(other_graph, _at(RETAINED, stamp), _at(REFERENCE, parent))
        other_graph.invoke(chat_turn(7), _at(RETAINED, stamp))
        other_graph.invoke(chat_turn(7), _at(REFERENCE, parent))
        _same(other_graph, thread_config(RETAINED), thread_config(REFERENCE))
        assert integrity(other, RETAINED).clean


@pytest.mark.parametrize("kind", KINDS)
async def test_a_held_id_resolves_async(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        await graph.ainvoke(chat_turn(0), thread_config(RETAINED))
        stamp = await awrite_duration_leaf(saver, RETAINED)
        assert stamp is not None
        await graph.ainvoke(chat_turn(1), thread_config(RETAINED))
        assert saver.counters.reclaimed == 1
        held = await graph.aget_state(_at(RETAINED, stamp))
        await graph.ainvoke(chat_turn(7), _at(RETAINED, stamp))
        state = await graph.aget_state(thread_config(RETAINED))
        assert (await aintegrity(saver, RETAINED)).clean
    assert held.values and held.config["configurable"]["checkpoint_id"] != stamp
    assert [m.content for m in state.values["messages"]][-2:] == [
        "user says 7",
        "echo: user says 7",
    ]


Write = Callable[[RetainingSaver, RunnableConfig], None]


def _put_child(saver: RetainingSaver, at: RunnableConfig) -> None:
    head = saver.get_tuple(at)
    assert head is not None
    # A fresh id: ids are time-ordered, so the child is the newest checkpoint.
    checkpoint = {**head.checkpoint, "id": str(uuid6(clock_seq=-1))}
    saver.put(at, checkpoint, {"source": "update", "step": 9}, {})  # type: ignore[arg-type]


def _put_write(saver: RetainingSaver, at: RunnableConfig) -> None:
    saver.put_writes(at, [("messages", [])], "task-1")


@pytest.mark.parametrize("write", [_put_child, _put_write], ids=["put", "put_writes"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_write_on_a_reclaimed_id_lands_on_its_clone(
    kind: str, write: Write, request: pytest.FixtureRequest
) -> None:
    """A run that started from the stamp before it went (durability="exit") writes later:
    its checkpoint and writes land on the clone, never on the deleted id."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        graph.invoke(chat_turn(0), thread_config(RETAINED))
        stamp = write_duration_leaf(saver, RETAINED)
        assert stamp is not None
        started_on = _at(RETAINED, stamp)
        started_on["configurable"]["checkpoint_ns"] = ""
        result = saver.admit(RETAINED)
        assert result.reclaimed == (stamp,)
        write(saver, started_on)
        assert integrity(saver, RETAINED).clean
        newest = inner.get_tuple(thread_config(RETAINED))
    assert newest is not None
    landed_on = newest.config if write is _put_write else newest.parent_config
    assert landed_on is not None
    assert landed_on["configurable"]["checkpoint_id"] == result.head_id


@pytest.mark.parametrize("kind", KINDS)
def test_a_held_id_expires_with_its_ttl(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, reclaimed_id_ttl=timedelta(milliseconds=1))
        _graph, stamp, _ = _two_threads(saver)
        time.sleep(0.01)
        assert saver.get_tuple(_at(RETAINED, stamp)) is None  # as for any deleted id


@pytest.mark.parametrize("kind", KINDS)
def test_delete_thread_forgets_its_reclaims(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        _, stamp, _ = _two_threads(saver)
        assert saver._backend is not None
        lookup = saver._backend.reclaimed_clone(RETAINED, "", stamp)
        assert run(saver._backend, lookup, Mode.READ) is not None
        saver.delete_thread(RETAINED)
        assert (
            run(saver._backend, saver._backend.reclaimed_clone(RETAINED, "", stamp), Mode.READ)
            is None
        )
        assert saver.get_tuple(_at(RETAINED, stamp)) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_regenerate_after_a_stamp_leaves_no_stamp_behind(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A run pinned to an older turn (regenerate) is admitted too: the stamp on the head,
    which the reference never had, goes; the run's own target is protected."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        ends = {}
        for thread_id in (RETAINED, REFERENCE):
            graph.invoke(chat_turn(0), thread_config(thread_id))
            ends[thread_id] = _shown(graph, thread_id)
            graph.invoke(chat_turn(1), thread_config(thread_id))
        stamp = write_duration_leaf(saver, RETAINED)
        for thread_id in (RETAINED, REFERENCE):
            graph.invoke(chat_turn(9), _at(thread_id, ends[thread_id]))  # regenerate turn 1
        assert saver.counters.reclaimed == 1
        assert inner.get_tuple(_at(RETAINED, str(stamp))) is None
        retained = visible_history(graph, thread_config(RETAINED))
        assert retained == visible_history(graph, thread_config(REFERENCE))
        _same(graph, thread_config(RETAINED), thread_config(REFERENCE))
        assert integrity(saver, RETAINED).clean
