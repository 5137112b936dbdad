"""The history rules keep every promise (issue #19): an interrupted head's run under every
horizon, subgraph memory at forks from kept turns, capped passes that converge.

Each pass runs on thread "kept" beside an untouched "twin" (tests/compaction_kit.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from compaction_kit import KEPT, TWIN, Saved, Shape, Twins, history_ids, memory_graph, one_piece
from hypothesis import given, settings
from hypothesis import strategies as st
from savers import KINDS, open_sync
from test_compaction import (
    POLICIES,
    SHAPES,
    assert_forks_load_the_same_memory,
    assert_like_twin,
    carry_out,
    history_scenarios,
    run_pass,
)
from test_rules import NOW, Thread
from test_rules_property import SETTINGS, Scenario, Writer, scenario

from retaining_saver import Protection, RetentionPolicy, RetentionReport
from retaining_saver._rules import (
    DELTA_METADATA_KEY,
    CheckpointNode,
    Deletion,
    Lineage,
    NodeKey,
    Plan,
    plan_retention,
)
from retaining_saver._rules._runs import root_of
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import FLAVORS, Flavor, thread, turn

INTERRUPTED = {s.name: s for s in SHAPES}
COUNT = {"messages": [1, 1]}


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


def _twenty_turns(graph: Any, thread_id: str) -> None:
    for i in range(20):
        graph.invoke(turn(i), thread(thread_id))


MEMORY = Shape("memory-20", memory_graph, _twenty_turns, turn(99))


def assert_loads_like_twin(twins: Twins) -> None:
    """Every checkpoint the kept thread still has loads the twin's values and `next`."""
    for cid in history_ids(twins.graph, KEPT):
        mine, twin = twins.state(KEPT, cid), twins.state(TWIN, twins.kept_to_twin[cid])
        assert (mine.values, mine.next) == (twin.values, twin.next), cid


@pytest.mark.parametrize(("keep", "compact", "cap"), [(1, False, 10), (2, True, 8)])
@pytest.mark.parametrize("kind", KINDS)
def test_capped_passes_reach_the_uncapped_result(
    kind: str, keep: int, compact: bool, cap: int, request: pytest.FixtureRequest
) -> None:
    """A unit larger than `max_delete_per_run` goes a newest part per pass: each pass
    deletes at most the cap and something until done, every pass leaves the thread
    loading like the twin, and together they delete what one uncapped pass would."""
    with open_sync(kind, request) as saver:
        twins = Twins.write(MEMORY, saver)
        before = history_ids(twins.graph, KEPT)
        policy = RetentionPolicy(
            history_keep_runs=keep, compact_steps=compact, history_min_age=timedelta(hours=1)
        )
        uncapped = run_pass(saver, policy, dry_run=True)
        passes: list[RetentionReport] = []
        while not passes or passes[-1].deleted:
            assert len(passes) < 100, "capped passes never finish"
            passes.append(run_pass(saver, dataclasses.replace(policy, max_delete_per_run=cap)))
            assert len(passes[-1].deleted) <= cap
            assert integrity(saver, KEPT).clean
            assert_loads_like_twin(twins)
        assert len(passes) > 2
        assert {k for p in passes for k in p.deleted} == set(uncapped.deleted)
        assert not run_pass(saver, policy, dry_run=True).deleted
        assert_like_twin(twins, before, uncapped, MEMORY)


@settings(parent=SETTINGS)
@given(history_scenarios(), st.sampled_from([1, 2, 3, 5]))
def test_repeated_capped_plans_reach_the_uncapped_plan(s: Scenario, cap: int) -> None:
    """Over random lineages: each capped plan deletes at most `cap`, or one piece that
    must go in one pass (`_pieces`) when nothing fits, and only what one uncapped plan
    deletes; carried out one after another they delete all of it."""
    policy = history_only(s.policy)
    lineage = Lineage.of("thread", s.nodes.values())
    uncapped = {d_key(d) for d in plan_retention(lineage, policy, s.now).deletions}
    bound = max(cap, *_pieces(s.nodes, uncapped), 0)
    deleted, plan = _capped_passes(dict(s.nodes), policy, cap, s.now, bound)
    assert deleted <= uncapped, f"{s!r} {cap}"
    assert not plan.deferred, "a capped pass made no progress"
    assert deleted == uncapped


@settings(parent=SETTINGS)
@given(history_scenarios(branchy=True), st.sampled_from([1, 2, 3]))
def test_capped_plans_on_branchy_threads_go_one_piece_at_a_time(s: Scenario, cap: int) -> None:
    """Over threads with several branches of several runs under one checkpoint, each
    holding subgraph memory (`scenarios(branchy=True)`; the default generator builds
    none), capped plans go one piece at a time (`assert_capped_plans_go_one_piece_at_a_time`)."""
    assert_capped_plans_go_one_piece_at_a_time(s, history_only(s.policy), cap)


@pytest.mark.parametrize("runs", [0, 1])
def test_capped_plans_go_on_past_a_branch_that_holds_a_forks_memory(runs: int) -> None:
    """What the branchy generator found on the code before the fix, in a DeltaChannel
    thread that stores its values at every checkpoint: four one-run branches forked from
    the first checkpoint, the first three writing the subgraph's memory. The oldest
    removed branch holds what a fork from the next one loads, so it cannot go first:
    capped plans stopped there, and must go on to the branches after it."""
    w = Writer()
    first = w.add("", None, ("context",), 0, {"source": "input", "step": -1})
    memory: str | None = None
    for writes_memory in (True, True, True, False):
        tip = w.add("", first, ("messages",), 0, {"source": "input", "step": -1})
        if writes_memory:
            memory = w.add("sub", memory, ("sub_state",), 0, {"parents": {"": tip}})
    for key, node in w.nodes.items():
        if not key[0]:
            w.nodes[key] = dataclasses.replace(node, stored=frozenset({"messages"}))
    start = w.nodes[("", first)]
    counted = {**start.metadata, DELTA_METADATA_KEY: COUNT}
    w.nodes[("", first)] = dataclasses.replace(start, metadata=counted)
    policy = RetentionPolicy(history_keep_runs=runs, history_min_age=timedelta(0))
    deleted = assert_capped_plans_go_one_piece_at_a_time(scenario(w, policy), policy, 1)
    assert len(deleted) >= 3, sorted(deleted)


def assert_capped_plans_go_one_piece_at_a_time(
    s: Scenario, policy: RetentionPolicy, cap: int
) -> set[NodeKey]:
    """`policy` (uncapped) capped at `cap`, planned and carried out until a plan deletes
    nothing: a plan past its cap deletes one piece (`one_piece`), never the newest
    checkpoints of several branches; every plan leaves what a fork from each kept root
    checkpoint loads as it was; and the plans together delete what one uncapped plan
    deletes. Returns what they deleted."""
    lineage = Lineage.of("thread", s.nodes.values())
    uncapped = {d_key(d) for d in plan_retention(lineage, policy, s.now).deletions}
    capped = dataclasses.replace(policy, max_delete_per_run=cap)
    nodes, deleted = dict(s.nodes), set[NodeKey]()
    for _ in range(len(uncapped) + 1):
        plan = plan_retention(Lineage.of("thread", nodes.values()), capped, s.now)
        gone = {d_key(d) for d in plan.deletions}
        if not gone:
            break
        assert len(gone) <= cap or one_piece(gone, _saved(nodes)), sorted(gone)
        nodes, deleted = carry_out(nodes, plan), deleted | gone
        if not policy.keep_latest:
            assert_forks_load_the_same_memory(s, nodes)
    assert deleted == uncapped, "capped plans stopped short"
    return deleted


def _saved(nodes: Mapping[NodeKey, CheckpointNode]) -> dict[NodeKey, Saved]:
    """`nodes` as `one_piece` reads a thread's rows."""
    return {
        key: Saved(
            node.parent_id,
            (node.metadata.get("parents") or {}).get(""),
            node.metadata.get("source"),
        )
        for key, node in nodes.items()
    }


def history_only(policy: RetentionPolicy) -> RetentionPolicy:
    """`policy` with its history rules alone, uncapped."""
    return dataclasses.replace(
        policy,
        trailing_duration_leaves=False,
        prune_leaf_sibling_branches=False,
        graft_duration_links=False,
        max_delete_per_run=None,
    )


def _pieces(nodes: Mapping[NodeKey, CheckpointNode], removed: set[NodeKey]) -> list[int]:
    """The sizes of what must go in one pass: a root checkpoint goes with the subgraph
    checkpoints written under it; a checkpoint that owns writes with the removed
    checkpoints below it (it must not be left childless, and a pre-v4 child grafted
    past it must not land on its writes); both ties taken together, transitively."""
    kids: dict[NodeKey, list[NodeKey]] = {}
    for key, node in nodes.items():
        kids.setdefault((key[0], str(node.parent_id)), []).append(key)
    piece = {key: key for key in removed}

    def find(key: NodeKey) -> NodeKey:
        while piece[key] != key:
            key = piece[key]
        return key

    def tie(a: NodeKey, b: NodeKey) -> None:
        piece[find(a)] = find(b)

    for key in removed:
        if key[0] and ("", str(root_of(nodes[key]))) in removed:
            tie(key, ("", str(root_of(nodes[key]))))
        todo, seen = ([key] if nodes[key].write_count else []), set[NodeKey]()
        while todo:
            for kid in kids.get(todo.pop(), []):
                if kid in removed and kid not in seen:
                    seen.add(kid)
                    tie(kid, key)
                    todo.append(kid)
    sizes: dict[NodeKey, int] = {}
    for key in removed:
        sizes[find(key)] = sizes.get(find(key), 0) + 1
    return list(sizes.values())


def _capped_passes(
    nodes: dict[NodeKey, CheckpointNode],
    policy: RetentionPolicy,
    cap: int,
    now: datetime = NOW,
    bound: int | None = None,
) -> tuple[set[NodeKey], Plan]:
    """What capped plans carried out one after another delete, and the last plan; each
    plan deletes at most `bound` (the cap unless given)."""
    deleted, capped = set[NodeKey](), dataclasses.replace(policy, max_delete_per_run=cap)
    plan = plan_retention(Lineage.of("thread", nodes.values()), capped, now)
    for _ in range(len(nodes) + 1):
        assert len(plan.deletions) <= (cap if bound is None else bound)
        if not plan.deletions:
            break
        deleted |= {d_key(d) for d in plan.deletions}
        nodes = carry_out(nodes, plan)
        plan = plan_retention(Lineage.of("thread", nodes.values()), capped, now)
    return deleted, plan


def test_a_pass_keeps_the_checkpoint_that_names_a_delta_channel_a_walk_needs() -> None:
    """The walks through what stays are told from the channels the thread's metadata
    names: a pass that removed every checkpoint naming `messages` would leave the next
    pass judging the head's walk as none, and remove the snapshot it reads."""
    thread = Thread()
    ids = thread.run(None, 4)
    for cid in ids:
        thread.change(cid, stored=frozenset({"messages"}), write_count=0)
    thread.change(ids[0], metadata={**thread.node(ids[0]).metadata, DELTA_METADATA_KEY: COUNT})
    thread.change(ids[-1], stored=frozenset())
    policy = RetentionPolicy(history_keep_runs=0, history_min_age=timedelta(0))
    once = plan_retention(thread.lineage(), policy, NOW)
    after = carry_out(thread.nodes, once)
    assert ("", ids[-2]) in after, "the head's walk reads its parent's snapshot"
    assert not plan_retention(Lineage.of("thread", after.values()), policy, NOW).deletions
    assert _capped_passes(dict(thread.nodes), policy, 1)[0] == {d_key(d) for d in once.deletions}


def test_capped_passes_take_a_checkpoint_with_writes_with_its_last_child() -> None:
    """A removed branch's checkpoint that owns writes (consumed by its child) must not be
    left childless by a capped pass: it would look like an interrupted leaf, kept for
    good. Capped passes reach the uncapped plan."""
    thread = Thread()
    old = thread.run(None)
    branch = thread.add(old[-1], writes=1, metadata={"source": "input", "step": -1})
    thread.add(thread.add(branch), writes=0)
    thread.run(old[-1])
    policy = RetentionPolicy(history_keep_runs=1, history_min_age=timedelta(0))
    uncapped = {d_key(d) for d in plan_retention(thread.lineage(), policy, NOW).deletions}
    assert ("", branch) in uncapped
    deleted, last = _capped_passes(dict(thread.nodes), policy, 2)
    assert deleted == uncapped
    assert not last.deferred


def test_a_kept_subgraph_branch_keeps_the_memory_it_continues() -> None:
    """A `checkpointer=True` subgraph's checkpoint written under a kept run can continue
    memory written under a removed one, off the subgraph's head line (a replay bounded
    below newer memory). It rests on that checkpoint: the pass keeps it (`ANCESTOR`), as
    it keeps a kept root checkpoint's parent, and plans no deletion under a kept one."""
    thread = Thread()
    old = thread.run(None)
    memory = thread.add(None, ns="inner", metadata={"source": "loop", "parents": {"": old[1]}})
    middle = thread.run(old[-1])
    thread.add(None, ns="inner", metadata={"source": "loop", "parents": {"": middle[1]}})
    new = thread.run(middle[-1])
    branch = thread.add(memory, ns="inner", metadata={"source": "loop", "parents": {"": new[1]}})
    thread.add(memory, ns="inner", metadata={"source": "loop", "parents": {"": new[2]}})
    plan = thread.plan(history_keep_runs=1, history_min_age=timedelta(0))
    gone = {d_key(d) for d in plan.deletions}
    assert ("inner", memory) not in gone
    assert plan.kept[("inner", memory)] is Protection.ANCESTOR
    assert {("", cid) for cid in old + middle} <= gone
    after = carry_out(thread.nodes, plan)
    assert ("inner", branch) in after
    assert all(n.parent_id is None or (k[0], n.parent_id) in after for k, n in after.items())


def d_key(deletion: Deletion) -> NodeKey:
    return (deletion.checkpoint_ns, deletion.checkpoint_id)


@pytest.mark.parametrize("policy_name", ["horizon-1", "compact"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_dry_run_reports_what_the_pass_does(
    kind: str, policy_name: str, request: pytest.FixtureRequest
) -> None:
    """A dry run's report is the real pass's, blob keys included."""
    with open_sync(kind, request) as saver:
        graph = memory_graph(saver)
        _memory_turns(graph, KEPT)
        dry = run_pass(saver, POLICIES[policy_name], dry_run=True)
        real = run_pass(saver, POLICIES[policy_name])
        assert real.deleted and dry.deleted == real.deleted
        assert (dry.grafts, dry.roots, dry.kept) == (real.grafts, real.roots, real.kept)
        assert sorted(dry.freed_blobs) == sorted(real.freed_blobs)
