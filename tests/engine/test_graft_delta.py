"""A graft never changes a kept checkpoint's reconstructed value.

A duration link whose parent owns writes (a parallel step that failed after a
sibling wrote a delta channel) is kept: grafting its children onto that parent
would put the parent's writes on their delta-history walk.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from savers import KINDS, open_sync

from retaining_saver import Protection, RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import extend_all, thread

THREAD = "graft-delta"


def _state_class(snapshot_frequency: int) -> Any:
    notes = Annotated[list[str], DeltaChannel(extend_all, snapshot_frequency=snapshot_frequency)]
    return TypedDict("Notes", {"notes": notes, "fail": bool}, total=False)  # type: ignore[operator]


def _parallel_graph(checkpointer: BaseCheckpointSaver[Any], snapshot_frequency: int) -> Any:
    """START fans out to `write` (appends a note) and `flaky` (fails when asked)."""

    def flaky(state: dict[str, Any]) -> dict[str, Any]:
        if state.get("fail"):
            raise RuntimeError("flaky step failed")
        return {}

    builder: Any = StateGraph(_state_class(snapshot_frequency))
    builder.add_node("write", lambda state: {"notes": [f"note {len(state.get('notes', []))}"]})
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "write")
    builder.add_edge(START, "flaky")
    builder.add_edge("write", END)
    builder.add_edge("flaky", END)
    return builder.compile(checkpointer=checkpointer)


def _states(graph: Any, saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    """Every checkpoint's visible values and next nodes, by id."""
    return {
        s.config["configurable"]["checkpoint_id"]: (s.values, s.next)
        for s in graph.get_state_history(thread(THREAD))
    }


@pytest.mark.parametrize("snapshot_frequency", [1, 2, 100])
@pytest.mark.parametrize("kind", KINDS)
def test_a_link_on_a_parent_with_writes_is_not_grafted(
    kind: str, snapshot_frequency: int, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        graph = _parallel_graph(inner, snapshot_frequency)
        graph.invoke({"notes": ["first"], "fail": False}, thread(THREAD))
        with pytest.raises(RuntimeError, match="flaky"):
            graph.invoke({"notes": ["second"], "fail": True}, thread(THREAD))
        head = inner.get_tuple(thread(THREAD))
        assert head is not None and head.pending_writes, "the failed step left a sibling write"
        link = write_duration_leaf(inner, THREAD)
        assert link is not None
        graph.invoke({"notes": ["third"], "fail": False}, thread(THREAD))  # forks from the link
        before = _states(graph, inner)
        saver = RetainingSaver(inner, admission="off")
        report = saver.enforce_thread_retention(THREAD, RetentionPolicy(graft_duration_links=True))
        after = _states(graph, inner)
        assert {i: before[i] for i in after} == after  # every kept checkpoint reads the same
        assert after.keys() == before.keys()
        assert report.kept[("", link)] is Protection.LINK_ON_WRITES
        assert not report.grafts
        assert integrity(saver, THREAD).clean
