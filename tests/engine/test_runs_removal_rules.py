"""`plan_run_removal` on hand-made lineages: what goes, how what stays is re-linked, and
what is kept because it cannot be proven safe."""

from __future__ import annotations

from test_rules import DURATION, Thread

from retaining_saver._rules import (
    Graft,
    Lineage,
    Protection,
    Reason,
    Restoring,
    Resumption,
    Root,
    later_writes,
    plan_run_removal,
    restorations,
    resumed_points,
)


def of_run(thread: Thread, ids: list[str], run_id: str) -> None:
    """Name `run_id` in the metadata of the checkpoints `ids`, as LangGraph does."""
    for cid in ids:
        thread.change(cid, metadata={**thread.node(cid).metadata, "run_id": run_id})


def three_runs() -> tuple[Thread, list[list[str]]]:
    """A thread of three runs one after another, `r1` to `r3`, and each run's ids."""
    t = Thread()
    runs = [t.run(None)]
    runs.append(t.run(runs[0][-1]))
    runs.append(t.run(runs[1][-1]))
    for i, ids in enumerate(runs, 1):
        of_run(t, ids, f"r{i}")
    return t, runs


def test_a_middle_run_goes_and_the_next_is_grafted_onto_the_one_before() -> None:
    t, (first, middle, last) = three_runs()
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


NULL = "00000000-0000-0000-0000-000000000000"


def test_the_writes_a_resume_left_are_the_commands_answers_and_rerun_tasks() -> None:
    """On the checkpoint an earlier run stopped at: its finished task (`done`), its
    interrupt and its error stay; the `Command`'s writes, every `__resume__` write and the
    writes of the tasks that ran again (`asked`, `failed`) go."""
    rows = [
        (NULL, "__resume__", -4),
        (NULL, "notes", 0),
        ("asked", "__interrupt__", -3),
        ("asked", "__resume__", -4),
        ("asked", "said", 1),
        ("done", "said", 0),
        ("failed", "__error__", -1),
        ("failed", "said", 0),
    ]
    assert later_writes(rows, "loop") == [
        (NULL, -4),
        (NULL, 0),
        ("asked", -4),
        ("asked", 1),
        ("failed", 0),
    ]
    assert later_writes([("asked", "__interrupt__", -3), ("done", "said", 0)], "loop") == []


def test_on_a_loops_checkpoint_no_task_stopped_at_every_write_is_later() -> None:
    """The earlier run stopped before the step (a static breakpoint): it ran no task, so
    every write is a later run's; `update_state`'s checkpoint owns its pushes, and a
    checkpoint of another source is judged by the markers alone."""
    rows = [("b", "said", 0), ("b", "branch:to:c", 1), (NULL, "__resume__", -4)]
    for source in ("loop", "input", "fork", "update"):
        assert later_writes(rows, source) == [("b", 0), ("b", 1), (NULL, -4)]
    assert later_writes([*rows, ("u", "__pregel_push", 0)], "update") == later_writes(rows, "loop")
    assert later_writes(rows, "other") == later_writes(rows, None) == [(NULL, -4)]


def test_only_a_checkpoint_the_removal_leaves_childless_is_cleaned() -> None:
    t = Thread()
    asked = t.run(None)
    resumed = t.run(asked[-1])
    of_run(t, asked, "r1")
    of_run(t, resumed, "r2")
    lineage = Lineage.of("t", t.nodes.values())
    plan = plan_run_removal(lineage, ["r2"])
    gone = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
    assert resumed_points(lineage, gone, plan.grafts, ["r2"]) == (("", asked[-1]),)
    assert resumed_points(lineage, gone, plan.grafts, ["r1", "r2"]) == ()  # its own run goes
    later = t.run(resumed[-1])  # a run after the resume stays: it is grafted on
    of_run(t, later, "r3")
    lineage = Lineage.of("t", t.nodes.values())
    plan = plan_run_removal(lineage, ["r2"])
    gone = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
    assert plan.grafts and resumed_points(lineage, gone, plan.grafts, ["r2"]) == ()
    branch = t.run(asked[-1])  # a kept child of its own
    of_run(t, branch, "r4")
    lineage = Lineage.of("t", t.nodes.values())
    plan = plan_run_removal(lineage, ["r2", "r3"])
    gone = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
    assert resumed_points(lineage, gone, plan.grafts, ["r2", "r3"]) == ()


def test_a_kept_pre_v4_checkpoint_keeps_the_parent_it_reads_its_sends_from() -> None:
    t, (first, middle, last) = three_runs()
    for cid in last:
        t.change(cid, format_version=3)
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r2"])
    assert plan.grafts  # no writes on either side: nothing to read, the graft holds
    t.change(middle[-1], write_count=1)
    plan = plan_run_removal(Lineage.of("t", t.nodes.values()), ["r2"])
    assert plan.kept[("", middle[-1])] is Protection.PRE_V4_SENDS
    assert {d.checkpoint_id for d in plan.deletions} == set(middle[:-1])
    assert plan.grafts == (
        Graft("", middle[-1], tuple(reversed(middle[:-1])), first[-1], Reason.RUN_REMOVED),
    )


def test_the_ledger_restores_the_first_of_the_last_removed_resumes_once_childless() -> None:
    """On the checkpoint r1 stopped at, r2 and r3 resumed in turn (r2 writing no
    checkpoint, r3 one): removing r3 gives back what r2 left, removing r2 and r3 what r1
    left; removing r2 alone (r3 stays after it) restores nothing and keeps the entry."""
    t = Thread()
    asked = t.run(None)
    resumed = t.run(asked[-1])
    of_run(t, asked, "r1")
    of_run(t, resumed, "r3")
    point = asked[-1]
    r2, r3 = Resumption("", point, "r2", 1), Resumption("", point, "r3", 2)
    lineage = Lineage.of("t", t.nodes.values())

    def removing(*runs: str) -> Restoring:
        plan = plan_run_removal(lineage, runs)
        gone = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
        return restorations(lineage, gone, plan.grafts, runs, [r3, r2])

    assert removing("r3") == Restoring((r3,), (r3,))
    assert removing("r2", "r3") == Restoring((r2,), (r2, r3))
    assert removing("r2") == Restoring()
    assert removing("r1") == Restoring((), (r2, r3))  # the checkpoint goes with its run


def test_the_ledger_waits_while_the_checkpoint_has_a_child_that_stays() -> None:
    """A run after the resume stays and is grafted onto the resumed checkpoint: its
    writes are read through, so the entry is kept for a later removal; an entry on a
    checkpoint the store no longer has goes."""
    t = Thread()
    asked = t.run(None)
    resumed = t.run(asked[-1])
    later = t.run(resumed[-1])
    for ids, run in ((asked, "r1"), (resumed, "r2"), (later, "r3")):
        of_run(t, ids, run)
    lineage = Lineage.of("t", t.nodes.values())
    plan = plan_run_removal(lineage, ["r2"])
    gone = [(d.checkpoint_ns, d.checkpoint_id) for d in plan.deletions]
    entry, stale = Resumption("", asked[-1], "r2", 1), Resumption("", "gone", "r9", 1)
    assert plan.grafts
    assert restorations(lineage, gone, plan.grafts, ["r2"], [entry, stale]) == Restoring(
        (), (stale,)
    )
