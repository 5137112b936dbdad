"""The exhaustive engine on the thread shapes the benchmarks measure, on every backend.

A 20-turn chat where an app stamps a duration leaf after every run (so each
next run forks from the leaf, leaving 19 duration-only chain links and one
trailing leaf), and the same thread after 5 regenerates from older turns.
The expected deletions are computed from the stored parent links alone,
independently of the rules.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from savers import KINDS, open_sync

from retaining_saver import Protection, Reason, RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity, walk
from retaining_saver.testing.graphs import FLAVORS, Flavor, chat_graph, thread, turn

TURNS = 20
# Indexes (0-based) of the turns whose final checkpoint a regenerate forks from, in order.
# Not monotone, so one regenerate forks off a branch an earlier one already superseded.
REGENERATE_FROM = (15, 5, 12, 3, 9)


def _root(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _parents(inner: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, str | None]:
    """Every root-namespace checkpoint id of the thread -> its stored parent id."""
    found: dict[str, str | None] = {}
    for item in inner.list(_root(thread_id)):
        parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        found[item.checkpoint["id"]] = parent
    return found


def _head_id(inner: BaseCheckpointSaver[Any], thread_id: str) -> str:
    head = inner.get_tuple(_root(thread_id))
    assert head is not None
    return str(head.checkpoint["id"])


def build_chat(inner: BaseCheckpointSaver[Any], thread_id: str, flavor: Flavor) -> list[str]:
    """Run TURNS turns on the bare saver, a duration leaf after each; the turns' final ids."""
    graph = chat_graph(inner, flavor)
    finals = []
    for i in range(TURNS):
        graph.invoke(turn(i), thread(thread_id))
        finals.append(_head_id(inner, thread_id))
        assert write_duration_leaf(inner, thread_id, f"run-{i}") is not None
    return finals


def regenerate(
    inner: BaseCheckpointSaver[Any], thread_id: str, flavor: Flavor, finals: list[str]
) -> None:
    """Re-run a new turn from older turns' final checkpoints, a duration leaf after each."""
    graph = chat_graph(inner, flavor)
    for n, index in enumerate(REGENERATE_FROM):
        out = graph.invoke(turn(100 + n), thread(thread_id, finals[index]))
        assert out["turns"] == index + 2
        assert write_duration_leaf(inner, thread_id, f"regen-{n}") is not None


def _ancestors_or_self(parents: dict[str, str | None], start: str) -> set[str]:
    chain: set[str] = set()
    current: str | None = start
    while current is not None:
        chain.add(current)
        current = parents[current]
    return chain


def _lineage_values(
    inner: BaseCheckpointSaver[Any], graph: Any, thread_id: str, head_id: str
) -> list[tuple[str, dict[str, Any]]]:
    """(id, state values) of every checkpoint on the head's parent chain, head first."""
    chain = walk(inner, thread(thread_id, head_id))
    ids = [str(item.checkpoint["id"]) for item in chain]
    return [(cid, graph.get_state(thread(thread_id, cid)).values) for cid in ids]


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("kind", KINDS)
def test_chat_with_leaves_deletes_only_the_trailing_leaf(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        build_chat(inner, "chat", flavor)
        graph = chat_graph(inner, flavor)
        values = graph.get_state(thread("chat")).values
        parents = _parents(inner, "chat")
        leaf = _head_id(inner, "chat")
        assert len(parents) == TURNS * 5  # 4 checkpoints per run plus its duration leaf
        lineage = _lineage_values(inner, graph, "chat", str(parents[leaf]))

        report = RetainingSaver(inner, admission="off").enforce_thread_retention("chat")

        assert {cid for _, cid in report.deleted} == {leaf}
        assert report.deleted[("", leaf)] is Reason.TRAILING_DURATION_LEAF
        assert not report.dropped and not report.deferred and not report.grafts
        links = [k for k, p in report.kept.items() if p is Protection.DURATION_LINK]
        assert len(links) == TURNS - 1
        assert report.before.rows - report.after.rows == 1
        assert set(_parents(inner, "chat")) == set(parents) - {leaf}
        assert _head_id(inner, "chat") == parents[leaf]
        assert integrity(inner, "chat").clean
        assert graph.get_state(thread("chat")).values == values
        assert _lineage_values(inner, graph, "chat", str(parents[leaf])) == lineage
        assert values["turns"] == TURNS


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("kind", KINDS)
def test_regenerated_chat_deletes_exactly_the_superseded_subtrees(
    kind: str, flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        finals = build_chat(inner, "regen", flavor)
        regenerate(inner, "regen", flavor, finals)
        graph = chat_graph(inner, flavor)
        values = graph.get_state(thread("regen")).values
        parents = _parents(inner, "regen")
        leaf = _head_id(inner, "regen")
        kept_head = parents[leaf]
        assert kept_head is not None
        lineage = _lineage_values(inner, graph, "regen", kept_head)
        survivors = _ancestors_or_self(parents, kept_head)
        superseded = set(parents) - survivors - {leaf}
        assert superseded and finals[-1] in superseded
        expected = superseded | {leaf}

        saver = RetainingSaver(inner, admission="off")
        policy = RetentionPolicy(prune_leaf_sibling_branches=True)
        report = saver.enforce_thread_retention("regen", policy)

        assert {cid for _, cid in report.deleted} == expected
        assert report.deleted[("", leaf)] is Reason.TRAILING_DURATION_LEAF
        assert {report.deleted[("", cid)] for cid in superseded} == {Reason.SUPERSEDED_BRANCH}
        assert not report.dropped and not report.deferred
        assert set(_parents(inner, "regen")) == survivors
        assert report.after.rows < report.before.rows
        assert _head_id(inner, "regen") == kept_head
        assert integrity(inner, "regen").clean
        assert graph.get_state(thread("regen")).values == values
        assert values["turns"] == REGENERATE_FROM[-1] + 2
        assert _lineage_values(inner, graph, "regen", kept_head) == lineage
        # A second pass finds nothing left to delete.
        assert not saver.enforce_thread_retention("regen", policy).deleted
