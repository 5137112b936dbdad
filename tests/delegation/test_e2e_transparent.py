"""End to end: a real graph on `RetainingSaver(inner)` behaves as on a bare `inner`.

Each test runs one scenario twice, once on a wrapped saver and once on a bare
saver of the same kind with its own storage, and compares what a user can
observe: run outputs, `get_state`, the normalized `get_state_history`, time
travel from an older checkpoint, `update_state` forks, interrupts resumed with
`Command`, and a beta `DeltaChannel` whose value is rebuilt from ancestor
writes. Each scenario also checks its own content, so two equally broken runs
cannot pass by agreeing with each other.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver
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
    find_snapshot,
    normalize,
    visible_history,
    visible_state,
)

Observations = dict[str, Any]


class SaverPair(NamedTuple):
    wrapped: RetainingSaver
    bare: BaseCheckpointSaver[Any]


def _wrap(inner: BaseCheckpointSaver[Any]) -> RetainingSaver:
    wrapped = RetainingSaver(inner, strict=True)
    assert wrapped.cleanup_enabled
    assert wrapped.inner is inner
    return wrapped


@pytest.fixture(params=KINDS)
def sync_pair(request: pytest.FixtureRequest) -> Iterator[SaverPair]:
    """A sync `RetainingSaver(inner)` and a bare saver of the same kind, separately stored."""
    kind = request.param
    with open_sync(kind, request) as wrapped_inner, open_sync(kind, request, "bare") as bare:
        yield SaverPair(_wrap(wrapped_inner), bare)


@pytest.fixture(params=KINDS)
async def async_pair(request: pytest.FixtureRequest) -> AsyncIterator[SaverPair]:
    """An async `RetainingSaver(inner)` and a bare saver of the same kind, separately stored."""
    kind = request.param
    async with (
        open_async(kind, request) as wrapped_inner,
        open_async(kind, request, "bare") as bare,
    ):
        if kind == "sqlite":
            for saver in (wrapped_inner, bare):
                await saver.setup()  # type: ignore[attr-defined]
        yield SaverPair(_wrap(wrapped_inner), bare)


def assert_admissions(saver: RetainingSaver, runs: int) -> None:
    """Each run (pinned or not) was admitted once, its cleanup ran without failing and,
    as these graphs never leave a reclaimable duration leaf, reclaimed nothing.

    Cleanup failures are logged, not raised, so without this a broken cleanup
    path would still pass the transparency comparison.
    """
    counters = saver.counters
    assert counters.failed == 0, counters
    assert counters.reclaimed == 0, counters
    assert counters.attempted == runs, counters


def assert_same_observations(wrapped: Observations, bare: Observations) -> None:
    assert list(wrapped) == list(bare)
    for key, expected in bare.items():
        assert wrapped[key] == expected, f"wrapped and bare differ at {key!r}"


# Chat graph: three turns, then time travel and an update_state fork

EDIT = HumanMessage(content="edited note", id="human-edit")


def chat_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("chat")
    obs: Observations = {}
    obs["turn_outputs"] = [normalize(graph.invoke(chat_turn(i), config)) for i in range(3)]
    obs["state"] = visible_state(graph.get_state(config))
    obs["history"] = visible_history(graph, config)

    after_turn_1 = find_snapshot(graph.get_state_history(config), turns=1)
    obs["pinned_state"] = visible_state(graph.get_state(after_turn_1.config))
    obs["replay_output"] = normalize(graph.invoke(chat_turn(10), after_turn_1.config))
    obs["state_after_replay"] = visible_state(graph.get_state(config))
    obs["history_after_replay"] = visible_history(graph, config)

    graph.update_state(after_turn_1.config, {"messages": [EDIT]})
    obs["state_after_update"] = visible_state(graph.get_state(config))
    obs["update_output"] = normalize(graph.invoke(chat_turn(11), config))
    obs["final_state"] = visible_state(graph.get_state(config))
    obs["final_history"] = visible_history(graph, config)
    obs["history_before_turn_1_end"] = visible_history(
        graph, config, before=after_turn_1.config, limit=3
    )
    return obs


async def achat_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("chat")
    obs: Observations = {}
    obs["turn_outputs"] = [normalize(await graph.ainvoke(chat_turn(i), config)) for i in range(3)]
    obs["state"] = visible_state(await graph.aget_state(config))
    obs["history"] = await avisible_history(graph, config)

    after_turn_1 = find_snapshot([s async for s in graph.aget_state_history(config)], turns=1)
    obs["pinned_state"] = visible_state(await graph.aget_state(after_turn_1.config))
    obs["replay_output"] = normalize(await graph.ainvoke(chat_turn(10), after_turn_1.config))
    obs["state_after_replay"] = visible_state(await graph.aget_state(config))
    obs["history_after_replay"] = await avisible_history(graph, config)

    await graph.aupdate_state(after_turn_1.config, {"messages": [EDIT]})
    obs["state_after_update"] = visible_state(await graph.aget_state(config))
    obs["update_output"] = normalize(await graph.ainvoke(chat_turn(11), config))
    obs["final_state"] = visible_state(await graph.aget_state(config))
    obs["final_history"] = await avisible_history(graph, config)
    obs["history_before_turn_1_end"] = await avisible_history(
        graph, config, before=after_turn_1.config, limit=3
    )
    return obs


def _msgs(*specs: str) -> list[tuple[str, str, str]]:
    """Normalized messages from compact specs: "h0" is human turn 0, "a3" the reply with id ai-3."""
    out = []
    for spec in specs:
        if spec == "edit":
            out.append(("human", "edited note", "human-edit"))
        elif spec[0] == "h":
            out.append(("human", f"user says {spec[1:]}", f"human-{spec[1:]}"))
        else:
            n = int(spec[1:])
            said = out[-1][1]
            out.append(("ai", f"echo: {said}", f"ai-{n}"))
    return out


def _assert_linear_turns(history: list[dict[str, Any]], turns: int) -> None:
    """A single branch of `turns` chat turns: input, respond, summarize, done per turn."""
    assert len(history) == 4 * turns
    assert [h["step"] for h in history] == list(range(4 * turns - 2, -2, -1))
    assert [h["source"] for h in history] == ["loop", "loop", "loop", "input"] * turns
    per_turn_next = [(), ("summarize",), ("respond",), ("__start__",)]
    assert [h["next"] for h in history] == per_turn_next * turns
    assert [h["parent"] for h in history] == [*range(1, 4 * turns), None]


def check_chat_content(obs: Observations) -> None:
    three_turns = _msgs("h0", "a1", "h1", "a3", "h2", "a5")
    assert obs["turn_outputs"][-1] == {
        "messages": three_turns,
        "turns": 3,
        "summary": "3 turn(s): user says 0 | user says 1 | user says 2",
    }
    assert [out["turns"] for out in obs["turn_outputs"]] == [1, 2, 3]
    assert obs["state"]["values"] == obs["turn_outputs"][-1]
    assert obs["state"]["next"] == ()
    _assert_linear_turns(obs["history"], 3)
    assert obs["history"][0]["values"] == obs["state"]["values"]

    assert obs["pinned_state"]["values"]["messages"] == _msgs("h0", "a1")
    assert obs["pinned_state"]["values"]["turns"] == 1
    assert obs["pinned_state"]["next"] == ()

    # Time travel: a new branch grows from the end of turn 1.
    assert obs["replay_output"]["messages"] == _msgs("h0", "a1", "h10", "a3")
    assert obs["replay_output"]["turns"] == 2
    assert obs["state_after_replay"]["values"] == obs["replay_output"]
    replayed = obs["history_after_replay"]
    assert len(replayed) == 16
    assert replayed[4:] == [
        # The old branch is unchanged; its parent positions shift by the 4 new entries.
        {**h, "parent": None if h["parent"] is None else h["parent"] + 4}
        for h in obs["history"]
    ]
    fork_input = replayed[3]
    assert (fork_input["source"], fork_input["step"]) == ("input", 3)
    assert replayed[fork_input["parent"]]["values"] == obs["pinned_state"]["values"]

    # update_state fork at the end of turn 1, then one more turn on top of it.
    updated = obs["state_after_update"]
    assert (updated["source"], updated["step"], updated["next"]) == ("update", 3, ())
    assert updated["values"]["messages"] == _msgs("h0", "a1", "edit")
    assert obs["update_output"] == {
        "messages": _msgs("h0", "a1", "edit", "h11", "a4"),
        "turns": 2,
        "summary": "2 turn(s): user says 0 | edited note | user says 11",
    }
    assert obs["final_state"]["values"] == obs["update_output"]
    final = obs["final_history"]
    assert len(final) == 16 + 1 + 4
    update_entry = final[4]
    assert update_entry["source"] == "update"
    assert final[update_entry["parent"]]["values"] == obs["pinned_state"]["values"]
    assert final[3]["parent"] == 4

    # `before` + `limit`: the three checkpoints of turn 1 under its last one.
    before = obs["history_before_turn_1_end"]
    assert [(h["source"], h["step"], h["parent"]) for h in before] == [
        ("loop", 1, 1),
        ("loop", 0, 2),
        ("input", -1, None),
    ]


def test_chat_graph_sync(sync_pair: SaverPair) -> None:
    wrapped = chat_observations(build_chat_graph(sync_pair.wrapped))
    bare = chat_observations(build_chat_graph(sync_pair.bare))
    assert_same_observations(wrapped, bare)
    assert_admissions(sync_pair.wrapped, runs=5)  # one pinned (time travel)
    check_chat_content(wrapped)


async def test_chat_graph_async(async_pair: SaverPair) -> None:
    wrapped = await achat_observations(build_chat_graph(async_pair.wrapped))
    bare = await achat_observations(build_chat_graph(async_pair.bare))
    assert_same_observations(wrapped, bare)
    assert_admissions(async_pair.wrapped, runs=5)
    check_chat_content(wrapped)


# Interrupt graph: interrupt, resume with Command, then re-resume an older checkpoint

QUESTION = {"question": "approve?", "draft": "draft about retention"}


def interrupt_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("review")
    obs: Observations = {}
    obs["first_output"] = normalize(graph.invoke({"topic": "retention"}, config))
    interrupted = graph.get_state(config)
    obs["interrupted_state"] = visible_state(interrupted)
    obs["interrupted_history"] = visible_history(graph, config)
    obs["resumed_output"] = normalize(graph.invoke(Command(resume="approved"), config))
    obs["resumed_state"] = visible_state(graph.get_state(config))
    obs["pinned_interrupted_state"] = visible_state(graph.get_state(interrupted.config))
    obs["re_resumed_output"] = normalize(
        graph.invoke(Command(resume="rejected"), interrupted.config)
    )
    obs["final_history"] = visible_history(graph, config)
    return obs


async def ainterrupt_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("review")
    obs: Observations = {}
    obs["first_output"] = normalize(await graph.ainvoke({"topic": "retention"}, config))
    interrupted = await graph.aget_state(config)
    obs["interrupted_state"] = visible_state(interrupted)
    obs["interrupted_history"] = await avisible_history(graph, config)
    obs["resumed_output"] = normalize(await graph.ainvoke(Command(resume="approved"), config))
    obs["resumed_state"] = visible_state(await graph.aget_state(config))
    obs["pinned_interrupted_state"] = visible_state(await graph.aget_state(interrupted.config))
    obs["re_resumed_output"] = normalize(
        await graph.ainvoke(Command(resume="rejected"), interrupted.config)
    )
    obs["final_history"] = await avisible_history(graph, config)
    return obs


def check_interrupt_content(obs: Observations) -> None:
    assert obs["first_output"] == {
        "topic": "retention",
        "draft": "draft about retention",
        "__interrupt__": [("interrupt", QUESTION)],
    }
    waiting = obs["interrupted_state"]
    assert waiting["next"] == ("review",)
    assert waiting["interrupts"] == [("interrupt", QUESTION)]
    assert waiting["tasks"] == [("review", [("interrupt", QUESTION)], False)]
    assert [h["step"] for h in obs["interrupted_history"]] == [1, 0, -1]

    done = {
        "topic": "retention",
        "draft": "draft about retention",
        "verdict": "approved",
        "published": "draft about retention (approved)",
    }
    assert obs["resumed_output"] == done
    assert obs["resumed_state"]["values"] == done
    assert obs["resumed_state"]["next"] == ()
    # The interrupted checkpoint still shows its interrupt once it has been answered.
    assert obs["pinned_interrupted_state"]["next"] == ("review",)
    assert obs["pinned_interrupted_state"]["interrupts"] == [("interrupt", QUESTION)]
    # Re-running from the interrupted checkpoint reuses the writes its `review`
    # task saved there (the first answer), so the second answer is ignored.
    assert obs["re_resumed_output"] == done

    final = obs["final_history"]
    assert [(h["source"], h["step"]) for h in final] == [
        ("loop", 3),
        ("loop", 2),
        ("loop", 3),
        ("loop", 2),
        ("loop", 1),
        ("loop", 0),
        ("input", -1),
    ]
    assert [h["parent"] for h in final] == [1, 4, 3, 4, 5, 6, None]
    assert final[4]["interrupts"] == [("interrupt", QUESTION)]


def test_interrupt_graph_sync(sync_pair: SaverPair) -> None:
    wrapped = interrupt_observations(build_interrupt_graph(sync_pair.wrapped))
    bare = interrupt_observations(build_interrupt_graph(sync_pair.bare))
    assert_same_observations(wrapped, bare)
    assert_admissions(sync_pair.wrapped, runs=3)  # one pinned
    check_interrupt_content(wrapped)


async def test_interrupt_graph_async(async_pair: SaverPair) -> None:
    wrapped = await ainterrupt_observations(build_interrupt_graph(async_pair.wrapped))
    bare = await ainterrupt_observations(build_interrupt_graph(async_pair.bare))
    assert_same_observations(wrapped, bare)
    assert_admissions(async_pair.wrapped, runs=3)
    check_interrupt_content(wrapped)


# DeltaChannel graph: values rebuilt from ancestor writes, across forks

EXPECTED_ITEMS_AFTER_4 = [
    "input-0",
    "item-1",
    "input-1",
    "item-3",
    "input-2",
    "item-5",
    "input-3",
    "item-7",
]


def delta_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("delta")
    obs: Observations = {}
    obs["run_outputs"] = [normalize(graph.invoke(delta_turn(i), config)) for i in range(4)]
    obs["state"] = visible_state(graph.get_state(config))
    obs["history"] = visible_history(graph, config)
    snapshots = list(graph.get_state_history(config))
    after_run_1 = find_snapshot(snapshots, count=2)
    after_run_2 = find_snapshot(snapshots, count=4)
    obs["pinned_state"] = visible_state(graph.get_state(after_run_1.config))
    obs["replay_output"] = normalize(graph.invoke(delta_turn(10), after_run_1.config))
    graph.update_state(after_run_2.config, {"items": ["edited"]})
    obs["state_after_update"] = visible_state(graph.get_state(config))
    obs["update_output"] = normalize(graph.invoke(delta_turn(11), config))
    obs["final_history"] = visible_history(graph, config)
    return obs


async def adelta_observations(graph: CompiledStateGraph) -> Observations:
    config = thread_config("delta")
    obs: Observations = {}
    obs["run_outputs"] = [normalize(await graph.ainvoke(delta_turn(i), config)) for i in range(4)]
    obs["state"] = visible_state(await graph.aget_state(config))
    obs["history"] = await avisible_history(graph, config)
    snapshots = [s async for s in graph.aget_state_history(config)]
    after_run_1 = find_snapshot(snapshots, count=2)
    after_run_2 = find_snapshot(snapshots, count=4)
    obs["pinned_state"] = visible_state(await graph.aget_state(after_run_1.config))
    obs["replay_output"] = normalize(await graph.ainvoke(delta_turn(10), after_run_1.config))
    await graph.aupdate_state(after_run_2.config, {"items": ["edited"]})
    obs["state_after_update"] = visible_state(await graph.aget_state(config))
    obs["update_output"] = normalize(await graph.ainvoke(delta_turn(11), config))
    obs["final_history"] = await avisible_history(graph, config)
    return obs


def check_delta_content(obs: Observations) -> None:
    assert [out["count"] for out in obs["run_outputs"]] == [2, 4, 6, 8]
    assert obs["run_outputs"][-1]["items"] == EXPECTED_ITEMS_AFTER_4
    assert obs["state"]["values"] == obs["run_outputs"][-1]
    history = obs["history"]
    assert len(history) == 16
    assert [h["parent"] for h in history] == [*range(1, 16), None]
    # Every listed snapshot rebuilt `items` from its own ancestors' writes: the
    # list only ever grows going forward in time.
    items_oldest_first = [h["values"].get("items", []) for h in reversed(history)]
    for older, newer in itertools.pairwise(items_oldest_first):
        assert newer[: len(older)] == older
    assert items_oldest_first[-1] == EXPECTED_ITEMS_AFTER_4

    assert obs["pinned_state"]["values"]["items"] == ["input-0", "item-1"]
    assert obs["replay_output"] == {
        "items": ["input-0", "item-1", "input-10", "item-3"],
        "log": ["add_item saw 1", "add_item saw 3"],
        "count": 4,
    }
    assert obs["state_after_update"]["values"]["items"] == [
        "input-0",
        "item-1",
        "input-1",
        "item-3",
        "edited",
    ]
    assert obs["update_output"]["items"] == [
        "input-0",
        "item-1",
        "input-1",
        "item-3",
        "edited",
        "input-11",
        "item-6",
    ]
    assert obs["update_output"]["count"] == 7
    assert len(obs["final_history"]) == 16 + 4 + 1 + 4


def test_delta_channel_graph_sync(sync_pair: SaverPair) -> None:
    wrapped = delta_observations(build_delta_graph(sync_pair.wrapped))
    bare = delta_observations(build_delta_graph(sync_pair.bare))
    assert_same_observations(wrapped, bare)
    assert_admissions(sync_pair.wrapped, runs=6)  # one pinned
    check_delta_content(wrapped)


async def test_delta_channel_graph_async(async_pair: SaverPair) -> None:
    wrapped = await adelta_observations(build_delta_graph(async_pair.wrapped))
    bare = await adelta_observations(build_delta_graph(async_pair.bare))
    assert_same_observations(wrapped, bare)
    check_delta_content(wrapped)
    assert_admissions(async_pair.wrapped, runs=6)
