"""Admission's pass under a real TTL waits for time, not for every run.

With `retention=RetentionPolicy(history_keep_runs=N, history_min_age=...)` the
runs past the horizon that are still young stay; planning again cannot delete
them until one grows old, so admissions skip the pass until then
(`_rules._ages.next_age_crossing`). Before, every admission on such a thread
planned again (a lineage read and a plan per run), for nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bounding_kit import runs_on_head_line
from langgraph.checkpoint.memory import InMemorySaver

from retaining_saver import CheckpointNode, RetainingSaver, RetentionPolicy, _bounding
from retaining_saver._rooms import slack_runs
from retaining_saver._rules import Lineage
from retaining_saver._rules._ages import age_thresholds, next_age_crossing
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn
from retaining_saver.testing.views import visible_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _node(checkpoint_id: str, parent: str | None, ts: str) -> CheckpointNode:
    return CheckpointNode("", checkpoint_id, parent, {}, {}, 0, {"source": "loop"}, ts)


def test_next_age_crossing_is_the_first_checkpoint_to_grow_old() -> None:
    policy = RetentionPolicy(history_keep_runs=1, history_min_age=HOUR)
    lineage = Lineage.of(
        "t",
        [
            _node("1", None, (T0 - 2 * HOUR).isoformat()),  # old already
            _node("2", "1", (T0 - HOUR / 2).isoformat()),  # old at T0 + 30 min
            _node("3", "2", T0.isoformat()),  # old at T0 + 1 h
            _node("4", "3", "not a time"),  # young for ever: never crosses
        ],
    )
    assert next_age_crossing(lineage, policy, T0) == T0 + HOUR / 2
    assert next_age_crossing(lineage, policy, T0 + HOUR / 2) == T0 + HOUR
    assert next_age_crossing(lineage, policy, T0 + HOUR) is None
    no_ttl = RetentionPolicy(history_keep_runs=1, history_min_age=timedelta(0))
    assert next_age_crossing(lineage, no_ttl, T0) is None


def test_the_sibling_branch_age_counts_only_where_sibling_branches_go() -> None:
    policy = RetentionPolicy(
        history_keep_runs=1, history_min_age=HOUR, sibling_branch_min_age=2 * HOUR
    )
    assert age_thresholds(policy) == (HOUR,)
    both = RetentionPolicy(
        history_keep_runs=1,
        history_min_age=HOUR,
        prune_leaf_sibling_branches=True,
        sibling_branch_min_age=2 * HOUR,
    )
    assert age_thresholds(both) == (HOUR, 2 * HOUR)


class _Clock:
    """What `_bounding` takes for now: the real time, moved on by `later`."""

    def __init__(self) -> None:
        self.later = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.later


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(_bounding, "_utc_now", clock)
    return clock


def _chat(saver: RetainingSaver, inner: InMemorySaver, turns: range) -> tuple[Any, Any]:
    """Turns `turns` on thread "kept" through `saver` and on "twin" on the bare `inner`."""
    graph, bare = chat_graph(saver), chat_graph(inner)
    for i in turns:
        graph.invoke(turn(i), thread("kept"))
        bare.invoke(turn(i), thread("twin"))
    return graph, bare


def test_young_runs_past_the_horizon_wait_for_time_not_for_runs(clock: _Clock) -> None:
    """Under a 1-hour TTL, a 12-turn chat plans once (when it first crosses the horizon,
    keeping every young run); an hour later the next admission plans again and brings
    the thread back to the horizon, each kept checkpoint reading as on the twin."""
    inner = InMemorySaver()
    policy = RetentionPolicy(history_keep_runs=2, history_min_age=HOUR)
    saver = RetainingSaver(inner, retention=policy)
    graph, bare = _chat(saver, inner, range(12))
    assert saver.counters.history_passes == 1  # every admission since skipped
    assert saver.counters.history_reclaimed == 0
    assert runs_on_head_line(list(graph.get_state_history(thread("kept")))) == 12

    clock.later = 2 * HOUR
    graph, bare = _chat(saver, inner, range(12, 13))
    assert saver.counters.history_passes == 2
    kept = list(graph.get_state_history(thread("kept")))
    assert runs_on_head_line(kept) == 2 + 1  # the horizon, and the run admitted last
    twin = list(bare.get_state_history(thread("twin")))[: len(kept)]
    assert [visible_state(s) for s in kept] == [visible_state(s) for s in twin]
    assert integrity(saver, "kept").clean


def test_runs_kept_for_good_past_the_horizon_leave_the_slack(clock: _Clock) -> None:
    """A checkpoint kept for good past the horizon (`protect_checkpoint_ids`) no longer
    makes every admission plan again: the slack holds as at the horizon."""
    inner = InMemorySaver()
    chat_graph(inner).invoke(turn(0), thread("kept"))
    oldest = list(chat_graph(inner).get_state_history(thread("kept")))[-1]
    pinned = oldest.config["configurable"]["checkpoint_id"]
    policy = RetentionPolicy(
        history_keep_runs=2, history_min_age=timedelta(0), protect_checkpoint_ids={pinned}
    )
    saver = RetainingSaver(inner, retention=policy)
    graph = chat_graph(saver)
    for i in range(1, 13):
        graph.invoke(turn(i), thread("kept"))
    kept = list(graph.get_state_history(thread("kept")))
    assert pinned in {s.config["configurable"]["checkpoint_id"] for s in kept}
    # Before, every one of the 12 admissions planned again (`UNSETTLED`).
    assert saver.counters.history_passes <= 12 // 2 + 1, saver.counters
    assert runs_on_head_line(kept) <= 1 + 2 + slack_runs(2) + 1
