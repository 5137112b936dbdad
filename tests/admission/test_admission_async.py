"""Admission on the async savers: what must leave the leaf, interrupts, read races."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command
from savers import KINDS, open_async

from retaining_saver import RetainingSaver, Skip
from retaining_saver._effects import arun
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity, awalk
from retaining_saver.testing.graphs import (
    build_chat_graph,
    build_interrupt_graph,
    chat_turn,
    thread,
    thread_config,
)


@pytest.mark.parametrize("kind", KINDS)
async def test_idle_reads_leave_the_leaf_and_a_run_pinned_to_it_starts_from_its_clone(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("idle")
        await graph.ainvoke(chat_turn(0), config)
        leaf = await awrite_duration_leaf(saver, "idle")
        assert leaf is not None
        await graph.aget_state(config)
        _ = [s async for s in graph.aget_state_history(config)]
        assert await inner.aget_tuple(thread("idle", leaf)) is not None
        assert saver.counters.reclaimed == 0
        await graph.ainvoke(chat_turn(1), thread("idle", leaf))  # pinned to the leaf
        assert await inner.aget_tuple(thread("idle", leaf)) is None
        assert saver.counters.reclaimed == 1
        clone = await saver.aget_tuple(thread("idle", leaf))
        assert clone is not None
        chain = [t.checkpoint["id"] for t in await awalk(inner, config)]
        assert clone.checkpoint["id"] in chain and leaf not in chain  # forked from the clone
        assert (await aintegrity(saver, "idle")).clean


@pytest.mark.parametrize("kind", KINDS)
async def test_pending_write_and_update_state_leave_it(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner)
        graph = build_chat_graph(saver)
        config = thread_config("keep")
        await graph.ainvoke(chat_turn(0), config)
        leaf = await awrite_duration_leaf(saver, "keep")
        await inner.aput_writes(thread("keep", leaf), [("turns", 5)], task_id="in-flight")
        assert (await saver.aadmit("keep")).skipped == Skip.OWNS_WRITES
        await graph.aupdate_state(config, {"summary": "retitled"})
        assert (await saver.aadmit("keep")).skipped == Skip.NOT_A_DURATION_LEAF
        assert (await aintegrity(saver, "keep")).clean


@pytest.mark.parametrize("kind", KINDS)
async def test_interrupt_resume_with_leaf_async(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as wrapped_inner, open_async("memory", request) as bare:
        results = []
        for saver in (RetainingSaver(wrapped_inner), bare):
            graph = build_interrupt_graph(saver)
            config = thread_config("review")
            await graph.ainvoke({"topic": "retention"}, config)
            await awrite_duration_leaf(saver, "review")
            results.append(await graph.ainvoke(Command(resume="approved"), config))
        assert results[0] == results[1] and results[0].get("published")


class _Racing:
    """Deletes the resolved target right after the inner read returns it, once."""

    def __init__(self, inner: Any, saver: RetainingSaver) -> None:
        self.armed = False
        original = inner.aget_tuple

        async def racing(config: Any) -> Any:
            found = await original(config)
            if self.armed and found and not config["configurable"].get("checkpoint_id"):
                self.armed = False
                backend = saver._backend
                assert backend is not None
                op = backend.delete_checkpoint("race", "", found.checkpoint["id"])
                await arun(backend, op)
            return found

        inner.aget_tuple = racing


@pytest.mark.parametrize("kind", KINDS)
async def test_read_racing_a_reclaim_is_retried(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = build_chat_graph(inner)
        await graph.ainvoke(chat_turn(0), thread_config("race"))
        head = await inner.aget_tuple(thread_config("race"))
        leaf = await awrite_duration_leaf(inner, "race")
        race = _Racing(inner, saver)
        race.armed = True
        found = await saver.aget_tuple(thread_config("race"))
        assert found is not None and head is not None and leaf is not None
        assert found.checkpoint["id"] == head.checkpoint["id"]
        assert found.checkpoint["channel_values"] == head.checkpoint["channel_values"]
        assert await saver.aget_tuple(thread("race", leaf)) is None  # pinned: never moves
