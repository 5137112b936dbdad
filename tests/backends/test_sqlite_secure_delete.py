"""SQLite deletions follow the connection's `PRAGMA secure_delete`, which the library
never changes: where the app (or its SQLite build, as Debian's) turns it on, a
history pass leaves no byte of a deleted checkpoint in the file, and where it is
off the pass does not turn it on. The setting costs the passes that delete long
conversations (README, *Bounding growth*); it is the app's to choose, since
turning it off leaves deleted state readable in free pages until they are reused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from retaining_saver import RetainingSaver, RetentionPolicy
from retaining_saver.testing.graphs import thread

RUNS = 12
KEEP = 2
POLICY = RetentionPolicy(history_keep_runs=KEEP, history_min_age=timedelta(0))


class _Noted(TypedDict, total=False):
    turn: int
    note: str


def _marker(turn: int) -> str:
    """Text found nowhere but in the state of the runs that carry `turn`."""
    return f"secret-{turn:04d}-" + "q" * 64


def _note(state: _Noted) -> _Noted:
    return {"note": _marker(state["turn"])}


def _graph(saver: RetainingSaver) -> Any:
    graph = StateGraph(_Noted)
    graph.add_node("note", _note)
    graph.add_edge(START, "note")
    graph.add_edge("note", END)
    return graph.compile(checkpointer=saver)


def _secure_delete(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA secure_delete").fetchone()[0])


def _run_bounded(conn: sqlite3.Connection) -> RetainingSaver:
    """`RUNS` runs of the graph through a wrapper that keeps `KEEP` runs of history."""
    inner = SqliteSaver(conn)
    inner.setup()
    saver = RetainingSaver(inner, retention=POLICY)
    app = _graph(saver)
    for turn in range(RUNS):
        app.invoke({"turn": turn}, thread("t"))
    assert saver.counters.history_reclaimed > 0
    return saver


def _markers(snapshots: Iterable[CheckpointTuple]) -> set[int]:
    """The turns whose marker a checkpoint or pending write of `snapshots` holds."""
    held = set()
    for snapshot in snapshots:
        if "note" in snapshot.checkpoint["channel_values"]:
            held.add(int(snapshot.checkpoint["channel_values"]["note"][7:11]))
        held |= {int(v[7:11]) for *_, v in snapshot.pending_writes or () if isinstance(v, str)}
    return held


def _assert_only_kept_in_file(path: str, kept: set[int]) -> None:
    """Every kept marker is in the file (the scan can find them), no other one is."""
    gone = set(range(RUNS)) - kept
    assert kept and gone
    stored = Path(path).read_bytes()
    assert all(_marker(t).encode() in stored for t in kept)
    assert [t for t in sorted(gone) if _marker(t).encode() in stored] == []


def test_with_secure_delete_on_no_deleted_checkpoint_is_left_in_the_file(
    sqlite_conn: sqlite3.Connection, sqlite_path: str
) -> None:
    sqlite_conn.execute("PRAGMA secure_delete = 1")
    saver = _run_bounded(sqlite_conn)
    assert _secure_delete(sqlite_conn) == 1
    kept = _markers(saver.list(thread("t")))
    # Old page images live in the WAL until it is checkpointed into the file.
    sqlite_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _assert_only_kept_in_file(sqlite_path, kept)


async def test_async_passes_with_secure_delete_on_leave_no_deleted_checkpoint(
    sqlite_path: str,
) -> None:
    async with AsyncSqliteSaver.from_conn_string(sqlite_path) as inner:
        await inner.setup()
        await inner.conn.execute("PRAGMA secure_delete = 1")
        saver = RetainingSaver(inner, retention=POLICY)
        app = _graph(saver)
        for turn in range(RUNS):
            await app.ainvoke({"turn": turn}, thread("t"))
        await saver.asettle_history()
        assert saver.counters.history_reclaimed > 0
        kept = _markers([s async for s in saver.alist(thread("t"))])
        setting = await (await inner.conn.execute("PRAGMA secure_delete")).fetchone()
        assert setting is not None and setting[0] == 1
        await inner.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _assert_only_kept_in_file(sqlite_path, kept)


@pytest.mark.parametrize(("setting", "reads"), [("0", 0), ("1", 1), ("FAST", 2)])
def test_a_pass_leaves_the_connection_secure_delete_as_it_found_it(
    sqlite_conn: sqlite3.Connection, setting: str, reads: int
) -> None:
    sqlite_conn.execute(f"PRAGMA secure_delete = {setting}")
    _run_bounded(sqlite_conn)
    assert _secure_delete(sqlite_conn) == reads
