"""Admission's history pass over a window of a long thread (issue #21).

A thread written long on the bare saver (regenerates, interrupts, DeltaChannel state)
is then run through `RetainingSaver(inner, retention=...)` with a small window, beside
its twin on the bare saver: each pass reads only the newest root checkpoints and what
is above them (`Lineage.window_start`), and after every run what a user sees equals the
twin, until the thread holds the horizon; then every kept turn continues as the twin's.
With subgraph checkpoints in the window the pass reads wider, up to the whole thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from bounding_kit import KEPT, TWIN, Pairing, chat, compare, head_run_input, invocation, script
from bounding_kit import runs_on_head_line as runs
from savers import KINDS, open_sync
from test_retention_flag import fork_every_kept_turn

from retaining_saver import RetainingSaver, RetentionPolicy, _bounding
from retaining_saver._rooms import slack_runs
from retaining_saver._rules import Lineage
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import thread

CAP = 12
WINDOW = 4 * CAP
HORIZON = 2


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The pass's first window: max(LINEAGE_WINDOW, 4 x cap).
    monkeypatch.setattr(_bounding, "LINEAGE_WINDOW", 1)
    yield


def recording_loads(saver: RetainingSaver) -> list[Lineage]:
    """Every lineage the saver's backend loads from now on."""
    backend: Any = saver._backend
    load: Callable[..., Any] = backend.load_lineage
    loaded: list[Lineage] = []

    def recorded(thread_id: str, newest: int | None = None) -> Any:
        lineage = yield from load(thread_id, newest)
        loaded.append(lineage)
        return lineage

    backend.load_lineage = recorded
    return loaded


def _target(graph: Any, thread_id: str) -> str | None:
    """Where a regenerate on `thread_id` forks: its head run's input checkpoint."""
    history = list(graph.get_state_history(thread(thread_id)))
    return head_run_input(history) if history else None


def _run(graph: Any, twin: Any, op: tuple[str, ...], pairing: Pairing) -> list[Any]:
    """`op` on "kept" through `graph` and on "twin" on the bare saver; "kept"'s history."""
    target = _target(graph, KEPT)
    twin_target = pairing.twin_of[target] if target is not None else None
    graph.invoke(*invocation(op, target, KEPT))
    twin.invoke(*invocation(op, twin_target, TWIN))
    return list(graph.get_state_history(thread(KEPT)))


@pytest.mark.parametrize("flavor", ["full", "delta"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_long_thread_converges_through_windows_as_its_twin(
    kind: str, flavor: Any, small_window: None, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        graph_of = chat(None, flavor, subgraph=False) if flavor == "delta" else None
        retention = RetentionPolicy(
            history_keep_runs=HORIZON,
            history_min_age=timedelta(0),
            max_delete_per_run=CAP,
            delta_graph=graph_of,
        )
        saver = RetainingSaver(inner, retention=retention)
        bare = chat(inner, flavor, subgraph=False)
        for op in script(16):  # the legacy history, written before the flag
            for thread_id in (KEPT, TWIN):
                bare.invoke(*invocation(op, _target(bare, thread_id), thread_id))
        pairing = Pairing()
        pairing.pair_new(
            list(bare.get_state_history(thread(KEPT))), list(bare.get_state_history(thread(TWIN)))
        )
        loaded = recording_loads(saver)
        wrapped = chat(saver, flavor, subgraph=False)
        for op in script(40):
            kept = _run(wrapped, bare, op, pairing)
            twin = list(bare.get_state_history(thread(TWIN)))
            assert compare(pairing, kept, twin) == []
            assert integrity(saver, KEPT).clean
            if runs(kept) <= HORIZON + slack_runs(HORIZON) + 1:
                break
        else:
            raise AssertionError("the windowed passes never brought the thread to the horizon")
        fork_every_kept_turn(chat(inner, flavor, subgraph=False), pairing, kept)
        windows = [lineage for lineage in loaded if lineage.window_start is not None]
    assert len(windows) >= 3
    for lineage in windows:
        roots = [cid for ns, cid in lineage.nodes if ns == ""]
        assert min(roots) == lineage.window_start and len(roots) == WINDOW
    assert saver.counters.history_failed == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_window_with_subgraph_checkpoints_is_read_wider(
    kind: str, small_window: None, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        retention = RetentionPolicy(
            history_keep_runs=HORIZON, history_min_age=timedelta(0), max_delete_per_run=CAP
        )
        saver = RetainingSaver(inner, retention=retention)
        bare = chat(inner, "full")
        for op in script(16):
            bare.invoke(*invocation(op, _target(bare, KEPT), KEPT))
        loaded = recording_loads(saver)
        saver.admit(KEPT)
    first, *wider = loaded
    assert first.window_start is not None and any(ns for ns, _ in first.nodes)
    assert wider and wider[-1].window_start is None  # read whole in the end
    assert saver.counters.history_reclaimed > 0
