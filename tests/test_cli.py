"""The command-line tool on a real SQLite file."""

from __future__ import annotations

import sqlite3

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from retaining_saver.cli import main
from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn


def _thread_with_leaf(path: str) -> str:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = chat_graph(saver)
    for i in range(3):
        graph.invoke(turn(i), thread("cli"))
    leaf = write_duration_leaf(saver, "cli")
    conn.close()
    assert leaf is not None
    return leaf


def _exists(path: str, checkpoint_id: str) -> bool:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT 1 FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
        ).fetchone()
    return row is not None


def test_enforce_dry_run_then_for_real(
    sqlite_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    leaf = _thread_with_leaf(sqlite_path)
    assert main(["enforce", "--sqlite", sqlite_path, "--dry-run"]) == 0
    assert "cli" in capsys.readouterr().out
    assert _exists(sqlite_path, leaf)
    assert main(["enforce", "--sqlite", sqlite_path]) == 0
    assert not _exists(sqlite_path, leaf)


def test_stats_and_compact(sqlite_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    _thread_with_leaf(sqlite_path)
    assert main(["stats", "--sqlite", sqlite_path, "--thread", "cli"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints" in out and "writes" in out
    assert main(["compact", "--sqlite", sqlite_path, "--min-free-ratio", "0"]) == 0
    assert "compaction" in capsys.readouterr().out


def test_bad_arguments_exit_2(sqlite_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    _thread_with_leaf(sqlite_path)
    assert main(["enforce", "--sqlite", sqlite_path, "--max-delete", "-1"]) == 2
    assert "max_delete_per_run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["enforce"])
    assert exited.value.code == 2
