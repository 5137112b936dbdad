"""The history rules (issue #13): the horizon, step compaction and keep_latest, on real graphs.

Each pass runs on thread "kept" of a saver whose thread "twin" holds the same
scenario untouched (tests/compaction_kit.py). After it: every kept checkpoint
loads the twin's values and `next`, `get_state_history` lists exactly the kept
checkpoints, the head resumes to the twin's result, a branch from every kept
turn end gives the twin's result, and no row dangles. Property tests over
random lineages follow.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from compaction_kit import (
    KEPT,
    SHAPES,
    TWIN,
    Shape,
    Twins,
    history_ids,
    pending_tasks,
    root_chains,
    ts_of,
)
from hypothesis import given
from hypothesis import strategies as st
from langgraph.channels import DeltaChannel
from savers import KINDS, open_async, open_sync
from test_rules_property import SETTINGS, Scenario, ancestors, children, scenarios

from retaining_saver import Protection, Reason, RetainingSaver, RetentionPolicy, RetentionReport
from retaining_saver._rules import (
    DELTA_METADATA_KEY,
    CheckpointNode,
    Deletion,
    Lineage,
    NodeKey,
    Plan,
    deletion_holds,
    graft_holds,
    plan_retention,
    root_holds,
)
from retaining_saver._rules._reads import replay_bound
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import chat_graph, subgraph_chat, thread, turn

HOUR = timedelta(hours=1)
LATER = datetime.now(UTC) + timedelta(days=1)
HISTORY = (Reason.BEYOND_HORIZON, Reason.COMPACTED_STEP)
POLICIES = {
    "compact": RetentionPolicy(compact_steps=True, history_min_age=HOUR),
    "horizon-1": RetentionPolicy(history_keep_runs=1, history_min_age=HOUR),
    "horizon-0": RetentionPolicy(history_keep_runs=0, history_min_age=HOUR),
    "horizon-2+compact": RetentionPolicy(
        history_keep_runs=2, compact_steps=True, history_min_age=HOUR
    ),
    "keep-latest": RetentionPolicy(keep_latest=True, history_min_age=HOUR),
}


def run_pass(
    saver: Any, policy: RetentionPolicy, now: datetime = LATER, *, dry_run: bool = False
) -> RetentionReport:
    wrapped = RetainingSaver(saver, admission="off")
    return wrapped.enforce_thread_retention(KEPT, policy, now=now, dry_run=dry_run)


def root_deletions(report: RetentionReport) -> set[str]:
    return {cid for (ns, cid) in report.deleted if ns == ""}


def assert_like_twin(
    twins: Twins, before: list[str], report: RetentionReport, shape: Shape
) -> None:
    """Everything the module docstring promises, against the untouched twin."""
    graph, deleted = twins.graph, root_deletions(report)
    kept = [i for i in before if i not in deleted]
    assert history_ids(graph, KEPT) == kept
    for cid in kept:
        mine, twin = twins.state(KEPT, cid), twins.state(TWIN, twins.kept_to_twin[cid])
        assert (mine.values, mine.next) == (twin.values, twin.next), cid
        # Pending writes: results, errors, interrupts.
        assert pending_tasks(mine) == pending_tasks(twin), cid
    assert integrity(graph.checkpointer, KEPT).clean
    turn_ends = [cid for cid in kept if not twins.state(KEPT, cid).next]
    assert_same_continuation(twins, shape.next_input, None, None)
    for cid in turn_ends:
        branch = shape.next_input if shape.branch_input is None else shape.branch_input
        assert_same_continuation(twins, branch, cid, twins.kept_to_twin[cid])
    assert integrity(graph.checkpointer, KEPT).clean


def assert_same_continuation(twins: Twins, given: Any, mine: str | None, twin: str | None) -> None:
    """Run `given` from each thread's head (or from the matched checkpoints): same state."""
    twins.graph.invoke(given, thread(KEPT, mine))
    twins.graph.invoke(given, thread(TWIN, twin))
    after_mine, after_twin = (twins.graph.get_state(thread(t)) for t in (KEPT, TWIN))
    assert (after_mine.values, after_mine.next) == (after_twin.values, after_twin.next)


@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("shape", SHAPES, ids=repr)
@pytest.mark.parametrize("kind", KINDS)
def test_history_rules_keep_what_stays_like_the_twin(
    kind: str, shape: Shape, policy_name: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(shape, saver)
        before = history_ids(twins.graph, KEPT)
        report = run_pass(saver, POLICIES[policy_name])
        assert report.deleted and set(report.deleted.values()) <= set(HISTORY)
        assert not report.dropped
        assert_like_twin(twins, before, report, shape)


@pytest.mark.parametrize("kind", KINDS)
def test_chat_figures_per_rule(kind: str, request: pytest.FixtureRequest) -> None:
    # Four turns of four checkpoints: input, then loop steps 0, 1, 2.
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[0], saver)
        newest_first = history_ids(twins.graph, KEPT)
        dry = run_pass(saver, POLICIES["compact"], dry_run=True)
        # Compaction takes loop step 1 of each turn; each step 2 is grafted onto step 0.
        assert set(dry.deleted) == {("", newest_first[i]) for i in (1, 5, 9, 13)}
        assert [(g.child_id, g.via, g.new_parent_id) for g in dry.grafts] == [
            (newest_first[i], (newest_first[i + 1],), newest_first[i + 2]) for i in (0, 4, 8, 12)
        ]
        assert history_ids(twins.graph, KEPT) == newest_first  # a dry run changes nothing
        zero = run_pass(saver, POLICIES["horizon-0"])
        assert set(zero.deleted) == {("", i) for i in newest_first[1:]}
        assert [(r.checkpoint_id, r.via) for r in zero.roots] == [
            (newest_first[0], tuple(newest_first[1:]))
        ]
        assert twins.state(KEPT, newest_first[0]).parent_config is None
        assert zero.after is not None and zero.after.rows < zero.before.rows


@pytest.mark.parametrize("kind", KINDS)
def test_horizon_keeps_newest_runs_and_makes_a_root(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[0], saver)
        newest_first = history_ids(twins.graph, KEPT)
        report = run_pass(saver, dataclasses.replace(POLICIES["horizon-1"], history_keep_runs=2))
        assert set(report.deleted) == {("", i) for i in newest_first[8:]}
        (root,) = report.roots
        assert root.checkpoint_id == newest_first[7]  # the input checkpoint of turn three
        assert twins.state(KEPT, newest_first[7]).metadata["source"] == "input"


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_younger_than_the_ttl_changes(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[0], saver)
        newest_first = history_ids(twins.graph, KEPT)
        boundary = newest_first[6]  # turn three's first loop checkpoint is just old enough
        now = ts_of(twins, boundary) + HOUR
        young = newest_first[:6]
        parents = {c: twins.state(KEPT, c).parent_config for c in young}
        for policy in POLICIES.values():
            report = run_pass(saver, policy, now=now)
            assert not root_deletions(report) & set(young)
            assert {c: twins.state(KEPT, c).parent_config for c in young} == parents
        kept = history_ids(twins.graph, KEPT)
        assert kept[:6] == young and kept[6] == boundary  # the youngest's parent stays too
        assert integrity(saver, KEPT).clean


DELTA_POLICIES = {
    **POLICIES,
    # keep_latest here without a grace period (as `prune` runs it), replacing POLICIES'.
    "keep-latest": RetentionPolicy(keep_latest=True, history_min_age=timedelta(0)),
}


@pytest.mark.parametrize("with_graph", [True, False], ids=["materialised", "walks-kept"])
@pytest.mark.parametrize("policy_name", sorted(DELTA_POLICIES))
@pytest.mark.parametrize("kind", KINDS)
def test_delta_threads_keep_every_value(
    kind: str, policy_name: str, with_graph: bool, request: pytest.FixtureRequest
) -> None:
    """A DeltaChannel's value is rebuilt from ancestors' writes back to its last stored
    value. After any history pass every kept checkpoint loads the same values and
    `next`, and the thread goes on like its untouched twin: with the graph, the values
    are stored whole at the new root; without it, the walks back stay."""
    with open_sync(kind, request) as saver:
        graph = chat_graph(saver, "delta")
        for thread_id in (KEPT, TWIN):
            for i in range(6):
                graph.invoke(turn(i), thread(thread_id))
        before = {
            s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
            for s in graph.get_state_history(thread(KEPT))
        }
        policy = DELTA_POLICIES[policy_name]
        if with_graph:
            policy = dataclasses.replace(policy, delta_graph=graph)
        report = run_pass(saver, policy)
        # Compaction removes a step only if no kept value is rebuilt from its writes: on
        # SQLite (no shared blobs) every step of these runs is.
        assert report.deleted or (policy_name == "compact" and kind == "sqlite")
        assert set(report.materialised) <= {("", r.checkpoint_id) for r in report.roots}
        if not with_graph:
            assert not report.materialised
        after = {
            s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
            for s in graph.get_state_history(thread(KEPT))
        }
        assert after == {cid: before[cid] for cid in after}
        if with_graph and policy_name in ("horizon-0", "keep-latest"):
            assert len(after) == 1, "stored whole at the head, nothing else is needed"
        for cid in after:  # pinned reads too
            state = graph.get_state(thread(KEPT, cid))
            assert (state.values, state.next) == before[cid]
        assert integrity(saver, KEPT).clean
        for thread_id in (KEPT, TWIN):
            graph.invoke(turn(9), thread(thread_id))
        assert graph.get_state(thread(KEPT)).values == graph.get_state(thread(TWIN)).values


@pytest.mark.parametrize("kind", KINDS)
def test_without_a_snapshot_type_the_walks_stay(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a langgraph-checkpoint with no type to store a DeltaChannel value whole, the
    backend says so with the lineage (`stores_whole`): a horizon with `delta_graph` then
    materialises nothing, and every kept checkpoint loads what it loaded before."""
    for module in ("retaining_saver.backends._sql", "retaining_saver.backends.memory"):
        monkeypatch.setattr(f"{module}.stores_delta_snapshots", lambda: False)
    with open_sync(kind, request) as saver:
        graph = chat_graph(saver, "delta")
        for i in range(6):
            graph.invoke(turn(i), thread(KEPT))
        before = {
            s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
            for s in graph.get_state_history(thread(KEPT))
        }
        policy = dataclasses.replace(DELTA_POLICIES["horizon-0"], delta_graph=graph)
        report = run_pass(saver, policy)
        assert not report.materialised
        after = {
            s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
            for s in graph.get_state_history(thread(KEPT))
        }
        assert after == {cid: before[cid] for cid in after}
        assert integrity(saver, KEPT).clean


@pytest.mark.parametrize("kind", KINDS)
def test_explicit_ids_keep_their_whole_chain(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[0], saver)
        newest_first = history_ids(twins.graph, KEPT)
        pinned = newest_first[8]  # the end of turn two
        policy = dataclasses.replace(
            POLICIES["horizon-0"], protect_checkpoint_ids=frozenset({pinned})
        )
        report = run_pass(saver, policy)
        assert set(report.deleted) == {("", i) for i in newest_first[1:8]}
        assert report.kept[("", pinned)] is Protection.EXPLICIT
        walk = [s.config["configurable"]["checkpoint_id"] for s in _walk(twins, pinned)]
        assert walk == newest_first[8:]
        assert [g.new_parent_id for g in report.grafts] == [pinned]  # the head hangs off it
        assert integrity(saver, KEPT).clean


def _walk(twins: Twins, checkpoint_id: str) -> list[Any]:
    found, state = [], twins.state(KEPT, checkpoint_id)
    while True:
        found.append(state)
        if state.parent_config is None:
            return found
        state = twins.graph.get_state(state.parent_config)


@pytest.mark.parametrize("kind", KINDS)
def test_live_run_and_keep_step_spare_super_steps(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[0], saver)
        spared = RetentionPolicy(
            compact_steps=True, history_min_age=HOUR, keep_step=lambda n: n.metadata["step"] == 5
        )
        report = run_pass(saver, spared, dry_run=True)
        assert ("", _step_id(twins, 5)) not in report.deleted
        assert report.kept[("", _step_id(twins, 5))] is Protection.KEEP_STEP
        assert len(report.deleted) == 3
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[3], saver)  # the head is interrupted: it owns writes
        before = history_ids(twins.graph, KEPT)
        report = run_pass(saver, POLICIES["compact"])
        head_run = before[:4]  # the interrupted step back to its run's input
        assert not root_deletions(report) & set(head_run)
        assert report.kept[("", before[1])] is Protection.LIVE_RUN
        assert root_deletions(report)  # the finished runs are compacted
        assert_like_twin(twins, before, report, SHAPES[3])


def _step_id(twins: Twins, step: int) -> str:
    (found,) = (
        s.config["configurable"]["checkpoint_id"]
        for s in twins.graph.get_state_history(thread(KEPT))
        if s.metadata["step"] == step
    )
    return str(found)


def _subgraph_views(graph: Any, thread_id: str) -> dict[str, Any]:
    """Each root checkpoint's `get_state(subgraphs=True)`: values, next, and each task's
    subgraph state (values, next)."""
    views = {}
    for snapshot in graph.get_state_history(thread(thread_id)):
        cid = snapshot.config["configurable"]["checkpoint_id"]
        full = graph.get_state(thread(thread_id, cid), subgraphs=True)
        tasks = [(t.name, t.state.values if t.state else None) for t in full.tasks]
        views[cid] = (full.values, full.next, tasks)
    return views


@pytest.mark.parametrize("persistent", [True, False], ids=["checkpointer-true", "per-call"])
@pytest.mark.parametrize("policy_name", ["horizon-0", "horizon-1"])
@pytest.mark.parametrize("kind", KINDS)
def test_subgraph_namespaces_go_with_their_root_runs(
    kind: str, policy_name: str, persistent: bool, request: pytest.FixtureRequest
) -> None:
    """A subgraph's checkpoints go with, and only with, the root run they belong to: a
    per-call namespace goes whole with its run; a `checkpointer=True` subgraph keeps its
    head (its memory), what a fork from a kept root checkpoint loads as its memory, and
    whatever belongs to a kept run. Every kept root checkpoint
    shows the same `get_state(subgraphs=True)`, and both threads go on alike."""
    with open_sync(kind, request) as saver:
        graph = subgraph_chat(saver, persistent=persistent)
        for thread_id in (KEPT, TWIN):
            for i in range(4):
                graph.invoke(turn(i), thread(thread_id))
        views = _subgraph_views(graph, KEPT)
        roots = {
            (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]): t.metadata["parents"][
                ""
            ]
            for t in saver.list(thread(KEPT))
            if t.config["configurable"]["checkpoint_ns"]
        }
        report = run_pass(saver, POLICIES[policy_name])
        deleted_roots = {cid for ns, cid in report.deleted if ns == ""}
        subgraph_deleted = {key for key in report.deleted if key[0]}
        assert deleted_roots and subgraph_deleted
        for key in roots:  # with, and only with: but the memory forks from kept turns load
            assert (key in subgraph_deleted) == (roots[key] in deleted_roots) or (
                persistent and (key == max(roots) or report.kept[key] is Protection.FORK_MEMORY)
            ), key
        left = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(thread(KEPT))}
        if persistent:
            assert "inner" in left, "the subgraph's memory stays"
        after = _subgraph_views(graph, KEPT)
        assert after == {cid: view for cid, view in views.items() if cid in after}
        assert integrity(saver, KEPT).clean
        for thread_id in (KEPT, TWIN):
            graph.invoke(turn(9), thread(thread_id))
        mine, twin = (graph.get_state(thread(t), subgraphs=True) for t in (KEPT, TWIN))
        assert mine.values == twin.values


@pytest.mark.parametrize("kind", KINDS)
def test_a_capped_pass_takes_a_stretchs_newest_part(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as saver:
        twins = Twins.write(SHAPES[1], saver)
        before = history_ids(twins.graph, KEPT)
        capped = dataclasses.replace(POLICIES["horizon-2+compact"], max_delete_per_run=3)
        report = run_pass(saver, capped)
        # Each compacted stretch is two super-steps: one fits, and the newest step of the
        # next, its kept child grafted onto the step still to go.
        assert len(report.deleted) == 3 and len(report.grafts) == 2 and not report.roots
        assert Protection.CAPPED in report.kept.values()
        assert_like_twin(twins, before, report, SHAPES[1])


@pytest.mark.parametrize("kind", KINDS)
async def test_async_savers_run_the_history_rules(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as saver:
        graph = chat_graph(saver)
        for thread_id in (KEPT, TWIN):
            for i in range(3):
                await graph.ainvoke(turn(i), thread(thread_id))
        wrapped = RetainingSaver(saver, admission="off")
        policy = POLICIES["horizon-2+compact"]
        report = await wrapped.aenforce_thread_retention(KEPT, policy, now=LATER)
        assert len(report.deleted) == 6 and len(report.roots) == 1 and len(report.grafts) == 2
        assert (await aintegrity(saver, KEPT)).clean
        for thread_id in (KEPT, TWIN):
            await graph.ainvoke(turn(9), thread(thread_id))
        mine, twin = [await graph.aget_state(thread(t)) for t in (KEPT, TWIN)]
        assert mine.values == twin.values


def test_history_rules_need_an_explicit_ttl() -> None:
    with pytest.raises(ValueError, match=r"history_min_age.*docs/rules\.md#too-young"):
        RetentionPolicy(compact_steps=True)
    with pytest.raises(ValueError, match="history_keep_runs"):
        RetentionPolicy(history_keep_runs=3)
    with pytest.raises(ValueError, match="history_keep_runs must be >= 0"):
        RetentionPolicy(history_keep_runs=-1, history_min_age=HOUR)
    with pytest.raises(ValueError, match="keep_step"):
        RetentionPolicy(keep_step=lambda n: True, history_min_age=HOUR)
    with pytest.raises(TypeError, match="history_min_age"):
        RetentionPolicy(compact_steps=True, history_min_age=3600)  # type: ignore[arg-type]
    assert not RetentionPolicy().history_rules


# Properties over random lineages (the generator of tests/engine/test_rules_property.py)

DELTA = "messages"
# A compiled graph as `RetentionPolicy(delta_graph=...)` reads it: its channels.
DELTA_GRAPH = SimpleNamespace(channels={DELTA: DeltaChannel(operator.add)})

HISTORY_POLICIES = st.builds(
    RetentionPolicy,
    history_keep_runs=st.sampled_from([None, 0, 1, 2, 4]),
    compact_steps=st.booleans(),
    keep_latest=st.sampled_from([False, False, False, True]),
    history_min_age=st.sampled_from([timedelta(0), timedelta(minutes=6), timedelta(days=365)]),
    prune_leaf_sibling_branches=st.booleans(),
    graft_duration_links=st.booleans(),
    max_delete_per_run=st.sampled_from([None, None, 1, 3]),
    delta_graph=st.sampled_from([None, DELTA_GRAPH]),
).filter(lambda p: p.history_rules)


@st.composite
def history_scenarios(draw: st.DrawFn, *, branchy: bool = False) -> Scenario:
    """A scenario under a history policy; a third of them a DeltaChannel thread, whose
    `messages` is stored at some checkpoints (snapshots) and rebuilt at the others.
    `branchy`: see `scenarios`."""
    s = draw(scenarios(branchy=branchy))
    policy = dataclasses.replace(
        draw(HISTORY_POLICIES), protect_checkpoint_ids=s.policy.protect_checkpoint_ids
    )
    nodes = dict(s.nodes)
    if nodes and draw(st.integers(0, 2)) == 0:
        counted = draw(st.sets(st.sampled_from(sorted(nodes)), min_size=1, max_size=3))
        for key, node in sorted(nodes.items()):
            delta = {DELTA_METADATA_KEY: {DELTA: [1, 1]}} if key in counted else {}
            snapshot = DELTA in node.channel_versions and draw(st.integers(0, 3)) == 0
            stored = frozenset({DELTA}) if snapshot else frozenset()
            nodes[key] = dataclasses.replace(
                node, metadata={**node.metadata, **delta}, stored=stored
            )
    elif nodes and draw(st.booleans()):
        # Checkpoints written before format 4: all of them, or some.
        every = draw(st.booleans())
        old = set(nodes) if every else draw(st.sets(st.sampled_from(sorted(nodes)), min_size=1))
        for key in old:
            nodes[key] = dataclasses.replace(nodes[key], format_version=3)
    return dataclasses.replace(s, nodes=nodes, full={**s.full, **nodes}, policy=policy)


def carry_out(nodes: Mapping[NodeKey, CheckpointNode], plan: Plan) -> dict[NodeKey, Any]:
    """`Backend.apply_plan` in memory, each step re-checked: the trailing leaves, values
    stored, grafts, roots, then the other deletions."""
    state = dict(nodes)

    def rows(ns: str, ids: list[str]) -> dict[str, CheckpointNode]:
        return {i: state[(ns, i)] for i in ids if (ns, i) in state}

    def delete(d: Deletion) -> None:
        ns = d.checkpoint_ns
        kids = any(n.checkpoint_ns == ns and n.parent_id == d.checkpoint_id for n in state.values())
        in_ns = [i for n, i in state if n == ns]
        runner_up = max((i for i in in_ns if i < d.checkpoint_id), default=None)
        ids = [d.checkpoint_id] + ([d.clone_of] if d.clone_of else [])
        holds = deletion_holds(
            d, rows(ns, ids), has_children=kids, newest_id=max(in_ns), runner_up_id=runner_up
        )
        assert holds, d  # an unchanged lineage: every re-check passes
        del state[(ns, d.checkpoint_id)]

    for d in plan.deletions:
        if d.must_be_head:
            delete(d)
    for stored in plan.materialise:
        key = (stored.checkpoint_ns, stored.checkpoint_id)
        now_stored = (state[key].stored or frozenset()) | set(stored.channels)
        state[key] = dataclasses.replace(state[key], stored=now_stored)
    for graft in plan.grafts:
        ids = [graft.child_id, *graft.via, graft.new_parent_id]
        assert graft_holds(graft, rows(graft.checkpoint_ns, ids)), graft
        key = (graft.checkpoint_ns, graft.child_id)
        state[key] = dataclasses.replace(state[key], parent_id=graft.new_parent_id)
    for root in plan.roots:
        assert root_holds(root, rows(root.checkpoint_ns, [root.checkpoint_id, *root.via])), root
        key = (root.checkpoint_ns, root.checkpoint_id)
        state[key] = dataclasses.replace(state[key], parent_id=None)
    for d in plan.deletions:
        if not d.must_be_head:
            delete(d)
    return state


def _young(s: Scenario, node: CheckpointNode) -> bool:
    min_age = s.policy.history_min_age or timedelta(0)
    return s.now - datetime.fromisoformat(node.ts) < min_age


@SETTINGS
@given(history_scenarios())
def test_history_rules_keep_every_chain_and_protection(s: Scenario) -> None:
    assert_history_plan_keeps_every_chain_and_protection(s)


@SETTINGS
@given(history_scenarios(branchy=True))
def test_history_rules_keep_every_chain_and_protection_on_branchy_threads(s: Scenario) -> None:
    """The same, over several branches of several runs under one checkpoint, each holding
    subgraph memory (`scenarios(branchy=True)`)."""
    assert_history_plan_keeps_every_chain_and_protection(s)


def assert_history_plan_keeps_every_chain_and_protection(s: Scenario) -> None:
    """`s`'s plan, carried out: no survivor dangles or changes its chain but by skipping
    what went; nothing protected, young or holding pending writes goes; namespaces go
    with their runs; forks load the same memory; delta values and pre-v4 sends read
    the same."""
    plan = plan_retention(Lineage.of("thread", s.nodes.values()), s.policy, s.now)
    after = carry_out(s.nodes, plan)
    history = {(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions if d.reason in HISTORY}
    kids = children(s.nodes)
    for key, node in after.items():
        # no survivor dangles; its new chain is its old one with removed checkpoints skipped
        assert (
            node.parent_id is None
            or (key[0], node.parent_id) in after
            or ((key[0], node.parent_id) not in s.nodes)
        ), key
        old_chain = [k for k in ancestors(s.nodes, key) if k in after]
        assert ancestors(after, key) == old_chain[: len(ancestors(after, key))], key
    for key, node in s.nodes.items():
        if key in history:
            assert node.checkpoint_id not in s.policy.protect_checkpoint_ids
            assert not (node.write_count and not kids.get(key)), "pending writes deleted"
            assert not _young(s, node), "a checkpoint inside the TTL deleted"
    history_children = [g.child_id for g in plan.grafts if g.reason in HISTORY]
    history_children += [r.checkpoint_id for r in plan.roots]
    young = {i for (ns, i), n in s.nodes.items() if ns == "" and _young(s, n)}
    assert not young & set(history_children), "a young checkpoint re-parented"
    explicit = {k for k in s.nodes if k[1] in s.policy.protect_checkpoint_ids}
    chains = explicit | {a for k in explicit for a in ancestors(s.nodes, k)}
    assert not chains & history, "an explicit id's chain lost a checkpoint"
    assert not {("", c) for c in history_children} & chains, "an explicit id's chain re-parented"
    assert_namespaces_go_with_their_runs(s, plan, after, history)
    if not s.policy.keep_latest:
        assert_forks_load_the_same_memory(s, after)
    assert_delta_values_unchanged(s, plan, after)
    assert_pre_v4_sends_unchanged(s, after)


def assert_forks_load_the_same_memory(s: Scenario, after: Mapping[NodeKey, CheckpointNode]) -> None:
    """A fork from every surviving root checkpoint loads each `checkpointer=True`
    subgraph's latest checkpoint before its replay bound: the same one as before."""

    def memory(nodes: Mapping[NodeKey, CheckpointNode], key: NodeKey, ns: str) -> str | None:
        bound = replay_bound(nodes[key])
        return max((cid for space, cid in nodes if space == ns and cid < bound), default=None)

    persistent = {ns for ns, _ in s.nodes if ns and ":" not in ns.rsplit("|", 1)[-1]}
    for key in (k for k in after if k[0] == ""):
        for ns in persistent:
            assert memory(after, key, ns) == memory(s.nodes, key, ns), (key, ns)


def assert_pre_v4_sends_unchanged(s: Scenario, after: Mapping[NodeKey, CheckpointNode]) -> None:
    """A surviving checkpoint written before format 4 reads its pending sends from the
    same parent's writes as before, or from no writes before and after."""

    def sends_from(nodes: Mapping[NodeKey, CheckpointNode], key: NodeKey) -> NodeKey | None:
        parent_id = nodes[key].parent_id
        parent = nodes.get((key[0], parent_id)) if parent_id is not None else None
        return (key[0], parent.checkpoint_id) if parent and parent.write_count else None

    for key, node in after.items():
        if node.format_version is not None and node.format_version < 4:
            assert sends_from(after, key) == sends_from(s.nodes, key), f"{key}: sends changed"


def assert_namespaces_go_with_their_runs(
    s: Scenario, plan: Plan, after: Mapping[NodeKey, CheckpointNode], history: set[NodeKey]
) -> None:
    """Each namespace's latest state stays, unless a task namespace went whole with its
    root run; a subgraph checkpoint goes with, and only with, its root checkpoint
    (under keep_latest: every namespace keeps just its head); a root checkpoint a
    surviving subgraph checkpoint names stays, but for a fork's memory."""
    for ns in {k[0] for k in s.nodes}:
        head = max(k for k in s.nodes if k[0] == ns)
        survivors = [k for k in after if k[0] == ns]
        if not survivors:
            assert ns and ":" in ns and head in history, f"{ns} went whole"
            assert ("", _root(s.nodes[head])) in history, f"{ns} went without its root run"
            continue
        same = s.nodes[head].channel_versions == after[max(survivors)].channel_versions
        assert same, f"{ns}: the latest state changed"
    for key in history:
        if key[0] and not s.policy.keep_latest:
            assert ("", _root(s.nodes[key])) in history, f"{key} went without its root"
            assert ":" in key[0] or key != max(k for k in s.nodes if k[0] == key[0]), key
    if not s.policy.keep_latest:
        # What a fork loads as a subgraph's memory keeps no root checkpoint: that one's own
        # fork memory is older still, and so on back to the thread's start.
        named = {
            parent
            for k in after
            if plan.kept.get(k) is not Protection.FORK_MEMORY
            for parent in _named_parents({k: s.nodes[k]})
        }
        assert not named & history, "a root checkpoint a kept subgraph checkpoint names went"


def _root(node: CheckpointNode) -> str:
    return str(dict(node.metadata.get("parents", {})).get(""))


def assert_delta_values_unchanged(
    s: Scenario, plan: Plan, after: Mapping[NodeKey, CheckpointNode]
) -> None:
    """Every survivor rebuilds each delta value from the same rows as before, or stores
    it (materialised, only at a root the pass made, or, capped, at the kept checkpoint
    it grafts onto the stretch's part still to go; only for the graph's channels)."""
    for stored in plan.materialise:
        key = (stored.checkpoint_ns, stored.checkpoint_id)
        assert stored.checkpoint_id in {
            r.checkpoint_id for r in plan.roots if r.checkpoint_ns == key[0]
        } | {g.child_id for g in plan.grafts if g.checkpoint_ns == key[0]}
        assert set(stored.channels) <= s.policy.materializable
    if not any(DELTA_METADATA_KEY in n.metadata for n in s.nodes.values()):
        return
    stored_now = {(m.checkpoint_ns, m.checkpoint_id) for m in plan.materialise}
    for key, node in after.items():
        if DELTA in node.channel_versions and DELTA not in (node.stored or ()):
            # A walk now stops where the value was stored, at the value it had there.
            before = delta_walk(s.nodes, key, stored_now)
            assert delta_walk(after, key, stored_now) == before, f"{key}: value changed"


def delta_walk(
    nodes: Mapping[NodeKey, CheckpointNode], key: NodeKey, stored_at: set[NodeKey] = frozenset()
) -> tuple[list[NodeKey], str | None]:
    """What LangGraph rebuilds `messages` at `key` from: the ancestors whose writes it
    collects, up to the one that stores it (whose stored value, by version, seeds it)
    or has no version of it (nothing above wrote it). Links without writes add nothing.
    `stored_at`: checkpoints that store it now, though they did not."""
    writes: list[NodeKey] = []
    parent_id = nodes[key].parent_id
    while parent_id is not None and (key[0], parent_id) in nodes:
        at = (key[0], parent_id)
        parent = nodes[at]
        if parent.write_count:
            writes.append(at)
        if at in stored_at or DELTA in (parent.stored or ()):
            return (
                writes,
                f"{parent.channel_versions[DELTA]} at {'new' if at in stored_at else 'old'}",
            )
        if DELTA not in parent.channel_versions:
            return writes, None
        parent_id = parent.parent_id
    return writes, None


def _named_parents(nodes: Mapping[NodeKey, CheckpointNode]) -> set[NodeKey]:
    return {
        (ns, cid)
        for n in nodes.values()
        for ns, cid in dict(n.metadata.get("parents", {})).items()
        if ns != n.checkpoint_ns
    }


@SETTINGS
@given(history_scenarios())
def test_every_root_and_graft_closes_a_removed_stretch(s: Scenario) -> None:
    plan = plan_retention(Lineage.of("thread", s.nodes.values()), s.policy, s.now)
    deleted = {(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions}
    for graft in plan.grafts:
        assert {(graft.checkpoint_ns, v) for v in graft.via} <= deleted, graft
    for root in plan.roots:
        assert {(root.checkpoint_ns, v) for v in root.via} <= deleted, root
        assert (root.checkpoint_ns, root.checkpoint_id) not in deleted
    cap = s.policy.max_delete_per_run
    if cap is not None and len(plan.deletions) > cap:
        parents = {(d.checkpoint_ns, d.checkpoint_id): d.parent_id for d in plan.deletions}
        assert cap > 0 and root_chains(deleted, parents) == 1
