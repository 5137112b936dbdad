"""What the tests of SQLite's remembered rows share (`_sqlite_lineage`): a counter of the
rows a backend decodes, a policy whose passes read a thread and delete nothing, and
the chat they load."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from retaining_saver import RetentionPolicy
from retaining_saver._rules import CheckpointNode
from retaining_saver.backends.sqlite import SqliteBackend
from retaining_saver.testing.graphs import chat_graph, thread, turn

EVERY_RUN_KEPT = RetentionPolicy(history_keep_runs=1000, history_min_age=timedelta(0))
"""A policy whose passes read the thread and delete nothing in these tests."""


class Decodes:
    """Counts the rows a backend decodes into nodes."""

    def __init__(self, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        decode = backend._node

        def counted(row: Any, write_count: int) -> CheckpointNode:
            self.count += 1
            return decode(row, write_count)

        monkeypatch.setattr(backend, "_node", counted)


def chat(saver: Any, runs: int, thread_id: str = "t") -> Any:
    """The chat graph on `saver`, after `runs` turns on the thread."""
    graph = chat_graph(saver)
    for i in range(runs):
        graph.invoke(turn(i), thread(thread_id))
    return graph
