"""Cleanup that fails partway says exactly what it did, and leaves nothing broken."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest
from savers import KINDS, open_sync

from retaining_saver import RetainingSaver, Skip
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.checks import integrity
from retaining_saver.testing.graphs import build_chat_graph, chat_turn, run_read, thread_config


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_later_round_keeps_the_rounds_already_committed(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        events: list[Any] = []
        saver = RetainingSaver(inner, on_reclaim=events.append)
        build_chat_graph(saver).invoke(chat_turn(0), thread_config("s"))
        leaves = [write_duration_leaf(inner, "s", f"r{i}") for i in range(3)]
        assert saver._backend is not None
        rounds: list[str] = []
        # A round is a take: Postgres's first is the admission read itself.
        for name in ("reclaim_leaf", "admit_and_read"):
            if hasattr(saver._backend, name):
                setattr(saver._backend, name, _second_round_fails(saver._backend, name, rounds))
        answer = saver.get_tuple(run_read("s"))
        assert integrity(saver, "s").clean
    assert answer is not None and answer.checkpoint["id"] == leaves[1]
    assert saver.counters.reclaimed == 1 and saver.counters.failed == 1
    assert [e.checkpoint_id for e in events] == [leaves[2]]


def _second_round_fails(backend: Any, name: str, rounds: list[str]) -> Any:
    take = getattr(backend, name)

    def round_(*args: Any, **kwargs: Any) -> Any:
        rounds.append(name)
        if len(rounds) == 2:
            raise OSError("connection lost")
        return take(*args, **kwargs)

    return round_


class _FailingCache:
    def __init__(self, fail_on: int) -> None:
        self.calls, self.fail_on = 0, fail_on

    def invalidate(self, thread_id: str, checkpoint_ns: str, checkpoint_ids: Sequence[str]) -> None:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("cache is down")

    async def ainvalidate(self, *args: Any) -> None:
        self.invalidate(*args)

    def purge(self, thread_id: str | None) -> None: ...

    async def apurge(self, thread_id: str | None) -> None: ...


@pytest.mark.parametrize(("fail_on", "reclaimed"), [(1, 0), (2, 1)], ids=["before", "after"])
def test_cache_failures_are_logged(
    fail_on: int, reclaimed: int, caplog: pytest.LogCaptureFixture
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    inner = InMemorySaver()
    saver = RetainingSaver(inner, history_caches=[_FailingCache(fail_on)])
    build_chat_graph(saver).invoke(chat_turn(0), thread_config("c"))
    write_duration_leaf(inner, "c")
    with caplog.at_level(logging.WARNING, logger="retaining_saver"):
        result = saver.admit("c")
    assert len(result.reclaimed) == reclaimed
    assert any("cache invalidation" in r.getMessage() for r in caplog.records)
    if not reclaimed:
        assert result.skipped is Skip.CACHE_INVALIDATION_FAILED


def test_a_failure_inside_the_sqlite_transaction_leaves_no_transaction_open(
    request: pytest.FixtureRequest,
) -> None:
    with open_sync("sqlite", request) as inner:
        conn = inner.conn  # type: ignore[attr-defined]
        saver = RetainingSaver(inner)
        build_chat_graph(saver).invoke(chat_turn(0), thread_config("t"))
        leaf = write_duration_leaf(saver.inner, "t")
        assert saver._backend is not None
        original = saver._backend.delete_checkpoint

        def fails(*args: Any) -> Any:
            yield from original(*args)
            raise sqlite3.OperationalError("disk I/O error")

        saver._backend.delete_checkpoint = fails  # type: ignore[method-assign]
        assert saver.admit("t").skipped is Skip.FAILED
        assert not conn.in_transaction
        saver._backend.delete_checkpoint = original  # type: ignore[method-assign]
        assert saver.admit("t").reclaimed == (leaf,)


@pytest.mark.parametrize("kind", KINDS)
def test_the_engine_reports_what_it_deleted_when_the_statistics_after_fail(
    kind: str, request: pytest.FixtureRequest
) -> None:
    with open_sync(kind, request) as inner:
        saver = RetainingSaver(inner, admission="off")
        build_chat_graph(saver).invoke(chat_turn(0), thread_config("e"))
        leaf = write_duration_leaf(inner, "e")
        assert saver._backend is not None
        stats, calls = saver._backend.stats, []

        def second_fails(thread_id: Any) -> Any:
            calls.append(thread_id)
            if len(calls) == 2:
                raise OSError("statement timeout")
            return stats(thread_id)

        saver._backend.stats = second_fails  # type: ignore[method-assign]
        report = saver.enforce_thread_retention("e")
    assert list(report.deleted) == [("", leaf)]
    assert report.after is None
