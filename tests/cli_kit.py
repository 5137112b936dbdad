"""Running the command line as an operator does, and the stores it runs on (tests/engine).

Each store is made by running a real graph, then a duration leaf stamped on
it, so there is exactly one checkpoint a default pass may delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from savers import open_sync, open_sync_at

from retaining_saver.testing import write_duration_leaf
from retaining_saver.testing.graphs import chat_graph, thread, turn

CLI = (sys.executable, "-m", "retaining_saver.cli")
PASSWORD = "hunter2-Xq9"
PARENT_INDEX = "retaining_saver_checkpoints_parent_idx"


@dataclass(frozen=True)
class Ran:
    """One finished run of the command line."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error_line(self) -> str:
        """The one stderr line an error prints; fails on anything more."""
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


def cli(*args: str, program: tuple[str, ...] = CLI, cwd: Path | None = None) -> Ran:
    done = subprocess.run(
        [*program, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


# Stores


@dataclass(frozen=True)
class SqliteStore:
    """A SQLite file holding thread "cli" and the id of its one deletable leaf."""

    path: Path
    leaf: str

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"


def run_graph(saver: Any, thread_id: str = "cli") -> str:
    graph = chat_graph(saver)
    for i in range(3):
        graph.invoke(turn(i), thread(thread_id))
    leaf = write_duration_leaf(saver, thread_id)
    assert leaf is not None
    return leaf


def make_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    """One store made by a real graph run; each test gets its own copy."""
    path = tmp_path_factory.mktemp("made") / "checkpoints.sqlite"
    with open_sync_at("sqlite", str(path)) as saver:
        leaf = run_graph(saver)
    return SqliteStore(path, leaf)


def copy_store(made_store: SqliteStore, tmp_path: Path) -> SqliteStore:
    """A copy of the made store, in WAL mode as SqliteSaver leaves it; the name needs quoting."""
    path = tmp_path / "store #1 (copy).sqlite"
    shutil.copy(made_store.path, path)
    return SqliteStore(path, made_store.leaf)


def read(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def ids(path: Path, thread_id: str = "cli") -> list[str]:
    sql = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY 1"
    return [r[0] for r in read(path, sql, thread_id)]


def snapshot(path: Path) -> tuple[str, int, list[str]]:
    """The file's hash and mtime, and every name in its directory (no -wal/-shm appears)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


def rollback_journal(path: Path) -> None:
    """Leave WAL mode: setup() would switch back, and a reader leaves no -wal/-shm files."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


@dataclass(frozen=True)
class PostgresStore:
    """A Postgres database holding thread "cli", with its leaf and a newest migration unrun."""

    dsn: str
    url: str
    leaf: str
    unrun_migration: int


def pg_rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def pg_url(dsn: str) -> str:
    """`dsn` as a postgresql:// URL, with a password the trust-auth server never asks for."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    host, port = p.get("host", "127.0.0.1"), p.get("port", "5432")
    return f"postgresql://{p.get('user', 'postgres')}:{PASSWORD}@{host}:{port}/{p['dbname']}"


FORGET_NEWEST_MIGRATION_SQL = """
DELETE FROM checkpoint_migrations WHERE v = (SELECT max(v) FROM checkpoint_migrations) RETURNING v
"""


def make_pg_store(pg_dsn: str, request: pytest.FixtureRequest) -> PostgresStore:
    with open_sync("postgres", request) as saver:
        leaf = run_graph(saver)
    # With its newest migration unrecorded, setup() would run it again and record it.
    ((newest,),) = pg_rows(pg_dsn, FORGET_NEWEST_MIGRATION_SQL)
    return PostgresStore(pg_dsn, pg_url(pg_dsn), leaf, newest)


def pg_ids(dsn: str) -> list[str]:
    return [r[0] for r in pg_rows(dsn, "SELECT checkpoint_id FROM checkpoints ORDER BY 1")]


def ours(dsn: str) -> list[str]:
    """Every relation retaining-saver created: its index and its tables."""
    sql = "SELECT relname FROM pg_class WHERE relname LIKE %s ORDER BY 1"
    return [r[0] for r in pg_rows(dsn, sql, "retaining\\_saver\\_%")]


# Fixtures: a test module takes them as `made_store, store, pg_store = FIXTURES`.


@pytest.fixture(scope="module")
def made_store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    """One store made by a real graph run; each test gets its own copy."""
    return make_store(tmp_path_factory)


@pytest.fixture
def store(made_store: SqliteStore, tmp_path: Path) -> SqliteStore:
    """A copy of the made store, in WAL mode as SqliteSaver leaves it; the name needs quoting."""
    return copy_store(made_store, tmp_path)


@pytest.fixture
def pg_store(pg_dsn: str, request: pytest.FixtureRequest) -> PostgresStore:
    """A Postgres database holding thread "cli", its newest migration unrecorded."""
    return make_pg_store(pg_dsn, request)


FIXTURES = (made_store, store, pg_store)
