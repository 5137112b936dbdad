"""Admission cleanup end to end: real StateGraph runs on memory, SQLite and Postgres."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.types import Command
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver, Skip, is_duration_marker
from retaining_saver._admission import node_of
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.checks import aintegrity, integrity, walk
from retaining_saver.testing.graphs import (
    build_chat_graph,
    build_interrupt_graph,
    chat_turn,
    run_read,
    thread_config,
)
from retaining_saver.testing.views import visible_history as history

TURNS = 10
DURATION = {"source": "update", "run_durations": {"run": 1.0}, "run_message_ids": {"run": []}}


def leaf_count(saver: RetainingSaver, thread_id: str) -> int:
    tuples = saver.inner.list(thread_config(thread_id))
    return sum(1 for t in tuples if is_duration_marker(node_of(t)))


def reference_history(graph_factory: Any, saver: Any, thread_id: str) -> list[dict[str, Any]]:
    """The same turns on a thread where only the final leaf was ever written."""
    graph = graph_factory(saver)
    for turn in range(TURNS):
        graph.invoke(chat_turn(turn), thread_config(thread_id))
    write_duration_leaf(saver, thread_id, f"run-{TURNS - 1}")
    return history(graph, thread_config(thread_id))


@pytest.mark.parametrize("kind", KINDS)
def test_ten_turn_chat_keeps_one_leaf_sync(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("chat")
        states = []
        for turn in range(TURNS):
            graph.invoke(chat_turn(turn), config)
            states.append(graph.get_state(config).values)
            assert write_duration_leaf(saver, "chat", f"run-{turn}") is not None
            assert leaf_count(saver, "chat") == 1
        assert saver.counters.reclaimed == TURNS - 1
        expected = reference_history(build_chat_graph, inner, "reference")
        assert history(graph, config) == expected
        assert graph.get_state(config).values["turns"] == TURNS
        assert integrity(saver, "chat").clean
        for snapshot in graph.get_state_history(config):
            assert graph.get_state(snapshot.config).values == snapshot.values
            assert list(walk(saver, snapshot.config))
        turn3 = next(
            s for s in graph.get_state_history(config) if s.values.get("turns") == 3 and not s.next
        )
        branched = graph.invoke(chat_turn(99), turn3.config)
        assert branched["turns"] == 4
        assert integrity(saver, "chat").clean


@pytest.mark.parametrize("kind", KINDS)
async def test_ten_turn_chat_keeps_one_leaf_async(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("chat")
        for turn in range(TURNS):
            await graph.ainvoke(chat_turn(turn), config)
            assert await awrite_duration_leaf(saver, "chat", f"run-{turn}") is not None
        assert saver.counters.reclaimed == TURNS - 1
        listed = [t async for t in inner.alist(config)]
        assert sum(1 for t in listed if is_duration_marker(node_of(t))) == 1
        state = await graph.aget_state(config)
        assert state.values["turns"] == TURNS
        assert (await aintegrity(saver, "chat")).clean
        async for snapshot in graph.aget_state_history(config):
            assert (await graph.aget_state(snapshot.config)).values == snapshot.values


@pytest.mark.parametrize("kind", KINDS)
def test_reads_while_idle_never_clean_up(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("idle")
        graph.invoke(chat_turn(0), config)
        leaf = write_duration_leaf(saver, "idle")
        graph.get_state(config)
        list(graph.get_state_history(config))
        saver.get_tuple(config)
        assert graph.get_state(config).config["configurable"]["checkpoint_id"] == leaf
        assert saver.counters.attempted == 1  # the first run only


@pytest.mark.parametrize("kind", KINDS)
def test_run_pinned_to_the_leaf_starts_from_its_clone(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The leaf clones its parent, so a run pinned to it is a run pinned to the parent:
    the leaf goes, its id resolves to the parent, and the run forks from there. A
    protected leaf stays (the next test's shape)."""
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("pinned")
        graph.invoke(chat_turn(0), config)
        parent = inner.get_tuple(config)
        leaf = write_duration_leaf(saver, "pinned")
        assert leaf is not None and parent is not None
        pinned = {"configurable": {"thread_id": "pinned", "checkpoint_id": leaf}}
        graph.invoke(chat_turn(1), pinned)
        assert saver.counters.reclaimed == 1
        assert inner.get_tuple(pinned) is None
        answer = saver.get_tuple(pinned)
        assert answer is not None and answer.checkpoint["id"] == parent.checkpoint["id"]
        assert integrity(saver, "pinned").clean
        second = write_duration_leaf(inner, "pinned")
        assert second is not None
        kept = RetainingSaver(inner, protect_checkpoint_ids=[second])
        at_second = {"configurable": {"thread_id": "pinned", "checkpoint_id": second}}
        build_chat_graph(kept).invoke(chat_turn(2), at_second)
        assert kept.counters.reclaimed == 0
        assert inner.get_tuple(at_second) is not None


@pytest.mark.parametrize("kind", KINDS)
def test_leaf_with_pending_write_is_kept(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("pending")
        graph.invoke(chat_turn(0), config)
        leaf = write_duration_leaf(saver, "pending")
        leaf_config = {
            "configurable": {"thread_id": "pending", "checkpoint_ns": "", "checkpoint_id": leaf}
        }
        inner.put_writes(leaf_config, [("turns", 41)], task_id="in-flight")
        result = saver.admit("pending")
        assert result.skipped == Skip.OWNS_WRITES
        assert result.reclaimed == ()
        assert inner.get_tuple(leaf_config) is not None


@pytest.mark.parametrize("kind", KINDS)
def test_update_state_checkpoint_is_not_a_leaf(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("update")
        graph.invoke(chat_turn(0), config)
        graph.update_state(config, {"summary": "retitled"})
        head = saver.get_tuple(config)
        assert head is not None
        graph.invoke(chat_turn(1), config)
        assert inner.get_tuple(head.config) is not None
        assert saver.counters.reclaimed == 0


@pytest.mark.parametrize("kind", KINDS)
def test_duration_link_is_kept(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        bare_graph = build_chat_graph(inner)
        config = thread_config("link")
        bare_graph.invoke(chat_turn(0), config)
        link = write_duration_leaf(inner, "link")
        bare_graph.invoke(chat_turn(1), config)  # forks from the leaf: now a link
        saver = RetainingSaver(inner)
        build_chat_graph(saver).invoke(chat_turn(2), config)
        link_config = {
            "configurable": {"thread_id": "link", "checkpoint_ns": "", "checkpoint_id": link}
        }
        assert inner.get_tuple(link_config) is not None
        assert saver.counters.reclaimed == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_leaf_kept_for_its_parent_says_why(kind: str, request: pytest.FixtureRequest) -> None:
    """A head the rules would take but for its parent is kept, the parent named as the
    reason, by an admission read and by `admit` alike: a parent with other state, a
    parent row that is gone, and no parent at all (the thread's first checkpoint)."""
    with open_sync(kind, request) as inner:
        graph = build_chat_graph(inner)
        graph.invoke(chat_turn(0), thread_config("root"))
        first = list(inner.list(thread_config("root")))[-1]
        assert first.parent_config is None
        first_config = {"configurable": {"thread_id": "first", "checkpoint_ns": ""}}
        inner.put(first_config, first.checkpoint, {**first.metadata, **DURATION}, {})  # type: ignore[arg-type]
        graph.invoke(chat_turn(0), thread_config("differs"))
        graph.invoke(chat_turn(0), thread_config("orphan"))
        leaf_id = write_duration_leaf(inner, "orphan")
        leaf = inner.get_tuple(thread_config("orphan"))
        assert leaf is not None and leaf.checkpoint["id"] == leaf_id
        orphan = {**leaf.checkpoint, "id": str(uuid6(clock_seq=-1))}
        missing_parent = {"configurable": {**thread_config("orphan")["configurable"]}}
        missing_parent["configurable"].update(checkpoint_ns="", checkpoint_id="0-no-such-row")
        inner.put(missing_parent, orphan, leaf.metadata, {})  # type: ignore[arg-type]
        # Any head is marked: the run's own head differs from its parent.
        differs = RetainingSaver(inner, is_reclaimable_leaf=lambda node: True)
        for saver, thread_id, skip in (
            (differs, "differs", Skip.PARENT_STATE_DIFFERS),
            (RetainingSaver(inner), "orphan", Skip.MISSING_PARENT),
            (RetainingSaver(inner), "first", Skip.MISSING_PARENT),
        ):
            head = inner.get_tuple(thread_config(thread_id))
            assert head is not None
            assert saver.admit(thread_id).skipped is skip
            read = saver.get_tuple(run_read(thread_id))
            assert read is not None and read.checkpoint == head.checkpoint
            assert saver.counters.skipped == {skip.value: 2}
            assert saver.counters.reclaimed == 0


@pytest.mark.parametrize("way", ["admission-read", "admit"])
@pytest.mark.parametrize("kind", KINDS)
def test_leaves_another_worker_took_first_are_not_handed_out(
    kind: str, way: str, request: pytest.FixtureRequest
) -> None:
    """Stacked leaves L2 on L1 on the run's head R. Worker B reads L2; before its take,
    worker A takes L2 and L1. B's take finds neither the leaf nor its parent: B must not
    call the parent missing and start the run from L2, but read the head again, R."""
    with open_sync(kind, request) as inner:
        build_chat_graph(inner).invoke(chat_turn(0), thread_config("stack"))
        run_head = inner.get_tuple(thread_config("stack"))
        assert run_head is not None
        lower = write_duration_leaf(inner, "stack", "r1")
        upper = write_duration_leaf(inner, "stack", "r2")
        first = RetainingSaver(inner)
        second = RetainingSaver(inner, retry_unpinned_reads=False)  # no rescue by a re-read
        assert second._backend is not None
        won = []
        take = second._backend.reclaim_leaf

        def first_wins_meanwhile(*args: Any, **kwargs: Any) -> Any:
            if not won:
                won.append(first.admit("stack"))
            return take(*args, **kwargs)

        second._backend.reclaim_leaf = first_wins_meanwhile  # type: ignore[method-assign]
        if way == "admit":
            assert second.admit("stack").head_id == run_head.checkpoint["id"]
        else:
            read = second.get_tuple(run_read("stack"))
            assert read is not None and read.checkpoint == run_head.checkpoint
        # On Postgres the admission read took L2 as it read the head, before any round:
        # A wins the second round, L1.
        one_round = way == "admission-read" and second._one_round is not None
        assert won[0].reclaimed == ((lower,) if one_round else (upper, lower))
        assert second.counters.reclaimed == int(one_round)
        assert second.counters.skipped == {Skip.PRECONDITION_CHANGED.value: 1}


@pytest.mark.parametrize("kind", KINDS)
def test_interrupt_then_resume_with_leaf(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as wrapped_inner, open_sync("memory", request) as bare:
        results = []
        for saver in (RetainingSaver(wrapped_inner), bare):
            graph = build_interrupt_graph(saver)
            config = thread_config("review")
            graph.invoke({"topic": "retention"}, config)
            # The app stamps the interrupted run too (DeerFlow skips it only when
            # the head carries the interrupt write itself).
            write_duration_leaf(saver, "review")
            results.append(graph.invoke(Command(resume="approved"), config))
        assert results[0] == results[1]
        assert results[0].get("published")


@pytest.mark.parametrize("kind", KINDS)
def test_explicit_admission_only_cleans_in_admit(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, admission="explicit")
        graph = build_chat_graph(saver)
        config = thread_config("explicit")
        graph.invoke(chat_turn(0), config)
        leaf = write_duration_leaf(saver, "explicit")
        graph.invoke(chat_turn(1), config)
        assert saver.counters.attempted == 0
        newer = write_duration_leaf(saver, "explicit")
        result = saver.admit("explicit")
        assert result.reclaimed == (newer,)
        assert result.head_id is not None and result.head_id != newer
        assert leaf != newer


def test_admission_off_never_cleans(request: pytest.FixtureRequest) -> None:
    with open_sync("memory", request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = build_chat_graph(saver)
        config = thread_config("off")
        graph.invoke(chat_turn(0), config)
        write_duration_leaf(saver, "off")
        graph.invoke(chat_turn(1), config)
        assert saver.admit("off").skipped == Skip.CLEANUP_DISABLED
        assert leaf_count(saver, "off") == 1
        assert not saver.cleanup_enabled
