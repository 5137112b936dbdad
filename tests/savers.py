"""Open a real bare saver of each kind, sync or async, for parametrized tests."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

KINDS = ("memory", "sqlite", "postgres")


def _target(kind: str, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return str(request.getfixturevalue("sqlite_path"))
    if kind == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return ""


@contextmanager
def open_sync(kind: str, request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver[Any]]:
    """A fresh SqliteSaver (real file), PostgresSaver (fresh database) or InMemorySaver."""
    target = _target(kind, request)
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(target, check_same_thread=False)
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async(
    kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async twin of `open_sync`: InMemorySaver, AsyncSqliteSaver, AsyncPostgresSaver."""
    target = _target(kind, request)
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(target) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(target) as saver:
            await saver.setup()
            yield saver
