"""The maintenance methods' own contract with a caller: errors at call time, named right."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from savers import open_async, open_sync

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn


def test_a_policy_given_as_thread_ids_fails_at_the_call(request: pytest.FixtureRequest) -> None:
    with open_sync("memory", request) as inner:
        saver = RetainingSaver(inner)
        with pytest.raises(TypeError, match="policy=") as raised:
            saver.enforce_retention(RetentionPolicy())  # type: ignore[arg-type]
        assert "RetentionPolicy" in str(raised.value)
        with pytest.raises(TypeError, match="policy must be a RetentionPolicy"):
            saver.enforce_retention(["t"], "nope")  # type: ignore[arg-type]


async def test_the_async_twin_fails_at_the_call_too(request: pytest.FixtureRequest) -> None:
    async with open_async("memory", request) as inner:
        saver = RetainingSaver(inner)
        with pytest.raises(TypeError, match="policy="):
            saver.aenforce_retention(RetentionPolicy())  # type: ignore[arg-type]


def test_enforce_retention_deletes_as_it_is_iterated(request: pytest.FixtureRequest) -> None:
    with open_sync("sqlite", request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = chat_graph(saver)
        graph.invoke(turn(0), thread("t"))
        leaf = write_duration_leaf(saver, "t")
        passes = saver.enforce_retention(["t"])
        assert (
            inner.get_tuple({"configurable": {"thread_id": "t"}}).config["configurable"][
                "checkpoint_id"
            ]
            == leaf
        )  # a lazy iterator: nothing yet
        (report,) = list(passes)
        assert list(report.deleted) == [("", leaf)]


def test_the_ttl_error_points_to_the_rules_document() -> None:
    with pytest.raises(ValueError, match=r"docs/rules\.md#too-young") as raised:
        RetentionPolicy(history_keep_runs=1)
    assert "contract" not in str(raised.value)
    RetentionPolicy(history_keep_runs=1, history_min_age=timedelta(0))


async def test_a_sync_call_on_the_loop_names_the_async_method(
    request: pytest.FixtureRequest,
) -> None:
    async with open_async("postgres", request) as inner:
        saver = RetainingSaver(inner)
        with pytest.raises(asyncio.InvalidStateError, match="acreate_retention_indexes"):
            saver.create_retention_indexes()
        await saver.acreate_retention_indexes()
