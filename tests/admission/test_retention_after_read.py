"""An async admission read answers before its history pass, which runs after it under the
thread's lock; a sync one, and one under a policy with `delta_graph`, run it first."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bounding_kit import KEPT, RETENTION_SHAPES, TWIN, chat, runs_on_head_line
from savers import KINDS, open_async, open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver._effects import run
from retaining_saver._rooms import UNSETTLED, room_left
from retaining_saver._rules import plan_retention
from retaining_saver._rules._recheck import Applied
from retaining_saver._rules._sparing import reshapes_the_head, sparing
from retaining_saver.backends import backend_for
from retaining_saver.backends._base import Mode
from retaining_saver.testing.graphs import chat_graph, run_read, thread, turn
from retaining_saver.testing.views import visible_state

HORIZON = RetentionPolicy(history_keep_runs=2, history_min_age=timedelta(0))
RUNS = 5  # on the bare saver: 3 runs beyond the horizon, 12 checkpoints


async def _past_the_horizon(graph: Any) -> Any:
    """`graph`, after `RUNS` runs on `KEPT`."""
    for i in range(RUNS):
        await graph.ainvoke(turn(i), thread(KEPT))
    return graph


@asynccontextmanager
async def _wrapped(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A bare async saver of `kind` past the horizon on `KEPT`: its chat graph, and the
    saver wrapped with `HORIZON`."""
    async with open_async(kind, request) as inner:
        graph = await _past_the_horizon(chat_graph(inner))
        yield graph, RetainingSaver(inner, retention=HORIZON)


@pytest.mark.parametrize("kind", KINDS)
async def test_an_async_admission_read_answers_before_its_pass(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with _wrapped(kind, request) as (graph, saver):
        head = await saver.aget_tuple(run_read(KEPT))
        # Answered: the pass is counted, but has deleted nothing yet.
        passes, reclaimed = saver.counters.history_passes, saver.counters.history_reclaimed
        await saver.asettle_history()
        after = saver.counters
        history = [s async for s in graph.aget_state_history(thread(KEPT))]
        row = await saver.inner.aget_tuple(head.config if head is not None else {})
    assert (passes, reclaimed) == (1, 0)
    assert after.history_reclaimed == 12 and after.history_failed == 0
    assert runs_on_head_line(history) == 2
    # The head's row is as the run read it.
    assert head is not None and row is not None and row.parent_config == head.parent_config


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_finds_its_pass_done_when_it_returns(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with _wrapped(kind, request) as (graph, saver):
        # The run's first write waits for the lock the pass holds.
        await chat_graph(saver).ainvoke(turn(5), thread(KEPT))
        counters = saver.counters
        history = [s async for s in graph.aget_state_history(thread(KEPT))]
    assert counters.history_passes == 1 and counters.history_reclaimed == 12
    assert runs_on_head_line(history) == 3  # the two kept, and the run admitted


@pytest.mark.parametrize("kind", KINDS)
async def test_a_left_pass_defers_a_plan_that_would_reshape_the_head_its_run_read(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The head is an input checkpoint alone in its run (`update_state` as the input), so a
    horizon of one run keeps it alone and makes it a root: the pass the read left does
    nothing, and the next admission, which runs its pass first, does it."""
    async with _wrapped(kind, request) as (graph, saver):
        await graph.aupdate_state(thread(KEPT), turn(9), as_node="__input__")
        saver = RetainingSaver(
            saver.inner, retention=dataclasses.replace(HORIZON, history_keep_runs=1)
        )
        head = await saver.aget_tuple(run_read(KEPT))
        await saver.asettle_history()
        row = await saver.inner.aget_tuple(head.config if head is not None else {})
        left = saver.counters.history_reclaimed
        await saver.aadmit(KEPT)
        history = [s async for s in graph.aget_state_history(thread(KEPT))]
    assert head is not None and row is not None and head.parent_config is not None
    assert row.parent_config == head.parent_config and left == 0
    assert saver.counters.history_reclaimed == 20 and len(history) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_sync_admission_read_runs_its_pass_first(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        _lineage_and_plan(inner)
        saver = RetainingSaver(inner, retention=HORIZON)
        saver.get_tuple(run_read(KEPT))
    assert saver.counters.history_passes == 1 and saver.counters.history_reclaimed == 12


async def test_with_delta_graph_the_pass_runs_before_the_read_answers() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    inner = InMemorySaver()
    await _past_the_horizon(chat(inner, "delta"))
    policy = RetentionPolicy(
        history_keep_runs=2, history_min_age=timedelta(0), delta_graph=chat(None, "delta")
    )
    saver = RetainingSaver(inner, retention=policy)
    await saver.aget_tuple(run_read(KEPT))
    assert saver.counters.history_passes == 1 and saver.counters.history_reclaimed > 0


def _lineage_and_plan(inner: Any = None) -> tuple[Any, Any]:
    """`RUNS` runs on `KEPT` of `inner` (a new memory saver if None): its lineage, and the
    rules' plan for it."""
    from langgraph.checkpoint.memory import InMemorySaver

    inner = InMemorySaver() if inner is None else inner
    graph = chat_graph(inner)
    for i in range(RUNS):
        graph.invoke(turn(i), thread(KEPT))
    backend = backend_for(inner)
    assert backend is not None
    lineage = run(backend, backend.load_lineage(KEPT), Mode.READ)
    return lineage, plan_retention(lineage, HORIZON, datetime.now(UTC))


def test_a_sparing_plan_changes_no_row_of_the_checkpoint_it_spares() -> None:
    lineage, plan = _lineage_and_plan()
    gone = plan.deletions[-1]
    spared = sparing((gone.checkpoint_ns, gone.checkpoint_id))(lineage, HORIZON, datetime.now(UTC))
    assert plan.deletions and plan.roots
    assert spared.empty and not spared.materialise and not spared.freed_blobs
    assert spared.deferred == plan.deletions + plan.deferred
    # What it left waits for a later pass: every admission is due.
    assert room_left(lineage, spared, Applied(), HORIZON) == UNSETTLED
    rooted = plan.roots[0]
    also = sparing((rooted.checkpoint_ns, rooted.checkpoint_id))(
        lineage, HORIZON, datetime.now(UTC)
    )
    assert also.empty


def test_a_sparing_plan_of_a_checkpoint_it_leaves_is_the_rules_plan() -> None:
    lineage, plan = _lineage_and_plan()
    head = ("", plan.heads[""])
    assert sparing(head)(lineage, HORIZON, datetime.now(UTC)) == plan


RESHAPING = {
    name: RETENTION_SHAPES[name]
    for name in ("horizon-0", "keep-latest", "horizon-2-compacted", "keep-latest-compacted")
}


@pytest.mark.parametrize("name", RESHAPING)
def test_a_policy_that_reshapes_the_head_would_defer_every_pass_that_spares_it(
    name: str,
) -> None:
    """Why such passes run before the read answers: their plan changes the head's row, so
    sparing the head leaves the whole plan for later, admission after admission."""
    policy = RESHAPING[name]
    lineage, _ = _lineage_and_plan()
    plan = plan_retention(lineage, policy, datetime.now(UTC))
    spared = sparing(("", plan.heads[""]))(lineage, policy, datetime.now(UTC))
    assert reshapes_the_head(policy)
    assert plan.deletions and spared.empty and spared.deferred


def test_a_policy_that_keeps_the_heads_run_is_not_reshaping() -> None:
    for keep in (1, 2, 10):
        assert not reshapes_the_head(dataclasses.replace(HORIZON, history_keep_runs=keep))


@pytest.mark.parametrize("name", RETENTION_SHAPES)
@pytest.mark.parametrize("kind", KINDS)
async def test_async_runs_under_a_policy_hold_what_sync_runs_hold(
    kind: str, name: str, request: pytest.FixtureRequest
) -> None:
    """Each async admission's pass is carried out, whether it waits for the read or not
    (one under a reshaping policy used to wait for an admission whose head it could
    leave, which never came): the thread holds what the same runs leave through a sync
    wrapper, whose passes run before the read answers; and its head reads as a bare twin's,
    which never had the rows reclaimed."""
    policy = RETENTION_SHAPES[name]
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, retention=policy)
        graph, bare = chat_graph(saver), chat_graph(inner)
        for i in range(RUNS):
            await graph.ainvoke(turn(i), thread(KEPT))
            await bare.ainvoke(turn(i), thread(TWIN))
        await saver.asettle_history()
        held = [s async for s in graph.aget_state_history(thread(KEPT))]
        head = visible_state(await graph.aget_state(thread(KEPT)))
        twin_head = visible_state(await bare.aget_state(thread(TWIN)))
        counters = saver.counters
    with open_sync(kind, request, "sync") as inner:
        twin = RetainingSaver(inner, retention=policy)
        graph = chat_graph(twin)
        for i in range(RUNS):
            graph.invoke(turn(i), thread(KEPT))
        expected = list(graph.get_state_history(thread(KEPT)))
    assert counters.history_reclaimed == twin.counters.history_reclaimed > 0
    assert counters.history_failed == 0
    assert [s.values for s in held] == [s.values for s in expected]
    assert [s.metadata for s in held] == [s.metadata for s in expected]
    assert head == twin_head
