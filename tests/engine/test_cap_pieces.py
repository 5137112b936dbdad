"""Capped passes converge on the lineages random search found stalling (issue #19): a
stretch cut at its oldest end, a piece larger than the cap, and a pass that is its own
fixed point on a DeltaChannel thread. Pure rules, no store."""

from __future__ import annotations

from datetime import timedelta

from test_compaction import DELTA_GRAPH, carry_out
from test_history_promises import COUNT, _capped_passes, d_key
from test_rules import NOW, Thread

from retaining_saver import RetentionPolicy
from retaining_saver._rules import DELTA_METADATA_KEY, Lineage, plan_retention

INPUT = {"source": "input", "step": -1}
HORIZON_0 = RetentionPolicy(history_keep_runs=0, history_min_age=timedelta(0))


def _branched_memory() -> tuple[Thread, dict[str, str]]:
    """Runs forked from one root checkpoint, each calling a `checkpointer=True`
    subgraph (namespace `sub`, one chain across the runs): under N=0 the runs but the
    head's go, with the subgraph checkpoints written under them, except the memory a
    fork from the head loads."""
    thread = Thread()
    ids = {"root": thread.add(None, metadata=INPUT)}
    sub: str | None = None
    for name in ("a", "b", "c", "head"):
        ids[name] = thread.add(ids["root"], metadata=INPUT)
        sub = thread.add(sub, ns="sub", bump=("sub_state",), metadata={"parents": {"": ids[name]}})
        ids[f"sub-{name}"] = sub
    return thread, ids


def test_a_stretch_goes_oldest_end_first_when_its_newest_end_cannot() -> None:
    """The subgraph chain's oldest checkpoints go with their runs, one run a pass: the
    checkpoint after the part becomes the chain's new root. Cut only at its newest end
    (every checkpoint still to go keeping its parent), no part fits a cap of 2."""
    thread, ids = _branched_memory()
    uncapped = {d_key(d) for d in plan_retention(thread.lineage(), HORIZON_0, NOW).deletions}
    assert ("sub", ids["sub-a"]) in uncapped and ("sub", ids["sub-b"]) in uncapped
    first = plan_retention(
        thread.lineage(), RetentionPolicy(**{**_fields(HORIZON_0), "max_delete_per_run": 2}), NOW
    )
    assert first.deletions, "a capped pass made no progress"
    assert all(len(r.via) for r in first.roots)
    deleted, last = _capped_passes(dict(thread.nodes), HORIZON_0, 2)
    assert deleted == uncapped and not last.deferred


def test_a_piece_larger_than_the_cap_goes_whole_when_nothing_else_fits() -> None:
    """A root checkpoint with three subgraph checkpoints under it cannot be split: with a
    cap of 1 the pass deletes the piece whole (4), rather than nothing for ever."""
    thread = Thread()
    old = thread.run(None)
    sub: str | None = None
    for _ in range(3):
        meta = {"parents": {"": old[1]}}
        sub = thread.add(sub, ns="task:1", bump=("task_state",), metadata=meta)
    thread.run(old[-1])
    uncapped = {d_key(d) for d in plan_retention(thread.lineage(), HORIZON_0, NOW).deletions}
    assert {k for k in thread.nodes if k[0] == "task:1"} <= uncapped
    deleted, last = _capped_passes(dict(thread.nodes), HORIZON_0, 1, bound=4)
    assert deleted == uncapped and not last.deferred
    zero = RetentionPolicy(**{**_fields(HORIZON_0), "max_delete_per_run": 0})
    assert not plan_retention(thread.lineage(), zero, NOW).deletions, "a cap of 0 only plans"


def test_the_last_namer_keeps_what_is_above_it_only_up_to_the_line() -> None:
    """keep_latest on a DeltaChannel thread: the branch checkpoint that alone names the
    channel stays, with its parent on the head's line, not the line's older stretch
    (which the next pass, finding the branch kept for its writes, would remove): one
    pass is its own fixed point, and capped passes reach it."""
    thread = Thread()
    a = thread.add(None, metadata=INPUT)
    b = thread.add(a)
    namer = thread.add(b, writes=1, metadata={**INPUT, DELTA_METADATA_KEY: COUNT})
    thread.add(namer)
    c = thread.add(b)
    head = thread.add(c, metadata={"source": "update"})
    for key in thread.nodes:
        thread.change(key[1], stored=frozenset({"messages"}))
    thread.change(head, stored=frozenset())
    policy = RetentionPolicy(keep_latest=True, history_min_age=timedelta(0))
    once = plan_retention(thread.lineage(), policy, NOW)
    assert ("", a) in {d_key(d) for d in once.deletions}
    after = carry_out(thread.nodes, once)
    assert {("", namer), ("", b), ("", c), ("", head)} <= after.keys()
    assert not plan_retention(Lineage.of("thread", after.values()), policy, NOW).deletions
    deleted, _ = _capped_passes(dict(thread.nodes), policy, 1)
    assert deleted == {d_key(d) for d in once.deletions}


def _fields(policy: RetentionPolicy) -> dict[str, object]:
    return {f: getattr(policy, f) for f in ("history_keep_runs", "history_min_age")}


def test_a_value_stored_whole_at_the_new_root_needs_no_namer() -> None:
    """keep_latest with `delta_graph`: the head's DeltaChannel value is stored whole at
    the new root, so no walk needs the subgraph checkpoint that alone still names the
    channel; keeping it (as one pass did) left a second pass with more to delete."""
    thread = Thread()
    top = thread.add(None, metadata={**INPUT, DELTA_METADATA_KEY: COUNT})
    namer = thread.add(None, ns="sub", bump=("sub_state",), metadata={DELTA_METADATA_KEY: COUNT})
    thread.add(namer, ns="sub", bump=("sub_state",), metadata={})
    head = thread.add(thread.add(top))
    for key in thread.nodes:
        thread.change(key[1], ns=key[0], stored=frozenset({"messages"} if not key[0] else ()))
    thread.change(head, stored=frozenset())
    policy = RetentionPolicy(
        keep_latest=True, history_min_age=timedelta(0), delta_graph=DELTA_GRAPH
    )
    once = plan_retention(thread.lineage(), policy, NOW)
    assert [m.checkpoint_id for m in once.materialise] == [head]
    assert ("sub", namer) in {d_key(d) for d in once.deletions}
    after = carry_out(thread.nodes, once)
    assert not plan_retention(Lineage.of("thread", after.values()), policy, NOW).deletions


def test_a_subgraph_namer_is_judged_on_what_the_root_plan_keeps() -> None:
    """The only checkpoint naming `messages` is a task's subgraph checkpoint; the only one
    that rebuilds `messages` is a root branch the pass removes. Judged before the root's
    plan, the namer looked needed and kept its root checkpoint, which a second pass then
    removed: judged on what the root's plan keeps, one pass removes both."""
    thread = Thread()
    top = thread.add(None, metadata=INPUT)
    thread.add(top)
    walker = thread.add(top, metadata=INPUT)
    meta = {"parents": {"": top}, DELTA_METADATA_KEY: COUNT}
    namer = thread.add(None, ns="task:0", bump=("task_state",), metadata=meta)
    thread.add(top, metadata=INPUT)
    for key in thread.nodes:
        thread.change(key[1], ns=key[0], stored=frozenset({"messages"} if not key[0] else ()))
    thread.change(walker, stored=frozenset())
    once = plan_retention(thread.lineage(), HORIZON_0, NOW)
    assert {("", top), ("task:0", namer)} <= {d_key(d) for d in once.deletions}
    after = carry_out(thread.nodes, once)
    assert not plan_retention(Lineage.of("thread", after.values()), HORIZON_0, NOW).deletions


def test_the_piece_past_the_cap_is_the_smallest_with_its_subgraph_checkpoints() -> None:
    """Two removed branches under one root checkpoint, neither of which can be split (each
    checkpoint owns writes its child consumed): one of two root checkpoints with three
    task checkpoints written under it (5 in all), one of three root checkpoints (3). A
    pass that can fit nothing in a cap of 1 deletes the smaller piece, counted with its
    subgraph checkpoints, not the one with fewer root checkpoints."""
    thread = Thread()
    root = thread.add(None, metadata=INPUT)
    heavy = thread.add(root, writes=1, metadata=INPUT)
    heavy_end = thread.add(heavy)
    task: str | None = None
    for _ in range(3):
        task = thread.add(
            task, ns="task:1", bump=("task_state",), metadata={"parents": {"": heavy}}
        )
    light = thread.add(root, writes=1, metadata=INPUT)
    light_end = thread.add(thread.add(light, writes=1))
    thread.add(root, metadata=INPUT)  # the head's run
    capped = RetentionPolicy(**{**_fields(HORIZON_0), "max_delete_per_run": 1})
    first = {d_key(d) for d in plan_retention(thread.lineage(), capped, NOW).deletions}
    assert ("", light_end) in first and len(first) == 3, sorted(first)
    assert ("", heavy_end) not in first
    deleted, last = _capped_passes(dict(thread.nodes), HORIZON_0, 1, bound=5)
    uncapped = {d_key(d) for d in plan_retention(thread.lineage(), HORIZON_0, NOW).deletions}
    assert deleted == uncapped and not last.deferred
