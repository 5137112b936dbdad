"""Unit tests of the pure retention rules, on hand-made lineages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from retaining_saver._rules import (
    CheckpointNode,
    Deletion,
    Graft,
    Lineage,
    NodeKey,
    Plan,
    Protection,
    Reason,
    RetentionPolicy,
    Skip,
    deletion_holds,
    graft_holds,
    is_clone,
    is_duration_marker,
    leaf_skip,
    plan_retention,
    untaken_skip,
)
from retaining_saver._rules._leaf import _parse_ts

T0 = datetime(2024, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=30)
DURATION: dict[str, Any] = {"source": "update", "run_durations": [1.5], "step": 9}


class Thread:
    """Builds one thread's lineage a checkpoint at a time; ids and ts follow creation order."""

    def __init__(self) -> None:
        self.nodes: dict[NodeKey, CheckpointNode] = {}
        self._count = 0
        self._version = 0

    def add(
        self,
        parent: str | None,
        *,
        ns: str = "",
        bump: Sequence[str] = ("messages",),
        writes: int = 0,
        metadata: Mapping[str, Any] | None = None,
        ts: datetime | None = None,
    ) -> str:
        """A checkpoint on `parent` that bumps the channels in `bump` (none: a clone)."""
        self._count += 1
        checkpoint_id = f"{self._count:08d}"
        base = self.nodes.get((ns, parent)) if parent is not None else None
        versions = dict(base.channel_versions) if base else {}
        seen = {k: dict(v) for k, v in base.versions_seen.items()} if base else {}
        for channel in bump:
            self._version += 1
            versions[channel] = f"{self._version:04d}"
        if bump:
            seen["agent"] = dict(versions)
        meta = {"source": "loop", "step": self._count} if metadata is None else dict(metadata)
        stamp = (ts or T0 + timedelta(minutes=self._count)).isoformat()
        node = CheckpointNode(ns, checkpoint_id, parent, versions, seen, writes, meta, stamp)
        self.nodes[(ns, checkpoint_id)] = node
        return checkpoint_id

    def run(
        self,
        parent: str | None,
        steps: int = 3,
        *,
        ns: str = "",
        parents: Mapping[str, str] | None = None,
        ts: datetime | None = None,
    ) -> list[str]:
        """One run: an input checkpoint then loop steps; all but the last own consumed writes."""
        ids: list[str] = []
        for step in range(steps):
            meta: dict[str, Any] = {"source": "input" if step == 0 else "loop", "step": step - 1}
            if parents is not None:
                meta["parents"] = dict(parents)
            parent = self.add(
                parent,
                ns=ns,
                bump=("__start__",) if step == 0 else ("messages",),
                writes=0 if step == steps - 1 else 1,
                metadata=meta,
                ts=ts,
            )
            ids.append(parent)
        return ids

    def leaf(self, parent: str, *, ns: str = "", **kwargs: Any) -> str:
        """A duration leaf: a clone of `parent` stamped with run history."""
        kwargs.setdefault("metadata", DURATION)
        return self.add(parent, ns=ns, bump=(), **kwargs)

    def node(self, checkpoint_id: str, ns: str = "") -> CheckpointNode:
        return self.nodes[(ns, checkpoint_id)]

    def change(self, checkpoint_id: str, *, ns: str = "", **changes: Any) -> None:
        self.nodes[(ns, checkpoint_id)] = replace(self.nodes[(ns, checkpoint_id)], **changes)

    def drop(self, checkpoint_id: str, ns: str = "") -> None:
        del self.nodes[(ns, checkpoint_id)]

    def lineage(self) -> Lineage:
        return Lineage.of("thread", self.nodes.values())

    def plan(self, now: datetime = NOW, /, **policy: Any) -> Plan:
        return plan_retention(self.lineage(), RetentionPolicy(**policy), now)


def chat(turns: int, leaves: int = 1) -> tuple[Thread, list[list[str]], list[list[str]]]:
    """A chat thread: each run continues from the previous turn's stacked duration leaves."""
    thread = Thread()
    runs: list[list[str]] = []
    stamps: list[list[str]] = []
    tip: str | None = None
    for _ in range(turns):
        runs.append(thread.run(tip))
        tip = runs[-1][-1]
        stamps.append([])
        for _ in range(leaves):
            tip = thread.leaf(tip)
            stamps[-1].append(tip)
    return thread, runs, stamps


def deleted(plan: Plan) -> list[str]:
    return [d.checkpoint_id for d in plan.deletions]


def apply(
    nodes: Mapping[NodeKey, CheckpointNode], plan: Plan
) -> tuple[dict[NodeKey, CheckpointNode], list[Deletion], list[Graft]]:
    """What `Backend.apply_plan` does: grafts, then deletions in order, each re-checked."""
    state = dict(nodes)

    def rows(ns: str, ids: Sequence[str]) -> dict[str, CheckpointNode]:
        return {i: state[(ns, i)] for i in ids if (ns, i) in state}

    grafted: list[Graft] = []
    for graft in plan.grafts:
        ns = graft.checkpoint_ns
        if graft_holds(graft, rows(ns, [graft.child_id, *graft.via, graft.new_parent_id])):
            key = (ns, graft.child_id)
            state[key] = replace(state[key], parent_id=graft.new_parent_id)
            grafted.append(graft)
    dropped: list[Deletion] = []
    for deletion in plan.deletions:
        ns, checkpoint_id = deletion.checkpoint_ns, deletion.checkpoint_id
        ids = [checkpoint_id] + ([deletion.clone_of] if deletion.clone_of else [])
        kids = any(n.checkpoint_ns == ns and n.parent_id == checkpoint_id for n in state.values())
        in_ns = [i for n, i in state if n == ns]
        newest = max(in_ns, default=None)
        runner_up = max((i for i in in_ns if i < checkpoint_id), default=None)
        holds = deletion_holds(
            deletion, rows(ns, ids), has_children=kids, newest_id=newest, runner_up_id=runner_up
        )
        if holds:
            del state[(ns, checkpoint_id)]
        else:
            dropped.append(deletion)
    return state, dropped, grafted


def chain(nodes: Mapping[NodeKey, CheckpointNode], checkpoint_id: str, ns: str = "") -> list[str]:
    """`checkpoint_id` and its ancestors, nearest first, up to a missing row or the root."""
    found: list[str] = []
    node = nodes.get((ns, checkpoint_id))
    while node is not None:
        found.append(node.checkpoint_id)
        node = nodes.get((ns, node.parent_id)) if node.parent_id is not None else None
    return found


def latest(nodes: Mapping[NodeKey, CheckpointNode], ns: str = "") -> CheckpointNode:
    return nodes[(ns, max(i for n, i in nodes if n == ns))]


# Trailing leaves and duration links


def test_default_deletes_only_the_trailing_leaf_and_protects_links() -> None:
    thread, runs, stamps = chat(3)
    (l1,), (l2,), (l3,) = stamps
    plan = thread.plan()

    assert plan.deletions == (
        Deletion("", l3, runs[2][-1], Reason.TRAILING_DURATION_LEAF, runs[2][-1], True, False),
    )
    assert plan.grafts == ()
    assert plan.deferred == ()
    assert plan.heads == {"": l3}
    expected = dict.fromkeys([(("", i)) for run in runs for i in run], Protection.ANCESTOR)
    expected[("", runs[2][-1])] = Protection.HEAD
    expected[("", l1)] = expected[("", l2)] = Protection.DURATION_LINK
    assert plan.kept == expected
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert set(after) == set(thread.nodes) - {("", l3)}


def test_graft_deletes_links_and_reparents_their_children() -> None:
    thread, runs, stamps = chat(3)
    (l1,), (l2,), (l3,) = stamps
    plan = thread.plan(graft_duration_links=True)

    assert deleted(plan) == [l3, l2, l1]
    assert [d.reason for d in plan.deletions] == [
        Reason.TRAILING_DURATION_LEAF,
        Reason.GRAFTED_DURATION_LINK,
        Reason.GRAFTED_DURATION_LINK,
    ]
    links = plan.deletions[1:]
    assert [(d.clone_of, d.must_be_head) for d in links] == [
        (runs[1][-1], False),
        (runs[0][-1], False),
    ]
    assert set(plan.grafts) == {
        Graft("", runs[2][0], (l2,), runs[1][-1]),
        Graft("", runs[1][0], (l1,), runs[0][-1]),
    }
    after, dropped, grafted = apply(thread.nodes, plan)
    assert not dropped
    assert set(grafted) == set(plan.grafts)
    assert chain(after, runs[2][-1]) == [i for run in reversed(runs) for i in reversed(run)]
    assert latest(after).channel_versions == thread.node(l3).channel_versions


def test_stacked_links_are_skipped_by_one_graft_nearest_first() -> None:
    thread = Thread()
    first = thread.run(None)
    lower = thread.leaf(first[-1])
    upper = thread.leaf(lower)
    second = thread.run(upper)

    default = thread.plan()
    assert default.deletions == ()
    assert default.kept[("", lower)] == default.kept[("", upper)] == Protection.DURATION_LINK

    plan = thread.plan(graft_duration_links=True)
    assert deleted(plan) == [upper, lower]
    assert plan.grafts == (Graft("", second[0], (upper, lower), first[-1]),)
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert chain(after, second[-1]) == [*reversed(second), *reversed(first)]


def test_stacked_trailing_leaves_all_go_with_the_default_engine() -> None:
    thread = Thread()
    run = thread.run(None)
    stack = [thread.leaf(run[-1])]
    for _ in range(2):
        stack.append(thread.leaf(stack[-1]))
    plan = thread.plan()

    assert deleted(plan) == stack[::-1]
    assert all(d.must_be_head and d.reason is Reason.TRAILING_DURATION_LEAF for d in plan.deletions)
    assert [d.clone_of for d in plan.deletions] == [*stack[-2::-1], run[-1]]
    assert plan.kept[("", run[-1])] == Protection.HEAD
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert latest(after).checkpoint_id == run[-1]
    assert thread.plan(trailing_duration_leaves=False).deletions == ()


def test_a_leaf_something_names_as_parent_is_never_trailing() -> None:
    """Even when ids are out of order (an imported thread), a parent is not a leaf."""
    for stacked in (False, True):
        thread = Thread()
        run = thread.run(None)
        lower = thread.leaf(run[-1])
        upper = thread.leaf(lower) if stacked else None
        early = replace(thread.node(lower), checkpoint_id="00000000", parent_id=lower)
        thread.nodes[("", early.checkpoint_id)] = early
        plan = thread.plan()
        assert deleted(plan) == ([upper] if upper else [])
        assert plan.kept[("", lower)] == Protection.HEAD


UPDATE_SHAPES: dict[str, Callable[[Thread, str], str]] = {
    "update-without-run-history": lambda t, p: t.add(
        p, bump=(), metadata={"source": "update", "step": 3}
    ),
    "update-with-run-history-versions-bumped": lambda t, p: t.add(
        p, bump=("messages",), metadata=DURATION
    ),
    "update-with-run-history-new-channel": lambda t, p: t.add(
        p, bump=("extra",), metadata=DURATION
    ),
    "loop-with-run-history": lambda t, p: t.add(
        p, bump=(), metadata={"source": "loop", "run_durations": [1.0]}
    ),
    "input-with-run-history": lambda t, p: t.add(
        p, bump=(), metadata={"source": "input", "run_message_ids": ["m"]}
    ),
}


@pytest.mark.parametrize("shape", sorted(UPDATE_SHAPES))
def test_update_state_shaped_checkpoint_is_never_taken(shape: str) -> None:
    thread = Thread()
    run = thread.run(None)
    head = UPDATE_SHAPES[shape](thread, run[-1])
    everything = {"graft_duration_links": True, "prune_leaf_sibling_branches": True}
    for policy in ({}, everything):
        plan = thread.plan(**policy)
        assert plan.deletions == ()
        assert plan.kept[("", head)] == Protection.HEAD
    link = UPDATE_SHAPES[shape](thread, head)
    after = thread.run(link)
    plan = thread.plan(**everything)
    assert plan.deletions == ()
    assert plan.grafts == ()
    assert plan.kept[("", link)] == Protection.ANCESTOR
    assert plan.kept[("", after[-1])] == Protection.HEAD


def test_the_same_shape_as_a_duration_leaf_is_taken() -> None:
    """The control for the update-shaped cases: only the marker and the clone differ."""
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    assert is_duration_marker(thread.node(head))
    assert deleted(thread.plan()) == [head]


def test_duration_leaf_whose_state_differs_from_its_parent_is_kept() -> None:
    for field_name in ("channel_versions", "versions_seen"):
        thread = Thread()
        run = thread.run(None)
        head = thread.leaf(run[-1])
        node = thread.node(head)
        changes: dict[str, Any] = {field_name: {**getattr(node, field_name), "messages": "9999"}}
        thread.nodes[("", head)] = replace(node, **changes)
        assert not is_clone(thread.node(head), thread.node(run[-1]))
        plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
        assert plan.deletions == ()
        assert plan.kept[("", head)] == Protection.HEAD


@pytest.mark.parametrize("change", ["extra-key", "missing-key"])
def test_versions_are_compared_as_whole_maps(change: str) -> None:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    versions = dict(thread.node(head).channel_versions)
    assert versions == thread.node(run[-1]).channel_versions
    if change == "extra-key":
        versions["extra"] = "0001"
    else:
        del versions["__start__"]
    thread.change(head, channel_versions=versions)
    assert not is_clone(thread.node(head), thread.node(run[-1]))
    assert thread.plan().deletions == ()


def test_is_clone_needs_the_named_parent_in_the_same_namespace() -> None:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    node, parent = thread.node(head), thread.node(run[-1])
    assert is_clone(node, parent)
    assert not is_clone(replace(node, parent_id=run[0]), parent)
    assert not is_clone(node, replace(parent, checkpoint_ns="sub"))


def test_is_clone_fails_closed_on_an_unloaded_stored_fact() -> None:
    """`stored` None means not loaded: it never matches a loaded set, empty or not."""
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    node, parent = thread.node(head), thread.node(run[-1])
    loaded, unloaded = replace(parent, stored=frozenset()), replace(node, stored=None)
    assert not is_clone(unloaded, loaded)
    assert not is_clone(replace(node, stored=frozenset()), replace(parent, stored=None))
    assert is_clone(replace(node, stored=frozenset()), loaded)


def test_is_clone_fails_closed_on_an_unloaded_format_version() -> None:
    """`format_version` None means not loaded: it is not taken as current, so it never
    matches a loaded format; and a clone has its parent's format (below 4 its pending
    sends are read from its parent's writes)."""
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    node, parent = thread.node(head), thread.node(run[-1])
    current = replace(parent, format_version=4)
    assert not is_clone(replace(node, format_version=None), current)
    assert not is_clone(replace(node, format_version=4), replace(parent, format_version=None))
    assert not is_clone(replace(node, format_version=3), current)
    assert is_clone(replace(node, format_version=4), current)


def test_duration_leaf_with_writes_is_kept_as_pending_writes() -> None:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1], writes=1)
    assert leaf_skip(thread.node(head), RetentionPolicy(), frozenset()) is Skip.OWNS_WRITES
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    assert plan.deletions == ()
    assert plan.kept[("", head)] == Protection.PENDING_WRITES


def test_link_with_writes_is_not_grafted() -> None:
    thread = Thread()
    first = thread.run(None)
    link = thread.leaf(first[-1], writes=2)
    second = thread.run(link)
    plan = thread.plan(graft_duration_links=True)
    assert plan.deletions == ()
    assert plan.grafts == ()
    assert plan.kept[("", link)] == Protection.ANCESTOR
    assert plan.kept[("", second[-1])] == Protection.HEAD


# Namespaces


def persistent_subgraph() -> tuple[Thread, list[str], list[str], list[str]]:
    """A root chat whose runs each call a persistent subgraph ("sub") twice.

    The subgraph's checkpoints continue one chain and carry `parents[""]`; the
    root keeps going after the subgraph finishes, so the subgraph's head has
    an older id than the root's.
    """
    thread = Thread()
    root: list[str] = []
    sub: list[str] = []
    tip: str | None = None
    sub_tip: str | None = None
    for _ in range(2):
        start = thread.add(tip, bump=("__start__",), writes=1, metadata={"source": "input"})
        call = thread.add(start, writes=1)
        for _ in range(2):
            meta = {"source": "loop", "parents": {"": call}}
            sub_tip = thread.add(sub_tip, ns="sub", bump=("sub_state",), metadata=meta)
            sub.append(sub_tip)
        end = thread.add(call)
        root += [start, call, end]
        tip = thread.leaf(end)
    return thread, root, sub, [root[1], root[4]]


def test_each_namespace_keeps_its_own_head() -> None:
    thread, root, sub, _ = persistent_subgraph()
    assert max(sub) < max(root)
    plan = thread.plan(
        prune_leaf_sibling_branches=True,
        graft_duration_links=True,
        sibling_branch_min_age=timedelta(0),
    )
    assert plan.heads == {"": thread.lineage().heads()[""], "sub": sub[-1]}
    assert plan.kept[("sub", sub[-1])] == Protection.HEAD
    assert all(plan.kept[("sub", i)] == Protection.ANCESTOR for i in sub[:-1])
    assert [d.checkpoint_ns for d in plan.deletions] == ["", ""]
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert chain(after, sub[-1], "sub") == sub[::-1]


def test_subgraph_parents_are_kept() -> None:
    thread, _, _, called = persistent_subgraph()
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    assert all(plan.kept[("", i)] == Protection.SUBGRAPH_PARENT for i in called)


def test_off_chain_checkpoint_named_by_a_subgraph_is_kept() -> None:
    thread = Thread()
    first = thread.run(None)
    thread.run(first[0])  # regenerate: first[1:] is superseded
    policy = {"prune_leaf_sibling_branches": True}
    assert set(deleted(thread.plan(**policy))) == set(first[1:])

    thread.add(None, ns="sub", metadata={"source": "loop", "parents": {"": first[1]}})
    plan = thread.plan(**policy)
    assert deleted(plan) == [first[2]]
    assert plan.kept[("", first[1])] == Protection.SUBGRAPH_PARENT


def test_duration_leaf_named_by_a_subgraph_is_kept() -> None:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    thread.add(None, ns="sub", metadata={"source": "loop", "parents": {"": head}})
    plan = thread.plan()
    assert ("", head) not in {(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions}
    assert plan.kept[("", head)] == Protection.SUBGRAPH_PARENT


# Superseded subtrees


def superseded() -> tuple[Thread, list[str], dict[str, str]]:
    """A chat whose second turn was answered twice; the first answer is superseded.

    The superseded subtree branches inside (an edit and re-run from its second
    step) and ends in a duration leaf; its interior nodes own consumed writes.
    Returns the current chain and the subtree's ids by role.
    """
    thread = Thread()
    first = thread.run(None)
    link = thread.leaf(first[-1])
    x1 = thread.add(first[-1], bump=("__start__",), writes=1, metadata={"source": "input"})
    x2 = thread.add(x1, writes=2)
    x3 = thread.add(x2)
    x_leaf = thread.leaf(x3)
    y1 = thread.add(x2, writes=1)
    y2 = thread.add(y1)
    second = thread.run(link)
    current = [*first, link, *second]
    return thread, current, {"x1": x1, "x2": x2, "x3": x3, "xl": x_leaf, "y1": y1, "y2": y2}


def assert_children_first(nodes: Mapping[NodeKey, CheckpointNode], plan: Plan) -> None:
    position = {(d.checkpoint_ns, d.checkpoint_id): i for i, d in enumerate(plan.deletions)}
    for key, node in nodes.items():
        parent = (node.checkpoint_ns, node.parent_id)
        if key in position and parent in position:
            assert position[key] < position[parent], f"{parent} deleted before its child {key}"


def test_superseded_subtree_is_kept_when_branch_pruning_is_off() -> None:
    thread, _, subtree = superseded()
    plan = thread.plan()
    assert plan.deletions == ()
    assert all(plan.kept[("", i)] == Protection.NOT_ENABLED for i in subtree.values())


def test_branch_pruning_deletes_the_whole_subtree_children_first() -> None:
    thread, current, subtree = superseded()
    plan = thread.plan(prune_leaf_sibling_branches=True)

    assert sorted(deleted(plan)) == sorted(subtree.values())
    assert all(d.reason is Reason.SUPERSEDED_BRANCH for d in plan.deletions)
    assert all(d.parent_id == thread.node(d.checkpoint_id).parent_id for d in plan.deletions)
    assert all(d.clone_of is None and not d.must_be_head for d in plan.deletions)
    consumed = {d.checkpoint_id for d in plan.deletions if d.writes_consumed}
    assert consumed == {subtree["x1"], subtree["x2"], subtree["y1"]}
    assert_children_first(thread.nodes, plan)
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert set(after) == {("", i) for i in current}
    assert chain(after, current[-1]) == current[::-1]


def test_branch_pruning_keeps_the_path_to_pending_writes() -> None:
    thread, _, subtree = superseded()
    thread.change(subtree["y2"], write_count=1)
    plan = thread.plan(prune_leaf_sibling_branches=True)

    assert sorted(deleted(plan)) == sorted([subtree["x3"], subtree["xl"]])
    assert plan.kept[("", subtree["y2"])] == Protection.PENDING_WRITES
    for role in ("y1", "x2", "x1"):
        assert plan.kept[("", subtree[role])] == Protection.ANCESTOR


def test_ttl_keeps_a_subtree_whose_newest_checkpoint_is_young() -> None:
    thread = Thread()
    main = thread.run(None)
    old = thread.run(main[0], 2)
    young = thread.run(main[0], 2)
    thread.change(young[-1], ts=(NOW - timedelta(hours=1)).isoformat())
    head = thread.run(main[-1])[-1]
    ttl = timedelta(days=1)

    plan = thread.plan(prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
    assert sorted(deleted(plan)) == sorted(old)
    assert all(plan.kept[("", i)] == Protection.TOO_YOUNG for i in young)
    assert plan.kept[("", head)] == Protection.HEAD

    later = thread.plan(NOW + ttl, prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
    assert sorted(deleted(later)) == sorted(old + young)
    for age in (None, timedelta(0)):
        plan = thread.plan(prune_leaf_sibling_branches=True, sibling_branch_min_age=age)
        assert sorted(deleted(plan)) == sorted(old + young)


def test_ttl_keeps_a_subtree_with_an_unreadable_timestamp() -> None:
    thread = Thread()
    main = thread.run(None)
    branch = thread.run(main[0], 2)
    thread.run(main[-1])
    thread.change(branch[0], ts="not a timestamp")
    ttl = timedelta(minutes=1)
    plan = thread.plan(prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
    assert plan.deletions == ()
    assert plan.kept[("", branch[0])] == Protection.TOO_YOUNG


@pytest.mark.parametrize(
    "stamp", ["not a timestamp", "", None, 1733500000, ["2024-12-06T00:00:00+00:00"]]
)
def test_a_time_that_names_no_moment_parses_to_none_every_time(stamp: Any) -> None:
    # Times are parsed once and kept (`_leaf._parse_ts`): what is no string (a list
    # cannot even be kept) names no moment all the same, never an error.
    assert _parse_ts(stamp) is None
    assert _parse_ts(stamp) is None


def test_a_parsed_time_is_the_same_moment_each_time() -> None:
    naive = NOW.replace(tzinfo=None).isoformat()
    assert _parse_ts(naive) == NOW == _parse_ts(naive)
    assert _parse_ts(NOW.isoformat()) == NOW


@pytest.mark.parametrize("stamp", [None, 1733500000])
def test_sibling_branches_whose_time_is_no_string_are_judged_not_raised(stamp: Any) -> None:
    # A hand-made checkpoint's time may be no string: the branches are ordered as if it
    # were missing, and judged of unknown age, where a plan once raised comparing them.
    thread = Thread()
    main = thread.run(None)
    first = thread.run(main[0], 2)
    second = thread.run(main[0], 2)
    thread.run(main[-1])
    thread.change(first[-1], ts=stamp)
    plan = thread.plan(prune_leaf_sibling_branches=True)
    assert sorted(deleted(plan)) == sorted(first + second)
    ttl = timedelta(minutes=1)
    plan = thread.plan(prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
    assert plan.kept[("", first[-1])] == Protection.TOO_YOUNG


def test_ttl_takes_naive_times_as_utc() -> None:
    thread = Thread()
    main = thread.run(None)
    branch = thread.run(main[0], 2)
    thread.run(main[-1])
    thread.change(branch[-1], ts=(NOW - timedelta(hours=1)).replace(tzinfo=None).isoformat())
    ttl = timedelta(days=1)
    for now in (NOW, NOW.replace(tzinfo=None)):
        plan = thread.plan(now, prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
        assert plan.deletions == ()
        assert all(plan.kept[("", i)] == Protection.TOO_YOUNG for i in branch)
        later = now + ttl
        plan = thread.plan(later, prune_leaf_sibling_branches=True, sibling_branch_min_age=ttl)
        assert sorted(deleted(plan)) == sorted(branch)


def test_subtree_whose_fork_point_row_is_missing_is_kept() -> None:
    thread = Thread()
    main = thread.run(None, 4)
    branch = thread.run(main[1], 3)
    thread.run(main[-1])
    thread.drop(branch[0])
    plan = thread.plan(prune_leaf_sibling_branches=True)
    assert plan.deletions == ()
    assert all(plan.kept[("", i)] == Protection.FORK_POINT_MISSING for i in branch[1:])


# Missing rows


def rich() -> Thread:
    """Links, stacked trailing leaves, a superseded subtree, pending writes, a subgraph."""
    thread, runs, stamps = chat(3)
    branch = thread.run(runs[1][1], 2)
    thread.add(branch[-1], writes=1)
    thread.run(runs[0][-1], 2)
    thread.add(None, ns="sub", metadata={"source": "loop", "parents": {"": runs[2][1]}})
    thread.leaf(stamps[-1][-1])
    return thread


POLICIES: list[dict[str, Any]] = [
    {},
    {"trailing_duration_leaves": False},
    {"graft_duration_links": True, "prune_leaf_sibling_branches": True},
    {
        "graft_duration_links": True,
        "prune_leaf_sibling_branches": True,
        "sibling_branch_min_age": timedelta(days=1),
        "max_delete_per_run": 2,
    },
    {"prune_leaf_sibling_branches": True, "is_reclaimable_leaf": lambda n: True},
]


@pytest.mark.parametrize("policy", range(len(POLICIES)))
def test_a_missing_row_never_raises(policy: int) -> None:
    for ns, missing in rich().nodes:
        thread = rich()
        thread.drop(missing, ns)
        plan = thread.plan(**POLICIES[policy])
        after, _, _ = apply(thread.nodes, plan)
        assert set(after) <= set(thread.nodes)


def test_a_missing_ancestor_row_keeps_everything_above_it() -> None:
    thread, runs, stamps = chat(3)
    thread.drop(runs[1][0])
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    above = [*runs[0], stamps[0][0]]
    assert all(plan.kept[("", i)] == Protection.FORK_POINT_MISSING for i in above)
    assert deleted(plan) == [stamps[2][0], stamps[1][0]]
    assert plan.kept[("", runs[1][2])] == Protection.ANCESTOR


def test_a_duration_leaf_whose_parent_row_is_missing_is_kept() -> None:
    thread, runs, stamps = chat(2)
    thread.drop(runs[1][-1])
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    assert stamps[1][0] not in deleted(plan)
    assert plan.kept[("", stamps[1][0])] == Protection.HEAD
    # The step below the missing row owns writes and now looks childless: pending.
    assert plan.kept[("", runs[1][1])] == Protection.PENDING_WRITES
    assert all(("", i) in plan.kept for i in runs[0])


def test_a_link_whose_parent_row_is_missing_is_kept() -> None:
    thread, runs, stamps = chat(2)
    thread.drop(runs[0][-1])
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    assert deleted(plan) == [stamps[1][0]]
    assert plan.grafts == ()
    assert plan.kept[("", stamps[0][0])] == Protection.ANCESTOR
    assert all(("", i) in plan.kept for i in runs[0][:-1])


def test_fork_point_verdicts_follow_their_own_subtree() -> None:
    """Ten namespaces, each: a chain whose middle row is missing, and a superseded leaf."""
    thread = Thread()
    unproven: set[NodeKey] = set()
    for n in range(10):
        ns = f"ns{n}" if n else ""
        upper = [thread.add(None, ns=ns, bump=("__start__",))]
        for _ in range(2):
            upper.append(thread.add(upper[-1], ns=ns))
        lower = thread.add(upper[-1], ns=ns)
        thread.add(lower, ns=ns)  # superseded
        thread.add(lower, ns=ns)  # head
        thread.drop(upper[-1], ns)
        unproven |= {(ns, i) for i in upper[:-1]}
    plan = thread.plan(prune_leaf_sibling_branches=True)
    assert not unproven & {(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions}
    assert all(plan.kept[key] == Protection.FORK_POINT_MISSING for key in unproven)


def test_a_missing_ancestor_row_keeps_the_chain_above_it_under_a_protected_root() -> None:
    thread = Thread()
    chain_ids = [thread.add(None, bump=("__start__",))]
    for _ in range(4):
        chain_ids.append(thread.add(chain_ids[-1]))
    thread.add(None, ns="sub", metadata={"source": "loop", "parents": {"": chain_ids[0]}})
    thread.drop(chain_ids[2])
    plan = thread.plan(prune_leaf_sibling_branches=True)
    assert plan.kept[("", chain_ids[0])] == Protection.SUBGRAPH_PARENT
    assert plan.deletions == ()  # chain_ids[1] may well be chain_ids[3]'s grandparent


def test_a_subtree_with_a_missing_fork_point_keeps_its_unseen_ancestors() -> None:
    thread = Thread()
    root = thread.add(None, bump=("__start__",))
    older = thread.add(root)  # an earlier answer ...
    gone = thread.add(older)  # ... whose next row the load no longer finds ...
    orphan = thread.add(gone)  # ... and whose last checkpoint is kept, unproven
    thread.add(thread.add(root))  # the current answer
    thread.drop(gone)
    plan = thread.plan(prune_leaf_sibling_branches=True)
    assert plan.kept[("", orphan)] == Protection.FORK_POINT_MISSING
    assert older not in deleted(plan)  # it may be `gone`'s parent: the orphan's grandparent


def test_a_link_above_a_missing_row_is_not_grafted() -> None:
    thread = Thread()
    start = thread.add(None, bump=("__start__",))
    link = thread.leaf(start)
    gone = thread.add(link)  # an answer from the link whose row the load no longer finds
    orphan = thread.add(gone)
    thread.add(link)  # the current answer, also from the link
    thread.drop(gone)
    plan = thread.plan(graft_duration_links=True)
    assert plan.kept[("", orphan)] == Protection.FORK_POINT_MISSING
    assert link not in deleted(plan)  # it may be `gone`'s parent: the orphan's grandparent
    assert plan.grafts == ()


# Explicit protection, caps, validation


def test_protected_ids_keep_themselves_and_their_ancestors() -> None:
    thread, _, subtree = superseded()
    head = thread.leaf(thread.lineage().heads()[""])
    keep = frozenset({subtree["y1"], head})
    plan = thread.plan(prune_leaf_sibling_branches=True, protect_checkpoint_ids=keep)
    assert plan.kept[("", subtree["y1"])] == Protection.EXPLICIT
    assert plan.kept[("", head)] == Protection.EXPLICIT
    assert plan.kept[("", subtree["x2"])] == Protection.ANCESTOR
    assert plan.kept[("", subtree["x1"])] == Protection.ANCESTOR
    gone = sorted(deleted(plan))
    assert gone == sorted([subtree["x3"], subtree["xl"], subtree["y2"]])
    unprotected = thread.plan(prune_leaf_sibling_branches=True)
    assert set(keep) <= set(deleted(unprotected))


def test_protected_link_is_not_grafted() -> None:
    thread, _, stamps = chat(3)
    link = stamps[0][0]
    plan = thread.plan(graft_duration_links=True, protect_checkpoint_ids=frozenset({link}))
    assert link not in deleted(plan)
    assert plan.kept[("", link)] == Protection.EXPLICIT
    assert all(link not in g.via for g in plan.grafts)
    assert stamps[1][0] in deleted(plan)


def capped() -> Thread:
    """Stacked trailing leaves, grafted links and two superseded subtrees, none off a link."""
    thread, runs, stamps = chat(2)
    thread.run(runs[1][1], 2)
    thread.run(runs[0][0], 3)
    third = thread.run(stamps[1][0])
    thread.leaf(thread.leaf(third[-1]))
    return thread


CAPPED_POLICY: dict[str, Any] = {"graft_duration_links": True, "prune_leaf_sibling_branches": True}


def test_cap_zero_plans_only() -> None:
    thread = capped()
    full = thread.plan(**CAPPED_POLICY)
    assert len(full.deletions) == 9
    plan = thread.plan(max_delete_per_run=0, **CAPPED_POLICY)
    assert plan.empty
    assert plan.deletions == () and plan.grafts == () and plan.freed_blobs == ()
    assert plan.deferred == full.deletions
    for d in full.deletions:
        assert plan.kept[(d.checkpoint_ns, d.checkpoint_id)] == Protection.CAPPED


def test_every_cap_takes_a_children_first_prefix() -> None:
    thread = capped()
    full = thread.plan(**CAPPED_POLICY)
    assert_children_first(thread.nodes, full)
    for cap in range(len(full.deletions) + 2):
        plan = thread.plan(max_delete_per_run=cap, **CAPPED_POLICY)
        assert plan.deletions == full.deletions[:cap]
        assert plan.deferred == full.deletions[cap:]
        taken = set(deleted(plan))
        assert all(set(g.via) <= taken for g in plan.grafts)
        after, dropped, grafted = apply(thread.nodes, plan)
        assert not dropped, f"cap={cap} dropped {dropped}"
        assert grafted == list(plan.grafts)
        assert latest(after).channel_versions == latest(thread.nodes).channel_versions


def test_cap_of_one_takes_the_newest_trailing_leaf() -> None:
    thread = capped()
    head = thread.lineage().heads()[""]
    plan = thread.plan(max_delete_per_run=1, **CAPPED_POLICY)
    assert deleted(plan) == [head]


@pytest.mark.parametrize(
    ("field_name", "value"),
    [("max_delete_per_run", -1), ("sibling_branch_min_age", timedelta(seconds=-1))],
)
def test_negative_limits_are_rejected(field_name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field_name):
        RetentionPolicy(**{field_name: value})


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("trailing_duration_leaves", 1),
        ("trailing_duration_leaves", "yes"),
        ("prune_leaf_sibling_branches", None),
        ("graft_duration_links", 0),
        ("max_delete_per_run", True),
        ("max_delete_per_run", 1.5),
        ("max_delete_per_run", "3"),
        ("sibling_branch_min_age", 60),
        ("sibling_branch_min_age", "1d"),
        ("protect_checkpoint_ids", "00000001"),
        ("protect_checkpoint_ids", b"00000001"),
        ("protect_checkpoint_ids", [1]),
        ("protect_checkpoint_ids", [["00000001"]]),
        ("is_reclaimable_leaf", "marker"),
        ("protect_checkpoint_ids", None),
        ("protect_checkpoint_ids", 5),
    ],
)
def test_wrong_types_raise_type_error_naming_the_field(field_name: str, value: Any) -> None:
    with pytest.raises(TypeError, match=field_name):
        RetentionPolicy(**{field_name: value})


def test_protect_checkpoint_ids_accepts_any_collection() -> None:
    policy = RetentionPolicy(protect_checkpoint_ids=["a", "b"])  # type: ignore[arg-type]
    assert policy.protect_checkpoint_ids == frozenset({"a", "b"})


def test_protect_checkpoint_ids_from_a_generator_still_protects() -> None:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    policy = RetentionPolicy(protect_checkpoint_ids=(i for i in [head]))  # type: ignore[arg-type]
    assert policy.protect_checkpoint_ids == frozenset({head})
    assert plan_retention(thread.lineage(), policy, NOW).deletions == ()


def test_empty_lineage_gives_an_empty_plan() -> None:
    everything = RetentionPolicy(
        prune_leaf_sibling_branches=True, graft_duration_links=True, max_delete_per_run=3
    )
    for policy in (RetentionPolicy(), everything):
        plan = plan_retention(Lineage.of("thread", []), policy, NOW)
        assert plan.empty
        assert plan == Plan()


# Blobs


def versions_of(nodes: Mapping[NodeKey, CheckpointNode]) -> set[tuple[str, str, str]]:
    return {(ns, ch, v) for (ns, _), n in nodes.items() for ch, v in n.channel_versions.items()}


def test_duration_leaves_and_links_free_no_blob() -> None:
    thread, _, _ = chat(3, leaves=2)
    plan = thread.plan(graft_duration_links=True)
    assert len(plan.deletions) == 6
    gone = {
        (d.checkpoint_ns, d.checkpoint_id): thread.nodes[(d.checkpoint_ns, d.checkpoint_id)]
        for d in plan.deletions
    }
    assert versions_of(gone)  # they do name blobs: every one of them is their parent's
    assert plan.freed_blobs == ()


def test_superseded_subtree_frees_only_what_no_survivor_references() -> None:
    thread, _, subtree = superseded()
    plan = thread.plan(prune_leaf_sibling_branches=True)
    gone = {("", i) for i in subtree.values()}
    survivors = {k: n for k, n in thread.nodes.items() if k not in gone}
    dead = versions_of({k: thread.nodes[k] for k in gone}) - versions_of(survivors)
    assert set(plan.freed_blobs) == dead
    x1, x2, y2 = (thread.node(subtree[role]) for role in ("x1", "x2", "y2"))
    owned = {
        ("", "__start__", x1.channel_versions["__start__"]),
        ("", "messages", x2.channel_versions["messages"]),
        ("", "messages", y2.channel_versions["messages"]),
    }
    assert owned <= set(plan.freed_blobs)
    # x1 bumped only __start__: its messages version is the fork point's, which survives.
    shared = ("", "messages", x1.channel_versions["messages"])
    assert shared in versions_of({("", subtree["x1"]): x1})
    assert shared not in plan.freed_blobs


# Custom marker


def test_is_reclaimable_leaf_replaces_the_marker_but_not_clone_or_writes() -> None:
    def marked(node: CheckpointNode) -> bool:
        return node.metadata.get("marker") is True

    shapes: dict[str, tuple[dict[str, Any], bool]] = {
        "marked-clone": ({"metadata": {"source": "loop", "marker": True}}, True),
        "marked-with-writes": ({"metadata": {"marker": True}, "writes": 1}, False),
        "marked-not-a-clone": ({"metadata": {"marker": True}, "bump": ("messages",)}, False),
        "duration-leaf-unmarked": ({"metadata": DURATION}, False),
    }
    for name, (kwargs, taken) in shapes.items():
        thread = Thread()
        run = thread.run(None)
        kwargs.setdefault("bump", ())
        head = thread.add(run[-1], **kwargs)
        plan = thread.plan(is_reclaimable_leaf=marked)
        assert (deleted(plan) == [head]) is taken, name
        if not taken:
            assert plan.deletions == (), name


# Re-checks at apply time


def leaf_deletion_rows() -> tuple[Deletion, dict[str, CheckpointNode]]:
    thread = Thread()
    run = thread.run(None)
    head = thread.leaf(run[-1])
    (deletion,) = thread.plan().deletions
    return deletion, {head: thread.node(head), run[-1]: thread.node(run[-1])}


def _bump(node: CheckpointNode) -> CheckpointNode:
    return replace(node, channel_versions={**node.channel_versions, "messages": "9999"})


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        ("none", True),
        ("child-appeared", False),
        ("writes-appeared", False),
        ("parent-changed", False),
        ("no-longer-head", False),
        ("newer-branch-below-it", False),
        ("nothing-below-it", False),
        ("leaf-state-changed", False),
        ("parent-state-changed", False),
        ("parent-gone", False),
        ("row-gone", False),
    ],
)
def test_deletion_holds(change: str, holds: bool) -> None:
    deletion, rows = leaf_deletion_rows()
    leaf, parent = deletion.checkpoint_id, str(deletion.clone_of)
    has_children, newest = False, leaf
    runner_up: str | None = parent
    if change == "child-appeared":
        has_children = True
    elif change == "writes-appeared":
        rows[leaf] = replace(rows[leaf], write_count=1)
    elif change == "parent-changed":
        rows[leaf] = replace(rows[leaf], parent_id="00000000")
    elif change == "no-longer-head":
        newest = "99999999"
    elif change == "newer-branch-below-it":
        runner_up = f"{int(parent) + 1:08d}"  # removing the leaf would make that the latest
    elif change == "nothing-below-it":
        runner_up = None
    elif change == "leaf-state-changed":
        rows[leaf] = _bump(rows[leaf])
    elif change == "parent-state-changed":
        rows[parent] = _bump(rows[parent])
    elif change == "parent-gone":
        del rows[parent]
    elif change == "row-gone":
        del rows[leaf]
    verdict = deletion_holds(
        deletion, rows, has_children=has_children, newest_id=newest, runner_up_id=runner_up
    )
    assert verdict is holds


@pytest.mark.parametrize(
    ("leaf_row", "parent_row", "skip"),
    [
        ("as-judged", "clone", Skip.PRECONDITION_CHANGED),
        ("as-judged", "state-differs", Skip.PARENT_STATE_DIFFERS),
        ("as-judged", "not-its-parent", Skip.PARENT_STATE_DIFFERS),
        ("as-judged", "gone", Skip.MISSING_PARENT),
        ("gone", "gone", Skip.PRECONDITION_CHANGED),
        ("changed", "state-differs", Skip.PRECONDITION_CHANGED),
        ("judged-parentless", "gone", Skip.MISSING_PARENT),
        ("judged-parentless-changed", "gone", Skip.MISSING_PARENT),
    ],
)
def test_untaken_skip_is_told_from_the_rows_read(
    leaf_row: str, parent_row: str, skip: Skip
) -> None:
    """A guarded take that took nothing: the parent row says why while the leaf is as
    judged; a leaf gone or rewritten meanwhile says the thread changed; a leaf judged
    without a parent never had one."""
    deletion, found = leaf_deletion_rows()
    leaf, parent = found[deletion.checkpoint_id], found[str(deletion.clone_of)]
    if leaf_row.startswith("judged-parentless"):
        leaf = replace(leaf, parent_id=None)
    read = {
        "clone": parent,
        "state-differs": _bump(parent),
        "not-its-parent": replace(parent, checkpoint_id="00000000"),
        "gone": None,
    }[parent_row]
    as_judged = leaf_row in ("as-judged", "judged-parentless")
    assert untaken_skip(leaf, read, leaf_as_judged=as_judged) is skip


def test_deletion_holds_for_consumed_writes_only() -> None:
    thread, _, subtree = superseded()
    plan = thread.plan(prune_leaf_sibling_branches=True)
    by_id = {d.checkpoint_id: d for d in plan.deletions}
    interior, leaf = by_id[subtree["x2"]], by_id[subtree["x3"]]
    assert interior.writes_consumed and not leaf.writes_consumed
    x2, x3 = thread.node(subtree["x2"]), thread.node(subtree["x3"])
    assert deletion_holds(interior, {x2.checkpoint_id: x2}, has_children=False, newest_id=None)
    assert deletion_holds(leaf, {x3.checkpoint_id: x3}, has_children=False, newest_id=None)
    moved = replace(x3, parent_id=subtree["x1"])
    assert not deletion_holds(leaf, {x3.checkpoint_id: moved}, has_children=False, newest_id=None)
    x3 = replace(x3, write_count=1)
    assert not deletion_holds(leaf, {x3.checkpoint_id: x3}, has_children=False, newest_id=None)
    assert not deletion_holds(interior, {x2.checkpoint_id: x2}, has_children=True, newest_id=None)


def graft_rows() -> tuple[Graft, dict[str, CheckpointNode]]:
    thread = Thread()
    first = thread.run(None)
    lower = thread.leaf(first[-1])
    upper = thread.leaf(lower)
    thread.run(upper)
    (graft,) = thread.plan(graft_duration_links=True).grafts
    ids = [graft.child_id, *graft.via, graft.new_parent_id]
    return graft, {i: thread.node(i) for i in ids}


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        ("none", True),
        ("nearest-link-got-writes", False),
        ("farthest-link-got-writes", False),
        ("link-state-changed", False),
        ("new-parent-state-changed", False),
        ("child-moved", False),
        ("child-gone", False),
        ("link-gone", False),
        ("new-parent-gone", False),
    ],
)
def test_graft_holds(change: str, holds: bool) -> None:
    graft, rows = graft_rows()
    child, nearest, farthest, parent = graft.child_id, *graft.via, graft.new_parent_id
    if change == "nearest-link-got-writes":
        rows[nearest] = replace(rows[nearest], write_count=1)
    elif change == "farthest-link-got-writes":
        rows[farthest] = replace(rows[farthest], write_count=1)
    elif change == "link-state-changed":
        rows[farthest] = _bump(rows[farthest])
    elif change == "new-parent-state-changed":
        rows[parent] = _bump(rows[parent])
    elif change == "child-moved":
        rows[child] = replace(rows[child], parent_id=parent)
    elif change == "child-gone":
        del rows[child]
    elif change == "link-gone":
        del rows[farthest]
    elif change == "new-parent-gone":
        del rows[parent]
    assert graft_holds(graft, rows) is holds


# Ordering and the latest state


def test_link_with_a_superseded_child_goes_after_it() -> None:
    thread = Thread()
    first = thread.run(None)
    link = thread.leaf(first[-1])
    attempt = thread.run(link, 2)  # answered once ...
    again = thread.run(link, 2)  # ... and regenerated from the same duration leaf
    plan = thread.plan(graft_duration_links=True, prune_leaf_sibling_branches=True)
    assert sorted(deleted(plan)) == sorted([link, *attempt])
    assert plan.grafts == (Graft("", again[0], (link,), first[-1]),)
    assert_children_first(thread.nodes, plan)
    after, dropped, _ = apply(thread.nodes, plan)
    assert not dropped
    assert chain(after, again[-1]) == [*reversed(again), *reversed(first)]


def test_removing_a_trailing_leaf_keeps_the_latest_state() -> None:
    thread = Thread()
    first = thread.run(None)
    other = thread.run(first[0], 2)  # a newer branch, written before the leaf was stamped
    stamp = thread.leaf(first[-1])
    assert latest(thread.nodes).checkpoint_id == stamp
    plan = thread.plan()
    after, _, _ = apply(thread.nodes, plan)
    assert latest(after).channel_versions == thread.node(stamp).channel_versions, (
        f"latest became {latest(after).checkpoint_id} (branch {other}), deleted {deleted(plan)}"
    )
