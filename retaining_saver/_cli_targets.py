"""What the command line points at, and how it opens it.

A target is a SQLite file or a Postgres database. `open_store` opens it
read-only unless the command changes the store, checks that it holds the
LangGraph tables, and never runs the saver's `setup()`: no table is created,
no column migrated, no journal mode switched, from a shell.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from retaining_saver._saver import RetainingSaver

StoreKind = Literal["sqlite", "postgres"]

SQLITE_TABLES = ("checkpoints", "writes")
POSTGRES_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_SCHEME = "sqlite:///"


class CliError(Exception):
    """A failure the command line reports in one line; `exit_code` is its status."""

    exit_code = 1


class UsageError(CliError):
    """The command line itself is wrong: a bad option, number or target."""

    exit_code = 2


@dataclass(frozen=True)
class Target:
    """A store to open: a SQLite file path or a Postgres DSN."""

    kind: StoreKind
    location: str


@dataclass(frozen=True)
class Store:
    """An opened target: the saver over it, and the raw SQLite connection if any."""

    saver: RetainingSaver
    sqlite: sqlite3.Connection | None = None


def resolve_target(
    positional: str | None, url: str | None, sqlite: str | None, postgres: str | None
) -> Target:
    """The one target given as TARGET, `--target`, `--sqlite` or `--postgres`.

    Raises:
        UsageError: If none or several are given, or a URL is not one we open.
    """
    given = [v for v in (positional, url, sqlite, postgres) if v is not None]
    if len(given) != 1:
        raise UsageError(
            "give exactly one store: TARGET, --target URL, --sqlite PATH or --postgres DSN"
        )
    if sqlite is not None:
        return Target("sqlite", _sqlite_path(sqlite))
    if postgres is not None:
        return Target("postgres", _checked_dsn(postgres))
    return _target_of_url(given[0])


def _target_of_url(url: str) -> Target:
    if url.startswith(_POSTGRES_SCHEMES):
        return Target("postgres", _checked_dsn(url))
    if url.startswith(_SQLITE_SCHEME):
        return Target("sqlite", _sqlite_path(url.removeprefix(_SQLITE_SCHEME)))
    raise UsageError(
        f"cannot tell what store {url!r} is: use sqlite:///PATH, postgresql://... "
        "or postgres://..., or --sqlite PATH / --postgres DSN"
    )


def _sqlite_path(path: str) -> str:
    # ":memory:" (or an empty path) would open a new, empty database: nothing to inspect.
    if path in ("", ":memory:") or path.startswith("file::memory:"):
        raise UsageError("an in-memory SQLite database holds no checkpoints: give a file path")
    return path


def _checked_dsn(dsn: str) -> str:
    """`dsn` if libpq can parse it; checked before connecting, so a typo is a usage error."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as error:
        raise UsageError(f"bad Postgres DSN: {error}") from error
    return dsn


@contextmanager
def open_store(target: Target, *, writable: bool) -> Iterator[Store]:
    """The target, opened for reading only unless `writable`, as a `RetainingSaver`.

    Raises:
        CliError: If the store cannot be opened or holds no LangGraph tables.
    """
    if target.kind == "sqlite":
        with _sqlite_store(target.location, writable) as store:
            yield store
    else:
        with _postgres_store(target.location, writable) as store:
            yield store


@contextmanager
def _sqlite_store(path: str, writable: bool) -> Iterator[Store]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn, unchanged = _connect_sqlite(path, writable)
    try:
        write_columns = _sqlite_write_columns(conn, path)
        inner = SqliteSaver(conn)
        # The tables are there (checked above); setup() would switch the journal
        # mode and migrate `writes`, which is the application's business.
        inner.is_setup = True
        inner._has_task_path = "task_path" in write_columns
        yield Store(RetainingSaver(inner, admission="off", strict=True), conn)
    finally:
        conn.close()
    if unchanged is not None and _file_state(path) != unchanged:
        raise CliError(
            f"{path} changed while it was read (an application checkpointed it): run again"
        )


def _connect_sqlite(path: str, writable: bool) -> tuple[sqlite3.Connection, FileState | None]:
    """A connection that can neither create the file nor, unless `writable`, change it.

    A reader of a WAL-mode database creates `-wal` and `-shm` files beside it,
    and leaves them, unless it opens the file as immutable. That is right only
    while no writer has the database open, which a WAL-mode writer shows by its
    `-wal` file: with none there, the file is opened immutable and its size and
    time are compared afterwards (a writer that started meanwhile and wrote to
    the main file fails the command); with one there, as a plain reader.

    Returns:
        The connection, and the file's state to compare afterwards (None where
        SQLite's locking guards the reads).
    """
    if not os.path.exists(path):
        raise CliError(f"no such SQLite file: {path}")
    if not os.path.isfile(path):
        raise CliError(f"not a SQLite file: {path} is a directory or device")
    mode, unchanged = "rw", None
    if not writable:
        mode = "ro"
        if _wal_mode(path) and not os.path.exists(f"{path}-wal"):
            mode, unchanged = "ro&immutable=1", _file_state(path)
    uri = f"file:{quote(os.path.abspath(path))}?mode={mode}"
    try:
        return sqlite3.connect(uri, uri=True, check_same_thread=False), unchanged
    except sqlite3.Error as error:
        raise CliError(f"cannot open SQLite file {path}: {error}") from error


FileState = tuple[int, int]
"""A file's size and modification time in nanoseconds."""


def _file_state(path: str) -> FileState:
    found = os.stat(path)
    return found.st_size, found.st_mtime_ns


_SQLITE_HEADER = b"SQLite format 3\x00"


def _wal_mode(path: str) -> bool:
    """Whether the file's header says WAL mode (read and write versions 2, bytes 18-19)."""
    with open(path, "rb") as file:
        header = file.read(20)
    return header.startswith(_SQLITE_HEADER) and header[18:20] == b"\x02\x02"


def _sqlite_write_columns(conn: sqlite3.Connection, path: str) -> set[str]:
    """The columns of `writes`; raises unless the file holds both LangGraph tables."""
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        columns = {row[0] for row in conn.execute("SELECT name FROM pragma_table_info('writes')")}
    except sqlite3.DatabaseError as error:
        raise CliError(f"cannot read {path} as a SQLite database: {error}") from error
    _require_tables(SQLITE_TABLES, tables, f"{path} is not a LangGraph SQLite store")
    return columns


def _require_tables(needed: Sequence[str], present: Iterable[str], problem: str) -> None:
    found = set(present)
    missing = [name for name in needed if name not in found]
    if missing:
        tables = ", ".join(missing)
        raise CliError(f"{problem}: no {tables} table{'s' if len(missing) > 1 else ''}")


@contextmanager
def _postgres_store(dsn: str, writable: bool) -> Iterator[Store]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    try:
        # As `PostgresSaver.from_conn_string` connects.
        conn = psycopg.Connection.connect(
            dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
    except psycopg.Error as error:
        raise CliError(f"cannot connect to Postgres: {error}") from error
    with conn:
        if not writable:
            # Every transaction of this session is read-only: a write anywhere fails.
            conn.execute("SET default_transaction_read_only = on")
        rows = conn.execute(
            "SELECT name FROM unnest(%s::text[]) AS t(name) WHERE to_regclass(name) IS NOT NULL",
            (list(POSTGRES_TABLES),),
        ).fetchall()
        problem = f"database {conn.info.dbname!r} is not a LangGraph Postgres store"
        _require_tables(POSTGRES_TABLES, (row["name"] for row in rows), problem)
        saver = RetainingSaver(PostgresSaver(conn), admission="off", strict=True)
        yield Store(saver)
