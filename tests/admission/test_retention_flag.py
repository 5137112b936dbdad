"""`RetainingSaver(inner, retention=...)`: the history rules applied as each run is admitted.

A long chat (regenerates, interrupts, a subgraph call each turn) runs on thread
"kept" through the wrapper and on thread "twin" on the bare saver. After every
operation, everything a user sees on "kept" (its state, and every checkpoint
it still lists) equals the twin's, the head line holds at most the horizon's
runs plus the run just made, and nothing dangles.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from bounding_kit import (
    KEPT,
    TWIN,
    Flavor,
    Pairing,
    chat,
    compare,
    head_run_input,
    invocation,
    runs_on_head_line,
    script,
)
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver._rooms import slack_runs
from retaining_saver.testing.checks import aintegrity, integrity
from retaining_saver.testing.graphs import chat_graph, thread, turn
from retaining_saver.testing.views import normalize, visible_state

NOW = timedelta(0)
TURNS = 16

VARIANTS: dict[str, tuple[Flavor, dict[str, Any], int | None]] = {
    # name: (flavor, policy fields, the horizon the head line keeps to; None: unbounded)
    "horizon": ("full", {"history_keep_runs": 2}, 2),
    "horizon+compact": ("full", {"history_keep_runs": 1, "compact_steps": True}, 1),
    "delta+graph": ("delta", {"history_keep_runs": 2}, 2),
    "delta, no graph": ("delta", {"history_keep_runs": 2}, None),
}


def _retention(variant: str, flavor: Flavor, **more: Any) -> RetentionPolicy:
    _, fields, _ = VARIANTS[variant]
    graph = chat(None, flavor) if variant == "delta+graph" else None
    return RetentionPolicy(history_min_age=NOW, delta_graph=graph, **fields, **more)


def _check(pairing: Pairing, kept: Any, twin: Any, bound: int | None) -> None:
    assert compare(pairing, kept, twin) == []
    if bound is not None:
        # A pass keeps `bound` runs, and admissions skip it while the thread holds at most
        # `slack_runs(bound)` more; the run admitted last adds one.
        assert runs_on_head_line(kept) <= bound + slack_runs(bound) + 1


def _targets(pairing: Pairing, kept: list[Any]) -> dict[str, str | None]:
    """Where a regenerate forks on each thread: the head run's input checkpoint."""
    if not kept:
        return {KEPT: None, TWIN: None}
    target = head_run_input(kept)
    return {KEPT: target, TWIN: pairing.twin_of[target]}


def play(saver: RetainingSaver, inner: Any, flavor: Flavor, bound: int | None) -> Pairing:
    kept_graph, twin_graph = chat(saver, flavor), chat(inner, flavor)
    pairing = Pairing()
    for op in script(TURNS):
        targets = _targets(pairing, list(kept_graph.get_state_history(thread(KEPT))))
        for graph, thread_id in ((kept_graph, KEPT), (twin_graph, TWIN)):
            graph.invoke(*invocation(op, targets[thread_id], thread_id))
        kept = list(kept_graph.get_state_history(thread(KEPT)))
        twin = list(twin_graph.get_state_history(thread(TWIN)))
        _check(pairing, kept, twin, bound)
        assert integrity(saver, KEPT).clean
    fork_every_kept_turn(chat(inner, flavor), pairing, kept)
    return pairing


def fork_every_kept_turn(bare: Any, pairing: Pairing, kept: list[Any]) -> None:
    """Continue each kept checkpoint that has work left, on the bare saver, and its twin:
    the same result (the retained thread's history feeds no step differently)."""
    for snapshot in kept:
        if not snapshot.next:
            continue
        kept_id = snapshot.config["configurable"]["checkpoint_id"]
        mine = bare.invoke(None, thread(KEPT, kept_id))
        theirs = bare.invoke(None, thread(TWIN, pairing.twin_of[kept_id]))
        assert normalize(mine) == normalize(theirs), kept_id


async def aplay(saver: RetainingSaver, inner: Any, flavor: Flavor, bound: int | None) -> Pairing:
    kept_graph, twin_graph = chat(saver, flavor), chat(inner, flavor)
    pairing = Pairing()
    for op in script(TURNS):
        targets = _targets(pairing, [s async for s in kept_graph.aget_state_history(thread(KEPT))])
        for graph, thread_id in ((kept_graph, KEPT), (twin_graph, TWIN)):
            await graph.ainvoke(*invocation(op, targets[thread_id], thread_id))
        kept = [s async for s in kept_graph.aget_state_history(thread(KEPT))]
        twin = [s async for s in twin_graph.aget_state_history(thread(TWIN))]
        _check(pairing, kept, twin, bound)
        assert (await aintegrity(saver, KEPT)).clean
    return pairing


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_long_chat_reads_as_its_twin_within_the_horizon(
    kind: str, variant: str, request: pytest.FixtureRequest
) -> None:
    flavor, _, bound = VARIANTS[variant]
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention(variant, flavor))
        play(saver, inner, flavor, bound)
        counters = saver.counters
    assert counters.history_reclaimed > 0 or bound is None
    assert counters.history_failed == 0 and counters.reclaimed == 0


@pytest.mark.parametrize("variant", ["horizon", "delta+graph"])
@pytest.mark.parametrize("kind", KINDS)
async def test_async_a_long_chat_reads_as_its_twin_within_the_horizon(
    kind: str, variant: str, request: pytest.FixtureRequest
) -> None:
    flavor, _, bound = VARIANTS[variant]
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention(variant, flavor))
        await aplay(saver, inner, flavor, bound)
    assert saver.counters.history_reclaimed > 0
    assert saver.counters.history_failed == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_deletion_never_fails_a_run(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention("horizon", "full"))
        assert saver._backend is not None
        carry_out = saver._backend.apply_plan
        calls: list[int] = []

        def every_other_fails(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) % 2:
                raise OSError("connection lost")
            return carry_out(*args, **kwargs)

        saver._backend.apply_plan = every_other_fails  # type: ignore[method-assign]
        with caplog.at_level(logging.DEBUG, logger="retaining_saver"):
            play(saver, inner, "full", None)
        counters = saver.counters
    assert counters.history_failed == (len(calls) + 1) // 2 >= 2
    assert counters.history_reclaimed > 0
    failures = [r for r in caplog.records if "pass over thread" in r.getMessage()]
    assert [r.levelno for r in failures][:2] == [logging.WARNING, logging.DEBUG]


@pytest.mark.parametrize("kind", KINDS)
async def test_async_a_failing_deletion_never_fails_a_run(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention("horizon", "full"))
        assert saver._backend is not None

        def fails(*args: Any, **kwargs: Any) -> Any:
            raise OSError("connection lost")

        saver._backend.apply_plan = fails  # type: ignore[method-assign]
        await aplay(saver, inner, "full", None)
    assert saver.counters.history_failed >= 2 and saver.counters.history_reclaimed == 0


# A legacy thread converges over successive admissions, each capped


def _legacy(saver: RetainingSaver, inner: Any, turns: int, admissions: int, n: int) -> int:
    """Build `turns` turns on "kept" and "twin" on the bare saver, then run turns through
    `saver` until the head line holds `n + 1` runs; how many runs that took."""
    bare, wrapped = chat_graph(inner), chat_graph(saver)
    for i in range(turns):
        for thread_id in (KEPT, TWIN):
            bare.invoke(turn(i), thread(thread_id))
    pairing = Pairing()
    pairing.pair_new(
        list(bare.get_state_history(thread(KEPT))), list(bare.get_state_history(thread(TWIN)))
    )
    for run in range(1, admissions + 1):
        wrapped.invoke(turn(turns + run), thread(KEPT))
        bare.invoke(turn(turns + run), thread(TWIN))
        kept = list(wrapped.get_state_history(thread(KEPT)))
        assert compare(pairing, kept, list(bare.get_state_history(thread(TWIN)))) == []
        if runs_on_head_line(kept) <= n + 1:
            assert len(kept) <= 4 * (n + 1)
            return run
    raise AssertionError(f"{admissions} capped admissions left {runs_on_head_line(kept)} runs")


@pytest.mark.parametrize("kind", KINDS)
def test_a_legacy_thread_converges_over_capped_admissions(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        retention = RetentionPolicy(history_keep_runs=5, history_min_age=NOW, max_delete_per_run=64)
        saver = RetainingSaver(inner, retention=retention)
        runs = _legacy(saver, inner, turns=75, admissions=10, n=5)  # 300 checkpoints
        assert integrity(saver, KEPT).clean
    # No admission deletes more than the cap, so the 296 beyond the horizon (300, and 4
    # a run, less 6 runs kept) take 5 of them.
    assert runs == 5
    assert saver.counters.history_reclaimed == 300 + 4 * runs - 4 * 6


@pytest.mark.slow
def test_a_legacy_thread_of_10000_checkpoints_converges(request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as inner:
        saver = RetainingSaver(
            inner, retention=RetentionPolicy(history_keep_runs=10, history_min_age=NOW)
        )
        bare, wrapped = chat_graph(inner), chat_graph(saver)
        for i in range(2500):
            for thread_id in (KEPT, TWIN):
                bare.invoke(turn(i), thread(thread_id))
        for run in range(1, 200):
            wrapped.invoke(turn(2500 + run), thread(KEPT))
            bare.invoke(turn(2500 + run), thread(TWIN))
            if saver.storage_stats(KEPT).tables["checkpoints"].rows <= 4 * 11:
                break
        else:
            raise AssertionError("200 capped admissions did not bring it to the horizon")
        kept, twin = (
            visible_state(g.get_state(thread(t))) for g, t in ((wrapped, KEPT), (bare, TWIN))
        )
        assert integrity(saver, KEPT).clean
    assert kept == twin
    # 10,000 checkpoints, 4 more a run, at most 64 deleted an admission: 60 fewer a run.
    assert run <= 10_000 // 60 + 2


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_savers_taking_turns_on_one_thread(kind: str, request: pytest.FixtureRequest) -> None:
    # Two workers (each its own connection, lock and counts), each run after the thread's
    # reservation moved to it, as the deployment requirement says. Each counts only the
    # runs it admitted, so while the thread is below the horizon it may skip past it by
    # the other's runs (at most N more); once at the horizon, each worker's admissions skip
    # the pass at most `slack_runs(N)` times in a row.
    with open_sync(kind, request) as first, open_sync(kind, request) as second:
        savers = [
            RetainingSaver(inner, retention=_retention("horizon", "full"))
            for inner in (first, second)
        ]
        graphs = [chat(saver, "full") for saver in savers]
        twin_graph = chat(first, "full")
        pairing, held = Pairing(), []
        for i in range(12):
            graphs[i % 2].invoke({"said": [f"u{i}"]}, thread(KEPT))
            twin_graph.invoke({"said": [f"u{i}"]}, thread(TWIN))
            kept = list(graphs[0].get_state_history(thread(KEPT)))
            _check(pairing, kept, list(twin_graph.get_state_history(thread(TWIN))), 2 * 2)
            held.append(runs_on_head_line(kept))
            assert integrity(savers[1], KEPT).clean
    assert all(saver.counters.history_reclaimed > 0 for saver in savers)
    # At the horizon: each worker passes at least once in `slack + 1` of its admissions,
    # which alternate, so a pass leaves N runs (and the one admitted) and at most `2 * slack`
    # more arrive before the next: N + 2 * slack + 1 runs at most, N + 1 after a pass.
    slack = slack_runs(2)
    assert max(held[7:]) == 2 + 2 * slack + 1 and min(held[7:]) == 3, held


UPDATES = [1, 2, 1, 3, 0, 1, 2]
"""Runs `update_state(as_node="__input__")` writes before each turn, once at the horizon."""


@pytest.mark.parametrize("kind", KINDS)
def test_runs_an_input_update_writes_take_the_slack_room(
    kind: str, request: pytest.FixtureRequest
) -> None:
    # Such a run no admission reserved: each takes a room of the slack when its input is
    # put, so the next admission passes once they use it up. After every turn the head
    # line holds the horizon, its slack and that turn's run at most.
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention("horizon", "full"))
        graph, held = chat(saver, "full"), []
        for i in range(6):
            graph.invoke({"said": [f"u{i}"]}, thread(KEPT))
        for i, updates in enumerate(UPDATES):
            for j in range(updates):
                graph.update_state(thread(KEPT), {"said": [f"i{i}.{j}"]}, as_node="__input__")
            graph.invoke({"said": [f"v{i}"]}, thread(KEPT))
            held.append(runs_on_head_line(list(graph.get_state_history(thread(KEPT)))))
            assert integrity(saver, KEPT).clean
    assert max(held) <= 2 + slack_runs(2) + 1, held


@pytest.mark.parametrize("kind", KINDS)
async def test_async_runs_an_input_update_writes_take_the_slack_room(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, retention=_retention("horizon", "full"))
        graph, held = chat(saver, "full"), []
        for i in range(6):
            await graph.ainvoke({"said": [f"u{i}"]}, thread(KEPT))
        for i, updates in enumerate(UPDATES):
            for j in range(updates):
                values = {"said": [f"i{i}.{j}"]}
                await graph.aupdate_state(thread(KEPT), values, as_node="__input__")
            await graph.ainvoke({"said": [f"v{i}"]}, thread(KEPT))
            await saver.asettle_history()
            history = [s async for s in graph.aget_state_history(thread(KEPT))]
            held.append(runs_on_head_line(history))
            assert (await aintegrity(saver, KEPT)).clean
    assert max(held) <= 2 + slack_runs(2) + 1, held
