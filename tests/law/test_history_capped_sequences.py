"""Capped history passes on sequences the long profile and a search over real-graph
sequences found (`test_history_stateful`'s machine, a thread whose graph calls a
`checkpointer=True` subgraph, beside its twin).

Each test builds the thread as the machine did, then runs one policy with a tiny cap
(`max_delete_per_run=1`) until a pass deletes nothing, and checks the cap's promises
(`_rules/_cap.py`): a pass past its cap deletes one piece, one chain of root
checkpoints; every pass leaves the thread loading like the twin; together the passes
delete what one uncapped pass would.
"""

from __future__ import annotations

import dataclasses

import pytest
from compaction_kit import one_piece, saved_lineage
from langgraph.checkpoint.memory import InMemorySaver
from test_history_stateful import LATER, HistoryMachine, horizon

from retaining_saver import RetainingSaver


def _machine(flavor: str) -> HistoryMachine:
    bound = type("Bound", (HistoryMachine,), {"saver": InMemorySaver(), "flavor": flavor})
    machine: HistoryMachine = bound()
    return machine


def _capped_passes_reach_the_uncapped_pass(machine: HistoryMachine, runs: int) -> None:
    """Capped passes (cap 1) until one deletes nothing, each checked; then what they
    deleted together is what one uncapped pass would have deleted."""
    wrapped = RetainingSaver(machine.saver, admission="off")
    policy = horizon(runs, compact=False)
    uncapped = wrapped.enforce_thread_retention(machine.kept, policy, dry_run=True, now=LATER)
    assert uncapped.deleted, "the sequence no longer builds a thread with history to delete"
    capped, deleted = dataclasses.replace(policy, max_delete_per_run=1), set[tuple[str, str]]()
    for _ in range(len(uncapped.deleted) + 1):
        before = saved_lineage(machine.saver, machine.kept)
        report = wrapped.enforce_thread_retention(machine.kept, capped, now=LATER)
        if not report.deleted:
            break
        if len(report.deleted) > 1:
            assert one_piece(report.deleted, before), sorted(report.deleted)
        deleted |= set(report.deleted)
        machine.kept_checkpoints_load_like_the_twin()
    assert deleted == set(uncapped.deleted), "capped passes stopped short"


def test_a_pass_past_its_cap_deletes_one_removed_branch() -> None:
    """Three removed branches hang from one root checkpoint, each owning writes to its
    last checkpoint, none small enough for the cap. The newest part of their unit, in
    id order, ran across all three: a pass past its cap of 1 deleted 20 checkpoints in
    3 chains. Each now goes alone, the one whose deletion leaves every fork's memory."""
    machine = _machine("delta")
    machine.keep_latest()
    machine.user_turn()
    machine.fork_from_a_kept_checkpoint(3241)
    machine.history_pass(horizon(None, compact=True, cap=3), 3)
    machine.update_head()
    machine.history_pass(horizon(0, compact=True), 3)
    machine.fork_from_a_kept_checkpoint(914)
    machine.history_pass(horizon(3, compact=True, cap=3), 2)
    _capped_passes_reach_the_uncapped_pass(machine, runs=1)


@pytest.mark.parametrize("flavor", ["full", "delta"])
def test_capped_passes_go_on_past_a_branch_that_holds_a_forks_memory(flavor: str) -> None:
    """Two removed branches: the first holds the subgraph memory a fork from the second
    loads, so it may not go while the second stays, and no part of it fits the cap. The
    pass looked at the first alone and deleted nothing, pass after pass; now it takes
    the second (which holds nothing another needs), then the first."""
    machine = _machine(flavor)
    if flavor == "full":
        machine.history_pass(horizon(0, compact=True), 3)
        machine.history_pass(horizon(1, compact=True, cap=3), 1)
        machine.history_pass(horizon(None, compact=True, cap=3), 3)
    else:
        machine.keep_latest()
        machine.fork_from_a_kept_checkpoint(3730)
        machine.history_pass(horizon(0, compact=True, cap=8), 2)
        machine.history_pass(horizon(2, compact=False), 1)
        machine.history_pass(horizon(2, compact=False), 3)
    _capped_passes_reach_the_uncapped_pass(machine, runs=0)


def test_capped_passes_take_branches_that_hold_each_others_memory_together() -> None:
    """Two removed branches, each of two runs (a fork, then a turn), each holding the
    subgraph memory a fork from the other's second run loads. Neither could go alone,
    nor could any part of either: capped passes deleted nothing, pass after pass. Now
    they go together, past the cap, in one pass."""
    machine = _machine("full")
    machine.update_head()
    machine.history_pass(horizon(0, compact=False), 3)
    machine.history_pass(horizon(2, compact=False), 3)
    machine.fork_from_a_kept_checkpoint(5187)
    machine.history_pass(horizon(2, compact=True, cap=3), 3)
    _capped_passes_reach_the_uncapped_pass(machine, runs=0)
