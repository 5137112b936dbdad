"""Property tests of the retention rules: random chat lineages, random policies.

Each example is a thread a chat app could have written: turns of runs, duration
leaves stamped after some turns (sometimes late, after the next run began),
runs continuing from those leaves (links), regenerates forking from older
checkpoints (superseded subtrees), pending writes on leaves, a persistent
subgraph namespace and one-off task namespaces whose checkpoints name root
checkpoints in `metadata["parents"]`, explicit protections and, sometimes, a
row that the lineage load no longer finds. The plan is carried out by an
in-test copy of `Backend.apply_plan` and the outcome is checked. The last
property puts values LangGraph never writes into a few fields (a `ts` that is no
string, metadata of any shape, versions of mixed types) and plans under the
history rules too: the rules must judge such a thread, never raise on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from retaining_saver._rules import (
    CheckpointNode,
    Deletion,
    Graft,
    Lineage,
    NodeKey,
    Plan,
    Reason,
    RetentionPolicy,
    deletion_holds,
    graft_holds,
    plan_retention,
)
from retaining_saver._rules._ages import next_age_crossing

T0 = datetime(2024, 1, 1, tzinfo=UTC)
CHANNELS = ("messages", "context", "__start__")
DURATION: dict[str, Any] = {"source": "update", "run_durations": [1.0], "run_message_ids": ["m"]}
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def has_run_history(node: CheckpointNode) -> bool:
    """A replacement marker rule: any run-history key, whatever the source."""
    return "run_durations" in node.metadata


class Writer:
    """Writes checkpoints as a saver would: time-ordered ids, fresh versions per bump."""

    def __init__(self) -> None:
        self.nodes: dict[NodeKey, CheckpointNode] = {}
        self.count = 0
        self.version = 0

    def add(
        self,
        ns: str,
        parent: str | None,
        bump: Sequence[str] = ("messages",),
        writes: int = 0,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        self.count += 1
        checkpoint_id = f"{self.count:08d}"
        base = self.nodes.get((ns, parent)) if parent is not None else None
        versions = dict(base.channel_versions) if base else {}
        seen = {k: dict(v) for k, v in base.versions_seen.items()} if base else {}
        for channel in bump:
            self.version += 1
            versions[channel] = f"{self.version:05d}"
        if bump:
            seen["agent"] = dict(versions)
        meta = dict(metadata) if metadata is not None else {"source": "loop"}
        ts = (T0 + timedelta(minutes=self.count)).isoformat()
        node = CheckpointNode(ns, checkpoint_id, parent, versions, seen, writes, meta, ts)
        self.nodes[(ns, checkpoint_id)] = node
        return checkpoint_id

    def leaf(self, parent: str, ns: str = "") -> str:
        return self.add(ns, parent, (), 0, DURATION)


@dataclass(frozen=True)
class Scenario:
    """A thread as written (`full`), as the lineage load found it (`nodes`), and a policy."""

    full: Mapping[NodeKey, CheckpointNode]
    nodes: Mapping[NodeKey, CheckpointNode]
    policy: RetentionPolicy
    now: datetime

    def __repr__(self) -> str:
        lines = [f"Scenario(now={self.now.isoformat()}, policy={self.policy!r},"]
        for key, n in sorted(self.full.items()):
            flag = "" if key in self.nodes else "  <missing>"
            lines.append(
                f"  {n.checkpoint_ns or '-':>7} {n.checkpoint_id} <- {n.parent_id} "
                f"v={dict(n.channel_versions)} w={n.write_count} m={dict(n.metadata)}{flag}"
            )
        return "\n".join([*lines, ")"])

    def plan(self) -> Plan:
        return plan_retention(Lineage.of("thread", self.nodes.values()), self.policy, self.now)


def scenario(writer: Writer, policy: RetentionPolicy, missing: Iterable[NodeKey] = ()) -> Scenario:
    gone = set(missing)
    nodes = {k: n for k, n in writer.nodes.items() if k not in gone}
    now = T0 + timedelta(minutes=writer.count + 1)
    return Scenario(dict(writer.nodes), nodes, policy, now)


@st.composite
def scenarios(draw: st.DrawFn, *, branchy: bool = False) -> Scenario:
    """A random thread (see the module's docstring). `branchy`: more turns, a persistent
    subgraph written under most steps, and most turns forked from the first run's
    checkpoints or going on with a branch left behind, so that several branches of
    several runs, their runs interleaved in time, hang from one checkpoint, each holding
    subgraph memory (the shapes capped history passes must split)."""
    w = Writer()
    root: list[str] = []
    first_run: list[str] = []
    sub_tip: str | None = None
    use_sub = branchy or draw(st.booleans())
    late: list[tuple[str, int]] = []
    bases: list[str | None] = []

    def ends() -> list[str]:
        """The root checkpoints nothing was written on: each branch's tip."""
        kids = children(w.nodes)
        return [i for i in root if ("", i) not in kids]

    def stamp(target: str, count: int) -> None:
        for _ in range(count):
            kind = draw(st.integers(0, 9))
            if kind == 0:  # update_state without run history
                target = w.add("", target, (), 0, {"source": "update"})
            elif kind == 1:  # update_state that changed the state
                target = w.add("", target, ("context",), 0, DURATION)
            elif kind == 2:  # run history stamped by a node, not by update_state
                target = w.add("", target, (), 0, {"source": "loop", "run_durations": [2.0]})
            else:
                target = w.leaf(target)
            root.append(target)

    for turn in range(draw(st.integers(3, 8) if branchy else st.integers(1, 5))):
        fork = draw(st.integers(-3 if branchy else 0, 5)) if root else 5
        if fork == -3:  # go on with a branch left behind: branches of interleaved runs
            tip: str | None = draw(st.sampled_from(ends()))
        elif fork < 0:
            tip = draw(st.sampled_from(first_run))  # back to the first run
        elif fork == 0:
            tip = draw(st.sampled_from(root))  # time travel
        elif fork == 1:
            tip = bases[-1]  # regenerate the last answer, from where that run began
        else:
            tip = max(root) if root else None  # continue from the latest
        bases.append(tip)
        run: list[str] = []
        steps = draw(st.integers(1, 4))
        for step in range(steps):
            bump = draw(st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=2, unique=True))
            writes = 0 if step == steps - 1 else draw(st.integers(0, 2))
            meta = {"source": "input" if step == 0 else "loop", "step": step - 1}
            tip = w.add("", tip, bump, writes, meta)
            run.append(tip)
            if use_sub and draw(st.integers(0, 1 if branchy else 2)) == 0:
                for _ in range(draw(st.integers(1, 2))):
                    parents = {"": tip}
                    sub_tip = w.add("sub", sub_tip, ("sub_state",), 0, {"parents": parents})
        root += run
        first_run = first_run or run
        if draw(st.integers(0, 4)) == 0:
            task: str | None = None
            for _ in range(draw(st.integers(1, 2))):
                parents = {"": draw(st.sampled_from(run))}
                task = w.add(f"task:{turn}", task, ("task_state",), 0, {"parents": parents})
        for target, count in late:
            stamp(target, count)
        late = []
        count = draw(st.integers(0, 3))
        if count and draw(st.integers(0, 4)) == 0:
            late.append((run[-1], count))  # the writer stamps it after the next run began
        elif count:
            stamp(run[-1], count)
    for target, count in late:
        stamp(target, count)
    if len(bases) > 1 and draw(st.integers(0, 4)) == 0:
        stamp(draw(st.sampled_from(ends())), 1)  # an old run's stamp arrives last

    kids = children(w.nodes)
    childless = sorted(k for k in w.nodes if not kids.get(k))
    for key in draw(st.sets(st.sampled_from(childless), max_size=2)):
        w.nodes[key] = replace(w.nodes[key], write_count=draw(st.integers(1, 3)))
    ids = sorted({i for _, i in w.nodes})
    protect = draw(st.sets(st.sampled_from([*ids, "99999999"]), max_size=2))
    missing = draw(st.sets(st.sampled_from(sorted(w.nodes)), max_size=2))
    if draw(st.integers(0, 2)):
        missing = set()
    policy = RetentionPolicy(
        trailing_duration_leaves=draw(st.integers(0, 5)) > 0,
        prune_leaf_sibling_branches=draw(st.booleans()),
        sibling_branch_min_age=draw(
            st.sampled_from([None, timedelta(0), timedelta(minutes=8), timedelta(days=365)])
        ),
        graft_duration_links=draw(st.booleans()),
        max_delete_per_run=draw(st.sampled_from([None, None, None, 0, 1, 2, 5])),
        protect_checkpoint_ids=frozenset(protect),
        is_reclaimable_leaf=draw(st.sampled_from([None, None, has_run_history])),
    )
    return scenario(w, policy, missing)


# The model: what must be protected, computed without the planner


def children(nodes: Mapping[NodeKey, CheckpointNode]) -> dict[NodeKey, list[NodeKey]]:
    found: dict[NodeKey, list[NodeKey]] = {}
    for key, node in nodes.items():
        if node.parent_id is not None:
            found.setdefault((node.checkpoint_ns, node.parent_id), []).append(key)
    return found


def ancestors(nodes: Mapping[NodeKey, CheckpointNode], key: NodeKey) -> list[NodeKey]:
    """The parent chain of `key`, nearest first, up to the root or a missing row."""
    found: list[NodeKey] = []
    node = nodes[key]
    while node.parent_id is not None and (node.checkpoint_ns, node.parent_id) in nodes:
        node = nodes[(node.checkpoint_ns, node.parent_id)]
        found.append((node.checkpoint_ns, node.checkpoint_id))
    return found


def descendants(nodes: Mapping[NodeKey, CheckpointNode], key: NodeKey) -> set[NodeKey]:
    kids = children(nodes)
    found: set[NodeKey] = set()
    todo = list(kids.get(key, []))
    while todo:
        k = todo.pop()
        if k not in found:
            found.add(k)
            todo += kids.get(k, [])
    return found


def named_by_other_namespaces(nodes: Mapping[NodeKey, CheckpointNode]) -> set[NodeKey]:
    found: set[NodeKey] = set()
    for node in nodes.values():
        for ns, cid in dict(node.metadata.get("parents", {})).items():
            if ns != node.checkpoint_ns and (ns, cid) in nodes:
                found.add((ns, cid))
    return found


def same_state(a: CheckpointNode, b: CheckpointNode) -> bool:
    return dict(a.channel_versions) == dict(b.channel_versions) and dict(a.versions_seen) == dict(
        b.versions_seen
    )


def newest(nodes: Mapping[NodeKey, CheckpointNode], ns: str) -> NodeKey | None:
    ids = [i for n, i in nodes if n == ns]
    return (ns, max(ids)) if ids else None


def protected(s: Scenario) -> set[NodeKey]:
    """Heads after their trailing leaves, explicit ids, pending writes, subgraph parents."""
    nodes, policy = s.nodes, s.policy
    kids = children(nodes)
    named = named_by_other_namespaces(nodes)
    marker = policy.is_reclaimable_leaf or (
        lambda n: n.metadata.get("source") == "update" and "run_durations" in n.metadata
    )

    def trailing(key: NodeKey, gone: set[NodeKey]) -> bool:
        node = nodes[key]
        parent = nodes.get((key[0], node.parent_id)) if node.parent_id else None
        return (
            policy.trailing_duration_leaves
            and key[1] not in policy.protect_checkpoint_ids
            and key not in named
            and not node.write_count
            and bool(marker(node))
            and parent is not None
            and same_state(node, parent)
            and set(kids.get(key, [])) <= gone
        )

    found = {k for k in nodes if k[1] in policy.protect_checkpoint_ids} | named
    found |= {k for k, n in nodes.items() if n.write_count and not kids.get(k)}
    for ns in {k[0] for k in nodes}:
        head = newest(nodes, ns)
        gone: set[NodeKey] = set()
        while head is not None and trailing(head, gone):
            gone.add(head)
            head = (ns, str(nodes[head].parent_id))
        if head is not None:
            found.add(head)
    return found


# Carrying a plan out


@dataclass
class Outcome:
    after: dict[NodeKey, CheckpointNode]
    regrafted: dict[NodeKey, CheckpointNode]
    grafted: list[Graft]
    dropped: list[Deletion]
    orphaned_at_turn: list[Deletion]


def carry_out(nodes: Mapping[NodeKey, CheckpointNode], plan: Plan) -> Outcome:
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
    regrafted = dict(state)
    dropped: list[Deletion] = []
    orphaned: list[Deletion] = []
    for deletion in plan.deletions:
        ns, checkpoint_id = deletion.checkpoint_ns, deletion.checkpoint_id
        ids = [checkpoint_id] + ([deletion.clone_of] if deletion.clone_of else [])
        kids = any(n.checkpoint_ns == ns and n.parent_id == checkpoint_id for n in state.values())
        if kids:
            orphaned.append(deletion)
        in_ns = [i for n, i in state if n == ns]
        top = max(in_ns, default=None)
        runner_up = max((i for i in in_ns if i < checkpoint_id), default=None)
        holds = deletion_holds(
            deletion, rows(ns, ids), has_children=kids, newest_id=top, runner_up_id=runner_up
        )
        if holds:
            del state[(ns, checkpoint_id)]
        else:
            dropped.append(deletion)
    return Outcome(state, regrafted, grafted, dropped, orphaned)


def keys_of(deletions: Iterable[Deletion]) -> set[NodeKey]:
    return {(d.checkpoint_ns, d.checkpoint_id) for d in deletions}


def blob_keys(nodes: Iterable[CheckpointNode]) -> set[tuple[str, str, str]]:
    return {(n.checkpoint_ns, c, v) for n in nodes for c, v in n.channel_versions.items()}


# Hand-made examples of the bugs the random search also finds


def late_stamp() -> Scenario:
    """The duration leaf of turn one is stamped after a regenerate wrote newer checkpoints."""
    w = Writer()
    start = w.add("", None, ("__start__",), 1, {"source": "input"})
    end = w.add("", w.add("", start, writes=1))
    w.add("", w.add("", start, ("context",), 1))
    w.leaf(end)
    return scenario(w, RetentionPolicy())


def link_with_superseded_child() -> Scenario:
    """A run answered from a duration leaf, then regenerated from the same leaf."""
    w = Writer()
    start = w.add("", None, ("__start__",), 1, {"source": "input"})
    link = w.leaf(w.add("", start))
    w.add("", w.add("", link, ("__start__",), 1, {"source": "input"}))
    w.add("", w.add("", link, ("__start__",), 1, {"source": "input"}))
    policy = RetentionPolicy(prune_leaf_sibling_branches=True, graft_duration_links=True)
    return scenario(w, policy)


def missing_rows_in_many_namespaces() -> Scenario:
    """Ten namespaces, each with a chain whose middle row is missing and a superseded leaf."""
    w = Writer()
    missing: list[NodeKey] = []
    for n in range(10):
        ns = f"ns{n}" if n else ""
        a = w.add(ns, None, ("__start__",))
        b = w.add(ns, a)
        c = w.add(ns, b)
        d = w.add(ns, c)
        w.add(ns, d)  # superseded
        w.add(ns, d)  # head
        missing.append((ns, c))
    return scenario(w, RetentionPolicy(prune_leaf_sibling_branches=True), missing)


def missing_row_under_a_subgraph_parent() -> Scenario:
    """The head's chain misses a row; the chain's first checkpoint is a subgraph parent."""
    w = Writer()
    a = w.add("", None, ("__start__",))
    b = w.add("", a)
    c = w.add("", b)
    w.add("", w.add("", c))
    w.add("sub", None, ("sub_state",), 0, {"parents": {"": a}})
    return scenario(w, RetentionPolicy(prune_leaf_sibling_branches=True), [("", c)])


def missing_row_under_an_old_answer() -> Scenario:
    """An old answer's middle row is missing; its last checkpoint is kept, fork point unproven."""
    w = Writer()
    root = w.add("", None, ("__start__",))
    older = w.add("", root)
    gone = w.add("", older)
    w.add("", gone)
    w.add("", w.add("", root))
    return scenario(w, RetentionPolicy(prune_leaf_sibling_branches=True), [("", gone)])


def missing_row_under_a_link() -> Scenario:
    """A run from a duration link lost a row; the link also parents the current run."""
    w = Writer()
    start = w.add("", None, ("__start__",))
    link = w.leaf(start)
    gone = w.add("", link)
    w.add("", gone)
    w.add("", link)
    return scenario(w, RetentionPolicy(graft_duration_links=True), [("", gone)])


# Properties


@SETTINGS
@given(scenarios())
def test_plan_keeps_every_live_state(s: Scenario) -> None:
    plan = s.plan()
    planned = keys_of(plan.deletions)
    # (a) nothing protected is deleted or skipped by a graft
    must_stay = protected(s)
    assert not must_stay & planned, f"protected checkpoints deleted: {must_stay & planned}"
    skipped_all = {(g.checkpoint_ns, v) for g in plan.grafts for v in g.via}
    assert not must_stay & skipped_all
    assert planned <= set(s.nodes)
    assert not planned & keys_of(plan.deferred)

    out = carry_out(s.nodes, plan)
    assert set(s.nodes) - set(out.after) == planned - keys_of(out.dropped)
    # grafts only skip links whose state is the new parent's and that own no writes
    for graft in out.grafted:
        ns = graft.checkpoint_ns
        target = s.nodes[(ns, graft.new_parent_id)]
        for link_id in graft.via:
            link = s.nodes[(ns, link_id)]
            assert not link.write_count and same_state(link, target), graft
            assert (ns, link_id) in planned, graft
    # (b) every survivor keeps its whole chain, grafts aside; no new dangling parent
    for key, node in out.after.items():
        assert ancestors(out.after, key) == ancestors(out.regrafted, key), key
        if node.parent_id is not None and (key[0], node.parent_id) not in out.after:
            assert (key[0], node.parent_id) not in s.nodes, f"{key} now dangles"
    # (c) writes only go with a subtree that is gone entirely
    kids = children(s.nodes)
    for key, node in s.nodes.items():
        if node.write_count and key not in out.after:
            (deletion,) = (d for d in plan.deletions if (d.checkpoint_ns, d.checkpoint_id) == key)
            assert deletion.reason is Reason.SUPERSEDED_BRANCH and deletion.writes_consumed
            assert kids.get(key), f"{key} owned pending writes"
            assert not descendants(s.nodes, key) & set(out.after), key
    # (f) no freed blob is referenced by a survivor, and each one was a deleted node's
    freed = set(plan.freed_blobs)
    assert not freed & blob_keys(out.after.values())
    assert freed <= blob_keys(s.nodes[k] for k in planned)


@SETTINGS
@given(scenarios())
@example(late_stamp())
def test_latest_state_is_unchanged(s: Scenario) -> None:
    # (d) each namespace's latest checkpoint still holds the state its old latest held
    out = carry_out(s.nodes, s.plan())
    for ns in {k[0] for k in s.nodes}:
        old, new = newest(s.nodes, ns), newest(out.after, ns)
        assert old is not None and new is not None, ns
        assert same_state(s.nodes[old], out.after[new]), f"{ns}: latest {old} -> {new}"


@SETTINGS
@given(scenarios())
@example(link_with_superseded_child())
def test_deletions_run_children_first(s: Scenario) -> None:
    # (e) on an unchanged lineage every graft holds and every deletion finds no child
    plan = s.plan()
    out = carry_out(s.nodes, plan)
    assert out.grafted == list(plan.grafts)
    assert not out.orphaned_at_turn, f"deleted while a child remains: {out.orphaned_at_turn}"
    assert not out.dropped


@SETTINGS
@given(scenarios())
@example(missing_rows_in_many_namespaces())
def test_subtrees_with_a_missing_fork_point_stay(s: Scenario) -> None:
    plan = s.plan()
    branch = {
        (d.checkpoint_ns, d.checkpoint_id): d
        for d in plan.deletions
        if d.reason is Reason.SUPERSEDED_BRANCH
    }
    for key in branch:
        top = key
        while (top[0], s.nodes[top].parent_id) in branch:
            top = (top[0], str(s.nodes[top].parent_id))
        fork = s.nodes[top].parent_id
        assert fork is not None and (top[0], fork) in s.nodes, f"{key}: fork point unproven"


@SETTINGS
@given(scenarios())
@example(missing_row_under_a_subgraph_parent())
@example(missing_row_under_an_old_answer())
@example(missing_row_under_a_link())
def test_a_missing_row_hides_no_ancestor(s: Scenario) -> None:
    # No checkpoint that really is an ancestor of a survivor goes, except grafted links.
    out = carry_out(s.nodes, s.plan())
    really = dict(s.full)
    for graft in out.grafted:
        key = (graft.checkpoint_ns, graft.child_id)
        really[key] = replace(really[key], parent_id=graft.new_parent_id)
    for key in out.after:
        lost = [k for k in ancestors(really, key) if k in s.nodes and k not in out.after]
        assert not lost, f"{key} lost its ancestors {lost}"


# Fields that LangGraph never writes so: the rules judge them, never raise on them

ODD_VALUES: tuple[Any, ...] = (None, 1, 2.5, -1, 10**20, True, "", "x", "not a time", [], {})
"""What a hand-made checkpoint (app code's own `put`, a row another tool wrote) may hold
where LangGraph writes a time, a step, a source, a run id or a map."""

HASHABLE_ODD_VALUES = tuple(v for v in ODD_VALUES if not isinstance(v, list | dict))
"""The odd values a channel's version may hold here. A list or dict version makes a pass
fail (its blobs are keyed by version), which deletes nothing: safe, and counted."""

ODD_METADATA_KEYS = ("step", "source", "parents", "run_id", "run_durations")


def with_odd_field(node: CheckpointNode, data: st.DataObject) -> CheckpointNode:
    """`node` with one field, or one entry of its maps, holding an odd value."""
    field = data.draw(st.sampled_from(["ts", "metadata", "a parent", "version", "seen"]))
    if field == "ts":
        return replace(node, ts=data.draw(st.sampled_from(ODD_VALUES)))
    if field == "metadata":
        key = data.draw(st.sampled_from(ODD_METADATA_KEYS))
        return replace(
            node, metadata={**node.metadata, key: data.draw(st.sampled_from(ODD_VALUES))}
        )
    if field == "a parent":
        parents = {"": data.draw(st.sampled_from(ODD_VALUES))}
        return replace(node, metadata={**node.metadata, "parents": parents})
    channel = data.draw(st.sampled_from(sorted(node.channel_versions) or ["messages"]))
    version = data.draw(st.sampled_from(HASHABLE_ODD_VALUES))
    if field == "version":
        return replace(node, channel_versions={**node.channel_versions, channel: version})
    return replace(node, versions_seen={**node.versions_seen, "agent": {channel: version}})


ODD_FIELD_POLICIES = (
    {},
    {"history_keep_runs": 0, "history_min_age": timedelta(0)},
    {"history_keep_runs": 1, "history_min_age": timedelta(0)},
    {"history_keep_runs": 2, "history_min_age": timedelta(minutes=5)},
    {"history_keep_runs": 3, "compact_steps": True, "history_min_age": timedelta(0)},
    {"compact_steps": True, "history_min_age": timedelta(minutes=3)},
    {"keep_latest": True, "history_min_age": timedelta(0)},
)


@SETTINGS
@given(scenarios(), st.data())
def test_the_rules_judge_a_thread_with_odd_fields_and_never_raise(
    s: Scenario, data: st.DataObject
) -> None:
    """A pass that raised on such a checkpoint would fail on every admission (logged once,
    counted), and its thread would never be bounded again. Whatever the fields hold, the
    plan deletes only rows it read, and no row that owns writes but a consumed branch's."""
    nodes = dict(s.nodes)
    assume(nodes)
    for key in data.draw(st.lists(st.sampled_from(sorted(nodes)), min_size=1, max_size=3)):
        nodes[key] = with_odd_field(nodes[key], data)
    cap = s.policy.max_delete_per_run or None  # 0 is refused in a policy with history rules
    extra = data.draw(st.sampled_from(ODD_FIELD_POLICIES))
    policy = replace(s.policy, max_delete_per_run=cap, **extra)
    lineage = Lineage.of("thread", nodes.values())
    plan = plan_retention(lineage, policy, s.now)
    next_age_crossing(lineage, policy, s.now)
    assert keys_of(plan.deletions) <= set(nodes)
    for deletion in plan.deletions:
        if nodes[(deletion.checkpoint_ns, deletion.checkpoint_id)].write_count:
            assert deletion.writes_consumed, deletion
