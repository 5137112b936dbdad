"""`plan_run_removal` on hand-made lineages: what goes, how what stays is re-linked, and
what is kept because it cannot be proven safe."""

from __future__ import annotations

from test_rules import DURATION, Thread

from retaining_saver._rules import Graft, Lineage, Protection, Reason, Root, plan_run_removal


def of_run(thread: Thread, ids: list[str], run_id: str) -> None:
    """Name `run_id` in the metadata of the checkpoints `ids`, as LangGraph does."""
    for cid in ids:
        thread.change(cid, metadata={**thread.node(cid).metadata, "run_id": run_id})


def test_a_middle_run_goes_and_the_next_is_grafted_onto_the_one_before() -> None:
    t = Thread()
    first = t.run(None)
    middle = t.run(first[-1])
    last = t.run(middle[-1])
    for ids, run_id in ((first, "r1"), (middle, "r2"), (last, "r3")):
        of_run(t, ids, run_id)
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r2"])
    assert [d.checkpoint_id for d in plan.deletions] == sorted(middle, reverse=True)
    assert all(d.reason is Reason.RUN_REMOVED and d.writes_consumed for d in plan.deletions)
    via = tuple(reversed(middle))
    assert plan.grafts == (Graft("", last[0], via, first[-1], Reason.RUN_REMOVED),)
    assert not plan.roots


def test_the_first_run_going_makes_the_next_a_root() -> None:
    t = Thread()
    first = t.run(None)
    second = t.run(first[-1])
    of_run(t, first, "r1")
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r1"])
    assert plan.roots == (Root("", second[0], tuple(reversed(first)), Reason.RUN_REMOVED),)


def test_stacked_stamps_on_a_removed_run_go_with_it_unless_a_run_grew_on_them() -> None:
    t = Thread()
    first = t.run(None)
    last = t.run(first[-1])
    of_run(t, first, "r1")
    of_run(t, last, "r2")
    stamps = [t.leaf(last[-1])]
    stamps.append(t.leaf(stamps[0], metadata=DURATION))
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r2"])
    assert {d.checkpoint_id for d in plan.deletions} == {*last, *stamps}
    assert not plan.grafts and not plan.roots
    grown = t.run(stamps[1])  # a later run (no run id) forked from the stamp
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r2"])
    assert {d.checkpoint_id for d in plan.deletions} == set(last)
    assert plan.grafts == (
        Graft("", stamps[0], tuple(reversed(last)), first[-1], Reason.RUN_REMOVED),
    )
    assert grown[0] not in {d.checkpoint_id for d in plan.deletions}


def test_a_chain_up_to_a_missing_row_is_kept() -> None:
    t = Thread()
    run = t.run("missing-parent")
    after = t.run(run[-1])
    of_run(t, run, "r1")
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r1"])
    assert plan.empty
    assert {plan.kept[("", cid)] for cid in run} == {Protection.FORK_POINT_MISSING}
    assert after


def test_nothing_of_the_runs_plans_nothing() -> None:
    t = Thread()
    of_run(t, t.run(None), "r1")
    assert plan_run_removal(Lineage.of("t", t.nodes.values()), ["r9"]).empty
    assert plan_run_removal(Lineage.of("t", t.nodes.values()), []).empty
