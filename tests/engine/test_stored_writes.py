"""Pending writes as the savers really store them, and what retention makes of them.

An empty writes entry that merely reading creates guards nothing; writes committed
before their checkpoint are kept; plain runs leave writes on most checkpoints, not
only on leaves. (Facts from shared/FIELD-NOTES.md that no other test states alone.)
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from savers import KINDS, open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn


def test_phantom_empty_writes_entry_does_not_guard_a_leaf() -> None:
    inner = InMemorySaver()
    chat_graph(inner).invoke(turn(0), thread("p"))
    leaf = write_duration_leaf(inner, "p")
    assert leaf is not None
    assert inner.writes[("p", "", leaf)] == {}  # merely reading creates the entry
    assert RetainingSaver(inner).admit("p").reclaimed == (leaf,)


@pytest.mark.parametrize("kind", KINDS)
def test_writes_committed_before_their_checkpoint_survive(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        chat_graph(inner).invoke(turn(0), thread("w"))
        write_duration_leaf(inner, "w")
        in_flight = thread("w", "ffffffff-ffff-6fff-bfff-ffffffffffff")
        inner.put_writes(in_flight, [("said", ["racing"])], task_id="t1")
        saver = RetainingSaver(inner)
        policy = RetentionPolicy(prune_leaf_sibling_branches=True, graft_duration_links=True)
        report = saver.enforce_thread_retention("w", policy)
        assert len(report.deleted) == 1
        assert integrity(inner, "w").orphan_writes == 1  # kept: its checkpoint may follow


@pytest.mark.parametrize("kind", KINDS)
def test_plain_runs_leave_writes_on_most_checkpoints(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        graph = chat_graph(inner)
        for i in range(3):
            graph.invoke(turn(i), thread("r"))
        tuples = list(inner.list(thread("r")))
        with_writes = [t for t in tuples if t.pending_writes]
        assert len(tuples) == 12 and len(with_writes) == 9  # not only "memory leaves"
        write_duration_leaf(inner, "r")
        report = RetainingSaver(inner).enforce_thread_retention("r")
        assert len(report.deleted) == 1
