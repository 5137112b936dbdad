"""A read through the wrapper is a read: on SQLite it never takes the write lock.

Under WAL a bare read never waits for a writer. While another connection holds
the write lock (another worker's transaction, a long engine pass, a VACUUM),
every read path of the wrapper must answer as the bare read does: the unpinned
read of a leaf-shaped head (with its "still there?" probe), an explicit
admission's head lookup, statistics, and an engine dry run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from savers import open_async, open_sync, open_sync_at

from retaining_saver import RetainingSaver
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn

THREAD = "reads"


@contextmanager
def _write_lock_held(path: str) -> Iterator[None]:
    """Another connection holding SQLite's write lock for the duration."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def _stamped_store(path: str) -> str:
    with open_sync_at("sqlite", path) as saver:
        graph = chat_graph(saver)
        graph.invoke(turn(0), thread(THREAD))
        leaf = write_duration_leaf(saver, THREAD)
    assert leaf is not None
    return leaf


def _reads(saver: RetainingSaver) -> dict[str, Any]:
    """Every read path, each answered while the write lock is held elsewhere."""
    graph = chat_graph(saver)
    return {
        "get_state": graph.get_state(thread(THREAD)).config["configurable"]["checkpoint_id"],
        "get_tuple": saver.get_tuple(thread(THREAD)) is not None,
        "admit": saver.admit(THREAD).head_id,
        "stats": saver.storage_stats(THREAD).rows,
        "dry_run": len(saver.enforce_thread_retention(THREAD, dry_run=True).deleted),
        # A probe that waited for the lock would fail, and fall back silently but counted.
        "fallbacks": saver.counters.fallbacks,
    }


def test_sync_reads_answer_while_another_connection_writes(sqlite_path: str) -> None:
    leaf = _stamped_store(sqlite_path)
    # A short busy timeout turns any wait for the write lock into an error at once.
    conn = sqlite3.connect(sqlite_path, timeout=0.05, check_same_thread=False)
    try:
        saver = RetainingSaver(SqliteSaver(conn), admission="explicit")
        saver.setup()
        with _write_lock_held(sqlite_path):
            answers = _reads(saver)
    finally:
        conn.close()
    assert answers["get_state"] == leaf
    assert answers["admit"] == leaf  # the take itself could not have the lock: nothing went
    assert answers["dry_run"] == 1
    assert answers["stats"] > 0
    assert answers["fallbacks"] == {}


async def test_async_reads_answer_while_another_connection_writes(
    sqlite_path: str, request: pytest.FixtureRequest
) -> None:
    leaf = _stamped_store(sqlite_path)
    async with open_async("sqlite", request) as inner:
        await inner.setup()  # type: ignore[attr-defined]
        await inner.conn.execute("PRAGMA busy_timeout = 50")
        saver = RetainingSaver(inner, admission="explicit")
        graph = chat_graph(saver)
        with _write_lock_held(sqlite_path):
            state = await graph.aget_state(thread(THREAD))
            result = await saver.aadmit(THREAD)
            stats = await saver.astorage_stats(THREAD)
            report = await saver.aenforce_thread_retention(THREAD, dry_run=True)
    assert saver.counters.fallbacks == {}
    assert state.config["configurable"]["checkpoint_id"] == leaf
    assert result.head_id == leaf
    assert stats.rows > 0
    assert len(report.deleted) == 1


@pytest.mark.parametrize("admission", ["auto", "explicit"])
def test_a_failing_probe_does_not_fail_the_read(
    sqlite_path: str, admission: str, request: pytest.FixtureRequest
) -> None:
    """The "still there?" probe is cleanup's business: if it fails, the read stands."""
    leaf = _stamped_store(sqlite_path)
    with open_sync("sqlite", request) as inner:
        saver = RetainingSaver(inner, admission=admission)  # type: ignore[arg-type]
        assert saver._backend is not None

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

        saver._backend.load_nodes = broken  # type: ignore[method-assign]
        found = saver.get_tuple(thread(THREAD))
    assert found is not None and found.checkpoint["id"] == leaf
    assert saver.counters.fallbacks == {"the still-there probe": 1}
