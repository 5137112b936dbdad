"""The maintenance methods' own contract with a caller: errors at call time, named right."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest

# Names the package imports only for type checking.
from langgraph.pregel import Pregel
from savers import open_async, open_sync

from retaining_saver import AdmissionCounters, RetainingSaver, RetentionPolicy
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn

_LOCALS = {"Pregel": Pregel, "Iterator": Iterator, "AsyncIterator": AsyncIterator}


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


def _ours(annotation: Any) -> set[type]:
    """The classes of this package that an annotation names, at any depth."""
    found: set[type] = set()
    if isinstance(annotation, type) and annotation.__module__.startswith("retaining_saver"):
        found.add(annotation)
        if dataclasses.is_dataclass(annotation):
            hints = typing.get_type_hints(annotation, localns=_LOCALS)
            for field in dataclasses.fields(annotation):
                if not field.name.startswith("_"):
                    found |= _ours(hints[field.name]) - {annotation}
    for argument in typing.get_args(annotation):
        found |= _ours(argument)
    return found


def _public_returns(cls: type) -> set[type]:
    """What the public methods and properties of `cls` return, of this package's classes."""
    returned: set[type] = set()
    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        method = member.fget if isinstance(member, property) else getattr(cls, name)
        if name.startswith("_") or not callable(method):
            continue
        returned |= _ours(typing.get_type_hints(method, localns=_LOCALS).get("return"))
    return returned


def test_every_type_the_public_methods_return_is_exported() -> None:
    """Of every exported class, properties too, and through the returned dataclasses'
    fields: a report's grafts, a stat's space, the saver's counters."""
    import retaining_saver

    exported = [getattr(retaining_saver, name) for name in retaining_saver.__all__]
    returned = set().union(*(_public_returns(c) for c in exported if isinstance(c, type)))
    missing = {t.__name__ for t in returned} - set(retaining_saver.__all__)
    assert not missing
    assert AdmissionCounters in _public_returns(RetainingSaver)
    assert {"RetentionReport", "StorageStats", "Compaction", "Graft"} <= {
        t.__name__ for t in returned
    }


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_storage_stats_per_channel_and_top_threads(
    kind: str, request: pytest.FixtureRequest
) -> None:
    async with open_async(kind, request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = chat_graph(saver)
        for turns, thread_id in ((3, "long"), (1, "short")):
            for i in range(turns):
                await graph.ainvoke(turn(i), thread(thread_id))
        whole = await saver.astorage_stats(channels=True, top_threads=5)
        assert [t.thread_id for t in whole.top_threads] == ["long", "short"]
        assert sum(t.bytes for t in whole.top_threads) == whole.bytes
        assert whole.channels["said"].value_bytes > 0
        assert whole.channels["said"].writes > 0
        assert whole.space is not None or kind == "memory"
        short = await saver.astorage_stats("short", channels=True)
        assert short.channels["said"].values < whole.channels["said"].values
        assert (short.top_threads, short.space == whole.space) == ((), True)
        plain = await saver.astorage_stats("short")
        assert plain.tables == short.tables and plain.channels == {}
        with pytest.raises(ValueError, match="top_threads"):
            await saver.astorage_stats("short", top_threads=1)


def test_sqlite_channels_count_the_same_a_page_at_a_time(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retaining_saver.backends import _sqlite_stats

    with open_sync("sqlite", request) as inner:
        saver = RetainingSaver(inner, admission="off")
        graph = chat_graph(saver)
        for thread_id in ("a", "b", "c"):
            for i in range(2):
                graph.invoke(turn(i), thread(thread_id))
        whole, one = saver.storage_stats(channels=True), saver.storage_stats("b", channels=True)
        monkeypatch.setattr(_sqlite_stats, "PAYLOAD_PAGE", 2)
        assert saver.storage_stats(channels=True) == whole
        assert saver.storage_stats("b", channels=True) == one
        assert whole.channels["said"].values == 3 * one.channels["said"].values
