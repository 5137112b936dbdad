"""Real graphs run the same on a forwarding saver bare and wrapped.

LangGraph's own test suite runs its graphs on savers whose type does not define
the methods they answer (see `forwarding.py`). Each scenario here drives a
`StateGraph` through invoke, stream, state reads, history and `update_state`
(or an interrupt and its resume), once on a bare saver and once on an equal
saver wrapped in `RetainingSaver`, and compares everything a user sees; a
scenario that fails bare must fail wrapped with the same exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from forwarding import COMPLETE_KINDS, KINDS, CopyingMemorySaver, own_calls, wrap_quietly
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from retaining_saver.testing.graphs import (
    build_chat_graph,
    build_delta_graph,
    build_interrupt_graph,
    chat_turn,
    delta_turn,
    thread_config,
)
from retaining_saver.testing.views import (
    avisible_history,
    normalize,
    visible_history,
    visible_state,
)

THREAD = "forwarded"
Scenario = Callable[[BaseCheckpointSaver[Any]], dict[str, Any]]
AsyncScenario = Callable[[BaseCheckpointSaver[Any]], Awaitable[dict[str, Any]]]

# Sync scenarios


def chat(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """Three turns (invoke, stream, invoke) around an `update_state` and a pinned read."""
    graph, config = build_chat_graph(saver), thread_config(THREAD)
    seen: dict[str, Any] = {"invoke": normalize(graph.invoke(chat_turn(0), config))}
    seen["stream"] = normalize(list(graph.stream(chat_turn(1), config, stream_mode="updates")))
    seen["state"] = visible_state(graph.get_state(config))
    graph.update_state(config, {"summary": "edited by hand"}, as_node="summarize")
    seen["updated"] = visible_state(graph.get_state(config))
    seen["last turn"] = normalize(graph.invoke(chat_turn(2), config))
    seen["history"] = visible_history(graph, config)
    oldest = list(graph.get_state_history(config))[-1]
    seen["pinned"] = visible_state(graph.get_state(oldest.config))
    return seen


def review(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """An `interrupt()` (its pending write stored by `put_writes`), then its resume."""
    graph, config = build_interrupt_graph(saver), thread_config(THREAD)
    seen: dict[str, Any] = {"interrupted": normalize(graph.invoke({"topic": "proxies"}, config))}
    seen["waiting"] = visible_state(graph.get_state(config))
    seen["resumed"] = normalize(graph.invoke(Command(resume="approved"), config))
    seen["history"] = visible_history(graph, config)
    return seen


def delta(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """A `DeltaChannel`, rebuilt from its history on every read."""
    graph, config = build_delta_graph(saver), thread_config(THREAD)
    seen = {f"turn {i}": normalize(graph.invoke(delta_turn(i), config)) for i in range(4)}
    seen["history"] = visible_history(graph, config)
    return seen


# Async scenarios


async def achat(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """The async twin of `chat`."""
    graph, config = build_chat_graph(saver), thread_config(THREAD)
    seen: dict[str, Any] = {"invoke": normalize(await graph.ainvoke(chat_turn(0), config))}
    chunks = [chunk async for chunk in graph.astream(chat_turn(1), config, stream_mode="updates")]
    seen["stream"] = normalize(chunks)
    seen["state"] = visible_state(await graph.aget_state(config))
    await graph.aupdate_state(config, {"summary": "edited by hand"}, as_node="summarize")
    seen["updated"] = visible_state(await graph.aget_state(config))
    seen["last turn"] = normalize(await graph.ainvoke(chat_turn(2), config))
    seen["history"] = await avisible_history(graph, config)
    oldest = [snapshot async for snapshot in graph.aget_state_history(config)][-1]
    seen["pinned"] = visible_state(await graph.aget_state(oldest.config))
    return seen


async def areview(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """The async twin of `review`."""
    graph, config = build_interrupt_graph(saver), thread_config(THREAD)
    interrupted = await graph.ainvoke({"topic": "proxies"}, config)
    seen: dict[str, Any] = {"interrupted": normalize(interrupted)}
    seen["waiting"] = visible_state(await graph.aget_state(config))
    seen["resumed"] = normalize(await graph.ainvoke(Command(resume="approved"), config))
    seen["history"] = await avisible_history(graph, config)
    return seen


async def adelta(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """The async twin of `delta`."""
    graph, config = build_delta_graph(saver), thread_config(THREAD)
    seen = {f"turn {i}": normalize(await graph.ainvoke(delta_turn(i), config)) for i in range(4)}
    seen["history"] = await avisible_history(graph, config)
    return seen


SCENARIOS: dict[str, Scenario] = {"chat": chat, "review": review, "delta": delta}
ASYNC_SCENARIOS: dict[str, AsyncScenario] = {"chat": achat, "review": areview, "delta": adelta}


def played(scenario: Scenario, saver: BaseCheckpointSaver[Any]) -> Any:
    """What the scenario saw on `saver`, or the exception it stopped with."""
    try:
        return scenario(saver)
    except Exception as exc:
        return type(exc), str(exc)


async def aplayed(scenario: AsyncScenario, saver: BaseCheckpointSaver[Any]) -> Any:
    """The async twin of `played`."""
    try:
        return await scenario(saver)
    except Exception as exc:
        return type(exc), str(exc)


def assert_bare_result(kind: str, result: Any) -> None:
    """Complete kinds must run every scenario bare, so that a match is never two failures."""
    if kind in COMPLETE_KINDS:
        assert isinstance(result, dict), f"{kind} failed bare: {result}"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_sync_graph_runs_as_bare(kind: str, scenario: str) -> None:
    bare, twin = KINDS[kind](), KINDS[kind]()
    expected = played(SCENARIOS[scenario], bare)
    assert_bare_result(kind, expected)
    assert played(SCENARIOS[scenario], wrap_quietly(twin)) == expected
    assert own_calls(twin) == own_calls(bare)


@pytest.mark.parametrize("scenario", list(ASYNC_SCENARIOS))
@pytest.mark.parametrize("kind", list(KINDS))
async def test_async_graph_runs_as_bare(kind: str, scenario: str) -> None:
    bare, twin = KINDS[kind](), KINDS[kind]()
    expected = await aplayed(ASYNC_SCENARIOS[scenario], bare)
    assert_bare_result(kind, expected)
    assert await aplayed(ASYNC_SCENARIOS[scenario], wrap_quietly(twin)) == expected
    assert own_calls(twin) == own_calls(bare)


def test_memory_subclass_receives_every_put() -> None:
    bare, twin = CopyingMemorySaver(), CopyingMemorySaver()
    chat(bare)
    chat(wrap_quietly(twin))
    assert len(twin.copies) == len(bare.copies) > 0
    assert [c["channel_values"] for c in twin.copies] == [c["channel_values"] for c in bare.copies]
