"""Open a real bare saver of each kind, sync or async: the one place tests open a fresh one.

A store is where a saver keeps its rows: "" for memory (each saver is its own
store), a SQLite file, a PostgreSQL database. `store` names a fresh one for
the running test, `new_store` makes one for the length of a block, and
`open_sync_at` / `open_async_at` open a saver on a store; `open_sync` and
`open_async` do both. A test that is about a special construction (a read-only
connection, a pool, pipeline mode, a role without DELETE) makes it itself.

An InMemorySaver opened here keeps its writes in a dict whose missing entries are
made race-free (`race_free_writes`): upstream's `put_writes` can lose a parallel
task's write (`tests/backends/test_memory_write_race.py`), on the bare twin a
law test compares against as much as on the wrapped thread.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any

import pytest
from conftest import create_database, drop_database
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

KINDS = ("memory", "sqlite", "postgres")

_STORES = pytest.StashKey[dict[tuple[str, str], str]]()


class RaceFreeWrites(defaultdict[Any, Any]):
    """A defaultdict whose missing entry, made by two threads at once, is one entry.

    `defaultdict`'s own makes the value and then stores it: a thread that runs in
    between (a garbage collection running a finalizer can hand the GIL over there)
    stores its own entry and its write into it, and the first thread's store then
    replaces that entry, write and all. `setdefault` stores only if none is there.
    """

    def __missing__(self, key: Any) -> Any:
        if self.default_factory is None:
            raise KeyError(key)  # as defaultdict's own
        return self.setdefault(key, self.default_factory())


def race_free_writes(saver: InMemorySaver) -> InMemorySaver:
    """`saver`, its `writes` made a `RaceFreeWrites` (its type and methods unchanged, so
    `RetainingSaver` still recognises it)."""
    saver.writes = RaceFreeWrites(saver.writes.default_factory, saver.writes)
    return saver


@contextmanager
def new_store(kind: str, request: pytest.FixtureRequest, name: str = "") -> Iterator[str]:
    """A new, empty store of `kind` while the block runs: a new SQLite file in the
    test's tmp dir (`<name>.sqlite`, or a random name), or a new database on the
    `pg_server` (dropped on exit); "" for memory."""
    if kind == "memory":
        yield ""
    elif kind == "sqlite":
        tmp_path = request.getfixturevalue("tmp_path")
        yield str(tmp_path / f"{name or uuid.uuid4().hex}.sqlite")
    else:
        server = str(request.getfixturevalue("pg_server"))
        dsn = create_database(server)
        try:
            yield dsn
        finally:
            drop_database(server, dsn)


def store(kind: str, request: pytest.FixtureRequest, name: str = "") -> str:
    """A fresh store of `kind` for the running test: its `sqlite_path` or `pg_dsn`, or,
    for a `name`, another one (`<name>.sqlite` beside it, another database), the same
    for every call with that name and dropped after the test; "" for memory."""
    if kind == "memory":
        return ""
    if not name:
        return str(request.getfixturevalue("sqlite_path" if kind == "sqlite" else "pg_dsn"))
    made = request.node.stash.setdefault(_STORES, {})
    if (kind, name) not in made:
        stack = ExitStack()
        request.addfinalizer(stack.close)
        made[kind, name] = stack.enter_context(new_store(kind, request, name))
    return made[kind, name]


@contextmanager
def open_sync_at(kind: str, target: str) -> Iterator[BaseCheckpointSaver[Any]]:
    """An InMemorySaver, a SqliteSaver on the file `target`, or a PostgresSaver on the
    database `target` (its tables set up)."""
    if kind == "memory":
        yield race_free_writes(InMemorySaver())
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
async def open_async_at(kind: str, target: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async twin of `open_sync_at`: InMemorySaver, AsyncSqliteSaver, AsyncPostgresSaver."""
    if kind == "memory":
        yield race_free_writes(InMemorySaver())
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(target) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(target) as saver:
            await saver.setup()
            yield saver


@contextmanager
def open_sync(
    kind: str, request: pytest.FixtureRequest, name: str = ""
) -> Iterator[BaseCheckpointSaver[Any]]:
    """A fresh SqliteSaver (real file), PostgresSaver (fresh database) or InMemorySaver,
    on the test's `store(kind, request, name)`."""
    with open_sync_at(kind, store(kind, request, name)) as saver:
        yield saver


@asynccontextmanager
async def open_async(
    kind: str, request: pytest.FixtureRequest, name: str = ""
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The async twin of `open_sync`: InMemorySaver, AsyncSqliteSaver, AsyncPostgresSaver."""
    async with open_async_at(kind, store(kind, request, name)) as saver:
        yield saver
