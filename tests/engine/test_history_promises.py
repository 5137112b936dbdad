"""The history rules keep every promise (issue #19): an interrupted head's run under every
horizon, subgraph memory at forks from kept turns, capped passes that converge.

Each pass runs on thread "kept" beside an untouched "twin" (tests/compaction_kit.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from compaction_kit import KEPT, TWIN, Twins, history_ids, memory_graph
from savers import KINDS, open_sync
from test_compaction import POLICIES, SHAPES, assert_like_twin, run_pass

from retaining_saver import Protection
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import FLAVORS, Flavor, thread, turn

INTERRUPTED = {s.name: s for s in SHAPES}


def _head_run(graph: Any, thread_id: str) -> list[str]:
    """The root checkpoints of the head's run, newest first: back to its input."""
    run: list[str] = []
    for snapshot in graph.get_state_history(thread(thread_id)):
        run.append(snapshot.config["configurable"]["checkpoint_id"])
        if snapshot.metadata["source"] == "input":
            return run
    return run


@pytest.mark.parametrize("shape_name", ["interrupt-pending", "multi-interrupt"])
@pytest.mark.parametrize("policy_name", ["horizon-0", "horizon-1"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_heads_run_is_kept_under_every_horizon(
    kind: str, policy_name: str, shape_name: str, request: pytest.FixtureRequest
) -> None:
    """The head waits on an interrupt: its run is live, kept whole under every horizon,
    so the interrupted turn regenerates from its input as on the twin."""
    shape = INTERRUPTED[shape_name]
    with open_sync(kind, request) as saver:
        twins = Twins.write(shape, saver)
        before = history_ids(twins.graph, KEPT)
        run = _head_run(twins.graph, KEPT)
        report = run_pass(saver, POLICIES[policy_name])
        assert report.deleted, "older runs go"
        assert set(run) <= set(history_ids(twins.graph, KEPT)), "the live run stays whole"
        assert report.kept[("", run[-1])] is not Protection.CAPPED
        assert_like_twin(twins, before, report, shape)
        # Regenerate the interrupted turn from its input checkpoint, on both threads.
        twins.graph.invoke(None, thread(KEPT, run[-1]))
        twins.graph.invoke(None, thread(TWIN, twins.kept_to_twin[run[-1]]))
        mine, twin = (twins.graph.get_state(thread(t)) for t in (KEPT, TWIN))
        assert (mine.values, mine.next) == (twin.values, twin.next)


FORK_POLICIES = {
    **{name: POLICIES[name] for name in ("horizon-0", "horizon-1", "compact")},
    "compact+keep-step": dataclasses.replace(
        POLICIES["compact"], keep_step=lambda n: n.metadata.get("step") == 2
    ),
}


def _memory_turns(graph: Any, thread_id: str) -> None:
    """Four turns, an `update_state` on the head, and a turn from it."""
    for i in range(4):
        graph.invoke(turn(i), thread(thread_id))
    graph.update_state(thread(thread_id), {"said": ["edited"]})
    graph.invoke(turn(4), thread(thread_id))


def assert_forks_read_the_twins_memory(graph: Any, kept_to_twin: dict[str, str]) -> None:
    """From every kept root checkpoint, both threads fork alike: a replay of what is
    next, or a new turn from a turn's end; the subgraph memory it ran on shows."""
    for cid in history_ids(graph, KEPT):
        state = graph.get_state(thread(KEPT, cid))
        given = None if state.next else turn(9)
        graph.invoke(given, thread(KEPT, cid))
        graph.invoke(given, thread(TWIN, kept_to_twin[cid]))
        mine, twin = (graph.get_state(thread(t), subgraphs=True) for t in (KEPT, TWIN))
        assert (mine.values, mine.next) == (twin.values, twin.next), (cid, state.next)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("policy_name", FORK_POLICIES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_fork_from_a_kept_turn_reads_the_twins_subgraph_memory(
    kind: str, policy_name: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """A fork from a kept root checkpoint loads a `checkpointer=True` subgraph's latest
    checkpoint before it: the pass keeps that one, so the fork runs on the twin's memory."""
    with open_sync(kind, request) as saver:
        graph = memory_graph(saver, flavor)
        for thread_id in (KEPT, TWIN):
            _memory_turns(graph, thread_id)
        kept_to_twin = dict(zip(history_ids(graph, KEPT), history_ids(graph, TWIN), strict=True))
        policy = FORK_POLICIES[policy_name]
        if flavor == "delta":
            policy = dataclasses.replace(policy, delta_graph=graph)
        report = run_pass(saver, policy)
        assert any(ns == "inner" for ns, _ in report.deleted), "old subgraph memory goes"
        assert integrity(saver, KEPT).clean
        assert_forks_read_the_twins_memory(graph, kept_to_twin)
        assert integrity(saver, KEPT).clean
