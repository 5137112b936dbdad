"""Shared fixtures: a real SQLite file per test, a fresh PostgreSQL database per test, and
a module of `benchmarks/` for the tests of the benchmark helpers.

The server DSN comes from `RETAINING_SAVER_PG_DSN` (default
`postgresql://postgres@127.0.0.1:5432/test`). Outside CI an unreachable
server skips the Postgres tests with one reason; with `CI=true` it fails them.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def server_dsn() -> str:
    return os.environ.get("RETAINING_SAVER_PG_DSN", DEFAULT_PG_DSN)


def _with_database(dsn: str, database: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    params["dbname"] = database
    return make_conninfo(**params)


def _unreachable_reason() -> str | None:
    try:
        import psycopg

        with psycopg.connect(server_dsn(), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {server_dsn()} is unreachable: {exc}"
    return None


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The server DSN; skips (or fails in CI) when no server answers."""
    reason = _unreachable_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + " (CI=true: Postgres tests must run)")
        pytest.skip(reason)
    return server_dsn()


def create_database(server: str) -> str:
    """Create an empty database on `server` and return its DSN."""
    import psycopg

    name = f"retaining_saver_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_database(server, name)


def drop_database(server: str, dsn: str) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A DSN to a database created for this test alone, dropped afterwards."""
    dsn = create_database(pg_server)
    yield dsn
    drop_database(pg_server, dsn)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    """A path for a real SQLite file in this test's temp dir."""
    return str(tmp_path / "checkpoints.sqlite")


@pytest.fixture
def sqlite_conn(sqlite_path: str) -> Iterator[sqlite3.Connection]:
    """A connection to `sqlite_path`, usable from any thread (as the savers need it),
    closed after the test."""
    conn = sqlite3.connect(sqlite_path, check_same_thread=False)
    try:
        yield conn
    finally:
        conn.close()


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench_module(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import a module of `benchmarks/` (no package: its scripts import each other from
    their own directory) by name, with that directory on the path for the test alone."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
