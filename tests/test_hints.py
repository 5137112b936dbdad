"""Leaf hints: the duration leaf this process stamped, taken as the next head is read.

A hint is a lead, never a proof: the rules judge it and the statement re-checks
every precondition. These tests show what a hint remembers and forgets, where
it exists at all, and that a hint gone stale (another process wrote to the
thread since) leaves the run exactly where the saver's own read would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from graphs import build_chat_graph, chat_turn, run_read, thread_config
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from savers import open_async, open_sync
from spies import Recorder

from retaining_saver import RetainingSaver, Skip
from retaining_saver._admission import RUNTIME_KEY
from retaining_saver._hints import LeafHints
from retaining_saver._rules import RetentionPolicy
from retaining_saver.testing import awrite_duration_leaf, write_duration_leaf
from retaining_saver.testing.checks import aintegrity


def _at(thread_id: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {**thread_config(thread_id)["configurable"], "checkpoint_id": checkpoint_id}
    }


STAMP = {"source": "update", "step": 3, "run_durations": {"run": 1.0}, "parents": {}}
LOOP = {"source": "loop", "step": 4, "parents": {}}


def _put(
    hints: LeafHints, thread_id: str, metadata: dict[str, Any], ns: str = "", parent: str = "p"
) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"said": "00002"}
    checkpoint["versions_seen"] = {"reply": {"said": "00001"}}
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent},
        "metadata": {"user": "ada"},
    }
    hints.note(config, checkpoint, metadata)
    return checkpoint["id"]


def test_a_stamp_is_remembered_as_the_saver_will_store_it() -> None:
    hints = LeafHints(RetentionPolicy())
    leaf_id = _put(hints, "t", {**STAMP, "writes": {"x": 1}})
    leaf = hints.take("t")
    assert leaf is not None
    assert (leaf.checkpoint_id, leaf.parent_id, leaf.checkpoint_ns) == (leaf_id, "p", "")
    assert leaf.channel_versions == {"said": "00002"}
    assert leaf.versions_seen == {"reply": {"said": "00001"}}
    assert leaf.metadata["user"] == "ada" and "writes" not in leaf.metadata
    assert hints.take("t") is None  # one admission at most


def test_any_later_root_put_forgets_the_stamp_and_a_subgraph_put_does_not() -> None:
    hints = LeafHints(RetentionPolicy())
    _put(hints, "t", STAMP)
    _put(hints, "t", LOOP, ns="child:1")
    assert hints.take("t") is not None
    _put(hints, "t", STAMP)
    _put(hints, "t", LOOP)
    assert hints.take("t") is None


def test_a_put_that_reads_as_no_leaf_forgets_the_hint_and_never_raises() -> None:
    hints = LeafHints(RetentionPolicy())
    _put(hints, "t", STAMP)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    hints.note(config, {"id": "odd"}, STAMP)  # type: ignore[typeddict-item]
    assert hints.take("t") is None


def test_hints_are_bounded() -> None:
    hints = LeafHints(RetentionPolicy(), size=2)
    for thread_id in ("a", "b", "c"):
        _put(hints, thread_id, STAMP)
    assert len(hints) == 2
    assert hints.take("a") is None and hints.take("c") is not None


def test_hints_exist_only_where_a_backend_takes_and_reads_in_one_round(
    request: pytest.FixtureRequest,
) -> None:
    assert RetainingSaver(InMemorySaver()).hints is None
    with open_sync("sqlite", request) as sqlite_saver:
        assert RetainingSaver(sqlite_saver).hints is None
    with open_sync("postgres", request) as postgres_saver:
        assert RetainingSaver(postgres_saver).hints is not None
        assert RetainingSaver(postgres_saver, admission="explicit").hints is None


def _stale_by_a_write(inner: Any, leaf: dict[str, Any]) -> None:
    inner.put_writes({"configurable": leaf}, [("said", "late")], "late-task")


def _stale_by_another_run(inner: Any, leaf: dict[str, Any]) -> None:
    build_chat_graph(inner).invoke(chat_turn(1), thread_config("h"))


def _stale_by_a_protected_id(inner: Any, leaf: dict[str, Any]) -> None:
    pass  # the saver below protects the leaf's id


def _stale_by_an_unmarked_rewrite(inner: Any, leaf: dict[str, Any]) -> None:
    stored = inner.get_tuple({"configurable": leaf})
    inner.put(stored.parent_config, stored.checkpoint, {"source": "loop", "step": 9}, {})


# How the hint went stale; why the leaf stays; whether the one-round take is tried.
STALE = {
    "write": (_stale_by_a_write, Skip.OWNS_WRITES, True),
    "another-run": (_stale_by_another_run, Skip.NOT_MARKED, True),
    "unmarked-rewrite": (_stale_by_an_unmarked_rewrite, Skip.NOT_MARKED, True),
    "protected": (_stale_by_a_protected_id, Skip.PROTECTED, False),
}


@pytest.mark.parametrize("case", sorted(STALE))
def test_a_stale_hint_leaves_the_run_where_the_bare_read_would(
    case: str, request: pytest.FixtureRequest
) -> None:
    change, reason, tried = STALE[case]
    with open_sync("postgres", request) as inner:
        plain = RetainingSaver(inner)
        build_chat_graph(plain).invoke(chat_turn(0), thread_config("h"))
        leaf_id = write_duration_leaf(plain, "h")
        assert leaf_id is not None
        protect = [leaf_id] if case == "protected" else []
        saver = RetainingSaver(inner, protect_checkpoint_ids=protect)
        saver.hints = plain.hints  # the stamp went through this process
        leaf = {"thread_id": "h", "checkpoint_ns": "", "checkpoint_id": leaf_id}
        change(inner, leaf)
        expected = inner.get_tuple(thread_config("h"))
        assert expected is not None
        runtime = run_read("h")
        takes = Recorder(saver.backend, ["reclaim_and_read"])
        answer = saver.get_tuple(runtime)
        assert takes.count("reclaim_and_read") == int(tried)
        assert answer is not None
        assert (answer.config, answer.checkpoint) == (expected.config, expected.checkpoint)
        assert answer.pending_writes == expected.pending_writes
        assert saver.counters.reclaimed == 0
        assert saver.counters.skipped == {reason.value: 1}
        assert inner.get_tuple({"configurable": leaf}) is not None


async def test_async_runs_take_each_stamp_in_one_round(request: pytest.FixtureRequest) -> None:
    """Ten turns, each stamped through the saver: each admission takes the last stamp."""
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        reads = Recorder(inner, ["aget_tuple"])
        ways = Recorder(saver.backend, ["head_row", "reclaim_and_read"])
        graph = build_chat_graph(saver)
        for turn in range(10):
            state = await graph.ainvoke(chat_turn(turn), thread_config("ten"))
            await awrite_duration_leaf(saver, "ten")
        assert state["turns"] == 10
        assert saver.counters.reclaimed == 9
        # Only the first run, with no stamp yet, read the head before taking.
        assert (ways.count("head_row"), ways.count("reclaim_and_read")) == (1, 9)
        admission_reads = [c for _, c in reads.calls if RUNTIME_KEY in c["configurable"]]
        assert admission_reads == []


def test_a_pre_v4_head_after_the_take_is_read_through_the_saver(
    request: pytest.FixtureRequest,
) -> None:
    """Only the saver migrates a pre-v4 checkpoint's pending sends: the row is not built."""
    with open_sync("postgres", request) as inner:
        saver = RetainingSaver(inner)
        config: RunnableConfig = {"configurable": {"thread_id": "old", "checkpoint_ns": ""}}
        for step in range(2):
            checkpoint = {**empty_checkpoint(), "v": 1}
            config = inner.put(config, checkpoint, {"source": "loop", "step": step}, {})
        write_duration_leaf(saver, "old")
        runtime = run_read("old")
        spies = Recorder(saver.backend, ["reclaim_and_read"])
        reads = Recorder(inner, ["get_tuple"])
        answer = saver.get_tuple(runtime)
        assert (spies.count("reclaim_and_read"), reads.count("get_tuple")) == (1, 1)
        assert saver.counters.reclaimed == 1
        expected = inner.get_tuple(thread_config("old"))
        assert answer is not None and expected is not None
        assert (answer.config, answer.checkpoint) == (expected.config, expected.checkpoint)
        assert answer.checkpoint["id"] == config["configurable"]["checkpoint_id"]


async def test_a_hinted_take_racing_a_read_first_take_deletes_once(pg_dsn: str) -> None:
    """Two workers on their own connections admit the same thread at once, one with the
    stamp's hint (one round) and one without (read, then take): one delete, no failure,
    and both runs start from the stamp's parent."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    rounds = 30
    async with (
        AsyncPostgresSaver.from_conn_string(pg_dsn) as first,
        AsyncPostgresSaver.from_conn_string(pg_dsn) as second,
    ):
        await first.setup()
        stamping, other = RetainingSaver(first), RetainingSaver(second)
        await build_chat_graph(stamping).ainvoke(chat_turn(0), thread_config("race"))
        parent = await first.aget_tuple(thread_config("race"))
        assert parent is not None
        parent_id = parent.checkpoint["id"]
        for _ in range(rounds):
            leaf_id = await awrite_duration_leaf(stamping, "race")
            assert leaf_id is not None and stamping.hints is not None
            reads = (saver.aget_tuple(run_read("race")) for saver in (stamping, other))
            answers = await asyncio.gather(*reads)
            assert [a.checkpoint["id"] if a else None for a in answers] == [parent_id] * 2
            assert await first.aget_tuple(_at("race", leaf_id)) is None
        counters = [stamping.counters, other.counters]
        assert sum(c.reclaimed for c in counters) == rounds
        assert sum(c.failed for c in counters) == 0
        assert (await aintegrity(first, "race")).clean
