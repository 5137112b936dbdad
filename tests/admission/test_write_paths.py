"""A run's writes: a put whose own metadata rules a stamp out builds no stored metadata
(`_stamps`); a write that keeps a stamp reclaims it first, and a resume's first write
records its ledger entry once (`_writes`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retaining_saver import RetainingSaver, RetentionPolicy, _stamps
from retaining_saver._stamps import OwnStamps
from retaining_saver.testing import awrite_duration_leaf
from retaining_saver.testing.checks import aintegrity
from retaining_saver.testing.graphs import (
    build_chat_graph,
    build_interrupt_graph,
    chat_turn,
    thread,
    thread_config,
)

FLOWS = ("_put_landed", "_writes_landed")


def counting_flows(saver: RetainingSaver) -> Counter[str]:
    """How many times each write flow of `saver` is started, from now on."""
    started: Counter[str] = Counter()

    def counted(name: str, flow: Callable[..., Any]) -> Callable[..., Any]:
        def start(*args: Any) -> Any:
            started[name] += 1
            return flow(*args)

        return start

    for name in FLOWS:
        setattr(saver, name, counted(name, getattr(saver, name)))
    return started


async def test_a_runs_puts_build_no_stored_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    saver = RetainingSaver(InMemorySaver())
    graph = build_chat_graph(saver)
    built: list[Any] = []
    stored = _stamps.get_serializable_checkpoint_metadata
    monkeypatch.setattr(
        _stamps,
        "get_serializable_checkpoint_metadata",
        lambda *args: built.append(args) or stored(*args),
    )
    for turn in range(3):
        await graph.ainvoke(chat_turn(turn), thread_config("plain"))
    assert built == []  # no put of a run is a stamp: its own `source` says so
    assert len([t async for t in saver.alist(thread_config("plain"))]) == 3 * 4


async def test_a_write_that_keeps_a_stamp_reclaims_it_first() -> None:
    saver = RetainingSaver(InMemorySaver())
    graph = build_chat_graph(saver)
    await graph.ainvoke(chat_turn(0), thread_config("stamped"))
    leaf = await awrite_duration_leaf(saver, "stamped")
    assert leaf is not None
    started = counting_flows(saver)
    await graph.aupdate_state(thread_config("stamped"), {"summary": "retitled"})
    assert started["_put_landed"] == 1  # the stamp is taken first, in the put's flow
    assert await saver.inner.aget_tuple(thread("stamped", leaf)) is None
    assert saver.counters.reclaimed == 1
    assert (await aintegrity(saver, "stamped")).clean


def _run(thread_id: str, run_id: str) -> RunnableConfig:
    config = thread_config(thread_id)
    config["configurable"]["run_id"] = run_id  # a run removal names it
    return config


async def test_a_resumes_first_write_runs_its_flow() -> None:
    saver = RetainingSaver(InMemorySaver())
    graph = build_interrupt_graph(saver)
    await graph.ainvoke({"topic": "retention"}, _run("review", "asked"))
    started = counting_flows(saver)
    noted = saver._resumes.noted
    resumes: list[Any] = []
    saver._resumes.noted = lambda *args: resumes.append(args) or noted(*args)  # type: ignore[method-assign]
    done = await graph.ainvoke(Command(resume="approved"), _run("review", "answered"))
    assert done.get("published")
    assert started["_writes_landed"] >= 1
    assert [resume[1][2] for resume in resumes] == ["answered"]  # its entry, recorded once
    assert (await aintegrity(saver, "review")).clean


def _put(stamps: OwnStamps, metadata: dict[str, Any], config_metadata: dict[str, Any]) -> None:
    config: RunnableConfig = {
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "p"},
        "metadata": config_metadata,
    }
    stamps.remember(config, empty_checkpoint(), metadata)


@pytest.mark.parametrize(
    ("metadata", "config_metadata"),
    [
        ({"source": "update", "run_durations": {"r": 1.0}}, {}),
        ({"source": "up\x00date", "run_durations": {"r": 1.0}}, {}),  # stored without NULs
        ({"run_durations": {"r": 1.0}}, {"source": "update"}),  # the config's source
        ({"source": "update"}, {"run_durations": "1.0"}),  # the config's marker key
    ],
)
def test_a_put_stored_as_a_stamp_is_remembered(
    metadata: dict[str, Any], config_metadata: dict[str, Any]
) -> None:
    stamps = OwnStamps(RetentionPolicy())
    _put(stamps, metadata, config_metadata)
    assert stamps.peek("t") is not None


@pytest.mark.parametrize(
    ("metadata", "config_metadata"),
    [
        ({"source": "loop", "run_durations": {"r": 1.0}}, {"source": "update"}),
        ({"source": None, "run_durations": {"r": 1.0}}, {"source": "update"}),
    ],
)
def test_a_put_not_stored_as_a_stamp_is_not(
    metadata: dict[str, Any], config_metadata: dict[str, Any]
) -> None:
    stamps = OwnStamps(RetentionPolicy())
    _put(stamps, {"source": "update", "run_durations": {"r": 1.0}}, {})
    _put(stamps, metadata, config_metadata)
    assert stamps.peek("t") is None
