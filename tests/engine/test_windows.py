"""A pass over a window of the thread (issue #21): an admission's history pass reads only the
thread's newest root checkpoints and everything above them (`Lineage.windowed`).

Over random lineages, whose DeltaChannel metadata is written as LangGraph writes it
(`named_as_langgraph_names`): a window's plan deletes only what one uncapped plan over the whole
thread deletes, never deletes or moves a checkpoint that rests on rows below the window,
frees no blob a row that stays holds, below the window or not, and its re-checks hold
against the whole thread's rows; windowed capped passes, widened as
`planned_pass` widens them, delete exactly what that one plan deletes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver
from test_compaction import DELTA, carry_out, history_scenarios
from test_history_promises import history_only
from test_rules import NOW, Thread
from test_rules_property import SETTINGS, Scenario

from retaining_saver import Protection, RetentionPolicy, _rules
from retaining_saver._engine import WINDOW_GROWTH
from retaining_saver._rules import DELTA_METADATA_KEY, Lineage, NodeKey, plan_retention
from retaining_saver._transact import run
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import window_size
from retaining_saver.testing.graphs import chat_graph, subgraph_chat, thread, turn


def keys(deletions: Iterable[_rules.Deletion]) -> set[NodeKey]:
    return {(d.checkpoint_ns, d.checkpoint_id) for d in deletions}


def moved(plan: _rules.Plan) -> set[NodeKey]:
    """What `plan` deletes, re-parents or makes a root."""
    return (
        keys(plan.deletions)
        | {(g.checkpoint_ns, g.child_id) for g in plan.grafts}
        | {(r.checkpoint_ns, r.checkpoint_id) for r in plan.roots}
    )


def named_as_langgraph_names(s: Scenario) -> dict[NodeKey, _rules.CheckpointNode]:
    """`s.full`, each checkpoint that has a version of the delta channel but does not store
    it naming it in `counters_since_delta_snapshot`, as LangGraph does (the counters stay
    non-zero until the channel snapshots). The window rests on this: a checkpoint whose
    walk goes below the window names its channel, so the window knows the channel."""
    nodes = dict(s.full)
    for key, node in nodes.items():
        if DELTA in node.channel_versions and DELTA not in (node.stored or ()):
            counters = {**node.metadata.get(DELTA_METADATA_KEY, {}), DELTA: [1, 1]}
            metadata = {**node.metadata, DELTA_METADATA_KEY: counters}
            nodes[key] = dataclasses.replace(node, metadata=metadata)
    return nodes


def widened_plan(
    nodes: Mapping[NodeKey, _rules.CheckpointNode],
    policy: RetentionPolicy,
    now: datetime,
    newest: int,
) -> tuple[Lineage, _rules.Plan]:
    """The window `planned_pass` plans on, from `newest` root checkpoints, and its plan."""
    whole = Lineage.of("thread", nodes.values())
    lineage = whole.windowed(newest)
    plan = plan_retention(lineage, policy, now)
    cap = policy.max_delete_per_run
    while lineage.window_start is not None and (cap is None or len(plan.deletions) < cap):
        newest *= WINDOW_GROWTH
        lineage = whole.windowed(newest)
        plan = plan_retention(lineage, policy, now)
    return lineage, plan


@settings(parent=SETTINGS)
@given(history_scenarios(), st.integers(1, 12))
def test_a_windows_plan_deletes_only_what_the_whole_threads_plan_deletes(
    s: Scenario, newest: int
) -> None:
    policy = dataclasses.replace(s.policy, max_delete_per_run=None)
    nodes = named_as_langgraph_names(s)
    whole = Lineage.of("thread", nodes.values())
    window = whole.windowed(newest)
    plan = plan_retention(window, policy, s.now)
    assert keys(plan.deletions) <= keys(plan_retention(whole, policy, s.now).deletions), s
    edges = {k for k, n in window.nodes.items() if window.below_window(n)}
    assert not moved(plan) & edges, s
    assert all(plan.kept[k] is not None for k in edges)
    after = carry_out(nodes, plan)  # each step re-checked on the whole thread's rows
    # The blob sweep looks only at the window's rows (`Plan.window_start`): no row below
    # it, nor any other that stays, holds a version the plan frees.
    held = {(n.checkpoint_ns, c, v) for n in after.values() for c, v in n.channel_versions.items()}
    assert not held & set(plan.freed_blobs), s


@settings(parent=SETTINGS)
@given(history_scenarios(), st.integers(1, 8), st.sampled_from([1, 2, 3, 5]))
def test_windowed_capped_passes_reach_the_uncapped_plan(s: Scenario, newest: int, cap: int) -> None:
    policy = history_only(s.policy)
    nodes, deleted = named_as_langgraph_names(s), set[NodeKey]()
    uncapped = keys(plan_retention(Lineage.of("thread", nodes.values()), policy, s.now).deletions)
    capped = dataclasses.replace(policy, max_delete_per_run=cap)
    for _ in range(len(nodes) + 1):
        _, plan = widened_plan(nodes, capped, s.now, newest)
        if plan.empty:
            break
        assert keys(plan.deletions) <= uncapped, s
        deleted |= keys(plan.deletions)
        nodes = carry_out(nodes, plan)
    assert plan.empty, "windowed passes never finish"
    assert deleted == uncapped, s


def test_a_long_line_goes_newest_part_first_onto_the_windows_edge() -> None:
    """Twenty runs of three checkpoints under a horizon of 2, read as a window of the
    newest 12 root checkpoints: the 6 of the 2 kept runs stay, the window's oldest
    checkpoint stays (what it rests on was not read), and the 5 between go, the kept
    runs' first checkpoint grafted onto it."""
    thread = Thread()
    parent = None
    for _ in range(20):
        run = thread.run(parent, 3)
        parent = run[-1]
    policy = RetentionPolicy(history_keep_runs=2, history_min_age=NOW - NOW)
    whole = Lineage.of("thread", thread.nodes.values())
    window = whole.windowed(12)
    ids = sorted(cid for _, cid in whole.nodes)
    assert window.window_start == ids[-12]
    plan = plan_retention(window, policy, NOW)
    assert sorted(cid for _, cid in keys(plan.deletions)) == ids[-11:-6]
    assert plan.kept[("", ids[-12])] is Protection.WINDOW_EDGE
    (graft,) = plan.grafts
    assert (graft.child_id, graft.new_parent_id) == (ids[-6], ids[-12])
    assert not plan.roots


@pytest.mark.parametrize("newest", [0, -1, True, 2.0, "3"])
def test_a_window_of_no_checkpoints_is_refused(newest: object) -> None:
    with pytest.raises(ValueError, match="newest must be a positive int"):
        window_size(newest)  # type: ignore[arg-type]


@pytest.mark.parametrize("flavor", ["line", "subgraph"])
def test_langgraph_names_a_delta_channel_wherever_it_is_not_stored(flavor: str) -> None:
    """What `named_as_langgraph_names` writes, and the window's DeltaChannel rule rests on,
    checked on real runs: every checkpoint that has a version of a DeltaChannel but does
    not store its value names the channel in `counters_since_delta_snapshot`; through
    snapshots, forks from old turns (`update_state`) and a persistent subgraph's memory."""
    saver = InMemorySaver()
    graph = chat_graph(saver, "delta") if flavor == "line" else subgraph_chat(saver, "delta")
    for i in range(8):
        graph.invoke(turn(i), thread("t"))
    old = list(saver.list(thread("t")))[-6]
    forked = graph.update_state(old.config, {"said": ["edited"]})
    for i in range(8, 12):
        graph.invoke(turn(i), forked if i == 8 else thread("t"))
    backend = backend_for(saver)
    assert backend is not None
    nodes = run(backend, backend.load_lineage("t")).nodes.values()
    unstored = [n for n in nodes if "said" in n.channel_versions and "said" not in n.stored]
    assert unstored, "the graph stored the channel whole at every checkpoint"
    for node in unstored:
        assert "said" in node.metadata.get(DELTA_METADATA_KEY, {}), node
