"""The `retention=` flag's surface: validation, counters and events, explicit admission,
the skip below the horizon, pinned runs, and the DeltaChannel notice."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from bounding_kit import KEPT, TWIN, runs_on_head_line
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, run_read, thread, turn
from retaining_saver.testing.views import visible_state

NOW = timedelta(0)


def _horizon(n: int, **more: Any) -> RetentionPolicy:
    return RetentionPolicy(history_keep_runs=n, history_min_age=NOW, **more)


@pytest.mark.parametrize(
    ("flags", "error", "names"),
    [
        ({"retention": "keep 5"}, TypeError, "retention must be a RetentionPolicy"),
        ({"retention": RetentionPolicy()}, ValueError, "retention must turn on a history rule"),
        ({"retention": _horizon(2, max_delete_per_run=0)}, ValueError, "max_delete_per_run=0"),
        (
            {"retention": RetentionPolicy(compact_steps=True, history_min_age=NOW)},
            ValueError,
            "compact_steps alone bounds nothing",
        ),
        ({"retention": _horizon(2), "admission": "off"}, ValueError, "retention runs on admission"),
    ],
)
def test_a_bad_retention_flag_is_refused_by_name(
    flags: dict[str, Any], error: type[Exception], names: str
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    with pytest.raises(error, match=names):
        RetainingSaver(InMemorySaver(), **flags)


def test_the_history_rules_need_an_explicit_age_here_too() -> None:
    with pytest.raises(ValueError, match="history_min_age"):
        RetentionPolicy(history_keep_runs=2)


@pytest.mark.parametrize("kind", KINDS)
def test_counters_and_events_tell_history_from_stamps(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        events: list[Any] = []
        saver = RetainingSaver(inner, retention=_horizon(1), on_reclaim=events.append)
        graph = chat_graph(saver)
        for i in range(6):
            graph.invoke(turn(i), thread(KEPT))
            write_duration_leaf(inner, KEPT, f"run-{i}")
        counters = saver.counters
    kinds = [event.kind for event in events]
    assert counters.reclaimed == kinds.count("stamp") == 5
    assert counters.history_reclaimed == kinds.count("history") > 0
    # The first admission found an empty thread, the second one run: below the horizon.
    assert (counters.history_passes, counters.history_skipped) == (4, 1)
    assert counters.history_failed == 0


@pytest.mark.parametrize("kind", KINDS)
def test_below_the_horizon_admissions_skip_the_pass(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_horizon(5))
        graph = chat_graph(saver)
        for i in range(5):
            graph.invoke(turn(i), thread(KEPT))
        below = saver.counters
        graph.invoke(turn(5), thread(KEPT))  # the sixth run's admission: 5 runs, skipped
        graph.invoke(turn(6), thread(KEPT))  # the seventh's: 6 runs, one beyond
        crossed = saver.counters
        runs = runs_on_head_line(list(graph.get_state_history(thread(KEPT))))
        # After a pass, the slack: 2 runs beyond the horizon of 5 wait for the next pass.
        graph.invoke(turn(7), thread(KEPT))  # 6 runs: skipped
        graph.invoke(turn(8), thread(KEPT))  # 7 runs: skipped
        graph.invoke(turn(9), thread(KEPT))  # 8 runs, 3 beyond: a pass deletes all 3
        held = runs_on_head_line(list(graph.get_state_history(thread(KEPT))))
    # The first admission found an empty thread; the next four could not cross the horizon.
    assert (below.history_passes, below.history_skipped) == (0, 4)
    counts = (crossed.history_passes, crossed.history_skipped, crossed.history_reclaimed)
    assert counts == (1, 5, 4) and runs == 6
    after = saver.counters
    assert (after.history_passes, after.history_skipped, after.history_reclaimed) == (2, 7, 16)
    assert held == 6


def _legacy_thread(inner: Any, turns: int) -> None:
    graph = chat_graph(inner)
    for i in range(turns):
        graph.invoke(turn(i), thread(KEPT))


@pytest.mark.parametrize("kind", KINDS)
def test_admit_applies_the_policy(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        _legacy_thread(inner, 6)
        saver = RetainingSaver(inner, admission="explicit", retention=_horizon(2))
        result = saver.admit(KEPT)
        again = saver.admit(KEPT)
        history = list(chat_graph(inner).get_state_history(thread(KEPT)))
    assert len(result.history_reclaimed) == 16 and result.reclaimed == ()
    # Nothing was written since: the second admission skips the pass, without a read.
    assert again.history_reclaimed == () and saver.counters.history_skipped == 1
    assert runs_on_head_line(history) == 2 and len(history) == 8


@pytest.mark.parametrize("kind", KINDS)
async def test_aadmit_applies_the_policy(kind: str, request: pytest.FixtureRequest) -> None:
    async with open_async(kind, request) as inner:
        graph = chat_graph(inner)
        for i in range(6):
            await graph.ainvoke(turn(i), thread(KEPT))
        saver = RetainingSaver(inner, admission="explicit", retention=_horizon(2))
        result = await saver.aadmit(KEPT)
        history = [s async for s in graph.aget_state_history(thread(KEPT))]
    assert len(result.history_reclaimed) == 16
    assert runs_on_head_line(history) == 2 and len(history) == 8


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_pinned_beyond_the_horizon_keeps_its_target(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        bare = chat_graph(inner)
        for i in range(6):
            for thread_id in (KEPT, TWIN):
                bare.invoke(turn(i), thread(thread_id))
        kept_first, twin_first = (
            list(bare.get_state_history(thread(t)))[-2].config["configurable"]["checkpoint_id"]
            for t in (KEPT, TWIN)
        )
        saver = RetainingSaver(inner, retention=_horizon(1))
        graph = chat_graph(saver)
        graph.invoke(turn(9), thread(KEPT, kept_first))
        bare.invoke(turn(9), thread(TWIN, twin_first))
        kept, twin = (
            visible_state(g.get_state(thread(t))) for g, t in ((graph, KEPT), (bare, TWIN))
        )
    assert saver.counters.history_reclaimed > 0
    assert kept == twin


@pytest.mark.parametrize("kind", KINDS)
def test_delta_threads_kept_whole_for_want_of_delta_graph_are_logged_once(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    with open_sync(kind, request) as inner, caplog.at_level(logging.DEBUG, "retaining_saver"):
        saver = RetainingSaver(inner, retention=_horizon(0))
        graph = chat_graph(saver, "delta")
        for i in range(4):
            graph.invoke(turn(i), thread(KEPT))
        saver.prune([KEPT])
        saver.prune([KEPT])
    notices = [r for r in caplog.records if "for want of delta_graph" in r.getMessage()]
    assert notices[0].levelno == logging.WARNING
    assert "retention policy" in notices[0].getMessage()
    assert [r.levelno for r in notices[1:]] == [logging.DEBUG] * (len(notices) - 1)
    assert any("prune" in r.getMessage() for r in notices)


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_younger_than_the_age_changes(kind: str, request: pytest.FixtureRequest) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(
            inner,
            retention=RetentionPolicy(history_keep_runs=1, history_min_age=timedelta(hours=1)),
        )
        graph = chat_graph(saver)
        for i in range(5):
            graph.invoke(turn(i), thread(KEPT))
        saver.admit(KEPT)
        history = list(graph.get_state_history(thread(KEPT)))
    assert len(history) == 20 and saver.counters.history_reclaimed == 0
    # Young runs past the horizon wait for time: the pass that first crossed it (the 2nd run)
    # kept them, and nothing is old before an hour has passed, so no admission since passed.
    assert saver.counters.history_passes == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_admission_read_answers_the_head_as_the_pass_left_it(
    kind: str, request: pytest.FixtureRequest
) -> None:
    # Compaction grafts the head run's middle step out, so the head's parent changes: the
    # read must answer it as it is now. (A pass that only deletes older runs leaves the head
    # row as it was, and the head read before the pass is answered.)
    with open_sync(kind, request) as inner:
        _legacy_thread(inner, 3)
        saver = RetainingSaver(inner, retention=_horizon(1, compact_steps=True))
        found = saver.get_tuple(run_read(KEPT))
        bare = inner.get_tuple(thread(KEPT))
    assert saver.counters.history_reclaimed > 0
    assert found is not None and bare is not None
    assert found.checkpoint["id"] == bare.checkpoint["id"]
    assert found.parent_config == bare.parent_config
